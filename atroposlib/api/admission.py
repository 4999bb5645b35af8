"""Admission of decoded groups against the current registration, and the 422 errors of a request.

A group is accepted when its content is valid (:func:`atroposlib.group.check_group`, run when it
was decoded) and it fits the registration: its ``env_id`` is registered, its sequences are no
longer than ``max_token_len``, and its size can ever be batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from atroposlib.api.decode import Group
from atroposlib.api.errors import MAX_ERRORS, InvalidRequest, error
from atroposlib.group import Problem


@dataclass(frozen=True)
class AdmissionRules:
    """What the current registration requires of an incoming group.

    ``batch_size``/``max_token_len`` are ``None`` before a trainer registered. ``env_group_sizes``
    lists the registered envs' group sizes by env id. ``env_id_required`` is set while an env with
    ``min_batch_allocation`` is registered (groups without one are never batched then).
    """

    batch_size: int | None = None
    max_token_len: int | None = None
    env_group_sizes: Sequence[int] = field(default_factory=tuple)
    env_id_required: bool = False


def problem_error(problem: Problem) -> dict[str, Any]:
    """A content problem as an error dict (location relative to the group)."""
    entry = error(problem.code, problem.loc, problem.message)
    if problem.value is not None:
        entry["input"] = problem.value
    return entry


def content_problems(group: Group) -> list[dict[str, Any]]:
    """The content problems of a decoded group as error dicts (locations relative to the group)."""
    return [problem_error(p) for p in group.problems[:MAX_ERRORS]]


def admission_problems(group: Group, rules: AdmissionRules) -> list[dict[str, Any]]:
    """Problems of a structurally valid group against the current registration (relative locs)."""
    problems: list[dict[str, Any]] = []
    size = group.size
    env_id = group.env_id
    if env_id is None:
        if rules.env_id_required:
            problems.append(
                error(
                    "env_id_required",
                    ["env_id"],
                    "env_id is required while an environment with min_batch_allocation is "
                    "registered: groups without one are never batched",
                )
            )
    elif env_id >= len(rules.env_group_sizes):
        problems.append(
            error(
                "unknown_env_id",
                ["env_id"],
                f"unknown env_id {env_id}: {len(rules.env_group_sizes)} environment(s) are registered; "
                "register with /register-env first",
                input=env_id,
            )
        )
    else:
        group_size = rules.env_group_sizes[env_id]
        if size > group_size:
            problems.append(
                error(
                    "unbatchable_group",
                    ["tokens"],
                    f"a group of {size} sequences can never be batched: it is larger than env "
                    f"{env_id}'s group_size {group_size}",
                )
            )
        elif size < group_size and group_size % size:
            problems.append(
                error(
                    "unbatchable_group",
                    ["tokens"],
                    f"a partial group of {size} sequences can never be batched: it does not divide "
                    f"env {env_id}'s group_size {group_size}",
                )
            )
    if rules.batch_size and size:
        if size > rules.batch_size or rules.batch_size % size:
            problems.append(
                error(
                    "unbatchable_group",
                    ["tokens"],
                    f"a group of {size} sequences can never be batched: group sizes must divide "
                    f"the batch size {rules.batch_size}",
                )
            )
    if rules.max_token_len and rules.max_token_len > 0:
        for i, length in enumerate(group.token_lengths):
            if length > rules.max_token_len:
                problems.append(
                    error(
                        "sequence_too_long",
                        ["tokens", i],
                        f"sequence {i} has {length} tokens, more than the registered "
                        f"max_token_len {rules.max_token_len}",
                    )
                )
    return problems[:MAX_ERRORS]


def group_problems(group: Group, rules: AdmissionRules) -> list[dict[str, Any]]:
    """Content problems, or (if none) admission problems, of one group (relative locs)."""
    return content_problems(group) or admission_problems(group, rules)


def check_groups(groups: list[Group], rules: AdmissionRules, *, in_list: bool) -> None:
    """Raise :class:`InvalidRequest` naming every bad group; all-or-nothing for lists."""
    errors: list[dict[str, Any]] = []
    for index, group in enumerate(groups):
        for problem in group_problems(group, rules):
            if in_list:
                problem["loc"] = ["body", index, *problem["loc"]]
                problem["msg"] = f"group {index}: {problem['msg']}"
            else:
                problem["loc"] = ["body", *problem["loc"]]
            errors.append(problem)
        if len(errors) >= MAX_ERRORS:
            break
    if errors:
        raise InvalidRequest(errors)
