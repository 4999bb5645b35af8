"""The servers file (``--openai.servers_file``): reading, re-reading, and a ServerManager following a server that
moves to another port."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

import pytest

from atroposlib.envs.server_handling.errors import ServerUnavailableError
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.server_manager import ServerManager
from atroposlib.envs.server_handling.servers_file import (
    ServersFile,
    ServersFileError,
    parse_servers,
    read_servers_file,
    write_servers_file,
)
from atroposlib.testing.api_process import free_port
from atroposlib.testing.scripted_server import launch_scripted_server

from .conftest import make_fast
from .test_http_backends import wait_until

USER = [{"role": "user", "content": "hello"}]


# -- reading -------------------------------------------------------------------------------------------
def test_lines_with_comments_and_a_yaml_list_are_read(tmp_path):
    path = tmp_path / "servers.txt"
    path.write_text("# written by the trainer\nhttp://a:1/v1/\n\n  http://b:2/v1  # second\n")
    assert read_servers_file(path) == ["http://a:1/v1", "http://b:2/v1"]
    path.write_text("- http://a:1/v1\n- https://b:2/v1\n")
    assert read_servers_file(path) == ["http://a:1/v1", "https://b:2/v1"]
    assert parse_servers('["http://c:3/v1"]') == ["http://c:3/v1"]


#: file content (None: no file) -> what the one-line error says
UNUSABLE = {
    None: "does not exist",
    "": "lists no inference server",
    "# nothing yet\n\n": "lists no inference server",
    "- http://a:1/v1\n- [unclosed\n": "not a valid YAML list",
    "- {url: http://a:1/v1}\n": "must hold URL strings",
    "localhost:9001\n": "is not a base URL",
}


@pytest.mark.parametrize("content", list(UNUSABLE))
def test_unusable_files_are_refused_in_one_line_naming_the_file(tmp_path, content):
    expected = UNUSABLE[content]
    path = tmp_path / "servers.txt"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ServersFileError) as info:
        read_servers_file(path)
    message = str(info.value)
    assert expected in message and str(path) in message and "\n" not in message


def test_write_is_atomic_and_refuses_an_empty_list(tmp_path):
    path = tmp_path / "sub" / "servers.txt"
    write_servers_file(path, ["http://a:1/v1"])
    assert read_servers_file(path) == ["http://a:1/v1"]
    with pytest.raises(ServersFileError):
        write_servers_file(path, [])
    assert read_servers_file(path) == ["http://a:1/v1"]  # the old list stays
    assert [p.name for p in path.parent.iterdir()] == ["servers.txt"]  # no temporary left behind


def test_poll_reports_changes_and_keeps_the_last_list_through_a_bad_version(tmp_path, caplog):
    path = tmp_path / "servers.txt"
    write_servers_file(path, ["http://a:1/v1"])
    followed = ServersFile(path)
    assert followed.urls == ["http://a:1/v1"] and followed.poll() is None
    write_servers_file(path, ["http://a:2/v1"])
    os.utime(path, ns=(1, 1))  # a stamp that surely differs from the first version's
    assert followed.poll() == ["http://a:2/v1"] and followed.urls == ["http://a:2/v1"]
    path.write_text("not-a-url-xyz\n")  # as long as the next version
    os.utime(path, ns=(2, 2))
    caplog.set_level("WARNING")
    assert followed.poll() is None and followed.poll(force=True) is None
    assert followed.urls == ["http://a:2/v1"]
    assert sum("is not a base URL" in r.getMessage() for r in caplog.records) == 1  # warned once
    # Same stamp but new content: found only when forced (a rewrite within the timestamp resolution).
    path.write_text("http://a:3/v1\n")
    os.utime(path, ns=(2, 2))
    assert followed.poll() is None
    assert followed.poll(force=True) == ["http://a:3/v1"]


# -- the manager -----------------------------------------------------------------------------------------
def test_manager_makes_one_server_per_listed_url_with_the_config_settings(tmp_path):
    path = tmp_path / "servers.txt"
    write_servers_file(path, ["http://a:1/v1", "http://b:2/v1"])
    config = APIServerConfig(model_name="m", servers_file=str(path), num_max_requests_at_once=7)
    manager = ServerManager(config, slurm=True)  # the file takes precedence over discovery
    assert [s.config.base_url for s in manager.servers] == ["http://a:1/v1", "http://b:2/v1"]
    assert all(s.config.num_max_requests_at_once == 7 for s in manager.servers)
    assert manager.servers_file == path
    with pytest.raises(ServersFileError, match="does not exist"):
        ServerManager(APIServerConfig(model_name="m", servers_file=str(tmp_path / "missing")))
    with pytest.raises(ValueError, match="list of 2 server configs"):
        ServerManager([config, APIServerConfig(model_name="m", base_url="http://c:3/v1")])


async def test_retire_ends_the_wait_for_a_server_that_does_not_answer(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    listed_in = str(tmp_path / "servers.txt")
    server = make_fast(OpenAIServer(APIServerConfig(model_name="m", base_url=url, servers_file=listed_in)))
    pending = asyncio.create_task(server.chat_completion(messages=USER))
    await wait_until(lambda: not server.server_healthy)
    assert f"{listed_in} (--openai.servers_file) lists where it runs now" in server.unavailable_message()
    await asyncio.sleep(0.1)
    assert not pending.done()  # waits for the server (up to its timeout)
    server.retire()
    with pytest.raises(ServerUnavailableError):
        await asyncio.wait_for(pending, 5)
    assert server.check_task is None
    await server.close()


async def test_requests_follow_a_server_restarted_on_another_port(tmp_path, tiny_model_dir):
    path = tmp_path / "servers.txt"
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(
            launch_scripted_server(respond=lambda p, i: "from A", tokenizer=str(tiny_model_dir))
        )
        write_servers_file(path, [first.base_url])
        manager = ServerManager(APIServerConfig(model_name="scripted-model", servers_file=str(path)))
        manager.servers_file_poll_interval = 0.05
        make_fast(manager.servers[0])
        await manager.update_weight(0.5)
        assert (await manager.chat_completion(messages=USER)).choices[0].message.content == "from A"
        stack.close()  # A goes away
        pending = asyncio.create_task(manager.chat_completion(messages=USER))
        await wait_until(lambda: not manager.servers[0].server_healthy)
        await asyncio.sleep(0.2)
        assert not pending.done()  # nothing answers: the request waits

        with launch_scripted_server(respond=lambda p, i: "from B", tokenizer=str(tiny_model_dir)) as second:
            assert second.port != first.port
            write_servers_file(path, [second.base_url])
            reply = await asyncio.wait_for(pending, 15)
            assert reply.choices[0].message.content == "from B"
            assert [s.config.base_url for s in manager.servers] == [second.base_url]
            moved = manager.servers[0]
            assert moved.sem.weight == 0.5 and moved.config.model_name == "scripted-model"
            again = await manager.chat_completion(messages=USER, split="eval")
            assert again.choices[0].message.content == "from B"
            assert sum(r["path"].endswith("/chat/completions") for r in second.requests) == 2
        await manager.close()


async def test_a_request_sent_to_a_server_that_never_answers_moves_when_the_file_changes(
    tmp_path, tiny_model_dir
):
    # Something holds the old port and accepts connections but never answers (a hung server, or another
    # process that took the port): a request already sent there must not wait out its timeout.
    path = tmp_path / "servers.txt"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(16)
        write_servers_file(path, [f"http://127.0.0.1:{holder.getsockname()[1]}/v1"])
        manager = ServerManager(APIServerConfig(model_name="scripted-model", servers_file=str(path)))
        manager.servers_file_poll_interval = 0.05
        held = manager.servers[0]
        held.initialized = True  # no health check: the connection is accepted, so the request is on its way
        pending = asyncio.create_task(manager.chat_completion(messages=USER))
        await wait_until(lambda: bool(held._in_flight))
        await asyncio.sleep(0.3)
        assert not pending.done()
        with launch_scripted_server(respond=lambda p, i: "from B", tokenizer=str(tiny_model_dir)) as second:
            write_servers_file(path, [second.base_url])
            reply = await asyncio.wait_for(pending, 15)
            assert reply.choices[0].message.content == "from B"
            assert held.retired and not held._in_flight
        await manager.close()


async def test_servers_still_listed_are_kept_and_the_others_retired(tmp_path):
    path = tmp_path / "servers.txt"
    write_servers_file(path, ["http://a:1/v1", "http://b:2/v1", "http://b:2/v1"])
    manager = ServerManager(APIServerConfig(model_name="m", servers_file=str(path)))
    first_a, first_b, second_b = manager.servers
    assert manager.follow_servers_file() is False  # unchanged
    write_servers_file(path, ["http://b:2/v1", "http://c:3/v1"])
    assert manager.follow_servers_file(force=True) is True
    assert manager.servers[0] is first_b and manager.servers[1].config.base_url == "http://c:3/v1"
    assert first_a.retired and second_b.retired and not first_b.retired
    await manager.close()
