"""Checkpoints, adapters and reference logprobs for the inference-server tests.

References are computed with Hugging Face transformers in float32 on the same weights, so a match
proves vLLM serves exactly the checkpoint it was told to serve.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import requests

#: A fixed prompt ("What is 1+2?" in the tiny tokenizer's ids) used to compare logprobs.
PROMPT_IDS = [298, 270, 227, 23, 17, 24, 37]
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
)


def make_checkpoint(src: Path, dst: Path, *, seed: int, scale: float = 0.3, tokenizer: bool = True) -> Path:
    """Save ``src`` with Gaussian noise (``scale``) added to every parameter as a new model dir."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * scale)
    model.save_pretrained(dst, safe_serialization=True)
    if tokenizer:
        for name in TOKENIZER_FILES:
            if (src / name).exists():
                shutil.copy(src / name, dst / name)
    return dst


def make_adapter(base: Path, dst: Path, *, seed: int, rank: int = 8) -> Path:
    """A PEFT LoRA adapter on q/v projections with random (non-zero) A and B matrices."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft_model = get_peft_model(
        model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    )
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
    peft_model.save_pretrained(dst)
    return dst


def hf_prompt_logprobs(
    model_dir: Path, ids: list[int] = PROMPT_IDS, adapter: Path | None = None
) -> list[float]:
    """log p(ids[i] | ids[:i]) for i >= 1, from transformers in float32 (optionally with a LoRA adapter)."""
    import torch
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return [float(logprobs[i - 1, ids[i]]) for i in range(1, len(ids))]


def served_prompt_logprobs(
    root_url: str, ids: list[int] = PROMPT_IDS, headers: dict[str, str] | None = None
) -> list[float]:
    """The same quantities from the server's ``/generate`` (``prompt_logprobs``)."""
    resp = requests.post(
        f"{root_url}/generate",
        json={"prompt": {"prompt_token_ids": ids}, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0},
        headers=headers or {},
        timeout=60,
    )
    resp.raise_for_status()
    positions = resp.json()["prompt_logprobs"]
    assert positions[0] is None
    return [positions[i][str(ids[i])] for i in range(1, len(ids))]


def openai_prompt_logprobs(
    base_url: str, model: str, ids: list[int] = PROMPT_IDS, headers: dict[str, str] | None = None
) -> list[float]:
    """The same quantities through vLLM's OpenAI ``/v1/completions`` (``echo`` + ``logprobs``)."""
    resp = requests.post(
        f"{base_url}/completions",
        json={"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 0},
        headers=headers or {},
        timeout=60,
    )
    resp.raise_for_status()
    token_logprobs = resp.json()["choices"][0]["logprobs"]["token_logprobs"]
    return [float(x) for x in token_logprobs[1 : len(ids)]]


def assert_close(got: list[float], want: list[float], tol: float = 2e-3) -> None:
    assert len(got) == len(want)
    worst = max(abs(a - b) for a, b in zip(got, want, strict=True))
    assert worst < tol, f"max |diff| {worst:.5f} >= {tol}: {got} vs {want}"


def assert_differs(got: list[float], other: list[float], min_diff: float = 0.05) -> None:
    worst = max(abs(a - b) for a, b in zip(got, other, strict=True))
    assert worst > min_diff, f"logprobs did not change (max |diff| {worst:.5f})"
