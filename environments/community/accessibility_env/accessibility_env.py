"""Accessibility auto-fixer: repair the WCAG issues of an HTML snippet with minimal changes.

The reply may reason in ``<think>...</think>``; the fixed HTML is the last ```html block after it, or the whole
rest of the reply without one. The snippet is parsed with BeautifulSoup (``lxml``) and every issue the row
targets is checked by its rule (``accessibility_rules.py``: alt text, form labels, link text).

Reward, as the original: +1.0 when every targeted issue is fixed, ``0.8 x`` the share fixed when some are,
-0.5 when none is, -1.0 when the reply holds no HTML element at all (the original's unparsable output);
0.0 for a row targeting nothing that stays HTML. Fixing by deleting the offending elements does not count:
the fix must keep at least as many images, form controls and links as the original snippet.

Data: the original's dataset (``data/accessibility_dataset.jsonl``) was never published, so there is no
default: ``--env.dataset_path`` (and ``--env.eval_dataset_path``; else a quarter is held out) read rows with
``html`` (the snippet), ``issues_to_fix`` (issue keys) and optional ``id``.

``python environments/community/accessibility_env/accessibility_env.py {serve,process,evaluate} --env.dataset_path FILE``
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Optional

from bs4 import BeautifulSoup
from pydantic import Field

from atroposlib.envs.data_loading import DatasetError, check_rows, read_local_rows
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import answer_section

try:
    from environments.community.accessibility_env.accessibility_rules import RULES
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from accessibility_rules import RULES

SYSTEM_PROMPT = (
    "You may think before answering: put your reasoning inside <think> </think> tags.\n\n"
    "You fix web accessibility (WCAG 2.1 AA) issues in HTML snippets with as few changes as possible: give "
    "images meaningful alt text, associate every form control with a label, and give every link discernible "
    "text. Reply with the whole corrected snippet in one ```html block."
)
_HTML_BLOCK = re.compile(r"```html[^\n]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_COUNTED = ("img", "input", "select", "textarea", "a")


@dataclass(frozen=True)
class Snippet:
    """A row: its ``id``, the ``html`` and the issue keys to fix."""

    id: str
    html: str
    issues: tuple[str, ...]


def snippets_from_rows(rows: list[dict[str, Any]], source: str) -> list[Snippet]:
    """Snippets of rows; :class:`DatasetError` naming the row for a missing field or an unknown issue key."""
    check_rows(rows, ["html", "issues_to_fix"], source)
    snippets = []
    for index, row in enumerate(rows):
        issues = row["issues_to_fix"]
        if not isinstance(issues, list) or any(i not in RULES for i in issues):
            raise DatasetError(
                f"{source}: row {index}: field 'issues_to_fix' must list issue keys of {sorted(RULES)}: {issues!r}"
            )
        snippets.append(Snippet(str(row.get("id", index)), str(row["html"]), tuple(issues)))
    return snippets


def reply_html(reply: str) -> Optional[str]:
    """The HTML a reply gives: its last ```html block after the reasoning, else the rest of the reply."""
    section = answer_section(reply)
    if section is None:
        return None
    blocks = _HTML_BLOCK.findall(section)
    return blocks[-1] if blocks else section


def _counts(soup: BeautifulSoup) -> list[int]:
    return [len(soup.find_all(name)) for name in _COUNTED]


def score_fix(reply: str, snippet: Snippet) -> float:
    """The reward of a reply (see the module docstring)."""
    soup = BeautifulSoup(reply_html(reply) or "", "lxml")
    if soup.body is None or soup.body.find(True) is None:  # no HTML element at all
        return -1.0
    if not snippet.issues:
        return 0.0
    original = BeautifulSoup(snippet.html, "lxml")
    kept = all(new >= old for new, old in zip(_counts(soup), _counts(original), strict=True))
    fixed = sum(1 for issue in snippet.issues if kept and RULES[issue](soup))
    if fixed == len(snippet.issues):
        return 1.0
    return round(0.8 * fixed / len(snippet.issues), 6) if fixed else -0.5


class AccessibilityEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the data files."""

    dataset_path: Optional[str] = Field(None, description="rows with html and issues_to_fix (required)")
    eval_dataset_path: Optional[str] = Field(
        None, description="evaluation rows (default: a quarter held out)"
    )
    split_seed: int = Field(42, description="seed of the split")


class AccessibilityEnv(DeclaredDefaults, SingleTurnEnv):
    """Rewards HTML fixes that pass the targeted WCAG rules."""

    name = "accessibility_env"
    env_config_cls = AccessibilityEnvConfig
    config: AccessibilityEnvConfig
    default_env_values = dict(group_size=4, max_token_length=2048)

    async def setup(self) -> None:
        cfg = self.config
        if not cfg.dataset_path:
            raise DatasetError(
                "accessibility_env has no published data set: pass --env.dataset_path FILE "
                "(rows with html and issues_to_fix)"
            )
        snippets = snippets_from_rows(read_local_rows(cfg.dataset_path), cfg.dataset_path)
        if cfg.eval_dataset_path:
            self.train = snippets
            self.test = snippets_from_rows(read_local_rows(cfg.eval_dataset_path), cfg.eval_dataset_path)
            return
        random.Random(cfg.split_seed).shuffle(snippets)
        held_out = max(1, len(snippets) // 4) if len(snippets) > 1 else 0
        self.test, self.train = snippets[:held_out] or snippets, snippets[held_out:]

    def prompt_messages(self, item: Snippet) -> list[dict[str, str]]:
        user = f"Fix the accessibility issues of this HTML snippet:\n\n```html\n{item.html}\n```"
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def score_reply(self, reply: str, item: Snippet) -> float:
        return score_fix(reply, item)

    def eval_sample_fields(self, item: Snippet) -> dict[str, Any]:
        return {"id": item.id, "issues_to_fix": list(item.issues)}


if __name__ == "__main__":
    AccessibilityEnv.cli()
