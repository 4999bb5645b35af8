"""A :class:`~atroposlib.envs.tools.research.ResearchBackend` made of ``smolagents`` tools: the web.

``smolagents`` search tools (``DuckDuckGoSearchTool``, ``GoogleSearchTool``, ``WebSearchTool``, ...) answer a
query with markdown, one ``[title](url)`` link per result followed by its snippet; ``VisitWebpageTool``
answers a URL with the page as markdown. :class:`SmolagentsBackend` turns the first into
:class:`SearchHit` rows whose id is the URL, and the second into a :class:`Page`, so the research
environment's ``search`` / ``open`` tools work on the web unchanged. Any object called like a smolagents
tool (``tool(query) -> str``) works, which is how users plug in another search.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from atroposlib.envs.tools.research import Page, SearchHit

_LINK = re.compile(r"\[([^\]\n]+)\]\((\S+?)\)")


def parse_search_markdown(text: str, k: int, snippet_chars: int = 300) -> list[SearchHit]:
    """The ``[title](url)`` results of a search tool's markdown, each with the text up to the next link."""
    matches = list(_LINK.finditer(text))
    hits = []
    for i, match in enumerate(matches[:k]):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        snippet = " ".join(text[match.end() : end].split())[:snippet_chars]
        hits.append(SearchHit(doc_id=match.group(2), title=match.group(1).strip(), snippet=snippet))
    return hits


def _title_of(markdown: str, fallback: str) -> str:
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            return stripped.lstrip("#").strip() or fallback
        if stripped:
            return stripped[:120]
    return fallback


class SmolagentsBackend:
    """Web research through smolagents tools (blocking calls; the research tools run them in a thread).

    Args:
        search_tool: a smolagents search tool (default ``DuckDuckGoSearchTool()``: ``smolagents[toolkit]``,
            network).
        visit_tool: a smolagents page reader (default ``VisitWebpageTool()``).
    """

    def __init__(self, search_tool: Any = None, visit_tool: Any = None):
        if search_tool is None or visit_tool is None:
            import smolagents

            search_tool = search_tool or smolagents.DuckDuckGoSearchTool()
            visit_tool = visit_tool or smolagents.VisitWebpageTool()
        self.search_tool = search_tool
        self.visit_tool = visit_tool

    def search(self, query: str, k: int) -> list[SearchHit]:
        return parse_search_markdown(str(self.search_tool(query)), k)

    def open(self, doc_id: str) -> Optional[Page]:
        text = str(self.visit_tool(doc_id))
        if not text.strip():
            return None
        return Page(doc_id=doc_id, title=_title_of(text, doc_id), text=text)
