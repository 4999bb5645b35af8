"""Standalone evaluation helpers, usable without a ``BaseEnv``: pass@k, the evaluation result files, and
``EvalBase`` for scripted evals run against any OpenAI-compatible server."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the server layer imports heavy client libraries; keep this module light
    from atroposlib.envs.server_handling.server_manager import ServerManager

logger = logging.getLogger(__name__)

DEFAULT_MAX_CONCURRENCY = 32


def pass_at_k(m: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from ``m`` samples of which ``c`` are correct:
    ``1 - C(m - c, k) / C(m, k)`` (1.0 when ``m - c < k``)."""
    if m - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(m - c + 1, m + 1)))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def evaluate_log(
    metrics: dict,
    eval_dir: str | None = None,
    task_name: str | None = None,
    model_name: str | None = None,
    start_time: float | None = None,
    end_time: float | None = None,
    generation_parameters: dict | None = None,
    samples: list[dict] | None = None,
    verbose: bool = True,
) -> None:
    """Write ``{eval_dir}/metrics.json`` (lighteval-shaped: ``config_general`` with model name, total
    evaluation time in seconds as a string and generation parameters; ``results`` with the metrics under
    ``atropos|{task_name}|0`` and ``all``) and, when ``samples`` are given, ``{eval_dir}/samples.jsonl``.

    With ``verbose`` a metrics table is printed. Does nothing (with a warning) when ``eval_dir`` is None.
    """
    if eval_dir is None:
        logger.warning("eval_dir is not set; evaluation results are not saved")
        return
    os.makedirs(eval_dir, exist_ok=True)
    now = time.time()
    start_time = now if start_time is None else start_time
    end_time = now if end_time is None else end_time
    if verbose:
        from atroposlib.utils.display import display_metrics_table

        display_metrics_table(task_name, metrics, start_time, end_time)
    result = {
        "config_general": {
            "model_name": model_name,
            "total_evaluation_time_seconds": str(end_time - start_time),
            "generation_parameters": generation_parameters or {},
        },
        "results": {f"atropos|{task_name}|0": metrics, "all": metrics},
    }
    metrics_path = os.path.join(eval_dir, "metrics.json")
    with open(metrics_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2, default=_json_default)
    print(f"Evaluation results saved to {metrics_path}")
    if samples:
        samples_path = os.path.join(eval_dir, "samples.jsonl")
        with open(samples_path, "w", encoding="utf-8") as f:
            for sample in samples:
                f.write(json.dumps(sample, default=_json_default) + "\n")
        print(f"Evaluation samples saved to {samples_path}")


class EvalBase(ABC):
    """A scripted evaluation: a list of items, each run against a server and scored.

    ``EvalBase(pass_at_n=1, pass_at_n_samples=1, **kwargs)`` stores every keyword as an attribute
    (``temperature``, ``top_p``, ``max_tokens``, ``eval_dir``, ``verbose``, ``max_concurrency``, ...), then
    calls :meth:`setup_data`. ``await evaluator(server_manager)`` runs :meth:`run_item` for every item, at
    most ``max_concurrency`` (default 32) at a time, averages each metric, writes the results with
    :func:`evaluate_log` and returns the averaged metrics.
    """

    def __init__(self, pass_at_n: int = 1, pass_at_n_samples: int = 1, **kwargs: Any):
        self.pass_at_n = pass_at_n
        self.pass_at_n_samples = pass_at_n_samples
        for key, value in kwargs.items():
            setattr(self, key, value)
        self.data = self.setup_data()

    def get_generation_params(self) -> dict:
        """Sampling parameters for the OpenAI chat API: ``temperature`` (default 0.0), ``n`` (the larger
        of ``pass_at_n`` / ``pass_at_n_samples``), ``top_p`` (default 1.0) and ``max_tokens`` only when it
        is set to a positive value (otherwise the server's own limit applies)."""
        params = {
            "temperature": getattr(self, "temperature", 0.0),
            "n": max(self.pass_at_n_samples, self.pass_at_n),
            "top_p": getattr(self, "top_p", 1.0),
        }
        max_tokens = getattr(self, "max_tokens", None)
        if max_tokens is not None and max_tokens > 0:
            params["max_tokens"] = max_tokens
        return params

    async def chat_completion(self, server: Any, messages: list[dict]) -> Any:
        """``server.chat_completion(messages=..., **self.get_generation_params())``."""
        return await server.chat_completion(messages=messages, **self.get_generation_params())

    @abstractmethod
    def setup_data(self) -> list:
        """Return the items to evaluate."""

    @abstractmethod
    async def run_item(self, server: ServerManager, data_item: Any) -> tuple[dict, Any]:
        """Evaluate one item; return ``(metrics, sample)`` where ``metrics`` maps names to numbers."""

    @property
    def task_name(self) -> str:
        name = f"{type(self).__name__}@{self.pass_at_n}"
        if self.pass_at_n != self.pass_at_n_samples:
            name += f":{self.pass_at_n_samples}"
        return name

    async def __call__(self, server_manager: ServerManager) -> dict:
        from tqdm.asyncio import tqdm_asyncio

        if not self.data:
            raise ValueError(f"{type(self).__name__}.setup_data() returned no items to evaluate")
        limit = max(int(getattr(self, "max_concurrency", DEFAULT_MAX_CONCURRENCY) or 1), 1)
        semaphore = asyncio.Semaphore(limit)

        async def bounded(index: int, item: Any) -> tuple[dict, Any]:
            async with semaphore:
                try:
                    return await self.run_item(server_manager, item)
                except Exception as exc:
                    raise RuntimeError(f"item {index} failed: {exc!r}") from exc

        start_time = time.time()
        outcomes = await tqdm_asyncio.gather(
            *(bounded(i, item) for i, item in enumerate(self.data)), return_exceptions=True
        )
        end_time = time.time()
        results = [o for o in outcomes if not isinstance(o, BaseException)]
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        for failure in failures:
            logger.error("%s: %s", self.task_name, failure)
        if not results:
            raise RuntimeError(f"{self.task_name}: every one of {len(outcomes)} items failed")
        if failures:
            logger.warning(
                "%s: %d of %d items failed; metrics average the %d that completed",
                self.task_name,
                len(failures),
                len(outcomes),
                len(results),
            )
        metrics = aggregate_metrics([r[0] for r in results])
        samples = [r[1] for r in results]
        print(f"{self.task_name} metrics: {metrics}")
        servers = getattr(server_manager, "servers", None) or []
        model_name = getattr(getattr(servers[0], "config", None), "model_name", None) if servers else None
        evaluate_log(
            metrics,
            eval_dir=getattr(self, "eval_dir", None),
            task_name=self.task_name,
            model_name=model_name,
            start_time=start_time,
            end_time=end_time,
            generation_parameters=self.get_generation_params(),
            samples=samples,
            verbose=getattr(self, "verbose", False),
        )
        return metrics


def aggregate_metrics(metrics_list: Sequence[dict]) -> dict:
    """Mean of every metric key of the first result over all results.

    Raises:
        ValueError: a later result lacks one of those keys.
    """
    keys = list(metrics_list[0].keys())
    aggregated = {}
    for key in keys:
        try:
            values = [float(m[key]) for m in metrics_list]
        except KeyError:
            raise ValueError(f"metric {key!r} is missing from some item results")
        aggregated[key] = sum(values) / len(values)
    return aggregated


def normalize_base_url(url: str) -> str:
    """An OpenAI-compatible base URL: ``http://host:port`` gets ``/v1`` appended."""
    parsed = urllib.parse.urlparse(url)
    if parsed.path in ("", "/"):
        return url.rstrip("/") + "/v1"
    return url


def discover_model_name(base_url: str, api_key: str | None = None, timeout: float = 10.0) -> str:
    """The first model id served at ``{base_url}/models``.

    Raises:
        RuntimeError: the server cannot be reached or serves no model.
    """
    import requests

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = requests.get(f"{base_url.rstrip('/')}/models", headers=headers, timeout=timeout)
        response.raise_for_status()
        models = response.json().get("data") or []
    except Exception as exc:
        raise RuntimeError(f"cannot list the models of {base_url} ({exc}); pass --model-name") from exc
    if not models or "id" not in models[0]:
        raise RuntimeError(f"{base_url} serves no model; pass --model-name")
    return models[0]["id"]


def build_eval_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Run a scripted evaluation against an OpenAI-compatible server."
    )
    parser.add_argument(
        "--server-url", default="http://localhost:8000", help="server base URL (/v1 is added)"
    )
    parser.add_argument(
        "--model-name", default=None, help="model to query (default: the first model the server lists)"
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY") or "dummy",
        help="API key (default: $OPENAI_API_KEY)",
    )
    parser.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        help=f"items evaluated at once (default {DEFAULT_MAX_CONCURRENCY})",
    )
    return parser


async def eval_runner(eval_env: EvalBase, argv: Sequence[str] | None = None) -> dict:
    """Command-line entry for an :class:`EvalBase`: parse ``--server-url``, ``--model-name``,
    ``--api-key`` and ``--max-concurrency`` from ``argv`` (default ``sys.argv[1:]``), build a
    ``ServerManager`` for that server, run the evaluation and close the server's connections. Returns
    its metrics.

    Exits with status 2 and a one-line message when the model name cannot be determined.
    """
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig
    from atroposlib.envs.server_handling.server_manager import ServerManager

    args = build_eval_parser().parse_args(argv)
    base_url = normalize_base_url(args.server_url)
    model_name = args.model_name
    if not model_name:
        try:
            model_name = await asyncio.to_thread(discover_model_name, base_url, args.api_key)
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2)
    if args.max_concurrency is not None:
        if args.max_concurrency < 1:
            print("error: --max-concurrency must be at least 1", file=sys.stderr)
            raise SystemExit(2)
        eval_env.max_concurrency = args.max_concurrency
    server_manager = ServerManager(
        configs=[
            APIServerConfig(
                api_key=args.api_key, base_url=base_url, model_name=model_name, health_check=False
            )
        ]
    )
    try:
        return await eval_env(server_manager)
    finally:
        await server_manager.close()  # its HTTP session would otherwise outlive the evaluation, unclosed
