"""ExamCraft: the model is an adaptive teacher of a simulated student, rewarded by what the student learns.

The student (the original's profile JSON, ``--env.profile_path``: ``example_profile.json``, the original's
default student, four maths topics) answers and learns as the tutoring environment's simulated student
(``environments/community/tutor_rl_agent/student.py``): a question of difficulty easy / medium / hard is
answered right with probability ``proficiency + 0.3 / 0 / -0.2`` (0.1-0.9) and teaches most when its level
(0.3 / 0.6 / 0.9) matches the proficiency (``2 x student_learning_rate`` at best, half after a wrong answer);
an explanation teaches ``student_learning_rate x (1 - proficiency)``. Each game (``{"seed": n}``) draws the
student's answers from its own seed.

Each turn the teacher sees the proficiencies, recent answers and what is left, and replies with one JSON
object (``teacher_actions.py``; after an optional ``<think>`` block that never counts): a ``QUESTION`` (four
different options and the correct letter), an ``EXPLANATION`` of a topic or, when ``enable_lesson_plans``,
a ``LESSON_PLAN`` whose ``prioritized_topics`` ends the session. The session ends after
``max_questions_per_episode`` (8) questions or ``max_turns`` (12) replies.

Reward per move: ``progress_scale`` (10) x the rise of the student's mean proficiency; a lesson plan earns
``plan_weight`` (0.5) x the share of the student's weak topics (proficiency under 0.5; at least the weakest)
it lists first. A reply that is not one valid move (prose around the JSON, two objects, the object only in
the reasoning, three options, two equal options, an unknown topic or letter) ends the session at
``invalid_action_penalty`` (-1). Length, keywords and fields the checks do not read earn nothing. A session
is won when the mean proficiency rose by ``success_gain`` (0.05). Logged: ``train/won``, ``train/progress``,
``train/questions``, ``train/student_accuracy``, ``train/invalid_action``; evaluate plays ``eval_episodes``.

``python environments/community/examcraft/examcraft_server.py {serve,process,evaluate}``
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any, ClassVar, Optional

from pydantic import Field

# Run as a script, the repository root is not on the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from atroposlib.envs.data_loading import DatasetError  # noqa: E402
from atroposlib.envs.declared_defaults import DeclaredDefaults  # noqa: E402
from atroposlib.envs.episodes import Episode, Feedback  # noqa: E402
from atroposlib.envs.games import InvalidAction, SeededGames  # noqa: E402
from atroposlib.envs.multi_turn import MultiTurnEnv, MultiTurnEnvConfig  # noqa: E402
from environments.community.examcraft import teacher_actions as actions  # noqa: E402
from environments.community.examcraft.prompts import observation, system_prompt  # noqa: E402
from environments.community.tutor_rl_agent import student as sim  # noqa: E402

DEFAULT_PROFILE = "example_profile.json"


class ExamCraftConfig(MultiTurnEnvConfig):
    """MultiTurnEnvConfig plus the student, the session and the reward."""

    ignored_original_keys: ClassVar[dict[str, str]] = {
        "difficulty_adaptation_rate": "the original defined it without reading it"
    }

    profile_path: str = Field(DEFAULT_PROFILE, description="the student profile JSON (topics, proficiencies)")
    max_questions_per_episode: int = Field(8, ge=1, description="questions that end a session")
    student_learning_rate: float = Field(0.03, ge=0.0, description="what an explanation teaches at best")
    enable_lesson_plans: bool = Field(
        True, description="whether a LESSON_PLAN (ending the session) is a move"
    )
    max_turns: int = Field(12, ge=1, description="teacher replies per session")
    progress_scale: float = Field(10.0, gt=0.0, description="reward per unit of mean proficiency gained")
    plan_weight: float = Field(
        0.5, ge=0.0, description="reward of a lesson plan listing the weak topics first"
    )
    success_gain: float = Field(0.05, ge=0.0, description="mean proficiency gain that wins a session")
    invalid_action_penalty: float = Field(-1.0, description="reward of a reply without one valid move")
    seed: int = Field(0, description="seed of the first training session (session k uses seed + k)")
    eval_seed: int = Field(1_000_000, description="seed of the first evaluation session")
    eval_episodes: int = Field(20, ge=1, description="evaluation sessions")


def load_student(path: str) -> dict[str, Any]:
    """The profile JSON at ``path`` (the shipped default when ``path`` is the default name and no such file
    is in the working directory): its fields, ``proficiency`` (lower-cased topic to 0-1) added."""
    file = Path(path)
    if not file.exists() and path == DEFAULT_PROFILE:
        file = Path(__file__).with_name(DEFAULT_PROFILE)
    if not file.exists():
        raise DatasetError(f"{path}: no such student profile")
    # load_profile checks the file first, so a malformed one stops with its one-line error.
    proficiency = {name.lower(): value for name, value in sim.load_profile(file).items()}
    profile = json.loads(file.read_text(encoding="utf-8"))
    return {**profile, "proficiency": proficiency}


class ExamCraftSession:
    """One teaching session: the student, the moves and the progress so far."""

    def __init__(self, config: ExamCraftConfig, profile: dict[str, Any], student: sim.SimulatedStudent):
        self.config = config
        self.student = student
        self.start = student.mean()
        self.questions = 0
        self.moves: list[str] = []
        self.won = False
        self.invalid_action: Optional[str] = None
        self.messages = [
            {"role": "system", "content": system_prompt(profile, config.enable_lesson_plans)},
            {"role": "user", "content": self.observation()},
        ]

    @property
    def progress(self) -> float:
        """The rise of the student's mean proficiency since the session began."""
        return self.student.mean() - self.start

    def observation(self) -> str:
        return observation(self.student, self.config.max_questions_per_episode - self.questions)

    def _plan_score(self, plan: tuple[str, ...]) -> float:
        ranked = sorted(self.student.proficiency, key=self.student.proficiency.get)
        weak = [t for t in ranked if self.student.proficiency[t] < 0.5] or ranked[:1]
        return len(set(plan[: len(weak)]) & set(weak)) / len(weak)

    async def step(self, reply: str, turn: int) -> Feedback:
        try:
            move = actions.read_action(reply, self.student.proficiency, self.config.enable_lesson_plans)
        except InvalidAction as exc:
            self.invalid_action = str(exc)
            return Feedback(
                done=True, reward=self.config.invalid_action_penalty, info={"invalid_action": str(exc)}
            )
        self.moves.append(move.kind)
        if move.kind == "LESSON_PLAN":
            return Feedback(done=True, reward=self.config.plan_weight * self._plan_score(move.plan))
        before = self.student.mean()
        if move.kind == "QUESTION":
            self.student.answer(move.topic, move.difficulty)
            self.questions += 1
        else:
            self.student.study(move.topic)
        self.won = self.progress >= self.config.success_gain
        done = self.questions >= self.config.max_questions_per_episode
        reward = self.config.progress_scale * (self.student.mean() - before)
        return Feedback(messages=[{"role": "user", "content": self.observation()}], done=done, reward=reward)


class ExamCraftEnv(DeclaredDefaults, SeededGames, MultiTurnEnv):
    """An adaptive teacher rewarded by its simulated student's progress (see the module docstring)."""

    name = "examcraft"
    env_config_cls = ExamCraftConfig
    config: ExamCraftConfig
    default_model = "NousResearch/Hermes-3-Llama-3.1-8B"
    default_env_values = {
        "group_size": 6,
        "total_steps": 150,
        "batch_size": 12,
        "steps_per_eval": 30,
        "max_token_length": 3072,
        "wandb_name": "examcraft-adaptive-teacher",
    }

    async def setup(self) -> None:
        self.iter = 0
        self.profile = load_student(self.config.profile_path)

    def student(self, seed: int) -> sim.SimulatedStudent:
        """The student of session ``seed``: the profile's proficiencies and seeded answers."""
        cfg = self.config
        rng = random.Random(f"examcraft:{seed}")
        lr = cfg.student_learning_rate
        return sim.SimulatedStudent(
            dict(self.profile["proficiency"]), rng, question_gain=2 * lr, lesson_gain=lr
        )

    async def new_session(self, item: dict[str, int], *, evaluation: bool = False) -> ExamCraftSession:
        return ExamCraftSession(self.config, self.profile, self.student(int(item["seed"])))

    def episode_metrics(self, session: ExamCraftSession, episode: Episode) -> dict[str, float]:
        accuracy = session.student.accuracy()
        return {
            "won": float(session.won),
            "invalid_action": float(session.invalid_action is not None),
            "progress": session.progress,
            "questions": float(session.questions),
            "student_accuracy": accuracy if accuracy is not None else 0.0,
        }

    def episode_correct(self, session: ExamCraftSession, episode: Episode, score: float) -> bool:
        return session.won

    def eval_sample_fields(self, item: Any, session: ExamCraftSession, episode: Episode) -> dict[str, Any]:
        return {"seed": item["seed"], "moves": session.moves, "invalid_action": session.invalid_action}


if __name__ == "__main__":
    ExamCraftEnv.cli()
