"""The SQL query environment: executed-query scoring, the read-only database, local data, ``process`` and
``evaluate``."""

from __future__ import annotations

import pytest

from environments.community.sql_query_env.sql_executor import results_match, run_query, table_database
from environments.community.sql_query_env.sql_query_env import (
    SQLQueryEnv,
    execute_reply,
    reply_query,
    shorter_is_better,
)
from environments.community.sql_query_env.wikisql_loader import items_from_rows
from tests.environments.community.community_runs import bad_rows_error, evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure

SAMPLE = FIXTURES / "community" / "sql_query_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
ITEMS = items_from_rows(ROWS, str(SAMPLE))
ARKANSAS, COUNT_US, FRENCH_MAX, FOUNDED = ITEMS[0], ITEMS[2], ITEMS[3], ITEMS[4]


@pytest.mark.parametrize(
    ("reply", "item", "expected"),
    [
        (
            '\\boxed{SELECT "Position" FROM data WHERE "School/Club Team" = \'Arkansas\'}',
            ARKANSAS,
            (1.0, True),
        ),
        (
            "<think>Arkansas row</think>\\boxed{select position from data where \"School/Club Team\" like 'arkansas';}",
            ARKANSAS,
            (1.0, True),
        ),  # other casing, LIKE, trailing semicolon
        ('\\boxed{SELECT "Position" FROM "table" WHERE "No." = 7}', ARKANSAS, (1.0, True)),  # another route
        ("\\boxed{SELECT COUNT(*) FROM data WHERE \"Nationality\" = 'United States'}", COUNT_US, (1.0, True)),
        ("\\boxed{SELECT 4}", COUNT_US, (1.0, True)),  # the same result set
        (
            "\\boxed{SELECT Population FROM data WHERE Country = 'France' ORDER BY Population DESC LIMIT 1}",
            FRENCH_MAX,
            (1.0, True),
        ),  # 522250 = 522250.0
        (
            "\\boxed{SELECT City FROM data WHERE Founded < 500 ORDER BY City}",
            FOUNDED,
            (1.0, True),
        ),  # row order
        ("\\boxed{SELECT City FROM data WHERE Founded < 100}", FOUNDED, (-1.0, True)),  # wrong rows
        (
            '\\boxed{SELECT "Player" FROM data WHERE "School/Club Team" = \'Arkansas\'}',
            ARKANSAS,
            (-1.0, True),
        ),
        ("\\boxed{SELECT Position FROM players}", ARKANSAS, (-1.0, False)),  # no such table
        ("\\boxed{SELEC Position FROM data}", ARKANSAS, (-1.0, False)),  # syntax error
        ("\\boxed{SELECT 'Guard'} or \\boxed{SELECT 'Center'}", ARKANSAS, (-1.0, False)),  # hedged
        ('SELECT "Position" FROM data WHERE "School/Club Team" = \'Arkansas\'', ARKANSAS, (-1.0, False)),
        ("<think>\\boxed{SELECT 'Guard'}</think>", ARKANSAS, (-1.0, False)),  # only inside the reasoning
        ("\\boxed{}", ARKANSAS, (-1.0, False)),
        ("", ARKANSAS, (-1.0, False)),
    ],
)
def test_scoring(reply, item, expected):
    assert execute_reply(reply, item) == expected


@pytest.mark.parametrize(
    "query",
    [
        "DELETE FROM data",
        "UPDATE data SET \"Player\" = 'x'",
        "DROP TABLE data",
        "ATTACH DATABASE '/tmp/sql_env_attack.db' AS other",
        "PRAGMA table_info(data)",
        "SELECT 1; DELETE FROM data",
        "CREATE TABLE t (x)",
    ],
)
def test_queries_cannot_change_anything(query, tmp_path):
    conn = table_database(ARKANSAS.header, ARKANSAS.rows, ARKANSAS.types)
    assert run_query(conn, query) is None
    assert len(run_query(conn, "SELECT * FROM data")) == 5
    assert execute_reply(f"\\boxed{{{query}}}", ARKANSAS) == (-1.0, False)


def test_runaway_queries_are_stopped():
    conn = table_database(ARKANSAS.header, ARKANSAS.rows, ARKANSAS.types)
    forever = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    assert run_query(conn, forever, time_limit=0.2) is None
    many = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50) SELECT i FROM n"
    assert run_query(conn, many, max_rows=10) is None and len(run_query(conn, many)) == 50


def test_results_compare_as_sets_of_values():
    assert results_match([(1, "A")], [("1.0", " a ")])
    assert results_match([(1,), (2,)], [(2,), (1,)])
    assert not results_match([(1,), (1,)], [(1,)])  # duplicates count
    assert not results_match([(1,)], None) and not results_match([], [(None,)])


def test_reply_query_and_length_shaping():
    assert reply_query("<think>x</think> \\boxed{SELECT 1;}") == "SELECT 1"
    assert reply_query("\\boxed{ ; }") is None
    assert shorter_is_better([10, 50, 75, 100, 200], 100) == [1.0, 1.0, 0.5, 0.0, 0.0]


def test_gold_query_from_hub_and_release_conditions():
    assert ARKANSAS.gold_params == ("Arkansas",)
    assert ARKANSAS.readable_sql == (
        'SELECT "Position" FROM data WHERE "School/Club Team" = \'Arkansas\' COLLATE NOCASE'
    )
    assert ITEMS[5].gold_params == ("Turku",)  # the release's [column, operator, value] triples
    assert COUNT_US.gold_sql.startswith('SELECT COUNT("Player") FROM data')


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "q", "sql": {"sel": 0, "agg": 0, "conds": []}}, "row 1: missing field 'table'"),
        (
            {"question": "q", "table": {"header": []}, "sql": {"sel": 0, "agg": 0}},
            "row 1: missing field 'table.header'",
        ),
        (
            {"question": "q", "table": {"header": ["a"]}, "sql": {"sel": 3, "agg": 0}},
            "row 1: field 'sql.sel' is 3",
        ),
        (
            {"question": "q", "table": {"header": ["a"]}, "sql": {"sel": 0, "agg": 9}},
            "row 1: field 'sql.agg' is 9",
        ),
        (
            {
                "question": "q",
                "table": {"header": ["a"]},
                "sql": {"sel": 0, "agg": 0, "conds": [[0, 7, "x"]]},
            },
            "row 1: field 'sql.conds' names column 0 / operator 7",
        ),
        (
            {
                "question": "q",
                "table": {"header": ["a"]},
                "sql": {"sel": 0, "agg": 0, "conds": {"column_index": [0]}},
            },
            "row 1: field 'sql.conds' needs",
        ),
    ],
)
async def test_bad_local_rows(tiny_model_dir, tmp_path, row, message):
    await bad_rows_error(SQLQueryEnv, tiny_model_dir, tmp_path, [ROWS[0], row], message)


async def test_local_split_and_release_download_offline(tiny_model_dir, tmp_path, monkeypatch):
    env = offline_env(SQLQueryEnv, tiny_model_dir, dataset_path=str(SAMPLE), test_set_size=2)
    await env.setup()
    assert len(env.test) == 2 and len(env.train) == 4
    assert {i.question for i in env.train + env.test} == {r["question"] for r in ROWS}
    prompt = env.prompt_messages(ARKANSAS)[1]["content"]
    assert '"No." REAL' in prompt and "Shawn Respert | 31" in prompt and prompt.endswith(ARKANSAS.question)
    # the default data is the WikiSQL release download, which fails here with one line saying what to do
    monkeypatch.setattr("urllib.request.urlretrieve", _no_network)
    release = offline_env(SQLQueryEnv, tiny_model_dir, wikisql_cache_dir=str(tmp_path / "cache"))
    error = await setup_failure(release, "WikiSQL .*cannot download")
    assert "--env.dataset_path" in str(error) and not (tmp_path / "cache" / "data.tar.bz2").exists()


def _no_network(*args, **kwargs):
    raise OSError("network unreachable")


GOLD = {item.question: item.readable_sql for item in ITEMS}


def _responder(wrong_every: int = 2):
    """The gold query for choices ``index % wrong_every != 1``; a query on a missing column otherwise."""

    def respond(prompt, index):
        question = prompt_text(prompt).split("Question: ", 1)[-1].split("<|im_end|>")[0].strip()
        query = GOLD[question] if index % wrong_every != 1 else 'SELECT "Missing" FROM data'
        return f"<think>Reading the table.</think>\\boxed{{{query}}}"

    return respond


def test_process_with_a_local_file(scripted):
    groups = process_local(
        scripted, SQLQueryEnv, SAMPLE, _responder(), group_size=2, total_steps=3, max_tokens=256
    )
    check_groups(groups, 3, [-1.0, 1.0])
    for group in groups:
        assert group["messages"][0][1]["content"].startswith("CREATE TABLE data (")


def test_evaluate_reports_exact_metrics(scripted):
    evaluation = evaluate_local(scripted, SQLQueryEnv, SAMPLE, _responder(), max_tokens=256)
    metrics, samples = evaluation.metrics, evaluation.samples
    assert metrics["eval/percent_correct"] == 1.0 and metrics["eval/execution_success"] == 1.0
    assert metrics["eval/mean_score"] == 1.0 and len(samples) == len(ROWS)
    assert {s["gold_sql"] for s in samples} == set(GOLD.values())
    assert all(s["generated_sql"] == s["gold_sql"] for s in samples)
    assert "sql_query evaluation: percent_correct=1.0000" in evaluation.out
