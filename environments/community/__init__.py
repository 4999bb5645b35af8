"""The community collection: the original's community environments under their own names (see README.md)."""
