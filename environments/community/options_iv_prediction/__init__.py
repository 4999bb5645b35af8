"""Implied volatility of an option from its price and terms (see ``options_iv_prediction.py``)."""
