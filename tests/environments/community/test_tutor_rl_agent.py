"""The tutoring environment: the simulated student, moves and progress rewards, profiles, ``process`` and
``evaluate``."""

from __future__ import annotations

import json
import random
import re

import pytest

from environments.community.tutor_rl_agent.student import SimulatedStudent, load_profile, random_profile
from environments.community.tutor_rl_agent.tutor_env import TutorEnv, TutorEnvConfig, TutorSession
from tests.environments.community.community_runs import numbered_episodes
from tests.helpers.multi_turn_runs import take_action
from tests.helpers.single_turn_runs import offline_env, setup_failure


def _student(vectors=0.6, matrices=0.3, seed=0):
    return SimulatedStudent({"vectors": vectors, "matrices": matrices}, random.Random(seed))


def test_answers_follow_proficiency_and_difficulty():
    rate = {}
    for difficulty in ("easy", "medium", "hard"):
        student = _student(vectors=0.5, seed=1)
        student.question_gain = 0.0  # no learning: the answer rate alone
        rate[difficulty] = sum(student.answer("vectors", difficulty) for _ in range(2000)) / 2000
    assert rate["easy"] == pytest.approx(0.8, abs=0.04) and rate["medium"] == pytest.approx(0.5, abs=0.04)
    assert rate["hard"] == pytest.approx(0.3, abs=0.04)


def test_learning_is_largest_for_questions_at_the_students_level():
    gains = {}
    for difficulty in ("easy", "medium", "hard"):
        student = _student(vectors=0.6, seed=2)
        correct = student.answer("vectors", difficulty)
        gains[difficulty] = (student.proficiency["vectors"] - 0.6, correct)
    assert gains["medium"][0] == pytest.approx(0.05 if gains["medium"][1] else 0.025)
    assert gains["hard"][0] == pytest.approx((0.05 if gains["hard"][1] else 0.025) * 0.4)
    assert gains["easy"][0] == pytest.approx((0.05 if gains["easy"][1] else 0.025) * 0.4)
    expert = _student(vectors=0.95)
    expert.answer("vectors", "easy")
    assert expert.proficiency["vectors"] == 0.95  # an easy question is too far below 0.95 to teach anything
    weak, strong = _student(matrices=0.3), _student(vectors=0.9)
    weak.study("matrices")
    strong.study("vectors")
    assert weak.proficiency["matrices"] == pytest.approx(0.3 + 0.03 * 0.7)
    assert strong.proficiency["vectors"] == pytest.approx(0.9 + 0.03 * 0.1)


def test_profiles(tmp_path):
    assert random_profile(random.Random(5)) == random_profile(random.Random(5))
    assert all(0.2 <= p <= 0.8 for p in random_profile(random.Random(5)).values())
    path = tmp_path / "profile.json"
    path.write_text(
        json.dumps({"current_avg_score": 60, "topics": [{"name": "vectors", "proficiency": 0.4}]})
    )
    assert load_profile(path) == {"vectors": 0.4}


def _session(**config):
    return TutorSession(TutorEnvConfig(**config), _student(), 3)


async def test_moves_rewards_and_winning():
    session = _session()
    assert "matrices 0.30, vectors 0.60" in session.messages[1]["content"]
    feedback = await session.step(take_action("lesson matrices"), 0)
    assert feedback.reward == pytest.approx(10 * 0.03 * 0.7 / 2) and not feedback.done
    assert "Turns left: 2" in feedback.messages[0]["content"] and not session.won
    feedback = await session.step(f"<think>pitch it at 0.6</think>{take_action('Medium Vectors')}", 1)
    assert feedback.reward == pytest.approx(10 * (session.student.proficiency["vectors"] - 0.6) / 2)
    assert "medium vectors:" in feedback.messages[0]["content"]
    assert session.progress == pytest.approx(
        sum([0.03 * 0.7, session.student.proficiency["vectors"] - 0.6]) / 2
    )
    low = _session(success_gain=0.01)
    await low.step(take_action("lesson matrices"), 0)
    assert low.won  # a mean rise of 0.0105


@pytest.mark.parametrize(
    "reply",
    [
        take_action("dance vectors"),
        take_action("hard algebra"),  # not a topic of this student
        take_action("lesson"),
        take_action("lesson matrices") + take_action("lesson vectors"),  # two moves
        f"<think>{take_action('lesson matrices')}</think>",  # only inside the reasoning
        "lesson matrices",  # no tool call
    ],
)
async def test_invalid_moves_end_the_session(reply):
    session = _session()
    feedback = await session.step(reply, 0)
    assert feedback.done and feedback.reward == -1.0 and session.invalid_action


async def test_profile_file_and_its_errors(tiny_model_dir, tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"topics": [{"name": "vectors", "proficiency": 0.4}, {"name": "matrices"}]}))
    env = offline_env(TutorEnv, tiny_model_dir, profile_path=str(path))
    await env.setup()
    assert env.student(3).proficiency == {"vectors": 0.4, "matrices": 0.5}  # the original's default 0.5
    assert env.student(3).rng.random() == env.student(3).rng.random()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"topics": [{"name": "vectors", "proficiency": 3}]}))
    await setup_failure(
        offline_env(TutorEnv, tiny_model_dir, profile_path=str(bad)), r"bad.json: topics\[0\]"
    )
    bad.write_text(json.dumps({"score": 1}))
    await setup_failure(
        offline_env(TutorEnv, tiny_model_dir, profile_path=str(bad)), "missing field 'topics'"
    )


_LEVELS = re.compile(r"Student proficiency \(0-1\): ([^\n]*)")


def _weakest(text: str) -> str:
    shown = _LEVELS.findall(text)[-1]
    levels = {t: float(p) for t, p in (pair.split() for pair in shown.split(", "))}
    return min(levels, key=levels.get)


def tutor(spoil_every: int = 0):
    """Teaches a lesson on the weakest topic each turn; episode ``k`` (in order of arrival) makes an invalid
    move instead when ``spoil_every`` and ``k % spoil_every == 1``."""

    def act(prompt, spoiled):
        text = "\n".join(m["content"] for m in prompt) if isinstance(prompt, list) else str(prompt)
        return take_action("dance" if spoiled else f"lesson {_weakest(text)}")

    return numbered_episodes(act, spoil_every)


def test_process_writes_groups(scripted):
    args = ["--env.group_size", "2", "--env.total_steps", "2", "--env.max_num_workers", "1",
            "--env.max_turns", "3", "--env.max_tokens_per_turn", "64"]  # fmt: skip
    groups = scripted.process(TutorEnv, args, tutor(spoil_every=2))
    assert len(groups) == 2
    for group in groups:
        taught, spoiled = sorted(group["scores"], reverse=True)
        assert taught > 0 and spoiled == -1.0
        assert group["messages"][0][1]["content"].startswith("Student proficiency (0-1):")


def _lessons_progress(seed: int, turns: int) -> float:
    student = SimulatedStudent(random_profile(random.Random(f"tutor:{seed}")), random.Random(0))
    start = student.mean()
    for _ in range(turns):
        student.study(min(student.proficiency, key=student.proficiency.get))
    return student.mean() - start


def test_evaluate_reports_the_students_progress(scripted):
    evaluation = scripted.evaluation(
        TutorEnv, ["--env.eval_episodes", "3", "--env.max_turns", "3", "--env.max_tokens_per_turn", "64",
                   "--env.success_gain", "0.02"], tutor(),
    )  # fmt: skip
    metrics = evaluation.metrics
    progress = [_lessons_progress(1_000_000 + k, 3) for k in range(3)]
    assert metrics["eval/progress"] == pytest.approx(sum(progress) / 3)
    assert metrics["eval/mean_score"] == pytest.approx(10 * sum(progress) / 3)
    assert metrics["eval/percent_correct"] == pytest.approx(sum(p >= 0.02 for p in progress) / 3)
    assert metrics["eval/questions"] == 0.0 and metrics["eval/moves"] == 3.0
