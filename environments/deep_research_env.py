"""Deep research: answer multi-hop questions by searching a document collection and reading pages.

Data: HotpotQA by default (``datasets.load_dataset("hotpotqa/hotpot_qa", "distractor")``, train split for
rollouts, validation for evaluation): questions whose answer needs two Wikipedia paragraphs, with the
titles of those supporting pages. ``--env.dataset_path FILE`` (and ``--env.eval_dataset_path``) read
local rows in the hub's schema: ``question``, ``answer``, ``supporting_facts`` (``{"title": [...],
"sent_id": [...]}`` or a list of ``[title, sent_id]`` pairs) and, unless a corpus file is given,
``context`` (``{"title": [...], "sentences": [[...], ...]}`` or a list of ``[title, sentences]`` pairs).

Collection: by default every context paragraph of the loaded rows, one page per title (id = the title),
so each question's supporting pages sit among the distractors of every other question.
``--env.corpus_path FILE`` (JSONL/JSON/Parquet/CSV of ``id``, ``title``, ``text``) searches that
collection instead. Search is BM25 (``bm25s``), built once per collection and cached on disk
(``--env.index_cache_dir``). ``--env.search_backend smolagents`` searches the web instead
(``smolagents``' DuckDuckGo search and page visits, installed with the ``agents`` extra; needs network);
subclasses plug any other backend in through :meth:`DeepResearchEnv.make_backend`.

Episode: the model calls ``search(query, k)`` and ``open(doc_id)`` in Hermes ``<tool_call>`` form over
several turns (``max_turns`` 8); each call is answered in a ``tool`` turn of ``<tool_response>`` blocks
(unknown tools, bad JSON, bad arguments, backend errors and time-outs get an error response and the
episode goes on; output is cut to ``tool_output_chars``). A reply with more than
``max_calls_per_turn`` calls runs none and ends the episode (score 0). The first reply without a call is
the final one: ``<answer>...</answer>`` once, after the reasoning, citing pages with
``<cite>doc_id</cite>``.

Reward: answer F1 against the gold answer after SQuAD normalisation (lower case, no punctuation or
articles; ``--env.answer_metric em`` for exact match) plus ``citation_bonus`` x the F1 of the cited
pages' titles against the supporting titles. A reply with no answer, several answers, an empty one, a
malformed think block, or an episode ended by the turn or token limit scores 0. Only the model's tokens
are trained (ManagedServer); the prompt and the tool responses are masked.

``python environments/deep_research_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import json
import logging
import random
import re
import string
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field

from atroposlib.envs.base import EvalHandlingEnum
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows, read_local_rows
from atroposlib.envs.episodes import END_DONE, Episode, Feedback
from atroposlib.envs.multi_turn import MultiTurnEnv
from atroposlib.envs.tools import tool_schema
from atroposlib.envs.tools.research import Bm25Backend, OpenTool, Page, SearchTool, default_cache_dir
from atroposlib.envs.tools.turns import ToolLimitsConfig, ToolTally
from atroposlib.utils.replies import answer_section

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a research assistant. Answer the question by searching a document collection and reading "
    "the documents you find; the answer usually needs facts from more than one document. You may reason "
    "inside <think> </think> tags before each reply.\n\n"
    "You can call these tools:\n<tools>\n{tools}\n</tools>\n\n"
    'To call a tool, write <tool_call>{{"name": "tool_name", "arguments": {{...}}}}</tool_call>; results come '
    "back in <tool_response> blocks. When you know the answer, reply without any tool call: give the short "
    "answer as <answer>...</answer> and cite every document you used as <cite>doc_id</cite>."
)

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_CITE = re.compile(r"<cite>(.*?)</cite>", re.DOTALL)


# ---------------------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------------------
def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, punctuation and the articles a/an/the removed, spaces collapsed."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def answer_f1(prediction: str, gold: str) -> float:
    """Token F1 of two answers after :func:`normalize_answer` (yes/no/noanswer must match exactly)."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if pred in ("yes", "no", "noanswer") or ref in ("yes", "no", "noanswer"):
        return float(pred == ref)
    pred_tokens, ref_tokens = pred.split(), ref.split()
    common = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the two answers are equal after :func:`normalize_answer`."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def set_f1(predicted: set[str], expected: set[str]) -> float:
    """F1 of two sets (0 when either is empty)."""
    common = len(predicted & expected)
    if not common:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class FinalReply:
    """The answer and the cited page ids of a final reply."""

    answer: str
    cited: tuple[str, ...]


def read_final_reply(reply: str) -> Optional[FinalReply]:
    """The one non-empty ``<answer>`` after the reasoning and the ``<cite>`` ids; None when malformed."""
    section = answer_section(reply)
    if section is None:
        return None
    answers = _ANSWER.findall(section)
    if len(answers) != 1 or section.count("<answer>") != 1 or not answers[0].strip():
        return None
    cited = tuple(dict.fromkeys(c.strip() for c in _CITE.findall(section) if c.strip()))
    return FinalReply(answers[0].strip(), cited)


# ---------------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResearchItem:
    """A question, its gold answer and the titles of its supporting pages."""

    question: str
    answer: str
    supporting_titles: tuple[str, ...]


def _pairs(value: Any, first: str, second: str, source: str, row: int, name: str) -> list[tuple[Any, Any]]:
    """HotpotQA's columnar ``{first: [...], second: [...]}`` or a list of ``[a, b]`` pairs, as pairs."""
    if isinstance(value, dict) and first in value and second in value:
        return list(zip(value[first], value[second], strict=False))
    if isinstance(value, list) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        return [(p[0], p[1]) for p in value]
    raise DatasetError(
        f"{source}: row {row}: field {name!r} must be {{{first!r}: [...], {second!r}: [...]}} or [[a, b], ...]"
    )


def items_of(rows: list[dict[str, Any]], source: str) -> list[ResearchItem]:
    items = []
    for index, row in enumerate(rows):
        facts = _pairs(row["supporting_facts"], "title", "sent_id", source, index, "supporting_facts")
        titles = tuple(dict.fromkeys(str(title) for title, _ in facts))
        items.append(ResearchItem(str(row["question"]), str(row["answer"]), titles))
    return items


def pages_of_contexts(rows: list[dict[str, Any]], source: str) -> list[Page]:
    """One page per context title of ``rows`` (first occurrence wins), id = title."""
    pages: dict[str, Page] = {}
    for index, row in enumerate(rows):
        if row.get("context") is None:
            raise DatasetError(f"{source}: row {index}: missing field 'context' (or pass --env.corpus_path)")
        for title, sentences in _pairs(row["context"], "title", "sentences", source, index, "context"):
            text = "".join(sentences) if isinstance(sentences, list) else str(sentences)
            pages.setdefault(str(title), Page(str(title), str(title), text.strip()))
    return list(pages.values())


def pages_of_corpus(path: str) -> list[Page]:
    """The pages of a corpus file (``id``, ``title``, ``text`` per row)."""
    rows = read_local_rows(path)
    if not rows:
        raise DatasetError(f"{path}: no rows")
    pages = []
    for index, row in enumerate(rows):
        for name in ("id", "title", "text"):
            if row.get(name) is None:
                raise DatasetError(f"{path}: row {index}: missing field {name!r}")
        pages.append(Page(str(row["id"]), str(row["title"]), str(row["text"])))
    return pages


# ---------------------------------------------------------------------------------------------------------
# The environment
# ---------------------------------------------------------------------------------------------------------
class DeepResearchConfig(ToolLimitsConfig):
    """MultiTurnEnvConfig plus the data, the collection, the search backend and the reward."""

    group_size: int = 8
    max_turns: int = Field(8, ge=1, description="model turns per episode (searches, reads and the answer)")
    max_tokens_per_turn: int = Field(1024, ge=1, description="generation budget of one reply in tokens")
    max_token_length: int = Field(16384, description="budget of a whole episode's sequence in tokens")
    dataset_name: str = Field("hotpotqa/hotpot_qa", description="hub data set in HotpotQA's schema")
    dataset_config: Optional[str] = Field("distractor", description="configuration of the hub data set")
    dataset_split: str = Field("train", description="hub split to train on")
    eval_split: str = Field("validation", description="hub split to evaluate on")
    dataset_path: Optional[str] = Field(None, description="local file of questions in HotpotQA's schema")
    eval_dataset_path: Optional[str] = Field(
        None, description="local file for evaluation (default: dataset_path when that is set)"
    )
    corpus_path: Optional[str] = Field(
        None, description="local collection (id, title, text rows); default: the rows' context paragraphs"
    )
    search_backend: Literal["bm25", "smolagents"] = Field(
        "bm25", description="bm25: the local collection; smolagents: web search (needs network)"
    )
    index_cache_dir: Optional[str] = Field(
        None, description="where BM25 indexes are saved (default ~/.cache/atroposlib/bm25)"
    )
    search_k: int = Field(5, ge=1, le=50, description="results a search returns when k is not given")
    answer_metric: Literal["f1", "em"] = Field("f1", description="answer score: token F1 or exact match")
    citation_bonus: float = Field(
        0.2, ge=0.0, description="weight of the citation F1 (cited titles vs the supporting titles)"
    )


@dataclass
class ResearchSession:
    """One episode: the question, fresh tools on the shared backend, and the final reply."""

    item: ResearchItem
    search: SearchTool
    open: OpenTool
    config: DeepResearchConfig
    messages: list[dict[str, Any]] = field(default_factory=list)
    final_reply: Optional[str] = None
    tally: ToolTally = field(default_factory=ToolTally)

    def __post_init__(self) -> None:
        declarations = "\n".join(json.dumps(tool_schema(t)) for t in (self.search, self.open))
        self.messages = [
            {"role": "system", "content": SYSTEM_PROMPT.format(tools=declarations)},
            {"role": "user", "content": self.item.question},
        ]

    @property
    def tools(self) -> dict[str, Any]:
        return {"search": self.search, "open": self.open}

    async def step(self, reply: str, turn: int) -> Feedback:
        _, feedback = await self.tally.run(reply, self.tools, self.config)
        if feedback is None:
            self.final_reply = reply
            return Feedback(done=True)
        return feedback

    def title_of(self, doc_id: str) -> Optional[str]:
        return self.open.titles.get(doc_id) or self.search.seen.get(doc_id)


class DeepResearchEnv(LocalServerDefaults, MultiTurnEnv):
    """Multi-hop questions answered with search and open tools (see the module docstring)."""

    name = "deep_research"
    env_config_cls = DeepResearchConfig
    config: DeepResearchConfig
    default_server_port = 9004
    default_server_settings = {"server_type": "vllm", "num_max_requests_at_once": 32}

    def __init__(self, config: DeepResearchConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.train: list[ResearchItem] = []
        self.test: list[ResearchItem] = []
        self.backend: Any = None

    @classmethod
    def default_env_config(cls) -> DeepResearchConfig:
        return DeepResearchConfig(
            total_steps=2000,
            batch_size=1024,
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.1,
            eval_limit=200,
        )

    # -- data and backend -------------------------------------------------------------------------------
    def make_backend(self, rows: list[dict[str, Any]], source: str) -> Any:
        """The search backend: BM25 over the corpus file or the rows' contexts, or smolagents' web."""
        cfg = self.config
        if cfg.search_backend == "smolagents":
            from atroposlib.envs.tools.smolagents_backend import SmolagentsBackend

            return SmolagentsBackend()
        pages = pages_of_corpus(cfg.corpus_path) if cfg.corpus_path else pages_of_contexts(rows, source)
        cache = Path(cfg.index_cache_dir) if cfg.index_cache_dir else default_cache_dir()
        backend = Bm25Backend(pages, cache_dir=cache)
        origin = "loaded from the cache" if backend.from_cache else "built"
        logger.info("%s: BM25 index of %d pages %s", self.name, len(pages), origin)
        return backend

    async def setup(self) -> None:
        cfg = self.config
        hub = cfg.dataset_name
        fields = ["question", "answer", "supporting_facts"]
        train_rows = load_rows(
            cfg.dataset_path, hub_split(hub, cfg.dataset_split, cfg.dataset_config), fields, hub
        )
        eval_path = cfg.eval_dataset_path or cfg.dataset_path
        eval_name = f"{hub} ({cfg.eval_split})"
        eval_rows = load_rows(
            eval_path, hub_split(hub, cfg.eval_split, cfg.dataset_config), fields, eval_name
        )
        self.train = items_of(train_rows, str(cfg.dataset_path or hub))
        random.Random(42).shuffle(self.train)
        self.test = items_of(eval_rows, str(eval_path or eval_name))
        self.backend = self.make_backend(train_rows + eval_rows, str(cfg.dataset_path or hub))

    async def get_next_item(self) -> ResearchItem:
        return self.next_in_turn(self.train)

    def eval_items(self) -> list[ResearchItem]:
        return self.test

    # -- episodes ---------------------------------------------------------------------------------------
    async def new_session(self, item: ResearchItem, *, evaluation: bool = False) -> ResearchSession:
        cfg = self.config
        search = SearchTool(self.backend, default_k=cfg.search_k, max_k=50, max_chars=cfg.tool_output_chars)
        return ResearchSession(item, search, OpenTool(self.backend, max_chars=cfg.tool_output_chars), cfg)

    def _final(self, session: ResearchSession, episode: Episode) -> Optional[FinalReply]:
        if episode.end_reason != END_DONE or session.final_reply is None:
            return None
        return read_final_reply(session.final_reply)

    def citation_f1(self, session: ResearchSession, final: FinalReply) -> float:
        """F1 of the cited pages' titles (ids the episode never saw count as wrong) against the gold titles."""
        cited = {normalize_answer(session.title_of(c) or f"unknown page {c}") for c in final.cited}
        return set_f1(cited, {normalize_answer(t) for t in session.item.supporting_titles})

    def answer_score(self, final: FinalReply, gold: str) -> float:
        metric = exact_match if self.config.answer_metric == "em" else answer_f1
        return metric(final.answer, gold)

    def outcome_reward(self, session: ResearchSession, episode: Episode) -> float:
        final = self._final(session, episode)
        if final is None:
            return 0.0
        return self.answer_score(final, session.item.answer) + self.config.citation_bonus * self.citation_f1(
            session, final
        )

    def episode_correct(self, session: ResearchSession, episode: Episode, score: float) -> bool:
        final = self._final(session, episode)
        return final is not None and exact_match(final.answer, session.item.answer) == 1.0

    def episode_metrics(self, session: ResearchSession, episode: Episode) -> dict[str, float]:
        final = self._final(session, episode)
        gold_titles = {normalize_answer(t) for t in session.item.supporting_titles}
        opened = {normalize_answer(t) for t in session.open.titles.values()}
        return {
            "answer_f1": answer_f1(final.answer, session.item.answer) if final else 0.0,
            "exact_match": exact_match(final.answer, session.item.answer) if final else 0.0,
            "citation_f1": self.citation_f1(session, final) if final else 0.0,
            "supporting_opened": len(opened & gold_titles) / len(gold_titles) if gold_titles else 0.0,
            "tool_calls": float(session.tally.calls),
            "tool_errors": float(session.tally.errors),
            "answered": float(final is not None),
        }

    def eval_sample_fields(
        self, item: ResearchItem, session: ResearchSession, episode: Episode
    ) -> dict[str, Any]:
        return {
            "question": item.question,
            "gold_answer": item.answer,
            "supporting": list(item.supporting_titles),
        }


if __name__ == "__main__":
    DeepResearchEnv.cli()
