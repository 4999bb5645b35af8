"""Word Hunt: find words on a letter grid, scored against every word the board holds (see ``word_hunt_env.py``)."""
