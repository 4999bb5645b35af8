"""Sigma detection rules in YAML for threat-hunting prompts, rewarded by similarity to the gold rule
(``jaccard_reward_env.py``) or by a judge (``llm_judge_env.py``)."""
