"""Arena-Hard: hard user prompts, the model's answer judged against a baseline answer in both orders.

Data: the prompts ``NousResearch/arena-hard-v1-prompts`` (``uid``, ``prompt``; ``category`` or
``cluster`` when present, for the breakdown) and the baseline answers
``NousResearch/gpt-4-0314-baseline-arenahard`` (``uid``, ``answer``), both split ``train``
(``--env.eval_prompt_dataset``, ``--env.eval_baseline_dataset``, ``--env.eval_split``), joined on ``uid``.
``--env.dataset_path`` and ``--env.baseline_dataset_path`` read local files in those schemas; a prompt
without a baseline answer stops set-up with one line naming it.

Judging: Arena-Hard-Auto's pairwise prompt (system prompt, the question, assistant A's and B's answers);
the judge ends with ``[[A>>B]]``, ``[[A>B]]``, ``[[A=B]]``, ``[[B>A]]`` or ``[[B>>A]]``. Every answer is
judged twice, first shown as A and then as B, to cancel position bias; each order scores the model 1 (a
win, either strength), 0.5 (a tie) or 0, and its score is the mean over the orders the judge's reply
could be read from. A reply without a verdict is a judge failure (counted apart, never a win or a loss);
an answer whose two judgements both failed is unscored. A reply with no answer (empty, or a think block
that never closes) loses without a judge.

Reports: ``eval/win_rate`` against the baseline (with its standard error), by category when the prompts
have one, and the judge-failure counts.

``python environments/eval_environments/arena_hard_environment.py evaluate --openai.base_url ...
--openai.model_name MODEL --judge.base_url ... --judge.model_name JUDGE --judge.api_key KEY``
"""

from __future__ import annotations

import re
from typing import Optional

from pydantic import Field

from atroposlib.evals import EvalItem, HubSet, Reply, Row, RowError, Score, load_eval_rows
from atroposlib.evals.judged import JudgedEval, JudgedEvalConfig, answer_text, judged_score

JUDGE_SYSTEM = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI assistants "
    "to the user prompt displayed below. Choose the assistant that follows the user's instructions and answers "
    "the question better, considering helpfulness, relevance, accuracy, depth, creativity and level of detail. "
    "Begin with a short explanation. Do not let the order in which the responses are presented, their length "
    "or the assistants' names influence you; be as objective as possible. After your explanation, output your "
    'final verdict in exactly one of these forms: "[[A>>B]]" (A is significantly better), "[[A>B]]" (A is '
    'slightly better), "[[A=B]]" (a tie), "[[B>A]]" (B is slightly better), "[[B>>A]]" (B is significantly '
    "better)."
)
JUDGE_USER = """<|User Prompt|>
{question}

<|The Start of Assistant A's Answer|>
{answer_a}
<|The End of Assistant A's Answer|>

<|The Start of Assistant B's Answer|>
{answer_b}
<|The End of Assistant B's Answer|>"""

_VERDICT = re.compile(r"\[\[\s*(A\s*>>?\s*B|A\s*=\s*B|B\s*>>?\s*A)\s*\]\]")
#: the score of assistant A for each verdict (either strength of a win counts as one win)
VERDICT_SCORES = {"A>>B": 1.0, "A>B": 1.0, "A=B": 0.5, "B>A": 0.0, "B>>A": 0.0}


def parse_verdict(text: str) -> Optional[float]:
    """Assistant A's score from the judge's last ``[[...]]`` verdict; None when there is none or the
    verdicts it gives disagree."""
    verdicts = {re.sub(r"\s+", "", v) for v in _VERDICT.findall(text.upper())}
    scores = {VERDICT_SCORES[v] for v in verdicts}
    return scores.pop() if len(scores) == 1 else None


class ArenaHardConfig(JudgedEvalConfig):
    """Arena-Hard's settings (the original's names)."""

    thinking_mode: bool = Field(default=False, description="Reasoning mode (see EvalConfig).")
    eval_prompt_dataset: str = Field(
        default="NousResearch/arena-hard-v1-prompts", description="Hub data set of the prompts."
    )
    eval_baseline_dataset: str = Field(
        default="NousResearch/gpt-4-0314-baseline-arenahard",
        description="Hub data set of the baseline answers.",
    )
    eval_split: str = Field(default="train", description="Split of both data sets.")
    baseline_dataset_path: Optional[str] = Field(
        default=None, description="Local file of baseline answers (uid, answer) used instead of the hub."
    )
    eval_temperature: float = Field(default=0.0, ge=0.0, description="Sampling temperature.")
    eval_max_tokens: int = Field(
        default=16384, ge=0, description="Most tokens per reply; 0 = server default."
    )
    min_response_length: int = Field(default=10, ge=0, description="Shorter replies are asked again.")
    judge_model_name: str = Field(default="claude-sonnet-4-20250514", description="Model name of the judge.")
    judge_base_url: str = Field(default="https://api.anthropic.com/v1", description="Judge server.")
    judge_api_key_env: str = Field(
        default="ANTHROPIC_API_KEY", description="Variable holding the judge's key."
    )
    judge_temperature: float = Field(default=0.0, ge=0.0, description="Sampling temperature of the judge.")
    judge_max_tokens: int = Field(default=2048, ge=0, description="Judge token budget; 0 = server default.")


class ArenaHardEnv(JudgedEval):
    """Arena-Hard (see the module docstring)."""

    name = "arena_hard"
    env_config_cls = ArenaHardConfig
    config: ArenaHardConfig
    required_fields = ("uid", "prompt")
    breakdowns = ("category",)
    metric = "win_rate"

    def hub_set(self) -> HubSet:
        return HubSet(self.config.eval_prompt_dataset, self.config.eval_split)

    def load_rows(self) -> list[Row]:
        """The prompt rows; the baseline answers are read alongside, keyed by ``uid``."""
        cfg = self.config
        baselines = load_eval_rows(
            cfg.baseline_dataset_path, HubSet(cfg.eval_baseline_dataset, cfg.eval_split), ("uid", "answer")
        )
        self.baselines = {str(row.data["uid"]): str(row.data["answer"]) for row in baselines}
        return super().load_rows()

    def make_item(self, row: Row) -> EvalItem:
        uid = str(row.data["uid"])
        if uid not in self.baselines:
            raise RowError("uid", f"no baseline answer with uid {uid!r}")
        category = row.data.get("category") or row.data.get("cluster")
        return EvalItem(
            id=uid,
            prompt=str(row.data["prompt"]),
            gold=self.baselines[uid],
            groups={"category": str(category)} if category else {},
        )

    async def score(self, item: EvalItem, reply: Reply) -> Score:
        answer = answer_text(reply)
        if answer is None:
            return judged_score(0.0, [], method="no_answer")
        question = str(item.prompt)

        def messages(answer_a: str, answer_b: str) -> list[dict[str, str]]:
            user = JUDGE_USER.format(question=question, answer_a=answer_a, answer_b=answer_b)
            return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]

        comparison = await self.judge.compare(messages, answer, item.gold, parse_verdict)
        return judged_score(comparison.score, [comparison], extracted=answer)


if __name__ == "__main__":
    ArenaHardEnv.cli()
