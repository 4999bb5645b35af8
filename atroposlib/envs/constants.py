"""Namespaces of the environment command line and YAML files (``--env.group_size``, ``--openai.base_url``)."""

ENV_NAMESPACE = "env"
OPENAI_NAMESPACE = "openai"
SERVER_MANAGER_NAMESPACE = "server"  # kept for compatibility; no flag uses it
NAMESPACE_SEP = "."

__all__ = ["ENV_NAMESPACE", "NAMESPACE_SEP", "OPENAI_NAMESPACE", "SERVER_MANAGER_NAMESPACE"]
