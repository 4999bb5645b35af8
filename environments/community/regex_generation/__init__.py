"""Regular expressions from descriptions and examples, scored on the examples (see ``regex_env.py``)."""
