"""Sanskrit verse in a requested metre, scored by its syllable weights (see ``sanskrit_poetry_env.py``)."""
