"""Helpers shared by community environments: the judge and its tallies (``policy_judge.py``) and per-reply
training shares logged to wandb (``train_shares.py``)."""
