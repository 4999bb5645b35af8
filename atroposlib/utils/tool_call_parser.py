"""compat: the import path of atroposlib 0.4.0's tool-call parser.

Tool calls are read in :mod:`atroposlib.utils.tool_calls`; this module re-exports its readers under
their 0.4.0 names.
"""

from atroposlib.utils.tool_calls import (
    ERROR_TOOL_NAME,
    extract_tool_call,
    extract_tool_call_blocks,
    parse_tool_call,
)

__all__ = ["ERROR_TOOL_NAME", "extract_tool_call", "extract_tool_call_blocks", "parse_tool_call"]
