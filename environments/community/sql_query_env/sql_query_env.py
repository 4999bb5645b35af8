"""SQL query generation: answer a question about a WikiSQL table with one SQLite query in ``\\boxed{}``.

The prompt shows the table (``CREATE TABLE data (...)`` with its column types and the first
``sample_rows`` rows) and the question. The reply may reason in ``<think>...</think>``; the query is the one
``\\boxed{...}`` after it (braces may nest; a trailing ``;`` is fine).

Reward: the query and the gold query both run on the item's table in an in-memory SQLite database
(read-only, time-limited: ``sql_executor.py``); +1.0 when they return the same rows in any order (numbers
by value, text ignoring case), -1.0 otherwise: a wrong result, a query that fails or writes, no boxed query,
several different boxed queries or an empty reply. When a whole group is right, replies longer than half
the generation budget lose up to 1.0 in proportion to the excess, as in the original. ``train/percent_correct``
and ``train/execution_success`` (the share of queries that ran) are logged; evaluate reports
``eval/percent_correct``, ``eval/mean_score`` and ``eval/execution_success``.

Data: by default the WikiSQL release the original downloaded (``train`` for training, the first
``eval_limit`` questions of ``test`` for evaluation; ``wikisql_loader.py``). ``--env.dataset_path`` and
``--env.eval_dataset_path`` read local rows in the hub set's schema (``question``, ``table``, ``sql``);
without an evaluation file ``test_set_size`` rows (at most half) of the training file are held out.

``python environments/community/sql_query_env/sql_query_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.data_loading import load_rows
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.reply_fields import ReplyFields
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import final_boxed_answer

try:
    from environments.community.sql_query_env.sql_executor import results_match, run_query, table_database
    from environments.community.sql_query_env.wikisql_loader import (
        WIKISQL_DATA_URL,
        SQLItem,
        cache_dir,
        items_from_rows,
        release_rows,
    )
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from sql_executor import results_match, run_query, table_database
    from wikisql_loader import WIKISQL_DATA_URL, SQLItem, cache_dir, items_from_rows, release_rows

SYSTEM_PROMPT = (
    "You may think before answering: put your reasoning inside <think> </think> tags.\n\n"
    "You write SQLite queries. You are shown one table, always named data, and a question about it. "
    "Answer with a single SELECT statement that uses only the columns shown (quote names with spaces or "
    "symbols in double quotes), and put it in \\boxed{} at the end of your reply, for example "
    '\\boxed{SELECT "Name" FROM data WHERE "Year" = 1998}.'
)


def table_prompt(item: SQLItem, sample_rows: int) -> str:
    """The user turn: the table's schema, its first ``sample_rows`` rows and the question."""
    columns = ",\n  ".join(
        f'"{name}" {"REAL" if (item.types[i] if i < len(item.types) else "text").lower() == "real" else "TEXT"}'
        for i, name in enumerate(item.header)
    )
    lines = [f"CREATE TABLE data (\n  {columns}\n);"]
    if item.rows and sample_rows:
        lines.append("First rows:")
        lines += [" | ".join(str(v) for v in row) for row in item.rows[:sample_rows]]
    lines.append(f"\nQuestion: {item.question}")
    return "\n".join(lines)


def reply_query(reply: str) -> Optional[str]:
    """The query of a reply: its one boxed answer after the reasoning, without a trailing ``;``."""
    answer = final_boxed_answer(reply)
    if answer is None:
        return None
    query = answer.strip().rstrip(";").strip()
    return query or None


def execute_reply(reply: str, item: SQLItem, time_limit: float = 2.0) -> tuple[float, bool]:
    """``(reward, ran)``: +1.0 when the reply's query returns the gold rows, else -1.0; ``ran`` says whether
    the query executed at all."""
    query = reply_query(reply)
    if query is None:
        return -1.0, False
    conn = table_database(item.header, item.rows, item.types)
    try:
        gold = run_query(conn, item.gold_sql, item.gold_params, time_limit)
        got = run_query(conn, query, (), time_limit)
    finally:
        conn.close()
    if got is None:
        return -1.0, False
    return (1.0 if results_match(got, gold) else -1.0), True


def shorter_is_better(lengths: Sequence[int], budget: int) -> list[float]:
    """Scores of an all-correct group: 1.0 up to half the ``budget``, then down linearly to 0.0 at it."""
    threshold = budget * 0.5
    return [1.0 - min(max(n - threshold, 0) / (budget - threshold), 1.0) for n in lengths]


class SQLQueryEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the data source and the query limits."""

    dataset_path: Optional[str] = Field(None, description="local training rows (question, table, sql)")
    eval_dataset_path: Optional[str] = Field(None, description="local evaluation rows (question, table, sql)")
    test_set_size: int = Field(
        50, ge=1, description="rows of dataset_path held out when no eval file is given"
    )
    wikisql_cache_dir: Optional[str] = Field(
        None,
        description="where the WikiSQL release is unpacked (default $WIKISQL_CACHE_DIR or ~/.cache/wikisql)",
    )
    sample_rows: int = Field(3, ge=0, description="table rows shown in the prompt")
    query_time_limit: float = Field(2.0, gt=0, description="seconds a query may run")
    shuffle_seed: int = Field(0, description="seed of the training order")


class SQLQueryEnv(DeclaredDefaults, ReplyFields, SingleTurnEnv):
    """Rewards SQLite queries whose result equals the gold query's."""

    name = "sql_query"
    env_config_cls = SQLQueryEnvConfig
    config: SQLQueryEnvConfig
    default_model = "NousResearch/DeepHermes-3-Llama-3-3B-Preview"
    default_env_values = dict(
        group_size=8, total_steps=1000, batch_size=12, steps_per_eval=100, max_token_length=1024,
        eval_temperature=0.6, eval_limit=500,
    )  # fmt: skip

    def __init__(self, config: SQLQueryEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.execution_success_buffer: list[float] = []

    # -- data -------------------------------------------------------------------------------------------
    def _items(self, path: Optional[str], split: str) -> list[SQLItem]:
        directory = cache_dir(self.config.wikisql_cache_dir)
        rows = load_rows(path, lambda: release_rows(split, directory), required=[], hub_name=WIKISQL_DATA_URL)
        return items_from_rows(rows, str(path or f"WikiSQL {split}"))

    async def setup(self) -> None:
        cfg = self.config
        self.train = self._items(cfg.dataset_path, "train")
        if cfg.eval_dataset_path or not cfg.dataset_path:
            self.test = self._items(cfg.eval_dataset_path, "test")
        else:
            held_out = min(cfg.test_set_size, len(self.train) // 2)
            self.test, self.train = self.train[:held_out], self.train[held_out:] or self.train
        random.Random(cfg.shuffle_seed).shuffle(self.train)

    # -- task -------------------------------------------------------------------------------------------
    def prompt_messages(self, item: SQLItem) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": table_prompt(item, self.config.sample_rows)},
        ]

    def score_replies(self, replies: Sequence[str], item: SQLItem) -> list[float]:
        results = [execute_reply(r, item, self.config.query_time_limit) for r in replies]
        scores = [score for score, _ in results]
        if len(replies) > 1:  # a training group (evaluation scores one reply at a time)
            self.execution_success_buffer.extend(1.0 if ran else 0.0 for _, ran in results)
        if len(replies) > 1 and all(s == 1.0 for s in scores):
            lengths = [len(self.tokenizer.encode(r, add_special_tokens=False)) for r in replies]
            scores = shorter_is_better(lengths, self.generation_budget)
        return scores

    def eval_sample_fields(self, item: SQLItem) -> dict[str, Any]:
        return {"question": item.question, "gold_sql": item.readable_sql}

    def reply_fields(self, reply: str, item: SQLItem) -> dict[str, Any]:
        return {
            "generated_sql": reply_query(reply),
            "execution_success": execute_reply(reply, item, self.config.query_time_limit)[1],
        }

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        return {"eval/execution_success": mean([1.0 if s["execution_success"] else 0.0 for s in samples])}

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        if self.execution_success_buffer:
            wandb_metrics["train/execution_success"] = mean(self.execution_success_buffer)
        self.execution_success_buffer = []
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    SQLQueryEnv.cli()
