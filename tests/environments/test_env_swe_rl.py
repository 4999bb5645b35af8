"""SWE-RL: SEARCH/REPLACE parsing, the similarity reward, data loading, the curriculum, ``process`` and
``evaluate``."""

from __future__ import annotations

import pytest

from environments.swe_rl.patches import MALFORMED, context_files, parse_edits, patch_reward, similarity
from environments.swe_rl_env import EXAMPLE_ISSUE, SWERLEnv
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure, write_jsonl

SAMPLE = FIXTURES / "swe_rl_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
ADD = ROWS[0]


def gold_edit(row: dict) -> str:
    """The SEARCH/REPLACE block that makes ``row``'s gold patch (its removed and added lines)."""
    lines = row["patch"].splitlines()[3:]
    search = [line[1:] for line in lines if line.startswith("-")]
    replace = [line[1:] for line in lines if line.startswith("+")]
    path = row["patch"].split(" b/", 1)[1].split("\n", 1)[0]
    block = "\n".join([f"### {path}", "<<<<<<< SEARCH", *search, "=======", *replace, ">>>>>>> REPLACE"])
    return f"```python\n{block}\n```"


def edit(search: str, replace: str, path: str = "calc/ops.py") -> str:
    return f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (gold_edit(ADD), 1.0),
        ("<think>add subtracts; flip the sign</think>\n" + gold_edit(ADD), 1.0),
        # the same change written with more context lines: the same diff
        (edit("def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b"), 1.0),
        (gold_edit(ADD).replace("```python\n", "").replace("\n```", ""), 1.0),  # without a fence
        ("The sign is wrong; here is the fix.\n" + gold_edit(ADD) + "\nThat is all.", 1.0),  # prose around
        (gold_edit(ADD) + "\n" + gold_edit(ADD), MALFORMED),  # the second SEARCH is gone after the first
        ("I would change `a - b` to `a + b`.", MALFORMED),  # no edit block
        (edit("    return a - c", "    return a + b"), MALFORMED),  # SEARCH text not in the file
        (edit("    return a - b", "    return a + b", "calc/other.py"), MALFORMED),  # file not shown
        (gold_edit(ADD).replace(">>>>>>> REPLACE", ""), MALFORMED),  # cut short
        ("<think>" + gold_edit(ADD), MALFORMED),  # reasoning never closed
        ("<think>" + gold_edit(ADD) + "</think>", MALFORMED),  # the edit only inside the reasoning
        ("", MALFORMED),
    ],
)
def test_reward(reply, expected):
    assert patch_reward(reply, ADD["text"], ADD["patch"]) == expected


def test_a_wrong_fix_scores_by_its_similarity():
    wrong = patch_reward(edit("    return a - b", "    return b - a"), ADD["text"], ADD["patch"])
    unrelated = patch_reward(edit("    return a * b", "    return 0"), ADD["text"], ADD["patch"])
    assert 0.0 < unrelated < wrong < 1.0
    # the ratio is SequenceMatcher's: symmetric here and 1.0 only for the same text
    assert similarity("abc", "abd") == pytest.approx(2 * 2 / 6)


def test_parsing_and_context():
    edits = parse_edits("### a.py\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n"
                        "### b.py\n<<<<<<< SEARCH\ny\n=======\n>>>>>>> REPLACE")  # fmt: skip
    assert [(e.path, e.search, e.replace) for e in edits] == [("a.py", "x = 1", "x = 2"), ("b.py", "y", "")]
    assert parse_edits("### a.py\nx = 1") is None and parse_edits("   \n") is None
    assert context_files(ADD["text"]) == {"calc/ops.py": "def add(a, b):\n    return a - b\n\n\n"
                                          "def mul(a, b):\n    return a * b\n"}  # fmt: skip
    # a context without oracle file blocks: the edits themselves are compared with the gold text
    block = "### a.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE"
    assert patch_reward(block, "plain code", block) == 1.0


def _env(tiny_model_dir, **overrides) -> SWERLEnv:
    return offline_env(SWERLEnv, tiny_model_dir, **{"dataset_path": str(SAMPLE), **overrides})


async def test_local_rows_hold_out_an_eval_set(tiny_model_dir):
    env = _env(tiny_model_dir)
    await env.setup()
    assert len(env.test) == 2 and len(env.train) == 2
    assert {t.item_id for t in env.train + env.test} == {r["instance_id"] for r in ROWS}
    both = _env(tiny_model_dir, eval_dataset_path=str(SAMPLE), max_test_samples=3, max_train_samples=1)
    await both.setup()
    assert len(both.train) == 1 and len(both.test) == 3 and all(t.evaluation for t in both.test)


async def test_bad_rows_and_the_hub_default(tiny_model_dir, tmp_path, hub_offline):
    path = write_jsonl(tmp_path / "swe.jsonl", [ROWS[0], {"problem_statement": "x", "text": "y"}])
    await setup_failure(_env(tiny_model_dir, dataset_path=path), f"{path}: row 1: missing field 'patch'")
    renamed = write_jsonl(tmp_path / "renamed.jsonl", [{"issue": "x", "text": "y", "patch": "z"}])
    env = _env(tiny_model_dir, dataset_path=renamed, dataset_issue_column="issue")
    await env.setup()
    assert env.train[0].problem_statement == "x"
    await setup_failure(_env(tiny_model_dir, dataset_path=None), "NousResearch/SWE-smith-oracle")


async def test_the_worked_example_is_dropped_once_answers_are_well_formed(tiny_model_dir):
    env = _env(tiny_model_dir, icl_prompt_threshold=0.5)
    await env.setup()
    item = env.train[0]
    assert len(env.prompt_messages(item)) == 4 and len(env.prompt_messages(env.test[0])) == 2
    env.on_group_scored(item, [MALFORMED, MALFORMED, MALFORMED, 0.4])
    assert env.using_icl_prompt
    env.on_group_scored(item, [0.9, 1.0, 0.3, MALFORMED])  # 4 of 8 well formed
    assert not env.using_icl_prompt and len(env.prompt_messages(item)) == 2
    off = _env(tiny_model_dir, use_curriculum_learning=False)
    assert len(off.prompt_messages(item)) == 2


def _responder(wrong_for_odd: bool = True):
    """The gold edit for even choice indices; a prose answer (malformed) for odd ones."""

    def respond(prompt, index):
        row = next(r for r in ROWS if r["problem_statement"] in prompt_text(prompt))
        if index % 2 and wrong_for_odd:
            return "<think>Looking at it.</think>The bug is in the return statement."
        return "<think>Found it.</think>\n" + gold_edit(row)

    return respond


def test_process_with_a_local_file(scripted):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "2", "--env.total_steps", "2",
            "--env.max_tokens", "256", "--env.dump_rollouts", "true"]  # fmt: skip
    groups = scripted.process(SWERLEnv, args, _responder())
    check_groups(groups, 2, [MALFORMED, 1.0])
    dumps = list((scripted.tmp_path / "swe_rl" / "data_dumps").glob("*.jsonl"))
    assert len(dumps) == 1 and len(read_jsonl(dumps[0])) == 2


SHOUT_HALF_FIX = edit(
    "    return text.capitalize() + '!'", "    return text.capitalize() + '!!'", "text/style.py"
)


def test_evaluate_reports_exact_metrics(scripted):
    prompts = []

    def respond(prompt, index):
        prompts.append(str(prompt))
        row = next(r for r in ROWS if r["problem_statement"] in prompt_text(prompt))
        if row is ROWS[0]:
            return "no edits"
        if row is ROWS[1]:
            return SHOUT_HALF_FIX
        return gold_edit(row)

    evaluation = scripted.evaluation(
        SWERLEnv, ["--env.dataset_path", SAMPLE, "--env.eval_dataset_path", SAMPLE], respond
    )
    partial = patch_reward(SHOUT_HALF_FIX, ROWS[1]["text"], ROWS[1]["patch"])
    assert 0 < partial < 1
    metrics = evaluation.metrics
    assert metrics["eval/percent_correct"] == metrics["eval/pass_at_1"] == 0.5
    assert metrics["eval/patch_format_accuracy"] == 0.75
    assert metrics["eval/avg_similarity_score_correct_patch_format"] == pytest.approx((2 + partial) / 3)
    assert metrics["eval/mean_score"] == pytest.approx((MALFORMED + partial + 2) / 4)
    # evaluation prompts carry no worked example (training prompts do, see above)
    assert len(prompts) == 4 and not any(EXAMPLE_ISSUE in p for p in prompts)
