"""Rubik's cube solving move by move with a scramble curriculum (see ``rubiks_cube_environment.py``)."""
