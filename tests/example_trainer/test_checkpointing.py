"""Checkpoint round trip (weights, optimizer, RNG, step), layout loadable by transformers/vLLM, resume lookup."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from example_trainer.grpo.checkpointing import (
    find_latest_checkpoint,
    list_checkpoints,
    load_training_state,
    read_trainer_state,
    resolve_resume_path,
    save_checkpoint,
)
from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.data import prepare_batch
from example_trainer.grpo.model import load_model_and_tokenizer, trainable_parameters
from example_trainer.grpo.step import create_optimizer, run_training_step
from tests.helpers.trainer import make_group


def _config(tiny_model_dir, tmp_path, **kw):
    base = dict(
        model_name=str(tiny_model_dir), device="cpu", optimizer="adamw", save_path=str(tmp_path), lr=1e-3
    )
    return TrainingConfig(**{**base, **kw})


def _batch(seed):
    return prepare_batch([make_group(n=4, seed=seed, scores=[1.0, 0.0, 0.2, 0.9])], 2)


def _draws():
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_round_trip_restores_weights_optimizer_rng_and_continues_identically(tiny_model_dir, tmp_path):
    cfg = _config(tiny_model_dir, tmp_path)
    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer(cfg)
    opt = create_optimizer(trainable_parameters(model), cfg)
    for step in range(2):
        run_training_step(model, opt, _batch(step), cfg, step)
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    path = save_checkpoint(model, tok, opt, cfg, step=2, extra={"api_step": 2})
    assert path.name == "step_2"
    expected_draws = _draws()
    run_training_step(model, opt, _batch(2), cfg, 2)
    expected_params = [p.detach().clone() for p in model.parameters()]

    # a "new process": fresh model from the checkpoint, fresh optimizer, scrambled RNGs
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    model2, _ = load_model_and_tokenizer(cfg, model_path=str(path))
    opt2 = create_optimizer(trainable_parameters(model2), cfg)
    state = load_training_state(path, opt2)
    assert state.step == 2 and state.extra == {"api_step": 2}
    assert state.config["model_name"] == str(tiny_model_dir)
    for k, v in opt.state_dict()["param_groups"][0].items():
        if k != "params":
            assert opt2.state_dict()["param_groups"][0][k] == v
    assert _draws() == expected_draws
    run_training_step(model2, opt2, _batch(2), cfg, 2)
    for a, b in zip(expected_params, model2.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_layout_is_loadable_by_transformers_and_vllm(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = _config(tiny_model_dir, tmp_path)
    model, tok = load_model_and_tokenizer(cfg)
    opt = create_optimizer(trainable_parameters(model), cfg)
    run_training_step(model, opt, _batch(0), cfg, 0)
    path = save_checkpoint(model, tok, opt, cfg, step=1, final=True)
    assert path.name == "final_model"
    # only the model's weights at the top level: vLLM loads every *.safetensors there
    assert sorted(p.name for p in path.glob("*.safetensors")) == ["model.safetensors"]
    assert not list(path.glob("*.bin")) and not list(path.rglob("*.pt"))
    loaded = AutoModelForCausalLM.from_pretrained(path)
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert loaded.config.use_cache is True
    assert AutoTokenizer.from_pretrained(path)("1 + 2")["input_ids"] == tok("1 + 2")["input_ids"]
    from example_trainer.inference.weight_refresh import validate_checkpoint_dir

    assert validate_checkpoint_dir(path) == path.resolve()
    meta = json.loads((path / "trainer_state" / "state.json").read_text())
    assert meta["step"] == 1 and meta["final"] is True and "optimizer" in meta and "rng" in meta


def test_lora_checkpoint_round_trip(tiny_model_dir, tmp_path):
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    cfg = _config(tiny_model_dir, tmp_path, weight_bridge_mode="lora_restart", lora_r=4)
    model, tok = load_model_and_tokenizer(cfg)
    opt = create_optimizer(trainable_parameters(model), cfg)
    run_training_step(model, opt, _batch(0), cfg, 0)
    path = save_checkpoint(model, tok, opt, cfg, step=1)
    assert path.name == "adapter_step_1"
    assert (path / "adapter_config.json").is_file() and (path / "adapter_model.safetensors").is_file()
    assert (tmp_path / "tokenizer" / "tokenizer.json").is_file()
    model2, _ = load_model_and_tokenizer(cfg)
    set_peft_model_state_dict(model2, load_file(str(path / "adapter_model.safetensors")))
    opt2 = create_optimizer(trainable_parameters(model2), cfg)
    assert load_training_state(path, opt2).step == 1
    for a, b in zip(trainable_parameters(model), trainable_parameters(model2), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert s1.keys() == s2.keys()
    for k in s1:
        torch.testing.assert_close(s1[k]["exp_avg_sq"], s2[k]["exp_avg_sq"], rtol=0, atol=0)


def test_adafactor_state_round_trip(tiny_model_dir, tmp_path):
    cfg = _config(tiny_model_dir, tmp_path, optimizer="adafactor")
    model, tok = load_model_and_tokenizer(cfg)
    opt = create_optimizer(trainable_parameters(model), cfg)
    run_training_step(model, opt, _batch(0), cfg, 0)
    path = save_checkpoint(model, tok, opt, cfg, step=1)
    opt2 = create_optimizer(trainable_parameters(model), cfg)
    load_training_state(path, opt2)
    assert opt2.state_dict()["param_groups"][0]["eps"] == opt.state_dict()["param_groups"][0]["eps"]
    assert opt2.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]


def test_latest_checkpoint_lookup(tiny_model_dir, tmp_path):
    cfg = _config(tiny_model_dir, tmp_path)
    model, tok = load_model_and_tokenizer(cfg)
    assert find_latest_checkpoint(tmp_path) is None
    assert resolve_resume_path("latest", tmp_path) is None
    assert resolve_resume_path(None, tmp_path) is None
    for step in (1, 3, 2):
        save_checkpoint(model, tok, None, cfg, step)
    # a half-written checkpoint (no trainer state) and stray dirs are ignored
    (tmp_path / "step_9").mkdir()
    (tmp_path / ".step_10.tmp-1").mkdir()
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1, 2, 3]
    assert find_latest_checkpoint(tmp_path).name == "step_3"
    save_checkpoint(model, tok, None, cfg, 3, final=True)
    assert resolve_resume_path("latest", tmp_path).name == "final_model"
    assert resolve_resume_path(str(tmp_path / "step_2"), tmp_path).name == "step_2"
    assert read_trainer_state(tmp_path / "step_2").step == 2
    with pytest.raises(FileNotFoundError, match="not a checkpoint directory"):
        resolve_resume_path(str(tmp_path / "step_9"), tmp_path)
    # re-saving the same step replaces it atomically
    save_checkpoint(model, tok, None, cfg, 2, extra={"again": True})
    assert read_trainer_state(tmp_path / "step_2").extra == {"again": True}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".step_2")]
