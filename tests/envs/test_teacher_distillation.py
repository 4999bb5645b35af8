"""TeacherDistillationEnv: both constructor orders, teacher logprobs attached per group, failures -> None."""

from __future__ import annotations

import json

import pytest

from atroposlib.envs.base import APIServerConfig, ScoredDataGroup
from atroposlib.envs.teacher_distillation_env import TeacherDistillationConfig, TeacherDistillationEnv
from atroposlib.testing.scripted_server import launch_scripted_server


class DistillEnv(TeacherDistillationEnv):
    name = "distill"

    async def setup(self):
        pass

    async def get_next_item(self):
        return None

    async def evaluate(self, *args, **kwargs):
        pass


class LegacySubclass(DistillEnv):
    """Calls super() in the BaseEnv order, like most environments do."""

    def __init__(self, config, server_configs, slurm=True, testing=False):
        super().__init__(config, server_configs, slurm, testing)


@pytest.fixture
def teacher(tiny_model_dir):
    with launch_scripted_server(responses=["x"], tokenizer=tiny_model_dir) as server:
        yield server


def teacher_config(server, tiny_model_dir):
    return APIServerConfig(
        model_name="teacher",
        base_url=server.base_url,
        api_key="x",
        server_type="vllm",
        tokenizer_name=str(tiny_model_dir),
        health_check=False,
    )


def cfg(tiny_model_dir, tmp_path, **kw):
    kw.setdefault("tokenizer_name", str(tiny_model_dir))
    kw.setdefault("use_wandb", False)
    kw.setdefault("group_size", 2)
    kw.setdefault("data_path_to_save_groups", str(tmp_path / "groups.jsonl"))
    return TeacherDistillationConfig(**kw)


def test_constructor_accepts_both_orders(tiny_model_dir, tmp_path, teacher):
    policy = [
        APIServerConfig(model_name="p", base_url="http://127.0.0.1:9/v1", api_key="x", health_check=False)
    ]
    tconf = teacher_config(teacher, tiny_model_dir)
    # BaseEnv order, teacher disabled
    env = LegacySubclass(cfg(tiny_model_dir, tmp_path), policy, False, True)
    assert env.teacher_server is None and len(env.server.servers) == 1
    # original teacher-env order, positional
    env = DistillEnv(cfg(tiny_model_dir, tmp_path, teacher_enabled=True), policy, tconf, False, False)
    assert env.teacher_server.servers[0].config.base_url == teacher.base_url
    # keyword
    env = DistillEnv(
        cfg(tiny_model_dir, tmp_path, teacher_enabled=True), policy, teacher_server_configs=[tconf]
    )
    assert env.teacher_server is not None
    # BaseEnv order with teacher_enabled: the teacher comes from teacher_config_init()

    class WithDefaultTeacher(LegacySubclass):
        @classmethod
        def teacher_config_init(cls):
            return tconf

    env = WithDefaultTeacher(cfg(tiny_model_dir, tmp_path, teacher_enabled=True), policy, False, False)
    assert env.teacher_server.servers[0].config.model_name == "teacher"
    with pytest.raises(ValueError, match="no teacher server is configured"):
        LegacySubclass(cfg(tiny_model_dir, tmp_path, teacher_enabled=True), policy, False, False)


def group(tokenizer, **extra):
    a = tokenizer.encode("one two three", add_special_tokens=False)
    b = tokenizer.encode("four five", add_special_tokens=False)
    g = ScoredDataGroup(tokens=[a, b], masks=[[-100] + a[1:], [-100] + b[1:]], scores=[1.0, 0.0])
    g.update(extra)
    return g


async def test_teacher_logprobs_are_attached(tiny_model_dir, tmp_path, teacher):
    env = DistillEnv(
        cfg(tiny_model_dir, tmp_path, teacher_enabled=True, teacher_top_k=2),
        [teacher_config(teacher, tiny_model_dir)],
        teacher_server_configs=teacher_config(teacher, tiny_model_dir),
    )
    g = group(env.tokenizer)
    skipped = group(env.tokenizer, group_overrides={"skip_teacher_top_k": True})
    assert await env.handle_send_to_api([g, skipped], do_send_to_api=False) == 2
    rows = [json.loads(line) for line in (tmp_path / "groups.jsonl").read_text().splitlines()]
    ids, lps = rows[0]["distill_token_ids"], rows[0]["distill_logprobs"]
    assert [len(x) for x in ids] == [len(t) for t in g["tokens"]]
    second_position = ids[0][1]
    assert second_position == [g["tokens"][0][1], g["tokens"][0][1] + 1]  # top-2 per position
    assert all(len(p) == 2 for p in lps[0][1:])
    assert rows[1]["distill_token_ids"] is None and rows[1]["distill_logprobs"] is None
    assert any(r["path"] == "/generate" for r in teacher.requests)
    # Finishing a run closes the teacher's connections as well as the policy servers'.
    session = env.teacher_server.servers[0].http._session
    assert session is not None and not session.closed
    await env._close_inference_clients()
    assert session.closed


async def test_teacher_failure_leaves_fields_none_and_sends_group(tiny_model_dir, tmp_path, teacher):
    env = DistillEnv(
        cfg(tiny_model_dir, tmp_path, teacher_enabled=True),
        [teacher_config(teacher, tiny_model_dir)],
        teacher_config(teacher, tiny_model_dir),
    )
    teacher.control(fail_next=10, fail_status=400)
    assert await env.handle_send_to_api(group(env.tokenizer), do_send_to_api=False) == 1
    row = json.loads((tmp_path / "groups.jsonl").read_text())
    assert row["distill_token_ids"] is None and row["distill_logprobs"] is None
    await env._close_inference_clients()


def test_teacher_with_a_different_vocabulary_is_refused(tiny_model_dir, tmp_path, teacher):
    from atroposlib.testing.tiny_model import TinyModelSpec, build_tiny_model

    other = build_tiny_model(TinyModelSpec(vocab_size=600, hidden_size=32, intermediate_size=64))
    tconf = teacher_config(teacher, tiny_model_dir).model_copy(update={"tokenizer_name": str(other)})
    with pytest.raises(ValueError, match="different vocabulary"):
        DistillEnv(cfg(tiny_model_dir, tmp_path, teacher_enabled=True), [tconf], teacher_server_configs=tconf)
