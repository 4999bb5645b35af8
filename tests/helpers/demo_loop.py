"""The demo's task trained in one process: sample groups from the current policy, score them with the
arithmetic environment's scorer, optionally attach a teacher's top-k logprobs, and take the trainer's
optimizer step on them (``prepare_batch`` + ``run_training_step``, the code ``atropos-grpo`` runs).

Cheaper than the demo's processes (no API, no inference server), so learning tests can run one short
training per loss type; sampling is Hugging Face ``generate`` at temperature 1 on the policy itself.
"""

from __future__ import annotations

from typing import Any

import torch

from environments.arithmetic_server import ArithmeticTask, score_completion
from example_trainer.demo.heldout_eval import chat_prompt_ids, evaluate_heldout
from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.data import IGNORE_INDEX, prepare_batch
from example_trainer.grpo.model import load_model_and_tokenizer, trainable_parameters
from example_trainer.grpo.step import create_optimizer, run_training_step

#: The demo's task with its default settings (so its warm start is the demo's, from the same cache).
TASK = {"min_digits": 1, "max_digits": 2, "operations": ["+"], "seed": 0, "eval_size": 500}


@torch.no_grad()
def sample_groups(
    model: Any, tokenizer: Any, task: ArithmeticTask, start: int, prompts: int, group_size: int, max_new: int
) -> list[dict[str, Any]]:
    """Groups of ``group_size`` sampled replies (temperature 1) to training problems ``start`` ...
    ``start + prompts - 1``, as scored groups with the rollout's logprobs (what an environment sends); groups
    whose scores are all equal are left out."""
    model.eval()
    groups = []
    eos = tokenizer.eos_token_id
    for index in range(start, start + prompts):
        problem = task.train_problem(index)
        prompt = chat_prompt_ids(tokenizer, task.prompt_messages(problem))
        out = model.generate(
            input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new,
            num_return_sequences=group_size, eos_token_id=eos, pad_token_id=eos,
            output_scores=True, return_dict_in_generate=True,
        )  # fmt: skip
        steps = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)  # [G, T, V]
        group: dict[str, Any] = {"tokens": [], "masks": [], "scores": [], "inference_logprobs": []}
        for row, seq in enumerate(out.sequences[:, len(prompt) :].tolist()):
            end = seq.index(eos) + 1 if eos in seq else len(seq)
            reply = seq[:end]
            lps = steps[row, torch.arange(len(reply)), torch.tensor(reply)].tolist()
            group["tokens"].append(prompt + reply)
            group["masks"].append([IGNORE_INDEX] * len(prompt) + reply)
            group["inference_logprobs"].append([1.0] * len(prompt) + lps)
            text = tokenizer.decode(reply, skip_special_tokens=True)
            group["scores"].append(score_completion(text, problem.answer))
        if len(set(group["scores"])) > 1:  # as environments do: all-equal scores teach nothing
            groups.append(group)
    model.train()
    return groups


@torch.no_grad()
def attach_teacher(groups: list[dict[str, Any]], teacher: Any, top_k: int) -> None:
    """Each group's ``distill_token_ids``/``distill_logprobs`` from ``teacher`` in place, laid out as a
    teacher-distillation environment sends them: position ``p`` holds the token there first, then the
    teacher's ``top_k`` most likely others (position 0: none)."""
    for group in groups:
        ids_rows, lp_rows = [], []
        for tokens in group["tokens"]:
            logp = torch.log_softmax(teacher(torch.tensor([tokens])).logits[0].float(), dim=-1)
            ids, lps = [[]], [[]]
            for p in range(1, len(tokens)):
                others = [t for t in logp[p - 1].topk(top_k + 1).indices.tolist() if t != tokens[p]][:top_k]
                row = [tokens[p], *others]
                ids.append(row)
                lps.append(logp[p - 1, row].tolist())
            ids_rows.append(ids)
            lp_rows.append(lps)
        group["distill_token_ids"], group["distill_logprobs"] = ids_rows, lp_rows


def train_on_task(
    model_dir: str,
    config_updates: dict[str, Any],
    steps: int,
    *,
    prompts: int = 32,
    group_size: int = 8,
    max_new: int = 8,
    teacher: Any = None,
    top_k: int = 4,
    seed: int = 0,
) -> tuple[float, float, list[dict[str, float]]]:
    """Train the model in ``model_dir`` for up to ``steps`` optimizer steps on fresh groups each step (a step
    whose groups all had equal scores is skipped); returns (held-out accuracy before, after, per-step
    metrics). ``config_updates`` are ``TrainingConfig`` fields."""
    torch.manual_seed(seed)
    config = TrainingConfig(
        **{"model_name": str(model_dir), "device": "cpu", "optimizer": "adamw", "lr": 1e-4,
           "batch_size": prompts * group_size, "save_path": "unused", **config_updates}
    )  # fmt: skip
    model, tokenizer = load_model_and_tokenizer(config)
    optimizer = create_optimizer(trainable_parameters(model), config)
    task = ArithmeticTask(**TASK)
    before = evaluate_heldout(model, tokenizer, task, max_new_tokens=max_new).accuracy
    history = []
    for step in range(steps):
        groups = sample_groups(model, tokenizer, task, step * prompts, prompts, group_size, max_new)
        if not groups:
            continue
        if teacher is not None:
            attach_teacher(groups, teacher, top_k)
        batch = prepare_batch(groups, config.batch_size, shaping=config.score_shaping)
        history.append(run_training_step(model, optimizer, batch, config, step))
    after = evaluate_heldout(model, tokenizer, task, max_new_tokens=max_new).accuracy
    return before, after, history
