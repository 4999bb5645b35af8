"""The engine of the light inference server: a Hugging Face causal LM generating batches of queued jobs.

:class:`HfGenerator` loads the model, batches the jobs that arrive together into one forward pass per new
token (:meth:`HfGenerator.generate`) and swaps the served weights between batches (checkpoints, broadcast
tensors, LoRA adapters merged into a copy of the base weights). :func:`parse_generate_body` turns a
``/generate`` body into a job. The HTTP side is :mod:`example_trainer.inference.hf_generation`.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from example_trainer.inference.routes.errors import ApiError
from example_trainer.inference.weight_refresh import CheckpointError, check_compatible

logger = logging.getLogger("atropos-hf-generation")

#: Sampling parameters this server honours; anything else in a ``/generate`` body is refused.
_SUPPORTED_KEYS = frozenset(
    {"prompt", "stream", "n", "max_tokens", "temperature", "top_p", "top_k", "logprobs", "stop_token_ids",
     "skip_special_tokens", "detokenize", "min_tokens"}
)  # fmt: skip


class GenerateParams(BaseModel):
    """The sampling settings of one ``/generate`` request (vLLM's names and defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n: int = Field(1, ge=1, le=1024)
    max_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1)
    logprobs: int | None = Field(None, ge=0, le=0, description="only 0 (the sampled token) is served")
    stop_token_ids: tuple[int, ...] = ()
    skip_special_tokens: bool = True
    detokenize: bool = True
    min_tokens: int = Field(0, ge=0, le=0, description="only 0 is served")

    def batch_key(self) -> tuple[Any, ...]:
        """Requests with equal keys can share one ``generate`` call."""
        return (self.max_tokens, self.temperature, self.top_p, self.top_k, self.stop_token_ids)


@dataclass
class _Job:
    prompt_ids: list[int]
    params: GenerateParams
    future: Future = field(default_factory=Future)


def parse_generate_body(body: Any, tokenizer: Any, vocab_size: int, max_model_len: int) -> _Job:
    """Validate a ``/generate`` body into a job; raises ``ApiError(400)`` naming the offending field."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    unknown = sorted(set(body) - _SUPPORTED_KEYS)
    if unknown:
        raise ApiError(400, f"not supported by the hf inference backend: {', '.join(unknown)}")
    if body.get("stream"):
        raise ApiError(400, "'stream' is not supported by the hf inference backend")
    if "prompt" not in body:
        raise ApiError(400, "missing required field 'prompt'")
    raw = body["prompt"]
    if isinstance(raw, dict):
        if set(raw) != {"prompt_token_ids"}:
            raise ApiError(400, "'prompt' as an object must be {\"prompt_token_ids\": [int, ...]}")
        raw = raw["prompt_token_ids"]
    if isinstance(raw, str):
        if not raw:
            raise ApiError(400, "'prompt' must not be empty")
        ids = list(tokenizer(raw, add_special_tokens=False)["input_ids"])
    elif isinstance(raw, list) and raw:
        if any(isinstance(t, bool) or not isinstance(t, int) for t in raw):
            raise ApiError(400, "'prompt_token_ids' must hold integers")
        ids = list(raw)
    else:
        raise ApiError(400, "'prompt' must be a string, a list of token ids or {\"prompt_token_ids\": [...]}")
    bad = [t for t in ids if t < 0 or t >= vocab_size]
    if bad:
        raise ApiError(400, f"token id {bad[0]} is outside the vocabulary [0, {vocab_size})")
    settings = {k: v for k, v in body.items() if k not in ("prompt", "stream")}
    if settings.get("top_k") == 0:
        settings["top_k"] = -1  # vLLM reads 0 as "no top-k" too
    if settings.get("stop_token_ids") is None:
        settings.pop("stop_token_ids", None)
    try:
        params = GenerateParams(**settings)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "body"
        raise ApiError(400, f"invalid sampling parameter {loc}: {first['msg']}") from None
    if len(ids) + params.max_tokens > max_model_len:
        raise ApiError(
            400,
            f"prompt ({len(ids)} tokens) plus max_tokens ({params.max_tokens}) exceeds the maximum model "
            f"length {max_model_len}",
        )
    return _Job(prompt_ids=ids, params=params)


class HfGenerator:
    """The model, its tokenizer and a worker thread that generates batches of queued jobs.

    :meth:`submit` queues a job and returns its future; :meth:`update_weights` swaps the weights between
    two batches. ``max_batch_sequences`` bounds the rows of one ``generate`` call.
    """

    def __init__(
        self,
        model_dir: str,
        tokenizer_dir: str | None = None,
        max_batch_sequences: int = 1024,
        device: str = "cpu",
        dtype: str = "float32",
        shared_weights: bool = False,
    ):
        import torch
        from transformers import AutoTokenizer

        from example_trainer.demo.heldout_eval import load_causal_lm

        self.torch = torch
        self.model_dir = Path(model_dir)
        self.device = torch.device(device)
        model, self.tokenizer = load_causal_lm(model_dir)
        if dtype != "float32":
            model.to(getattr(torch, dtype))
        model.to(self.device)
        #: With shared weights the trainer writes the parameters in place: one copy, never swapped.
        self.shared_weights = shared_weights
        self._manifest: dict[str, Any] | None = None
        self._base_state: dict[str, Any] | None = None  #: the base weights, kept once an adapter is served
        self.adapter: str | None = None
        from example_trainer.inference.weight_broadcast import WeightReceiver

        self.receiver = WeightReceiver()
        if tokenizer_dir:
            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        self.config_dict = model.config.to_dict()
        self.vocab_size = int(model.config.vocab_size)
        eos = model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids = tuple(eos) if isinstance(eos, list | tuple) else (() if eos is None else (int(eos),))
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0))
        self.max_batch_sequences = max_batch_sequences
        self.update_count = 0
        # Two copies of the weights: batches run on the active one while an update loads the other, which
        # then becomes active; an update waits only for batches still running on the copy it overwrites.
        self._models: list[Any] = [model, None]
        self._active = 0
        self._busy = [0, 0]
        self._cond = threading.Condition()
        self._update_lock = threading.Lock()
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._held: list[_Job] = []
        self._worker = threading.Thread(target=self._run, name="hf-generate", daemon=True)
        self._worker.start()

    # --- jobs ---------------------------------------------------------------------------------
    def submit(self, job: _Job) -> Future:
        self._jobs.put(job)
        return job.future

    def close(self) -> None:
        self._jobs.put(None)

    def _next_batch(self) -> list[_Job] | None:
        """The oldest job plus every queued job with the same sampling settings, within the row budget."""
        pending = self._held
        if not pending:
            job = self._jobs.get()
            if job is None:
                return None
            pending = [job]
        while True:  # everything that arrived meanwhile
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is None:
                self._jobs.put(None)
                break
            pending.append(job)
        key = pending[0].params.batch_key()
        batch, rows, held = [], 0, []
        for job in pending:
            if job.params.batch_key() == key and (
                not batch or rows + job.params.n <= self.max_batch_sequences
            ):
                batch.append(job)
                rows += job.params.n
            else:
                held.append(job)
        self._held = held
        return batch

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            with self._cond:
                index = self._active
                self._busy[index] += 1
            try:
                results = self.generate(batch, self._models[index])
            except Exception as exc:  # noqa: BLE001 - every waiting request gets the error
                logger.exception("generation failed")
                for job in batch:
                    job.future.set_exception(exc)
                continue
            finally:
                with self._cond:
                    self._busy[index] -= 1
                    self._cond.notify_all()
            for job, result in zip(batch, results, strict=True):
                job.future.set_result(result)

    # --- generation ---------------------------------------------------------------------------
    def generate(self, jobs: Sequence[_Job], model: Any = None) -> list[dict[str, Any]]:
        """One batch for ``jobs`` (same sampling settings) on ``model`` (default: the active weights); one
        ``/generate`` reply per job.

        Each distinct prompt is run through the model once and its key/value cache copied to its ``n``
        rows; then one forward pass per new token for all rows.
        """
        torch = self.torch
        model = model if model is not None else self._models[self._active]
        params = jobs[0].params
        stop_ids = tuple(dict.fromkeys((*self.eos_ids, *params.stop_token_ids)))
        with torch.inference_mode():
            generated, chosen = self._decode(model, jobs, params, stop_ids)
        return [
            self._reply(job, rows, stop_ids)
            for job, rows in _rows_per_job(jobs, generated.cpu().tolist(), chosen.cpu().tolist())
        ]

    def _prefill(self, model: Any, jobs: Sequence[_Job]) -> tuple[Any, Any, Any, Any]:
        """Run the left-padded prompts of ``jobs`` once and expand to one row per sequence: returns the cache,
        the last logits, the attention mask and the last positions, each with ``sum(n)`` rows."""
        torch, dev = self.torch, self.device
        width = max(len(job.prompt_ids) for job in jobs)
        input_ids = torch.full((len(jobs), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(jobs), width), dtype=torch.long)
        for i, job in enumerate(jobs):
            input_ids[i, width - len(job.prompt_ids) :] = torch.tensor(job.prompt_ids)
            attention[i, width - len(job.prompt_ids) :] = 1
        rows = torch.repeat_interleave(torch.arange(len(jobs)), torch.tensor([j.params.n for j in jobs]))
        from transformers import DynamicCache

        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        input_ids, attention, positions, rows = (t.to(dev) for t in (input_ids, attention, positions, rows))
        out = model(
            input_ids=input_ids, attention_mask=attention, position_ids=positions,
            past_key_values=DynamicCache(), use_cache=True, logits_to_keep=1,
        )  # fmt: skip
        cache = out.past_key_values
        _select_rows(cache, rows)
        logits = out.logits[:, -1].float().index_select(0, rows)
        return cache, logits, attention.index_select(0, rows), positions[:, -1:].index_select(0, rows)

    def _decode(
        self, model: Any, jobs: Sequence[_Job], params: GenerateParams, stop_ids: tuple[int, ...]
    ) -> Any:
        """``(token ids, their logprobs)``, each ``[rows, max_tokens]``: one forward pass per new token for the
        rows still generating (a row stops at a token in ``stop_ids``)."""
        torch, dev = self.torch, self.device
        cache, logits, attention, positions = self._prefill(model, jobs)
        stop = torch.tensor(stop_ids or (-1,), dtype=torch.long, device=dev)
        generated = torch.full((len(logits), params.max_tokens), self.pad_id, dtype=torch.long, device=dev)
        chosen = torch.zeros((len(logits), params.max_tokens), device=dev)
        alive = torch.arange(len(logits), device=dev)  # the rows still generating, as rows of the full batch
        for step in range(params.max_tokens):
            logp = torch.log_softmax(logits, dim=-1)
            token = self._sample(logits, params) if params.temperature > 0 else logits.argmax(-1)
            generated[alive, step] = token
            chosen[alive, step] = logp.gather(-1, token.unsqueeze(-1)).squeeze(-1)
            running = ~torch.isin(token, stop)
            if step + 1 == params.max_tokens or not bool(running.any()):
                break
            if not bool(running.all()):
                # Finished rows leave the batch: later forward passes cost only the rows still going.
                keep = running.nonzero().squeeze(-1)
                _select_rows(cache, keep)
                alive, token = alive[keep], token[keep]
                attention, positions = attention[keep], positions[keep]
            attention = torch.cat(
                [attention, torch.ones((len(alive), 1), dtype=torch.long, device=dev)], dim=1
            )
            positions = positions + 1
            out = model(
                input_ids=token.unsqueeze(-1), attention_mask=attention, position_ids=positions,
                past_key_values=cache, use_cache=True,
            )  # fmt: skip
            cache = out.past_key_values
            logits = out.logits[:, -1].float()
        return generated, chosen

    def _reply(
        self, job: _Job, rows: list[tuple[list[int], list[float]]], stop_ids: tuple[int, ...]
    ) -> dict[str, Any]:
        """The ``/generate`` reply of ``job`` from its rows of ``(generated ids, logprobs)``."""
        texts, finish, token_ids, logprobs = [], [], [], []
        for ids, lps in rows:
            end = next((i + 1 for i, t in enumerate(ids) if t in stop_ids), None)
            finish.append("stop" if end is not None else "length")
            ids, lps = ids[:end], lps[:end]
            token_ids.append(ids)
            logprobs.append([[{str(t): lp}] for t, lp in zip(ids, lps, strict=True)])
            texts.append(
                self.tokenizer.decode(ids, skip_special_tokens=job.params.skip_special_tokens)
                if job.params.detokenize
                else ""
            )
        reply: dict[str, Any] = {
            "text": texts,
            "prompt": self.tokenizer.decode(job.prompt_ids),
            "finish_reasons": finish,
        }
        if job.params.logprobs is not None:
            reply.update(logprobs=logprobs, prompt_token_ids=list(job.prompt_ids), token_ids=token_ids)
        return reply

    def _sample(self, logits: Any, params: GenerateParams) -> Any:
        """One token per row from ``softmax(logits / temperature)`` after top-k and top-p filtering."""
        torch = self.torch
        scaled = logits / params.temperature
        if 0 < params.top_k < scaled.shape[-1]:
            kth = torch.topk(scaled, params.top_k, dim=-1).values[:, -1:]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        probs = torch.softmax(scaled, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
            drop = sorted_probs.cumsum(-1) - sorted_probs >= params.top_p
            sorted_probs = sorted_probs.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        # Inverse-CDF sampling: one uniform number per row (cheaper on a CPU than torch.multinomial).
        cdf = probs.cumsum(-1)
        draw = torch.rand((probs.shape[0], 1), dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
        return torch.searchsorted(cdf, draw, right=True).squeeze(-1).clamp_(max=probs.shape[-1] - 1)

    # --- weights ------------------------------------------------------------------------------
    def update_weights(self, checkpoint_dir: Path) -> float:
        """Load ``checkpoint_dir``'s weights; every batch that starts after this returns uses them (a batch
        already running finishes on the weights it started with). Returns the seconds it took.

        Raises:
            CheckpointError: the checkpoint does not fit the served model (the served weights stay).
        """
        from safetensors.torch import load_file

        check_compatible(checkpoint_dir, self.config_dict, self.model_dir)
        files = sorted(checkpoint_dir.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"no *.safetensors weight files in {checkpoint_dir}")
        state: dict[str, Any] = {}
        for file in files:
            state.update(load_file(str(file)))
        return self.load_state(state, str(checkpoint_dir))

    def load_state(self, state: dict[str, Any], source: str) -> float:
        """Make ``state`` (parameter name -> tensor) the served weights, as :meth:`update_weights` does.

        With shared weights the one copy is overwritten in place (the trainer's tensors change too).
        """
        start = time.perf_counter()
        if self.shared_weights:
            model = self._models[self._active]
            with self._update_lock, self.torch.no_grad():
                self._check_keys(model, *model.load_state_dict(state, strict=False), source)
                self.update_count += 1
            return time.perf_counter() - start
        with self._update_lock:
            spare = 1 - self._active
            if self._models[spare] is None:
                self._models[spare] = copy.deepcopy(self._models[self._active])
            with self._cond:
                self._cond.wait_for(lambda: self._busy[spare] == 0)
            model = self._models[spare]
            self._check_keys(model, *model.load_state_dict(state, strict=False), source)
            with self._cond:
                self._active = spare
            self.update_count += 1
        return time.perf_counter() - start

    @staticmethod
    def _check_keys(model: Any, missing: list[str], unexpected: list[str], source: str) -> None:
        tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
        missing = [k for k in missing if k not in tied]
        if missing or unexpected:
            raise CheckpointError(
                f"{source} does not match the served model: missing {missing[:3]}, unexpected {unexpected[:3]}"
            )

    def load_adapter(self, adapter_dir: Path | None) -> float:
        """Serve the base weights plus the LoRA adapter in ``adapter_dir`` (None: the base weights alone), as
        :meth:`update_weights` swaps weights; returns the seconds it took.

        Raises:
            AdapterError: not an adapter of the served model (the served weights stay).
        """
        from example_trainer.grpo.lora_merge import adapter_deltas, merge_into

        start = time.perf_counter()
        deltas = adapter_deltas(adapter_dir) if adapter_dir is not None else {}
        with self._update_lock:
            if self._base_state is None:  # the weights served before the first adapter
                active = self._models[self._active]
                self._base_state = {n: p.detach().clone() for n, p in active.named_parameters()}
            spare = 1 - self._active
            if self._models[spare] is None:
                self._models[spare] = copy.deepcopy(self._models[self._active])
            with self._cond:
                self._cond.wait_for(lambda: self._busy[spare] == 0)
            merge_into(self._models[spare], self._base_state, deltas)
            with self._cond:
                self._active = spare
            self.adapter = str(adapter_dir) if adapter_dir is not None else None
            self.update_count += 1
        return time.perf_counter() - start

    def shared_manifest(self) -> dict[str, Any]:
        """Handles to the served parameters (:func:`example_trainer.inference.shared_weights.export_parameters`)."""
        from example_trainer.inference.shared_weights import export_parameters

        with self._update_lock:
            if self._manifest is None:
                self._manifest = export_parameters(self._models[self._active], str(self.model_dir))
            return self._manifest

    def receive_weights(self, specs: list[dict[str, Any]]) -> float:
        """Receive one broadcast of the trainer's weights and serve them; returns the seconds it took."""
        state = dict(self.receiver.receive(specs, self.device))
        return self.load_state(state, "the broadcast weights")


def _select_rows(cache: Any, rows: Any) -> None:
    """Keep (or repeat) the cache rows ``rows``, in place."""
    if hasattr(cache, "batch_select_indices"):
        cache.batch_select_indices(rows)
    else:  # older transformers
        cache.reorder_cache(rows)


def _rows_per_job(
    jobs: Sequence[_Job], gen_ids: list[list[int]], gen_lps: list[list[float]]
) -> list[tuple[_Job, list[tuple[list[int], list[float]]]]]:
    """Each job with its ``n`` consecutive rows of generated ids and logprobs."""
    out, row = [], 0
    for job in jobs:
        out.append(
            (
                job,
                list(zip(gen_ids[row : row + job.params.n], gen_lps[row : row + job.params.n], strict=True)),
            )
        )
        row += job.params.n
    return out
