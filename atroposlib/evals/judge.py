"""An LLM judge on any OpenAI-compatible server, for the judged benchmarks.

Where the judge runs: ``--judge.base_url``, ``--judge.model_name``, ``--judge.api_key``,
``--judge.server_type`` ... (a ``judge:`` section of the ``--config`` YAML), as the RLAIF environment
takes them. Without those flags the benchmark's own ``judge_base_url`` / ``judge_model_name`` fields
are used, with the API key read from the environment variable named by ``judge_api_key_env``
(:class:`JudgeSettings`). :class:`JudgedEnvMixin` wires this into an
environment class.

What the judge returns: :meth:`Judge.grade` asks once and parses the reply with a benchmark's parser;
a reply the parser rejects (or a request that failed after the server client's retries) is a
**judge failure**: :attr:`Judgement.value` is None and the sample is counted apart, never as a pass or
a fail. :meth:`Judge.compare` judges two answers in both orders (first shown as A, then as B) to
cancel position bias: each order's verdict is a score for the answer shown first (1 win, 0.5 tie,
0 loss); the first answer's score is the mean of the forward score and one minus the swapped one over
the orders that parsed. A comparison whose two orders both failed has no score (a judge failure).

Only the part of the judge's reply after a ``<think>...</think>`` block is parsed; a judge whose
reasoning never closes has failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Optional, TypeVar

from pydantic import BaseModel, Field
from tenacity import AsyncRetrying, stop_after_attempt, wait_random_exponential

from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.server_manager import ServerManager
from atroposlib.utils.replies import answer_section

logger = logging.getLogger(__name__)

T = TypeVar("T")
Messages = list[dict[str, str]]


class JudgeError(RuntimeError):
    """The judge cannot be set up (one line naming the setting to fix)."""


class JudgeSettings(BaseModel):
    """The judge fields of a judged benchmark's config (compat: atroposlib 0.4.0's field names).

    Benchmarks override the defaults with the judge their scores are calibrated for. ``--judge.*``
    flags, when given, replace ``judge_base_url``, ``judge_model_name`` and the key.
    """

    judge_model_name: str = Field("gpt-4o", description="model name sent to the judge server")
    judge_base_url: str = Field(
        "https://api.openai.com/v1", description="judge server (OpenAI-compatible, ending in /v1)"
    )
    judge_api_key_env: str = Field(
        "OPENAI_API_KEY", description="environment variable holding the judge server's API key"
    )
    judge_temperature: float = Field(0.0, ge=0.0, description="sampling temperature of the judge")
    judge_max_tokens: int = Field(
        0, ge=0, description="token budget of one judgement (0: the judge server's default)"
    )
    judge_max_retries: int = Field(3, ge=1, description="attempts per judge request that raises an error")
    judge_retry_multiplier: float = Field(
        1.0, ge=0.0, description="backoff between attempts: a random wait up to multiplier * 2**attempt s"
    )
    judge_retry_max_wait: float = Field(10.0, ge=0.0, description="longest wait between attempts, seconds")
    judge_max_concurrent_calls: int = Field(64, ge=1, description="judge requests in flight at most")
    judge_rate_limit_delay: float = Field(0.0, ge=0.0, description="seconds waited before each judge request")


def judge_server_config(settings: Any, cli_configs: Any = None) -> Any:
    """The judge's server configuration(s).

    ``cli_configs`` (from ``--judge.*`` / the YAML ``judge:`` section) wins; otherwise one
    :class:`APIServerConfig` from ``settings`` (a :class:`JudgeSettings`-like config), its key read from
    ``$judge_api_key_env``. A judge on localhost/127.0.0.1 may have no key. Raises :class:`JudgeError`
    when a remote judge's key variable is unset.
    """
    if cli_configs is not None:
        return cli_configs
    key = os.environ.get(settings.judge_api_key_env, "")
    local = any(host in settings.judge_base_url for host in ("://localhost", "://127.0.0.1", "://[::1]"))
    if not key and not local:
        raise JudgeError(
            f"judge: environment variable {settings.judge_api_key_env} is not set (it holds the key for "
            f"{settings.judge_base_url}); set it, or choose the judge with --judge.base_url/--judge.model_name"
        )
    return APIServerConfig(
        base_url=settings.judge_base_url,
        model_name=settings.judge_model_name,
        api_key=key or "x",
        server_type="openai",
        health_check=False,
    )


@dataclass(frozen=True)
class Judgement(Generic[T]):
    """One judge reply: the parsed ``value`` (None: a judge failure), the reply ``text`` and, when the
    request itself failed, its ``error``."""

    value: Optional[T]
    text: str
    error: Optional[str] = None

    @property
    def failed(self) -> bool:
        """Whether this judgement counts as a judge failure."""
        return self.value is None

    def record(self) -> dict[str, Any]:
        """The judgement as sample fields (``samples.jsonl``)."""
        out: dict[str, Any] = {"verdict": self.value, "judgement": self.text}
        if self.error:
            out["judge_error"] = self.error
        return out


@dataclass(frozen=True)
class Comparison:
    """Two answers judged in both orders: ``forward`` shows the first answer as A, ``swapped`` as B.

    The verdicts are scores of the answer shown first (1 win, 0.5 tie, 0 loss)."""

    forward: Judgement[float]
    swapped: Judgement[float]

    @property
    def score(self) -> Optional[float]:
        """The first answer's score in [0, 1] over the orders that parsed; None when none did."""
        parts = []
        if not self.forward.failed:
            parts.append(float(self.forward.value))
        if not self.swapped.failed:
            parts.append(1.0 - float(self.swapped.value))
        return sum(parts) / len(parts) if parts else None

    @property
    def failures(self) -> int:
        """How many of the two judgements failed (0, 1 or 2)."""
        return int(self.forward.failed) + int(self.swapped.failed)

    def record(self) -> dict[str, Any]:
        """Both judgements and the combined score, as sample fields."""
        return {
            "judge_score": self.score,
            "judge_failures": self.failures,
            "forward": self.forward.record(),
            "swapped": self.swapped.record(),
        }


class Judge:
    """Sends judge prompts to ``server`` (a :class:`ServerManager` or anything with its async
    ``chat_completion(**kwargs)``) and parses the replies.

    ``max_tokens`` 0 leaves the budget to the server. Requests use the evaluation split of the server's
    concurrency limits.
    """

    def __init__(
        self,
        server: Any,
        *,
        temperature: float = 0.0,
        max_tokens: int = 0,
        max_attempts: int = 1,
        retry_multiplier: float = 1.0,
        retry_max_wait: float = 10.0,
        max_concurrent: Optional[int] = None,
        delay_s: float = 0.0,
    ) -> None:
        self.server = server
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_attempts = max(1, max_attempts)
        self.retry_multiplier = retry_multiplier
        self.retry_max_wait = retry_max_wait
        self.delay_s = delay_s
        self._slots = asyncio.Semaphore(max_concurrent) if max_concurrent else None

    @classmethod
    def from_settings(cls, settings: Any, cli_configs: Any = None, *, testing: bool = False) -> Judge:
        """A judge on the server :func:`judge_server_config` chooses, with the settings' temperature and
        budget."""
        configs = judge_server_config(settings, cli_configs)
        return cls(
            ServerManager(configs, slurm=False, testing=testing),
            temperature=settings.judge_temperature,
            max_tokens=settings.judge_max_tokens,
            max_attempts=settings.judge_max_retries,
            retry_multiplier=settings.judge_retry_multiplier,
            retry_max_wait=settings.judge_retry_max_wait,
            max_concurrent=settings.judge_max_concurrent_calls,
            delay_s=settings.judge_rate_limit_delay,
        )

    async def _request(self, messages: Messages) -> str:
        kwargs: dict[str, Any] = {
            "messages": messages,
            "n": 1,
            "temperature": self.temperature,
            "split": "eval",
        }
        if self.max_tokens > 0:
            kwargs["max_tokens"] = self.max_tokens
        async with self._slots or contextlib.nullcontext():
            if self.delay_s > 0:
                await asyncio.sleep(self.delay_s)
            completion = await self.server.chat_completion(**kwargs)
        return completion.choices[0].message.content or ""

    async def ask(self, messages: Messages) -> str:
        """The judge's reply text to ``messages``: a request that raises is sent again, ``max_attempts`` times
        in all, after a random exponential wait (``retry_multiplier``, at most ``retry_max_wait`` s); the last
        error propagates."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=wait_random_exponential(multiplier=self.retry_multiplier, max=self.retry_max_wait),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._request(messages)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def grade(self, messages: Messages, parse: Callable[[str], Optional[T]]) -> Judgement[T]:
        """Ask once and ``parse`` the reply (after its think block); an unparseable reply, or a request
        that failed, is a failed :class:`Judgement`."""
        try:
            text = await self.ask(messages)
        except Exception as exc:  # noqa: BLE001 - one failed judgement must not stop the run
            logger.warning("judge request failed: %s", exc)
            return Judgement(None, "", error=f"{type(exc).__name__}: {exc}")
        section = answer_section(text)
        value = parse(section) if section is not None else None
        if value is None:
            logger.info("judge reply not understood: %r", " ".join(text.split())[:200])
        return Judgement(value, text)

    async def compare(
        self,
        messages_for: Callable[[str, str], Messages],
        first: str,
        second: str,
        parse: Callable[[str], Optional[float]],
    ) -> Comparison:
        """Judge ``first`` against ``second`` in both orders (``messages_for(answer_a, answer_b)`` builds
        the prompt; ``parse`` gives the score of answer A or None)."""
        forward, swapped = await asyncio.gather(
            self.grade(messages_for(first, second), parse),
            self.grade(messages_for(second, first), parse),
        )
        return Comparison(forward, swapped)

    async def close(self) -> None:
        """Close the judge server's connections (when it has a ``close``)."""
        close: Optional[Callable[[], Awaitable[None]]] = getattr(self.server, "close", None)
        if close is not None:
            await close()


def failure_metrics(failures: Sequence[int], judgements: Sequence[int]) -> dict[str, float]:
    """``judge_failures`` (unparseable or failed judgements, a count) and ``judge_failure_rate`` (their
    share of all judgements) from per-sample counts."""
    total = sum(judgements)
    failed = sum(failures)
    return {"judge_failures": float(failed), "judge_failure_rate": failed / total if total else 0.0}


class JudgedEnvMixin:
    """Gives an environment class a :class:`Judge` as ``self.judge``.

    The CLI's ``--judge.*`` flags (and the YAML ``judge:`` section) arrive as ``teacher_server_configs``;
    without them the config's :class:`JudgeSettings` fields choose the server. The judge is built on first
    use (so ``--help`` and configuration dumps need no key) and closed with the environment's clients.
    List the mixin before the environment base class.
    """

    #: The CLI's extra-server namespace: ``--judge.*`` flags and the ``judge:`` YAML section.
    teacher_namespace = "judge"

    def __init__(self, *args: Any, teacher_server_configs: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._judge_configs = teacher_server_configs
        self._judge: Optional[Judge] = None

    @classmethod
    def teacher_config_init(cls) -> None:
        """No ``--judge.*`` server by default: the config's ``judge_*`` fields apply."""
        return None

    @property
    def judge(self) -> Judge:
        """The judge client (built on first use; :class:`JudgeError` when it cannot be)."""
        if self._judge is None:
            testing = bool(getattr(self, "testing", False))
            self._judge = Judge.from_settings(self.config, self._judge_configs, testing=testing)
        return self._judge

    async def _close_inference_clients(self) -> None:
        """Close the judge's connections too."""
        await super()._close_inference_clients()  # type: ignore[misc]
        if self._judge is not None:
            await self._judge.close()
