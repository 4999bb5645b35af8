"""Teacher-distillation environments: a teacher's top-k logprobs from an OpenAI-compatible server
(``example_trainer.inference.teacher_server``, the tiny model) attached to every group the student generates."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from atroposlib.envs.teacher_distillation_env import echo_prompt_topk
from atroposlib.testing.api_process import free_port
from atroposlib.utils.processes import stop_process, wait_until_ok
from environments.arithmetic_server_teacher_distill import ArithmeticTeacherDistillEnv
from environments.gsm8k_server_teacher_distill import GSM8kTeacherDistillEnv
from example_trainer.demo.heldout_eval import load_causal_lm
from tests.helpers.cli_runs import arithmetic_responder, read_jsonl


@pytest.fixture
def teacher_url(tiny_model_dir, tmp_path):
    """``example_trainer.inference.teacher_server`` serving the tiny model on a free loopback port."""
    port = free_port()
    log = open(tmp_path / "teacher.log", "w")  # closed in the finally below
    proc = subprocess.Popen(
        [sys.executable, "-m", "example_trainer.inference.teacher_server", "--model", str(tiny_model_dir),
         "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until_ok(
            proc, f"http://127.0.0.1:{port}/health", name="teacher server", timeout=120,
            log_tail=lambda: (tmp_path / "teacher.log").read_text()[-2000:],
        )  # fmt: skip
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_process(proc)
        log.close()


def test_groups_carry_the_teachers_logprobs_of_the_students_tokens(
    scripted, tiny_model_dir, tmp_path, teacher_url
):
    out = tmp_path / "groups.jsonl"
    scripted.command(
        ArithmeticTeacherDistillEnv,
        "process",
        ["--env.total_steps", "2", "--env.group_size", "4", "--env.data_path_to_save_groups", out,
         "--teacher.base_url", teacher_url, "--teacher.model_name", tiny_model_dir, "--env.teacher_top_k", "3"],
        arithmetic_responder(),
    )  # fmt: skip
    groups = read_jsonl(out)
    assert len(groups) == 2
    model, _ = load_causal_lm(tiny_model_dir)
    for group in groups:
        for tokens, ids, lps in zip(
            group["tokens"], group["distill_token_ids"], group["distill_logprobs"], strict=True
        ):
            assert len(ids) == len(lps) == len(tokens)
            assert ids[0] == [] and all(len(row) == 4 for row in ids[1:])
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([tokens])).logits[0].float(), dim=-1)
            for p in range(1, len(tokens)):
                # the sampled token first, then the teacher's three most likely others
                assert ids[p][0] == tokens[p]
                assert lps[p][0] == pytest.approx(logp[p - 1, tokens[p]].item(), abs=1e-4)
                top = [t for t in logp[p - 1].topk(4).indices.tolist() if t != tokens[p]][:3]
                assert ids[p][1:] == top
                assert lps[p][1:] == pytest.approx(logp[p - 1, top].tolist(), abs=1e-4)


def test_echo_answers_are_read_by_token_id_or_vocabulary_string(tiny_model_dir):
    _, tokenizer = load_causal_lm(tiny_model_dir)
    word = next(t for t in tokenizer.get_vocab() if t.isalpha() and len(t) > 2)
    wid = tokenizer.convert_tokens_to_ids(word)
    logprobs = SimpleNamespace(
        token_logprobs=[None, -0.5, -2.0],
        top_logprobs=[None, {"token_id:7": -0.5, f"token_id:{wid}": -1.0}, {word: -0.1, "token_id:7": -3.0}],
    )
    completion = SimpleNamespace(choices=[SimpleNamespace(logprobs=logprobs)])
    ids, lps = echo_prompt_topk(completion, [1, 7, 9], top_k=1, tokenizer=tokenizer)
    assert ids == [[], [7, wid], [9, wid]]
    assert lps == [[], [-0.5, -1.0], [-2.0, -0.1]]
    logprobs.top_logprobs = logprobs.top_logprobs[:2]
    with pytest.raises(ValueError, match="2 positions for 3 tokens"):
        echo_prompt_topk(completion, [1, 7, 9], top_k=1)


def test_gsm8k_teacher_variant_defaults():
    config, server = GSM8kTeacherDistillEnv.config_init()
    assert config.teacher_enabled and config.teacher_top_k == 4 and config.group_size == 8
    assert config.wandb_name == "gsm8k_teacher_distill"
    teacher = GSM8kTeacherDistillEnv.teacher_config_init()
    assert teacher.base_url == "http://localhost:9003/v1" and teacher.server_type == "vllm"
    assert ArithmeticTeacherDistillEnv.teacher_config_init().server_type == "openai"
