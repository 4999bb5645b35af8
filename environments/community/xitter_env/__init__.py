"""A social-media agent acting on a mocked feed with trending topics (see ``xitter_env.py``)."""
