"""GSM8K for Axolotl: TRL's vLLM server by default, GSM8K's scoring, ``process`` and ``evaluate`` through TRL's
``/generate/`` route."""

from __future__ import annotations

import pytest

from environments.gsm8k_server_axolotl import GSM8kAxolotlEnv
from tests.helpers.cli_runs import GSM8K_SAMPLE, gsm8k_responder, read_jsonl
from tests.helpers.single_turn_runs import offline_env

QUESTION = read_jsonl(GSM8K_SAMPLE)[0]


def test_defaults_name_trls_server_and_the_axolotl_model():
    env_config, server = GSM8kAxolotlEnv.config_init()
    assert server.server_type == "trl" and server.model_name == "Qwen/Qwen3-1.7B"
    assert server.base_url == "http://localhost:9001/v1"
    assert env_config.tokenizer_name == "Qwen/Qwen3-1.7B" and env_config.group_size == 8
    assert env_config.total_steps == 1000 and env_config.max_token_length == 2048


@pytest.mark.parametrize("named", [False, True], ids=["no-tokenizer-named", "own-tokenizer"])
def test_trls_server_renders_with_the_policys_tokenizer_unless_it_names_one(tiny_model_dir, tmp_path, named):
    from transformers import AutoTokenizer

    from atroposlib.envs.base import APIServerConfig

    own = tmp_path / "own"
    AutoTokenizer.from_pretrained(str(tiny_model_dir)).save_pretrained(own)
    server = APIServerConfig(base_url="http://127.0.0.1:9", model_name="Qwen/Qwen3-1.7B", server_type="trl",
                             tokenizer_name=str(own) if named else "none")  # fmt: skip
    env = GSM8kAxolotlEnv(
        GSM8kAxolotlEnv.env_config_cls(tokenizer_name=str(tiny_model_dir), use_wandb=False),
        server,
        slurm=False,
    )
    (trl,) = env.server.servers
    assert (trl.tokenizer is env.tokenizer) is not named
    assert trl.tokenizer.name_or_path == str(own if named else tiny_model_dir)


def _rollout(reply: str, generated: int) -> dict:
    prompt = [5] * 8
    return {
        "messages": ({"role": "user", "content": "q"}, {"role": "assistant", "content": reply}),
        "gold_answer": "\\boxed{14}",
        "finish_reason": "stop",
        "tokens": prompt + list(range(100, 100 + generated)),
        "masks": [-100] * len(prompt) + list(range(100, 100 + generated)),
        "logprobs": [1.0] * len(prompt) + [-0.5] * generated,
    }


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("<think>7 * 2</think>\\boxed{14}", 1.0),
        ("The answer is \\boxed{14.0}.", 1.0),
        ("\\boxed{\\frac{28}{2}}", 1.0),
        ("\\boxed{15}", -1.0),
        ("14", -1.0),  # not boxed
        ("<think>\\boxed{14}</think>no answer", -1.0),  # only inside the reasoning
        ("", -1.0),
    ],
)
async def test_scoring(tiny_model_dir, reply, expected):
    env = offline_env(GSM8kAxolotlEnv, tiny_model_dir, dataset_path=str(GSM8K_SAMPLE))
    # a contrasting rollout (the other verdict) keeps the group; lengths tell the two apart
    contrast = "\\boxed{3}" if expected == 1.0 else "\\boxed{14}"
    group = await env.score([_rollout(reply, 20), _rollout(contrast, 21)])
    by_length = dict(zip((len(t) for t in group["tokens"]), group["scores"], strict=True))
    assert by_length == {28: expected, 29: -expected}


def test_process_through_trls_generate_route(scripted, tmp_path):
    requests = scripted.command(
        GSM8kAxolotlEnv,
        "process",
        ["--env.dataset_path", GSM8K_SAMPLE, "--env.group_size", "4", "--env.total_steps", "2"],
        gsm8k_responder(),
        server_type=None,  # the environment's own default: trl
    )
    assert requests and {r["path"] for r in requests} == {"/generate/"}
    groups = read_jsonl(tmp_path / "data" / "gsm8k.jsonl")
    assert len(groups) == 2
    for group in groups:
        assert sorted(group["scores"]) == [-1.0, -1.0, 1.0, 1.0]
        assert all(len(t) == len(m) for t, m in zip(group["tokens"], group["masks"], strict=True))


def test_evaluate_is_greedy_with_exact_metrics(scripted):
    evaluation = scripted.evaluation(
        GSM8kAxolotlEnv,
        ["--env.dataset_path", GSM8K_SAMPLE, "--env.eval_limit", "4"],
        gsm8k_responder(),
        server_type=None,
    )
    assert evaluation.metrics == {"eval/percent_correct": 1.0}
    assert evaluation.report["config_general"]["generation_parameters"]["temperature"] == 0.0
    assert {r["body"]["temperature"] for r in evaluation.requests} == {0.0}
