"""Durability across ``kill -9`` of a real ``run-api`` process, acknowledgements and replay."""

from __future__ import annotations

import gzip
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import orjson
import requests

from atroposlib.testing.api_process import free_port, launch_api
from tests.helpers.api import TIMEOUT, get, group, post_group, register, register_env


def marker(batch):
    """The first token id of every group in a batch (tests give each group a unique one)."""
    return [g["tokens"][0][0] for g in batch]


def drain(url, limit=None):
    """Serve batches until none is left (or ``limit`` were served); returns them."""
    served = []
    while limit is None or len(served) < limit:
        body = get(url, "/batch").json()
        if not body.get("batch"):
            break
        served.append(body)
    return served


def test_state_survives_kill9(tmp_path):
    data_dir = tmp_path / "data"
    with launch_api(data_dir=data_dir) as api:
        url = api.url
        uuid = register(url, batch_size=8, max_token_len=64, starting_step=5, checkpoint_dir="ck").json()[
            "uuid"
        ]
        assert isinstance(uuid, int)
        get(url, "/batch")  # start: lets envs register
        env_id = register_env(url, group_size=4).json()["env_id"]
        for i in range(6):  # six full groups of 4 -> three batches when drained
            assert post_group(url, group(4, start=100 * i, env_id=env_id)).json() == {"status": "received"}
        first = get(url, "/batch").json()  # forms 3 batches (step 5 -> 8), serves the newest
        assert marker(first["batch"]) == [400, 500]
        assert post_group(url, group(2, start=900, env_id=env_id)).json() == {
            "status": "buffered",
            "buffer_size": 2,
        }
        assert post_group(url, group(4, start=1000)).json() == {"status": "received"}  # no env
        before = {
            path: get(url, path).json()
            for path in ("/info", "/wandb_info", "/status", "/inspect/envs", "/latest_example")
        }
        health = get(url, "/health").json()
        assert health["pending_batches"] == 2 and health["buffered_sequences"] == 2
        api.kill9()

    with launch_api(data_dir=data_dir) as api:
        url = api.url
        for path, value in before.items():
            assert get(url, path).json() == value, path
        assert get(url, "/status").json() == {"current_step": 8, "queue_size": 1}
        # the remaining pre-formed batches are served next, newest first, without a new step
        assert marker(get(url, "/batch").json()["batch"]) == [200, 300]
        assert marker(get(url, "/batch").json()["batch"]) == [0, 100]
        assert get(url, "/status").json()["current_step"] == 8
        # the buffer survived: 2 more sequences complete the env's group of 4
        assert post_group(url, group(2, start=950, env_id=env_id)).json() == {
            "status": "buffered",
            "buffer_size": 0,
        }
        # registration survived (no re-init), the trainer is still "started" so envs can register
        assert register(url, batch_size=64).json()["uuid"] != uuid
        assert get(url, "/info").json()["batch_size"] == 8
        second_env = register_env(url, desired_name="test_env").json()
        assert second_env["status"] == "success" and second_env["wandb_name"] == "test_env_1"
        last = get(url, "/batch").json()
        assert sorted(marker(last["batch"])) == [900, 950, 1000]
        assert get(url, "/status").json()["current_step"] == 9
        assert last["batch_id"] > first["batch_id"]


def test_every_acknowledged_group_is_served_exactly_once_across_kill9(tmp_path):
    data_dir = tmp_path / "data"
    acknowledged: list[int] = []
    served: list[int] = []
    stop = threading.Event()

    def post_forever(url):
        session = requests.Session()
        i = 0
        while not stop.is_set():
            i += 1
            try:
                response = session.post(f"{url}/scored_data", json=group(2, 4, start=10 * i), timeout=5)
            except requests.RequestException:
                return  # the server died: this post is not acknowledged
            if response.status_code == 200:
                acknowledged.append(10 * i)

    with launch_api(data_dir=data_dir) as api:
        register(api.url, batch_size=4)
        poster = threading.Thread(target=post_forever, args=(api.url,))
        poster.start()
        while len(acknowledged) < 150 and poster.is_alive():
            time.sleep(0.05)
            for body in drain(api.url, limit=2):
                served.extend(marker(body["batch"]))
        api.kill9()
        stop.set()
        poster.join(TIMEOUT)

    with launch_api(data_dir=data_dir) as api:
        for body in drain(api.url):
            served.extend(marker(body["batch"]))
        leftover = get(api.url, "/status").json()["queue_size"]
    assert leftover <= 1  # at most one unpaired group of 2 when batches hold 4
    assert len(served) == len(set(served)), "a group was served twice"
    missing = set(acknowledged) - set(served)
    assert len(missing) <= leftover, f"acknowledged groups lost: {sorted(missing)[:10]}"


def test_ack_and_replay_survive_kill9(tmp_path):
    data_dir = tmp_path / "data"
    with launch_api(data_dir=data_dir) as api:
        url = api.url
        register(url, batch_size=2)
        for i in range(6):
            post_group(url, group(1, start=i))
        a = get(url, "/batch").json()
        b = get(url, "/batch").json()
        assert requests.post(
            f"{url}/batch/ack", json={"batch_id": a["batch_id"]}, timeout=TIMEOUT
        ).json() == {"status": "acknowledged"}
        assert (
            requests.post(f"{url}/batch/ack", json={"batch_id": a["batch_id"]}, timeout=TIMEOUT).status_code
            == 404
        )
        api.kill9()
    with launch_api(data_dir=data_dir) as api:
        url = api.url
        assert get(url, "/health").json()["unacked_batches"] == 1
        replay = requests.post(f"{url}/batch/replay", timeout=TIMEOUT).json()
        assert replay == {"status": "requeued", "batches": 1}
        again = get(url, "/batch").json()
        assert again["batch_id"] == b["batch_id"] and again["batch"] == b["batch"]
        rest = get(url, "/batch").json()
        assert marker(rest["batch"]) == [0, 1]
        assert get(url, "/batch").json() == {"batch": None}
        assert get(url, "/status").json()["current_step"] == 3


def test_batch_ids_are_never_reused_after_kill9(tmp_path):
    """A trainer acknowledges by batch id (also again after its own restart): an id the API handed out before a
    crash must never name another batch after it, even once the batch it named was acknowledged and deleted."""
    data_dir = tmp_path / "data"
    with launch_api(data_dir=data_dir) as api:
        register(api.url, batch_size=1)
        post_group(api.url, group(1, start=0))
        first = get(api.url, "/batch").json()["batch_id"]
        ack = requests.post(f"{api.url}/batch/ack", json={"batch_id": first}, timeout=TIMEOUT)
        assert ack.status_code == 200
        api.kill9()
    with launch_api(data_dir=data_dir) as api:
        post_group(api.url, group(1, start=10))
        second = get(api.url, "/batch").json()
        assert marker(second["batch"]) == [10]
        assert second["batch_id"] > first
        ack = requests.post(f"{api.url}/batch/ack", json={"batch_id": first}, timeout=TIMEOUT)
        assert ack.status_code == 404  # the old id acknowledges nothing new
        assert get(api.url, "/health").json()["unacked_batches"] == 1


def test_replay_serves_oldest_first_before_new_batches(tmp_path):
    with launch_api(data_dir=tmp_path / "data") as api:
        url = api.url
        register(url, batch_size=1)
        for i in range(3):
            post_group(url, group(1, start=i))
        served = [get(url, "/batch").json() for _ in range(3)]
        assert [marker(s["batch"]) for s in served] == [[2], [1], [0]]
        assert requests.post(f"{url}/batch/ack", json={"batch_id": served[1]["batch_id"]}, timeout=TIMEOUT).ok
        assert requests.post(f"{url}/batch/replay", timeout=TIMEOUT).json()["batches"] == 2
        post_group(url, group(1, start=7))
        order = [marker(get(url, "/batch").json()["batch"]) for _ in range(3)]
        assert order == [[2], [0], [7]]
        # a replayed batch that is served again can be acknowledged
        assert requests.post(f"{url}/batch/replay", timeout=TIMEOUT).json()["batches"] == 3


def test_unacked_batches_are_bounded(tmp_path):
    with launch_api(["--max-unacked-batches", "2", "--inspect-history", "0"], data_dir=tmp_path / "d") as api:
        url = api.url
        register(url, batch_size=1)
        for i in range(5):
            post_group(url, group(1, start=i))
        for _ in range(5):
            get(url, "/batch")
        assert get(url, "/health").json()["unacked_batches"] == 2
        assert requests.post(f"{url}/batch/replay", timeout=TIMEOUT).json()["batches"] == 2
        # the latest example outlives its discarded group
        assert get(url, "/latest_example").json()["tokens"] == [[4, 5, 6]]


def test_memory_store_forgets_on_restart(tmp_path):
    with launch_api(["--store", "memory"], data_dir=tmp_path / "d") as api:
        register(api.url, batch_size=4)
        post_group(api.url, group(1))
        assert get(api.url, "/health").json()["store"] == "memory"
        api.kill9()
    with launch_api(["--store", "memory"], data_dir=tmp_path / "d") as api:
        assert get(api.url, "/info").json() == {"batch_size": -1, "max_token_len": -1}
        assert get(api.url, "/status").json() == {"current_step": 0, "queue_size": 0}
    assert not (tmp_path / "d" / "trajectory_api.sqlite3").exists()


def test_second_server_on_the_same_data_dir_refuses(tmp_path):
    with launch_api(data_dir=tmp_path / "d"):
        cmd = [
            sys.executable,
            "-m",
            "atroposlib.cli.run_api",
            "--port",
            str(free_port()),
            "--data-dir",
            str(tmp_path / "d"),
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "in use by another run-api" in lines[0]


def test_concurrent_gzipped_ingest_loses_and_duplicates_nothing(tmp_path):
    """Eight clients post full-size gzipped groups at once; every group is served exactly once."""
    with launch_api(data_dir=tmp_path / "d") as api:
        register(api.url, batch_size=16)
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        bodies = [gzip.compress(orjson.dumps(group(8, 512, start=1000 + i))) for i in range(64)]

        def send(body: bytes) -> dict:
            with requests.Session() as session:
                return session.post(
                    f"{api.url}/scored_data", data=body, headers=headers, timeout=TIMEOUT
                ).json()

        with ThreadPoolExecutor(8) as threads:
            assert list(threads.map(send, bodies)) == [{"status": "received"}] * len(bodies)
        bad = gzip.compress(orjson.dumps({**group(8, 512, start=1), "masks": [[0] * 511] * 8}))
        answer = requests.post(f"{api.url}/scored_data", data=bad, headers=headers, timeout=TIMEOUT)
        assert answer.status_code == 422 and answer.json()["detail"][0]["type"] == "length_mismatch"
        answer = requests.post(f"{api.url}/scored_data", data=bad[:-30], headers=headers, timeout=TIMEOUT)
        assert answer.status_code == 400 and answer.text == "Invalid gzip payload"
        served = [first for batch in drain(api.url) for first in marker(batch["batch"])]
        assert sorted(served) == list(range(1000, 1064))
