"""``serve`` in a subprocess against a real ``run-api`` process and the scripted inference server.

Covers: registration after the trainer starts, delivery of every good group, bad groups logged and skipped
without stopping the run, failed/timed-out items re-queued, periodic evals, SIGTERM -> /disconnect-env and a
closed JSONL, 503 backpressure (same group retried, nothing lost), shutdown while blocked (group saved
locally), an env killed with SIGKILL not disturbing the API or another env, and reconnecting after the API
restarts.
"""

from __future__ import annotations

import json
import signal

import pytest

from atroposlib.envs.serve.jsonl_sink import read_unsent_groups
from atroposlib.testing.api_process import launch_api
from atroposlib.testing.scripted_server import launch_scripted_server
from tests.helpers.sample_envs import answer_plus_one
from tests.helpers.serve import EnvProcess, Trainer, env_config, scripted_servers, wait_for


@pytest.fixture(scope="module")
def scripted(tiny_model_dir):
    with launch_scripted_server(respond=answer_plus_one, tokenizer=tiny_model_dir) as server:
        yield server


def test_serve_end_to_end(api, scripted, tiny_model_dir, tmp_path):
    """Registration waits for the trainer; good groups all arrive; bad ones are logged and skipped; failed and
    timed-out items are re-queued; evals run; SIGTERM disconnects and closes the JSONL file."""
    marks = tmp_path / "marks"
    marks.mkdir()
    config = env_config(
        api,
        tiny_model_dir,
        tmp_path,
        num_items=13,
        data_path_to_save_groups=str(tmp_path / "groups.jsonl"),
        fail_first_attempt_every=3,  # items 3, 6, 9, 12 raise once
        hang_every=4,  # items 4, 8, 12 hang once past worker_timeout
        hang_seconds=60,
        worker_timeout=1.5,
        ragged_every=5,  # items 5, 10: masks shorter than tokens
        nan_every=7,  # item 7: NaN score
        steps_per_eval=2,
        eval_handling="LIMIT_TRAIN",  # STOP_TRAIN re-queues running items (tested in test_runtime_loop.py)
        marker_dir=str(marks),
    )
    env = EnvProcess(tmp_path, config, scripted_servers(scripted))
    trainer = None
    try:
        env.wait_log("waiting for the trainer to start")
        trainer = Trainer(api, batch_size=4)
        trainer.pull()  # the trainer's first /batch lets envs register
        env.wait_log("registered with the API as env_id 0")
        trainer.start()
        expected = [0, 1, 2, 3, 4, 6, 8, 9, 11, 12]  # 5, 7, 10 are malformed
        wait_for(lambda: trainer.items() == expected, timeout=90, what=f"items {expected}")
        assert [e["connected"] for e in trainer.envs()] == [True]
        env.signal(signal.SIGTERM)
        assert env.wait(30) == 0
    finally:
        env.kill()
        if trainer is not None:
            trainer.stop()
    log = env.log()
    assert "discarded a group (ragged) for item 5: sequence 0 has" in log
    assert "discarded a group (ragged) for item 10" in log
    assert "discarded a group (non_finite) for item 7: scores[0] is nan" in log
    for item in (3, 6, 9):
        assert (
            f"item {item} failed in collect_trajectories (RuntimeError: flaky failure on item {item}); re-queued"
            in log
        )
    for item in (4, 8, 12):
        assert f"item {item} timed out after 1.5 s; re-queued (attempt 2 of 4)" in log
    assert "received SIGTERM" in log and "disconnected from the API (env_id 0)" in log
    assert [e["connected"] for e in trainer.envs()] == [False]
    rows = [json.loads(line) for line in (tmp_path / "groups.jsonl").read_text().splitlines()]
    assert len(rows) == 10 and all(len(r["tokens"]) == 2 for r in rows)
    assert all(g["env_id"] == 0 for g in trainer.groups)
    assert list(marks.glob("eval-*"))  # the trainer passed steps 2 and 4
    assert not (tmp_path / "unsent.jsonl").exists()


def _item_of(group: dict) -> int:
    return int(group["messages"][0][0]["content"].split("What is ")[1].split("+")[0])


def test_backpressure_and_shutdown_lose_nothing(scripted, tiny_model_dir, tmp_path):
    """The API's queue cap answers 503: the env holds and resends the same group; when it is stopped while
    blocked, the group goes to the spill file. Every group the env accepted is either delivered or saved."""
    with launch_api(
        ["--max-queue-sequences", "4", "--retry-after-seconds", "1"], data_dir=tmp_path / "api"
    ) as api:
        trainer = Trainer(api, batch_size=4)
        trainer.pull()
        config = env_config(
            api,
            tiny_model_dir,
            tmp_path,
            num_items=12,
            max_batches_offpolicy=0,  # no env-side limit: the API's cap is what stops it
            max_num_workers=2,
            shutdown_timeout=1,
            data_path_to_save_groups=str(tmp_path / "groups.jsonl"),
        )
        env = EnvProcess(tmp_path, config, scripted_servers(scripted))
        try:
            env.wait_log("API queue is full (503); holding the group and retrying")
            wait_for(
                lambda: trainer.pull() is not None and len(trainer.groups) >= 6, timeout=60, what="6 groups"
            )
            env.wait_log("API accepted the group after")
            blocked = env.log().count("API queue is full (503)")
            wait_for(
                lambda: env.log().count("API queue is full (503)") > blocked, timeout=60, what="a new 503"
            )
            env.signal(signal.SIGTERM)
            assert env.wait(30) == 0
        finally:
            env.kill()
        while trainer.pull():
            pass
    log = env.log()
    assert "undelivered payload(s) are saved in" in log and "disconnected from the API" in log
    spilled = [record["payload"] for record in read_unsent_groups(tmp_path / "unsent.jsonl")]
    assert spilled and all(r["payload"] for r in read_unsent_groups(tmp_path / "unsent.jsonl"))
    assert {record["reason"] for record in read_unsent_groups(tmp_path / "unsent.jsonl")} == {
        "cancelled during shutdown"
    }
    delivered = [_item_of(g) for g in trainer.groups]
    saved = [_item_of(p) for p in spilled]
    accepted = [_item_of(json.loads(line)) for line in (tmp_path / "groups.jsonl").read_text().splitlines()]
    assert len(delivered) == len(set(delivered))
    assert sorted(delivered + saved) == sorted(accepted)


def test_killed_env_and_restarted_api(scripted, tiny_model_dir, tmp_path):
    """SIGKILL of one env does not disturb the API or the other env; after a crash and restart of the API the
    surviving env reconnects and keeps delivering."""
    with launch_api(data_dir=tmp_path / "api") as api:
        trainer = Trainer(api, batch_size=4)
        trainer.pull()
        a_dir, b_dir = tmp_path / "a", tmp_path / "b"
        a_dir.mkdir()
        b_dir.mkdir()
        env_a = EnvProcess(
            a_dir, env_config(api, tiny_model_dir, a_dir, wandb_name="a"), scripted_servers(scripted)
        )
        env_b = EnvProcess(
            b_dir, env_config(api, tiny_model_dir, b_dir, wandb_name="b"), scripted_servers(scripted)
        )
        try:
            env_a.wait_log("registered with the API")
            env_b.wait_log("registered with the API")
            trainer.start()
            wait_for(lambda: {g["env_id"] for g in trainer.groups} == {0, 1}, timeout=60, what="both envs")
            env_a.kill()
            survivor = next(e["env_id"] for e in trainer.envs() if e["desired_name"] == "b")
            received = len(trainer.groups)
            # Groups of A that the API accepted before the kill are still delivered (nothing accepted is
            # lost); after them only the survivor's groups come.
            wait_for(
                lambda: (
                    len(trainer.groups) >= received + 6
                    and {g["env_id"] for g in trainer.groups[-6:]} == {survivor}
                ),
                timeout=90,
                what="only the survivor's groups after the kill",
            )
            trainer.stop()
            api.kill9()
            env_b.wait_log("lost contact with the API")
            api.start()
            trainer = Trainer(api, batch_size=4).start()
            env_b.wait_log("reconnected to the API")
            wait_for(
                lambda: len(trainer.groups) >= 4 and {g["env_id"] for g in trainer.groups[-2:]} == {survivor},
                timeout=90,
                what="the survivor's groups after the API restart",
            )
            env_b.signal(signal.SIGTERM)
            assert env_b.wait(30) == 0
        finally:
            env_a.kill()
            env_b.kill()
            trainer.stop()
