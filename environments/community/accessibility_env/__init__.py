"""Fixing WCAG issues in HTML snippets, checked by rules on the parsed result (see ``accessibility_env.py``)."""
