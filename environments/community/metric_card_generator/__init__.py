"""JSON configurations of dashboard metric cards, checked against the schema and for content (see
``metric_card_generator.py``)."""
