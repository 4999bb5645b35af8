"""A light inference server for small models: Hugging Face ``generate`` behind the trainer's ``/generate``.

vLLM is the inference server for real models. For a model of a few million parameters on a laptop CPU its
machinery costs more than the model: several processes, a scheduler that busy-waits on shared-memory
queues, a minute of start-up. This server is one process that loads the model with ``transformers``,
batches the requests that arrive together into one ``generate`` call and answers the routes the
trainer and the environments use::

    python -m example_trainer.inference.hf_generation --model DIR --port 9001 [--torch-threads 1]

* ``GET /health``: 200 once the model is loaded.
* ``POST /generate``: the token-level contract of :mod:`example_trainer.inference.vllm_api_server` (what
  ``server_type: vllm`` environments call): ``{"prompt": {"prompt_token_ids": [...]}`` (or text, or a
  bare id list), ``n``, ``max_tokens``, ``temperature``, ``top_p``, ``top_k``, ``logprobs``,
  ``stop_token_ids``} answered by ``{"text", "prompt", "finish_reasons", "logprobs", "prompt_token_ids",
  "token_ids"}``. Logprobs are the model's raw log-probabilities of the sampled tokens (before
  temperature and top-p), as vLLM reports them by default; a reply that ends with the end-of-sequence
  token includes it in ``token_ids`` with finish reason ``stop``.
* ``POST /bridge/update_weights`` ``{"checkpoint_dir": DIR}``: load a checkpoint of the same
  architecture into a second copy of the weights, which serves every batch started after the reply (a
  batch already running finishes on the old weights; the update does not wait for it).
* ``GET /v1/models``: the served model name.
* ``GET /bridge/shared_weights`` (with ``--shared-weights``): handles to the served parameters, which the
  trainer maps and trains in place (:mod:`example_trainer.inference.shared_weights`; CPU weights move to shared
  memory, CUDA weights are shared through IPC handles); updates then need no route at all.
* ``POST /bridge/init_weight_group`` and ``POST /bridge/receive_weights``: weights broadcast by the trainer
  (:mod:`example_trainer.inference.weight_broadcast`), loaded like a checkpoint but without the disk.
* ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path"}`` (checks the adapter) and ``POST /lora/load``
  ``{"adapter_path", "adapter_name"}`` (serves it), ``POST /lora/unload``: a PEFT LoRA adapter, merged into a
  copy of the base weights (:mod:`example_trainer.grpo.lora_merge`), so that ``lora_only`` and ``lora_restart``
  run on this backend too; every request is then answered by the adapted model.

Requests with the same sampling settings that are waiting when a batch starts are generated together
(up to ``--max-batch-sequences`` sequences), so an environment with many groups in flight costs one
forward pass per new token, not one per group. Other sampling parameters (``stop`` strings, ``seed``,
penalties, ``prompt_logprobs``) are refused with a 400 naming them. Bad requests get a 4xx in vLLM's
error format ``{"error": {"message", "type", "code"}}``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from example_trainer.inference.vllm_api_server import (
    ApiError,
    LoraLoadBody,
    ReceiveWeightsBody,
    UpdateWeightsBody,
    WeightGroupBody,
    _api_error_handler,
    _json_body,
    _parsed_body,
    checkpoint_to_load,
)
from example_trainer.inference.weight_refresh import CheckpointError, check_compatible

logger = logging.getLogger("atropos-hf-generation")

DEFAULT_PORT = 9001
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
        width = max(len(job.prompt_ids) for job in jobs)
        input_ids = torch.full((len(jobs), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(jobs), width), dtype=torch.long)
        for i, job in enumerate(jobs):
            input_ids[i, width - len(job.prompt_ids) :] = torch.tensor(job.prompt_ids)
            attention[i, width - len(job.prompt_ids) :] = 1
        rows = torch.repeat_interleave(torch.arange(len(jobs)), torch.tensor([j.params.n for j in jobs]))
        stop_ids = tuple(dict.fromkeys((*self.eos_ids, *params.stop_token_ids)))
        stop = torch.tensor(stop_ids or (-1,), dtype=torch.long)
        dev = self.device
        with torch.inference_mode():
            from transformers import DynamicCache

            cache = DynamicCache()
            positions = (attention.cumsum(-1) - 1).clamp(min=0)
            input_ids, attention, positions, rows = (
                t.to(dev) for t in (input_ids, attention, positions, rows)
            )
            stop = stop.to(dev)
            out = model(
                input_ids=input_ids, attention_mask=attention, position_ids=positions,
                past_key_values=cache, use_cache=True, logits_to_keep=1,
            )  # fmt: skip
            cache = out.past_key_values
            if hasattr(cache, "batch_select_indices"):
                cache.batch_select_indices(rows)
            else:  # older transformers
                cache.reorder_cache(rows)
            logits = out.logits[:, -1].float().index_select(0, rows)
            attention = attention.index_select(0, rows)
            positions = positions[:, -1:].index_select(0, rows)
            generated = torch.full((len(rows), params.max_tokens), self.pad_id, dtype=torch.long, device=dev)
            chosen = torch.zeros((len(rows), params.max_tokens), device=dev)
            # the rows still generating, as rows of the full batch
            alive = torch.arange(len(rows), device=dev)
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
                    if hasattr(cache, "batch_select_indices"):
                        cache.batch_select_indices(keep)
                    else:
                        cache.reorder_cache(keep)
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
        gen_ids, gen_lps = generated.cpu().tolist(), chosen.cpu().tolist()
        replies, row = [], 0
        for job in jobs:
            texts, finish, token_ids, logprobs = [], [], [], []
            for _ in range(job.params.n):
                ids, lps = gen_ids[row], gen_lps[row]
                row += 1
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
            replies.append(reply)
        return replies

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


def build_app(
    generator: HfGenerator, served_model_name: str, max_model_len: int, api_key: str | None
) -> FastAPI:
    """The FastAPI app serving ``generator``."""
    app = FastAPI(title="atroposlib hf generation server")
    app.add_exception_handler(ApiError, _api_error_handler)

    @app.middleware("http")
    async def _auth(request: Request, call_next: Any) -> Response:
        if api_key and request.url.path != "/health":
            if request.headers.get("authorization") != f"Bearer {api_key}":
                return JSONResponse(
                    {
                        "error": {
                            "message": "unauthorized",
                            "type": "Unauthorized",
                            "param": None,
                            "code": 401,
                        }
                    },
                    status_code=401,
                )
        return await call_next(request)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": served_model_name, "object": "model", "owned_by": "atroposlib", "max_model_len": max_model_len}],
        }  # fmt: skip

    @app.post("/generate")
    async def generate(request: Request) -> JSONResponse:
        job = parse_generate_body(
            await _json_body(request), generator.tokenizer, generator.vocab_size, max_model_len
        )
        reply = await asyncio.wrap_future(generator.submit(job))
        return JSONResponse(reply)

    @app.post("/bridge/update_weights")
    async def update_weights(request: Request) -> dict[str, Any]:
        parsed = await _parsed_body(request, UpdateWeightsBody)
        checkpoint = checkpoint_to_load(parsed.checkpoint_dir)
        try:
            seconds = await asyncio.to_thread(generator.update_weights, checkpoint)
        except CheckpointError as exc:
            raise ApiError(400, str(exc)) from None
        return {
            "status": "updated",
            "checkpoint_dir": str(checkpoint),
            "seconds": seconds,
            "update_count": generator.update_count,
        }

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> Response:
        parsed = await _parsed_body(request, LoadAdapterBody)
        await asyncio.to_thread(_checked_adapter, parsed.lora_path)
        return Response(f"Success: LoRA adapter '{parsed.lora_name}' added successfully.", status_code=200)

    @app.post("/lora/load")
    async def lora_load(request: Request) -> dict[str, Any]:
        parsed = await _parsed_body(request, LoraLoadBody)
        path = Path(parsed.adapter_path)
        if not path.is_dir():
            raise ApiError(404, f"Adapter not found: {parsed.adapter_path}")
        if generator.shared_weights:
            raise ApiError(
                409, "a server with --shared-weights serves the trainer's own weights, not adapters"
            )
        from example_trainer.grpo.lora_merge import AdapterError

        try:
            seconds = await asyncio.to_thread(generator.load_adapter, path)
        except AdapterError as exc:
            raise ApiError(400, str(exc)) from None
        return {"status": "ok", "adapter_path": parsed.adapter_path, "adapter_name": parsed.adapter_name,
                "seconds": seconds, "load_count": generator.update_count}  # fmt: skip

    @app.post("/lora/unload")
    async def lora_unload() -> dict[str, Any]:
        previous = generator.adapter
        if previous is not None:
            await asyncio.to_thread(generator.load_adapter, None)
        return {"status": "ok", "previous_adapter": previous}

    @app.get("/bridge/shared_weights")
    async def shared_weights() -> dict[str, Any]:
        if not generator.shared_weights:
            raise ApiError(409, "this server was started without --shared-weights")
        return await asyncio.to_thread(generator.shared_manifest)

    @app.post("/bridge/init_weight_group")
    async def init_weight_group(request: Request) -> dict[str, Any]:
        parsed = await _parsed_body(request, WeightGroupBody)
        await asyncio.to_thread(
            generator.receiver.join, parsed.host, parsed.port, parsed.world_size, parsed.rank, parsed.backend,
            parsed.timeout,
        )  # fmt: skip
        return {"status": "joined", "rank": parsed.rank, "world_size": parsed.world_size}

    @app.post("/bridge/receive_weights")
    async def receive_weights(request: Request) -> dict[str, Any]:
        parsed = await _parsed_body(request, ReceiveWeightsBody)
        try:
            seconds = await asyncio.to_thread(generator.receive_weights, parsed.tensors)
        except CheckpointError as exc:
            raise ApiError(400, str(exc)) from None
        return {"status": "updated", "seconds": seconds, "update_count": generator.update_count}

    return app


class LoadAdapterBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    lora_name: str
    lora_path: str


def _checked_adapter(path: str) -> None:
    """``ApiError`` 404/400 unless ``path`` is a LoRA adapter directory this backend can merge."""
    from example_trainer.grpo.lora_merge import AdapterError, adapter_deltas

    if not Path(path).is_dir():
        raise ApiError(404, f"Adapter not found: {path}")
    try:
        adapter_deltas(path)
    except AdapterError as exc:
        raise ApiError(400, str(exc)) from None


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m example_trainer.inference.hf_generation",
        description="Light inference server for small models (Hugging Face generate, /generate contract).",
    )
    parser.add_argument("--model", required=True, help="local model directory")
    parser.add_argument("--served-model-name", default=None, help="name in /v1/models (default: --model)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer directory (default: --model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--max-batch-sequences", type=int, default=1024, help="rows per generate call")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16", "float16", "auto"],
        help="weights dtype (auto: float32)",
    )  # fmt: skip
    parser.add_argument("--device", default="cpu", help="torch device of the model (cpu, cuda, cuda:N)")
    parser.add_argument(
        "--shared-weights", action="store_true",
        help="let the trainer train the served parameters in place (GET /bridge/shared_weights)",
    )  # fmt: skip
    parser.add_argument("--api-key", default=None, help="bearer token required on every route but /health")
    parser.add_argument("--enforce-eager", action="store_true", help="accepted for vLLM compatibility")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    if not Path(args.model).is_dir():
        print(f"hf_generation: error: --model {args.model} is not a local model directory", flush=True)
        return 2
    if args.torch_threads < 1 or args.max_batch_sequences < 1 or args.max_model_len < 1:
        print("hf_generation: error: --torch-threads, --max-batch-sequences and --max-model-len must be >= 1")
        return 2
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import torch
    import uvicorn

    torch.set_num_threads(args.torch_threads)
    generator = HfGenerator(
        args.model, args.tokenizer, args.max_batch_sequences, device=args.device,
        dtype="float32" if args.dtype == "auto" else args.dtype, shared_weights=args.shared_weights,
    )  # fmt: skip
    app = build_app(generator, args.served_model_name or args.model, args.max_model_len, args.api_key)
    logger.info("serving %s on http://%s:%d", args.model, args.host, args.port)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    finally:
        generator.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
