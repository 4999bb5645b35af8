"""GSM8K grade-school math: single-turn chat, answers checked with ``math_verify``.

Data: by default the real ``datasets.load_dataset("gsm8k", "main")`` (train split for rollouts, test split
for evaluation). ``--env.dataset_path FILE.jsonl`` (and optionally ``--env.eval_dataset_path``) reads a
local JSONL file with GSM8K's ``question`` / ``answer`` fields instead (the answer ends with ``#### n``),
which needs no network.

Rewards: +1 for a final ``\\boxed{}`` answer equal to the gold number, -1 otherwise; when every rollout of
a group is correct, longer replies are scored lower.

``python environments/gsm8k_server.py {serve,process,evaluate} --openai.base_url ... --openai.model_name ...``
"""

from __future__ import annotations

import random
import time
from typing import Optional, TypedDict

from datasets import Dataset
from math_verify import LatexExtractionConfig, parse, verify
from pydantic import Field
from tqdm.asyncio import tqdm_asyncio

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import hub_split, load_rows
from atroposlib.envs.reporting import EvalReporting, IterCheckpoint
from atroposlib.type_definitions import Item
from atroposlib.utils.math_checking import reply_extraction

DEFAULT_MODEL = "NousResearch/DeepHermes-3-Llama-3-3B-Preview"

system_prompt = (
    "You are a deep thinking AI. You may reason at length before answering: put your thoughts inside "
    "<think> </think> tags, then give your solution.\n\n"
    "You have at most 2048 tokens; use fewer if you can.\n\n"
    "Finish with your final answer in this exact form: \\boxed{your answer here}\n"
    "Answers in any other form receive no credit."
)


class GSM8kRow(TypedDict):
    question: str
    answer: str


class GSM8kEnvConfig(BaseEnvConfig):
    """BaseEnvConfig plus where the problems come from."""

    dataset_path: Optional[str] = Field(
        None, description="local JSONL with question/answer fields used instead of the gsm8k dataset"
    )
    eval_dataset_path: Optional[str] = Field(
        None, description="local JSONL for evaluation (default: dataset_path when that is set)"
    )
    eval_limit: Optional[int] = Field(None, ge=1, description="evaluate on at most this many test problems")
    min_completion_tokens: int = Field(
        10, ge=0, description="rollouts with fewer generated tokens than this are left out of a group"
    )


def gold_number(answer: str) -> str:
    """The final number of a GSM8K answer (text after the last ``#``, thousands separators removed)."""
    return answer.split("#")[-1].strip().replace(",", "")


def _parse_reply(text: str):
    # Only what follows the reasoning counts; the boxed answer is the anchor.
    return parse(
        text.split("</think>")[-1], extraction_config=reply_extraction(), extraction_mode="first_match"
    )


def _parse_gold(boxed_answer: str):
    return parse(boxed_answer, extraction_mode="first_match", extraction_config=[LatexExtractionConfig()])


class GSM8kEnv(LocalServerDefaults, IterCheckpoint, EvalReporting, BaseEnv):
    name = "gsm8k"
    env_config_cls = GSM8kEnvConfig
    trains_token_ids = True
    config: GSM8kEnvConfig
    default_model = DEFAULT_MODEL
    #: sampling temperature of evaluation replies
    eval_temperature: float = 0.6

    def __init__(self, config: GSM8kEnvConfig, server_configs, slurm=True, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.rollouts_for_wandb = []
        self.completion_lengths = []

    @classmethod
    def default_env_config(cls) -> GSM8kEnvConfig:
        return GSM8kEnvConfig(
            group_size=8,
            batch_size=12,
            max_token_length=2048,  # the budget the system prompt states
        )

    def _load_splits(self):
        """Train and test rows (the hub's ``gsm8k``/``main`` or local files), each row checked for
        ``question`` and ``answer``: a missing field is a :class:`DatasetError` naming file, row and field."""
        cfg = self.config
        required = ("question", "answer")
        train = load_rows(
            cfg.dataset_path, hub_split("gsm8k", "train", "main"), required, "gsm8k (main, train)"
        )
        eval_path = cfg.eval_dataset_path or cfg.dataset_path
        test = load_rows(eval_path, hub_split("gsm8k", "test", "main"), required, "gsm8k (main, test)")
        return Dataset.from_list(train), Dataset.from_list(test)

    async def setup(self):
        train, test = self._load_splits()
        self.train = train.shuffle(seed=42)
        test = test.shuffle(seed=42)
        self.test = [{"question": row["question"], "gold_answer": gold_number(row["answer"])} for row in test]
        if self.config.eval_limit is not None:
            self.test = self.test[: self.config.eval_limit]

    async def rollout_and_score_eval(self, question: str, answer: str) -> dict:
        messages = [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": question},
        ]
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            completion = await managed.chat_completion(
                messages=messages,
                n=1,
                max_tokens=self.config.max_token_length,
                temperature=self.eval_temperature,
                split="eval",
            )
        reply = completion.choices[0].message.content or ""
        gold_parsed = _parse_gold("\\boxed{" + answer + "}")
        answer_parsed = _parse_reply(reply)
        score = 1 if verify(answer_parsed, gold_parsed) else 0
        sample = {
            "messages": [*messages, {"role": "assistant", "content": reply}],
            "question": question,
            "gold_answer": answer,
            "gold_parsed": str(gold_parsed[0]) if gold_parsed else None,
            "model_parsed": str(answer_parsed[0]) if answer_parsed else None,
            "score": score,
            "correct": bool(score),
            "finish_reason": completion.choices[0].finish_reason,
            "response_after_think": reply.split("</think>")[-1],
        }
        return {"score": score, "sample": sample}

    async def evaluate(self, *args, **kwargs):
        start_time = time.time()
        results = await tqdm_asyncio.gather(
            *(self.rollout_and_score_eval(item["question"], item["gold_answer"]) for item in self.test),
            desc="gsm8k eval",
        )
        end_time = time.time()
        scores = [r["score"] for r in results]
        percent_correct = sum(scores) / len(scores) if scores else 0.0
        await self.report_evaluation(
            {"eval/percent_correct": percent_correct},
            [r["sample"] for r in results],
            start_time,
            end_time,
            {"temperature": self.eval_temperature, "max_tokens": self.config.max_token_length},
        )

    async def collect_trajectories(self, item: GSM8kRow) -> tuple[Optional[ScoredDataGroup], list[Item]]:
        user_message = {"role": "user", "content": item["question"]}
        gold_answer = "\\boxed{" + gold_number(item["answer"]) + "}"
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            chat_completions = await managed.chat_completion(
                messages=[{"role": "system", "content": system_prompt}, user_message],
                n=self.config.group_size,
                max_tokens=self.config.max_token_length,
                temperature=1.0,
            )
            nodes = managed.get_state()["nodes"]
        to_score = []
        for i, choice in enumerate(chat_completions.choices):
            to_score.append(
                {
                    "messages": (
                        {"role": "system", "content": system_prompt},
                        user_message,
                        {"role": "assistant", "content": choice.message.content or ""},
                    ),
                    "gold_answer": gold_answer,
                    "finish_reason": choice.finish_reason,
                    "tokens": nodes[i].tokens,
                    "masks": nodes[i].masked_tokens,
                    "logprobs": nodes[i].logprobs,
                }
            )
        return await self.score(to_score), []

    async def score(self, rollout_group_data: list[dict]) -> Optional[ScoredDataGroup]:
        scores = ScoredDataGroup()
        scores["tokens"] = []
        scores["masks"] = []
        scores["scores"] = []
        scores["inference_logprobs"] = []
        gold_parsed = _parse_gold(rollout_group_data[0]["gold_answer"])
        if len(gold_parsed) == 0:
            # The gold answer does not parse: nothing can be scored for this problem.
            return None
        random.shuffle(rollout_group_data)
        for rollout in rollout_group_data:
            reward = verify(_parse_reply(rollout["messages"][-1]["content"]), gold_parsed)
            generated = sum(1 for m in rollout["masks"] if m != -100)
            if generated < self.config.min_completion_tokens:
                continue
            scores["tokens"].append(list(rollout["tokens"]))
            scores["masks"].append(list(rollout["masks"]))
            scores["inference_logprobs"].append(list(rollout["logprobs"]))
            scores["scores"].append(1.0 if reward else -1.0)
            if len(scores["tokens"]) >= self.config.group_size:
                break
        for value in scores["scores"]:
            self.percent_correct_buffer.append(max(value, 0))
        if scores["scores"] and all(value == 1.0 for value in scores["scores"]):
            # Everyone is right: prefer the shorter replies (linear penalty above half the budget).
            lengths = [len(tokens) for tokens in scores["tokens"]]
            if max(lengths) == 0:
                return None
            budget = self.config.max_token_length
            threshold = budget * 0.5
            scores["scores"] = [
                1.0 if length <= threshold else 1.0 - min((length - threshold) / (budget - threshold), 1.0)
                for length in lengths
            ]
        if not scores["scores"] or all(value == scores["scores"][0] for value in scores["scores"]):
            return None
        return scores

    async def get_next_item(self) -> GSM8kRow:
        return self.next_in_turn(self.train)


if __name__ == "__main__":
    GSM8kEnv.cli()
