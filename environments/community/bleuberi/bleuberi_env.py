"""BLEUBERI: instruction following rewarded by BLEU against reference answers ("BLEUBERI: BLEU is a
surprisingly effective reward for instruction following", arXiv:2505.11080).

Each item is the first user turn of a chat from the data set; its first assistant turn is the reference.
With ``reasoning`` (default) the ``system_prompt`` asks the policy to think in ``<think>...</think>`` and answer
inside ``<answer></answer>``. The answer is the one ``<answer>`` block after the reasoning (the same block
repeated is fine), or, without such a block, all the text after the reasoning; the reasoning never counts.

Reward: sacrebleu's sentence BLEU of the answer against the references, over 100 (0.0 to 1.0). 0.0 for an
empty answer, a reasoning block that never closes, several different ``<answer>`` blocks (a hedge), or an
answer that repeats the whole prompt (it shares n-grams with most references without answering).
``reward_funcs`` may only be ``["bleu"]`` and ``ref_models`` only ``["gold"]`` (the data set's own answer):
the original's other reward functions and reference models needed its research code. A reply counts as
correct at 0.5 or above: ``train/percent_correct``, ``eval/accuracy``; evaluation adds
``eval/avg_bleu`` and ``eval/avg_bleu/<source>`` per source of the data set.

Data: ``datasets.load_dataset(dataset_name, split=dataset_split)`` (``allenai/tulu-3-sft-mixture``, ``train``),
shuffled with ``seed`` when ``shuffle``, 98 % for training and 2 % for evaluation, cut to
``max_train_examples`` / ``max_test_examples``. ``--env.dataset_path`` / ``--env.eval_dataset_path`` read local
rows in its schema: ``messages`` (``role`` / ``content`` turns, with a user and an assistant turn), optional
``id`` and ``source``.

``python environments/community/bleuberi/bleuberi_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import sacrebleu
from pydantic import Field, field_validator

from atroposlib.envs.data_loading import DatasetError, load_rows
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import answer_section

SYSTEM_PROMPT = (
    "You are a deep thinking AI, you may use extremely long chains of thought to deeply consider the problem "
    "and deliberate with yourself via systematic reasoning processes to help come to a correct solution prior "
    "to answering. You should enclose your thoughts and internal monologue inside <think> </think> tags, and "
    "then provide your solution or response to the problem. After your thinking, make sure to clearly provide "
    "your final answer inside <answer></answer> tags."
)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class BleuItem:
    """A prompt, its references and where it comes from (``source``)."""

    id: str
    prompt: str
    references: tuple[str, ...]
    source: str = "unknown"


def item_from_row(row: dict[str, Any], index: int, source: str) -> BleuItem:
    """The first user turn and first assistant turn of a row's ``messages``; :class:`DatasetError` naming the
    source, row and field when they are not there."""
    messages = row["messages"]
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise DatasetError(f"{source}: row {index}: field 'messages' is not a list of turns")
    turns = {}
    for role in ("user", "assistant"):
        text = next((m.get("content") for m in messages if m.get("role") == role), None)
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(f"{source}: row {index}: field 'messages' has no {role} turn with text")
        turns[role] = text
    return BleuItem(
        str(row.get("id") or index), turns["user"], (turns["assistant"],), str(row.get("source") or "unknown")
    )


def reply_answer(reply: str) -> Optional[str]:
    """The answer of a reply (see the module docstring), or None."""
    section = answer_section(reply)
    if section is None:
        return None
    blocks = {" ".join(b.split()) for b in _ANSWER.findall(section)}
    if len(blocks) > 1:
        return None
    answer = blocks.pop() if blocks else section.strip()
    return answer or None


def _squeeze(text: str) -> str:
    return " ".join(text.lower().split())


def echoes(answer: str, prompt: str) -> bool:
    """Whether ``answer`` repeats the whole prompt (of five words or more), which shares n-grams with most
    references without answering."""
    return len(prompt.split()) >= 5 and _squeeze(prompt) in _squeeze(answer)


def bleu_reward(reply: str, references: Sequence[str], prompt: str = "") -> float:
    """Sentence BLEU of the reply's answer against ``references``, over 100; 0.0 without an answer or for
    an answer that repeats the prompt."""
    answer = reply_answer(reply)
    if answer is None or echoes(answer, prompt):
        return 0.0
    return min(max(sacrebleu.sentence_bleu(answer, list(references)).score / 100.0, 0.0), 1.0)


class BLEUBERIEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the original's data, reference, reward and prompt settings."""

    ignored_original_keys: ClassVar[dict[str, str]] = {
        "selection_mode": "the original declared it without using it",
        "num_examples": "the original declared it without using it",
        "streaming": "the 98/2 split needs the whole split loaded; the original could not stream it either",
    }

    dataset_name: str = Field("allenai/tulu-3-sft-mixture", description="hub data set of chats")
    dataset_split: str = Field("train", description="hub split to read")
    cache_dir: Optional[str] = Field(None, description="cache directory of the hub data set")
    shuffle: bool = Field(True, description="shuffle the data set (with seed) before the split")
    dataset_path: Optional[str] = Field(None, description="local rows with 'messages' (default: the hub set)")
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation rows (default: 2 % held out)"
    )
    ref_models: list[str] = Field(["gold"], description="references: 'gold' (the data set's answer) only")
    reward_funcs: list[str] = Field(["bleu"], description="reward functions: 'bleu' only")
    max_train_examples: Optional[int] = Field(None, ge=1, description="use at most this many training rows")
    max_test_examples: Optional[int] = Field(None, ge=1, description="use at most this many evaluation rows")
    system_prompt: str = Field(SYSTEM_PROMPT, description="system turn sent when reasoning is on")
    reasoning: bool = Field(True, description="send the system prompt (think, then <answer> tags)")
    seed: int = Field(42, description="seed of the shuffle")

    @field_validator("ref_models")
    @classmethod
    def _gold_only(cls, value: list[str]) -> list[str]:
        if value != ["gold"]:
            raise ValueError("only ['gold'] (the data set's own answer) is supported as reference")
        return value

    @field_validator("reward_funcs")
    @classmethod
    def _bleu_only(cls, value: list[str]) -> list[str]:
        if value != ["bleu"]:
            raise ValueError("only ['bleu'] is supported as reward function")
        return value


class BLEUBERIEnv(DeclaredDefaults, SingleTurnEnv):
    """Instruction following rewarded by BLEU (see the module docstring)."""

    name = "bleuberi"
    env_config_cls = BLEUBERIEnvConfig
    config: BLEUBERIEnvConfig
    default_model = "NousResearch/DeepHermes-3-Llama-3-3B-Preview"
    default_env_values = dict(
        group_size=2, total_steps=1000, steps_per_eval=100, max_token_length=2048,
        max_num_workers=4, max_eval_workers=2,
    )  # fmt: skip
    #: a reply counts as correct at this BLEU (over 100) or above
    correct_threshold = 0.5

    # -- data -------------------------------------------------------------------------------------------
    def _items(self, path: Optional[str]) -> list[BleuItem]:
        cfg = self.config

        def hub() -> Any:
            from datasets import load_dataset

            return load_dataset(cfg.dataset_name, split=cfg.dataset_split, cache_dir=cfg.cache_dir)

        rows = load_rows(path, hub, ["messages"], cfg.dataset_name)
        items = [item_from_row(row, i, path or cfg.dataset_name) for i, row in enumerate(rows)]
        if cfg.shuffle:
            random.Random(cfg.seed).shuffle(items)
        return items

    async def setup(self) -> None:
        cfg = self.config
        items = self._items(cfg.dataset_path)
        if cfg.eval_dataset_path:
            train, test = items, self._items(cfg.eval_dataset_path)
        else:
            cut = max(1, int(0.98 * len(items)))
            train, test = items[:cut], items[cut:] or items[-1:]
        self.train = train[: cfg.max_train_examples] if cfg.max_train_examples else train
        self.test = test[: cfg.max_test_examples] if cfg.max_test_examples else test

    def prompt_messages(self, item: BleuItem) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.config.system_prompt}] if self.config.reasoning else []
        return [*system, {"role": "user", "content": item.prompt}]

    # -- reward and evaluation --------------------------------------------------------------------------
    def score_reply(self, reply: str, item: BleuItem) -> float:
        return bleu_reward(reply, item.references, item.prompt)

    def eval_sample_fields(self, item: BleuItem) -> dict[str, Any]:
        return {"id": item.id, "source": item.source, "reference": item.references[0]}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        by_source: dict[str, list[float]] = defaultdict(list)
        for sample in samples:
            by_source[sample["source"]].append(sample["score"])
        return {
            "eval/accuracy": mean([1.0 if s["correct"] else 0.0 for s in samples]),
            "eval/avg_bleu": mean([s["score"] for s in samples]),
            **{f"eval/avg_bleu/{source}": mean(scores) for source, scores in sorted(by_source.items())},
        }


if __name__ == "__main__":
    BLEUBERIEnv.cli()
