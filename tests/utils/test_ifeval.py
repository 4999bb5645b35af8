"""The IFEval instruction checkers, strict and loose grading, and the RLVR-IFeval conversion."""

from __future__ import annotations

import json

import pytest

from atroposlib.utils.ifeval import (
    INSTRUCTIONS,
    RLVR_FUNCTIONS,
    Grade,
    InstructionError,
    bind_instruction,
    bind_instructions,
    compare,
    grade_reply,
    grade_response,
    loose_variants,
    rlvr_instruction,
    rlvr_prompt,
)
from atroposlib.utils.ifeval.text import capital_words, count_sentences, count_words, detect_language

ENGLISH = "The quick brown fox jumps over the lazy dog while the farmer watches from the old wooden gate."
GERMAN = (
    "Der schnelle braune Fuchs springt über den faulen Hund, während der Bauer vom alten Holztor zusieht."
)

# (instruction id, kwargs, a response that follows it, one that does not)
CASES = [
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "NASA and the ESA launched it.",
        "Nasa and the Esa launched it.",
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "less than"},
        "Only NASA did.",
        "NASA, ESA and JAXA did.",
    ),
    ("change_case:english_capital", {}, ENGLISH.upper(), ENGLISH),
    ("change_case:english_lowercase", {}, ENGLISH.lower(), ENGLISH),
    (
        "combination:repeat_prompt",
        {"prompt_to_repeat": "Write a poem about rain."},
        "write a poem about rain. Rain falls softly.",
        "Rain falls softly. Write a poem about rain.",
    ),
    ("combination:two_responses", {}, "First answer.\n******\nSecond answer.", "Same.\n******\nSame."),
    (
        "detectable_content:number_placeholders",
        {"num_placeholders": 2},
        "Send it to [name] at [address].",
        "Send it to [name] at home.",
    ),
    (
        "detectable_content:postscript",
        {"postscript_marker": "P.S."},
        "Thanks for reading.\n\nP.S. Bring snacks.",
        "Thanks for reading. Bring snacks.",
    ),
    (
        "detectable_content:postscript",
        {"postscript_marker": "P.P.S"},
        "Done.\nP. P. S. one more thing",
        "Done.\nP.S. one more thing",
    ),
    ("detectable_format:constrained_response", {}, "My answer is maybe.", "Maybe, I think."),
    (
        "detectable_format:constrained_response",
        {},
        "After thinking: My answer is no.",
        "My answer is yes. My answer is no.",
    ),
    ("detectable_format:json_format", {}, '```json\n{"a": [1, 2]}\n```', '{"a": [1, 2]} and some text'),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "Section", "num_sections": 2},
        "Section 1\nIntro.\nSection 2\nBody.",
        "Section 1\nIntro and body.",
    ),
    (
        "detectable_format:number_bullet_lists",
        {"num_bullets": 3},
        "Items:\n* one\n* two\n- three",
        "Items:\n* one\n* two",
    ),
    (
        "detectable_format:number_highlighted_sections",
        {"num_highlights": 2},
        "This is *important* and **also this**.",
        "This is *important* and ** ** this.",
    ),
    ("detectable_format:title", {}, "<<A Rainy Day>>\nIt rained.", "A Rainy Day\nIt rained. <<  >>"),
    (
        "keywords:existence",
        {"keywords": ["river", "Stone"]},
        "A stone sat by the River.",
        "A stone sat by the lake.",
    ),
    (
        "keywords:forbidden_words",
        {"forbidden_words": ["bad", "awful"]},
        "The badminton match was great.",
        "The match was Awful.",
    ),
    (
        "keywords:frequency",
        {"keyword": "rain", "frequency": 3, "relation": "at least"},
        "Rain, rain and more rain.",
        "Rain and more rain.",
    ),
    (
        "keywords:frequency",
        {"keyword": "rain", "frequency": 2, "relation": "less than"},
        "Some rain today.",
        "Rain, rain today.",
    ),
    (
        "keywords:letter_frequency",
        {"letter": "z", "let_frequency": 2, "let_relation": "at least"},
        "Zany zebras.",
        "Zany cats.",
    ),
    (
        "keywords:letter_frequency",
        {"letter": "e", "let_frequency": 3, "let_relation": "less than"},
        "A cat sat.",
        "Ten green trees.",
    ),
    ("language:response_language", {"language": "de"}, GERMAN, ENGLISH),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "Second"},
        'First part.\n\n"Second, the middle.\n\nThird part.',
        "First part.\n\nMiddle part.\n\nThird part.",
    ),
    (
        "length_constraints:number_paragraphs",
        {"num_paragraphs": 3},
        "One.\n***\nTwo.\n***\nThree.",
        "One.\n***\n\n***\nThree.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "less than"},
        "Dr. Smith arrived at 3.30 p.m. today. He left.",
        "One. Two! Three? Four.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "at least"},
        "One. Two! Three? Four.",
        "Dr. J. Smith left. Then he came back.",
    ),
    (
        "length_constraints:number_words",
        {"num_words": 5, "relation": "at least"},
        "one two three four five",
        "one two three four",
    ),
    (
        "length_constraints:number_words",
        {"num_words": 5, "relation": "less than"},
        "one two three four",
        "one two three four five",
    ),
    ("punctuation:no_comma", {}, "No commas here.", "Commas, here."),
    (
        "startend:end_checker",
        {"end_phrase": "Any other questions?"},
        "That is all. any other questions?  ",
        "Any other questions? That is all.",
    ),
    ("startend:quotation", {}, '  "Wrapped in quotes."  ', 'Not "wrapped" in quotes.'),
]


def test_every_instruction_is_covered():
    assert {case[0] for case in CASES} == set(INSTRUCTIONS)
    assert len(INSTRUCTIONS) == 25


@pytest.mark.parametrize(("instruction_id", "kwargs", "passing", "failing"), CASES)
def test_instruction_passes_and_fails(instruction_id, kwargs, passing, failing):
    bound = bind_instruction(instruction_id, kwargs)
    assert bound.follows(passing), passing
    assert not bound.follows(failing), failing
    assert not bound.follows("   ")  # an empty response follows nothing


@pytest.mark.parametrize(
    ("count", "relation", "target", "expected"),
    [
        (4, "less than", 5, True),
        (5, "less than", 5, False),
        (5, "at least", 5, True),
        (4, "at least", 5, False),
        (5, "at most", 5, True),
        (6, "at most", 5, False),
        (5, "exactly", 5, True),
        (6, "exactly", 5, False),
        (109, "around", 100, True),
        (111, "around", 100, False),
        (4, "around", 5, True),  # the tolerance is at least 1
    ],
)
def test_relations(count, relation, target, expected):
    assert compare(count, relation, target) is expected


def test_text_helpers():
    assert count_words("It's 3 o'clock, isn't it?") == 8
    assert count_sentences("Mr. Brown met Prof. Lee at 5 p.m. in the U.S. office. They talked!") == 2
    assert count_sentences("Visit example.com now. Pi is 3.14. Done") == 3
    assert count_sentences("") == 0
    assert capital_words("I saw NASA's 2 UFO reports in the USA, 42.") == ["I", "NASA", "UFO", "USA"]
    assert detect_language(GERMAN) == "de" and detect_language(ENGLISH) == "en"
    assert detect_language("12345 !!!") is None
    # Seeded: the same text always gets the same answer.
    short = "Ciao amico"
    assert len({detect_language(short) for _ in range(5)}) == 1


def test_nulls_mean_not_given_and_bad_arguments_are_one_line_errors():
    hub_style = {"num_words": 10, "relation": "at least", "keyword": None, "num_highlights": None}
    assert bind_instruction("length_constraints:number_words", hub_style).arguments.num_words == 10
    with pytest.raises(InstructionError, match="unknown instruction id 'keywords:rhymes'"):
        bind_instruction("keywords:rhymes", {})
    with pytest.raises(
        InstructionError, match="'length_constraints:number_words': argument 'relation': missing"
    ):
        bind_instruction("length_constraints:number_words", {"num_words": 10, "relation": None})
    with pytest.raises(InstructionError, match="argument 'relation'"):
        bind_instruction("length_constraints:number_words", {"num_words": 10, "relation": "roughly"})
    with pytest.raises(InstructionError, match="argument 'num_bullets'"):
        bind_instruction("detectable_format:number_bullet_lists", {"num_bullets": -1})
    with pytest.raises(InstructionError, match="2 instruction ids but 1 kwargs"):
        bind_instructions(["punctuation:no_comma", "startend:quotation"], [{}])
    with pytest.raises(InstructionError, match="no instructions"):
        bind_instructions([], [])
    assert len(bind_instructions(["punctuation:no_comma", "startend:quotation"], [None, {}])) == 2


def test_constrained_response_options_from_converted_rows():
    bound = bind_instruction("detectable_format:constrained_response", {"options": "('Yes', 'No')"})
    assert bound.follows("Yes") and not bound.follows("Perhaps")
    listed = bind_instruction("detectable_format:constrained_response", {"options": "Option A, Option B"})
    assert listed.follows("I pick Option B.") and not listed.follows("I pick Option C.")


def test_loose_grading_tries_trimmed_and_unstarred_variants():
    assert loose_variants("a\nb\nc") == ["a\nb\nc", "b\nc", "a\nb", "b", "a\nb\nc", "b\nc", "a\nb", "b"]
    instructions = bind_instructions(
        ["startend:end_checker", "punctuation:no_comma"], [{"end_phrase": "The end."}, {}]
    )
    # A chatty first line puts a comma in the reply; emphasis hides the end phrase.
    response = "Sure, here it is:\nA tale of one town.\n**The end.**"
    grade = grade_response(response, instructions)
    assert grade.strict == (False, False) and grade.strict_fraction == 0.0
    assert grade.loose == (True, True)
    quoted = bind_instructions(["startend:quotation"], [{}])
    assert grade_response('Sure:\n"A tale."', quoted) == Grade(strict=(False,), loose=(True,))
    assert grade_response('"A tale."\nHope you like it!', quoted).loose == (True,)  # last line dropped
    assert grade_response("", instructions).loose == (False, False)
    assert grade_response(None, instructions).strict == (False, False)


def test_grade_reply_reads_after_the_think_block():
    instructions = bind_instructions(
        ["punctuation:no_comma", "keywords:existence"], [{}, {"keywords": ["owl"]}]
    )
    assert grade_reply("<think>well, an owl</think>\n\nThe owl hoots.", instructions).strict == (True, True)
    assert grade_reply("<think>The owl hoots.</think>", instructions).strict == (
        False,
        False,
    )  # nothing after
    assert grade_reply("<think>The owl hoots. No commas", instructions).strict == (False, False)  # unclosed
    assert grade_reply("<think>a</think>The owl, hoots.", instructions).strict_fraction == 0.5


def test_rlvr_ground_truth_converts_to_ifeval():
    ground_truth = json.dumps(
        {
            "func_name": "verify_keyword_frequency",
            "N": 3,
            "quantifier": None,
            "word": "lantern",
            "letter": None,
        }
    )
    instruction_id, kwargs = rlvr_instruction(ground_truth)
    assert (instruction_id, kwargs) == (
        "keywords:frequency",
        {"keyword": "lantern", "frequency": 3, "relation": "exactly"},
    )
    bound = bind_instruction(instruction_id, kwargs)
    assert bound.follows("Lantern, lantern, lantern.") and not bound.follows(
        "Lantern, lantern, lantern, lantern."
    )
    assert rlvr_instruction({"func_name": "validate_word_constraint", "N": 50, "quantifier": "around"}) == (
        "length_constraints:number_words",
        {"num_words": 50, "relation": "around"},
    )
    assert rlvr_instruction({"func_name": "validate_sections", "N": 2, "section_splitter": "PART"}) == (
        "detectable_format:multiple_sections",
        {"num_sections": 2, "section_spliter": "PART"},
    )
    for func_name, (target, _, _) in RLVR_FUNCTIONS.items():
        assert target in INSTRUCTIONS, func_name
    for bad, message in (
        ("not json", "not valid JSON"),
        ("[1]", "not a JSON object"),
        ("{}", "no 'func_name'"),
        ('{"func_name": "verify_rhyme"}', "unknown RLVR verifier 'verify_rhyme'"),
    ):
        with pytest.raises(InstructionError, match=message):
            rlvr_instruction(bad)
    assert (
        rlvr_prompt([{"role": "system", "content": "x"}, {"role": "user", "content": "Write."}]) == "Write."
    )
    with pytest.raises(InstructionError):
        rlvr_prompt([])


def test_where_the_original_verifiers_were_wrong():
    """The original's RLVR verifiers escaped their patterns twice, so a word count never matched a word,
    paragraphs never split and bullet lines never counted: right answers scored 0."""
    frequency = bind_instruction(
        *rlvr_instruction({"func_name": "verify_keyword_frequency", "word": "owl", "N": 2})
    )
    assert frequency.follows("An owl met another owl.")
    paragraphs = bind_instruction(
        *rlvr_instruction({"func_name": "validate_paragraphs", "N": 2, "i": 2, "first_word": "then"})
    )
    assert paragraphs.follows("First it rained.\n\nThen the sun came out.")
    bullets = bind_instruction(*rlvr_instruction({"func_name": "verify_bullet_points", "N": 2}))
    assert bullets.follows("* apples\n* pears") and not bullets.follows("* apples")
    placeholders = bind_instruction(*rlvr_instruction({"func_name": "validate_placeholders", "N": 1}))
    assert placeholders.follows("Dear [name],") and not placeholders.follows("Dear friend,")
