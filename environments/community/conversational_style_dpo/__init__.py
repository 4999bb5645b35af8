"""Conversational style preference pairs for DPO (``conversational_style_dpo_env.py``)."""
