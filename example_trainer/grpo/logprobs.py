"""Per-token log-probabilities of a micro-batch, without padding waste and without the full logits.

What the loss needs from the model is, at every trained position, the log-probability of a few token ids
(the label, and for distillation the teacher's top-k ids): ``[B, K]`` or ``[B, K, k]`` numbers, not the
``[B, K, V]`` logits (``V`` = 152k entries for Qwen). :func:`sequence_logprobs` computes them two ways:

* **packed** (``packed=True``): the rows are laid end to end in one row of ``T = sum of their lengths``
  tokens whose position ids restart at 0 for each row (the padding-free layout of TRL and verl).
  Hugging Face models read restarting position ids as separate sequences when no attention mask is
  given: flash-attention runs them as variable-length sequences, SDPA and eager attention get a
  block-diagonal causal mask (which costs the whole ``T x T`` square, so packing pays only with
  flash-attention; see :func:`packs_efficiently`).
* **padded**: the rows as they are, cut after the micro-batch's last trained position (right padding
  plus causal attention: padding never reaches a real token).

Either way the output head runs only on the positions with something to score, in chunks of
``chunk_tokens`` positions, inside :class:`_TargetLogprobs`: each chunk's logits are made, reduced to the
wanted log-probabilities and dropped, and made again chunk by chunk in the backward pass, so at most one
chunk's ``[chunk, V]`` logits exist at any time. The head is replaced for the duration of the model's own
``forward`` call, so DDP's and FSDP's hooks (gradient synchronisation, parameter gathering) run as usual.
Models whose logits are changed after the head (soft-capping, scaling) or whose head is not a plain
linear layer (a LoRA-adapted head) get the full logits instead (:func:`plain_output_head`).

Shapes: ``B`` rows, ``K`` positions per row, ``k`` extra ids per position, ``n`` scored positions,
``H`` hidden size, ``V`` vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

from example_trainer.grpo.data import IGNORE_INDEX

#: Logit entries per chunk of the output head when ``chunk_tokens`` is not given (128 MiB in float32).
CHUNK_LOGITS = 2**25
#: Config attributes of models that change the logits after the output head: those get full logits.
_POST_HEAD_ATTRIBUTES = (
    "final_logit_softcapping",
    "logit_scale",
    "logits_scaling",
    "output_multiplier_scale",
)
#: Attention implementations that run packed rows as separate sequences (no ``T x T`` mask).
VARLEN_ATTENTION = frozenset({"flash_attention_2", "flash_attention_3", "kernels-community/flash-attn"})


def inner_model(model: Any) -> Any:
    """The module under a DistributedDataParallel wrapper (FSDP2 and PEFT wrap in place or pass through)."""
    from torch.nn.parallel import DistributedDataParallel

    return model.module if isinstance(model, DistributedDataParallel) else model


def plain_output_head(model: Any) -> torch.nn.Linear | None:
    """The model's output head when it is a plain linear layer whose output is the logits, else None."""
    inner = inner_model(model)
    get_head = getattr(inner, "get_output_embeddings", None)
    head = get_head() if get_head is not None else None
    if type(head) is not torch.nn.Linear:
        return None
    config = getattr(inner, "config", None)
    for name in _POST_HEAD_ATTRIBUTES:
        value = getattr(config, name, None)
        if value not in (None, 1, 1.0):
            return None
    return head


def packs_efficiently(model: Any) -> bool:
    """Whether the model's attention runs packed rows as variable-length sequences (flash-attention)."""
    config = getattr(inner_model(model), "config", None)
    return getattr(config, "_attn_implementation", None) in VARLEN_ATTENTION


def default_chunk_tokens(vocab_size: int) -> int:
    """Positions per chunk of the output head: :data:`CHUNK_LOGITS` logit entries."""
    return max(1, CHUNK_LOGITS // max(vocab_size, 1))


class _TargetLogprobs(torch.autograd.Function):
    """``log_softmax(h W^T + b) / t`` at the ids ``targets``, chunk by chunk; the logits are never stored.

    Inputs: ``hidden`` [n, H], ``weight`` [V, H], ``bias`` [V] or None, ``targets`` [n, m] (entries < 0
    give 0), ``temperature`` [n, 1], ``chunk`` positions per chunk. Output [n, m] float32 (float64
    for a float64 model).
    The backward pass makes each chunk's logits again: with ``p`` the softmax and ``g`` the incoming
    gradient, the logits' gradient is ``(onehot(targets)^T g - p * sum(g)) / t``.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk):  # noqa: ANN001, ANN205
        valid = targets >= 0
        ids = targets.clamp(min=0)
        dtype = torch.promote_types(weight.dtype, torch.float32)  # float32 (float64 for a float64 model)
        temperature = temperature.to(dtype)
        out = torch.empty(targets.shape, dtype=dtype, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk):
            end = start + chunk
            logits = F.linear(hidden[start:end], weight, bias).to(dtype) / temperature[start:end]  # [c, V]
            out[start:end] = logits.gather(1, ids[start:end]) - torch.logsumexp(logits, dim=-1, keepdim=True)
        ctx.save_for_backward(hidden, weight, bias, ids, valid, temperature)
        ctx.chunk = chunk
        return torch.where(valid, out, torch.zeros_like(out))

    @staticmethod
    def backward(ctx, grad_out):  # noqa: ANN001, ANN205
        hidden, weight, bias, ids, valid, temperature = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        dtype = temperature.dtype
        grad_out = torch.where(
            valid, grad_out.to(dtype), torch.zeros((), dtype=dtype, device=grad_out.device)
        )
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = torch.zeros(weight.shape, dtype=dtype, device=weight.device) if need_weight else None
        grad_bias = torch.zeros(bias.shape, dtype=dtype, device=bias.device) if need_bias else None
        for start in range(0, hidden.shape[0], ctx.chunk):
            end = start + ctx.chunk
            h, g = hidden[start:end], grad_out[start:end]
            logits = F.linear(h, weight, bias).to(dtype) / temperature[start:end]
            grad_logits = torch.softmax(logits, dim=-1).mul_(-g.sum(dim=1, keepdim=True))
            grad_logits.scatter_add_(1, ids[start:end], g)
            grad_logits = grad_logits.div_(temperature[start:end]).to(weight.dtype)  # [c, V]
            if need_hidden:
                grad_hidden[start:end] = grad_logits @ weight
            if need_weight:
                grad_weight += (grad_logits.t() @ h).to(dtype)
            if need_bias:
                grad_bias += grad_logits.to(dtype).sum(dim=0)
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        if grad_bias is not None:
            grad_bias = grad_bias.to(bias.dtype)
        return grad_hidden, grad_weight, grad_bias, None, None, None


@contextmanager
def _scoring_head(
    head: torch.nn.Linear,
    positions: torch.Tensor,
    targets: torch.Tensor,
    temperature: torch.Tensor,
    chunk: int,
) -> Iterator[None]:
    """While active, ``head(hidden)`` returns the log-probabilities [n, m] of ``targets`` at the flat
    ``positions`` of ``hidden`` [R, L, H] instead of logits."""

    def score(hidden: torch.Tensor) -> torch.Tensor:
        flat = hidden.reshape(-1, hidden.shape[-1]).index_select(0, positions)  # [n, H]
        return _TargetLogprobs.apply(flat, head.weight, head.bias, targets, temperature, chunk)

    head.forward = score
    try:
        yield
    finally:
        del head.forward


def _temperature(temperatures: torch.Tensor | None, rows: int) -> torch.Tensor:
    """[B, 1] float32 temperatures, <= 0 read as 1 (greedy rollouts)."""
    if temperatures is None:
        return torch.ones((rows, 1), dtype=torch.float32)
    t = temperatures.reshape(rows, 1).float()
    return torch.where(t > 0, t, torch.ones_like(t))


def sequence_logprobs(
    model: Any,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    temperatures: torch.Tensor | None,
    *,
    extra_ids: torch.Tensor | None = None,
    packed: bool = False,
    chunk_tokens: int | None = None,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities of the labels (and of ``extra_ids``) under temperature-scaled logits.

    Inputs: ``tokens`` [B, K] model input, ``labels`` [B, K] (-100: not scored), ``temperatures``
    [B, 1, 1] or None, ``extra_ids`` [B, K, k] more ids to score at each position (e.g. a teacher's
    top-k; entries < 0 are padding). Returns ``(logp [B, K], extra [B, K, k] or None)`` on ``device``, float32
    (float64 for a float64 model), 0 where nothing is scored: the same numbers as
    ``log_softmax(model(tokens).logits / t)`` gathered at those ids, differentiable with respect to the
    model's parameters.

    ``packed``: run the rows as one padding-free row (see the module docstring); ``chunk_tokens``:
    positions per chunk of the output head (default: :data:`CHUNK_LOGITS` logit entries per chunk).
    """
    b, k = labels.shape
    scored = labels != IGNORE_INDEX  # [B, K]
    if extra_ids is not None:
        scored = scored | (extra_ids >= 0).any(dim=-1)
    lengths = torch.where(scored, torch.arange(1, k + 1), 0).max(dim=1).values  # [B] last scored + 1
    targets = torch.where(labels == IGNORE_INDEX, -1, labels).unsqueeze(-1)  # [B, K, 1], -1: padding
    if extra_ids is not None:
        targets = torch.cat([targets, extra_ids.to(targets.dtype)], dim=-1)  # [B, K, 1 + k]
    temperature = _temperature(temperatures, b)
    rows_in = [r for r in range(b) if int(lengths[r]) > 0]
    head = plain_output_head(model)
    weight = head.weight if head is not None else next(inner_model(model).parameters())
    dtype = torch.promote_types(weight.dtype, torch.float32)
    logp = torch.zeros((b, k), dtype=dtype, device=device)
    extra = None if extra_ids is None else torch.zeros(extra_ids.shape, dtype=dtype, device=device)
    if not rows_in:
        return logp, extra
    rows = torch.tensor(rows_in)
    if packed:
        row_len = lengths[rows]  # [R]
        starts = torch.cumsum(row_len, 0) - row_len  # [R] offset of each row in the packed row
        keep = torch.arange(k).unsqueeze(0) < row_len.unsqueeze(1)  # [R, K]
        input_ids = tokens[rows][keep].unsqueeze(0)  # [1, T]
        position_ids = (torch.arange(k).unsqueeze(0).expand(len(rows_in), k))[keep].unsqueeze(0)  # [1, T]
        row_index, col_index = scored[rows].logical_and(keep).nonzero(as_tuple=True)
        flat_positions = starts[row_index] + col_index  # [n] positions in the packed row
        call = {"input_ids": input_ids.to(device), "position_ids": position_ids.to(device)}
    else:
        width = int(lengths.max())
        row_index, col_index = scored[rows, :width].nonzero(as_tuple=True)
        flat_positions = row_index * width + col_index
        call = {"input_ids": tokens[rows, :width].to(device)}
    source_rows = rows[row_index]  # [n] row of the batch each scored position belongs to
    wanted = targets[source_rows, col_index].to(device)  # [n, m]
    temp = temperature[source_rows].to(device)  # [n, 1]
    if head is not None:
        chunk = chunk_tokens or default_chunk_tokens(head.out_features)
        with _scoring_head(head, flat_positions.to(device), wanted, temp, chunk):
            scores = model(**call, use_cache=False).logits  # [n, m]
    else:  # full logits, then the same gather
        logits = model(**call, use_cache=False).logits
        flat = (
            logits.reshape(-1, logits.shape[-1]).index_select(0, flat_positions.to(device)).to(dtype) / temp
        )
        gathered = torch.log_softmax(flat, dim=-1).gather(1, wanted.clamp(min=0))
        scores = torch.where(wanted >= 0, gathered, torch.zeros_like(gathered))
    index = (source_rows.to(device), col_index.to(device))
    logp = logp.index_put(index, scores[:, 0])
    if extra is not None:
        extra = extra.index_put(index, scores[:, 1:])
    return logp, extra


__all__ = [
    "CHUNK_LOGITS",
    "VARLEN_ATTENTION",
    "default_chunk_tokens",
    "packs_efficiently",
    "plain_output_head",
    "sequence_logprobs",
]
