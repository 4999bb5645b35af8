"""InfiniteMath: endless procedurally generated math problems with a difficulty curriculum.

Problems come from the ``mathgenerator`` package (126 generators: arithmetic up to complex numbers, matrices,
calculus and number bases), grouped into seven levels (``curriculum.py``). Training starts at
``starting_level`` and moves up a level once the last ``min_evaluations`` answers at the current level reach
``progress_threshold`` accuracy; every evaluation answers the current level's held-out problems greedily and
may promote too. The curriculum (level and answer history) is saved with checkpoints.

The assistant turn starts with ``<think>`` (prefilled, not trained). Reward per reply:
``correct_reward`` (1.0) when the one ``\\boxed{}`` answer after the reasoning equals the generator's solution
(the same text once LaTeX commands, ``$``, commas, spaces and case are dropped, or the same value by
``math_verify``: ``0.75`` = ``\\frac{3}{4}``), else ``incorrect_reward`` (-0.5; also for an unboxed answer,
different boxed answers or a reasoning block left open); plus ``think_block_bonus`` for non-empty reasoning
and ``boxed_answer_bonus`` for a boxed answer after it. With ``apply_length_penalty``, when a whole group is
right, replies longer than ``length_threshold_ratio`` of the budget lose up to the full reward linearly.

No data set: ``--env.seed`` fixes the training problems and ``eval_seed`` the evaluation problems
(``eval_problems_per_level`` per level).

``python environments/infinimath/infinimath_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.math_checking import DEFAULT_TIMEOUT_S, MathChecker, reply_answers

try:
    from environments.infinimath.curriculum import DIFFICULTY_LEVELS, MathCurriculum, level_of
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from curriculum import DIFFICULTY_LEVELS, MathCurriculum, level_of

PREFILL = "\n<think>\n"
SYSTEM_PROMPT = (
    "You are an expert mathematician. You may think at length before answering: put your reasoning inside "
    "<think> </think> tags, then give your final answer in LaTeX as \\boxed{your answer here}.\n\n"
    "Problems are written in LaTeX; follow its syntax in your answer (no $ delimiters are needed). "
    "Work carefully: understand the problem, plan, calculate step by step, check the result, and box it. "
    "Do not round: be as exact as possible.\n\n"
    "Your answer format should be:\n<think>\n[your step-by-step reasoning]\n</think>\n\n\\boxed{your final answer}"
)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_DOLLARS = re.compile(r"\$(.*?)\$", re.DOTALL)


@dataclass(frozen=True)
class Problem:
    """A generated problem: its text, the generator's solution, the generator and its level."""

    problem: str
    solution: str
    generator_id: int
    level: int


def strip_latex_delimiters(text: str) -> str:
    """``text`` with its ``$...$`` delimiters removed (their content kept)."""
    return _DOLLARS.sub(r"\1", text)


def clean_for_comparison(text: str) -> str:
    """The original's text comparison form: LaTeX commands, ``$``, commas and whitespace dropped, lower case."""
    return re.sub(r"[,\s$]", "", re.sub(r"\\[a-zA-Z]+", "", text)).lower()


class InfiniteMathEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the original's curriculum and reward settings."""

    starting_level: int = Field(1, ge=1, le=7, description="curriculum level training starts at")
    progress_threshold: float = Field(
        0.8, ge=0.0, le=1.0, description="recent accuracy that promotes a level"
    )
    min_evaluations: int = Field(5, ge=1, description="answers at a level before promotion is considered")
    max_attempts_per_problem: int = Field(3, ge=1, description="generators tried before a level gives up")
    correct_reward: float = Field(1.0, description="reward of a right answer")
    incorrect_reward: float = Field(-1.0, description="reward of a wrong, missing or hedged answer")
    think_block_bonus: float = Field(0.2, description="added for a non-empty <think> block")
    boxed_answer_bonus: float = Field(0.2, description="added for a boxed answer after the reasoning")
    apply_length_penalty: bool = Field(True, description="all-right groups: long replies score lower")
    length_threshold_ratio: float = Field(
        0.5, gt=0.0, le=1.0, description="share of the budget without penalty"
    )
    seed: int = Field(0, description="seed of the training problems")
    eval_seed: int = Field(1234, description="seed of the evaluation problems")
    eval_problems_per_level: int = Field(10, ge=1, description="evaluation problems generated per level")
    check_timeout_s: float = Field(
        DEFAULT_TIMEOUT_S, gt=0, description="seconds one math_verify check may run"
    )
    word_problem_model_name: Optional[str] = Field(
        "gpt-4.1-mini",
        description="accepted for compatibility: problems are never rewritten (as in the original)",
    )
    word_problem_openai_api_key: Optional[str] = Field(
        None, description="accepted for compatibility (unused)"
    )
    word_problem_openai_base_url: Optional[str] = Field(
        None, description="accepted for compatibility (unused)"
    )


class InfiniteMathEnv(LocalServerDefaults, SingleTurnEnv):
    """Generated math with a level curriculum (see the module docstring)."""

    name = "infinimath"
    env_config_cls = InfiniteMathEnvConfig
    config: InfiniteMathEnvConfig
    default_model = "NousResearch/Nous-Hermes-2-Yi-34B"
    default_server_port = 9004
    default_server_settings = {"num_requests_for_eval": 64}

    def __init__(self, config: InfiniteMathEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.curriculum = self._curriculum(config.starting_level, random.Random(config.seed))
        self.eval_problems: dict[int, list[Problem]] = {}
        self.level_correct_buffer: dict[int, list[float]] = {level: [] for level in DIFFICULTY_LEVELS}
        self.checker = MathChecker(timeout_s=config.check_timeout_s)

    def _curriculum(self, level: int, rng: random.Random) -> MathCurriculum:
        cfg = self.config
        return MathCurriculum(
            level, cfg.progress_threshold, cfg.min_evaluations, cfg.max_attempts_per_problem, rng
        )

    @classmethod
    def default_env_config(cls) -> InfiniteMathEnvConfig:
        return InfiniteMathEnvConfig(
            group_size=8,
            max_num_workers=64,
            total_steps=10000,
            batch_size=1024,
            steps_per_eval=25,
            max_token_length=4096,
            min_evaluations=10,
            incorrect_reward=-0.5,
            length_threshold_ratio=0.6,
            temperature=0.7,
            top_p=0.9,
        )

    # -- problems ---------------------------------------------------------------------------------------
    def _problem(self, curriculum: MathCurriculum, level: Optional[int] = None) -> Problem:
        problem, solution, generator_id = curriculum.get_problem(level)
        return Problem(
            strip_latex_delimiters(problem),
            strip_latex_delimiters(solution),
            generator_id,
            level_of(generator_id) or curriculum.current_level,
        )

    async def setup(self) -> None:
        try:
            import mathgenerator  # noqa: F401
        except ModuleNotFoundError:
            raise RuntimeError(
                "infinimath needs the mathgenerator package: pip install 'atroposlib[gym]' (or mathgenerator)"
            ) from None
        rng = random.Random(self.config.eval_seed)
        generator = self._curriculum(1, rng)
        self.eval_problems = {
            level: [self._problem(generator, level) for _ in range(self.config.eval_problems_per_level)]
            for level in DIFFICULTY_LEVELS
        }

    async def get_next_item(self) -> Problem:
        self.iter += 1
        return self._problem(self.curriculum)

    def eval_items(self) -> list[Problem]:
        return self.eval_problems.get(self.curriculum.current_level, [])

    # -- task -------------------------------------------------------------------------------------------
    def prompt_messages(self, item: Problem) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item.problem}]

    def prefill(self, item: Problem) -> str:
        return PREFILL

    async def is_correct(self, reply: str, solution: str) -> bool:
        """Whether the one boxed answer after the reasoning is ``solution`` (see the module docstring)."""
        answers = reply_answers(reply)
        if answers is None:
            return False
        if all(clean_for_comparison(a) == clean_for_comparison(solution) for a in answers):
            return True
        return await self.checker.matches_all(solution, answers)

    def reply_score(self, reply: str, correct: bool) -> float:
        """The reward of a reply whose correctness is known: the base reward plus the format bonuses."""
        cfg = self.config
        score = cfg.correct_reward if correct else cfg.incorrect_reward
        think = _THINK.search(reply)
        if think and think.group(1).strip():
            score += cfg.think_block_bonus
        if reply_answers(reply) is not None:
            score += cfg.boxed_answer_bonus
        return score

    async def score_replies_async(self, replies: Sequence[str], item: Problem) -> list[float]:
        """A training group's rewards; its answers count for the curriculum, which may then promote."""
        verdicts = [await self.is_correct(reply, item.solution) for reply in replies]
        scores = [self.reply_score(reply, right) for reply, right in zip(replies, verdicts, strict=True)]
        if self.config.apply_length_penalty and len(replies) > 1 and all(verdicts):
            scores = self._length_penalised(replies, scores)
        for right in verdicts:
            self.curriculum.record_performance(item.generator_id, right)
            self.level_correct_buffer[item.level].append(1.0 if right else 0.0)
        self.curriculum.advance_difficulty()
        return scores

    def _length_penalised(self, replies: Sequence[str], scores: list[float]) -> list[float]:
        budget = self.generation_budget
        threshold = budget * self.config.length_threshold_ratio
        penalised = []
        for reply, score in zip(replies, scores, strict=True):
            length = len(self.tokenizer.encode(reply, add_special_tokens=False))
            over = (
                0.0 if length <= threshold else min((length - threshold) / max(1.0, budget - threshold), 1.0)
            )
            penalised.append(score - over * self.config.correct_reward)
        return penalised

    # -- evaluation -------------------------------------------------------------------------------------
    async def _eval_one(self, item: Problem, sem) -> dict[str, Any]:
        messages, reply = await self.sample_eval_reply(item, sem)
        correct = await self.is_correct(reply, item.solution)  # the reply starts with the prefilled <think>
        return {
            "messages": [*messages, {"role": "assistant", "content": reply}],
            "problem": item.problem,
            "solution": item.solution,
            "generator_id": item.generator_id,
            "level": item.level,
            "score": self.reply_score(reply, correct),
            "correct": correct,
        }

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """The current level's accuracy; the answers then count for the curriculum, which may promote."""
        level = self.curriculum.current_level
        for sample in samples:
            self.curriculum.record_performance(sample["generator_id"], sample["correct"])
        advanced = self.curriculum.advance_difficulty()
        return {
            f"eval/level_{level}_accuracy": mean([1.0 if s["correct"] else 0.0 for s in samples]),
            "eval/current_level": float(level),
            "eval/advanced_level": 1.0 if advanced else 0.0,
        }

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        metrics = dict(wandb_metrics or {})
        for level, buffer in self.level_correct_buffer.items():
            if buffer:
                metrics[f"train/level_{level}_correct"] = mean(buffer)
                metrics[f"train/level_{level}_count"] = len(buffer)
            self.level_correct_buffer[level] = []
        level = self.curriculum.current_level
        metrics["curriculum/current_level"] = level
        metrics["curriculum/max_level"] = max(DIFFICULTY_LEVELS)
        metrics["curriculum/progress_percent"] = level / max(DIFFICULTY_LEVELS) * 100
        rate = self.curriculum.get_success_rate(level)
        if rate is not None:
            metrics["curriculum/current_level_success_rate"] = rate
            metrics["curriculum/threshold_to_advance"] = self.curriculum.progress_threshold
            metrics["curriculum/remaining_to_threshold"] = max(0.0, self.curriculum.progress_threshold - rate)
        await super().wandb_log(metrics)

    # -- checkpoints: the base restores every saved key as an attribute, and these two are the curriculum's ----
    def save_checkpoint(self, step: int, data: Optional[dict[str, Any]] = None) -> None:
        data = dict(data or {})
        data["curriculum_level"] = self.curriculum_level
        data["performance_history"] = self.performance_history
        super().save_checkpoint(step, data)

    @property
    def curriculum_level(self) -> int:
        return self.curriculum.current_level

    @curriculum_level.setter
    def curriculum_level(self, level: int) -> None:
        self.curriculum.current_level = int(level)

    @property
    def performance_history(self) -> dict[str, list[bool]]:
        return {str(level): list(history) for level, history in self.curriculum.performance_history.items()}

    @performance_history.setter
    def performance_history(self, history: dict[str, list[bool]]) -> None:
        self.curriculum.performance_history = {int(level): list(v) for level, v in history.items()}


if __name__ == "__main__":
    InfiniteMathEnv.cli()
