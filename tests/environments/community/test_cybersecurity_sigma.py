"""cybersecurity_sigma: reading Sigma rules (pySigma's detection check, the Sigma 1 pipe), the Jaccard reward
and its hacks, the judged variant with unreadable verdicts counted apart, hub rows, ``process`` and
``evaluate``."""

from __future__ import annotations

import pytest

from environments.community.cybersecurity_sigma import jaccard_reward_env, llm_judge_env
from environments.community.cybersecurity_sigma.llm_judge_env import parse_equivalence
from environments.community.cybersecurity_sigma.sigma_env import tasks_from_rows
from environments.community.cybersecurity_sigma.sigma_rules import read_rule, rule_similarity
from tests.environments.community import judged_helpers
from tests.environments.community.community_runs import env_flags, process_local
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure, write_jsonl

SAMPLE = FIXTURES / "community" / "cybersecurity_sigma" / "sigma_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
TASKS = tasks_from_rows(ROWS, str(SAMPLE))
POWERSHELL, FIREWALL = TASKS[0], TASKS[1]
GOLD_PS = "\\boxed{\n" + ROWS[0]["rule"] + "}"
REORDERED = (  # the same matching parts in flow style, other key order and quoting, another title
    "<think>encoded commands</think>\\boxed{\ndetection: {condition: selection, selection: "
    "{'CommandLine|contains': \" -enc \", 'Image|endswith': '\\powershell.exe'}}\n"
    "logsource: {category: process_creation, product: windows}\ntitle: PS enc\n}"
)


def score(reply: str, task=POWERSHELL) -> float:
    rule = read_rule(reply).rule
    return 0.0 if rule is None else rule_similarity(task.rule, rule)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (GOLD_PS, 1.0),
        (REORDERED, 1.0),
        (GOLD_PS + " and again " + GOLD_PS, 1.0),  # the same rule twice
        (GOLD_PS.replace("' -enc '", "' -e '"), 14 / 15),  # close: one token differs
        (
            GOLD_PS.replace("level: high", "level: high\ntags: [enc, powershell]"),
            1.0,
        ),  # outside the matching parts
        (GOLD_PS + " or " + GOLD_PS.replace("-enc", "-encodedcommand"), 0.0),  # two different rules: a hedge
        (f"<think>{GOLD_PS}</think>Done.", 0.0),  # only inside the reasoning
        (f"<think>{GOLD_PS}", 0.0),  # reasoning never closes
        (ROWS[0]["rule"], 0.0),  # not boxed
        ("\\boxed{detection: [selection]}", 0.0),  # detection not a mapping
        (
            "\\boxed{detection:\n  selection:\n    a: 1\n  condition: selection and filter\n}",
            0.0,
        ),  # undefined
        (
            "\\boxed{detection:\n  selection:\n    Image|sortof: x\n  condition: selection\n}",
            0.0,
        ),  # bad modifier
        ("\\boxed{detection:\n  selection:\n    a: 1\n}", 0.0),  # no condition
        ("\\boxed{title: [unclosed\n}", 0.0),  # not YAML
        (f"\\boxed{{{POWERSHELL.prompt}}}", 0.0),  # prompt echo
        ("", 0.0),
    ],
)
def test_rule_reading_and_similarity(reply, expected):
    assert score(reply) == pytest.approx(expected)


def test_keyword_stuffing_lowers_the_similarity():
    stuffed = GOLD_PS.replace(
        "condition: selection",
        "condition: selection\n  extra:\n    - "
        + "\n    - ".join(
            ["mimikatz", "lsass", "rundll32", "certutil", "bitsadmin", "wmic", "psexec", "regsvr32"]
        ),
    )
    assert read_rule(stuffed).rule is not None and score(stuffed) == pytest.approx(15 / 24)


def test_sigma_one_aggregations_are_accepted():
    reply = "\\boxed{\n" + ROWS[1]["rule"] + "}"
    assert score(reply, FIREWALL) == 1.0
    assert read_rule(reply.replace("selection |", "missing |")).error.startswith("detection:")


async def test_gold_rules_are_checked_and_the_hub_is_the_default(tiny_model_dir, tmp_path, hub_offline):
    env = offline_env(jaccard_reward_env.SigmaRuleEnv, tiny_model_dir, dataset_path=str(SAMPLE))
    await env.setup()
    assert sorted(t.prompt for t in env.train) == sorted(r["prompt"] for r in ROWS) and len(env.test) == 3
    bad = {"prompt": "p", "rule": "detection:\n  selection:\n    a: 1\n  condition: nothing\n"}
    path = write_jsonl(tmp_path / "rows.jsonl", [ROWS[0], bad])
    error = await setup_failure(
        offline_env(jaccard_reward_env.SigmaRuleEnv, tiny_model_dir, dataset_path=path),
        "row 1: field 'rule' is not a valid Sigma rule",
    )
    assert path in str(error)
    path = write_jsonl(tmp_path / "missing.jsonl", [{"prompt": "p"}])
    await setup_failure(
        offline_env(jaccard_reward_env.SigmaRuleEnv, tiny_model_dir, dataset_path=path),
        "row 0: missing field 'rule'",
    )
    error = await setup_failure(
        offline_env(jaccard_reward_env.SigmaRuleEnv, tiny_model_dir), "mmaisel1/nous-rl-hackathon-sigma"
    )
    assert "--env.dataset_path" in str(error)


def _rule_for(text: str) -> str:
    return "\\boxed{\n" + next(r["rule"] for r in ROWS if r["prompt"] in text) + "}"


def _responder(prompt, index):
    """The gold rule, then a rule with an undefined condition."""
    text = prompt_text(prompt)
    if "GOLD RULE:" in text:
        return "1"
    return (
        _rule_for(text)
        if index % 2 == 0
        else "\\boxed{detection:\n  sel:\n    a: 1\n  condition: selection\n}"
    )


def test_process_jaccard(scripted):
    groups = process_local(
        scripted,
        jaccard_reward_env.SigmaRuleEnv,
        SAMPLE,
        _responder,
        group_size=2,
        total_steps=3,
        max_tokens=256,
    )
    check_groups(groups, 3, [0.0, 1.0])


def test_evaluate_jaccard(scripted):
    evaluation = scripted.evaluation(
        jaccard_reward_env.SigmaRuleEnv,
        env_flags(dataset_path=SAMPLE, max_tokens=256),
        lambda prompt, index: _rule_for(prompt_text(prompt)),
    )
    assert evaluation.metrics["eval/mean_score"] == 1.0 and evaluation.metrics["eval/valid_rule"] == 1.0


@pytest.mark.parametrize(
    ("text", "value"), [("1", 1.0), (' "0".', 0.0), ("yes", None), ("10", None), ("", None)]
)
def test_equivalence_verdicts(text, value):
    assert parse_equivalence(text) == value


def judge_by_similarity(text: str) -> str:
    """A judge: 1 when the generated rule keeps the gold's '-enc', 0 when not; garbage for firewall rules."""
    gold, generated = text.split("GOLD RULE:\n", 1)[1].split("GENERATED RULE:\n", 1)
    if "firewall" in gold:
        return "Probably equivalent, I think?"
    return "<think>compare the selections</think>1" if "-enc" in generated else "0"


async def test_judged_rules_and_unreadable_verdicts(tiny_model_dir):
    close = GOLD_PS.replace("-enc", "-e")
    env_cls = llm_judge_env.SigmaRuleEnv
    scores, env, judged = await judged_helpers.judged_scores(
        env_cls, tiny_model_dir, [REORDERED, close, "no rule"], POWERSHELL, judge_by_similarity
    )
    assert scores == [1.0, 0.0, 0.0] and len(judged) == 2
    assert all("encoded commands" not in j for j in judged)  # reasoning never shown
    firewall = "\\boxed{\n" + ROWS[1]["rule"] + "}"
    unreadable, env, _ = await judged_helpers.judged_scores(
        env_cls, tiny_model_dir, [firewall, "x"], FIREWALL, judge_by_similarity
    )
    assert unreadable == [0.0, 0.0]
    assert env.tally.drain() == {"train/judge_failures": 1.0, "train/judge_failure_rate": 1.0}


def test_evaluate_judged_leaves_unreadable_out(scripted):
    def respond(prompt, index):
        text = prompt_text(prompt)
        return judge_by_similarity(text) if "GOLD RULE:" in text else _rule_for(text)

    evaluation = scripted.evaluation(
        llm_judge_env.SigmaRuleEnv, env_flags(dataset_path=SAMPLE, max_tokens=256), respond
    )
    metrics = evaluation.metrics
    assert metrics["eval/unscored"] == 1.0 and metrics["eval/judge_failures"] == 1.0
    assert metrics["eval/mean_score"] == 0.5  # powershell judged 1, net.exe judged 0 (no '-enc')
