"""T1 tool planning: multi-turn, multi-domain travel conversations planned as tool calls (see ``t1_env.py``)."""
