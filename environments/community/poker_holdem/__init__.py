"""Six-seat no-limit hold'em decisions rewarded for matching winning players' actions (see ``poker_env.py``)."""
