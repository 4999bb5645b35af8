"""The Reasoning Gym environment: task selection, seeded items, curricula, answer scoring, ``process``, ``evaluate``."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from pydantic import ValidationError

from environments.reasoning_gym_environment import (
    ReasoningGymEnv,
    ReasoningGymEnvConfig,
    extract_answer,
    registered_tasks,
)
from tests.helpers.single_turn_runs import (
    check_groups,
    offline_env,
    prompt_text,
)


def _env(tiny_model_dir, **overrides) -> ReasoningGymEnv:
    return offline_env(ReasoningGymEnv, tiny_model_dir, **overrides)


async def _ready(tiny_model_dir, **overrides) -> ReasoningGymEnv:
    env = _env(tiny_model_dir, **overrides)
    await env.setup()
    return env


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("<answer>292</answer>", "292"),
        ("<think>13*14 + ...</think>So: <answer> 292 </answer>", "292"),
        ("<answer>292</answer> to repeat: <answer>292</answer>", "292"),
        ("<answer>292</answer><answer>293</answer>", None),  # two different answers
        ("<think><answer>292</answer></think>", None),  # only inside the reasoning
        ("292", None),
        ("\\boxed{292}", None),
        ("<answer></answer>", None),
        ("<think>no end <answer>292</answer>", None),
        ("", None),
    ],
)
def test_extract_answer(reply, expected):
    assert extract_answer(reply) == expected


async def test_scoring_uses_the_tasks_own_scorer(tiny_model_dir):
    env = await _ready(tiny_model_dir, tasks=["leg_counting"])
    item = env.train_item(0)
    gold = item.entry["answer"]
    assert env.score_reply(f"<think>adding legs</think><answer>{gold}</answer>", item) == 1.0
    assert env.score_reply(f"<answer>\n{gold}\n</answer>", item) == 1.0
    assert env.score_reply(f"<answer>{int(gold) + 1}</answer>", item) == 0.0
    assert env.score_reply(f"<answer>{gold}</answer> or <answer>{int(gold) + 1}</answer>", item) == 0.0
    assert env.score_reply(f"<think><answer>{gold}</answer></think>", item) == 0.0
    assert env.score_reply(f"\\boxed{{{gold}}}", item) == 0.0
    assert env.score_reply("", item) == 0.0
    hedge = env.score_reply(f"<answer>{gold} or {int(gold) + 1}</answer>", item)
    assert hedge < 1.0  # reasoning-gym's partial credit for a hedge inside one answer, never full marks
    family = await _ready(tiny_model_dir, tasks=["family_relationships"])
    relation = family.train_item(0)
    assert family.score_reply(f"<answer>{relation.entry['answer'].upper()}</answer>", relation) == 1.0


def test_task_list_checks():
    with pytest.raises(
        ValidationError, match="unknown reasoning-gym task\\(s\\) no_such_task; registered: .*chain_sum"
    ):
        ReasoningGymEnvConfig(tasks=["chain_sum", "no_such_task"])
    with pytest.raises(ValidationError, match="listed twice"):
        ReasoningGymEnvConfig(tasks=["chain_sum", {"name": "chain_sum", "weight": 2}])
    with pytest.raises(ValidationError, match="at least one"):
        ReasoningGymEnvConfig(tasks=[])
    assert ReasoningGymEnvConfig(tasks=["all"]).tasks == registered_tasks()
    specs = ReasoningGymEnvConfig(
        tasks=["gcd", {"name": "lcm", "weight": 3, "config": {"max_value": 50}}]
    ).task_specs()
    assert [(s.name, s.weight, s.config) for s in specs] == [
        ("gcd", 1.0, {}),
        ("lcm", 3.0, {"max_value": 50}),
    ]


async def test_items_are_seeded_weighted_and_eval_is_held_out(tiny_model_dir):
    tasks = [{"name": "chain_sum", "weight": 1}, {"name": "gcd", "weight": 3}]
    env = await _ready(tiny_model_dir, tasks=tasks, num_eval_samples_per_task=4)
    again = await _ready(tiny_model_dir, tasks=tasks, num_eval_samples_per_task=4)
    items = [env.train_item(i) for i in range(400)]
    assert [(i.task, i.question) for i in items] == [
        (i.task, again.train_item(n).question) for n, i in enumerate(items)
    ]
    shares = Counter(i.task for i in items)
    assert 0.15 < shares["chain_sum"] / 400 < 0.35
    other = await _ready(tiny_model_dir, tasks=tasks, seed=7)
    assert [i.question for i in items[:20]] != [other.train_item(n).question for n in range(20)]
    assert len(env.test_items) == 8 and {i.task for i in env.test_items} == {"chain_sum", "gcd"}
    assert [i.question for i in env.test_items] == [i.question for i in again.test_items]
    held_out = {(i.task, i.question) for i in env.test_items}
    assert not any((i.task, i.question) in held_out for i in items)
    # A training item that repeats an evaluation question is replaced by another one.
    first = env.train_item(0)
    env._eval_questions.add((first.task, first.question))
    assert env.train_item(0).question != first.question


async def test_task_config_is_applied(tiny_model_dir):
    env = await _ready(
        tiny_model_dir, tasks=[{"name": "leg_counting", "config": {"min_animals": 2, "max_animals": 2}}]
    )
    assert all(len(env.train_item(i).entry["metadata"]["animals"]) == 2 for i in range(20))
    with pytest.raises(ValueError, match="leg_counting.*cannot build its dataset"):
        await _ready(tiny_model_dir, tasks=[{"name": "leg_counting", "config": {"no_such_setting": 1}}])


async def test_curriculum_promotes_and_demotes(tiny_model_dir):
    env = await _ready(
        tiny_model_dir, tasks=["leg_counting"], complexity_mode="curriculum", curriculum_window=4,
        curriculum_target_accuracy=0.75, curriculum_demote_accuracy=0.5,
    )  # fmt: skip
    item = env.train_item(0)
    assert item.level == 0 and env.curriculum_levels == {"leg_counting": 0}
    assert len(item.entry["metadata"]["animals"]) == 1  # level 0: one kind of animal
    env.on_group_scored(item, [1.0, 1.0])
    assert env.curriculum_levels["leg_counting"] == 0  # window not full yet
    env.on_group_scored(item, [1.0, 0.0])
    assert env.curriculum_levels["leg_counting"] == 1  # 3 of 4 correct
    env.on_group_scored(item, [0.0] * 4)  # a level-0 item no longer counts
    assert env.curriculum_levels["leg_counting"] == 1
    harder = [env.train_item(i) for i in range(30)]
    assert {i.level for i in harder} == {1} and max(len(i.entry["metadata"]["animals"]) for i in harder) == 2
    env.on_group_scored(harder[0], [0.0, 1.0, 0.0, 0.0])
    assert env.curriculum_levels["leg_counting"] == 0
    env.on_group_scored(env.train_item(0), [0.0] * 4)
    assert env.curriculum_levels["leg_counting"] == 0  # never below 0
    for _ in range(100):
        env.on_group_scored(env.train_item(0 if env.curriculum_levels["leg_counting"] == 0 else 1), [1.0] * 4)
        env.on_group_scored(env.train_item(2), [1.0] * 4)
    assert env.curriculum_levels["leg_counting"] == env.max_level("leg_counting")


async def test_curriculum_levels_are_checkpointed(tiny_model_dir, tmp_path):
    env = await _ready(tiny_model_dir, tasks=["leg_counting"], complexity_mode="curriculum")
    env.curriculum_levels = {"leg_counting": 3}
    env.checkpoint_dir = str(tmp_path)
    env.save_checkpoint(5)
    written = json.loads(next(tmp_path.rglob("step-5.json")).read_text())
    assert written["curriculum_levels"] == {"leg_counting": 3} and "iter" in written
    fresh = await _ready(tiny_model_dir, tasks=["leg_counting"], complexity_mode="curriculum")
    fresh.checkpoint_dir, fresh.wandb_prepend, fresh.curr_step = str(tmp_path), env.wandb_prepend, 5
    fresh.load_checkpoint()
    assert fresh.train_item(0).level == 3


async def test_random_complexity_draws_levels(tiny_model_dir):
    env = await _ready(tiny_model_dir, tasks=["leg_counting", "gcd"], complexity_mode="random")
    levels = [env.train_item(i).level for i in range(60)]
    assert len(set(levels)) > 3 and min(levels) >= 0
    assert all(i.level is None for i in env.test_items)  # evaluation stays at the configured difficulty


def _responder(tiny_model_dir, **overrides):
    """Answers the environment's own questions: right for even choice indices, wrong for odd ones."""
    env = _env(tiny_model_dir, **overrides)
    import asyncio

    asyncio.run(env.setup())
    golds = {i.question: i.entry["answer"] for i in env.test_items}
    golds.update({(item := env.train_item(n)).question: item.entry["answer"] for n in range(50)})

    def respond(prompt, index):
        text = prompt_text(prompt)
        gold = next((answer for question, answer in golds.items() if question.strip() in text), None)
        if gold is None:
            return "I do not know this one."
        answer = gold if index % 2 == 0 else str(int(gold) + 1)  # numeric tasks only
        return f"<think>Working it out step by step.</think>The result: <answer>{answer}</answer>"

    return respond


def test_process_writes_scored_groups(scripted, tiny_model_dir):
    tasks = '["chain_sum", "gcd"]'
    groups = scripted.process(
        ReasoningGymEnv,
        ["--env.tasks", tasks, "--env.group_size", "2", "--env.total_steps", "3", "--env.max_tokens", "96"],
        _responder(tiny_model_dir, tasks=["chain_sum", "gcd"]),
    )
    check_groups(groups, 3, [0.0, 1.0])
    assert all("<answer>" in group["messages"][0][-1]["content"] for group in groups)


def test_evaluate_reports_accuracy(scripted, tiny_model_dir):
    args = ["--env.tasks", '["chain_sum", "leg_counting"]', "--env.num_eval_samples_per_task", "3",
            "--env.max_tokens", "96"]  # fmt: skip
    metrics, samples, out = scripted.evaluate(
        ReasoningGymEnv,
        args,
        _responder(tiny_model_dir, tasks=["chain_sum", "leg_counting"], num_eval_samples_per_task=3),
    )
    assert metrics["eval/percent_correct"] == 1.0
    assert len(samples) == 6 and Counter(s["task"] for s in samples) == {"chain_sum": 3, "leg_counting": 3}
    assert "reasoning_gym evaluation: percent_correct=1.0000" in out
