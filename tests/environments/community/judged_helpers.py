"""Helpers for the tests of the community's judged environments: scripted responders that answer the policy
and the judge apart, and scoring a group in-process against a scripted server that also judges."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from atroposlib.envs.base import APIServerConfig
from atroposlib.testing.scripted_server import launch_scripted_server
from tests.helpers.single_turn_runs import prompt_text


def pair_shown(text: str, end: str = "\n\n[END]") -> tuple[str, str]:
    """The two responses of a pairwise judge prompt (``[Response A]`` / ``[Response B]`` sections)."""
    a = text.split("[Response A]\n", 1)[1].split("\n\n[Response B]", 1)[0]
    b = text.split("[Response B]\n", 1)[1].split(end, 1)[0]
    return a, b


def pairwise(verdict: Callable[[str, str], str]) -> Callable[[str], str]:
    """A judge answering ``verdict(response_a, response_b)`` to a pairwise prompt."""
    return lambda text: verdict(*pair_shown(text))


def respond_with(
    policy: Callable[[str, int], str], judge: Callable[[str], str], marker: str = "[Response A]"
) -> Callable[[Any, int], str]:
    """A scripted-server responder: prompts holding ``marker`` go to ``judge(text)``, others to
    ``policy(text, choice_index)``."""

    def respond(prompt: Any, index: int) -> str:
        text = prompt_text(prompt)
        return judge(text) if marker in text else policy(text, index)

    return respond


async def judged_scores(
    env_cls: type,
    tokenizer_dir: Any,
    replies: list[str],
    item: Any,
    judge: Callable[[str], str],
    **values: Any,
) -> tuple[list[float], Any, list[str]]:
    """Score ``replies`` to ``item`` with ``env_cls`` whose policy server (a scripted one answering every
    prompt with ``judge(text)``) also judges: ``(scores, the environment, the judge prompts' texts)``."""
    with launch_scripted_server(
        respond=lambda prompt, index: judge(prompt_text(prompt)), tokenizer=tokenizer_dir
    ) as s:
        config = env_cls.env_config_cls(tokenizer_name=str(tokenizer_dir), use_wandb=False, **values)
        env = env_cls(config, APIServerConfig(base_url=s.base_url, model_name="m", server_type="vllm"))
        try:
            scores = await env.score_replies_async(replies, item)
        finally:
            await env._close_inference_clients()
        texts = [prompt_text(r["body"].get("messages") or r["body"].get("prompt")) for r in s.requests]
    return scores, env, texts


def marker_verdict(marker: str, undecided: str, reasoning: str = "") -> Callable[[str, str], str]:
    """A pairwise verdict preferring the response holding ``marker``: ``reasoning`` then ``\\boxed{A}``, or
    ``\\boxed{B}``; ``undecided`` (no readable verdict) when both or neither hold it."""

    def verdict(a: str, b: str) -> str:
        if (marker in a) == (marker in b):
            return undecided
        return f"{reasoning}\\boxed{{A}}" if marker in a else "\\boxed{B}"

    return verdict


def pairwise_responder(
    policy: Callable[[str, int], str] | None, verdict: Callable[[str, str], str] | None
) -> Callable[[Any, int], str]:
    """:func:`respond_with` whose judge answers pairwise prompts with ``verdict(a, b)`` (``None`` for either
    side: that side is never asked)."""
    return respond_with(policy, pairwise(verdict) if verdict else None)


async def pairwise_scores(
    env_cls: type,
    tokenizer_dir: Any,
    replies: list[str],
    item: Any,
    verdict: Callable[[str, str], str],
    **values: Any,
) -> tuple[list[float], Any, list[str]]:
    """:func:`judged_scores` with a pairwise judge answering ``verdict(a, b)``."""
    return await judged_scores(env_cls, tokenizer_dir, replies, item, pairwise(verdict), **values)
