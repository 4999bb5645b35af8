"""The GSM8K reference environment: data loading, math_verify scoring, ``process`` and ``evaluate``."""

from __future__ import annotations

import pytest

from environments.gsm8k_server import GSM8kEnv, gold_number
from tests.helpers.cli_runs import GSM8K_SAMPLE, gsm8k_responder, read_jsonl
from tests.helpers.single_turn_runs import offline_env, setup_failure, write_jsonl

ROWS = read_jsonl(GSM8K_SAMPLE)


def _env(tiny_model_dir, **overrides) -> GSM8kEnv:
    return offline_env(
        GSM8kEnv, tiny_model_dir, **{"group_size": 4, "dataset_path": str(GSM8K_SAMPLE), **overrides}
    )


def _rollout(env: GSM8kEnv, reply: str, gold: str, generated: int = 20) -> dict:
    prompt = [5] * 8
    return {
        "messages": ({"role": "user", "content": "q"}, {"role": "assistant", "content": reply}),
        "gold_answer": "\\boxed{" + gold + "}",
        "finish_reason": "stop",
        "tokens": prompt + list(range(100, 100 + generated)),
        "masks": [-100] * len(prompt) + list(range(100, 100 + generated)),
        "logprobs": [1.0] * len(prompt) + [-0.5] * generated,
    }


def test_gold_number_reads_the_final_answer():
    assert gold_number("12 + 7 = 19\n#### 1,200") == "1200"
    assert [gold_number(r["answer"]) for r in ROWS[:3]] == ["14", "72", "90"]


async def test_setup_reads_a_local_jsonl(tiny_model_dir):
    env = _env(tiny_model_dir, eval_limit=5)
    await env.setup()
    assert len(env.train) == len(ROWS)
    assert len(env.test) == 5
    golds = {gold_number(r["answer"]) for r in ROWS}
    assert all(item["gold_answer"] in golds for item in env.test)
    first = await env.get_next_item()
    assert set(first) >= {"question", "answer"} and env.iter == 1


async def test_a_row_without_answer_names_file_row_and_field(tiny_model_dir, tmp_path):
    path = write_jsonl(tmp_path / "gsm8k.jsonl", [ROWS[0], {"question": "What is 2+2?"}])
    await setup_failure(_env(tiny_model_dir, dataset_path=path), f"{path}: row 1: missing field 'answer'")


async def test_default_loader_is_the_hub_dataset(tiny_model_dir, hub_offline):
    env = _env(tiny_model_dir, dataset_path=None)
    with pytest.raises(Exception, match="gsm8k"):
        await env.setup()


async def test_score_mixed_group_gets_plus_minus_one(tiny_model_dir):
    env = _env(tiny_model_dir)
    rollouts = [
        _rollout(env, "<think>work</think>So \\boxed{14}", "14"),
        _rollout(env, "\\boxed{15}", "14"),
        _rollout(env, "The answer is \\boxed{14}.", "14"),
        _rollout(env, "no box here: 14", "14"),
    ]
    group = await env.score(rollouts)
    assert sorted(group["scores"]) == [-1.0, -1.0, 1.0, 1.0]
    assert len(group["tokens"]) == len(group["masks"]) == len(group["inference_logprobs"]) == 4
    assert sorted(env.percent_correct_buffer) == [0, 0, 1, 1]


async def test_score_all_correct_prefers_shorter_replies(tiny_model_dir):
    env = _env(tiny_model_dir, max_token_length=40)
    rollouts = [_rollout(env, "\\boxed{14}", "14", generated=n) for n in (10, 20, 30, 40)]
    group = await env.score(rollouts)
    by_length = dict(zip((len(t) for t in group["tokens"]), group["scores"], strict=True))
    assert by_length[18] == 1.0  # 8 prompt + 10 generated <= half the budget
    assert by_length[28] < 1.0 and by_length[38] < by_length[28] and by_length[48] == 0.0


async def test_score_skips_uniform_groups_short_rollouts_and_bad_gold(tiny_model_dir):
    env = _env(tiny_model_dir)
    wrong = [_rollout(env, "\\boxed{1}", "14") for _ in range(4)]
    assert await env.score(wrong) is None
    short = [_rollout(env, "\\boxed{14}", "14", generated=3), _rollout(env, "\\boxed{2}", "14", generated=3)]
    assert await env.score(short) is None  # both rollouts are under min_completion_tokens
    assert await env.score([_rollout(env, "\\boxed{14}", "not a number at all")]) is None


def test_process_with_a_local_dataset(scripted, tmp_path):
    requests = scripted.command(
        GSM8kEnv,
        "process",
        ["--env.dataset_path", GSM8K_SAMPLE, "--env.group_size", "4", "--env.total_steps", "3"],
        gsm8k_responder(),
    )
    # The bare APIServerConfig of config_init is used as given: every request reached the scripted server.
    assert requests and {r["path"] for r in requests} == {"/generate"}
    out = tmp_path / "data" / "gsm8k.jsonl"  # process mode default: data/{name}.jsonl
    groups = read_jsonl(out)
    assert len(groups) == 3
    questions = {r["question"] for r in ROWS}
    for group in groups:
        assert sorted(group["scores"]) == [-1.0, -1.0, 1.0, 1.0]
        assert len(group["inference_logprobs"]) == 4
        # include_messages (a process default) fills messages from the decoded tokens
        texts = [m[0]["content"] for m in group["messages"]]
        assert all("\\boxed{" in t for t in texts)
        assert any(q in texts[0] for q in questions)
    html = out.with_suffix(".html").read_text()
    assert html.count("Group ") >= 3 and "boxed" in html


def test_evaluate_writes_metrics_and_samples(scripted):
    evaluation = scripted.evaluation(
        GSM8kEnv, ["--env.dataset_path", GSM8K_SAMPLE, "--env.eval_limit", "4"], gsm8k_responder()
    )
    assert evaluation.metrics == {"eval/percent_correct": 1.0}
    assert evaluation.report["config_general"]["generation_parameters"]["temperature"] == 0.6
    samples = evaluation.samples
    assert len(samples) == 4 and all(s["score"] == 1 for s in samples)
    assert (evaluation.directory / "evaluate_config.yaml").exists()
