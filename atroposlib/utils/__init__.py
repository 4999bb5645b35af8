"""Helpers shared by environments and tools: tokenisation for the trainer, advantages, message history,
tool-call parsing and small metric/IO utilities. Import the submodules directly; nothing is re-exported."""

__all__ = []
