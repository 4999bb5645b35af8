"""What a tool is, and a registry of them by name.

A tool is anything with a ``name``, a ``description``, a JSON-schema ``parameters`` object describing
its arguments, and ``async call(arguments) -> str``. :func:`tool_schema` gives the OpenAI/Hermes
function declaration shown to the model. :class:`ToolRegistry` maps names to factories so that
environments build their tools from a list of names (``--env.tools '["python", "calculator"]'``) and
users add their own with :meth:`ToolRegistry.register`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable


class ToolError(Exception):
    """A tool could not do what was asked; the message is shown to the model."""


@runtime_checkable
class Tool(Protocol):
    """A callable tool. ``parameters`` is a JSON schema (``{"type": "object", "properties": ...}``)."""

    name: str
    description: str
    parameters: dict[str, Any]

    async def call(self, arguments: dict[str, Any]) -> str:
        """Run the tool on validated ``arguments`` and return its output as text.

        Raise :class:`ToolError` (or any exception) on failure; the caller reports it to the model.
        """
        ...


def tool_schema(tool: Tool) -> dict[str, Any]:
    """The function declaration of ``tool``: ``{"type": "function", "function": {name, description,
    parameters}}``."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def argument_errors(tool: Tool, arguments: dict[str, Any]) -> list[str]:
    """Why ``arguments`` do not satisfy ``tool.parameters`` (JSON Schema 2020-12); empty when they do."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(tool.parameters)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: (list(e.absolute_path), e.message))
    messages = []
    for error in errors:
        where = "/".join(str(p) for p in error.absolute_path)
        messages.append(f"{where}: {error.message}" if where else error.message)
    return messages


ToolFactory = Callable[..., Tool]


class ToolRegistry:
    """Tool factories by name. ``create(name, **options)`` calls the factory with ``options``."""

    def __init__(self) -> None:
        self._factories: dict[str, ToolFactory] = {}

    def register(self, name: str, factory: ToolFactory, *, replace: bool = False) -> None:
        """Register ``factory`` (a tool class or a function returning a tool) under ``name``.

        Raises ValueError when ``name`` is taken, unless ``replace``.
        """
        if not name or not isinstance(name, str):
            raise ValueError("a tool name must be a non-empty string")
        if name in self._factories and not replace:
            raise ValueError(f"tool {name!r} is already registered (pass replace=True to replace it)")
        self._factories[name] = factory

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._factories)

    def create(self, name: str, **options: Any) -> Tool:
        """A new tool ``name`` built with ``options``; KeyError naming the registered tools when unknown."""
        if name not in self._factories:
            raise KeyError(f"unknown tool {name!r}; registered tools: {', '.join(self.names()) or 'none'}")
        tool = self._factories[name](**options)
        if tool.name != name:
            raise ValueError(f"the factory registered as {name!r} built a tool named {tool.name!r}")
        return tool
