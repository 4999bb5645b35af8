"""AIME 2024 with the Hermes reasoning prompt: the example of a scripted evaluation on ``EvalBase``.

``EvalBase`` (:mod:`atroposlib.envs.eval`) is the light way to evaluate: a class with ``setup_data`` (the
items) and ``run_item`` (ask, score, return metrics and a sample), run by ``eval_runner`` against any
OpenAI-compatible server, no environment config. This one asks each AIME 2024 problem ``pass_at_n_samples``
times (default 4, temperature 1.0, up to 32,768 tokens) with the Hermes system prompt, scores every reply with
the evaluations' math check (:class:`atroposlib.evals.math.MathScorer`: the boxed answer after the think block
by ``math_verify``, in worker processes with a time limit) and reports the unbiased pass@k (``pass@1:4``:
pass@1 estimated from 4 samples) and the accuracy over all replies.

Data: ``HuggingFaceH4/aime_2024`` (split ``train``), or ``--env.dataset_path`` (a local file in that schema:
``problem``, ``answer``).

Options: the runner's (``--server-url``, default ``http://localhost:8000``; ``--model-name``, default the
server's first model; ``--api-key``; ``--max-concurrency``) and ``--env.dataset_path``, ``--env.pass_at_n``,
``--env.pass_at_n_samples``, ``--env.temperature``, ``--env.max_tokens``, ``--env.use_system_prompt``,
``--env.data_dir_to_save_evals`` (``metrics.json`` and ``samples.jsonl``). A leading ``evaluate`` is accepted,
as for the other evaluations.

``python environments/eval_environments/aime24_hermes_example.py evaluate --server-url http://localhost:9000
--env.data_dir_to_save_evals evals/aime24``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any, Optional

from atroposlib.envs.data_loading import DatasetError
from atroposlib.envs.eval import EvalBase, eval_runner, pass_at_k
from atroposlib.evals import HubSet, load_eval_rows
from atroposlib.evals.math import MathScorer, gold_latex

HERMES_SYSTEM_PROMPT = (
    "You are a deep thinking AI, you may use extremely long chains of thought to deeply consider the "
    "problem and deliberate with yourself via systematic reasoning processes to help come to a correct "
    "solution prior to answering. You should enclose your thoughts and internal monologue inside <think> "
    "</think> tags, and then provide your solution or response to the problem."
)


class AIME24(EvalBase):
    """AIME 2024 (see the module docstring). Keywords: ``use_system_prompt`` (the Hermes prompt, default
    False as in the original's class; the command line turns it on), ``dataset_path``, and
    :class:`EvalBase`'s own (``pass_at_n``, ``pass_at_n_samples``, ``temperature``, ``max_tokens``,
    ``eval_dir``)."""

    def setup_data(self) -> list[dict[str, Any]]:
        rows = load_eval_rows(
            getattr(self, "dataset_path", None),
            HubSet("HuggingFaceH4/aime_2024", "train"),
            ("problem", "answer"),
        )
        return [
            {
                "id": str(r.data.get("id", r.index)),
                "problem": str(r.data["problem"]),
                "answer": gold_latex(r.data["answer"]),
            }
            for r in rows
        ]

    @property
    def scorer(self) -> MathScorer:
        if getattr(self, "_scorer", None) is None:
            self._scorer = MathScorer()
        return self._scorer

    async def run_item(self, server: Any, data_item: dict[str, Any]) -> tuple[dict, list]:
        messages = (
            [{"role": "system", "content": HERMES_SYSTEM_PROMPT}]
            if getattr(self, "use_system_prompt", False)
            else []
        )
        messages.append({"role": "user", "content": data_item["problem"]})
        completion = await self.chat_completion(server, messages)
        replies = [choice.message.content or "" for choice in completion.choices]
        verdicts = await asyncio.gather(*(self.scorer.score(reply, data_item["answer"]) for reply in replies))
        rewards = [1.0 if v.correct else 0.0 for v in verdicts]
        n = len(rewards)
        k = self.pass_at_n
        key = f"pass@{k}" if n == k else f"pass@{k}:{n}"
        metrics = {
            key: pass_at_k(n, int(sum(rewards)), k) if n >= k else 0.0,
            "accuracy": sum(rewards) / max(n, 1),
        }
        samples = [
            {
                "id": data_item["id"],
                "messages": messages,
                "reply": reply,
                "gold": data_item["answer"],
                "extracted": verdict.answer,
                "method": verdict.reason,
                "score": reward,
            }
            for reply, verdict, reward in zip(replies, verdicts, rewards, strict=True)
        ]
        return metrics, samples

    async def __call__(self, server_manager: Any) -> dict:
        try:
            return await super().__call__(server_manager)
        finally:
            if getattr(self, "_scorer", None) is not None:
                self._scorer.close()


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def main(argv: Optional[Sequence[str]] = None) -> dict:
    """Parse the ``--env.*`` options, pass the rest to :func:`eval_runner`, run the evaluation."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "evaluate":
        args = args[1:]
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--env.dataset_path", dest="dataset_path", default=None)
    parser.add_argument("--env.pass_at_n", dest="pass_at_n", type=int, default=1)
    parser.add_argument("--env.pass_at_n_samples", dest="pass_at_n_samples", type=int, default=4)
    parser.add_argument("--env.temperature", dest="temperature", type=float, default=1.0)
    parser.add_argument("--env.max_tokens", dest="max_tokens", type=int, default=32768)
    parser.add_argument("--env.use_system_prompt", dest="use_system_prompt", type=_bool, default=True)
    parser.add_argument("--env.data_dir_to_save_evals", dest="eval_dir", default=None)
    options, rest = parser.parse_known_args(args)
    try:
        evaluator = AIME24(**vars(options))
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return asyncio.run(eval_runner(evaluator, rest))


if __name__ == "__main__":
    main()
