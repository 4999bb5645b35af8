"""GSM8K answers that are right and funny: a correctness gate, then a judged goofiness bonus (see
``goofy_math_server.py``)."""
