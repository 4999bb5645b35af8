"""Data-parallel training: two gloo ranks under torchrun train exactly what one process trains.

The end-to-end test runs the real ``atropos-grpo`` entry point under ``torchrun --nproc-per-node 2`` against
a real ``run-api`` and compares losses and weights with one process fed the same batches, including a
resume of the two-rank run from its checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from atroposlib.testing.api_process import launch_api
from example_trainer.grpo.checkpointing import STATE_JSON, STATE_TENSORS, read_trainer_state
from example_trainer.grpo.data import prepare_batch
from example_trainer.grpo.distributed import (
    DistContext,
    DistributedConfigError,
    local_micro_batches,
    micro_batches_per_rank,
    rank_device,
    resolve_ranks,
    shard_bounds,
)
from example_trainer.grpo.reporting import read_metrics
from tests.helpers.trainer import make_group, post_groups

REPO = Path(__file__).resolve().parents[2]

# three groups of two sequences per API batch; two ranks get three sequences each: micro-batches of 2 + 1
TRAINER_FLAGS = [
    "--device", "cpu", "--optimizer", "adamw", "--lr", "1e-3", "--batch-size", "2",
    "--gradient-accumulation-steps", "3", "--seq-len", "256", "--no-vllm", "--checkpoint-interval", "0",
    "--seed", "3", "--api-timeout", "60",
]  # fmt: skip
STEPS = 3


# --- units ------------------------------------------------------------------------------------------


def test_launcher_variables_win_over_default_flags():
    env = {"WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "0"}
    assert resolve_ranks(0, 1, env) == (2, 4, 0)
    assert resolve_ranks(2, 4, env) == (2, 4, 0)
    assert resolve_ranks(1, 2, {}) == (1, 2, 1)  # no launcher: the flags, local rank = rank


@pytest.mark.parametrize(
    ("rank", "world", "env", "message"),
    [
        (0, 2, {"WORLD_SIZE": "4"}, "--world-size 2 disagrees"),
        (1, 1, {"WORLD_SIZE": "2", "RANK": "0"}, "--trainer-rank 1 disagrees"),
        (3, 2, {}, "outside a world of 2"),
        (0, 1, {"WORLD_SIZE": "two"}, "WORLD_SIZE must be an integer"),
    ],
)
def test_inconsistent_layouts_are_one_line_errors(rank, world, env, message):
    with pytest.raises(DistributedConfigError, match=message):
        resolve_ranks(rank, world, env)


def test_each_rank_gets_its_own_cuda_device():
    assert rank_device("cuda", 3, 8) == "cuda:3"
    assert rank_device("cuda:0", 0, 1) == "cuda:0"
    assert rank_device("cpu", 1, 2) == "cpu"


@pytest.mark.parametrize(("n", "world", "bs"), [(6, 2, 2), (7, 2, 2), (5, 3, 4), (1, 2, 2), (9, 4, 1)])
def test_shards_cover_every_sequence_once_with_equal_micro_batch_counts(n, world, bs):
    groups = [make_group(n=1, seed=i, prompt_len=2, scores=[float(i)]) for i in range(n)]
    batch = prepare_batch(groups, micro_batch_size=bs)
    seen, counts = [], set()
    for rank in range(world):
        start, end = shard_bounds(n, rank, world)
        micro = local_micro_batches(batch, DistContext(rank=rank, world_size=world), bs)
        counts.add(len(micro))
        rows = [r for mb in micro if mb is not None for r in mb.tokens]
        assert len(rows) == end - start
        assert all(mb is None or mb.num_sequences <= bs for mb in micro)
        seen.extend(rows)
    assert counts == {micro_batches_per_rank(n, world, bs)}
    full = torch.cat([mb.tokens for mb in batch.micro_batches])
    assert torch.equal(torch.stack(seen), full)


# --- two ranks against one process ------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def _train(launcher: list[str], model: Path, api_url: str, save: Path, steps: int, *extra: str) -> None:
    cmd = [
        *launcher, "-m", "example_trainer.grpo", "--model", str(model), "--atropos-url", api_url,
        "--save-path", str(save), "--training-steps", str(steps), *TRAINER_FLAGS, *extra,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]


def _losses(save: Path) -> list[float]:
    metrics = read_metrics(save / "metrics.jsonl")
    return [metrics[s]["train/loss"] for s in sorted(metrics) if "train/loss" in metrics[s]]


def test_two_gloo_ranks_match_one_process_and_resume(tmp_path, tiny_model_dir):
    one, two = tmp_path / "one", tmp_path / "two"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    with launch_api(data_dir=tmp_path / "api1") as api1, launch_api(data_dir=tmp_path / "api2") as api2:
        for api in (api1, api2):  # the same groups, so both runs see the same batches
            post_groups(api.url, 3 * STEPS, seed=7)
        _train([sys.executable], tiny_model_dir, api1.url, one, STEPS)
        # two ranks: two steps, then a resumed run for the last one
        _train(torchrun, tiny_model_dir, api2.url, two, STEPS - 1)
        _train(torchrun, tiny_model_dir, api2.url, two, STEPS, "--resume", "latest")

    single, double = _losses(one), _losses(two)
    assert len(single) == len(double) == STEPS
    assert double == pytest.approx(single, rel=1e-5, abs=1e-6)
    assert _metric(two, "train/grad_norm") == pytest.approx(_metric(one, "train/grad_norm"), rel=1e-4)
    _assert_same_weights(one / "final_model", two / "final_model", tiny_model_dir)
    # rank 0 alone wrote: one metrics line per step, no stray temporary checkpoints
    assert sorted(p.name for p in two.iterdir() if p.name.startswith((".", "step_", "final"))) == [
        "final_model"
    ]


#: AdamW moves an element by ``lr * m / (sqrt(v) + eps)`` per step: never more than about ``lr`` early in
#: training (``|m| <= 1.01 sqrt(v)`` over the first few steps, by Cauchy-Schwarz), whatever the gradient.
MAX_STEP = 1.1
#: Largest relative difference allowed between two runs' updates, each element weighted by the gradient it
#: saw (see :func:`_assert_same_weights`). Rounding noise gives ~1e-4; a rank's gradient missing or counted
#: twice gives ~0.1-1.
UPDATE_TOLERANCE = 1e-2


def _second_moments(checkpoint: Path, initial_dir: Path) -> dict[str, torch.Tensor]:
    """AdamW's bias-corrected second moment ``v / (1 - beta2 ** t)`` of every trained tensor, by name: the
    mean squared gradient each element saw."""
    from transformers import AutoModelForCausalLM

    state = json.loads((checkpoint / STATE_JSON).read_text())
    tensors = load_file(str(checkpoint / STATE_TENSORS))
    beta2 = state["optimizer"]["param_groups"][0]["betas"][1]
    names = [name for name, _ in AutoModelForCausalLM.from_pretrained(initial_dir).named_parameters()]
    return {
        name: tensors[f"optimizer.{i}.exp_avg_sq"] / (1 - beta2 ** state["step"])
        for i, name in enumerate(names)
    }


def _assert_same_weights(a: Path, b: Path, initial_dir: Path, lr: float = 1e-3) -> None:
    """Two runs trained on the same batches made the same update, as far as the gradients determine it.

    Per element the weights may differ by much more than float rounding: where an element's gradient is
    about the size of the rounding noise (the key bias under rotary positions, whose gradient nearly
    cancels: adding it to every key shifts a query's scores by almost the same amount), AdamW divides the
    noise by its own size and takes a step of up to ``lr`` in a direction the noise picks; the following
    steps then start from weights that differ there. So each element is held only to AdamW's bound
    (``2 * MAX_STEP * lr`` per step), and the update as a whole, each element weighted by the root mean
    squared gradient it saw (``sqrt(v)`` from run ``a``'s optimizer state), must agree within
    :data:`UPDATE_TOLERANCE`: the first-order change of the loss the weights make is the same.
    """
    w1 = load_file(str(a / "model.safetensors"))
    w2 = load_file(str(b / "model.safetensors"))
    initial = load_file(str(Path(initial_dir) / "model.safetensors"))
    assert w1.keys() == w2.keys()
    steps = read_trainer_state(a).step
    gradient_scale = {name: v.sqrt() for name, v in _second_moments(a, initial_dir).items()}
    assert gradient_scale.keys() <= w1.keys()
    moved = 0.0
    for name, scale in gradient_scale.items():
        update, other = w1[name] - initial[name], w2[name] - initial[name]
        assert update.shape == other.shape == scale.shape, name
        assert float((update - other).abs().max()) <= 2 * MAX_STEP * steps * lr, name
        difference = float((scale * (other - update)).norm() / (scale * update).norm().clamp(min=1e-30))
        assert difference <= UPDATE_TOLERANCE, f"{name}: updates differ by {difference:.3g} (relative)"
        moved = max(moved, float(update.abs().max()))
    assert moved > lr, "training changed nothing"


def _metric(save: Path, name: str) -> list[float]:
    metrics = read_metrics(save / "metrics.jsonl")
    return [metrics[s][name] for s in sorted(metrics) if name in metrics[s]]


def test_fsdp_ranks_match_one_process_and_checkpoints_resume_either_way(tmp_path, tiny_model_dir):
    """FSDP over two gloo ranks: the same losses, gradient norms and weights as one process; its
    checkpoints are ordinary Hugging Face directories that resume under FSDP and in one process, and a
    one-process checkpoint resumes under FSDP."""
    steps = 4
    one, sharded = tmp_path / "one", tmp_path / "fsdp"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    fsdp = ("--distributed-strategy", "fsdp")
    with launch_api(data_dir=tmp_path / "api1") as api1, launch_api(data_dir=tmp_path / "api2") as api2:
        for api in (api1, api2):
            post_groups(api.url, 3 * steps, seed=7)
        _train([sys.executable], tiny_model_dir, api1.url, one, steps)
        # step 1 under FSDP; step 2 resumed under FSDP; step 3 resumed in one process; step 4 under FSDP again
        _train(torchrun, tiny_model_dir, api2.url, sharded, 1, *fsdp)
        _train(torchrun, tiny_model_dir, api2.url, sharded, 2, *fsdp, "--resume", "latest")
        fsdp_checkpoint = load_file(str(sharded / "final_model" / "model.safetensors"))
        _train([sys.executable], tiny_model_dir, api2.url, sharded, 3, "--resume", "latest")
        _train(torchrun, tiny_model_dir, api2.url, sharded, steps, *fsdp, "--resume", "latest")

    losses = _metric(sharded, "train/loss")
    assert len(losses) == steps
    assert losses == pytest.approx(_metric(one, "train/loss"), rel=1e-5, abs=1e-6)
    assert _metric(sharded, "train/grad_norm") == pytest.approx(_metric(one, "train/grad_norm"), rel=1e-4)
    # the gathered checkpoint holds every tensor whole (tied embeddings once), as save_pretrained writes it
    initial = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    assert {k: v.shape for k, v in fsdp_checkpoint.items()} == {k: v.shape for k, v in initial.items()}
    _assert_same_weights(one / "final_model", sharded / "final_model", tiny_model_dir)
    assert sorted(p.name for p in sharded.iterdir() if p.name.startswith((".", "step_", "final"))) == [
        "final_model"
    ]


# Run by torchrun on two gloo ranks: shards, trains one step, checkpoints and reloads the optimizer state.
_FSDP_PROBE = """
import sys

import torch
from safetensors.torch import load_file
from torch.distributed.tensor import DTensor

from example_trainer.grpo.checkpointing import gather_full_state, load_training_state, save_checkpoint
from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.distributed import barrier, init_distributed, is_sharded, wrap_model
from example_trainer.grpo.model import load_model_and_tokenizer, trainable_parameters
from example_trainer.grpo.step import create_optimizer

model_dir, save = sys.argv[1], sys.argv[2]
config = TrainingConfig(
    model_name=model_dir, device="cpu", optimizer="adamw", save_path=save, distributed_strategy="fsdp"
)
ctx = init_distributed(config)
model, tokenizer = load_model_and_tokenizer(config, to_device=False)
whole = sum(p.numel() for p in model.parameters())
model = wrap_model(model, ctx, config.distributed_strategy)
params = trainable_parameters(model)
assert is_sharded(model) and all(isinstance(p, DTensor) for p in params)
held = sum(p.to_local().numel() for p in params)
assert held <= whole // 2 + 1024, (held, whole)  # each of the two ranks holds about half
optimizer = create_optimizer(params, config)
tokens = torch.randint(3, 900, (2, 12), generator=torch.Generator().manual_seed(ctx.rank))
model(tokens).logits.pow(2).mean().backward()
torch.nn.utils.clip_grad_norm_(params, 1.0)
optimizer.step()
optimizer.zero_grad(set_to_none=True)
full = {name: p.full_tensor() for name, p in model.named_parameters()}  # collective
state = gather_full_state(model, optimizer)  # collective
if ctx.is_main:
    path = save_checkpoint(model, tokenizer, optimizer, config, 1, full_state=state)
    saved = load_file(str(path / "model.safetensors"))
    assert saved.keys() == full.keys(), sorted(saved.keys() ^ full.keys())
    assert all(torch.equal(saved[name], full[name]) for name in full)
else:
    assert not state.model  # only rank 0 holds the gathered state
barrier(ctx)
fresh = create_optimizer(params, config)
load_training_state(f"{save}/step_1", fresh, model)  # collective
for p in params:
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(fresh.state[p][key].to_local(), optimizer.state[p][key].to_local()), key
open(f"{save}/probe_ok_{ctx.rank}", "w").close()
"""


def test_fsdp_shards_the_model_and_round_trips_its_checkpoint(tmp_path, tiny_model_dir):
    """Each rank holds half the parameters; the checkpoint holds the whole weights; the optimizer state
    read back into a fresh optimizer equals each rank's shard of the saved one."""
    script = tmp_path / "probe.py"
    script.write_text(_FSDP_PROBE)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        str(script), str(tiny_model_dir), str(tmp_path / "ckpt"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("probe_ok_*")) == ["probe_ok_0", "probe_ok_1"]


def test_fsdp_is_refused_where_it_cannot_run(tiny_model_dir):
    from pydantic import ValidationError

    from example_trainer.grpo.config import TrainingConfig

    with pytest.raises(ValidationError, match="LoRA modes run with ddp"):
        TrainingConfig(
            model_name="m", distributed_strategy="fsdp", optimizer="adamw", weight_bridge_mode="lora_only"
        )
    with pytest.raises(ValidationError, match="needs optimizer adamw"):
        TrainingConfig(model_name="m", distributed_strategy="fsdp", optimizer="adamw_8bit")
    cmd = [
        sys.executable, "-m", "example_trainer.grpo", "--model", str(tiny_model_dir),
        "--distributed-strategy", "fsdp", "--optimizer", "adamw_8bit",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "needs optimizer adamw" in proc.stderr
    assert "Traceback" not in proc.stderr
