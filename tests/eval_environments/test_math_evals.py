"""The math benchmarks (gsm8k, MATH-500, MATH, AIME, AIMO, OlympiadBench) on fixtures in their hub schemas,
against the scripted server: every kind of reply (right, right in another form, wrong, a hedge of two boxed
answers, no box, empty, an unclosed ``<think>``, cut at max tokens), exact metrics and breakdowns."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from atroposlib.envs.data_loading import DatasetError
from environments.eval_environments.aime_eval import AIMEEvalEnv
from environments.eval_environments.aimo_eval import AIMOEvalEnv
from environments.eval_environments.gsm8k_eval import GSM8KEvalEnv
from environments.eval_environments.math500_eval import MATH500EvalEnv
from environments.eval_environments.math_eval import MATHEvalEnv
from environments.eval_environments.olympiadbench_eval import OlympiadBenchEvalEnv
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import offline_env, prompt_text, write_jsonl

DATA = FIXTURES / "evals"
#: longer than the 64 tokens the runs allow: cut inside its reasoning, so it has no answer
LONG = "<think>" + "Let me check every step of this once more, slowly. " * 40 + "</think>\\boxed{1}"
ARGS = ["--env.eval_max_tokens", "64", "--env.retry_delay", "0"]
#: a generous check limit: a loaded test machine must not turn a slow check into a wrong answer
MATH_ARGS = [*ARGS, "--env.math_check_timeout", "60"]


def responder(replies: dict[str, str | Sequence[str]]):
    """``respond`` for the scripted server: the reply of the first key found in the question (a list gives
    one reply per choice index)."""

    def respond(prompt, index):
        text = prompt_text(prompt)
        reply = next(r for key, r in replies.items() if key in text)
        return reply if isinstance(reply, str) else reply[index]

    return respond


def stderr(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))


def by_id(samples):
    return {s["id"]: s for s in samples}


def test_gsm8k(scripted):
    replies = {
        "Ann packs": "\\boxed{18.0}",  # right, another form
        "shop sells pens": "<think>36 times 2 is 72.</think>Therefore, the final answer is: $\\boxed{72}$. "
        "I hope it is correct",
        "Tom reads": "<think>12 times 5.</think>\\boxed{50}",  # wrong
        "farm has 500": "\\boxed{1500}",  # gold written 1,500
        "Mia had": "",
        "train travels": "<think>60 times 3 is",
        "Sam buys": LONG,
        "Lena bakes": "\\boxed{72} or maybe \\boxed{81}",  # a hedge
    }
    run = scripted.evaluation(
        GSM8KEvalEnv,
        ["--env.dataset_path", DATA / "gsm8k.jsonl", *MATH_ARGS],
        responder(replies),
        server_type=None,
    )
    m = run.metrics
    assert m["eval/accuracy"] == pytest.approx(3 / 8)
    assert m["eval/accuracy_stderr"] == pytest.approx(stderr([1, 1, 0, 1, 0, 0, 0, 0]))
    assert (m["eval/num_items"], m["eval/num_samples"]) == (8, 8)
    assert m["eval/no_answer_rate"] == pytest.approx(4 / 8)  # empty, unclosed, cut, hedge
    assert m["eval/hedge_rate"] == pytest.approx(1 / 8)
    assert m["eval/unclosed_think_rate"] == pytest.approx(2 / 8)  # the cut reply never closed its think
    assert m["eval/truncated_rate"] == pytest.approx(1 / 8)
    samples = by_id(run.samples)
    assert (
        samples["0"]["extracted"] == "18.0" and samples["0"]["score"] == 1.0 and samples["0"]["gold"] == "18"
    )
    assert samples["3"]["gold"] == "1500" and samples["3"]["score"] == 1.0
    assert samples["2"]["extracted"] == "50" and samples["2"]["method"] == "wrong"
    assert samples["7"]["method"] == "hedge" and samples["7"]["answers"] == ["72", "81"]
    assert samples["4"]["method"] == "empty" and samples["5"]["method"] == "unclosed_think"
    assert samples["6"]["finish_reason"] == "length" and samples["6"]["score"] == 0.0
    prompt = samples["0"]["messages"][-1]["content"]
    assert prompt.startswith("Solve the following math problem step by step. The last line of your response")
    assert "I hope it is correct" in prompt and prompt.endswith("How many apples does she pack?")
    assert samples["0"]["solution"].endswith("#### 18")
    assert len(run.requests) == 8 + 2  # the empty reply was asked three times
    assert run.requests[0]["body"]["temperature"] == 0.6 and run.requests[0]["body"]["max_tokens"] == 64


MATH500_REPLIES = {
    "lowest terms": "\\boxed{0.5}",  # gold \frac{1}{2}
    "Solve $2x + 3": "<think>2x = 8.</think>So \\boxed{x = 4}.",
    "positive divisors": "\\boxed{4}",
    "Simplify $\\sqrt{50}": "\\boxed{5\\sqrt{2}}, or perhaps \\boxed{25\\sqrt{2}}",
    "area of a circle": "",
    "interior angles": "<think>A hexagon has six sides, so",
    "binom": LONG,
}


def test_math500_with_subject_and_level_breakdowns(scripted):
    run = scripted.evaluation(
        MATH500EvalEnv,
        ["--env.dataset_path", DATA / "math500.jsonl", "--env.custom_system_prompt", "Be brief.", *MATH_ARGS],
        responder(MATH500_REPLIES),
        server_type=None,
    )
    m = run.metrics
    assert m["eval/accuracy"] == pytest.approx(2 / 7)
    assert m["eval/accuracy_stderr"] == pytest.approx(stderr([1, 1, 0, 0, 0, 0, 0]))
    assert m["eval/subject_prealgebra_accuracy"] == 1.0 and m["eval/subject_algebra_accuracy"] == 0.5
    assert m["eval/subject_geometry_accuracy"] == 0.0 and m["eval/subject_algebra_count"] == 2
    assert m["eval/level_1_accuracy"] == 0.5 and m["eval/level_2_accuracy"] == 0.25
    assert m["eval/level_3_accuracy"] == 0.0
    assert m["eval/hedge_rate"] == pytest.approx(1 / 7)
    assert run.report["results"]["atropos|math500_eval:subject:Algebra|0"]["num_items"] == 2
    samples = by_id(run.samples)
    one = samples["test/prealgebra/1.json"]
    assert (one["extracted"], one["gold"], one["score"]) == ("0.5", "\\frac{1}{2}", 1.0)
    assert samples["test/algebra/2.json"]["extracted"] == "x = 4"
    assert one["messages"][0] == {"role": "system", "content": "Be brief."}
    assert one["messages"][1]["content"].startswith("Solve the following math problem. The last line")


def test_math500_original_prompt_and_plain_boxed_instruction(tiny_model_dir):
    env = offline_env(MATH500EvalEnv, tiny_model_dir, use_original_prompt=True)
    assert env.format_prompt("P").startswith(
        "Solve the following problem. The final line of your response MUST"
    )
    assert "\\boxed{} format.\n\nP" in env.format_prompt("P")
    env = offline_env(MATH500EvalEnv, tiny_model_dir, include_hope_suffix=False)
    assert env.format_prompt("P") == (
        "Solve the following math problem. Put your final answer in \\boxed{} format. "
        "For example: \\boxed{42} or \\boxed{\\frac{1}{2}}\n\nP"
    )


MATH_REPLIES = {
    "Solve $3x - 1 = 5$": "\\boxed{2}",
    "\\frac{1}{4} + \\frac{1}{4}": "<think>Two quarters.</think>\\boxed{0.5}",  # gold \frac{1}{2}
    "Expand $(x+1)^2$": "\\boxed{x^2 + 1}",  # wrong
    "remainder when $17$": "<think>17 = 15 + 2, so",
    "greatest common divisor": "\\boxed{6} ... no, \\boxed{3}",
    "A square has side": "",
    "right triangle": LONG,
}


def test_math_reads_a_per_subset_directory(scripted):
    run = scripted.evaluation(
        MATHEvalEnv,
        ["--env.dataset_path", DATA / "math", *MATH_ARGS],
        responder(MATH_REPLIES),
        server_type=None,
    )
    m = run.metrics
    assert m["eval/num_items"] == 7 and m["eval/accuracy"] == pytest.approx(2 / 7)
    assert m["eval/subset_algebra_accuracy"] == pytest.approx(2 / 3)
    assert m["eval/subset_number_theory_accuracy"] == 0.0 and m["eval/subset_geometry_count"] == 2
    assert m["eval/level_level_1_accuracy"] == pytest.approx(2 / 4)
    samples = {s["problem"][:16]: s for s in run.samples}
    assert (
        samples["What is $\\frac{1"]["gold"] == "\\frac{1}{2}"
        and samples["What is $\\frac{1"]["score"] == 1.0
    )
    assert samples["What is the rema"]["subset"] == "number_theory"


async def test_math_subsets_select_files_and_rows(tiny_model_dir, hub_offline):
    env = offline_env(MATHEvalEnv, tiny_model_dir, dataset_path=str(DATA / "math"), subsets=["geometry"])
    await env.setup()
    assert sorted(item.gold for item in env.items) == ["16", "5"]
    env = offline_env(MATHEvalEnv, tiny_model_dir, subsets=["algebra"])
    with pytest.raises(
        DatasetError, match=r"DigitalLearningGmbH/MATH-lighteval/algebra \(test\): cannot load"
    ):
        await env.setup()


def aime_respond(prompt, index):
    replies = {
        "first AIME 2024": [
            "\\boxed{204}",
            "Therefore, the final answer is: $\\boxed{204}$. I hope it is correct",
        ],
        "second AIME 2024": ["\\boxed{025}", "\\boxed{24}"],  # another form, then wrong
        "third AIME 2024": ["", "<think>the length is"],
        "first AIME 2025": ["\\boxed{70} or \\boxed{7}", "\\boxed{70}"],
        "second AIME 2025": [LONG, "\\boxed{587}"],
    }
    return responder(replies)(prompt, index)


def test_aime_by_year_with_pass_at_k(scripted):
    run = scripted.evaluation(
        AIMEEvalEnv,
        ["--env.dataset_path", DATA / "aime", "--env.pass_at_n_samples", "2", *MATH_ARGS],
        aime_respond,
        server_type=None,
    )
    m = run.metrics
    item_means = [1.0, 0.5, 0.0, 0.5, 0.0]
    assert m["eval/accuracy"] == pytest.approx(0.4) == m["eval/mean@2"] == m["eval/pass@1"]
    assert m["eval/accuracy_stderr"] == pytest.approx(stderr(item_means))
    assert m["eval/pass@2"] == pytest.approx(3 / 5)
    assert m["eval/maj@2"] == pytest.approx(3 / 5)  # 204, 025 and 70 win their votes; 587 is wrong
    assert (m["eval/num_items"], m["eval/num_samples"]) == (5, 10)
    assert m["eval/year_2024_accuracy"] == pytest.approx(0.5)
    assert m["eval/year_2025_accuracy"] == pytest.approx(0.25)
    assert m["eval/year_2024_accuracy_stderr"] == pytest.approx(stderr([1.0, 0.5, 0.0]))
    assert run.report["results"]["atropos|aime_eval:year:2025|0"]["num_items"] == 2
    samples = [s for s in run.samples if s["id"] == "aime2024_61"]
    assert [s["extracted"] for s in samples] == ["025", "24"] and [s["score"] for s in samples] == [1.0, 0.0]
    prompt = samples[0]["messages"][-1]["content"]
    assert "AIME answers are always integers from 0 to 999." in prompt and "$\\boxed{ANSWER}$" in prompt
    assert all(r["body"]["n"] in (1, 2) for r in run.requests) and run.requests[0]["body"]["n"] == 2


async def test_aime_years_and_hub_names(tiny_model_dir, hub_offline):
    env = offline_env(AIMEEvalEnv, tiny_model_dir, dataset_path=str(DATA / "aime"), years=["2025"])
    await env.setup()
    assert sorted(item.id for item in env.items) == ["aime2025_I-1", "aime2025_I-2"]
    env = offline_env(AIMEEvalEnv, tiny_model_dir, years=["2025"])
    with pytest.raises(DatasetError, match=r"yentinglin/aime_2025 \(train\): cannot load from the hub"):
        await env.setup()
    env = offline_env(AIMEEvalEnv, tiny_model_dir, years=["2023"])
    with pytest.raises(DatasetError, match="unknown years"):
        await env.setup()


def test_aimo(scripted):
    replies = {
        "first AIMO": "\\boxed{52}",
        "second AIMO": "<think>Sum them.</think>\\boxed{250.0}",
        "third AIMO": "\\boxed{703}",
        "fourth AIMO": "The minimum is 800.",  # no box
        "fifth AIMO": "",
        "sixth AIMO": "<think>The largest value",
        "seventh AIMO": LONG,
        "eighth AIMO": "\\boxed{4} or \\boxed{5}",
    }
    run = scripted.evaluation(
        AIMOEvalEnv,
        ["--env.dataset_path", DATA / "aimo.jsonl", *MATH_ARGS],
        responder(replies),
        server_type=None,
    )
    m = run.metrics
    assert m["eval/accuracy"] == pytest.approx(2 / 8)
    assert m["eval/accuracy_stderr"] == pytest.approx(stderr([1, 1, 0, 0, 0, 0, 0, 0]))
    assert m["eval/no_answer_rate"] == pytest.approx(5 / 8)
    samples = by_id(run.samples)
    assert samples["246d26"]["gold"] == "250" and samples["246d26"]["score"] == 1.0
    assert samples["430b63"]["method"] == "no_answer" and samples["8ee6f3"]["method"] == "hedge"
    assert samples["229ee8"]["messages"][-1]["content"].startswith(
        "Solve the following mathematical olympiad"
    )


def test_olympiadbench(scripted):
    replies = {
        "$4x = 2$": "<think>x is a half.</think><answer>\\boxed{0.5}</answer>",
        "$x^2 = 9$": "<answer>\\boxed{-3, 3}</answer>",  # both answers, in another order
        "smallest prime": "<answer>23</answer>",  # no box: the tag's content
        "sum $1 + 2": "<answer>\\boxed{n^2}</answer>",
        "diagonals": "<answer>\\boxed{20}</answer> or <answer>\\boxed{28}</answer>",
        "Compute $7": "",
        "positive root": "<think>The root of two",
        "interval of $x$": LONG,
    }
    run = scripted.evaluation(
        OlympiadBenchEvalEnv,
        ["--env.dataset_path", DATA / "olympiadbench.jsonl", *MATH_ARGS],
        responder(replies),
        server_type=None,
    )
    m = run.metrics
    assert m["eval/accuracy"] == pytest.approx(3 / 8)
    assert m["eval/subject_math_accuracy"] == pytest.approx(3 / 8)
    assert m["eval/answer_type_numerical_accuracy"] == pytest.approx(3 / 5)
    assert m["eval/answer_type_expression_accuracy"] == 0.0 and m["eval/answer_type_interval_count"] == 1
    assert m["eval/hedge_rate"] == pytest.approx(1 / 8)
    samples = by_id(run.samples)
    assert samples["2002"]["gold"] == "3,-3" and samples["2002"]["score"] == 1.0
    assert samples["2003"]["extracted"] == "23" and samples["2003"]["score"] == 1.0
    assert samples["2001"]["gold"] == "\\frac{1}{2}"
    prompt = samples["2002"]["messages"][-1]["content"]
    assert prompt.startswith("The following is an open-ended problem from an International Math competition.")
    assert "The problem has multiple answers, each of them should be a numerical value." in prompt
    assert "\\boxed{multiple answers connected with commas}" in prompt
    assert "The answer should be an expression." in samples["2004"]["messages"][-1]["content"]


async def test_math_rows_with_empty_answers_are_one_line_errors(tiny_model_dir, tmp_path):
    bad = write_jsonl(
        tmp_path / "bad.jsonl", [{"question": "q", "answer": "#### 3"}, {"question": "q2", "answer": ""}]
    )
    env = offline_env(GSM8KEvalEnv, tiny_model_dir, dataset_path=bad)
    with pytest.raises(DatasetError, match=r"bad\.jsonl: row 1: field 'answer' is empty"):
        await env.setup()
    missing = write_jsonl(tmp_path / "missing.jsonl", [{"problem": "p"}])
    env = offline_env(AIMOEvalEnv, tiny_model_dir, dataset_path=missing)
    with pytest.raises(DatasetError, match=r"missing\.jsonl: row 0.*answer"):
        await env.setup()
