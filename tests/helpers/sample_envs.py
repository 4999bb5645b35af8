"""Small environments used by the runtime tests (also runnable as a script in a subprocess).

``CountingEnv`` asks its inference server "What is N+1?" for item N (or, with ``use_inference=False``,
sleeps ``rollout_delay`` and invents answers), tokenises prompt+answer with the real tokenizer and scores
the rollouts so that scores differ. Knobs make it misbehave in controlled ways.

Run directly (no CLI layering): ``python tests/helpers/sample_envs.py direct-serve CONFIG_JSON SERVERS_JSON``;
anything else goes through ``CountingEnv.cli()``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import sys
from pathlib import Path
from typing import Any, Optional

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from atroposlib.envs.base import (  # noqa: E402
    APIServerConfig,
    BaseEnv,
    BaseEnvConfig,
    ScoredDataGroup,
    ScoredDataItem,
)


class CountingEnvConfig(BaseEnvConfig):
    num_items: int = 1_000_000
    use_inference: bool = True
    rollout_delay: float = 0.0
    max_tokens: int = 8
    #: raise in collect_trajectories on the first attempt of items divisible by this (0 = never)
    fail_first_attempt_every: int = 0
    #: return a ragged group (masks shorter than tokens) for items divisible by this (0 = never)
    ragged_every: int = 0
    #: return a group with a NaN score for items divisible by this (0 = never)
    nan_every: int = 0
    #: return equal scores for items divisible by this (0 = never)
    same_scores_every: int = 0
    #: sleep this long in the first collect_trajectories call of items divisible by ``hang_every``
    hang_every: int = 0
    hang_seconds: float = 0.0
    marker_dir: Optional[str] = None


class CountingEnv(BaseEnv):
    name = "counting"
    env_config_cls = CountingEnvConfig

    async def setup(self) -> None:
        self.next_item = 0
        self.attempts: collections.Counter[int] = collections.Counter()
        self.eval_count = 0

    async def get_next_item(self) -> Any:
        if self.next_item >= self.config.num_items:
            return None
        self.next_item += 1
        return self.next_item - 1

    def _tokenize(self, messages: list[dict[str, str]]) -> list[int]:
        ids = self.tokenizer.apply_chat_template(messages, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)

    async def _answers(self, item: int, n: int) -> list[str]:
        if not self.config.use_inference:
            if self.config.rollout_delay:
                await asyncio.sleep(self.config.rollout_delay)
            return [f"{item + 1 + (i % 2)}" for i in range(n)]
        resp = await self.server.chat_completion(
            messages=[{"role": "user", "content": f"What is {item}+1?"}],
            n=n,
            max_tokens=self.config.max_tokens,
        )
        return [c.message.content or "" for c in resp.choices]

    def _matches(self, item: int, every: int) -> bool:
        return every > 0 and item > 0 and item % every == 0

    async def collect_trajectories(self, item: int) -> tuple[Optional[ScoredDataGroup], list]:
        self.attempts[item] += 1
        cfg = self.config
        if self._matches(item, cfg.hang_every) and self.attempts[item] == 1:
            await asyncio.sleep(cfg.hang_seconds)
        if self._matches(item, cfg.fail_first_attempt_every) and self.attempts[item] == 1:
            raise RuntimeError(f"flaky failure on item {item}")
        answers = await self._answers(item, cfg.group_size)
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], messages=[])
        prompt = [{"role": "user", "content": f"What is {item}+1?"}]
        prompt_len = len(self._tokenize(prompt))
        for i, answer in enumerate(answers):
            chat = [*prompt, {"role": "assistant", "content": answer}]
            tokens = self._tokenize(chat)
            group["tokens"].append(tokens)
            group["masks"].append([-100] * prompt_len + tokens[prompt_len:])
            group["scores"].append(1.0 if answer.strip() == str(item + 1) else -1.0 + 0.01 * i)
            group["messages"].append(chat)
        if self._matches(item, cfg.ragged_every):
            group["masks"][0] = group["masks"][0][:-1]
        if self._matches(item, cfg.nan_every):
            group["scores"][0] = float("nan")
        if self._matches(item, cfg.same_scores_every):
            group["scores"] = [0.0] * len(group["scores"])
        return group, []

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        self.eval_count += 1
        if self.config.marker_dir:
            Path(self.config.marker_dir, f"eval-{self.eval_count}").write_text(str(self.curr_step))


class SingleRolloutEnv(CountingEnv):
    """Uses the default ``collect_trajectories`` over ``collect_trajectory``."""

    name = "single_rollout"
    collect_trajectories = BaseEnv.collect_trajectories

    async def collect_trajectory(self, item: int) -> tuple[Optional[ScoredDataItem], list]:
        slot = self.attempts[item]
        self.attempts[item] += 1
        if slot == 1:  # the second rollout of every item is skipped
            return None, [f"follow-up-{item}"] if item == 0 else []
        answer = f"{item + 1 + slot}"
        chat = [{"role": "user", "content": f"What is {item}+1?"}, {"role": "assistant", "content": answer}]
        tokens = self._tokenize(chat)
        return (
            ScoredDataItem(
                tokens=tokens,
                masks=[-100] * 3 + tokens[3:],
                scores=float(slot),
                inference_logprobs=[1.0] * 3 + [-0.5] * (len(tokens) - 3),
                finish_reason="stop",
            ),
            [],
        )


def _direct_serve(config_json: str, servers_json: str) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = CountingEnvConfig(**json.loads(config_json))
    servers = [APIServerConfig(**s) for s in json.loads(servers_json)]
    testing = not servers
    env = CountingEnv(config, servers or [], slurm=False, testing=testing)
    asyncio.run(env.env_manager())


def answer_plus_one(prompt, index):
    """Answers "N+1" for "What is N+1?" on even choices, a wrong number on odd ones."""
    text = prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)
    n = int(text.split("What is ")[1].split("+")[0])
    return str(n + 1 if index % 2 == 0 else n + 7)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "direct-serve":
        _direct_serve(sys.argv[2], sys.argv[3])
    else:
        CountingEnv.cli()
