"""InfiniteMath: procedurally generated math (``mathgenerator``) with a difficulty curriculum (see
``infinimath_env.py``)."""
