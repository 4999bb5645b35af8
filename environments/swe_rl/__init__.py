"""SWE-RL helpers: SEARCH/REPLACE edits and their similarity reward (used by ``swe_rl_env.py``)."""
