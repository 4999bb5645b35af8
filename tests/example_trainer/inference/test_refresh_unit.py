"""Checkpoint validation, compatibility checks and the manager's configuration and command line.

Everything here runs without a vLLM process, except the two start-failure tests, which launch the
real server and check that its failure is reported (with the log) instead of hanging.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from safetensors.torch import save_file

from example_trainer.inference.vllm_manager import (
    VllmError,
    VllmManager,
    VllmManagerConfig,
    VllmStartError,
    has_tokenizer,
    port_in_use,
)
from example_trainer.inference.weight_refresh import (
    CheckpointError,
    check_compatible,
    safetensors_shapes,
    validate_checkpoint_dir,
)


def _model_dir(
    path: Path, shapes: dict[str, tuple[int, ...]], config: dict | None = None, file="model.safetensors"
):
    import torch

    path.mkdir(parents=True, exist_ok=True)
    save_file({k: torch.zeros(v) for k, v in shapes.items()}, str(path / file))
    (path / "config.json").write_text(json.dumps(config or {"hidden_size": 4, "model_type": "qwen2"}))
    return path


SHAPES = {"model.embed_tokens.weight": (8, 4), "model.norm.weight": (4,)}


# --- validate_checkpoint_dir ----------------------------------------------------------------------
def test_validate_accepts_a_model_dir_and_resolves_it(tmp_path):
    d = _model_dir(tmp_path / "step_3", SHAPES)
    (d / "trainer_state").mkdir()
    save_file(
        {"optimizer.0.exp_avg": __import__("torch").zeros(2)}, str(d / "trainer_state" / "t.safetensors")
    )
    assert validate_checkpoint_dir(tmp_path / "step_3" / ".." / "step_3") == d.resolve()


def test_validate_rejects_missing_empty_and_stray_weight_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        validate_checkpoint_dir(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no \\*.safetensors"):
        validate_checkpoint_dir(tmp_path / "empty")
    d = _model_dir(tmp_path / "stray", SHAPES)
    save_file({"x": __import__("torch").zeros(1)}, str(d / "optimizer.safetensors"))
    with pytest.raises(CheckpointError, match="optimizer.safetensors"):
        validate_checkpoint_dir(d)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    assert validate_checkpoint_dir(d) == d.resolve()  # an index tells vLLM which files are shards


def test_validate_accepts_pytorch_bin(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "pytorch_model.bin").write_bytes(b"\0")
    assert validate_checkpoint_dir(tmp_path / "bin") == (tmp_path / "bin").resolve()


# --- check_compatible -----------------------------------------------------------------------------
def test_compatible_checkpoint_passes(tmp_path):
    ref = _model_dir(tmp_path / "ref", SHAPES)
    new = _model_dir(tmp_path / "new", {**SHAPES, "lm_head.weight": (8, 4)})  # tied head: ignorable
    assert safetensors_shapes(ref) == SHAPES
    check_compatible(new, {"hidden_size": 4, "model_type": "qwen2"}, ref)


@pytest.mark.parametrize(
    ("shapes", "config", "message"),
    [
        (
            SHAPES,
            {"hidden_size": 8, "model_type": "qwen2"},
            "hidden_size=8 differs from the served model's 4",
        ),
        ({"model.embed_tokens.weight": (8, 4)}, None, "lacks 1 tensors"),
        ({**SHAPES, "model.extra.weight": (2,)}, None, "tensors the served model lacks"),
        (
            {"model.embed_tokens.weight": (9, 4), "model.norm.weight": (4,)},
            None,
            "model.embed_tokens.weight: [9, 4] vs [8, 4]",
        ),
    ],
)
def test_incompatible_checkpoints_are_refused_before_loading(tmp_path, shapes, config, message):
    ref = _model_dir(tmp_path / "ref", SHAPES)
    new = _model_dir(tmp_path / "new", shapes, config)
    with pytest.raises(CheckpointError) as info:
        check_compatible(new, {"hidden_size": 4, "model_type": "qwen2"}, ref)
    assert message in str(info.value)


def test_compatibility_without_reference_checks_config_only(tmp_path):
    new = _model_dir(tmp_path / "new", {"a": (1,)})
    check_compatible(new, None, None)
    check_compatible(new, {"hidden_size": 4}, tmp_path / "not-a-dir")


# --- manager configuration -------------------------------------------------------------------------
def test_config_from_training_config_maps_names_and_modes(tmp_path):
    from example_trainer.grpo.config import TrainingConfig

    base = {"model_name": "m", "log_dir": str(tmp_path), "vllm_port": 9123, "max_model_len": 512}
    cfg = VllmManagerConfig.from_training_config(TrainingConfig(**base))
    assert (cfg.model_name, cfg.vllm_port, cfg.max_model_len, cfg.refresh_mode) == ("m", 9123, 512, "restart")
    assert cfg.log_dir == str(tmp_path)
    assert (
        VllmManagerConfig.from_training_config(TrainingConfig(**base, refresh_mode="reload")).refresh_mode
        == "reload"
    )
    lora = VllmManagerConfig.from_training_config(
        TrainingConfig(**base, weight_bridge_mode="lora_only", lora_r=32)
    )
    assert lora.refresh_mode == "lora" and lora.max_lora_rank == 64
    odd = VllmManagerConfig.from_training_config(
        TrainingConfig(**base, weight_bridge_mode="lora_only", lora_r=20)
    )
    assert odd.max_lora_rank == 64  # 2r = 40 is not a rank vLLM accepts: next one up
    assert (
        VllmManagerConfig.from_training_config(
            TrainingConfig(**base, weight_bridge_mode="lora_restart")
        ).refresh_mode
        == "lora_restart"
    )
    assert VllmManager(TrainingConfig(**base)).base_url == "http://127.0.0.1:9123/v1"


def test_config_rejects_unknown_fields():
    with pytest.raises(ValueError, match="extra"):
        VllmManagerConfig(vllm_prot=1)


def test_command_line(tmp_path, tiny_model_dir):
    no_tok = _model_dir(tmp_path / "step_2", SHAPES)
    cfg = VllmManagerConfig(
        model_name="org/base",
        vllm_port=9555,
        max_model_len=256,
        refresh_mode="lora",
        extra_args=["--seed", "3"],
    )
    mgr = VllmManager(cfg)
    mgr._served_name = "org/base"
    cmd = mgr.command(str(no_tok))
    joined = " ".join(cmd)
    assert cmd[1:3] == ["-m", "example_trainer.inference.vllm_api_server"]
    assert (
        "--served-model-name org/base" in joined
        and "--port 9555" in joined
        and "--max-model-len 256" in joined
    )
    assert "--tokenizer org/base" in joined  # the checkpoint has no tokenizer files
    assert "--enable-lora --max-lora-rank 32" in joined and cmd[-2:] == ["--seed", "3"]
    assert "--dtype float32" in joined  # CPU: float32 whatever the trainer's dtype
    assert "--tokenizer" not in mgr.command(str(tiny_model_dir))
    assert has_tokenizer(tiny_model_dir) and not has_tokenizer(no_tok)
    assert "--enable-lora" not in VllmManager(VllmManagerConfig()).command(str(tiny_model_dir))


def test_calls_before_start_are_clear_errors(tmp_path):
    mgr = VllmManager(VllmManagerConfig(log_dir=str(tmp_path)))
    assert mgr.log_path is None and not mgr.is_healthy()
    with pytest.raises(VllmError, match="never started"):
        mgr.ensure_running()
    with pytest.raises(FileNotFoundError):
        mgr.load_lora(str(tmp_path / "missing"), "x")
    mgr.stop()  # nothing to stop: no error


# --- start failures ------------------------------------------------------------------------------
def test_port_taken_by_another_process_is_reported_not_killed(tmp_path, tiny_model_dir):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
        mgr = VllmManager(VllmManagerConfig(vllm_port=port, log_dir=str(tmp_path), watch_interval=None))
        with pytest.raises(VllmStartError, match=f"port {port} .* already in use"):
            mgr.start(str(tiny_model_dir))
        assert mgr.pid is None
        other.getsockname()  # still ours and open


@pytest.mark.vllm
@pytest.mark.slow
def test_server_that_cannot_start_is_reported_with_its_log(tmp_path):
    pytest.importorskip("vllm")
    from atroposlib.testing.api_process import free_port

    bogus = tmp_path / "not-a-model"
    bogus.mkdir()
    (bogus / "config.json").write_text("{}")
    mgr = VllmManager(
        VllmManagerConfig(vllm_port=free_port(), log_dir=str(tmp_path / "logs"), watch_interval=None)
    )
    with pytest.raises(VllmStartError) as info:
        mgr.start(str(bogus))
    message = str(info.value)
    assert "exited with code" in message and str(mgr.log_path) in message
    assert mgr.log_path.read_text().startswith("$ ")  # the command heads the log
    assert len(message.splitlines()) > 2  # the log tail is included
