"""BLEUBERI: instruction following rewarded by BLEU against reference answers (see ``bleuberi_env.py``)."""
