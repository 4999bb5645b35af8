"""The prompt of a BFCL entry in the Hermes tool-calling format.

BFCL describes functions in its Gorilla schema (``"type": "dict"``, ``"float"``, ``"tuple"``, ``"any"``
...). As BFCL does for function-calling models, each function becomes an OpenAI tool
(``{"type": "function", "function": {...}}``) with JSON-schema types, ``.`` in names replaced by ``_``
(tool names may not hold dots; the checker compares with the same replacement), float parameters marked
as such in their description, and the Python-syntax hint added to each function's description.

The tools are declared in the system prompt inside ``<tools></tools>``, and the model is asked for
Hermes calls, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, as the tool-calling
environment trains it to write them. A system message of the entry itself follows ours.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Optional

from atroposlib.evals.bfcl.data import BfclItem

#: BFCL's Gorilla parameter types -> JSON-schema types (its GORILLA_TO_OPENAPI table, Python part).
GORILLA_TO_JSON_SCHEMA = {
    "integer": "integer",
    "number": "number",
    "float": "number",
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "dict": "object",
    "object": "object",
    "tuple": "array",
    "any": "string",
}
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."

DEFAULT_SYSTEM_PROMPT = (
    "You are a function calling AI model. You are given a question and the functions declared below "
    "inside <tools></tools> as JSON schemas. Based on the question, make one or more function calls to "
    'achieve the purpose. Write each call as <tool_call>{"name": "function_name", "arguments": '
    '{"argument": value}}</tool_call> with valid JSON inside the tags, one block per call; when several '
    "calls are needed, write them all. If none of the functions can be used, or the question lacks "
    "arguments a function requires, say so and make no call."
)


def tool_name(name: str) -> str:
    """A function name as the model sees it (dots replaced by underscores)."""
    return re.sub(r"\.", "_", name)


def _schema_type(kind: Any) -> str:
    return GORILLA_TO_JSON_SCHEMA.get(kind, "string") if isinstance(kind, str) else "string"


def _convert_properties(properties: dict[str, Any]) -> dict[str, Any]:
    for spec in properties.values():
        kind = spec.get("type")
        if kind == "float":
            spec["format"] = "float"
            spec["description"] = spec.get("description", "") + " This is a float type value."
        spec["type"] = _schema_type(kind)
        _convert_nested(spec)
    return properties


def _convert_nested(spec: dict[str, Any]) -> None:
    if spec["type"] not in ("array", "object"):
        return
    if isinstance(spec.get("properties"), dict):
        _convert_properties(spec["properties"])
    elif isinstance(spec.get("items"), dict):
        items = spec["items"]
        items["type"] = _schema_type(items.get("type"))
        _convert_nested(items)


def to_tool(function: dict[str, Any]) -> dict[str, Any]:
    """One BFCL function as an OpenAI tool (a converted deep copy; the entry is not changed)."""
    spec = copy.deepcopy(function)
    spec["name"] = tool_name(spec["name"])
    spec["description"] = spec.get("description", "") + PYTHON_HINT
    parameters = spec.setdefault("parameters", {})
    parameters["type"] = "object"
    parameters["properties"] = _convert_properties(parameters.get("properties", {}))
    return {"type": "function", "function": spec}


def system_prompt(item: BfclItem, instructions: Optional[str] = None) -> str:
    """The system prompt of ``item``: ``instructions`` (default :data:`DEFAULT_SYSTEM_PROMPT`) and its tools."""
    tools = "\n".join(json.dumps(to_tool(function), ensure_ascii=False) for function in item.functions)
    return f"{instructions or DEFAULT_SYSTEM_PROMPT}\n\n<tools>\n{tools}\n</tools>"


def prompt_messages(item: BfclItem, instructions: Optional[str] = None) -> list[dict[str, str]]:
    """The chat to send for ``item``: our system prompt (the entry's own system messages appended to it),
    then the entry's other messages."""
    system = system_prompt(item, instructions)
    rest = []
    for message in item.messages:
        if message["role"] == "system":
            system = f"{system}\n\n{message['content']}"
        else:
            rest.append(dict(message))
    return [{"role": "system", "content": system}, *rest]
