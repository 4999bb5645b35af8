"""InfiniteMath: the curriculum, answer checking and rewards, ``process`` and ``evaluate`` on generated problems."""

from __future__ import annotations

import asyncio
import random

import pytest

from environments.infinimath.curriculum import DIFFICULTY_LEVELS, MathCurriculum, level_of
from environments.infinimath.infinimath_env import InfiniteMathEnv, Problem, clean_for_comparison
from tests.helpers.cli_runs import read_jsonl
from tests.helpers.single_turn_runs import offline_env


def _env(tiny_model_dir, **overrides) -> InfiniteMathEnv:
    return offline_env(InfiniteMathEnv, tiny_model_dir, **overrides)


def test_curriculum_levels_and_promotion():
    curriculum = MathCurriculum(
        starting_level=2, progress_threshold=0.75, min_evaluations=4, rng=random.Random(3)
    )
    problem, solution, generator_id = curriculum.get_problem()
    assert level_of(generator_id) == 2 and problem and solution
    again = MathCurriculum(starting_level=2, rng=random.Random(3)).get_problem()
    assert again == (problem, solution, generator_id)  # the curriculum's seed fixes the problems
    for right in (True, False, True):
        curriculum.record_performance(generator_id, right)
    assert curriculum.get_success_rate(2) is None and not curriculum.advance_difficulty()
    curriculum.record_performance(generator_id, True)  # 3 of the last 4
    assert curriculum.advance_difficulty() and curriculum.get_current_level() == 3
    curriculum.record_performance(DIFFICULTY_LEVELS[1][0], True)  # a level-1 answer counts for level 1
    assert curriculum.performance_history[1] == [True]
    with pytest.raises(ValueError, match="Invalid starting level"):
        MathCurriculum(starting_level=8)


SUM = Problem("24+48=", "72", 0, 1)
HALVES = Problem("\\frac{7}{4}\\cdot\\frac{6}{1}=", "\\frac{21}{2}", 28, 2)
PRIME = Problem("Is 55 prime?", "No", 90, 1)


@pytest.mark.parametrize(
    ("reply", "problem", "right"),
    [
        ("\n<think>\n24 and 48\n</think>\n\\boxed{72}", SUM, True),
        ("\\boxed{72}", SUM, True),
        ("\\boxed{72.0}", SUM, True),  # the same value
        ("\\boxed{10.5}", HALVES, True),  # 21/2 as a decimal
        ("\\boxed{\\dfrac{21}{2}}", HALVES, True),
        ("\\boxed{no}", PRIME, True),  # case is not part of the answer
        ("\\boxed{73}", SUM, False),
        ("72", SUM, False),  # unboxed
        ("\\boxed{72} or maybe \\boxed{73}", SUM, False),  # hedged
        ("\n<think>\n\\boxed{72}", SUM, False),  # the reasoning never closes
        ("\n<think>\n\\boxed{72}</think>", SUM, False),  # the answer only inside the reasoning
        ("", SUM, False),
    ],
)
async def test_answer_checking(tiny_model_dir, reply, problem, right):
    env = _env(tiny_model_dir)
    try:
        assert await env.is_correct(reply, problem.solution) is right
    finally:
        env.checker.close()


def test_rewards_add_the_format_bonuses(tiny_model_dir):
    env = _env(tiny_model_dir, incorrect_reward=-0.5)
    assert env.reply_score("\n<think>\nwork\n</think>\n\\boxed{72}", True) == pytest.approx(1.4)
    assert env.reply_score("\n<think>\n\n</think>\n\\boxed{72}", True) == pytest.approx(1.2)  # empty thought
    assert env.reply_score("\\boxed{7}", False) == pytest.approx(-0.3)
    assert env.reply_score("no answer", False) == -0.5
    assert clean_for_comparison("\\text{1,220} m^2") == "{1220}m^2"


async def test_all_right_groups_prefer_short_replies_and_feed_the_curriculum(tiny_model_dir):
    env = _env(tiny_model_dir, max_tokens=40, min_evaluations=2, progress_threshold=1.0)
    try:
        short, long = "\\boxed{72}", "\\boxed{72}" + " and so on" * 30
        scores = await env.score_replies_async([short, long], SUM)
        assert scores[0] == pytest.approx(1.2) and scores[1] < scores[0] - 0.5
        assert env.curriculum.current_level == 2  # two right answers at level 1 promote
        env.config.apply_length_penalty = False
        assert await env.score_replies_async([short, long], HALVES) == [
            pytest.approx(-0.8),
            pytest.approx(-0.8),
        ]
    finally:
        env.checker.close()


def test_the_curriculum_is_checkpointed(tiny_model_dir, tmp_path):
    env = _env(tiny_model_dir, min_evaluations=1)
    env.checkpoint_dir = str(tmp_path)
    env.curriculum.record_performance(0, True)
    env.curriculum.advance_difficulty()
    env.save_checkpoint(3)
    restored = _env(tiny_model_dir)
    restored.checkpoint_dir, restored.curr_step = str(tmp_path), 3
    restored.load_checkpoint()
    assert restored.curriculum.current_level == 2
    assert (
        restored.curriculum.performance_history[1] == [True]
        and restored.curriculum.performance_history[2] == []
    )


async def _problems(
    tiny_model_dir, count: int, **overrides
) -> tuple[list[Problem], dict[int, list[Problem]]]:
    """The first ``count`` training problems and the evaluation problems an environment with these settings
    generates."""
    env = _env(tiny_model_dir, **overrides)
    await env.setup()
    return [await env.get_next_item() for _ in range(count)], env.eval_problems


def _solver(problems: list[Problem], right) -> callable:
    """Answers the problem in the prompt: its solution when ``right(problem, choice index)``, else a wrong one."""

    def respond(prompt, index):
        text = str(prompt)
        problem = max((p for p in problems if p.problem in text), key=lambda p: len(p.problem))
        answer = problem.solution if right(problem, index) else "wrong"
        return f"Let me compute it.\n</think>\n\n\\boxed{{{answer}}}"

    return respond


async def test_process_generates_and_scores_groups(scripted, tiny_model_dir):
    problems, _ = await _problems(tiny_model_dir, 2, seed=5)
    out = scripted.tmp_path / "groups.jsonl"
    args = ["--env.seed", "5", "--env.group_size", "2", "--env.total_steps", "2", "--env.max_tokens", "64",
            "--env.data_path_to_save_groups", out]  # fmt: skip
    scripted.command(InfiniteMathEnv, "process", args, _solver(problems, lambda p, i: i == 0))
    groups = read_jsonl(out)
    assert len(groups) == 2
    for group, problem in zip(groups, problems, strict=True):
        assert sorted(group["scores"]) == [pytest.approx(-0.1), pytest.approx(1.4)]
        prompt = group["messages"][0][1]["content"]
        assert problem.problem in prompt
        for tokens, masks in zip(group["tokens"], group["masks"], strict=True):
            assert len(tokens) == len(masks) and masks[0] == -100 and masks[-1] != -100


def test_evaluate_reports_the_current_level_and_promotes(scripted, tiny_model_dir):
    _, evals = asyncio.run(_problems(tiny_model_dir, 0, eval_problems_per_level=4))
    level_one = evals[1]
    right = {p.problem for p in level_one[:2]}
    args = ["--env.eval_problems_per_level", "4", "--env.max_tokens", "64"]
    evaluation = scripted.evaluation(
        InfiniteMathEnv, args, _solver(level_one, lambda p, i: p.problem in right)
    )
    expected = sum(1 for p in level_one if p.problem in right) / 4
    assert (
        evaluation.metrics["eval/percent_correct"] == expected == evaluation.metrics["eval/level_1_accuracy"]
    )
    assert (
        evaluation.metrics["eval/current_level"] == 1.0 and evaluation.metrics["eval/advanced_level"] == 0.0
    )
    assert len(evaluation.samples) == 4 and all(s["level"] == 1 for s in evaluation.samples)
    promoted = scripted.evaluation(
        InfiniteMathEnv, [*args, "--env.min_evaluations", "4"], _solver(level_one, lambda p, i: True)
    )
    assert promoted.metrics["eval/level_1_accuracy"] == 1.0 and promoted.metrics["eval/advanced_level"] == 1.0
