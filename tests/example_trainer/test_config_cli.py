"""TrainingConfig fields and flags (the original's names and defaults), bad-config errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from example_trainer import TrainingConfig, config_from_args, parse_args
from example_trainer.grpo import main
from example_trainer.grpo.cli import build_parser, describe_validation_error

ORIGINAL_DEFAULTS = {
    "lr": 1e-5,
    "training_steps": 10,
    "batch_size": 2,
    "seq_len": 2048,
    "gradient_accumulation_steps": 32,
    "warmup_steps": 0,
    "optimizer": "adamw_8bit",
    "adafactor_scale_parameter": False,
    "adafactor_relative_step": False,
    "clip_eps": 0.2,
    "save_path": "trained_model_checkpoints",
    "checkpoint_interval": 3,
    "vllm_restart_interval": 3,
    "vllm_port": 9001,
    "vllm_gpu": None,
    "vllm_gpu_memory_utilization": 0.45,
    "max_model_len": 4096,
    "dtype": "bfloat16",
    "use_wandb": False,
    "wandb_project": None,
    "wandb_group": None,
    "weight_bridge_mode": "none",
    "train_layer_indices": None,
    "trainer_rank": 0,
    "world_size": 1,
    "init_method": "env://",
    "num_inference_nodes": 0,
    "lora_r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.05,
    "lora_target_modules": None,
    "lora_layer_indices": None,
    "single_copy": False,
    "vllm_config_path": None,
    "debug_loading": False,
    "benchmark": False,
    "atropos_url": "http://localhost:8000",
    "log_dir": "./logs",
    "kl_coef": 0.0,
    "resume": None,
}


def test_original_defaults_from_cli_and_code(monkeypatch):
    monkeypatch.delenv("ATROPOS_API_KEY", raising=False)
    from_cli = config_from_args(parse_args(["--model", "m"]))
    from_code = TrainingConfig(model_name="m")
    for field, value in ORIGINAL_DEFAULTS.items():
        assert getattr(from_cli, field) == value, field
        assert getattr(from_code, field) == value, field
    assert from_cli.device in ("cpu", "cuda")
    assert from_cli.api_key is None


def test_every_original_flag_parses_to_its_field():
    argv = [
        "--model-name", "m", "--lr", "3e-4", "--training-steps", "7", "--batch-size", "4", "--seq-len", "512",
        "--gradient-accumulation-steps", "8", "--warmup-steps", "2", "--optimizer", "adafactor",
        "--adafactor-scale-parameter", "--adafactor-relative-step", "--clip-eps", "0.1", "--device", "cpu",
        "--save-path", "/tmp/x", "--checkpoint-interval", "0", "--vllm-restart-interval", "5",
        "--vllm-port", "9100", "--vllm-gpu", "1", "--gpu-memory-utilization", "0.3", "--max-model-len", "1024",
        "--dtype", "float16", "--use-wandb", "--wandb-project", "p", "--wandb-group", "g",
        "--weight-bridge-mode", "lora_restart", "--train-layer-indices", "0-1,3", "--trainer-rank", "0",
        "--world-size", "1", "--init-method", "tcp://x", "--num-inference-nodes", "2", "--lora-r", "8",
        "--lora-alpha", "16", "--lora-dropout", "0.1", "--lora-target-modules", "q_proj", "k_proj",
        "--lora-layer-indices", "1", "--vllm-config-path", "b.json", "--debug-loading", "--benchmark",
        "--atropos-url", "http://127.0.0.1:8001/", "--log-dir", "/tmp/logs",
    ]  # fmt: skip
    c = config_from_args(parse_args(argv))
    assert (c.model_name, c.lr, c.training_steps, c.batch_size, c.seq_len) == ("m", 3e-4, 7, 4, 512)
    assert (c.gradient_accumulation_steps, c.warmup_steps, c.optimizer) == (8, 2, "adafactor")
    assert c.adafactor_scale_parameter and c.adafactor_relative_step and c.use_wandb and c.debug_loading
    assert (c.clip_eps, c.device, c.save_path, c.checkpoint_interval) == (0.1, "cpu", "/tmp/x", 0)
    assert (c.vllm_restart_interval, c.vllm_port, c.vllm_gpu, c.vllm_gpu_memory_utilization) == (
        5,
        9100,
        1,
        0.3,
    )
    assert (c.max_model_len, c.dtype, c.wandb_project, c.wandb_group) == (1024, "float16", "p", "g")
    assert c.weight_bridge_mode == "lora_restart" and c.train_layer_indices == [0, 1, 3]
    assert (c.init_method, c.num_inference_nodes, c.lora_r, c.lora_alpha, c.lora_dropout) == (
        "tcp://x",
        2,
        8,
        16,
        0.1,
    )
    assert c.lora_target_modules == ["q_proj", "k_proj"] and c.lora_layer_indices == [1]
    assert c.vllm_config_path == "b.json" and c.benchmark and c.log_dir == "/tmp/logs"
    assert c.atropos_url == "http://127.0.0.1:8001"
    assert c.api_batch_size == 32
    c2 = config_from_args(parse_args(["--model", "m", "--vllm-gpu-memory-utilization", "0.6"]))
    assert c2.vllm_gpu_memory_utilization == 0.6


def test_new_flags():
    c = config_from_args(
        parse_args(
            [
                "--model",
                "m",
                "--kl-coef",
                "0.05",
                "--resume",
                "--refresh-mode",
                "reload",
                "--max-staleness",
                "2",
                "--api-key",
                "k",
                "--no-vllm",
                "--seed",
                "3",
                "--no-gradient-checkpointing",
            ]
        )  # fmt: skip
    )
    assert (c.kl_coef, c.resume, c.refresh_mode, c.max_staleness, c.api_key) == (
        0.05,
        "latest",
        "reload",
        2,
        "k",
    )
    assert c.use_vllm is False and c.seed == 3 and c.gradient_checkpointing is False
    assert config_from_args(parse_args(["--model", "m", "--resume", "/ck/step_3"])).resume == "/ck/step_3"


def test_api_key_from_environment(monkeypatch):
    monkeypatch.setenv("ATROPOS_API_KEY", "secret")
    assert config_from_args(parse_args(["--model", "m"])).api_key == "secret"
    assert TrainingConfig(model_name="m").api_key == "secret"


def test_help_shows_defaults_and_hides_the_key(monkeypatch):
    monkeypatch.setenv("ATROPOS_API_KEY", "secret")
    text = build_parser().format_help()
    assert "(default: 1e-05)" in text and "(default: adamw_8bit)" in text
    assert "secret" not in text


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--lr", "-1"], "--lr"),
        (["--training-steps", "0"], "--training-steps"),
        (["--clip-eps", "1.5"], "--clip-eps"),
        (["--train-layer-indices", "5-2"], "--train-layer-indices"),
        (["--atropos-url", "localhost:8000"], "--atropos-url"),
        (["--device", "gpu"], "--device"),
        (["--kl-coef", "-0.1"], "--kl-coef"),
    ],
)
def test_bad_values_name_the_flag(argv, flag, capsys):
    with pytest.raises(ValidationError) as info:
        config_from_args(parse_args(["--model", "m", *argv]))
    assert describe_validation_error(info.value).startswith(flag + ":")
    assert main(["--model", "m", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"atropos-grpo: error: {flag}:")


def test_missing_model_and_unknown_flags_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["--model", "m", "--no-such-flag"])
    assert info.value.code == 2


def test_unknown_fields_rejected_in_code():
    with pytest.raises(ValidationError, match="lrr"):
        TrainingConfig(model_name="m", lrr=1.0)


def test_shared_vllm_needs_one_local_trainer_process():
    assert (
        TrainingConfig(model_name="m", weight_bridge_mode="shared_vllm").weight_bridge_mode == "shared_vllm"
    )
    with pytest.raises(ValidationError, match="one trainer process"):
        TrainingConfig(model_name="m", weight_bridge_mode="shared_vllm", world_size=2)
    with pytest.raises(ValidationError, match="remote servers cannot share"):
        TrainingConfig(model_name="m", weight_bridge_mode="shared_vllm", inference_server_urls="http://h:1")
    from example_trainer import train_shared_vllm

    with pytest.raises(ValueError, match="train_shared_vllm needs weight_bridge_mode"):
        train_shared_vllm(TrainingConfig(model_name="m"))
