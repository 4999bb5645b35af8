"""Competition math in the Open-Reasoner-Zero prompt form: a plain-text completion, no chat template.

The prompt is a transcript of a conversation between a User and an Assistant that thinks inside
``<think> </think>`` and answers inside ``<answer> </answer>`` with the final result boxed; it ends with
``Assistant: <think>``, so the model continues its own reasoning. Generation stops at ``User:``,
``Human:``, ``Assistant:`` or ``</answer>``.

Data, answer checking, rewards and evaluation are those of :mod:`math_server` (``MathEnv``: DeepMath-103K
for training, MATH-500 / AIME 2024 / AMC 2023 for evaluation reported per set, local MATH-500 rows with
``--env.dataset_path``; +1 when the answer equals the gold answer by ``math_verify`` in worker processes
with a per-check time limit, -1 otherwise; uniform groups dropped). Only the answer's place differs: the
reply (after the prompt's opening ``<think>``) must close its reasoning, then give one ``<answer>``
block (its closing tag may be cut off by the stop string) holding the ``\\boxed{}`` answer. An answer only
in the reasoning, outside the answer block, unboxed, or several different boxed values score -1.

``--env.start_tok_length N`` grows the generation budget linearly from N tokens at step 0 to
``max_token_length`` at ``total_steps``.

``python environments/math_server_zero.py {serve,process,evaluate} --openai.base_url ... --openai.model_name ...``
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.base import EvalHandlingEnum
from atroposlib.utils.math_checking import reply_answers
from atroposlib.utils.replies import THINK_OPEN, answer_section, boxed_answers

try:
    from environments.math_server import MathEnv as ChatMathEnv
    from environments.math_server import MathEnvConfig, MathItem
except (
    ModuleNotFoundError
):  # run as a script: this file's folder is on the path, the repository root may not be
    from math_server import MathEnv as ChatMathEnv
    from math_server import MathEnvConfig, MathItem

DEFAULT_MODEL = "Qwen/Qwen3-4B-Instruct-2507"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
#: Where a completion stops: the next turn of the transcript, or the end of the answer block.
STOP_STRINGS = ["User:", "Human:", "Assistant:", ANSWER_CLOSE]

prompt_template = (
    "This is a conversation between a User and an Assistant. The User poses a problem and the Assistant "
    "solves it. Before answering, the Assistant reasons the problem through in its head; then it tells the "
    "User the answer. The reasoning goes inside <think> </think> tags and the answer inside <answer> "
    "</answer> tags, like this: <think> reasoning goes here </think> <answer> answer goes here </answer>. "
    "User: {question}\nAssistant: <think>"
)

question_template = (
    "Write your answer inside <answer> </answer> tags, with the final result in the form \\boxed{{...}} "
    "inside them: only the boxed result is read.\nProblem:\n{problem}\n"
)


def zero_prompt(problem: str) -> str:
    """The completion prompt of a problem (ends with ``Assistant: <think>``)."""
    return prompt_template.format(question=question_template.format(problem=problem))


def zero_reply_answers(reply: str) -> Optional[list[str]]:
    """The distinct boxed answers of a completion that continues the prompt's ``<think>``, or None.

    The reasoning must close, be followed by exactly one ``<answer>`` (a missing ``</answer>`` is the
    stop string's cut), and the answer block must box an answer. Boxes outside the block count too, so
    a different value boxed elsewhere is a hedge.
    """
    section = answer_section(THINK_OPEN + reply)
    if section is None or section.count(ANSWER_OPEN) != 1 or section.count(ANSWER_CLOSE) > 1:
        return None
    before, block = section.split(ANSWER_OPEN, 1)
    if ANSWER_CLOSE in before:
        return None
    if not any(boxed_answers(block.split(ANSWER_CLOSE, 1)[0])):
        return None
    return reply_answers(section)


class MathZeroEnvConfig(MathEnvConfig):
    """MathEnvConfig plus the generation-budget curriculum."""

    start_tok_length: Optional[int] = Field(
        None,
        ge=1,
        description="generation budget in tokens at step 0, growing linearly to max_token_length at "
        "total_steps (unset: max_token_length from the start)",
    )


class MathZeroEnv(ChatMathEnv):
    """The chat :class:`math_server.MathEnv` with the Open-Reasoner-Zero completion prompt and ``<answer>`` block."""

    name = "math_zero"
    env_config_cls = MathZeroEnvConfig
    config: MathZeroEnvConfig
    default_model = DEFAULT_MODEL
    default_server_port = 9001

    @classmethod
    def default_env_config(cls) -> MathZeroEnvConfig:
        return MathZeroEnvConfig(
            group_size=8,
            total_steps=120,
            batch_size=64,
            steps_per_eval=20,
            max_token_length=8192,
            wandb_name="math-zero-env",
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.1,
            max_num_workers_per_node=24,
        )

    @property
    def generation_budget(self) -> int:
        """``max_tokens`` (or ``max_token_length``), shortened early in training by ``start_tok_length``."""
        budget = super().generation_budget
        start = self.config.start_tok_length
        if start is None or start >= budget or self.config.total_steps <= 0:
            return budget
        progress = min(1.0, max(0.0, self.curr_step / self.config.total_steps))
        return start + int((budget - start) * progress)

    def prompt_messages(self, item: MathItem) -> list[dict[str, str]]:
        """The completion prompt as one user turn (for the records; no chat template is applied)."""
        return [{"role": "user", "content": zero_prompt(item.problem)}]

    async def _sample(
        self, server: Any, item: MathItem, n: int, **sampling: Any
    ) -> tuple[list[dict], list[str]]:
        prompt = zero_prompt(item.problem)
        completion = await server.completion(prompt=prompt, n=n, stop=STOP_STRINGS, **sampling)
        return [{"role": "user", "content": prompt}], [choice.text or "" for choice in completion.choices]

    def extract_answers(self, reply: str) -> Optional[list[str]]:
        return zero_reply_answers(reply)


# The original's class names, for code that imports them.
MathEnv = MathZeroEnv
RSConfig = MathZeroEnvConfig


if __name__ == "__main__":
    MathZeroEnv.cli()
