"""Capital cities: the example environment of docs/first-environment.md.

The model is asked for the capital of a country and earns 1.0 when its reply names the right city,
0.0 otherwise. Questions come from a JSONL file (``capitals.jsonl`` beside this file by default);
the last ``eval_size`` rows are held out for ``evaluate``.

    python docs/examples/first_env.py process --openai.base_url http://localhost:9001/v1 \\
        --openai.model_name MODEL --env.data_path_to_save_groups runs/capitals.jsonl
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Optional

from datasets import load_dataset
from pydantic import Field

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.type_definitions import Item
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

SYSTEM_PROMPT = "You are a geography expert. Answer with the name of the city only."
DATA_FILE = Path(__file__).with_name("capitals.jsonl")


class CapitalsConfig(BaseEnvConfig):
    """BaseEnvConfig plus where the questions come from."""

    dataset_path: str = Field(str(DATA_FILE), description="JSONL file with country/capital fields")
    eval_size: int = Field(4, ge=1, description="rows at the end of the file held out for evaluation")


def score_reply(reply: str, capital: str) -> float:
    """1.0 when the reply, after any <think> block, is the capital (case and punctuation ignored)."""
    answer = reply.split("</think>")[-1]
    words = re.sub(r"[^a-z ]", " ", answer.lower()).split()
    return 1.0 if words == capital.lower().split() else 0.0


class CapitalsEnv(BaseEnv):
    name = "capitals"
    env_config_cls = CapitalsConfig

    @classmethod
    def config_init(cls) -> tuple[CapitalsConfig, list[APIServerConfig]]:
        env_config = CapitalsConfig(
            group_size=4,
            max_token_length=256,
            total_steps=10,
            batch_size=16,
            rollout_server_url="http://localhost:8000",
        )
        server_configs = [
            APIServerConfig(
                model_name="Qwen/Qwen2.5-1.5B-Instruct",
                base_url="http://localhost:9001/v1",
                api_key="x",
            )
        ]
        return env_config, server_configs

    async def setup(self) -> None:
        rows = list(load_dataset("json", data_files=self.config.dataset_path, split="train"))
        self.train = rows[: -self.config.eval_size]
        self.test = rows[-self.config.eval_size :]
        self.iter = 0

    async def get_next_item(self) -> Item:
        row = self.train[self.iter % len(self.train)]
        self.iter += 1
        return row

    def prompt(self, row: dict) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"What is the capital of {row['country']}?"},
        ]

    async def collect_trajectories(self, item: dict) -> tuple[Optional[ScoredDataGroup], list[Item]]:
        messages = self.prompt(item)
        completion = await self.server.chat_completion(
            messages=messages,
            n=self.config.group_size,
            max_tokens=32,
            temperature=1.0,
        )
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], messages=[])
        for choice in completion.choices:
            reply = choice.message.content or ""
            chat = [*messages, {"role": "assistant", "content": reply}]
            tokenized = tokenize_for_trainer(self.tokenizer, chat, finish_reason=choice.finish_reason)
            group["tokens"].append(tokenized["tokens"])
            group["masks"].append(tokenized["masks"])
            group["scores"].append(score_reply(reply, item["capital"]))
            group["messages"].append(chat)
        return group, []

    async def evaluate(self, *args, **kwargs) -> None:
        start = time.time()
        samples = []
        for row in self.test:
            messages = self.prompt(row)
            completion = await self.server.chat_completion(
                messages=messages, n=1, max_tokens=32, temperature=0.0, split="eval"
            )
            reply = completion.choices[0].message.content or ""
            score = score_reply(reply, row["capital"])
            samples.append({"country": row["country"], "reply": reply, "score": score})
        accuracy = sum(s["score"] for s in samples) / len(samples)
        await self.evaluate_log(
            metrics={"eval/percent_correct": accuracy},
            samples=samples,
            start_time=start,
            end_time=time.time(),
        )


if __name__ == "__main__":
    CapitalsEnv.cli()
