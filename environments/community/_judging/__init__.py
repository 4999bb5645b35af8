"""Judging shared by the community collection's judged environments (see ``policy_judge.py``)."""
