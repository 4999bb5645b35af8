"""Reading a KernelBench reply: the one code block that defines ``ModelNew``.

After the optional ``<think>`` block (nothing inside it counts), the answer must hold exactly one fenced
code block (tagged ``python``/``py``/``python3`` or untagged) that defines ``class ModelNew`` and parses as
Python. Several such blocks are a hedge; none, reasoning left open or a block that is not Python is a
malformed reply. Blocks in other languages (a ``cpp`` or ``cuda`` sketch) are ignored: the kernel's
source belongs inside the Python module (``torch.utils.cpp_extension.load_inline`` or Triton).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Optional

from atroposlib.utils.replies import answer_section

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_PYTHON_TAGS = ("python", "py", "python3", "")
_MODEL_NEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)


@dataclass(frozen=True)
class KernelReply:
    """The candidate source of a reply, or why there is none (``code`` is None then)."""

    code: Optional[str]
    problem: Optional[str] = None


def extract_model_new(reply: str) -> KernelReply:
    """The one ``ModelNew`` code block of ``reply`` (see the module docstring)."""
    section = answer_section(reply)
    if section is None:
        return KernelReply(None, "the <think> block is malformed")
    blocks = [body for tag, body in _FENCE.findall(section) if tag.lower() in _PYTHON_TAGS]
    candidates = [body for body in blocks if _MODEL_NEW.search(body)]
    if not candidates:
        return KernelReply(None, "no python code block defines class ModelNew")
    if len(candidates) > 1:
        return KernelReply(None, f"{len(candidates)} code blocks define ModelNew (a hedge)")
    code = candidates[0]
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return KernelReply(None, f"the ModelNew block is not valid Python (line {exc.lineno}: {exc.msg})")
    return KernelReply(code)
