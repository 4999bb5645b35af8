"""BaseEnv in-process: constructor contract, default group assembly, handle_send_to_api, checkpoints, logging.

Inference goes through the real ``ServerManager`` with its in-process fake backend (``testing=True``); the
tokenizer is the real tiny local one.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from atroposlib.envs.base import APIServerConfig, BaseEnv, ScoredDataGroup, ServerBaseline
from tests.helpers.sample_envs import CountingEnv, CountingEnvConfig, SingleRolloutEnv


def make_env(tiny_model_dir, tmp_path, cls=CountingEnv, testing=True, servers=None, **cfg):
    cfg.setdefault("tokenizer_name", str(tiny_model_dir))
    cfg.setdefault("use_wandb", False)
    cfg.setdefault("group_size", 2)
    cfg.setdefault("unsent_groups_path", str(tmp_path / "unsent.jsonl"))
    config = CountingEnvConfig(**cfg)
    return cls(config, servers if servers is not None else ServerBaseline(), slurm=False, testing=testing)


def group(n=2, scores=None, **extra):
    g = ScoredDataGroup(
        tokens=[[5, 6, 7] for _ in range(n)],
        masks=[[-100, 6, 7] for _ in range(n)],
        scores=scores if scores is not None else [float(i) for i in range(n)],
    )
    g.update(extra)
    return g


def test_constructor_contract(tiny_model_dir, tmp_path):
    env = make_env(tiny_model_dir, tmp_path)
    # attributes environments read or write
    for attr, value in {
        "items_sent_this_step": 0,
        "curr_step": 0,
        "max_token_len": -1,
        "wandb_prepend": None,
        "checkpoint_dir": "",
        "checkpoint_interval": -1,
        "rollouts_for_wandb": [],
        "completion_lengths": [],
        "backlog": [],
        "running_items": {},
        "env_id": None,
        "process_mode": False,
        "jsonl_writer": None,
        "eval_runner": None,
    }.items():
        assert getattr(env, attr) == value, attr
    assert env.status_dict == {}
    assert env.tokenizer.eos_token == "<|im_end|>"
    assert env.max_num_workers == 8  # max_num_workers_per_node * one (harness) server
    # ``name`` becomes the default wandb_name
    assert env.config.wandb_name == "counting"

    class Unnamed(CountingEnv):
        name = None

    assert make_env(tiny_model_dir, tmp_path, cls=Unnamed).config.wandb_name == "Unnamed"


def test_positional_constructor_and_single_server_config_used_as_given(tiny_model_dir, tmp_path):
    config = CountingEnvConfig(tokenizer_name=str(tiny_model_dir), use_wandb=False)
    single = APIServerConfig(
        model_name="m", base_url="http://127.0.0.1:9/v1", api_key="k", health_check=False
    )
    env = CountingEnv(config, single, False, False)
    assert [s.config.base_url for s in env.server.servers] == ["http://127.0.0.1:9/v1"]
    assert env.server.servers[0].config.api_key == "k"


def test_jsonl_path_gets_a_free_suffix(tiny_model_dir, tmp_path):
    out = tmp_path / "data" / "groups.jsonl"
    out.parent.mkdir()
    out.write_text("old\n")
    env = make_env(tiny_model_dir, tmp_path, data_path_to_save_groups=str(out))
    assert env.config.data_path_to_save_groups == str(tmp_path / "data" / "groups_1.jsonl")
    assert out.read_text() == "old\n"


async def test_default_collect_trajectories_keeps_logprobs_and_leaves_absent_fields_none(
    tiny_model_dir, tmp_path
):
    env = make_env(tiny_model_dir, tmp_path, cls=SingleRolloutEnv, group_size=4)
    await env.setup()
    group, backlog = await env.collect_trajectories(0)
    assert len(group["tokens"]) == 3  # the rollout returned as None is skipped instead of failing the group
    assert group["scores"] == [0.0, 2.0, 3.0]
    assert all(lp[:3] == [1.0, 1.0, 1.0] for lp in group["inference_logprobs"])
    for key in ("advantages", "ref_logprobs", "messages", "images", "overrides", "group_overrides"):
        assert group[key] is None, key
    assert backlog == ["follow-up-0"]


async def test_handle_send_validates_counts_and_writes_jsonl(tiny_model_dir, tmp_path, caplog):
    out = tmp_path / "groups.jsonl"
    env = make_env(tiny_model_dir, tmp_path, data_path_to_save_groups=str(out))
    caplog.set_level(logging.INFO, logger="atroposlib.envs.base")
    ragged = group(masks=[[-100, 6, 7], [-100, 6]])
    nan = group(scores=[1.0, float("nan")])
    same = group(scores=[0.5, 0.5])
    wrong_size = group(n=3)
    numpy_group = {
        "tokens": np.array([[5, 6, 7], [5, 6, 8]]),
        "masks": np.array([[-100, 6, 7], [-100, 6, 8]]),
        "scores": np.array([1.0, 0.0], dtype=np.float32),
        "group_overrides": None,  # an explicit None is accepted
    }
    sent = await env.handle_send_to_api(
        [ragged, None, nan, same, wrong_size, group(), numpy_group],
        item={"q": "item-7"},
        do_send_to_api=False,
    )
    assert sent == 2
    assert env.discard_counts == {"ragged": 1, "non_finite": 1, "identical_scores": 1, "wrong_group_size": 1}
    lines = [r.getMessage() for r in caplog.records if "discarded a group" in r.getMessage()]
    assert len(lines) == 4
    assert any(
        "[counting] discarded a group (ragged) for item {'q': 'item-7'}: sequence 1 has 3 tokens" in m
        for m in lines
    )
    # the JSONL file is flushed per line: readable while the writer is still open
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2
    assert rows[1]["tokens"] == [[5, 6, 7], [5, 6, 8]] and rows[1]["scores"] == [1.0, 0.0]
    assert rows[1]["group_overrides"] is None and rows[1]["distill_logprobs"] is None
    assert "env_id" not in rows[0]
    assert env.completion_lengths == [2, 2, 2, 2]
    assert env.groups_accepted_total == 2
    # wrong group size is fine when the group declares its own size
    assert (
        await env.handle_send_to_api(group(n=3, group_overrides={"group_size": 3}), do_send_to_api=False) == 1
    )


async def test_length_filter_and_message_fallback(tiny_model_dir, tmp_path):
    env = make_env(tiny_model_dir, tmp_path, include_messages=True)
    env.max_token_len = 3
    assert await env.handle_send_to_api(group(), do_send_to_api=False) == 0
    assert env.discard_counts["too_long"] == 1
    # process mode does not drop long sequences
    assert (
        await env.handle_send_to_api(group(), do_send_to_api=False, abort_on_any_max_length_exceeded=False)
        == 1
    )
    env.max_token_len = -1
    tok = env.tokenizer
    prompt = tok.encode("hello there", add_special_tokens=False)
    answer = tok.encode(" 42", add_special_tokens=False)
    g = ScoredDataGroup(
        tokens=[prompt + answer, prompt + answer],
        masks=[[-100] * len(prompt) + answer] * 2,
        scores=[1.0, 0.0],
    )
    captured = []

    async def keep(scored, item=None):
        captured.append(scored)

    env.add_rollouts_for_wandb = keep
    await env.handle_send_to_api(g, do_send_to_api=False)
    messages = captured[0]["messages"][0]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"] == tok.decode(prompt)
    assert messages[1]["content"] == tok.decode(answer)


async def test_checkpoints_restore_newest_not_after_current_step(tiny_model_dir, tmp_path):
    env = make_env(tiny_model_dir, tmp_path)
    env.checkpoint_dir = str(tmp_path / "ckpt")
    env.wandb_prepend = "counting_0"
    env.save_checkpoint(10)  # data=None writes nothing
    assert not (tmp_path / "ckpt").exists()
    env.save_checkpoint(10, {"iter": 10})
    env.save_checkpoint(20, {"iter": 20})
    env.save_checkpoint(30, {"iter": 30})
    folder = tmp_path / "ckpt" / "env_checkpoints" / "counting_0"
    assert sorted(p.name for p in folder.iterdir()) == ["step-10.json", "step-20.json", "step-30.json"]
    env.curr_step = 25
    env.load_checkpoint()
    assert env.iter == 20


async def test_wandb_log_without_wandb_clears_buffers(tiny_model_dir, tmp_path):
    env = make_env(tiny_model_dir, tmp_path)
    env.completion_lengths = [1, 2, 3]
    env.task_duration = [0.1, 0.2]
    env.runner.sender.discards_since_log["ragged"] = 2
    await env.wandb_log({"custom": 1})
    assert env.completion_lengths == [] and env.task_duration == []
    assert not env.runner.sender.discards_since_log


async def test_wandb_log_offline_run_has_base_server_and_discard_metrics(
    tiny_model_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    env = make_env(tiny_model_dir, tmp_path, use_wandb=True)
    logged = []
    import wandb

    env.runner.wandb.start_run(project="p", group=None, name="t")
    try:
        monkeypatch.setattr(wandb, "log", lambda metrics, step=None: logged.append((metrics, step)))
        env.wandb_prepend = "counting_0"
        env.curr_step = 3
        env.max_token_len = 10
        env.completion_lengths = list(range(1, 11))
        env.runner.sender.discards_since_log["ragged"] = 2
        await env.add_rollouts_for_wandb(group(), None)
        await env.wandb_log({"train/custom": 1.0})
    finally:
        env.runner.wandb.finish_run()
    metrics, step = logged[0]
    assert step == 3
    assert metrics["counting_0_train/custom"] == 1.0
    assert metrics["counting_0_train/completion_lengths"] == 5.5
    assert metrics["counting_0_train/completion_lengths_p95"] == pytest.approx(9.55)
    assert metrics["counting_0_train/completion_lengths_frac_near_max"] == pytest.approx(0.1)
    assert metrics["counting_0_train/groups_discarded"] == 2
    assert metrics["counting_0_train/groups_discarded/ragged"] == 2
    assert "counting_0_train/rollouts" in metrics


async def test_evaluate_log_writes_files_and_keeps_history(tiny_model_dir, tmp_path):
    env = make_env(tiny_model_dir, tmp_path, data_dir_to_save_evals=str(tmp_path / "evals"))
    env.curr_step = 4
    await env.evaluate_log(
        {"eval/acc": 0.5}, samples=[{"q": 1}], start_time=10.0, end_time=12.5, verbose=False
    )
    env.curr_step = 8
    await env.evaluate_log({"eval/acc": 0.75}, generation_parameters={"temperature": 0.0}, verbose=False)
    result = json.loads((tmp_path / "evals" / "metrics.json").read_text())
    assert result["results"]["atropos|counting_eval|0"] == {"eval/acc": 0.75}
    assert result["results"]["all"] == {"eval/acc": 0.75}
    assert result["config_general"]["generation_parameters"] == {"max_new_tokens": 2048, "temperature": 0.0}
    assert result["config_general"]["model_name"] == "default"  # the server config's model_name
    history = [json.loads(x) for x in (tmp_path / "evals" / "metrics_history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [4, 8]
    assert history[0]["config_general"]["total_evaluation_time_seconds"] == "2.5"
    assert (tmp_path / "evals" / "samples.jsonl").read_text() == '{"q": 1}\n'


def test_public_import_surface():
    import atroposlib.envs as envs
    import atroposlib.envs.base as base

    for name in (
        "BaseEnv",
        "BaseEnvConfig",
        "ScoredDataGroup",
        "ScoredDataItem",
        "EvalHandlingEnum",
        "APIServer",
        "APIServerConfig",
        "ServerBaseline",
        "ServerManager",
        "ServerManagerConfig",
        "ReasoningConfig",
        "Item",
        "Message",
        "UUID",
        "ENV_NAMESPACE",
        "OPENAI_NAMESPACE",
        "NAMESPACE_SEP",
        "resolve_openai_configs",
        "logger",
    ):
        assert hasattr(base, name), name
    from atroposlib.envs import BaseEnv as B  # noqa: F401
    from atroposlib.envs import ScoredDataGroup as G

    assert B is base.BaseEnv and G is base.ScoredDataGroup and envs.EvalHandlingEnum is base.EvalHandlingEnum
    assert issubclass(BaseEnv, object) and BaseEnv.cli.__self__ is BaseEnv


def test_tokenizer_chat_template_returns_token_lists(tiny_model_dir, tmp_path):
    env = make_env(tiny_model_dir, tmp_path)
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "42"}]
    ids = env.tokenizer.apply_chat_template(chat)
    assert isinstance(ids, list) and all(isinstance(t, int) for t in ids)
    assert ids == env.tokenizer.encode(
        env.tokenizer.apply_chat_template(chat, tokenize=False), add_special_tokens=False
    )
    prompt = env.tokenizer.apply_chat_template(chat[:1], add_generation_prompt=True)
    assert ids[: len(prompt)] == prompt and len(prompt) < len(ids)
    assert "input_ids" in env.tokenizer.apply_chat_template(chat, return_dict=True)
    assert isinstance(env.tokenizer.apply_chat_template(chat, tokenize=False), str)


async def test_sent_groups_carry_the_policy_step_they_were_generated_with(tiny_model_dir, tmp_path):
    from atroposlib.envs.serve.sending import POLICY_STEP

    env = make_env(tiny_model_dir, tmp_path)
    payloads = []

    async def capture(payload):
        payloads.append(payload)

    env._send_scored_data_to_api = capture
    env.curr_step = 9
    POLICY_STEP.set(7)  # the worker started collecting at step 7
    await env.handle_send_to_api([group(), group(group_overrides={"policy_step": 3, "temperature": 0.5})])
    assert [g["group_overrides"] for g in payloads[0]] == [
        {"policy_step": 7},
        {"policy_step": 3, "temperature": 0.5},  # an env's own value is kept
    ]
    POLICY_STEP.set(None)  # outside a worker: the current step
    await env.handle_send_to_api(group())
    assert payloads[1]["group_overrides"] == {"policy_step": 9}
    # process mode (nothing sent) leaves groups untouched
    kept = group()
    await env.handle_send_to_api(kept, do_send_to_api=False)
    assert "group_overrides" not in kept or kept["group_overrides"] is None
