"""Reply conventions shared by the environments: think blocks, boxed answers, code blocks."""

from atroposlib.utils.replies import answer_section, boxed_answers, final_boxed_answer, last_code_block


def test_answer_section_drops_the_reasoning():
    assert answer_section("<think>x = 2</think> so 4") == " so 4"
    assert answer_section("reasoning opened by the template</think>4") == "4"
    assert answer_section("plain 4") == "plain 4"


def test_answer_section_rejects_malformed_reasoning():
    assert answer_section("<think>never closed \\boxed{4}") is None
    assert answer_section("<think>a</think><think>b</think>\\boxed{4}") is None
    assert answer_section("</think>x<think>\\boxed{4}") is None


def test_boxed_answers_balance_braces():
    assert boxed_answers(r"\boxed{\frac{1}{2}} and \fbox{3} and \boxed{unclosed") == [r"\frac{1}{2}", "3"]


def test_final_boxed_answer():
    assert final_boxed_answer(r"<think>\boxed{7}</think> The answer is \boxed{5}.") == "5"
    assert final_boxed_answer(r"<think>\boxed{5}</think> five") is None  # only inside the reasoning
    assert final_boxed_answer("5") is None
    assert final_boxed_answer(r"\boxed{5} or \boxed{6}") is None  # a hedge
    assert final_boxed_answer(r"\boxed{5} so \boxed{ 5 }") == "5"
    assert final_boxed_answer(r"\boxed{5} so \boxed{5}", allow_repeats=False) is None
    assert final_boxed_answer(r"\boxed{}") is None


def test_last_code_block():
    reply = "<think>```python\nbad()\n```</think>\n```python\nfirst()\n```\ntext\n```py\nsecond()\n```"
    assert last_code_block(reply) == "second()\n"
    assert last_code_block("```js\nx()\n```") is None
    assert last_code_block("```js\nx()\n```", languages=()) == "x()\n"
    assert last_code_block("no code") is None
