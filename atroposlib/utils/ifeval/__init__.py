"""IFEval verifiable instructions: checkers, strict and loose grading, and RLVR-IFeval conversion.

* :mod:`.instructions` - the registry of instruction ids and their checks;
* :mod:`.grading` - binding a row's instructions and grading a response;
* :mod:`.rlvr` - RLVR-IFeval ``ground_truth`` as an IFEval instruction;
* :mod:`.text` - word, sentence and language helpers.
"""

from atroposlib.utils.ifeval.grading import (
    BoundInstruction,
    Grade,
    InstructionError,
    bind_instruction,
    bind_instructions,
    grade_reply,
    grade_response,
    loose_variants,
)
from atroposlib.utils.ifeval.instructions import INSTRUCTIONS, Instruction, compare
from atroposlib.utils.ifeval.rlvr import RLVR_FUNCTIONS, rlvr_instruction, rlvr_prompt

__all__ = [
    "INSTRUCTIONS",
    "RLVR_FUNCTIONS",
    "BoundInstruction",
    "Grade",
    "Instruction",
    "InstructionError",
    "bind_instruction",
    "bind_instructions",
    "compare",
    "grade_reply",
    "grade_response",
    "loose_variants",
    "rlvr_instruction",
    "rlvr_prompt",
]
