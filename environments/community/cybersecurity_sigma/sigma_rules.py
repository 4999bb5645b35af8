"""Reading and comparing Sigma rules for the cybersecurity_sigma environments.

A reply's rule is the YAML in its one ``\\boxed{...}`` after the reasoning (``<think>...</think>`` never
counts; boxes that differ are a hedge and give no rule). :func:`read_rule` accepts it when ``yaml.safe_load``
gives a mapping whose ``detection`` passes pySigma's detection check: every identifier the condition names
is defined, modifiers exist, values are well formed. The deprecated pipe aggregation of Sigma 1
(``selection | count(dst_ip) by src_ip > 10``, which the original's prompt shows) is accepted: the part
before the pipe is checked.

:func:`rule_similarity` is the Jaccard similarity of two rules' token sets over the parts that decide what a
rule matches, ``logsource`` and ``detection``, each dumped canonically (sorted keys) so key order, quoting
and flow or block style do not matter; tokens are runs of two or more word characters, lowercased.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

import yaml
from sigma.exceptions import SigmaError
from sigma.rule import SigmaDetections

from atroposlib.utils.replies import final_boxed_answer

MATCHING_PARTS = ("logsource", "detection")
_TOKEN = re.compile(r"\w\w+")


@dataclass(frozen=True)
class RuleReading:
    """A reply's rule (``rule`` None when there is none) and why it was refused (``error``)."""

    rule: Optional[dict[str, Any]]
    error: Optional[str] = None


def check_detection(detection: Any) -> Optional[str]:
    """None when pySigma accepts ``detection`` (see the module docstring), else why not."""
    if not isinstance(detection, dict):
        return "detection is not a mapping"
    condition = detection.get("condition")
    conditions = condition if isinstance(condition, list) else [condition]
    if not conditions or not all(isinstance(c, str) and c.strip() for c in conditions):
        return "detection has no condition"
    checked = {**detection, "condition": [c.split("|", 1)[0].strip() for c in conditions]}
    try:
        parsed = SigmaDetections.from_dict(checked)
        for item in parsed.parsed_condition:
            item.parse()
    except SigmaError as exc:
        return f"detection: {str(exc).splitlines()[0]}"
    except Exception as exc:  # noqa: BLE001 - pySigma raises plain errors on some malformed values
        return f"detection: {type(exc).__name__}"
    return None


def parse_rule(text: str) -> RuleReading:
    """A rule from YAML text (see :func:`read_rule`)."""
    try:
        rule = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return RuleReading(None, f"not YAML ({str(exc).splitlines()[0]})")
    if not isinstance(rule, dict):
        return RuleReading(None, "not a YAML mapping")
    error = check_detection(rule.get("detection"))
    return RuleReading(None, error) if error else RuleReading(rule)


def read_rule(reply: str) -> RuleReading:
    """The reply's rule: its one boxed YAML after the reasoning, parsed and checked."""
    boxed = final_boxed_answer(reply)
    if boxed is None:
        return RuleReading(None, "no single boxed rule after the reasoning")
    return parse_rule(boxed)


def rule_tokens(rule: dict[str, Any]) -> set[str]:
    """The token set of a rule's matching parts (see the module docstring)."""
    parts = {key: rule[key] for key in MATCHING_PARTS if key in rule}
    return set(_TOKEN.findall(yaml.safe_dump(parts, sort_keys=True).lower()))


def rule_similarity(gold: dict[str, Any], rule: dict[str, Any]) -> float:
    """The Jaccard similarity of the two rules' token sets (0.0 when both are empty)."""
    a, b = rule_tokens(gold), rule_tokens(rule)
    return len(a & b) / len(a | b) if a | b else 0.0


def canonical_yaml(rule: dict[str, Any]) -> str:
    """A rule written with sorted keys, for a judge to read."""
    return yaml.safe_dump(rule, sort_keys=True, allow_unicode=True).strip()
