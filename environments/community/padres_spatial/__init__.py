"""Spatial reasoning in a pybullet scene: move one object next to another (see ``spatial_env.py``)."""
