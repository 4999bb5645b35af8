"""RLVR-IFeval rows as IFEval instructions.

``allenai/RLVR-IFeval`` rows hold ``messages`` (the user turn carries the prompt with its constraint) and
``ground_truth``, a JSON string ``{"func_name": ..., <argument>: value or null, ...}`` naming one verifier.
:func:`rlvr_instruction` maps it to the IFEval instruction id and IFEval argument names (``N`` becomes
``num_words``, ``quantifier`` becomes ``relation`` ...). Where RLVR asks for an exact count ("the word
{word} should appear {N} times") the relation is ``"exactly"``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from atroposlib.utils.ifeval.grading import InstructionError

# func_name -> (instruction id, {RLVR argument: IFEval argument}, fixed IFEval arguments)
RLVR_FUNCTIONS: dict[str, tuple[str, dict[str, str], dict[str, Any]]] = {
    "verify_keywords": ("keywords:existence", {"keyword_list": "keywords"}, {}),
    "verify_keyword_frequency": (
        "keywords:frequency",
        {"word": "keyword", "N": "frequency"},
        {"relation": "exactly"},
    ),
    "validate_forbidden_words": ("keywords:forbidden_words", {"forbidden_words": "forbidden_words"}, {}),
    "verify_letter_frequency": (
        "keywords:letter_frequency",
        {"letter": "letter", "N": "let_frequency"},
        {"let_relation": "exactly"},
    ),
    "validate_response_language": ("language:response_language", {"language": "language"}, {}),
    "verify_paragraph_count": ("length_constraints:number_paragraphs", {"N": "num_paragraphs"}, {}),
    "validate_word_constraint": (
        "length_constraints:number_words",
        {"N": "num_words", "quantifier": "relation"},
        {},
    ),
    "verify_sentence_constraint": (
        "length_constraints:number_sentences",
        {"N": "num_sentences", "quantifier": "relation"},
        {},
    ),
    "validate_paragraphs": (
        "length_constraints:nth_paragraph_first_word",
        {"N": "num_paragraphs", "i": "nth_paragraph", "first_word": "first_word"},
        {},
    ),
    "verify_postscript": ("detectable_content:postscript", {"postscript_marker": "postscript_marker"}, {}),
    "validate_placeholders": ("detectable_content:number_placeholders", {"N": "num_placeholders"}, {}),
    "verify_bullet_points": ("detectable_format:number_bullet_lists", {"N": "num_bullets"}, {}),
    "validate_title": ("detectable_format:title", {}, {}),
    "validate_choice": ("detectable_format:constrained_response", {"options": "options"}, {}),
    "validate_highlighted_sections": (
        "detectable_format:number_highlighted_sections",
        {"N": "num_highlights"},
        {},
    ),
    "validate_sections": (
        "detectable_format:multiple_sections",
        {"N": "num_sections", "section_splitter": "section_spliter"},
        {},
    ),
    "validate_json_format": ("detectable_format:json_format", {}, {}),
    "validate_repeat_prompt": ("combination:repeat_prompt", {"original_prompt": "prompt_to_repeat"}, {}),
    "validate_two_responses": ("combination:two_responses", {}, {}),
    "validate_uppercase": ("change_case:english_capital", {}, {}),
    "validate_lowercase": ("change_case:english_lowercase", {}, {}),
    "validate_frequency_capital_words": (
        "change_case:capital_word_frequency",
        {"N": "capital_frequency", "quantifier": "capital_relation"},
        {},
    ),
    "validate_end": ("startend:end_checker", {"end_phrase": "end_phrase"}, {}),
    "validate_quotation": ("startend:quotation", {}, {}),
    "validate_no_commas": ("punctuation:no_comma", {}, {}),
}


def rlvr_instruction(ground_truth: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(instruction id, IFEval kwargs)`` of an RLVR ``ground_truth`` (JSON text or a decoded dict).

    Null arguments are left out. Raises :class:`InstructionError` when the text is not a JSON object or
    ``func_name`` is missing or unknown.
    """
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except json.JSONDecodeError as exc:
            raise InstructionError(f"ground_truth is not valid JSON ({exc.msg})") from None
    if not isinstance(ground_truth, Mapping):
        raise InstructionError("ground_truth is not a JSON object")
    func_name = ground_truth.get("func_name")
    if not func_name:
        raise InstructionError("ground_truth has no 'func_name'")
    if func_name not in RLVR_FUNCTIONS:
        raise InstructionError(f"unknown RLVR verifier {func_name!r}")
    instruction_id, renames, fixed = RLVR_FUNCTIONS[func_name]
    kwargs = {new: ground_truth[old] for old, new in renames.items() if ground_truth.get(old) is not None}
    return instruction_id, {**fixed, **kwargs}


def rlvr_prompt(messages: Any) -> str:
    """The prompt of an RLVR row: the content of its first user message.

    Raises :class:`InstructionError` when there is none.
    """
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, Mapping) and message.get("role") == "user" and message.get("content"):
                return str(message["content"])
    raise InstructionError("'messages' holds no user message with content")
