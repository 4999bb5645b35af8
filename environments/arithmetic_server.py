"""Procedural arithmetic: "What is 37+45?" -> "82". Needs no data; sized for tiny models.

The task part (:class:`ArithmeticTask`, :func:`sft_examples`, :func:`score_completion`) is plain Python so
a trainer can warm-start a model on exactly the prompts and answer format the environment rewards:

    from environments.arithmetic_server import ArithmeticTask, score_completion, sft_examples
    for messages, answer in sft_examples(1000, seed=0):
        ...  # chat prompt (list of messages) and the assistant reply to imitate ("82")

Problems are generated deterministically from ``seed``: training problem ``i`` is always the same, and a
held-out evaluation split (``eval_size`` problems) never appears among training problems.

Answer format: the reply is the integer itself (``82``). Scoring also accepts ``\\boxed{82}`` or
``#### 82`` and otherwise reads the last integer in the reply; 1.0 if it equals the answer, else 0.0.

Run it like any environment: ``python environments/arithmetic_server.py {serve,process,evaluate} ...``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Optional

from pydantic import Field, model_validator

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.reporting import EvalReporting, IterCheckpoint
from atroposlib.type_definitions import Item

Operation = Literal["+", "-", "*"]
DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
_MAX_DRAWS = 1000

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------------
# The task (no framework dependencies)
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ArithmeticProblem:
    """One problem: ``question`` ("What is 37+45?"), its ``expression`` ("37+45") and integer ``answer``."""

    expression: str
    answer: int

    @property
    def question(self) -> str:
        return f"What is {self.expression}?"


def _evaluate(operands: Sequence[int], ops: Sequence[str]) -> int:
    # Usual precedence: products bind first, then a left-to-right sum of signed terms.
    value = operands[0]
    terms: list[int] = []
    sign = 1
    for op, operand in zip(ops, operands[1:], strict=True):
        if op == "*":
            value *= operand
        else:
            terms.append(sign * value)
            sign = 1 if op == "+" else -1
            value = operand
    terms.append(sign * value)
    return sum(terms)


class ArithmeticTask:
    """Deterministic generator of arithmetic problems with a held-out evaluation split.

    ``min_digits``/``max_digits`` bound every operand's digit count (1 digit = 0..9), ``operations`` are
    drawn uniformly between operands, ``num_operands`` >= 2. Unless ``allow_negative``, problems with a
    negative answer are redrawn. Raises ``ValueError`` for invalid settings or when the problem space is
    too small to keep ``eval_size`` problems out of training.
    """

    def __init__(
        self,
        *,
        min_digits: int = 1,
        max_digits: int = 2,
        operations: Sequence[str] = ("+", "-"),
        num_operands: int = 2,
        allow_negative: bool = False,
        seed: int = 0,
        eval_size: int = 64,
        system_prompt: Optional[str] = None,
    ) -> None:
        if not 1 <= min_digits <= max_digits:
            raise ValueError(f"need 1 <= min_digits <= max_digits, got {min_digits} and {max_digits}")
        if num_operands < 2:
            raise ValueError(f"num_operands must be >= 2, got {num_operands}")
        bad = [op for op in operations if op not in ("+", "-", "*")]
        if not operations or bad:
            raise ValueError(f"operations must be a non-empty subset of + - *, got {list(operations)}")
        if eval_size < 0:
            raise ValueError(f"eval_size must be >= 0, got {eval_size}")
        self.min_digits = min_digits
        self.max_digits = max_digits
        self.operations = tuple(operations)
        self.num_operands = num_operands
        self.allow_negative = allow_negative
        self.seed = seed
        self.system_prompt = system_prompt
        self.eval_problems: list[ArithmeticProblem] = self._draw_eval(eval_size)
        self._eval_expressions = frozenset(p.expression for p in self.eval_problems)

    # -- generation ------------------------------------------------------------------------------------
    def _operand(self, rng: random.Random) -> int:
        digits = rng.randint(self.min_digits, self.max_digits)
        low = 0 if digits == 1 else 10 ** (digits - 1)
        return rng.randint(low, 10**digits - 1)

    def _draw(self, rng: random.Random) -> ArithmeticProblem:
        for _ in range(_MAX_DRAWS):
            operands = [self._operand(rng) for _ in range(self.num_operands)]
            ops = [rng.choice(self.operations) for _ in range(self.num_operands - 1)]
            answer = _evaluate(operands, ops)
            if answer >= 0 or self.allow_negative:
                expression = "".join(f"{a}{op}" for a, op in zip(operands, ops, strict=False)) + str(
                    operands[-1]
                )
                return ArithmeticProblem(expression, answer)
        raise ValueError("could not draw a non-negative problem; set allow_negative or change operations")

    def _draw_eval(self, size: int) -> list[ArithmeticProblem]:
        problems: dict[str, ArithmeticProblem] = {}
        rng = random.Random(f"arithmetic-eval:{self.seed}")
        attempts = 0
        while len(problems) < size:
            attempts += 1
            if attempts > max(10_000, 50 * size):  # far beyond collecting every problem of a small space
                raise ValueError(
                    f"only {len(problems)} distinct problems exist for these settings, need {size}"
                )
            problem = self._draw(rng)
            problems.setdefault(problem.expression, problem)
        return list(problems.values())

    def train_problem(self, index: int) -> ArithmeticProblem:
        """Training problem number ``index`` (same for the same settings and seed; never an eval problem)."""
        rng = random.Random(f"arithmetic-train:{self.seed}:{index}")
        for _ in range(_MAX_DRAWS):
            problem = self._draw(rng)
            if problem.expression not in self._eval_expressions:
                return problem
        raise ValueError(
            "the evaluation split covers (almost) every problem; lower eval_size or raise max_digits"
        )

    def train_problems(self, start: int = 0) -> Iterator[ArithmeticProblem]:
        """Training problems ``start``, ``start+1``, ... forever."""
        index = start
        while True:
            yield self.train_problem(index)
            index += 1

    # -- chat format -----------------------------------------------------------------------------------
    def prompt_messages(self, problem: ArithmeticProblem) -> list[dict[str, str]]:
        """The chat prompt for ``problem`` (an optional system message, then the question)."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": problem.question})
        return messages

    @staticmethod
    def answer_text(problem: ArithmeticProblem) -> str:
        """The reply the environment rewards: the integer answer alone."""
        return str(problem.answer)


_BOXED = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")
_HASHES = re.compile(r"####\s*(-?\d+)")
_INTEGER = re.compile(r"-?\d+")


def extract_answer(completion: str) -> Optional[int]:
    """The integer a reply commits to: the last ``\\boxed{n}``, else the last ``#### n``, else the last integer."""
    for pattern in (_BOXED, _HASHES, _INTEGER):
        found = pattern.findall(completion or "")
        if found:
            return int(found[-1])
    return None


def score_completion(completion: str, answer: int) -> float:
    """1.0 when the reply's answer (see :func:`extract_answer`) equals ``answer``, else 0.0."""
    return 1.0 if extract_answer(completion) == answer else 0.0


def sft_examples(n: int, start: int = 0, **task_settings) -> Iterator[tuple[list[dict[str, str]], str]]:
    """Yield ``n`` supervised examples ``(prompt_messages, answer_text)`` from the training split.

    ``task_settings`` are :class:`ArithmeticTask` arguments (``seed``, ``min_digits``, ``eval_size`` ...);
    use the same values as the environment so the held-out split stays unseen.
    """
    task = ArithmeticTask(**task_settings)
    for i in range(start, start + n):
        problem = task.train_problem(i)
        yield task.prompt_messages(problem), task.answer_text(problem)


# ---------------------------------------------------------------------------------------------------------
# The environment
# ---------------------------------------------------------------------------------------------------------
class ArithmeticEnvConfig(BaseEnvConfig):
    """BaseEnvConfig plus the task's difficulty and sampling settings."""

    min_digits: int = Field(1, ge=1, le=12, description="fewest digits per operand (1 digit = 0..9)")
    max_digits: int = Field(2, ge=1, le=12, description="most digits per operand")
    operations: list[Operation] = Field(
        default_factory=lambda: ["+", "-"], description="operators to draw from"
    )
    num_operands: int = Field(2, ge=2, le=6, description="numbers per problem")
    allow_negative: bool = Field(False, description="allow problems whose answer is negative")
    seed: int = Field(0, description="seed of the problem generator (training and held-out split)")
    eval_size: int = Field(64, ge=0, description="number of held-out evaluation problems")
    system_prompt: Optional[str] = Field(None, description="optional system message before each question")
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature for training rollouts")
    eval_temperature: float = Field(0.0, ge=0.0, description="sampling temperature for evaluation")
    max_answer_tokens: int = Field(16, ge=1, description="generation budget per reply, in tokens")

    @model_validator(mode="after")
    def _digits_ordered(self) -> ArithmeticEnvConfig:
        if self.min_digits > self.max_digits:
            raise ValueError(f"min_digits ({self.min_digits}) must not exceed max_digits ({self.max_digits})")
        return self


class ArithmeticEnv(LocalServerDefaults, IterCheckpoint, EvalReporting, BaseEnv):
    """Rewards the exact integer answer to generated arithmetic questions; evaluates on a held-out split."""

    name = "arithmetic"
    env_config_cls = ArithmeticEnvConfig
    config: ArithmeticEnvConfig
    default_model = DEFAULT_MODEL
    default_server_settings = {"server_type": "vllm", "num_requests_for_eval": 64}

    def __init__(self, config: ArithmeticEnvConfig, server_configs, slurm=True, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.task = self._make_task(config)

    @staticmethod
    def _make_task(config: ArithmeticEnvConfig) -> ArithmeticTask:
        return ArithmeticTask(
            min_digits=config.min_digits,
            max_digits=config.max_digits,
            operations=config.operations,
            num_operands=config.num_operands,
            allow_negative=config.allow_negative,
            seed=config.seed,
            eval_size=config.eval_size,
            system_prompt=config.system_prompt,
        )

    @classmethod
    def default_env_config(cls) -> ArithmeticEnvConfig:
        return ArithmeticEnvConfig(
            group_size=8, total_steps=200, batch_size=64, steps_per_eval=20, max_token_length=256
        )

    @classmethod
    def config_init(cls) -> tuple[ArithmeticEnvConfig, list[APIServerConfig]]:
        """:class:`LocalServerDefaults`'s defaults with the server as a one-element list."""
        env_config, server = super().config_init()
        return env_config, [server]

    async def setup(self) -> None:
        """Nothing to load: problems are generated from ``iter``."""

    async def get_next_item(self) -> Item:
        problem = self.task.train_problem(self.iter)
        self.iter += 1
        return problem

    async def collect_trajectories(self, item: ArithmeticProblem) -> tuple[Optional[ScoredDataGroup], list]:
        messages = self.task.prompt_messages(item)
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            completion = await managed.chat_completion(
                messages=messages,
                n=self.config.group_size,
                max_tokens=self.config.max_answer_tokens,
                temperature=self.config.temperature,
            )
            nodes = managed.get_state()["nodes"]
        if len(nodes) != len(completion.choices):
            logger.warning(
                "%s: %r: %d choices but %d tracked sequences; skipping the item",
                self.name,
                item.question,
                len(completion.choices),
                len(nodes),
            )
            return None, []
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], inference_logprobs=[], messages=[])
        for choice, node in zip(completion.choices, nodes, strict=True):
            reply = choice.message.content or ""
            score = score_completion(reply, item.answer)
            group["tokens"].append(list(node.tokens))
            group["masks"].append(list(node.masked_tokens))
            group["inference_logprobs"].append(list(node.logprobs))
            group["scores"].append(score)
            group["messages"].append([*messages, {"role": "assistant", "content": reply}])
            self.percent_correct_buffer.append(score)
        return group, []

    async def _answer_eval(self, problem: ArithmeticProblem, sem: asyncio.Semaphore) -> dict:
        messages = self.task.prompt_messages(problem)
        async with sem:
            completion = await self.server.chat_completion(
                messages=messages,
                n=1,
                max_tokens=self.config.max_answer_tokens,
                temperature=self.config.eval_temperature,
                split="eval",
            )
        reply = completion.choices[0].message.content or ""
        score = score_completion(reply, problem.answer)
        return {
            "messages": [*messages, {"role": "assistant", "content": reply}],
            "question": problem.question,
            "gold_answer": str(problem.answer),
            "model_parsed": extract_answer(reply),
            "score": int(score),
            "correct": bool(score),
            "finish_reason": completion.choices[0].finish_reason,
        }

    async def evaluate(self, *args, **kwargs) -> None:
        samples, start, end = await self.run_evaluation(self._answer_eval, self.task.eval_problems)
        accuracy = sum(s["score"] for s in samples) / len(samples) if samples else 0.0
        await self.report_evaluation(
            {"eval/percent_correct": accuracy},
            samples,
            start,
            end,
            {"temperature": self.config.eval_temperature, "max_tokens": self.config.max_answer_tokens},
        )


if __name__ == "__main__":
    ArithmeticEnv.cli()
