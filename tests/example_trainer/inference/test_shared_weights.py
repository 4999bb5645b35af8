"""Single-copy weights and the no-disk weight hand-off, against the hf inference server as its own process.

* ``shared_vllm``: the trainer builds its model over the server's parameters (CPU shared memory), takes an
  optimizer step, and the server's next logprobs are the trainer model's, with no call to the server in
  between; the two processes hold one copy of the weights between them (proportional set size).
* ``--refresh-mode broadcast``: weights sent over a gloo group give the same server logprobs as the same
  weights loaded from a checkpoint.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import torch

from atroposlib.testing.api_process import free_port
from atroposlib.testing.tiny_model import build_tiny_model
from atroposlib.utils.processes import read_tail, stop_process, wait_until_ok
from example_trainer.demo.heldout_eval import load_causal_lm
from example_trainer.inference.served_logprobs import model_logprobs, served_greedy_logprobs
from example_trainer.inference.shared_weights import (
    SharedWeightsError,
    attach_manifest,
    build_shared_model,
    fetch_manifest,
    map_to_model,
    segment_paths,
)
from example_trainer.inference.weight_broadcast import WeightBroadcaster, unique_named_tensors

PROMPT = [5, 17, 29, 41, 53, 65, 77]


def _start_server(model_dir: Path, log: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "example_trainer.inference.hf_generation",
        "--model",
        str(model_dir),
        "--port",
        str(port),
        *extra,
    ]
    proc = subprocess.Popen(
        cmd, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True,  # noqa: SIM115
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_until_ok(proc, f"{url}/health", name="hf server", timeout=120, interval=0.2,
                  log_tail=lambda: read_tail(log), on_failure=lambda: stop_process(proc, 10))  # fmt: skip
    return proc, url


@pytest.fixture(scope="module")
def model_dir():
    return build_tiny_model()


@pytest.fixture(scope="module")
def shared_server(model_dir, tmp_path_factory):
    proc, url = _start_server(model_dir, tmp_path_factory.mktemp("hf") / "server.log", "--shared-weights")
    yield proc, url
    stop_process(proc, 10, process_group=True)


def server_logprobs(url: str) -> tuple[list[int], list[float]]:
    """Greedy continuation of :data:`PROMPT` and the server's logprob of each generated token."""
    return served_greedy_logprobs(url, PROMPT, max_tokens=6, timeout=60)


def _mapped(pid: int, paths: set[str]) -> tuple[int, int, list[tuple[int, int]]]:
    """(Rss, Pss) in bytes of ``pid``'s mappings of the shared-memory files ``paths``, and their address ranges."""
    rss = pss = 0
    current = False
    ranges = []
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            current = any(path in line for path in paths)
            if current:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                ranges.append((start, end))
        elif current and fields[0] == "Rss:":
            rss += int(fields[1]) * 1024
        elif current and fields[0] == "Pss:":
            pss += int(fields[1]) * 1024
    return rss, pss, ranges


def test_an_optimizer_step_is_served_without_a_reload_and_the_weights_exist_once(shared_server, model_dir):
    proc, url = shared_server
    manifest = fetch_manifest(url)
    tensors = attach_manifest(manifest)
    model = build_shared_model(model_dir, tensors)
    model.train()
    ids, before = server_logprobs(url)
    assert model_logprobs(model, PROMPT, ids) == pytest.approx(before, abs=1e-5)

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = torch.tensor([PROMPT + ids])
    model(batch, labels=batch).loss.backward()
    optimizer.step()
    optimizer.zero_grad()

    ids_after, served = server_logprobs(url)  # no reload, no update call
    assert model_logprobs(model, PROMPT, ids_after) == pytest.approx(served, abs=1e-5)
    reference, _ = load_causal_lm(model_dir)  # the weights the server started with
    assert (
        max(abs(a - b) for a, b in zip(model_logprobs(reference, PROMPT, ids_after), served, strict=True))
        > 1e-3
    )

    # One copy: every parameter of the trainer lies in its mapping of the server's segment(s), which both
    # processes map in full, and whose proportional set sizes add up to one copy of the weights.
    paths = segment_paths(manifest)
    assert paths and all(Path(p).exists() for p in paths)
    nbytes = sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())
    server_rss, server_pss, _ = _mapped(proc.pid, paths)
    trainer_rss, trainer_pss, ranges = _mapped(os.getpid(), paths)
    for name, param in model.named_parameters():
        assert any(lo <= param.data_ptr() < hi for lo, hi in ranges), f"{name} is not in the server's memory"
    assert server_rss >= 0.9 * nbytes and trainer_rss >= 0.9 * nbytes
    assert server_pss + trainer_pss <= 1.1 * nbytes


def test_fused_layouts_become_views_of_the_fused_tensor():
    qkv = torch.arange(12 * 4, dtype=torch.float32).view(12, 4)
    gate_up = torch.zeros(6, 4)
    served = {"m.0.self_attn.qkv_proj.weight": qkv, "m.0.mlp.gate_up_proj.weight": gate_up}
    shapes = {
        "m.0.self_attn.q_proj.weight": (8, 4), "m.0.self_attn.k_proj.weight": (2, 4),
        "m.0.self_attn.v_proj.weight": (2, 4), "m.0.mlp.gate_proj.weight": (3, 4), "m.0.mlp.up_proj.weight": (3, 4),
    }  # fmt: skip
    views = map_to_model(shapes, served)
    assert torch.equal(views["m.0.self_attn.k_proj.weight"], qkv[8:10])
    views["m.0.self_attn.v_proj.weight"].fill_(-1)
    assert bool((qkv[10:] == -1).all()) and bool((qkv[:10] >= 0).all())
    views["m.0.mlp.up_proj.weight"].fill_(2)
    assert bool((gate_up[3:] == 2).all()) and bool((gate_up[:3] == 0).all())
    with pytest.raises(SharedWeightsError, match="not in the server"):
        map_to_model({**shapes, "m.0.mlp.down_proj.weight": (4, 3)}, served)


def test_a_server_started_without_shared_weights_refuses(model_dir, tmp_path):
    proc, url = _start_server(model_dir, tmp_path / "plain.log")
    try:
        with pytest.raises(SharedWeightsError, match="without --shared-weights"):
            fetch_manifest(url)
        # The same server takes broadcast weights: equal to the same weights loaded from a checkpoint.
        trained, tokenizer = load_causal_lm(model_dir)
        with torch.no_grad():
            for p in trained.parameters():
                p.add_(0.02 * torch.randn_like(p))
        sender = WeightBroadcaster([url])
        try:
            assert sender.send(unique_named_tensors(trained)) > 0
            ids, via_broadcast = server_logprobs(url)
            assert model_logprobs(trained, PROMPT, ids) == pytest.approx(via_broadcast, abs=1e-5)
            base, _ = load_causal_lm(model_dir)
            sender.send(unique_named_tensors(base))  # the server is back on the initial weights
            checkpoint = tmp_path / "ckpt"
            trained.save_pretrained(checkpoint)
            requests.post(
                f"{url}/bridge/update_weights", json={"checkpoint_dir": str(checkpoint)}, timeout=60
            ).raise_for_status()
            ids_ckpt, via_checkpoint = server_logprobs(url)
            assert ids_ckpt == ids
            assert via_checkpoint == pytest.approx(via_broadcast, abs=1e-6)
        finally:
            sender.close()
    finally:
        stop_process(proc, 10, process_group=True)
