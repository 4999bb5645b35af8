"""Held-out accuracy of a causal LM on the demo task's evaluation split.

The demo measures the model before and after GRPO with this one function, on the same problems and with
the same decoding, so the two numbers are directly comparable. Decoding is greedy in float32 with
Hugging Face ``generate`` on the CPU: deterministic for given weights, independent of the inference
server, and a few seconds for a few hundred problems on the tiny model.

With ``samples`` > 0 the accuracy is instead the mean over that many replies per problem sampled at
``temperature`` (seeded): the expected reward of the policy GRPO trains, which moves with fewer steps than
the greedy reply does.

A reply is scored with the task's own scorer (:meth:`example_trainer.demo.task.DemoTask.score`: the
environment's reward).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from example_trainer.demo.arithmetic_task import as_demo_task
from example_trainer.demo.task import DemoTask


@dataclass(frozen=True)
class EvalSample:
    """One held-out problem: the question, the gold answer, the model's reply and whether it is right."""

    question: str
    answer: Any
    reply: str
    correct: bool


@dataclass
class EvalResult:
    """Accuracy (correct / total, 0.0 for an empty split) and every sample."""

    correct: int
    total: int
    samples: list[EvalSample] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0


def chat_prompt_ids(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """Token ids of ``messages`` under the chat template, ending with the assistant turn's header.

    Works with transformers 4.x (a list) and 5.x (a ``BatchEncoding``).
    """
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
    if isinstance(ids, Mapping) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return list(ids)


def load_causal_lm(model_dir: str | Path) -> tuple[Any, Any]:
    """Model (float32, eval mode, CPU) and tokenizer from a local Hugging Face directory."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype_kw = (
        {"dtype": torch.float32}
        if int(transformers.__version__.split(".")[0]) >= 5
        else {"torch_dtype": torch.float32}
    )
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), **dtype_kw)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return model, tokenizer


@torch.no_grad()
def chat_replies(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Sequence[Mapping[str, str]]],
    *,
    max_new_tokens: int = 8,
    batch_size: int = 128,
    samples: int = 0,
    temperature: float = 1.0,
) -> list[str]:
    """Greedy completions (special tokens dropped) of each chat prompt, in order; with ``samples`` > 0,
    that many completions per prompt sampled at ``temperature`` (the prompt's replies next to each other).

    Prompts are left-padded in batches of ``batch_size``; generation stops at the tokenizer's EOS.
    """
    sampling = (
        {
            "do_sample": True,
            "temperature": temperature,
            "top_p": 1.0,
            "top_k": 0,
            "num_return_sequences": samples,
        }
        if samples > 0
        else {"do_sample": False}
    )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    was_training = model.training
    model.eval()
    replies: list[str] = []
    try:
        for start in range(0, len(prompts), batch_size):
            encoded = [chat_prompt_ids(tokenizer, p) for p in prompts[start : start + batch_size]]
            width = max(len(ids) for ids in encoded)
            input_ids = torch.full((len(encoded), width), pad_id, dtype=torch.long)
            attention = torch.zeros((len(encoded), width), dtype=torch.long)
            for row, ids in enumerate(encoded):
                input_ids[row, width - len(ids) :] = torch.tensor(ids)
                attention[row, width - len(ids) :] = 1
            output = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=max_new_tokens,
                **sampling,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=pad_id,
            )
            for row in output[:, width:]:
                replies.append(tokenizer.decode(row.tolist(), skip_special_tokens=True).strip())
    finally:
        model.train(was_training)
    return replies


def evaluate_heldout(
    model: Any,
    tokenizer: Any,
    task: DemoTask | Mapping[str, Any],
    *,
    max_new_tokens: int = 8,
    batch_size: int = 128,
    score: Callable[[str, Any], float] | None = None,
    samples: int = 0,
    temperature: float = 1.0,
    seed: int = 0,
) -> EvalResult:
    """Accuracy of ``model`` on ``task.heldout()``; a reply is right when ``score(reply, answer)`` (default:
    ``task.score``) is 1.0. Greedy, one reply per problem; with ``samples`` > 0, that many replies per problem
    sampled at ``temperature`` under ``torch.manual_seed(seed)``, each counted (``total`` = problems x
    samples)."""
    task = as_demo_task(task)
    score = score or task.score
    items = list(task.heldout())
    if samples > 0:
        torch.manual_seed(seed)
    replies = chat_replies(
        model,
        tokenizer,
        [item.messages for item in items],
        max_new_tokens=max_new_tokens,
        batch_size=max(1, batch_size // max(1, samples)),
        samples=samples,
        temperature=temperature,
    )
    per_item = max(1, samples)  # each problem's replies are next to each other
    answered = [(items[i // per_item], reply) for i, reply in enumerate(replies)]
    graded = [
        EvalSample(item.question, item.answer, reply, score(reply, item.answer) == 1.0)
        for item, reply in answered
    ]
    return EvalResult(correct=sum(s.correct for s in graded), total=len(graded), samples=graded)


def evaluate_model_dir(model_dir: str | Path, task: DemoTask, **kwargs: Any) -> EvalResult:
    """:func:`evaluate_heldout` on the model saved in ``model_dir``."""
    model, tokenizer = load_causal_lm(model_dir)
    return evaluate_heldout(model, tokenizer, task, **kwargs)
