"""The guides' code runs: docs/managed-server.md's snippets against the scripted vLLM-style server, its
multi-turn environment through ``process``; docs/trajectory-api.md's minimal trainer against a real
``run-api``; and every relative link of README.md and docs/ points at a file that exists."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import textwrap
import threading
from types import SimpleNamespace

import pytest
import requests
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig, ScoredDataGroup
from atroposlib.envs.server_handling.server_manager import ServerManager
from atroposlib.testing.scripted_server import launch_scripted_server
from tests.docs.shell_blocks import REPO
from tests.helpers.cli_runs import read_jsonl, run_env

DOCS = REPO / "docs"


def python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)


def as_method(block: str, name: str, returns: str) -> str:
    """``block`` (code written inside a method, using ``self``) as ``async def name(self)``."""
    return f"async def {name}(self):\n{textwrap.indent(block, '    ')}\n    return {returns}\n"


async def with_manager(base_url: str, body):
    manager = ServerManager(
        [APIServerConfig(model_name="scripted-model", base_url=base_url, server_type="vllm")]
    )
    try:
        return await body(manager)
    finally:
        await manager.close()


def test_single_turn_group_snippet(tiny_model_dir):
    block = python_blocks("managed-server.md")[0]
    namespace = {"ScoredDataGroup": ScoredDataGroup, "score": lambda reply, item: float(reply == "four")}
    exec(block, namespace)  # defines collect_trajectories(self, item)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with launch_scripted_server(responses=["four", "five"], tokenizer=tiny_model_dir) as server:

        async def body(manager):
            env = SimpleNamespace(server=manager, tokenizer=tokenizer, config=SimpleNamespace(group_size=4))
            return await namespace["collect_trajectories"](env, {"question": "What is 2+2?"})

        group, backlog = asyncio.run(with_manager(server.base_url, body))
    assert backlog == [] and group["scores"] == [1.0, 0.0, 1.0, 0.0]
    for tokens, masks, logprobs, messages in zip(
        group["tokens"], group["masks"], group["inference_logprobs"], group["messages"], strict=True
    ):
        assert len(tokens) == len(masks) == len(logprobs)
        trained = [t for t, m in zip(tokens, masks, strict=True) if m != -100]
        assert tokenizer.decode(trained, skip_special_tokens=True) == messages[-1]["content"]
        assert all(p == 1.0 for p, m in zip(logprobs, masks, strict=True) if m == -100)


def test_two_turn_snippet_gives_one_sequence(tiny_model_dir):
    block = python_blocks("managed-server.md")[1]
    namespace: dict = {}
    exec(as_method(block, "play", "node, first, second"), namespace)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)

    def respond(prompt, index):
        return "Is it 7?" if "Higher." in str(prompt) else "Is it 5?"

    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:

        async def body(manager):
            return await namespace["play"](SimpleNamespace(server=manager, tokenizer=tokenizer))

        node, first, second = asyncio.run(with_manager(server.base_url, body))
    assert first.choices[0].message.content == "Is it 5?"
    assert second.choices[0].message.content == "Is it 7?"
    trained = [t for t, m in zip(node.tokens, node.masked_tokens, strict=True) if m != -100]
    assert tokenizer.decode(trained, skip_special_tokens=True) == "Is it 5?Is it 7?"  # both replies
    assert "Higher." in node.full_text and "Higher." not in tokenizer.decode(trained)


def test_multi_turn_environment_runs_with_process(tmp_path, tiny_model_dir):
    env_file = tmp_path / "guess_env.py"
    env_file.write_text(
        python_blocks("managed-server.md")[-1] + "\n\nif __name__ == '__main__':\n    GuessEnv.cli()\n"
    )
    guesses = itertools.cycle(["3", "7", "2", "9", "5", "no idea"])
    lock = threading.Lock()

    def respond(prompt, index):
        with lock:
            return next(guesses)

    out = tmp_path / "guess.jsonl"
    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        result = run_env(
            env_file,
            [
                "process",
                "--openai.base_url", server.base_url,
                "--openai.model_name", "scripted-model",
                "--openai.server_type", "vllm",
                "--env.tokenizer_name", tiny_model_dir,
                "--env.total_steps", "2",
                "--env.group_size", "4",
                "--env.max_turns", "3",
                "--env.use_wandb", "false",
                "--env.data_path_to_save_groups", out,
            ],
            cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    groups = read_jsonl(out)
    assert len(groups) == 2
    for group in groups:
        assert len(set(group["scores"])) > 1
        for tokens, masks, logprobs, messages in zip(
            group["tokens"], group["masks"], group["inference_logprobs"], group["messages"], strict=True
        ):
            assert len(tokens) == len(masks) == len(logprobs)
            replies = [m["content"] for m in messages if m["role"] == "assistant"]
            hints = [m["content"] for m in messages[1:] if m["role"] == "user"]
            assert 1 <= len(replies) <= 3 and all(h in ("Higher.", "Lower.") for h in hints)
            assert all(p == 1.0 for p, m in zip(logprobs, masks, strict=True) if m == -100)


@pytest.mark.slow
def test_minimal_trainer_pulls_and_acknowledges(api):
    block = python_blocks("trajectory-api.md")[0]
    assert 'API = "http://localhost:8000"' in block and "range(100)" in block
    code = block.replace('API = "http://localhost:8000"', f'API = "{api.url}"').replace(
        "range(100)", "range(2)"
    )
    trainer = threading.Thread(target=exec, args=(code, {}), daemon=True)
    trainer.start()
    registration = {"max_token_length": 64, "desired_name": "docs", "weight": 1.0, "group_size": 2}
    for _ in range(100):
        answer = requests.post(f"{api.url}/register-env", json=registration, timeout=10).json()
        if answer["status"] == "success":
            break
        threading.Event().wait(0.2)
    group = {"tokens": [[1, 2, 3], [1, 2, 4]], "masks": [[-100, 2, 3], [-100, 2, 4]], "scores": [1.0, 0.0]}
    for _ in range(8):  # two batches of 8 sequences
        assert requests.post(
            f"{api.url}/scored_data", json={**group, "env_id": answer["env_id"]}, timeout=10
        ).ok
    trainer.join(60)
    assert not trainer.is_alive()
    replayed = requests.post(f"{api.url}/batch/replay", timeout=10).json()
    assert replayed == {"status": "requeued", "batches": 0}  # both batches were acknowledged


def test_relative_links_resolve():
    pages = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(REPO)}: broken link {target}"


def test_guides_are_linked_from_the_readme():
    readme = (REPO / "README.md").read_text()
    for page in ("first-environment.md", "managed-server.md", "trajectory-api.md", "troubleshooting.md"):
        assert f"(docs/{page})" in readme
        assert (DOCS / page).exists()


def test_trajectory_guide_lists_every_route():
    from atroposlib.api.server import create_app

    guide = (DOCS / "trajectory-api.md").read_text()
    routes = {r.path for r in create_app().routes if getattr(r, "methods", None)}
    documented = set(re.findall(r"`(/[a-z_/-]*)", guide))
    missing = {r for r in routes if r not in documented and not r.startswith(("/docs", "/openapi", "/redoc"))}
    assert not missing, f"routes not in docs/trajectory-api.md: {sorted(missing)}"
    assert json.dumps(sorted(routes))  # the app was built
