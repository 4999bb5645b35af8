"""The answer-format environment: every format's detector, the once-and-no-other rule, data, process, evaluate."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from atroposlib.envs.cli import CliUsageError, parse_command
from environments.answer_format_environment import (
    FORMATS,
    AnswerFormatEnv,
    AnswerFormatEnvConfig,
    answers_match,
    formatted_answer,
    gold_answer,
    score_reply,
)
from tests.helpers.cli_runs import GSM8K_SAMPLE, read_jsonl
from tests.helpers.single_turn_runs import (
    check_groups,
    offline_env,
    prompt_text,
    setup_failure,
    write_jsonl,
)

ALL = list(FORMATS)
WRITTEN = {
    "xml": "<answer>42</answer>",
    "output_tags": "<output>42</output>",
    "result_tags": "<result>42</result>",
    "latex_boxed": "So the total is \\boxed{42}.",
    "json": '{"answer": "42"}',
    "markdown_code": "```\n42\n```",
    "natural_language_final": "Adding up.\nFinal Answer: 42",
    "natural_language_answer": "The answer is: 42",
    "colon_format": "Answer: 42",
    "square_brackets": "[42]",
    "markdown_bold": "That makes **42**.",
    "pipe_delimited": "|42|",
}


@pytest.mark.parametrize("name", ALL)
def test_each_format_alone_is_accepted_and_only_for_itself(name):
    reply = f"<think>6 times 7</think>{WRITTEN[name]}"
    assert formatted_answer(reply, name, ALL) == "42"
    assert score_reply(reply, name, ALL, gold="42", check_answer=True) == 1.0
    other = next(n for n in ALL if n != name)
    assert score_reply(reply, other, ALL) == 0.0  # the requested format is missing


@pytest.mark.parametrize("name", ALL)
def test_twice_or_with_a_second_format_is_rejected(name):
    assert score_reply(f"{WRITTEN[name]}\n\n{WRITTEN[name]}", name, ALL) == 0.0
    second = "pipe_delimited" if name != "pipe_delimited" else "xml"
    assert score_reply(f"{WRITTEN[name]}\n\n{WRITTEN[second]}", name, ALL) == 0.0
    assert (
        score_reply(f"<think>{WRITTEN[name]}</think>I will not say.", name, ALL) == 0.0
    )  # only in reasoning


@pytest.mark.parametrize(
    ("reply", "requested", "expected"),
    [
        ('```json\n{"answer": 42, "confidence": 0.9}\n```', "json", 1.0),  # a json fence is the json format
        ("```python\nprint(42)\n```", "markdown_code", 1.0),
        ("Final Answer: 42\nAnswer: 42", "natural_language_final", 0.0),  # 'Answer:' is another format
        ("The answer is 42.", "natural_language_answer", 0.0),  # prose, not the format
        ("**Final Answer:** 42", "natural_language_final", 0.0),  # bold is another format
        ("<answer></answer>", "xml", 0.0),  # empty
        ("<think>open <answer>42</answer>", "xml", 0.0),  # malformed reasoning
        ("| a | b |\n|42|", "pipe_delimited", 1.0),  # a table row is not a pipe-delimited answer
        ('{"result": 42}', "json", 0.0),  # no "answer" key
        ("", "xml", 0.0),
    ],
)
def test_edge_cases(reply, requested, expected):
    assert score_reply(reply, requested, ALL) == expected


def test_only_formats_in_the_set_count_as_other_formats():
    reply = "<answer>42</answer> **really**"
    assert score_reply(reply, "xml", ALL) == 0.0
    assert score_reply(reply, "xml", ["xml", "latex_boxed"]) == 1.0


@pytest.mark.parametrize(
    ("given", "gold", "expected"),
    [("42", "42", True), ("42.0", "42", True), ("1,200", "1200", True), ("$42$.", "42", True),
     ("Paris", "paris", True), ("41", "42", False), ("forty-two", "42", False)],
)  # fmt: skip
def test_answer_check(given, gold, expected):
    assert answers_match(given, gold) is expected
    assert score_reply(f"<answer>{given}</answer>", "xml", ALL, gold=gold, check_answer=True) == float(
        expected
    )
    assert score_reply(f"<answer>{given}</answer>", "xml", ALL, gold=gold) == 1.0  # format only by default


def test_gold_answer_and_config_checks():
    assert gold_answer("work\n#### 1,200") == "1,200" and gold_answer(" Paris ") == "Paris"
    with pytest.raises(ValidationError, match="available: xml"):
        AnswerFormatEnvConfig(formats=["xml", "smoke_signals"])
    assert AnswerFormatEnvConfig(formats=["xml", "xml", "json"]).formats == ["xml", "json"]


def _env(tiny_model_dir, **overrides) -> AnswerFormatEnv:
    return offline_env(AnswerFormatEnv, tiny_model_dir, **overrides)


async def test_items_draw_formats_deterministically(tiny_model_dir):
    env, again = (
        _env(tiny_model_dir, dataset_path=str(GSM8K_SAMPLE)),
        _env(tiny_model_dir, dataset_path=str(GSM8K_SAMPLE)),
    )
    await env.setup()
    await again.setup()
    items = [await env.get_next_item() for _ in range(60)]
    assert items == [await again.get_next_item() for _ in range(60)]
    assert len({i.format for i in items}) >= 8
    assert env.test_items == again.test_items and len(env.test_items) == len(read_jsonl(GSM8K_SAMPLE))
    item = items[0]
    assert FORMATS[item.format].instruction in item.prompt and item.question in item.prompt
    assert env.prompt_messages(item)[1]["content"] == item.prompt


async def test_bad_local_files_and_hub_default(tiny_model_dir, tmp_path, hub_offline):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"question": "q", "answer": "#### 1"}, {"question": "r"}])
    await setup_failure(_env(tiny_model_dir, dataset_path=path), "row 1: missing field 'answer'")
    write_jsonl(tmp_path / "rows.jsonl", [])
    await setup_failure(_env(tiny_model_dir, dataset_path=path), "no rows")
    await setup_failure(_env(tiny_model_dir), r"gsm8k \(train\): cannot load from the hub")


INSTRUCTION_TO_FORMAT = {f.instruction: name for name, f in FORMATS.items()}
GOLDS = {row["question"]: gold_answer(row["answer"]) for row in read_jsonl(GSM8K_SAMPLE)}


def _responder():
    """The requested format for even choice indices; the requested format plus a second one for odd ones."""

    def respond(prompt, index):
        text = prompt_text(prompt)
        name = next((n for instruction, n in INSTRUCTION_TO_FORMAT.items() if instruction in text), None)
        gold = next((g for q, g in GOLDS.items() if q in text), None)
        if name is None or gold is None:
            return "no idea"
        reply = WRITTEN[name].replace("42", gold)
        if index % 2:
            reply += "\n\n" + WRITTEN["pipe_delimited" if name != "pipe_delimited" else "xml"].replace(
                "42", gold
            )
        return f"<think>Working it out.</think>{reply}"

    return respond


def test_process_with_a_local_file(scripted):
    args = ["--env.dataset_path", GSM8K_SAMPLE, "--env.group_size", "2", "--env.total_steps", "3",
            "--env.max_tokens", "96", "--env.check_answer", "true"]  # fmt: skip
    groups = scripted.process(AnswerFormatEnv, args, _responder())
    check_groups(groups, 3, [0.0, 1.0])
    for group in groups:
        assert re.search(r"Give your final answer .*exactly once", group["messages"][0][1]["content"])


def test_evaluate_reports_accuracy_per_format(scripted):
    args = ["--env.dataset_path", GSM8K_SAMPLE, "--env.eval_limit", "8", "--env.max_tokens", "96",
            "--env.check_answer", "true"]  # fmt: skip
    metrics, samples, out = scripted.evaluate(AnswerFormatEnv, args, _responder())
    assert metrics["eval/percent_correct"] == 1.0
    formats = {s["format"] for s in samples}
    assert len(samples) == 8 and {f"eval/format_accuracy/{f}" for f in formats} <= set(metrics)
    assert "answer_format evaluation: percent_correct=1.0000" in out


async def test_equivalent_ratios_pause_formats_at_the_threshold(tiny_model_dir):
    formats = ["xml", "json", "latex_boxed"]
    env = _env(
        tiny_model_dir,
        dataset_path=str(GSM8K_SAMPLE),
        formats=formats,
        ensure_equivalent_ratios=True,
        format_group_threshold=2,
    )
    await env.setup()
    item = await env.get_next_item()
    env.on_group_scored(item, [0.0, 0.0])  # no reply in the format: not a successful group
    assert env.training_formats() == formats
    env.on_group_scored(item, [1.0, 0.0])
    env.on_group_scored(item, [0.0, 1.0])
    paused = item.format
    assert env.training_formats() == [f for f in formats if f != paused]
    assert paused not in {(await env.get_next_item()).format for _ in range(40)}
    for name in formats:
        env.successful_groups[name] = 2  # every format at the threshold: all are drawn again
    assert env.training_formats() == formats
    unbalanced = _env(
        tiny_model_dir, dataset_path=str(GSM8K_SAMPLE), formats=formats, format_group_threshold=2
    )
    await unbalanced.setup()
    unbalanced.successful_groups[paused] = 5
    assert unbalanced.training_formats() == formats


async def test_eval_set_percentage_and_max_eval_samples_choose_the_evaluation_rows(tiny_model_dir):
    rows = len(read_jsonl(GSM8K_SAMPLE))
    env = _env(tiny_model_dir, dataset_path=str(GSM8K_SAMPLE), eval_set_percentage=0.25)
    await env.setup()
    held_out = round(rows * 0.25)
    assert len(env.test_items) == held_out and len(env.train_rows) == rows - held_out
    train_questions = {row["question"] for row in env.train_rows}
    assert not train_questions & {item.question for item in env.test_items}
    sampled = _env(tiny_model_dir, dataset_path=str(GSM8K_SAMPLE), max_eval_samples=2, eval_sample_seed=3)
    await sampled.setup()
    full = _env(tiny_model_dir, dataset_path=str(GSM8K_SAMPLE))
    await full.setup()
    assert len(sampled.test_items) == 2 and set(sampled.test_items) <= set(full.test_items)


def test_original_keys_in_a_config_file(tmp_path):
    config = tmp_path / "formats.yaml"
    config.write_text("env:\n  dataset: gsm8k\n  supported_formats: [xml, json]\n  seed: 7\n")
    run = parse_command(AnswerFormatEnv, ["evaluate", "--config", str(config)]).resolve()
    assert run.env_config.formats == ["xml", "json"] and run.env_config.dataset_name == "gsm8k"
    config.write_text("env:\n  supported_formats: [xml, yaml_confidence]\n")
    with pytest.raises(CliUsageError, match="yaml_confidence"):
        parse_command(AnswerFormatEnv, ["evaluate", "--config", str(config)]).resolve()
    config.write_text("env:\n  dump_rollouts: true\n")
    with pytest.raises(CliUsageError, match="dump_rollouts .* is not supported here"):
        parse_command(AnswerFormatEnv, ["process", "--config", str(config)]).resolve()
