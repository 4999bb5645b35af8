"""MT-Bench: 80 two-turn conversations in 8 categories, each turn scored 1-5 by an LLM judge.

Data: ``lighteval/mt-bench`` (split ``train``): ``question_id``, ``category``, ``turns`` (the two user
turns) and ``reference`` (reference answers per turn, for math, reasoning and coding; may be empty).
``--env.categories`` keeps some categories; ``--env.dataset_path`` reads a local file in that schema.

Asking: the first user turn, then the second with the model's first reply in the conversation
(``pass_at_n_samples`` conversations per question).

Judging: each turn's reply (after its think block) is scored 1-5 against the rubric "how well does the
response answer the question", with the turn's reference answer when there is one; the second turn is
judged with the first exchange as context. The judge writes its feedback and then ``<score>N</score>``;
a reply without one integer score from 1 to 5 is a judge failure, and a conversation with a failed turn
is unscored (counted apart, ``eval/unscored``, ``eval/judge_failures``). A turn with no answer (empty, or a
think block that never closes) scores 1 without a judge.

Reports: ``eval/avg_score`` (mean of the two turns, 1-5, with its standard error),
``eval/score_turn_1``, ``eval/score_turn_2``, and the average by category.

``python environments/eval_environments/mtbench_eval.py evaluate --openai.base_url ... --openai.model_name
MODEL --judge.base_url https://api.openai.com/v1 --judge.model_name gpt-4o --judge.api_key KEY``
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from pydantic import Field

from atroposlib.evals import EvalItem, Messages, Reply, Row, RowError, Score
from atroposlib.evals.judge import Judgement
from atroposlib.evals.judged import JudgedEval, JudgedEvalConfig, answer_text, judged_score

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
JUDGE_PROMPT = """# TASK
You evaluate one output of an AI assistant against the criteria and the rubric below.

# INPUT
<inputs>
{question}
</inputs>

# OUTPUT
<output>
{answer}
</output>

# CRITERIA
<evaluation_criteria>
How well does the response answer the question?{reference}
</evaluation_criteria>

<scoring_rubric>
- Score 1: the response fails to answer the question.
- Score 2: the response barely answers the question.
- Score 3: the response partly answers the question.
- Score 4: the response mostly answers the question.
- Score 5: the response fully answers the question.
</scoring_rubric>

# HOW TO EVALUATE
Read the input and the output, compare the output with each level of the rubric, mind the small details
that separate neighbouring levels, then write your feedback with the reasons inside <feedback></feedback>
and, after it, the score as one integer inside <score></score>."""
TURN_TWO_CONTEXT = "Earlier in the conversation:\nUser: {first_turn}\nAssistant: {first_reply}\n\nThe question now:\nUser: {second_turn}"
_SCORE_TAG = re.compile(r"<score>(.*?)</score>", re.IGNORECASE | re.DOTALL)


def parse_score(text: str) -> Optional[int]:
    """The judge's score 1-5 from ``<score>N</score>``; None when there is no such tag, or the tags do not
    all hold the same one integer from 1 to 5."""
    values = {value.strip() for value in _SCORE_TAG.findall(text)}
    if len(values) != 1:
        return None
    value = values.pop()
    return int(value) if value in ("1", "2", "3", "4", "5") else None


@dataclass
class ConversationReply(Reply):
    """Both replies of one conversation: ``text`` and ``finish_reason`` are the last turn's, ``turns`` all."""

    turns: list[Reply] = field(default_factory=list)


class MTBenchEvalConfig(JudgedEvalConfig):
    """MT-Bench's settings (the original's names)."""

    dataset_name: str = Field(default="lighteval/mt-bench", description="Hugging Face data set of MT-Bench.")
    eval_split: str = Field(default="train", description="Split to evaluate on.")
    categories: Optional[list[str]] = Field(
        default=None, description="Categories to evaluate (default: all)."
    )
    judge_temperature: float = Field(default=0.2, ge=0.0, description="Sampling temperature of the judge.")
    max_eval_workers: int = Field(default=64, description="Conversations evaluated at once.")


class MTBenchEvalEnv(JudgedEval):
    """MT-Bench (see the module docstring)."""

    name = "mtbench_eval"
    env_config_cls = MTBenchEvalConfig
    config: MTBenchEvalConfig
    required_fields = ("turns",)
    breakdowns = ("category",)
    metric = "avg_score"

    def system_prompt(self) -> Optional[str]:
        """The configured prompt, else the original's "You are a helpful assistant."."""
        return super().system_prompt() or DEFAULT_SYSTEM_PROMPT

    def make_item(self, row: Row) -> Optional[EvalItem]:
        data = row.data
        turns = data["turns"]
        if not isinstance(turns, list) or len(turns) < 2 or not all(isinstance(t, str) for t in turns):
            raise RowError("turns", "must be a list of (at least) two user turns")
        category = str(data.get("category") or "unknown")
        wanted = self.config.categories
        if wanted and category.lower() not in {c.lower() for c in wanted}:
            return None
        references = data.get("reference") or []
        return EvalItem(
            id=str(data.get("question_id", row.index)),
            prompt=turns[0],
            gold=[str(r) for r in references] if isinstance(references, list) else [],
            groups={"category": category},
            fields={"turns": turns[:2]},
        )

    async def generate(self, item: EvalItem, messages: Messages, n: int) -> list[Reply]:
        """``n`` two-turn conversations: the first turn, then the second with the first reply in context."""
        first = await super().generate(item, messages, n)
        second_turn = item.fields["turns"][1]
        replies: list[Reply] = []
        for reply in first:
            history = [*messages, {"role": "assistant", "content": reply.text},
                       {"role": "user", "content": second_turn}]  # fmt: skip
            (last,) = await super().generate(item, history, 1)
            replies.append(ConversationReply(last.text, last.finish_reason, turns=[reply, last]))
        return replies

    async def _judge_turn(self, question: str, reply: Reply, reference: Optional[str]) -> Optional[Judgement]:
        answer = answer_text(reply)
        if answer is None:
            return None
        hint = f" The reference answer is:\n{reference}" if reference else ""
        prompt = JUDGE_PROMPT.format(question=question, answer=answer, reference=hint)
        return await self.judge.grade([{"role": "user", "content": prompt}], parse_score)

    async def score(self, item: EvalItem, reply: Reply) -> Score:
        turns = reply.turns if isinstance(reply, ConversationReply) else [reply]
        if len(turns) < 2:
            raise ValueError(f"item {item.id}: a two-turn reply was expected")
        first_turn, second_turn = item.fields["turns"]
        questions = [
            first_turn,
            TURN_TWO_CONTEXT.format(first_turn=first_turn, first_reply=answer_text(turns[0]) or "",
                                    second_turn=second_turn),
        ]  # fmt: skip
        references = [*item.gold, None, None][:2]
        judgements = [
            await self._judge_turn(q, r, ref)
            for q, r, ref in zip(questions, turns[:2], references, strict=True)
        ]
        scores = [1.0 if j is None else (None if j.failed else float(j.value)) for j in judgements]
        asked = [j for j in judgements if j is not None]
        fields = {"turn_replies": [t.text for t in turns], "turn_scores": scores}
        if any(s is None for s in scores):
            return judged_score(None, asked, **fields)
        metrics = {"score_turn_1": scores[0], "score_turn_2": scores[1]}
        return judged_score(
            sum(scores) / 2, asked, extracted=answer_text(turns[1]), metrics=metrics, **fields
        )


if __name__ == "__main__":
    MTBenchEvalEnv.cli()
