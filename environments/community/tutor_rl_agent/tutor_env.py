"""Tutoring: the model tutors a simulated student over several turns, rewarded by the student's progress.

Each game (``{"seed": n}``) is a student (``student.py``): a profile of topic proficiencies (seeded, or the
original's JSON profile with ``--env.profile_path``) and seeded answers. Each turn shows the proficiencies,
the questions asked so far and how they were answered, and the turns left; the tutor makes one move through
the ``take_action`` tool (``--env.action_format tag`` for ``<action>...</action>``): a question
``easy|medium|hard <topic>`` (the student answers and learns, most from a question pitched at its level) or
``lesson <topic>`` (steady learning, more on a weak topic). After an optional ``<think>`` block that never
counts; an unknown move or topic, several moves or none ends the game with ``invalid_action_penalty`` (-1).

Reward per move: ``progress_scale`` (10) x the rise of the student's mean proficiency, so the return is the
whole session's progress; a game counts as won when the mean rose by ``success_gain`` (0.08) or more.
Logged: ``train/won``, ``train/progress``, ``train/questions``, ``train/student_accuracy``; evaluate plays
``eval_episodes`` students.

``python environments/community/tutor_rl_agent/tutor_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import random
from typing import Optional

from pydantic import Field

from atroposlib.envs.episodes import Episode
from atroposlib.envs.games import GameEnv, GameEnvConfig, GameSession, InvalidAction, action_tool_schema

try:
    from environments.community.tutor_rl_agent import student as sim
except ModuleNotFoundError:  # run as a script: this folder is on the path
    import student as sim

RULES = (
    "You are a tutor teaching a student linear algebra. Each turn, make one move: ask a question with "
    "'easy <topic>', 'medium <topic>' or 'hard <topic>', or teach a lesson with 'lesson <topic>'. The student "
    "learns most from questions pitched at their level, and lessons help most on weak topics. Your goal is "
    "the student's overall progress by the end of the session. You may think inside <think> </think> tags "
    "first."
)


class TutorEnvConfig(GameEnvConfig):
    """GameEnvConfig plus the session length, the student and the reward scale."""

    max_turns: int = Field(10, ge=1, description="tutor moves per session")
    profile_path: Optional[str] = Field(None, description="a student profile JSON (default: seeded profiles)")
    progress_scale: float = Field(10.0, gt=0.0, description="reward per unit of mean proficiency gained")
    success_gain: float = Field(0.08, ge=0.0, description="mean proficiency gain that wins a session")
    question_gain: float = Field(0.05, ge=0.0, description="proficiency a perfectly pitched question adds")
    lesson_gain: float = Field(0.03, ge=0.0, description="share of the remaining proficiency a lesson adds")


class TutorSession(GameSession):
    """One tutoring session: the student, the moves and the progress so far."""

    def __init__(self, config: TutorEnvConfig, student: sim.SimulatedStudent, turns: int):
        super().__init__(config.action_format, config.invalid_action_penalty)
        self.config = config
        self.student = student
        self.turns = turns
        self.start = student.mean()
        topics = sorted(student.proficiency)
        choices = [f"{kind} {t}" for t in topics for kind in (*sim.LEVELS, "lesson")]
        schema = action_tool_schema("action", "one move: easy/medium/hard/lesson and a topic", choices)
        self.open(f"{RULES}\nTopics: {', '.join(topics)}.", schema, f"medium {topics[0]}", self.observation())

    @property
    def progress(self) -> float:
        """The rise of the student's mean proficiency since the session began."""
        return self.student.mean() - self.start

    def observation(self) -> str:
        levels = ", ".join(f"{t} {p:.2f}" for t, p in sorted(self.student.proficiency.items()))
        asked = [f"{d} {t}: {'right' if c else 'wrong'}" for t, d, c in self.student.history[-5:]]
        accuracy = self.student.accuracy()
        return (
            f"Student proficiency (0-1): {levels}\n"
            f"Questions so far: {len(self.student.history)}"
            + (f" (accuracy {accuracy:.2f})" if accuracy is not None else "")
            + (f"\nLast answers: {'; '.join(asked)}" if asked else "")
            + f"\nTurns left: {self.turns - len(self.moves)}"
        )

    def parse_move(self, text: str) -> tuple[str, str]:
        words = text.lower().replace("_", " ").split()
        kind, topic = (words[0], "_".join(words[1:])) if len(words) >= 2 else ("", "")
        if kind not in (*sim.LEVELS, "lesson") or topic not in self.student.proficiency:
            raise InvalidAction(
                f"{text!r} is not 'easy|medium|hard|lesson <topic>' with a topic of this student"
            )
        return kind, topic

    async def apply(self, move: tuple[str, str]) -> tuple[float, bool, str]:
        before = self.student.mean()
        kind, topic = move
        if kind == "lesson":
            self.student.study(topic)
        else:
            self.student.answer(topic, kind)
        self.won = self.progress >= self.config.success_gain
        return self.config.progress_scale * (self.student.mean() - before), False, self.observation()


class TutorEnv(GameEnv):
    """A tutor rewarded by its simulated student's progress (see the module docstring)."""

    name = "tutor_env"
    env_config_cls = TutorEnvConfig
    config: TutorEnvConfig

    def __init__(self, config: TutorEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.profile: Optional[dict[str, float]] = None

    async def setup(self) -> None:
        await super().setup()
        if self.config.profile_path:
            self.profile = sim.load_profile(self.config.profile_path)

    def student(self, seed: int) -> sim.SimulatedStudent:
        """The student of game ``seed``: its profile and seeded answers."""
        profile = dict(self.profile) if self.profile else sim.random_profile(random.Random(f"tutor:{seed}"))
        rng = random.Random(f"tutor-answers:{seed}")
        return sim.SimulatedStudent(profile, rng, self.config.question_gain, self.config.lesson_gain)

    async def make_session(self, seed: int) -> TutorSession:
        return TutorSession(self.config, self.student(seed), self.config.max_turns)

    def episode_metrics(self, session: TutorSession, episode: Episode) -> dict[str, float]:
        accuracy = session.student.accuracy()
        return {
            **session.metrics(),
            "progress": session.progress,
            "questions": float(len(session.student.history)),
            "student_accuracy": accuracy if accuracy is not None else 0.0,
        }


if __name__ == "__main__":
    TutorEnv.cli()
