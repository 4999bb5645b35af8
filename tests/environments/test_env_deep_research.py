"""Deep research: BM25 search and page reads over turns, answer and citation scoring, hostile tools and
calls, masking, ``process`` and ``evaluate`` with the hub unreachable, and the smolagents web backend."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.envs.data_loading import DatasetError
from atroposlib.envs.tools import research
from atroposlib.envs.tools.research import Bm25Backend, Page, SearchHit, SearchTool
from atroposlib.envs.tools.smolagents_backend import SmolagentsBackend, parse_search_markdown
from atroposlib.testing.scripted_server import launch_scripted_server
from environments.deep_research_env import (
    DeepResearchConfig,
    DeepResearchEnv,
    answer_f1,
    exact_match,
    read_final_reply,
)
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.multi_turn_runs import episode_responder, tool_call, tool_responses
from tests.helpers.single_turn_runs import offline_env, setup_failure, write_jsonl

SAMPLE = FIXTURES / "hotpotqa_sample.jsonl"
CORPUS = FIXTURES / "research_corpus_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
RIGHT = [  # the scripted researcher: search, read both supporting pages, answer citing them
    tool_call("search", query="Larkspur Observatory founded"),
    tool_call("open", doc_id="Larkspur Observatory") + tool_call("open", doc_id="Veldhaven"),
    "It is the <answer>Ossel</answer>. <cite>Larkspur Observatory</cite> <cite>Veldhaven</cite>",
]


def _config(tiny_model_dir, tmp_path, **overrides) -> DeepResearchConfig:
    values = {
        "tokenizer_name": str(tiny_model_dir),
        "use_wandb": False,
        "dataset_path": str(SAMPLE),
        "group_size": 2,
        "max_tokens_per_turn": 256,
        "index_cache_dir": str(tmp_path / "bm25"),
        **overrides,
    }
    return DeepResearchConfig(**values)


async def _play(tiny_model_dir, tmp_path, script, env_cls=DeepResearchEnv, item_index=0, **overrides):
    with launch_scripted_server(respond=episode_responder([script]), tokenizer=tiny_model_dir) as server:
        config = _config(tiny_model_dir, tmp_path, **overrides)
        env = env_cls(config, APIServerConfig(base_url=server.base_url, model_name="m", server_type="vllm"))
        await env.setup()
        item = next(i for i in env.test if i.question == ROWS[item_index]["question"])
        session, episode = await env.play(item)
    return env, session, episode


# -- scoring --------------------------------------------------------------------------------------------
def test_answer_scores_accept_other_forms_and_refuse_wrong_hedged_malformed_and_empty_replies():
    assert exact_match("The Ossel.", "Ossel") == 1.0 and answer_f1("the  OSSEL", "Ossel") == 1.0
    assert (
        answer_f1("Ossel River", "Ossel") == pytest.approx(2 / 3) and exact_match("Ossel River", "Ossel") == 0
    )
    assert answer_f1("No.", "no") == 1.0 and answer_f1("no, not the same", "no") == 0.0
    assert answer_f1("Rhine", "Ossel") == 0.0
    final = read_final_reply(
        "<think>two pages</think>The answer is <answer> 1902 </answer> <cite>Edda Marlow</cite>"
    )
    assert final.answer == "1902" and final.cited == ("Edda Marlow",)
    assert read_final_reply("<answer>1902</answer><cite>a</cite><cite>a</cite><cite> </cite>").cited == ("a",)
    for bad in [
        "<answer>1902</answer> or maybe <answer>1903</answer>",  # hedged
        "<think>unclosed <answer>1902</answer>",  # malformed reasoning
        "<answer>1902",  # unclosed answer
        "<answer>  </answer>",  # empty
        "",  # empty reply
        "1902",  # no answer tags
        "<think><answer>1902</answer></think>",  # only inside the reasoning
    ]:
        assert read_final_reply(bad) is None, bad


# -- the index --------------------------------------------------------------------------------------------
def test_bm25_search_ranks_the_right_page_and_the_index_is_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(research, "_LOADED", {})
    pages = [Page(r["id"], r["title"], r["text"]) for r in read_jsonl(CORPUS)]
    first = Bm25Backend(pages, cache_dir=tmp_path)
    assert not first.from_cache and (tmp_path / first.key / "params.index.json").exists()
    hits = first.search("which river flows through Veldhaven", 3)
    assert hits[0].title == "Veldhaven" and hits[0].snippet.startswith("Veldhaven is a port city")
    assert first.search("zzzz qqqq", 3) == []  # nothing matches: no zero-score filler
    monkeypatch.setattr(research, "_LOADED", {})  # a new process: the saved index is loaded, not rebuilt
    second = Bm25Backend(pages, cache_dir=tmp_path)
    assert (
        second.from_cache and second.search("cello teacher Royal Orchestra", 1)[0].title == "Hilde Sorensen"
    )
    assert Bm25Backend(pages, cache_dir=tmp_path).retriever is second.retriever  # one index per process
    with pytest.raises(ValueError, match="'p0' appears twice"):
        Bm25Backend([*pages, pages[0]])


# -- episodes ---------------------------------------------------------------------------------------------
async def test_searching_reading_and_answering_with_citations_scores_and_masks(tiny_model_dir, tmp_path):
    env, session, episode = await _play(tiny_model_dir, tmp_path, RIGHT)
    assert episode.end_reason == "done" and len(episode.turns) == 3
    found, larkspur, veldhaven = tool_responses(episode)
    assert found["name"] == "search" and found["content"].startswith("1. [Larkspur Observatory] Larkspur")
    assert larkspur["content"].startswith("# Larkspur Observatory\n\nThe Larkspur Observatory is")
    assert "river Ossel flows through Veldhaven" in veldhaven["content"]  # the page was really read
    assert env.score(session, episode) == pytest.approx(1.2)  # F1 1 + 0.2 x citation F1 1
    assert env.episode_correct(session, episode, 1.2)
    assert env.episode_metrics(session, episode) == {
        "answer_f1": 1.0,
        "exact_match": 1.0,
        "citation_f1": 1.0,
        "supporting_opened": 1.0,
        "tool_calls": 3.0,
        "tool_errors": 0.0,
        "answered": 1.0,
    }
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    trained = tokenizer.decode([m for m in episode.masks if m != -100], skip_special_tokens=False)
    assert trained == "".join(r + "<|im_end|>" for r in episode.replies)  # exactly the model's tokens
    assert "tool_response" not in trained and "port city" not in trained
    masked = tokenizer.decode([t for t, m in zip(episode.tokens, episode.masks, strict=True) if m == -100])
    assert masked.count("</tool_response>") == 3 and "port city" in masked


async def test_citing_a_distractor_or_an_unseen_page_lowers_the_bonus_and_a_wrong_answer_earns_only_it(
    tiny_model_dir, tmp_path
):
    script = [
        tool_call("search", query="Larkspur Observatory"),
        "<answer>Ossel</answer><cite>Larkspur Observatory</cite><cite>Brightwater Canal</cite><cite>x9</cite>",
    ]
    env, session, episode = await _play(tiny_model_dir, tmp_path, script)
    # cited 3 (one right), gold 2: precision 1/3, recall 1/2 -> F1 0.4
    assert env.score(session, episode) == pytest.approx(1.0 + 0.2 * 0.4)
    wrong = [RIGHT[0], "<answer>Rhine</answer><cite>Larkspur Observatory</cite>"]
    env, session, episode = await _play(tiny_model_dir, tmp_path, wrong, answer_metric="em")
    assert env.score(session, episode) == pytest.approx(0.2 * (2 * 1 * 0.5 / 1.5))
    assert not env.episode_correct(session, episode, 0.1)


class HostileBackend:
    """A search backend whose queries raise, hang or answer with a megabyte."""

    def __init__(self, pages):
        self.inner = Bm25Backend(pages)

    async def search(self, query, k):
        if query == "raise":
            raise ConnectionError("search service unreachable")
        if query == "hang":
            await asyncio.sleep(60)
        if query == "huge":
            return [SearchHit("big", "Big page", "x" * 1_000_000)]
        return self.inner.search(query, k)

    def open(self, doc_id):
        if doc_id == "slow":
            time.sleep(2)  # a blocking backend: runs in a thread, the event loop stays free
        return self.inner.open(doc_id)


class HostileResearchEnv(DeepResearchEnv):
    def make_backend(self, rows, source):
        return HostileBackend(super().make_backend(rows, source).pages)


async def test_hostile_tools_raise_hang_or_flood_and_the_episode_goes_on(tiny_model_dir, tmp_path):
    script = [
        tool_call("search", query="raise"),
        tool_call("search", query="hang") + tool_call("open", doc_id="slow"),
        tool_call("search", query="huge"),
        "<answer>Ossel</answer>",
    ]
    start = time.monotonic()
    env, session, episode = await _play(
        tiny_model_dir,
        tmp_path,
        script,
        env_cls=HostileResearchEnv,
        tool_timeout_s=0.5,
        tool_output_chars=500,
    )
    assert time.monotonic() - start < 30
    raised, hung, slow, huge = tool_responses(episode)
    assert raised["error"] == "'search' failed: ConnectionError: search service unreachable"
    assert hung["error"] == "'search' did not answer within 0.5 s" and "0.5 s" in slow["error"]
    assert len(huge["content"]) < 700 and "[truncated: " in huge["content"]
    assert episode.end_reason == "done" and env.score(session, episode) == pytest.approx(1.0)
    assert env.episode_metrics(session, episode)["tool_errors"] == 3.0


async def test_hostile_calls_get_errors_and_a_hundred_calls_in_one_reply_end_the_episode(
    tiny_model_dir, tmp_path
):
    script = [
        tool_call("browse", url="http://example.com")
        + '<tool_call>{"name": "search", "arguments": {"query": "x"</tool_call>'
        + tool_call("open", doc_id="No Such Page")
        + tool_call("search", query=""),
        "".join(tool_call("search", query=f"q{i}") for i in range(100)),
        "<answer>Ossel</answer>",
    ]
    env, session, episode = await _play(tiny_model_dir, tmp_path, script, max_tokens_per_turn=8000)
    errors = [body["error"] for body in tool_responses(episode)]
    assert errors[0] == "unknown tool 'browse'; tools: open, search"
    assert errors[1].startswith("malformed tool call: not valid JSON")
    assert errors[2] == "no document with id 'No Such Page'; use an id that search returned"
    assert errors[3].startswith("invalid arguments for 'search'")
    assert len(episode.turns) == 2 and episode.end_reason == "done" and session.tally.over_limit
    assert session.search.seen == {}  # none of the hundred searches ran
    assert env.score(session, episode) == 0.0 and env.episode_metrics(session, episode)["answered"] == 0.0


# -- data -------------------------------------------------------------------------------------------------
async def test_a_local_corpus_file_is_searched_and_bad_files_name_the_row_and_field(tiny_model_dir, tmp_path):
    env = offline_env(DeepResearchEnv, tiny_model_dir, dataset_path=str(SAMPLE), corpus_path=str(CORPUS),
                      index_cache_dir=str(tmp_path / "bm25"))  # fmt: skip
    await env.setup()
    assert len(env.train) == 4 and env.backend.open("p4").title == "Jonas Reeve"
    assert env.test[0].supporting_titles == ("Larkspur Observatory", "Veldhaven")
    no_text = write_jsonl(tmp_path / "corpus.jsonl", [{"id": "a", "title": "A"}])
    env = offline_env(DeepResearchEnv, tiny_model_dir, dataset_path=str(SAMPLE), corpus_path=no_text)
    await setup_failure(env, r"corpus.jsonl: row 0: missing field 'text'")
    rows = [{k: v for k, v in ROWS[0].items() if k != "supporting_facts"}]
    env = offline_env(DeepResearchEnv, tiny_model_dir, dataset_path=write_jsonl(tmp_path / "q.jsonl", rows))
    await setup_failure(env, r"q.jsonl: row 0: missing field 'supporting_facts'")
    pairs = [{**ROWS[0], "supporting_facts": [["Veldhaven", 1]], "context": "oops"}]
    env = offline_env(DeepResearchEnv, tiny_model_dir, dataset_path=write_jsonl(tmp_path / "p.jsonl", pairs))
    await setup_failure(env, r"p.jsonl: row 0: field 'context' must be")


async def test_the_hub_set_is_the_default_and_its_failure_names_it(tiny_model_dir, hub_offline):
    env = offline_env(DeepResearchEnv, tiny_model_dir)
    with pytest.raises(DatasetError, match=r"hotpotqa/hotpot_qa: cannot load from the hub"):
        await env.setup()


def _researcher(golds):
    """Even episodes research and answer right with citations; odd ones answer at once, wrongly."""
    import itertools

    counter = itertools.count()

    def respond(prompt, index):
        text = str(prompt)
        question = next(q for q in golds if q in text)
        marker = re.search(r"<think>episode (\d+)</think>", text)
        episode = int(marker.group(1)) if marker else next(counter)
        turn = text.count("<|im_start|>assistant") - 1
        gold, titles = golds[question]
        head = f"<think>episode {episode}</think>"
        if episode % 2:
            return head + "<answer>unknown</answer>"
        if turn == 0:
            return head + tool_call("search", query=question)
        if turn == 1:
            return head + "".join(tool_call("open", doc_id=t) for t in titles)
        return head + f"<answer>{gold}</answer>" + "".join(f"<cite>{t}</cite>" for t in titles)

    return respond


GOLDS = {r["question"]: (r["answer"], r["supporting_facts"]["title"]) for r in ROWS}


def test_process_writes_token_exact_groups_with_the_hub_unreachable(scripted, tiny_model_dir, tmp_path):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "4", "--env.total_steps", "2",
            "--env.max_tokens_per_turn", "256", "--env.index_cache_dir", tmp_path / "bm25"]  # fmt: skip
    groups = scripted.process(DeepResearchEnv, args, _researcher(GOLDS))
    assert len(groups) == 2
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for group in groups:
        assert sorted(group["scores"]) == pytest.approx([0.0, 0.0, 1.2, 1.2])
        for masks, messages, score in zip(group["masks"], group["messages"], group["scores"], strict=True):
            replies = [m["content"] for m in messages if m["role"] == "assistant"]
            assert len(replies) == (3 if score > 1 else 1)
            trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)
            assert trained == "".join(r + "<|im_end|>" for r in replies)


def test_evaluate_reports_exact_metrics(scripted, tmp_path):
    args = ["--env.dataset_path", SAMPLE, "--env.max_tokens_per_turn", "256",
            "--env.index_cache_dir", tmp_path / "bm25"]  # fmt: skip
    metrics, samples, _ = scripted.evaluate(DeepResearchEnv, args, _researcher(GOLDS))
    # evaluation episodes arrive in order; episodes 0 and 2 research, 1 and 3 answer wrongly at once
    assert len(samples) == 4
    assert metrics["eval/percent_correct"] == 0.5 and metrics["eval/mean_score"] == pytest.approx(0.6)
    assert metrics["eval/answer_f1"] == 0.5 and metrics["eval/citation_f1"] == 0.5
    assert metrics["eval/supporting_opened"] == 0.5 and metrics["eval/tool_calls"] == 1.5
    assert metrics["eval/mean_turns"] == 2.0 and metrics["eval/answered"] == 1.0


# -- the web backend --------------------------------------------------------------------------------------
def test_smolagents_tools_plug_in_as_the_web_backend():
    from smolagents import Tool

    class FakeWebSearch(Tool):  # a real smolagents tool whose "web" is a dict
        name = "web_search"
        description = "Search the web."
        inputs = {"query": {"type": "string", "description": "the query"}}
        output_type = "string"

        def forward(self, query: str) -> str:
            return (
                "## Search Results\n\n[Veldhaven - Encyclopedia](https://example.org/veldhaven)\n"
                "Veldhaven is a port city.\n\n[Ossel (river)](https://example.org/ossel)\nA river."
            )

    class FakeVisit(Tool):
        name = "visit_webpage"
        description = "Read a web page."
        inputs = {"url": {"type": "string", "description": "the address"}}
        output_type = "string"

        def forward(self, url: str) -> str:
            return "" if url.endswith("missing") else f"# Page at {url}\n\nThe river Ossel flows through it."

    backend = SmolagentsBackend(FakeWebSearch(), FakeVisit())
    hits = backend.search("veldhaven river", 5)
    assert hits == [
        SearchHit("https://example.org/veldhaven", "Veldhaven - Encyclopedia", "Veldhaven is a port city."),
        SearchHit("https://example.org/ossel", "Ossel (river)", "A river."),
    ]
    page = backend.open("https://example.org/ossel")
    assert page.title == "Page at https://example.org/ossel" and "Ossel flows" in page.text
    assert backend.open("https://example.org/missing") is None
    tool = SearchTool(backend)
    listing = asyncio.run(tool.call({"query": "veldhaven"}))
    assert listing.startswith("1. [https://example.org/veldhaven] Veldhaven - Encyclopedia: Veldhaven is")
    assert tool.seen["https://example.org/ossel"] == "Ossel (river)"
    assert parse_search_markdown("no links here", 5) == []
    default = SmolagentsBackend()  # the web: DuckDuckGo search and the page reader (nothing fetched yet)
    assert type(default.search_tool).__name__ == "DuckDuckGoSearchTool"
    assert type(default.visit_tool).__name__ == "VisitWebpageTool"
