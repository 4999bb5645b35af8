"""Shared building blocks of the inspection and dataset tools.

``view-run``, ``view-run-multimodal``, ``atropos-sft-gen``, ``atropos-dpo-gen`` and
``inference-node-wandb-watcher`` read a live trajectory API or ``process`` JSONL files; nothing here
changes a run's queue, batches or registration unless a tool is explicitly asked to (``--reset``,
``--register``, ``--consume``).
"""
