"""verifiers (v1) tasksets written for the tests (``tests/fixtures/vf_tasksets``) through ``serve``,
``process`` and ``evaluate``: a single-turn one (``vf_test_arith``: weighted rewards) and a multi-turn tool
one (``vf_test_tools``: a per-rollout toolset, shared state, a metric and a stop), token-exact trajectories,
the tasks' rewards as scores, and the features not carried."""

from __future__ import annotations

import collections
import itertools
import json
import os
import re
import threading
from typing import Any

import pytest
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.testing.scripted_server import launch_scripted_server
from environments.verifiers_server import VerifiersEnv, VerifiersEnvConfig
from tests.helpers.cli_runs import FIXTURES, run_env
from tests.helpers.multi_turn_runs import tool_call
from tests.helpers.single_turn_runs import offline_env

TASKSETS = FIXTURES / "vf_tasksets"
LOOKUP = "lookup_tools_lookup"


@pytest.fixture(autouse=True)
def tasksets_installed(monkeypatch):
    """The test tasksets importable here and in the commands' subprocesses, as an installed package is."""
    monkeypatch.syspath_prepend(str(TASKSETS))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(TASKSETS), os.environ.get("PYTHONPATH")]))
    )


def _text(prompt: Any) -> str:
    return json.dumps(prompt) if isinstance(prompt, list) else str(prompt)


def arith_responder():
    """The k-th request for each sum is right (1.5) for even k, boxed but wrong (0.5) for odd k."""
    seen: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def respond(prompt: Any, index: int) -> str:
        a, b = map(int, re.search(r"What is (\d+) \+ (\d+)\?", _text(prompt)).groups())
        with lock:
            k = seen[a]
            seen[a] += 1
        return f"<think>adding</think>The sum is \\boxed{{{a + b + k % 2}}}."

    return respond


def pencil_responder(right=lambda box, k: k % 2 == 0):
    """Episodes of box ``b`` in order of arrival (``k``): a right one looks the box up, then answers the
    count (1.5); a wrong one answers a wrong count at once (0.0). ``<think>`` markers find the episode."""
    seen: collections.Counter = collections.Counter()
    episodes = itertools.count()
    lock = threading.Lock()

    def respond(prompt: Any, index: int) -> str:
        text = _text(prompt)
        box = int(re.search(r"pencils are in box (\d+)", text).group(1))
        if re.search(r"<think>episode \d+</think>", text):  # the lookup's answer came back
            return f"There are {7 * box + 3} pencils."
        with lock:
            k = seen[box]
            seen[box] += 1
            marker = f"<think>episode {next(episodes)}</think>"
        return marker + tool_call(LOOKUP, box=box) if right(box, k) else f"{marker}There are {7 * box + 4}."

    return respond


def _trained_and_masked(group: dict[str, Any], tokenizer: Any) -> list[tuple[str, str]]:
    """Per sequence: the trained tokens' text and the masked tokens' text (logprobs checked when sent)."""
    out = []
    logprob_rows = group["inference_logprobs"] or [None] * len(group["tokens"])  # none from a chat endpoint
    for tokens, masks, logprobs in zip(group["tokens"], group["masks"], logprob_rows, strict=True):
        assert len(tokens) == len(masks) and masks[0] == -100
        assert all(m == t for t, m in zip(tokens, masks, strict=True) if m != -100)
        if logprobs is not None:
            assert len(logprobs) == len(tokens)
            assert all(lp == 1.0 for lp, m in zip(logprobs, masks, strict=True) if m == -100)
        trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)
        masked = tokenizer.decode([t for t, m in zip(tokens, masks, strict=True) if m == -100])
        out.append((trained, masked))
    return out


def check_exact_group(group: dict[str, Any], tokenizer: Any) -> list[str]:
    """Every turn of every episode exact: the model's replies (each ending at its end-of-turn token) are the
    trained tokens. Returns each sequence's masked text (prompt and tool answers)."""
    masked_texts = []
    for (trained, masked), messages in zip(
        _trained_and_masked(group, tokenizer), group["messages"], strict=True
    ):
        assert trained == "".join(m["content"] + "<|im_end|>" for m in messages if m["role"] == "assistant")
        masked_texts.append(masked)
    return masked_texts


def check_pencil_group(group: dict[str, Any], tokenizer: Any) -> None:
    """An exact group (:func:`check_exact_group`) whose right episodes looked the box up, got the count back
    in a masked tool turn and score 1.5, and whose wrong ones answered at once and score 0.0."""
    for masked, messages, score in zip(
        check_exact_group(group, tokenizer), group["messages"], group["scores"], strict=True
    ):
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        tools = [m["content"] for m in messages if m["role"] == "tool"]
        if score == 1.5:
            assert len(replies) == 2 and LOOKUP in replies[0] and len(tools) == 1
            assert '"content": "' in tools[0] and tools[0].split('"content": "')[1][:2] in masked
        else:
            assert score == 0.0 and len(replies) == 1 and not tools


async def _session_score(env: VerifiersEnv, task: Any, replies: list[str]) -> Any:
    session = await env.rollouts.session(task)
    for turn, reply in enumerate(replies):
        feedback = await session.step(reply, turn)
        if feedback.done:
            break
    return session, await session.score()


async def test_the_tasksets_rewards_are_the_score(tiny_model_dir):
    env = offline_env(VerifiersEnv, tiny_model_dir, vf_env_name="vf_test_arith", vf_env_args={"count": 10})
    await env.setup()
    assert len(env.train) == 9 and len(env.test) == 1  # a tenth held out
    task = env.train[2]  # What is 2 + 5?
    session = await env.rollouts.session(task)
    assert session.messages == [
        {"role": "system", "content": "Box your answer."},
        {"role": "user", "content": "What is 2 + 5?"},
    ]  # no tools: nothing declared
    replies = ["\\boxed{7}", "<think>2 and 5</think>so \\boxed{ 7 }", "\\boxed{8}", "7", "", "\\boxed{}"]
    verdicts = [(await _session_score(env, task, [r]))[1] for r in replies]
    assert [v.reward for v in verdicts] == [1.5, 1.5, 0.5, 0.0, 0.0, 0.5]
    assert verdicts[2].rewards == {"correct": 0.0, "boxed": 1.0}


async def test_tools_run_on_the_toolset_with_rollout_state_and_the_stop_ends_the_episode(tiny_model_dir):
    env = offline_env(VerifiersEnv, tiny_model_dir, vf_env_name="vf_test_tools", max_turns=8)
    await env.setup()
    task = env.train[2]  # box 2 holds 17 pencils
    session = await env.rollouts.session(task)
    system = session.messages[0]["content"]
    assert system.startswith("Answer with the number.\n\nYou can call these tools:\n<tools>\n")
    assert f'"name": "{LOOKUP}"' in system and '"box": {"title": "Box", "type": "integer"}' in system
    replies = [
        tool_call(LOOKUP, box=2),
        tool_call(LOOKUP, box=5),
        tool_call(LOOKUP, box="two"),
        "17 pencils.",
    ]
    feedback = [await session.step(r, t) for t, r in enumerate(replies[:3])]
    assert json.loads(feedback[0].messages[0]["content"].split("\n")[1]) == {"name": LOOKUP, "content": "17"}
    assert "Error executing tool lookup: no box 5 here" in feedback[1].messages[0]["content"]
    assert "invalid arguments" in feedback[2].messages[0]["content"]  # checked against the toolset's schema
    assert not any(f.done for f in feedback) and session.state.value.lookups == 1  # a raising call keeps none
    verdict = (await _session_score(env, task, replies))[1]
    assert (verdict.reward, verdict.rewards, verdict.metrics) == (
        1.5, {"correct": 1.0, "looked_up": 1.0}, {"tool_results": 3.0}
    )  # fmt: skip
    trace = session.trace()
    assert [m.role for m in trace.messages] == ["system", "user", *["assistant", "tool"] * 3]
    assert trace.messages[2].tool_calls[0].name == LOOKUP and trace.messages[3].content == "17"
    # three successful lookups: the task's @vf.stop ends the episode before the model is asked again
    stopped, verdict = await _session_score(env, task, [tool_call(LOOKUP, box=2)] * 3 + ["17"])
    assert stopped.stopped_by == "three_lookups" and len(stopped.exchanges) == 3
    assert verdict.rewards == {"correct": 0.0, "looked_up": 1.0}  # the last reply is the third call


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env.vf_env_name", "vf_test_sandboxed"], "task BuildTask needs a runtime (its own setup hook)"),
        (
            ["--env.vf_env_name", "vf_test_debate"],
            "exports its own Env (DebateEnv): multi-agent environments",
        ),
        (["--env.vf_env_name", "vf_test_intercepted"], "@vf.stop 'said_done' reads a Request or Response"),
        (["--env.vf_env_name", "vf_not_installed"], "taskset 'vf_not_installed' not found"),
        (
            ["--env.vf_env_name", "vf_test_arith", "--env.vf_env_args", '{"count": "many"}'],
            "bad --env.vf_env_args",
        ),
        ([], "--env.vf_env_name is not set"),
    ],
)
def test_what_is_not_carried_stops_the_command_in_one_line(args, message, tiny_model_dir, tmp_path):
    result = run_env(
        FIXTURES.parents[1] / "environments" / "verifiers_server.py",
        ["process", *args, "--env.tokenizer_name", tiny_model_dir, "--env.use_wandb", "false"],
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("server_type", ["vllm", None], ids=["token-exact", "chat-endpoint"])
def test_process_writes_groups_scored_by_the_taskset(scripted, server_type, tiny_model_dir):
    args = ["--env.vf_env_name", "vf_test_arith", "--env.group_size", "4", "--env.total_steps", "2",
            "--env.max_tokens_per_turn", "64"]  # fmt: skip
    groups = scripted.process(VerifiersEnv, args, arith_responder(), server_type=server_type)
    assert len(groups) == 2
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for group in groups:
        assert sorted(group["scores"]) == [0.5, 0.5, 1.5, 1.5]
        for (trained, _), messages in zip(
            _trained_and_masked(group, tokenizer), group["messages"], strict=True
        ):
            assert messages[-1]["role"] == "assistant" and "\\boxed" in messages[-1]["content"]
            reply = messages[-1]["content"] + "<|im_end|>"
            # token-exact: the server's own tokens; a chat endpoint: the template's rendering of the reply
            assert trained == reply if server_type else trained.rstrip("\n") == reply


def test_process_plays_multi_turn_tool_episodes_token_exactly(scripted, tiny_model_dir):
    args = ["--env.vf_env_name", "vf_test_tools", "--env.group_size", "4", "--env.total_steps", "2",
            "--env.max_tokens_per_turn", "64"]  # fmt: skip
    groups = scripted.process(VerifiersEnv, args, pencil_responder())
    assert len(groups) == 2
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for group in groups:
        assert sorted(group["scores"]) == [0.0, 0.0, 1.5, 1.5]
        check_pencil_group(group, tokenizer)


async def test_a_group_whose_scores_are_all_equal_is_returned(tiny_model_dir):
    responder = pencil_responder(right=lambda box, k: True)
    with launch_scripted_server(respond=responder, tokenizer=tiny_model_dir) as server:
        config = VerifiersEnvConfig(
            tokenizer_name=str(tiny_model_dir), use_wandb=False, vf_env_name="vf_test_tools", group_size=3
        )
        env = VerifiersEnv(
            config, APIServerConfig(base_url=server.base_url, model_name="m", server_type="vllm")
        )
        await env.setup()
        group, _ = await env.collect_trajectories(env.train[1])
    assert group["scores"] == [1.5, 1.5, 1.5]
    check_pencil_group(group, AutoTokenizer.from_pretrained(str(tiny_model_dir)))


def test_evaluate_reports_the_rewards_of_another_configuration(scripted):
    evaluation = scripted.evaluation(
        VerifiersEnv,
        ["--env.vf_env_name", "vf_test_tools", "--env.eval_vf_env_args", '{"count": 4}',
         "--env.max_tokens_per_turn", "64"],
        pencil_responder(right=lambda box, k: box % 2 == 0),
    )  # fmt: skip
    assert [s["task_idx"] for s in evaluation.samples] == [0, 1, 2, 3]
    assert [s["score"] for s in evaluation.samples] == [1.5, 0.0, 1.5, 0.0]
    assert [s["turns"] for s in evaluation.samples] == [2, 1, 2, 1]
    metrics = evaluation.metrics
    assert metrics["eval/mean_score"] == 0.75 and metrics["eval/percent_correct"] == 0.5
    assert metrics["eval/reward_correct"] == 0.5 and metrics["eval/reward_looked_up"] == 0.5
    assert metrics["eval/metric_tool_results"] == 0.5 and metrics["eval/mean_turns"] == 1.5


@pytest.mark.parametrize(
    "taskset, responder, scores",
    [("vf_test_tools", pencil_responder, [0.0, 1.5]), ("vf_test_arith", arith_responder, [0.5, 1.5])],
    ids=["multi-turn", "single-turn"],
)
def test_serve_sends_token_exact_groups(taskset, responder, scores, scripted, api, tiny_model_dir):
    served = scripted.serve(
        VerifiersEnv, ["--env.vf_env_name", taskset, "--env.group_size", "2", "--env.max_tokens_per_turn", "64"],
        responder(), api,
    )  # fmt: skip
    assert sorted(served.group["scores"]) == scores
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    check_exact_group(served.group, tokenizer)
    if taskset == "vf_test_tools":
        check_pencil_group(served.group, tokenizer)
    assert all(r["path"] == "/generate" for r in served.requests)


def test_evaluate_a_single_turn_taskset(scripted):
    def right_on_even_tasks(prompt: Any, index: int) -> str:
        a, b = map(int, re.search(r"What is (\d+) \+ (\d+)\?", _text(prompt)).groups())
        return f"\\boxed{{{a + b}}}" if a % 2 == 0 else f"\\boxed{{{a + b + 1}}}"

    evaluation = scripted.evaluation(
        VerifiersEnv,
        ["--env.vf_env_name", "vf_test_arith", "--env.eval_vf_env_args", '{"count": 4, "offset": 100}',
         "--env.max_tokens_per_turn", "64"],
        right_on_even_tasks,
    )  # fmt: skip
    assert [s["score"] for s in evaluation.samples] == [1.5, 0.5, 1.5, 0.5]  # 203, 205, 207, 209
    metrics = evaluation.metrics
    assert metrics["eval/mean_score"] == 1.0 and metrics["eval/percent_correct"] == 0.5
    assert metrics["eval/reward_correct"] == 0.5 and metrics["eval/reward_boxed"] == 1.0
