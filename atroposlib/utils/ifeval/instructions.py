"""The IFEval verifiable instructions: one checker per instruction id, with typed arguments.

:data:`INSTRUCTIONS` maps every IFEval instruction id (``"keywords:frequency"`` ...) to an
:class:`Instruction`: a pydantic model of its arguments (named as in the IFEval data, e.g.
``num_words`` and ``relation``) and a check ``(response, arguments) -> bool``. Counted instructions take a
:data:`Relation`: IFEval uses ``"less than"`` (count < N) and ``"at least"`` (count >= N); ``"at most"``,
``"exactly"`` and ``"around"`` (within 10% of N, at least 1) are accepted too, for rows converted from
RLVR-IFeval.

Checks see the response as given; an empty response follows no instruction (the grading in
:mod:`atroposlib.utils.ifeval.grading` enforces that). Keyword searches ignore case; a language the
detector cannot determine counts as not followed; a constrained response must contain exactly one of
the options (several would be a hedge).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Optional, TypeVar, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atroposlib.utils.ifeval.text import capital_words, count_sentences, count_words, detect_language

Relation = Literal["less than", "at least", "at most", "exactly", "around"]


def compare(count: int, relation: Relation, target: int) -> bool:
    """Whether ``count`` stands in ``relation`` to ``target`` (see the module docstring)."""
    if relation == "less than":
        return count < target
    if relation == "at least":
        return count >= target
    if relation == "at most":
        return count <= target
    if relation == "exactly":
        return count == target
    return abs(count - target) <= max(1, round(0.1 * target))


class Arguments(BaseModel):
    """Arguments of an instruction; keys the instruction does not use are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class NoArguments(Arguments):
    pass


class CapitalWordFrequency(Arguments):
    capital_frequency: int = Field(ge=0)
    capital_relation: Relation


class RepeatPrompt(Arguments):
    prompt_to_repeat: str


class NumberPlaceholders(Arguments):
    num_placeholders: int = Field(ge=0)


class Postscript(Arguments):
    postscript_marker: str = Field(min_length=1)


DEFAULT_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


class ConstrainedResponse(Arguments):
    options: tuple[str, ...] = DEFAULT_OPTIONS

    @field_validator("options", mode="before")
    @classmethod
    def _options_from_text(cls, value: Any) -> Any:
        # Converted rows may carry the options as one string: a Python tuple/list literal or a comma list.
        if isinstance(value, str):
            try:
                parsed = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                parsed = [part.strip() for part in value.split(",") if part.strip()]
            return parsed if isinstance(parsed, (list, tuple)) else [str(parsed)]
        return value


class MultipleSections(Arguments):
    section_spliter: str = Field(min_length=1)
    num_sections: int = Field(ge=0)


class NumberBullets(Arguments):
    num_bullets: int = Field(ge=0)


class NumberHighlights(Arguments):
    num_highlights: int = Field(ge=0)


class KeywordsExist(Arguments):
    keywords: tuple[str, ...] = Field(min_length=1)


class ForbiddenWords(Arguments):
    forbidden_words: tuple[str, ...] = Field(min_length=1)


class KeywordFrequency(Arguments):
    keyword: str = Field(min_length=1)
    frequency: int = Field(ge=0)
    relation: Relation


class LetterFrequency(Arguments):
    letter: str = Field(min_length=1, max_length=1)
    let_frequency: int = Field(ge=0)
    let_relation: Relation


class ResponseLanguage(Arguments):
    language: str = Field(min_length=2)


class NthParagraphFirstWord(Arguments):
    num_paragraphs: int = Field(ge=1)
    nth_paragraph: int = Field(ge=1)
    first_word: str = Field(min_length=1)


class NumberParagraphs(Arguments):
    num_paragraphs: int = Field(ge=0)


class NumberSentences(Arguments):
    num_sentences: int = Field(ge=0)
    relation: Relation


class NumberWords(Arguments):
    num_words: int = Field(ge=0)
    relation: Relation


class EndChecker(Arguments):
    end_phrase: str = Field(min_length=1)


@dataclass(frozen=True)
class Instruction:
    """An instruction id, the model of its arguments and its check."""

    id: str
    arguments: type[Arguments]
    check: Callable[[str, Any], bool]


#: Every instruction, by id, in the order the checks below are defined.
INSTRUCTIONS: dict[str, Instruction] = {}

_Check = TypeVar("_Check", bound=Callable[[str, Any], bool])


def _checks(instruction_id: str) -> Callable[[_Check], _Check]:
    """Register the decorated check as ``instruction_id`` in :data:`INSTRUCTIONS`; the model of its
    arguments is the annotation of its ``args`` parameter."""

    def register(check: _Check) -> _Check:
        if instruction_id in INSTRUCTIONS:
            raise ValueError(f"instruction {instruction_id!r} is registered twice")
        arguments = get_type_hints(check)["args"]
        INSTRUCTIONS[instruction_id] = Instruction(instruction_id, arguments, check)
        return check

    return register


# -- change_case ----------------------------------------------------------------------------------------
@_checks("change_case:capital_word_frequency")
def capital_word_frequency(response: str, args: CapitalWordFrequency) -> bool:
    return compare(len(capital_words(response)), args.capital_relation, args.capital_frequency)


@_checks("change_case:english_capital")
def english_capital(response: str, args: NoArguments) -> bool:
    return response.isupper() and detect_language(response) == "en"


@_checks("change_case:english_lowercase")
def english_lowercase(response: str, args: NoArguments) -> bool:
    return response.islower() and detect_language(response) == "en"


# -- combination ----------------------------------------------------------------------------------------
@_checks("combination:repeat_prompt")
def repeat_prompt(response: str, args: RepeatPrompt) -> bool:
    return response.strip().lower().startswith(args.prompt_to_repeat.strip().lower())


@_checks("combination:two_responses")
def two_responses(response: str, args: NoArguments) -> bool:
    parts = response.split("******")
    answers = []
    for index, part in enumerate(parts):
        if part.strip():
            answers.append(part.strip())
        elif 0 < index < len(parts) - 1:
            return False  # an empty answer between two separators
    return len(answers) == 2 and answers[0] != answers[1]


# -- detectable_content ---------------------------------------------------------------------------------
@_checks("detectable_content:number_placeholders")
def number_placeholders(response: str, args: NumberPlaceholders) -> bool:
    return len(re.findall(r"\[.*?\]", response)) >= args.num_placeholders


@_checks("detectable_content:postscript")
def postscript(response: str, args: Postscript) -> bool:
    # Spaces may follow each period of the marker ("P. S." for "P.S."); the marker may appear anywhere.
    pieces = args.postscript_marker.strip().lower().split(".")
    pattern = r"\.\s?".join(re.escape(piece.strip()) for piece in pieces)
    return re.search(pattern, response.lower()) is not None


# -- detectable_format ----------------------------------------------------------------------------------
@_checks("detectable_format:constrained_response")
def constrained_response(response: str, args: ConstrainedResponse) -> bool:
    # Exactly one of the options: a reply listing several ("My answer is yes. My answer is no.") hedges.
    text = response.strip()
    present = {option.strip() for option in args.options if option.strip() and option.strip() in text}
    return len(present) == 1


@_checks("detectable_format:json_format")
def json_format(response: str, args: NoArguments) -> bool:
    text = response.strip()
    for fence in ("```json", "```Json", "```JSON", "```"):
        if text.startswith(fence):
            text = text[len(fence) :]
            break
    text = text.removesuffix("```").strip()
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@_checks("detectable_format:multiple_sections")
def multiple_sections(response: str, args: MultipleSections) -> bool:
    pattern = r"\s?" + re.escape(args.section_spliter) + r"\s?\d+\s?"
    return len(re.split(pattern, response)) - 1 >= args.num_sections


@_checks("detectable_format:number_bullet_lists")
def number_bullet_lists(response: str, args: NumberBullets) -> bool:
    stars = re.findall(r"^\s*\*[^*].*$", response, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", response, flags=re.MULTILINE)
    return len(stars) + len(dashes) == args.num_bullets


@_checks("detectable_format:number_highlighted_sections")
def number_highlighted_sections(response: str, args: NumberHighlights) -> bool:
    single = re.findall(r"\*[^\n*]*\*", response)
    double = re.findall(r"\*\*[^\n*]*\*\*", response)
    found = sum(1 for span in single + double if span.strip("*").strip())
    return found >= args.num_highlights


@_checks("detectable_format:title")
def title(response: str, args: NoArguments) -> bool:
    return any(span[2:-2].strip() for span in re.findall(r"<<[^\n]+>>", response))


# -- keywords -------------------------------------------------------------------------------------------
@_checks("keywords:existence")
def keywords_existence(response: str, args: KeywordsExist) -> bool:
    return all(re.search(re.escape(keyword), response, flags=re.IGNORECASE) for keyword in args.keywords)


@_checks("keywords:forbidden_words")
def forbidden_words(response: str, args: ForbiddenWords) -> bool:
    return not any(
        re.search(r"\b" + re.escape(word) + r"\b", response, flags=re.IGNORECASE)
        for word in args.forbidden_words
    )


@_checks("keywords:frequency")
def keyword_frequency(response: str, args: KeywordFrequency) -> bool:
    count = len(re.findall(re.escape(args.keyword), response, flags=re.IGNORECASE))
    return compare(count, args.relation, args.frequency)


@_checks("keywords:letter_frequency")
def letter_frequency(response: str, args: LetterFrequency) -> bool:
    return compare(response.lower().count(args.letter.lower()), args.let_relation, args.let_frequency)


# -- language -------------------------------------------------------------------------------------------
@_checks("language:response_language")
def response_language(response: str, args: ResponseLanguage) -> bool:
    return detect_language(response) == args.language


# -- length_constraints ---------------------------------------------------------------------------------
def _first_word(paragraph: str) -> str:
    word = paragraph.split()[0].lstrip("'\"")
    return re.split(r"[.,?!'\"]", word, maxsplit=1)[0].lower()


@_checks("length_constraints:nth_paragraph_first_word")
def nth_paragraph_first_word(response: str, args: NthParagraphFirstWord) -> bool:
    paragraphs = re.split(r"\n\n", response)
    count = sum(1 for paragraph in paragraphs if paragraph.strip())
    if args.nth_paragraph > count or args.nth_paragraph > len(paragraphs):
        return False
    paragraph = paragraphs[args.nth_paragraph - 1].strip()
    if not paragraph:
        return False
    return count == args.num_paragraphs and _first_word(paragraph) == args.first_word.strip().lower()


# "***" is IFEval's paragraph divider; "* * *" is the one RLVR-IFeval prompts ask for.
_DIVIDER = re.compile(r"\s?\*[ ]?\*[ ]?\*\s?")


@_checks("length_constraints:number_paragraphs")
def number_paragraphs(response: str, args: NumberParagraphs) -> bool:
    paragraphs = _DIVIDER.split(response)
    count = len(paragraphs)
    for index, paragraph in enumerate(paragraphs):
        if not paragraph.strip():
            if index in (0, len(paragraphs) - 1):
                count -= 1
            else:
                return False
    return count == args.num_paragraphs


@_checks("length_constraints:number_sentences")
def number_sentences(response: str, args: NumberSentences) -> bool:
    return compare(count_sentences(response), args.relation, args.num_sentences)


@_checks("length_constraints:number_words")
def number_words(response: str, args: NumberWords) -> bool:
    return compare(count_words(response), args.relation, args.num_words)


# -- punctuation and startend ---------------------------------------------------------------------------
@_checks("punctuation:no_comma")
def no_comma(response: str, args: NoArguments) -> bool:
    return "," not in response


@_checks("startend:end_checker")
def end_checker(response: str, args: EndChecker) -> bool:
    return response.strip().lower().endswith(args.end_phrase.strip().lower())


@_checks("startend:quotation")
def quotation(response: str, args: NoArguments) -> bool:
    text = response.strip()
    return len(text) > 1 and text[0] == '"' and text[-1] == '"'


def instruction(instruction_id: str) -> Optional[Instruction]:
    """The registered instruction ``instruction_id``, or None when there is none."""
    return INSTRUCTIONS.get(instruction_id)
