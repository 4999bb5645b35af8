"""The CPU demo: a tiny model learns arithmetic end to end (``python -m example_trainer.demo``), with its warm
start, held-out evaluation and the GPU device check."""
