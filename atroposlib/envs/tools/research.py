"""Research tools: ``search(query)`` and ``open(doc_id)`` over a pluggable backend.

A :class:`ResearchBackend` answers two questions: which pages match a query (:class:`SearchHit` list,
best first) and what one page says (:class:`Page`, or None for an unknown id). Two backends exist:

* :class:`Bm25Backend` - a local collection of pages indexed with BM25 (``bm25s``). The index is built
  once per collection: kept in memory for the process and saved under ``cache_dir`` keyed by a hash of
  the pages, so the next run loads it instead of indexing again;
* :class:`atroposlib.envs.tools.smolagents_backend.SmolagentsBackend` - web search and page visits
  through ``smolagents`` tools, for users with network.

:class:`SearchTool` and :class:`OpenTool` are the tools the model calls (see
:mod:`atroposlib.envs.tools.base`). Both bound what reaches the model (``max_chars``) and run a blocking
backend in a worker thread, so a slow or hanging backend never blocks the event loop and the caller's
time limit applies (an async backend's call is cancelled at the limit; a blocking call that never returns
keeps its worker thread, so a backend of network calls should set its own time-outs too). Every page id a search returned is remembered (:attr:`SearchTool.seen`) with its
title, so citations can be checked against page titles whatever the backend.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol, runtime_checkable

from atroposlib.envs.tools.base import ToolError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Page:
    """One document of a collection: a unique ``doc_id``, a ``title`` and its ``text``."""

    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class SearchHit:
    """One search result: the page id to ``open``, its title and a short snippet."""

    doc_id: str
    title: str
    snippet: str


@runtime_checkable
class ResearchBackend(Protocol):
    """Where ``search`` and ``open`` get their answers. Methods may be sync or async."""

    def search(self, query: str, k: int) -> Sequence[SearchHit]:
        """At most ``k`` hits for ``query``, best first."""
        ...

    def open(self, doc_id: str) -> Optional[Page]:
        """The page ``doc_id``, or None when there is none."""
        ...


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with a note saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... [truncated: {len(text) - limit} more characters]"


async def call_backend(method: Any, *args: Any) -> Any:
    """Call a backend method: awaited when async, in a worker thread when blocking."""
    if asyncio.iscoroutinefunction(method):
        return await method(*args)
    return await asyncio.to_thread(method, *args)


# ---------------------------------------------------------------------------------------------------------
# BM25 over a local collection
# ---------------------------------------------------------------------------------------------------------
def collection_hash(pages: Sequence[Page]) -> str:
    """A digest of the pages (ids, titles and texts, in order): the key of a saved index."""
    digest = hashlib.sha256()
    for page in pages:
        digest.update(json.dumps([page.doc_id, page.title, page.text]).encode())
    return digest.hexdigest()[:24]


def default_cache_dir() -> Path:
    """``$ATROPOS_CACHE/bm25`` when set, else ``~/.cache/atroposlib/bm25``."""
    root = os.environ.get("ATROPOS_CACHE")
    return Path(root) / "bm25" if root else Path.home() / ".cache" / "atroposlib" / "bm25"


_LOADED: dict[str, Any] = {}  # collection hash -> retriever, for every backend of the process
_LOADED_LOCK = threading.Lock()


def _tokenize(texts: list[str]) -> Any:
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", show_progress=False)


def _build_or_load(pages: Sequence[Page], key: str, cache_dir: Optional[Path]) -> tuple[Any, bool]:
    """``(retriever, loaded_from_cache)`` for ``pages``."""
    import bm25s

    target = cache_dir / key if cache_dir is not None else None
    if target is not None and (target / "params.index.json").exists():
        try:
            return bm25s.BM25.load(str(target)), True
        except Exception as exc:  # a damaged cache is rebuilt
            logger.warning("bm25 index in %s could not be loaded (%s); rebuilding it", target, exc)
    retriever = bm25s.BM25()
    retriever.index(_tokenize([f"{p.title}\n{p.text}" for p in pages]), show_progress=False)
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.tmp{os.getpid()}")
        retriever.save(str(partial))
        try:
            partial.rename(target)
        except OSError:  # another process saved the same index first
            pass
    return retriever, False


class Bm25Backend:
    """BM25 search over ``pages`` (``bm25s``; English stop words removed).

    Args:
        pages: the collection; ids must be unique (ValueError naming the first repeated id).
        cache_dir: where built indexes are saved and looked up (None: memory only).
        snippet_chars: characters of a page's text shown in a hit.
    """

    def __init__(self, pages: Sequence[Page], cache_dir: Optional[Path] = None, snippet_chars: int = 200):
        if not pages:
            raise ValueError("the collection has no pages")
        self.pages = list(pages)
        self.by_id: dict[str, Page] = {}
        for page in self.pages:
            if page.doc_id in self.by_id:
                raise ValueError(f"page id {page.doc_id!r} appears twice in the collection")
            self.by_id[page.doc_id] = page
        self.snippet_chars = snippet_chars
        self.key = collection_hash(self.pages)
        with _LOADED_LOCK:
            retriever = _LOADED.get(self.key)
            self.from_cache = retriever is not None
            if retriever is None:
                retriever, self.from_cache = _build_or_load(self.pages, self.key, cache_dir)
                _LOADED[self.key] = retriever
        self.retriever = retriever

    def search(self, query: str, k: int) -> list[SearchHit]:
        k = max(1, min(int(k), len(self.pages)))
        results, scores = self.retriever.retrieve(_tokenize([query]), k=k, show_progress=False)
        hits = []
        for index, score in zip(results[0], scores[0], strict=True):
            if float(score) <= 0.0:
                continue
            page = self.pages[int(index)]
            snippet = " ".join(page.text.split())[: self.snippet_chars]
            hits.append(SearchHit(page.doc_id, page.title, snippet))
        return hits

    def open(self, doc_id: str) -> Optional[Page]:
        return self.by_id.get(doc_id)


# ---------------------------------------------------------------------------------------------------------
# The tools
# ---------------------------------------------------------------------------------------------------------
class SearchTool:
    """``search``: ``{"query": "...", "k": 5}`` -> a numbered list of ``[doc_id] title: snippet``."""

    name = "search"
    description = (
        "Search the document collection. Returns the best-matching documents as [doc_id] title: snippet; "
        "open a document by its doc_id to read it."
    )

    def __init__(self, backend: Any, default_k: int = 5, max_k: int = 10, max_chars: int = 4000):
        self.backend = backend
        self.default_k = default_k
        self.max_k = max_k
        self.max_chars = max_chars
        self.seen: dict[str, str] = {}  #: page id -> title of every hit returned so far
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "what to look for"},
                "k": {"type": "integer", "minimum": 1, "maximum": max_k, "description": "how many results"},
            },
            "required": ["query"],
            "additionalProperties": False,
        }

    async def call(self, arguments: dict[str, Any]) -> str:
        query = str(arguments["query"]).strip()
        if not query:
            raise ToolError("the query is empty")
        hits = await call_backend(self.backend.search, query, int(arguments.get("k", self.default_k)))
        if not hits:
            return "no results"
        lines = []
        for rank, hit in enumerate(list(hits)[: self.max_k], start=1):
            self.seen[str(hit.doc_id)] = str(hit.title)
            lines.append(f"{rank}. [{hit.doc_id}] {hit.title}: {hit.snippet}")
        return truncate("\n".join(lines), self.max_chars)


class OpenTool:
    """``open``: ``{"doc_id": "..."}`` -> the page's title and text (cut to ``max_chars``)."""

    name = "open"
    description = "Open a document by the doc_id a search returned and read its text."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"doc_id": {"type": "string", "minLength": 1, "description": "the document's id"}},
        "required": ["doc_id"],
        "additionalProperties": False,
    }

    def __init__(self, backend: Any, max_chars: int = 4000):
        self.backend = backend
        self.max_chars = max_chars
        self.opened: list[str] = []  #: ids opened, in order (repeats kept)
        self.titles: dict[str, str] = {}  #: page id -> title of every page opened

    async def call(self, arguments: dict[str, Any]) -> str:
        doc_id = str(arguments["doc_id"]).strip()
        page = await call_backend(self.backend.open, doc_id)
        if page is None:
            raise ToolError(f"no document with id {doc_id!r}; use an id that search returned")
        self.opened.append(doc_id)
        self.titles[doc_id] = str(page.title)
        return truncate(f"# {page.title}\n\n{page.text}", self.max_chars)
