"""Every multiple-choice benchmark on a small fixture in its hub schema, against the scripted server.

Each benchmark's seven items get, in order: the right option in an answer tag, the right option boxed (another
form), a wrong option, two options, an empty reply, an unclosed ``<think>`` and a reply cut at max tokens. The
metrics are asserted exactly: accuracy 2/7 with its standard error, 4/7 without an answer, 1/7 truncated, the
empty reply asked three times, and the breakdowns each benchmark is known by. Bad rows and an unreachable hub
are one-line errors naming the file (or hub set), the row and the field.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from atroposlib.envs.data_loading import DatasetError
from atroposlib.evals import option_labels
from environments.eval_environments.agieval_eval import AGIEvalEnv
from environments.eval_environments.arc_eval import ARCEvalEnv
from environments.eval_environments.bbh_eval import BBHEvalEnv
from environments.eval_environments.boolq_eval import BoolQEvalEnv
from environments.eval_environments.gpqa_eval import GPQAEvalEnv
from environments.eval_environments.hellaswag_eval import HellaSwagEvalEnv
from environments.eval_environments.mmlu_eval import MMLUEvalEnv
from environments.eval_environments.mmlu_pro_eval import MMLUProEvalEnv
from environments.eval_environments.musr_eval import MuSREvalEnv
from environments.eval_environments.obqa_eval import OBQAEvalEnv
from environments.eval_environments.piqa_eval import PIQAEvalEnv
from environments.eval_environments.pubmedqa_eval import VALID_ANSWERS, PubMedQAEvalEnv
from environments.eval_environments.siqa_eval import SIQAEvalEnv
from environments.eval_environments.winogrande_eval import WinoGrandeEvalEnv
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import offline_env, prompt_text, write_jsonl

DATA = FIXTURES / "evals"

#: benchmark -> (local data, extra config values, the hub set named when the hub is unreachable)
CASES: dict[type, tuple[Path, dict[str, Any], str]] = {
    MMLUProEvalEnv: (DATA / "mmlu_pro.jsonl", {}, "TIGER-Lab/MMLU-Pro (test)"),
    GPQAEvalEnv: (DATA / "gpqa.jsonl", {}, "Idavidrein/gpqa/gpqa_diamond (train)"),
    AGIEvalEnv: (DATA / "agieval", {}, "dmayhem93/agieval-aqua-rat (test)"),
    ARCEvalEnv: (DATA / "arc", {"subset": "ARC-Easy,ARC-Challenge"}, "allenai/ai2_arc/ARC-Easy (test)"),
    OBQAEvalEnv: (DATA / "obqa.jsonl", {}, "allenai/openbookqa/main (test)"),
    BBHEvalEnv: (DATA / "bbh", {}, "lighteval/bbh/causal_judgement (train)"),
    BoolQEvalEnv: (DATA / "boolq.jsonl", {}, "lighteval/boolq_helm (validation)"),
    HellaSwagEvalEnv: (DATA / "hellaswag.jsonl", {}, "Rowan/hellaswag (validation)"),
    PIQAEvalEnv: (DATA / "piqa.jsonl", {}, "ybisk/piqa (validation)"),
    SIQAEvalEnv: (DATA / "siqa.jsonl", {}, "allenai/social_i_qa (validation)"),
    WinoGrandeEvalEnv: (DATA / "winogrande.jsonl", {}, "allenai/winogrande/winogrande_xl (validation)"),
    MuSREvalEnv: (DATA / "musr.jsonl", {}, "TAUR-Lab/MuSR/murder_mysteries (murder_mysteries)"),
    PubMedQAEvalEnv: (DATA / "pubmedqa.jsonl", {}, "pubmed_qa/pqa_labeled (train)"),
    MMLUEvalEnv: (DATA / "mmlu", {"eval_limit": 7}, "lighteval/mmlu/abstract_algebra (test)"),
}
#: breakdown keys each benchmark reports
BREAKDOWNS = {
    MMLUEvalEnv: ("subject", "category"),
    MMLUProEvalEnv: ("discipline",),
    AGIEvalEnv: ("exam",),
    BBHEvalEnv: ("task",),
    ARCEvalEnv: ("subset",),
    GPQAEvalEnv: ("domain",),
    MuSREvalEnv: ("task",),
}
LONG = "<think>" + "Weighing every option once more, slowly and carefully. " * 40 + "</think>"
EXPECTED_SCORES = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def _flags(values: dict[str, Any]) -> list[str]:
    return [x for k, v in values.items() for x in (f"--env.{k}", v if isinstance(v, str) else json.dumps(v))]


def _labels(env_cls: type, item) -> list[str]:
    if env_cls is PubMedQAEvalEnv:
        return list(VALID_ANSWERS)
    return option_labels(len(item.fields["choices"]), getattr(env_cls, "numbered", False))


def reply_for(position: int, gold: str, other: str) -> str:
    """The scripted reply of the item at ``position`` (see the module docstring)."""
    return [
        f"<think>Checking each option.</think><answer>{gold}</answer>",
        f"<think>Done.</think>So the answer is \\boxed{{{gold}}}.",
        f"<answer>{other}</answer>",
        f"<answer>{gold} or {other}</answer>",
        "",
        f"<think>It has to be {gold}",
        f"{LONG}<answer>{gold}</answer>",
    ][position % 7]


def _items(env_cls: type, tiny_model_dir, **overrides: Any) -> list:
    """The benchmark's items as its set-up builds them from the fixture."""
    path, values, _ = CASES[env_cls]
    env = offline_env(env_cls, tiny_model_dir, **{"dataset_path": str(path), **values, **overrides})
    asyncio.run(env.setup())
    return env.items


@pytest.mark.parametrize("env_cls", list(CASES), ids=lambda c: c.name)
def test_exact_metrics_on_every_kind_of_reply(env_cls, scripted, tiny_model_dir):
    items = _items(env_cls, tiny_model_dir)
    assert len(items) == 7
    by_prompt = {item.prompt: (i, item) for i, item in enumerate(items)}

    def respond(prompt, index):
        position, item = by_prompt[prompt_text(prompt)]
        other = next(label for label in _labels(env_cls, item) if label != item.gold)
        return reply_for(position, item.gold, other)

    path, values, _ = CASES[env_cls]
    args = [
        "--env.dataset_path",
        path,
        "--env.eval_max_tokens",
        "48",
        "--env.retry_delay",
        "0",
        *_flags(values),
    ]
    run = scripted.evaluation(env_cls, args, respond, server_type=None)
    m = run.metrics
    mean = 2 / 7
    assert m["eval/accuracy"] == pytest.approx(mean)
    assert m["eval/accuracy_stderr"] == pytest.approx(
        math.sqrt(sum((s - mean) ** 2 for s in EXPECTED_SCORES) / 6 / 7)
    )
    assert m["eval/num_items"] == 7 and m["eval/num_samples"] == 7
    assert m["eval/no_answer_rate"] == pytest.approx(4 / 7)
    assert m["eval/truncated_rate"] == pytest.approx(1 / 7)
    assert len(run.requests) == 9  # the empty reply is asked max_retries (3) times
    samples = {s["id"]: s for s in run.samples}
    assert [samples[item.id]["score"] for item in items] == EXPECTED_SCORES
    assert [samples[item.id]["method"] for item in items][:6] == [
        "answer_tag", "boxed", "answer_tag", "ambiguous", "empty", "unclosed_think",
    ]  # fmt: skip
    assert samples[items[6].id]["finish_reason"] == "length"
    assert samples[items[0].id]["extracted"] == items[0].gold
    assert samples[items[0].id]["messages"][-1]["content"] == items[0].prompt
    for key in BREAKDOWNS.get(env_cls, ()):
        values_seen = {item.groups[key] for item in items}
        assert len(values_seen) >= 1
        for value in values_seen:
            members = [i for i, item in enumerate(items) if item.groups[key] == value]
            expected = sum(EXPECTED_SCORES[i] for i in members) / len(members)
            sub = run.report["results"][f"atropos|{env_cls.name}:{key}:{value}|0"]
            assert sub["accuracy"] == pytest.approx(expected) and sub["num_items"] == len(members)


@pytest.mark.parametrize("env_cls", list(CASES), ids=lambda c: c.name)
async def test_bad_rows_and_the_hub_are_one_line(env_cls, tiny_model_dir, tmp_path, hub_offline):
    path, values, hub = CASES[env_cls]
    first = path if path.is_file() else sorted(path.iterdir())[0]
    row = json.loads(first.read_text().splitlines()[0])
    field = env_cls.required_fields[0]
    del row[field]
    target = tmp_path / first.name
    env = offline_env(env_cls, tiny_model_dir, dataset_path=write_jsonl(target, [row]), **values)
    if path.is_dir():  # a per-subset benchmark reads the bad file from a directory
        env = offline_env(env_cls, tiny_model_dir, dataset_path=str(tmp_path), **values)
    with pytest.raises(DatasetError, match=rf"{first.name}: row 0: missing field '{field}'") as error:
        await env.setup()
    assert "\n" not in str(error.value)
    env = offline_env(env_cls, tiny_model_dir, **values)
    with pytest.raises(DatasetError, match="^" + re.escape(hub) + ": cannot load from the hub"):
        await env.setup()


def test_gpqa_shuffles_options_by_seed(tiny_model_dir):
    path = str(CASES[GPQAEvalEnv][0])
    items = _items(GPQAEvalEnv, tiny_model_dir)
    first = [i.fields["choices"] for i in items]
    assert first == [i.fields["choices"] for i in _items(GPQAEvalEnv, tiny_model_dir)]  # same order every run
    assert len({i.gold for i in items}) > 1  # the right answer moves around
    other = _items(GPQAEvalEnv, tiny_model_dir, shuffle_seed=7)
    assert [i.fields["choices"] for i in other] != first
    for item in other:
        correct = next(
            r
            for r in map(json.loads, Path(path).read_text().splitlines())
            if r["Question"] == item.fields["question"]
        )
        assert item.fields["choices"][ord(item.gold) - ord("A")] == correct["Correct Answer"]
