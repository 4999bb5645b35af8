"""Helpers for testing environments, trainers and tools offline.

* :mod:`atroposlib.testing.api_process`: start a real ``run-api`` process on a free loopback port.
* :mod:`atroposlib.testing.tiny_model`: build a tiny Qwen2-architecture model and byte-level BPE
  tokenizer locally (no model hub needed).
* :mod:`atroposlib.testing.scripted_server`: a scripted OpenAI-compatible inference server (its answers are
  built by :mod:`atroposlib.testing.scripted_backend`).
"""
