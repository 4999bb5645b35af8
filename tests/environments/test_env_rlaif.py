"""RLAIF: WildChat prompts, pairwise judging in both orders, unreadable verdicts, judge servers, ``process``."""

from __future__ import annotations

import itertools
import logging
import threading

import pytest
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.envs.data_loading import DatasetError
from atroposlib.envs.serve.group_validation import carries_no_signal
from atroposlib.testing.scripted_server import launch_scripted_server
from environments.rlaif_server import (
    RLAIFEnv,
    RLAIFEnvConfig,
    parse_verdict,
    preference_scores,
    row_to_item,
)
from tests.helpers.cli_runs import ENVIRONMENTS, FIXTURES, read_jsonl, run_env

WILDCHAT = FIXTURES / "wildchat_sample.jsonl"
ROWS = read_jsonl(WILDCHAT)
KIND = "What a lovely question! Here is my answer, with pleasure."
COLD = "Answer follows."


def policy_responder():
    """Token route (the policy): alternate a warm and a cold reply across the choices of a request."""

    def respond(prompt, index):
        return KIND if index % 2 == 0 else COLD

    return respond


def judge_responder(verdict_for):
    """Chat route (the judge): ``verdict_for(response_a, response_b) -> text``; the policy gets warm/cold."""
    calls = []
    lock = threading.Lock()

    def respond(prompt, index):
        user = prompt if isinstance(prompt, str) else prompt[-1]["content"]
        if "[Response A]" not in user:  # the policy (rollouts on /generate, evaluation replies on chat)
            return KIND if index % 2 == 0 else COLD
        response_a = user.split("[Response A]\n", 1)[1].split("\n\n[Response B]", 1)[0]
        response_b = user.split("[Response B]\n", 1)[1].split("\n\n[End of responses]", 1)[0]
        with lock:
            calls.append((response_a, response_b, prompt[0]["content"], user))
        return verdict_for(response_a, response_b)

    respond.calls = calls
    return respond


def prefers_kind(a, b):
    return (
        "<think>The first one is warmer.</think>\\boxed{A}" if a == KIND else "<think>Hmm.</think> \\boxed{B}"
    )


def _env(tiny_model_dir, base_url, **overrides) -> RLAIFEnv:
    values = {
        "tokenizer_name": str(tiny_model_dir),
        "use_wandb": False,
        "dataset_path": str(WILDCHAT),
        "max_token_length": 2048,
        **overrides,
    }
    server = APIServerConfig(base_url=base_url, model_name="m", server_type="vllm")
    return RLAIFEnv(RLAIFEnvConfig(**values), server)


def test_prompts_end_at_the_last_user_turn():
    item = row_to_item(ROWS[6], 6, "f")
    assert [m["role"] for m in item.messages] == ["user", "assistant", "user"]
    assert item.messages[-1]["content"] == "Which other planets have rings?"
    assert item.reference == "Jupiter, Uranus and Neptune have faint rings."
    assert set(item.messages[0]) == {"role", "content"}  # WildChat's extra keys are dropped
    assert row_to_item(ROWS[7], 7, "f").reference is None
    with pytest.raises(DatasetError, match=r"f: row 3: conversation\[0\] lacks 'content'"):
        row_to_item({"conversation": [{"role": "user"}]}, 3, "f")
    with pytest.raises(DatasetError, match="no user turn"):
        row_to_item({"conversation": [{"role": "assistant", "content": "hi"}]}, 0, "f")
    with pytest.raises(DatasetError, match="not a list"):
        row_to_item({"conversation": "hello"}, 0, "f")


@pytest.mark.parametrize(
    "judgement, verdict",
    [
        ("\\boxed{A}", "A"),
        ("<think>maybe \\boxed{A}</think>So: \\boxed{B}", "B"),
        ("\\boxed{Response A}", "A"),
        ("\\boxed{ b. }", "B"),
        ("\\boxed{A or B}", None),
        ("\\boxed{A} \\boxed{B}", None),
        ("I prefer A.", None),
        ("<think>never closed \\boxed{A}", None),
        ("", None),
    ],
)
def test_verdicts(judgement, verdict):
    assert parse_verdict(judgement) == verdict


def test_preferences_become_centred_win_shares():
    # Reply 0 preferred in both orders.
    assert preference_scores(2, [(0, 1, "A"), (1, 0, "B")]) == [0.5, -0.5]
    # A judge that always picks the first position cancels out.
    assert preference_scores(2, [(0, 1, "A"), (1, 0, "A")]) == [0.0, 0.0]
    # Ties give half a point each.
    assert preference_scores(2, [(0, 1, None), (1, 0, "B")]) == [0.25, -0.25]
    scores = preference_scores(
        3, [(0, 1, "A"), (1, 0, "B"), (0, 2, "A"), (2, 0, "B"), (1, 2, "A"), (2, 1, "B")]
    )
    assert scores == pytest.approx([0.5, 0.0, -0.5]) and sum(scores) == pytest.approx(0.0)
    assert preference_scores(2, []) == [0.0, 0.0]


async def test_replies_are_judged_pairwise_in_both_orders(tiny_model_dir):
    respond = judge_responder(prefers_kind)
    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        env = _env(tiny_model_dir, server.base_url, group_size=4, judgements_per_order=2)
        await env.setup()
        item = row_to_item(ROWS[0], 0, "f")
        group, _ = await env.collect_trajectories(item)
        paths = [r["path"] for r in server.requests]
    # 4 replies: 6 pairs x 2 orders, each asked for 2 verdicts.
    assert paths.count("/generate") == 1 and paths.count("/v1/chat/completions") == 12
    shown = {(a, b) for a, b, _, _ in respond.calls}
    assert (KIND, COLD) in shown and (COLD, KIND) in shown
    # A warm reply beats both cold ones (8 of 8 verdicts) and splits with the other warm one (2 of 4): 10/12;
    # a cold one wins 2 of 12. Centred on the mean share 1/2.
    assert group["scores"] == pytest.approx([1 / 3, -1 / 3, 1 / 3, -1 / 3])
    system, user = respond.calls[0][2], respond.calls[0][3]
    assert "\\boxed{A} or \\boxed{B}" in system and "warm, curious" in user and "Write a haiku" in user
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for tokens, masks in zip(group["tokens"], group["masks"], strict=True):
        assert "[Response A]" not in tokenizer.decode(tokens)  # judge requests are never trained
        trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=True)
        assert trained in (KIND, COLD)


async def test_unreadable_judgements_are_ties_and_logged(tiny_model_dir, caplog):
    respond = judge_responder(lambda a, b: "They are both fine, I cannot choose.")
    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        env = _env(tiny_model_dir, server.base_url, judge_prompt="Reward brevity.")
        await env.setup()
        with caplog.at_level(logging.WARNING):
            group, backlog = await env.collect_trajectories(row_to_item(ROWS[1], 1, "f"))
    assert group["scores"] == [0.0, 0.0] and backlog == []  # all ties: no learning signal, not sent by serve
    assert carries_no_signal(group)
    assert "unreadable judgement counted as a tie" in caplog.text
    assert env.unreadable_buffer == [1.0, 1.0]
    assert "Reward brevity." in respond.calls[0][3]


async def test_a_reply_cut_at_its_budget_scores_minus_one(tiny_model_dir):
    def respond(prompt, index):
        return "short" if index == 0 else "a much longer reply " * 20

    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        env = _env(tiny_model_dir, server.base_url, max_tokens=12)
        await env.setup()
        group, _ = await env.collect_trajectories(row_to_item(ROWS[2], 2, "f"))
        paths = [r["path"] for r in server.requests]
    assert group["scores"] == [0.0, -1.0] and "/v1/chat/completions" not in paths


async def test_long_prompts_are_skipped(tiny_model_dir):
    env = _env(tiny_model_dir, "http://127.0.0.1:9/v1", max_prompt_tokens=5)
    assert await env.collect_trajectories(row_to_item(ROWS[0], 0, "f")) == (None, [])


def test_process_with_a_separate_judge_server(tmp_path, tiny_model_dir):
    judge = judge_responder(prefers_kind)
    with (
        launch_scripted_server(respond=policy_responder(), tokenizer=tiny_model_dir) as policy,
        launch_scripted_server(
            respond=judge, tokenizer=tiny_model_dir, model_name="judge-model"
        ) as judge_server,
    ):
        result = run_env(
            ENVIRONMENTS / "rlaif_server.py",
            [
                "process",
                "--env.dataset_path", WILDCHAT,
                "--env.tokenizer_name", tiny_model_dir,
                "--env.use_wandb", "false",
                "--env.total_steps", "3",
                "--env.max_token_length", "2048",
                "--openai.base_url", policy.base_url,
                "--openai.model_name", "scripted-model",
                "--judge.base_url", judge_server.base_url,
                "--judge.model_name", "judge-model",
                "--judge.api_key", "x",
            ],
            cwd=tmp_path,
        )  # fmt: skip
        policy_paths = {r["path"] for r in policy.requests}
        judge_requests = judge_server.requests
    assert result.returncode == 0, result.stderr[-3000:]
    assert policy_paths == {"/generate"}
    assert judge_requests and {r["path"] for r in judge_requests} == {"/v1/chat/completions"}
    assert {r["body"]["model"] for r in judge_requests} == {"judge-model"}
    groups = read_jsonl(tmp_path / "data" / "rlaif.jsonl")
    assert len(groups) == 3 and all(g["scores"] == [0.5, -0.5] for g in groups)
    assert all(g["messages"][0][-1]["content"] == KIND for g in groups)


def test_evaluate_judges_against_the_reference_reply(scripted):
    counter = itertools.count()

    def judge(a, b):  # the policy's warm reply wins when shown first, loses when shown second
        next(counter)
        return "\\boxed{A}"

    args = ["--env.dataset_path", WILDCHAT]
    metrics, samples, _ = scripted.evaluate(RLAIFEnv, args, judge_responder(judge))
    assert metrics == {"eval/win_rate": 0.5, "eval/unreadable_judgements": 0.0}
    assert len(samples) == 7 and next(counter) == 14  # the row without a reference reply is left out


def test_judge_settings_come_from_flags_or_yaml(tmp_path):
    from atroposlib.envs.cli import parse_command

    default = parse_command(RLAIFEnv, ["process"]).resolve()
    assert "teacher_server_configs" not in default.extra_env_kwargs  # the policy's servers judge
    config = tmp_path / "rlaif.yaml"
    config.write_text("judge:\n  base_url: http://127.0.0.1:9/v1\n  model_name: yaml-judge\n")
    resolved = parse_command(RLAIFEnv, ["process", "--config", str(config), "--judge.api_key", "k"]).resolve()
    judges = resolved.extra_env_kwargs["teacher_server_configs"]
    judge = judges[0] if isinstance(judges, list) else judges
    assert (judge.model_name, judge.base_url, judge.api_key) == ("yaml-judge", "http://127.0.0.1:9/v1", "k")
