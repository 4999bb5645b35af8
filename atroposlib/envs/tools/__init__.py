"""Tools that multi-turn environments let the model call, and the default registry of them.

* :class:`Tool` - the protocol (``name``, ``description``, JSON-schema ``parameters``, ``async call``);
* :data:`registry` - the default :class:`ToolRegistry`: ``calculator`` (:class:`CalculatorTool`) and
  ``python`` (:class:`PythonTool`, sandboxed); register your own with ``registry.register(name, factory)``;
* :func:`run_tool_calls` - run the Hermes ``<tool_call>`` blocks of a reply, errors reported to the model.
"""

from atroposlib.envs.tools.base import Tool, ToolError, ToolRegistry, argument_errors, tool_schema
from atroposlib.envs.tools.calculator import CalculatorTool, evaluate_expression
from atroposlib.envs.tools.calls import ToolCallRecord, ToolTurn, run_tool_calls
from atroposlib.envs.tools.python import PythonTool

registry = ToolRegistry()
registry.register("calculator", CalculatorTool)
registry.register("python", PythonTool)

__all__ = [
    "CalculatorTool",
    "PythonTool",
    "Tool",
    "ToolCallRecord",
    "ToolError",
    "ToolRegistry",
    "ToolTurn",
    "argument_errors",
    "evaluate_expression",
    "registry",
    "run_tool_calls",
    "tool_schema",
]
