"""ExamCraft: reading the teacher's JSON move, the learning reward both ways, the profile, ``process`` and
``evaluate`` against the scripted server."""

from __future__ import annotations

import json
import random

import pytest

from atroposlib.envs.cli import parse_command
from atroposlib.envs.games import InvalidAction
from environments.community.examcraft.examcraft_server import (
    ExamCraftConfig,
    ExamCraftEnv,
    ExamCraftSession,
    load_student,
)
from environments.community.examcraft.teacher_actions import read_action
from environments.community.tutor_rl_agent.student import SimulatedStudent
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.multi_turn_runs import episode_responder
from tests.helpers.single_turn_runs import offline_env, setup_failure

PROFILE = FIXTURES / "community" / "examcraft" / "student_profile.json"
TOPICS = {"fractions": 0.3, "decimals": 0.6}
_OPTIONS = {"A": "1/2", "B": "1/3", "C": "2/3", "D": "3/4"}


def question(topic="fractions", difficulty="medium", **content) -> dict:
    body = {"question": "Which fraction is the largest?", "options": dict(_OPTIONS), "correct_answer": "D"}
    return {
        "action_type": "QUESTION",
        "topic": topic,
        "difficulty": difficulty,
        "content": {**body, **content},
    }


def explanation(topic="fractions", text="A fraction is a part of a whole.") -> dict:
    return {"action_type": "EXPLANATION", "topic": topic, "content": {"explanation": text}}


def plan(*topics) -> dict:
    return {"action_type": "LESSON_PLAN", "content": {"prioritized_topics": list(topics)}}


def _session(**config) -> ExamCraftSession:
    student = SimulatedStudent(dict(TOPICS), random.Random(0), question_gain=0.06, lesson_gain=0.03)
    return ExamCraftSession(ExamCraftConfig(**config), {"proficiency": dict(TOPICS)}, student)


# -- reading the move ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        json.dumps(question()),
        "<think>Fractions are weakest.</think>\n" + json.dumps(question(), indent=2),
        "```json\n" + json.dumps(question(topic="Fractions", difficulty="MEDIUM")) + "\n```",
        json.dumps(dict(reversed(list(question().items())))),  # key order
    ],
)
def test_equivalent_writings_of_one_question(reply):
    move = read_action(reply, TOPICS)
    assert (move.kind, move.topic, move.difficulty) == ("QUESTION", "fractions", "medium")


@pytest.mark.parametrize(
    "reply",
    [
        "Here is my question: " + json.dumps(question()),  # prose around the object
        json.dumps(question()) + "\n" + json.dumps(explanation()),  # two moves
        "<think>" + json.dumps(question()) + "</think>I will ask about fractions.",  # only in the reasoning
        "<think>" + json.dumps(question()),  # reasoning never closes
        json.dumps(question(topic="algebra")),  # not the student's topic
        json.dumps(question(difficulty="expert")),
        json.dumps(question(options={"A": "1/2", "B": "1/3", "C": "2/3"})),  # three options
        json.dumps(question(options={"A": "1/2", "B": "1/2", "C": "2/3", "D": "3/4"})),  # two the same
        json.dumps(question(correct_answer="E")),
        json.dumps(question(question="")),
        json.dumps(explanation(text="  ")),
        json.dumps(plan("fractions", "fractions")),  # a topic twice
        json.dumps(plan("fractions", "algebra")),
        json.dumps({**question(), "action_type": "QUIZ"}),
        '{"action_type": "QUESTION", "action_type": "EXPLANATION"}',  # a repeated key
        json.dumps([question()]),
        "",
    ],
)
def test_hedges_hacks_and_malformed_moves_are_invalid(reply):
    with pytest.raises(InvalidAction):
        read_action(reply, TOPICS)


def test_lesson_plans_can_be_switched_off():
    assert read_action(json.dumps(plan("fractions")), TOPICS).plan == ("fractions",)
    with pytest.raises(InvalidAction, match="QUESTION, EXPLANATION"):
        read_action(json.dumps(plan("fractions")), TOPICS, lesson_plans=False)


# -- reward ---------------------------------------------------------------------------------------------------


async def test_a_well_pitched_question_teaches_and_is_rewarded():
    session = _session()
    assert (
        "fractions" in session.messages[0]["content"]
        and "Questions left: 8" in session.messages[1]["content"]
    )
    feedback = await session.step(json.dumps(question(difficulty="easy")), 0)  # level 0.3 = proficiency 0.3
    gained = session.student.proficiency["fractions"] - 0.3
    assert gained in (pytest.approx(0.06), pytest.approx(0.03))  # right / wrong answer
    assert feedback.reward == pytest.approx(10 * gained / 2) and not feedback.done
    assert (
        "fractions (easy)" in feedback.messages[0]["content"]
        and "Questions left: 7" in feedback.messages[0]["content"]
    )


async def test_length_keywords_and_extra_fields_earn_nothing():
    plain, padded = _session(), _session()
    await plain.step(json.dumps(question(difficulty="hard")), 0)
    stuffed = question(difficulty="hard", explanation="because therefore however for example " * 40,
                       learning_objective="Understand everything about fractions deeply")  # fmt: skip
    await padded.step(json.dumps(stuffed), 0)
    assert plain.student.proficiency == padded.student.proficiency  # same seed, same answer, same learning
    short, long = _session(), _session()
    first = await short.step(json.dumps(explanation()), 0)
    second = await long.step(json.dumps(explanation(text="because therefore remember " * 50)), 0)
    assert first.reward == second.reward == pytest.approx(10 * 0.03 * 0.7 / 2)


async def test_a_mispitched_question_teaches_nothing():
    session = _session()
    feedback = await session.step(
        json.dumps(question(difficulty="hard")), 0
    )  # level 0.9 for a student at 0.3
    assert feedback.reward == 0.0 and session.student.proficiency["fractions"] == 0.3


async def test_a_lesson_plan_ends_the_session_rewarded_by_its_priorities():
    assert (await _session().step(json.dumps(plan("fractions", "decimals")), 0)).reward == 0.5
    wrong_order = await _session().step(json.dumps(plan("decimals", "fractions")), 0)
    assert wrong_order.done and wrong_order.reward == 0.0


async def test_an_invalid_move_ends_the_session_at_the_penalty():
    session = _session()
    feedback = await session.step("I would ask about fractions.", 0)
    assert feedback.done and feedback.reward == -1.0 and session.invalid_action


async def test_the_session_ends_after_the_questions_and_is_won_by_progress():
    session = _session(max_questions_per_episode=2, success_gain=0.01)
    assert not (await session.step(json.dumps(question(difficulty="easy")), 0)).done
    await session.step(json.dumps(explanation()), 1)  # explanations do not count as questions
    assert (await session.step(json.dumps(question(topic="decimals")), 2)).done
    assert session.questions == 2 and session.won


# -- profile --------------------------------------------------------------------------------------------------


async def test_the_profile_and_its_errors(tiny_model_dir, tmp_path):
    env = offline_env(ExamCraftEnv, tiny_model_dir, profile_path=str(PROFILE))
    await env.setup()
    assert env.profile["proficiency"] == {"fractions": 0.3, "decimals": 0.6, "percentages": 0.45}
    assert env.student(4).rng.random() == env.student(4).rng.random()
    default = load_student("example_profile.json")  # the original's default student, shipped with the script
    assert default["proficiency"] == {"algebra": 0.4, "geometry": 0.6, "statistics": 0.3, "calculus": 0.2}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    await setup_failure(
        offline_env(ExamCraftEnv, tiny_model_dir, profile_path=str(bad)), "bad.json: cannot read"
    )
    bad.write_text(json.dumps({"topics": [{"name": "fractions", "proficiency": 2}]}))
    await setup_failure(
        offline_env(ExamCraftEnv, tiny_model_dir, profile_path=str(bad)), r"bad.json: topics\[0\]"
    )
    await setup_failure(
        offline_env(ExamCraftEnv, tiny_model_dir, profile_path=str(tmp_path / "none.json")), "none.json"
    )


def test_the_original_settings(tmp_path):
    config = ExamCraftEnv.config_init()[0]
    expected = {
        "group_size": 6, "total_steps": 150, "batch_size": 12, "steps_per_eval": 30, "max_token_length": 3072,
        "wandb_name": "examcraft-adaptive-teacher", "tokenizer_name": "NousResearch/Hermes-3-Llama-3.1-8B",
        "profile_path": "example_profile.json", "max_questions_per_episode": 8, "student_learning_rate": 0.03,
        "enable_lesson_plans": True,
    }  # fmt: skip
    assert {key: getattr(config, key) for key in expected} == expected
    # an original config file: its unused key is accepted and has no effect
    path = tmp_path / "examcraft.yaml"
    path.write_text("env:\n  difficulty_adaptation_rate: 0.2\n  max_questions_per_episode: 5\n")
    run = parse_command(ExamCraftEnv, ["process", "--config", str(path)]).resolve()
    assert run.env_config.max_questions_per_episode == 5
    assert "difficulty_adaptation_rate" not in run.env_config.model_dump()


# -- process and evaluate -------------------------------------------------------------------------------------


def teacher(topic: str = "fractions", spoil: bool = False):
    """Every turn an easy question on ``topic`` (a weak topic: it teaches until the student passes 0.8); with
    ``spoil``, every other episode (in order of arrival) writes prose instead of JSON."""
    asks = [json.dumps(question(topic=topic, difficulty="easy"))]
    return episode_responder([asks, ["Let us talk about it."]] if spoil else [asks])


def test_process_writes_every_group(scripted):
    args = ["--env.group_size", "2", "--env.total_steps", "2", "--env.max_num_workers", "1",
            "--env.max_questions_per_episode", "3", "--env.profile_path", str(PROFILE)]  # fmt: skip
    groups = scripted.process(ExamCraftEnv, args, teacher(spoil=True))
    assert len(groups) == 2
    for group in groups:
        taught, spoiled = sorted(group["scores"], reverse=True)
        assert taught > 0 and spoiled == -1.0
        assert "NEW TEACHING SESSION" in group["messages"][0][1]["content"]
        for tokens, masks in zip(group["tokens"], group["masks"], strict=True):
            assert len(tokens) == len(masks) and masks[0] == -100 and any(m != -100 for m in masks)


def test_evaluate_reports_the_students_progress(scripted):
    evaluation = scripted.evaluation(
        ExamCraftEnv, ["--env.eval_episodes", "3", "--env.max_questions_per_episode", "2",
                       "--env.profile_path", str(PROFILE)], teacher(),
    )  # fmt: skip
    metrics = evaluation.metrics
    assert metrics["eval/questions"] == 2.0 and metrics["eval/invalid_action"] == 0.0
    assert metrics["eval/progress"] > 0 and metrics["eval/mean_score"] == pytest.approx(
        10 * metrics["eval/progress"]
    )
