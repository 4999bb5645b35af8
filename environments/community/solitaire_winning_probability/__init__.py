"""Winning probabilities of small solitaire games, answered as formulas (see ``solitaire_server.py``)."""
