"""Jokes in a comedian's style and format, scored by a judge on a six-part rubric (see ``humor_env.py``)."""
