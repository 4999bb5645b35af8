"""Quantum hybrid: continue a WikiText passage, scored by word overlap and a PennyLane circuit's reading.

The prompt is ``Continue this text: `` and a passage's first words (a random 5 to 20 for training, half of
them for evaluation); the reply may reason in ``<think>...</think>`` first, and the continuation is what
follows. Reward, as in the original: ``2 x combined - 1`` with ``combined = perplexity_weight (0.7) x
(0.7 x Jaccard(word sets) + 0.3 x length closeness) + quantum_weight (0.3) x coherence``, where the
coherence is the quantum text analyzer's reading of the continuation's surface statistics on an
``n_qubits`` (8) wire circuit (``quantum_text.py``). -1 without scoring for an empty continuation, unclosed
or repeated reasoning, or one that repeats the prompt. Replies are sampled at ``max_tokens`` 100 (50 for
evaluation, at temperature 0.7). Logs ``train/perplexity_avg``, ``train/quantum_coherence_avg``,
``train/combined_score_avg``, ``train/quantum_variance_avg``; evaluate adds ``eval/combined_score`` and
``eval/quantum_coherence``.

Data: ``dataset_name`` / ``dataset_config`` (``wikitext``, ``wikitext-2-raw-v1``): the first 10 000 rows of
``train`` and the first 100 of ``validation`` (streamed), each cut to ``4 x sequence_length`` characters;
passages under 11 words are left out. ``--env.dataset_path`` / ``--env.eval_dataset_path`` read local rows
with a ``text`` field (without an evaluation file, the last fifth of the passages is held out).

``python environments/community/quantum_hybrid/atopos_quant.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, ClassVar, Optional

from pydantic import Field

from atroposlib.envs.data_loading import load_rows
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.reply_fields import ReplyFields
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import answer_section

try:
    from environments.community.quantum_hybrid.continuation import (
        Continuation,
        passages,
        similarity_score,
        split_passage,
    )
    from environments.community.quantum_hybrid.quantum_text import quantum_coherence
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from continuation import Continuation, passages, similarity_score, split_passage
    from quantum_text import quantum_coherence

PROMPT = "Continue this text: "
_SPACES = re.compile(r"\s+")


def continuation_text(reply: str) -> Optional[str]:
    """The continuation after the reasoning (stripped), or None when it is empty or the reasoning is
    malformed."""
    section = answer_section(reply)
    if section is None or not section.strip():
        return None
    return section.strip()


def _normal(text: str) -> str:
    return _SPACES.sub(" ", text.lower()).strip()


class QuantumHybridConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the original's circuit size, data and score weights."""

    ignored_original_keys: ClassVar[dict[str, str]] = {
        "n_layers": "the text analyzer has no parameterised layers (the original's atopos_quant.py never read it)",
        "base_model_name": "no base model is loaded (the original's atopos_quant.py never read it)",
    }

    n_qubits: int = Field(8, ge=2, le=20, description="wires of the quantum text analyzer's circuit")
    dataset_name: str = Field("wikitext", description="hub data set of the passages")
    dataset_config: str = Field("wikitext-2-raw-v1", description="its configuration")
    sequence_length: int = Field(256, ge=4, description="passages are cut to 4 x this many characters")
    perplexity_weight: float = Field(0.7, description="weight of the word-overlap and length score")
    quantum_weight: float = Field(0.3, description="weight of the quantum coherence")
    dataset_path: Optional[str] = Field(
        None, description="local rows with a text field (default: the hub set)"
    )
    eval_dataset_path: Optional[str] = Field(None, description="local evaluation rows (default: validation)")
    max_tokens: Optional[int] = Field(100, ge=1, description="tokens per training continuation")
    eval_max_tokens: int = Field(50, ge=1, description="tokens per evaluation continuation")
    seed: int = Field(0, description="seed of the training split points")


class QuantumHybridEnv(DeclaredDefaults, ReplyFields, SingleTurnEnv):
    """Rewards text continuations by overlap with the real text and the quantum analyzer's coherence."""

    name = "quantum_hybrid"
    env_config_cls = QuantumHybridConfig
    config: QuantumHybridConfig
    default_model = "NousResearch/DeepHermes-3-Llama-3-3B-Preview"
    default_server_settings = {"num_requests_for_eval": 4, "timeout": 300}
    default_env_values = dict(
        group_size=4, total_steps=20, max_token_length=2048, eval_temperature=0.7, eval_limit=5
    )
    #: evaluation counts a continuation as correct at a combined score of 0.5 (reward 0)
    correct_threshold = 0.0

    def __init__(self, config: QuantumHybridConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.rng = random.Random(config.seed)
        self.metrics_buffer: dict[str, list[float]] = defaultdict(list)

    def _passages(self, path: Optional[str], split: str, limit: int) -> list[str]:
        cfg = self.config

        def hub():
            from datasets import load_dataset

            return load_dataset(cfg.dataset_name, cfg.dataset_config, split=split, streaming=True).take(limit)

        rows = load_rows(path, hub, [], f"{cfg.dataset_name}/{cfg.dataset_config}")
        return passages(
            rows, str(path or f"{cfg.dataset_name}/{cfg.dataset_config}"), 4 * cfg.sequence_length
        )

    async def setup(self) -> None:
        cfg = self.config
        train = self._passages(cfg.dataset_path, "train", 10_000)
        if cfg.eval_dataset_path or not cfg.dataset_path:
            self.train, test = train, self._passages(cfg.eval_dataset_path, "validation", 100)
        else:
            held = max(1, len(train) // 5)
            self.train, test = (train[:-held] or train), train[-held:]
        self.test = [split_passage(text) for text in test]

    async def get_next_item(self) -> Continuation:
        return split_passage(self.next_in_turn(self.train), self.rng)

    def prompt_messages(self, item: Continuation) -> list[dict[str, str]]:
        return [{"role": "user", "content": PROMPT + item.prompt}]

    def parts(self, reply: str, item: Continuation) -> Optional[tuple[float, float]]:
        """``(similarity score, coherence)`` of a reply, or None when it is not scored (see the module
        docstring)."""
        text = continuation_text(reply)
        if text is None or _normal(item.prompt) in _normal(text):
            return None
        return similarity_score(text, item.target), quantum_coherence(text, self.config.n_qubits)

    def score_reply(self, reply: str, item: Continuation) -> float:
        parts = self.parts(reply, item)
        if parts is None:
            return -1.0
        similarity, coherence = parts
        combined = self.config.perplexity_weight * similarity + self.config.quantum_weight * coherence
        return 2.0 * combined - 1.0

    def score_replies(self, replies: Sequence[str], item: Continuation) -> list[float]:
        scores = super().score_replies(replies, item)
        if len(replies) > 1:  # a training group (evaluation scores one reply at a time)
            for reply, score in zip(replies, scores, strict=True):
                parts = self.parts(reply, item)
                if parts is not None:
                    self.metrics_buffer["perplexity"].append(parts[0])
                    self.metrics_buffer["quantum_coherence"].append(parts[1])
                    self.metrics_buffer["quantum_variance"].append(abs(parts[1] - 0.5) * 2)
                self.metrics_buffer["combined_score"].append((score + 1.0) / 2.0)
        return scores

    async def sample_eval_reply(self, item: Continuation, sem) -> tuple[list[dict], str]:
        """One evaluation continuation within ``eval_max_tokens``."""
        async with sem:
            messages, replies = await self._sample(
                self.server, item, 1, max_tokens=self.config.eval_max_tokens,
                temperature=self.config.eval_temperature, split="eval",
            )  # fmt: skip
        return messages, replies[0] if replies else ""

    def eval_sample_fields(self, item: Continuation) -> dict[str, Any]:
        return {"prompt": item.prompt, "target": item.target}

    def reply_fields(self, reply: str, item: Continuation) -> dict[str, Any]:
        parts = self.parts(reply, item)
        return {"quantum_coherence": parts[1] if parts else None}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        coherences = [s["quantum_coherence"] for s in samples if s["quantum_coherence"] is not None]
        return {
            "eval/combined_score": mean([(s["score"] + 1.0) / 2.0 for s in samples]),
            "eval/quantum_coherence": mean(coherences) if coherences else 0.0,
        }

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        for name, values in self.metrics_buffer.items():
            if values:
                wandb_metrics[f"train/{name}_avg"] = mean(values)
                wandb_metrics[f"train/{name}_max"] = max(values)
                wandb_metrics[f"train/{name}_min"] = min(values)
        wandb_metrics["quantum/n_qubits"] = float(self.config.n_qubits)
        wandb_metrics["quantum/weight"] = self.config.quantum_weight
        self.metrics_buffer = defaultdict(list)
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    QuantumHybridEnv.cli()
