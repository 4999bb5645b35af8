"""The hf inference backend (example_trainer.inference.hf_generation) on the tiny local model, in process."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from fastapi.testclient import TestClient

from atroposlib.testing.api_process import free_port
from atroposlib.testing.tiny_model import build_tiny_model
from example_trainer.demo.heldout_eval import chat_prompt_ids, chat_replies, load_causal_lm
from example_trainer.inference.hf_generation import HfGenerator, build_app
from example_trainer.inference.vllm_manager import VllmManager, VllmManagerConfig


@pytest.fixture(scope="module")
def model_dir():
    return build_tiny_model()


@pytest.fixture(scope="module")
def generator(model_dir):
    gen = HfGenerator(str(model_dir))
    yield gen
    gen.close()


@pytest.fixture(scope="module")
def client(generator):
    with TestClient(build_app(generator, "tiny", max_model_len=64, api_key=None)) as c:
        yield c


def _prompt(generator, question="What is 3+4?"):
    return chat_prompt_ids(generator.tokenizer, [{"role": "user", "content": question}])


def _reference_logprobs(model, prompt, completion):
    """Float32 log-probabilities of ``completion`` after ``prompt``, by one plain forward pass."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    return [float(logp[len(prompt) - 1 + i, tok]) for i, tok in enumerate(completion)]


def test_sampled_tokens_and_logprobs_match_the_model(client, generator, model_dir):
    model, _ = load_causal_lm(model_dir)
    # Two prompts of different lengths in one batch: left padding and the per-group cache copy.
    prompts = [_prompt(generator), _prompt(generator, "What is 12+345 and why?")]
    with ThreadPoolExecutor(2) as pool:
        replies = list(
            pool.map(
                lambda p: client.post(
                    "/generate",
                    json={"prompt": {"prompt_token_ids": p}, "n": 4, "max_tokens": 6, "logprobs": 0},
                ),
                prompts,
            )
        )
    for prompt, resp in zip(prompts, replies, strict=True):
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["prompt_token_ids"] == prompt
        assert len(body["token_ids"]) == len(body["logprobs"]) == len(body["finish_reasons"]) == 4
        for ids, positions, finish in zip(
            body["token_ids"], body["logprobs"], body["finish_reasons"], strict=True
        ):
            assert 1 <= len(ids) <= 6
            assert finish == ("stop" if ids[-1] in generator.eos_ids else "length")
            assert [int(next(iter(p[0]))) for p in positions] == ids
            served = [next(iter(p[0].values())) for p in positions]
            assert served == pytest.approx(_reference_logprobs(model, prompt, ids), abs=1e-4)


def test_greedy_matches_transformers_generate(client, generator, model_dir):
    model, tokenizer = load_causal_lm(model_dir)
    questions = ["What is 3+4?", "What is 51+7?"]
    expected = chat_replies(
        model, tokenizer, [[{"role": "user", "content": q}] for q in questions], max_new_tokens=8
    )
    for question, want in zip(questions, expected, strict=True):
        body = client.post(
            "/generate",
            json={"prompt": _prompt(generator, question), "max_tokens": 8, "temperature": 0, "n": 2},
        ).json()
        assert [t.strip() for t in body["text"]] == [want, want]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"prompt": [1, 2], "seed": 3}, "not supported by the hf inference backend: seed"),
        ({"prompt": [10**6]}, "outside the vocabulary"),
        ({"prompt": [1] * 60, "max_tokens": 8}, "exceeds the maximum model length 64"),
        ({"prompt": [1, 2], "n": 0}, "invalid sampling parameter n"),
        ({"prompt": [1, 2], "logprobs": 5}, "invalid sampling parameter logprobs"),
        ({"n": 2}, "missing required field 'prompt'"),
        ({"prompt": {"ids": [1]}}, "prompt_token_ids"),
    ],
)
def test_bad_requests_get_a_400_naming_the_problem(client, payload, message):
    resp = client.post("/generate", json=payload)
    assert resp.status_code == 400
    assert message in resp.json()["error"]["message"]


def test_update_weights_serves_the_new_checkpoint(client, generator, model_dir, tmp_path):
    model, tokenizer = load_causal_lm(model_dir)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    new_dir = tmp_path / "step_1"
    model.save_pretrained(new_dir, safe_serialization=True)
    tokenizer.save_pretrained(new_dir)
    prompt = _prompt(generator)
    before = client.post("/generate", json={"prompt": prompt, "max_tokens": 4, "logprobs": 0}).json()
    resp = client.post("/bridge/update_weights", json={"checkpoint_dir": str(new_dir)})
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "updated"
    after = client.post("/generate", json={"prompt": prompt, "max_tokens": 4, "logprobs": 0}).json()
    ids = after["token_ids"][0]
    served = [next(iter(p[0].values())) for p in after["logprobs"][0]]
    assert served == pytest.approx(_reference_logprobs(model, prompt, ids), abs=1e-4)
    assert before["logprobs"] != after["logprobs"]
    # back to the original weights for the other tests
    assert client.post("/bridge/update_weights", json={"checkpoint_dir": str(model_dir)}).status_code == 200


def test_update_weights_refuses_missing_or_foreign_checkpoints(client, model_dir, tmp_path):
    resp = client.post("/bridge/update_weights", json={"checkpoint_dir": str(tmp_path / "nope")})
    assert resp.status_code == 404
    foreign = tmp_path / "foreign"
    shutil.copytree(model_dir, foreign)
    cfg = (foreign / "config.json").read_text().replace('"num_hidden_layers": 2', '"num_hidden_layers": 3')
    (foreign / "config.json").write_text(cfg)
    resp = client.post("/bridge/update_weights", json={"checkpoint_dir": str(foreign)})
    assert resp.status_code == 400
    assert "num_hidden_layers" in resp.json()["error"]["message"]


def test_manager_starts_the_hf_server_and_reloads_it(model_dir, tmp_path):
    cfg = VllmManagerConfig(
        vllm_port=free_port(), backend="hf", refresh_mode="reload", log_dir=str(tmp_path), startup_timeout=120
    )
    manager = VllmManager(cfg)
    assert "example_trainer.inference.hf_generation" in manager.command(str(model_dir))
    with manager:
        manager.start(str(model_dir))
        assert manager.is_healthy()
        assert manager.refresh(str(model_dir), 1) < 60
        assert manager.is_healthy()


def test_a_lora_adapter_is_served_merged_and_unloaded(client, generator, model_dir, tmp_path):
    """lora_only on the hf backend: the adapter's logprobs are PEFT's, and unloading restores the base."""
    from peft import LoraConfig, get_peft_model

    base, _ = load_causal_lm(model_dir)
    peft_model = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"])
    )
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(0.3 * torch.randn_like(p))
    peft_model.save_pretrained(tmp_path / "adapter")
    peft_model.eval()
    prompt = _prompt(generator)
    body = {"prompt": {"prompt_token_ids": prompt}, "max_tokens": 5, "temperature": 0, "logprobs": 0}
    before = client.post("/generate", json=body).json()
    assert (
        client.post(
            "/v1/load_lora_adapter", json={"lora_name": "a", "lora_path": str(tmp_path / "adapter")}
        ).status_code
        == 200
    )
    assert client.post("/lora/load", json={"adapter_path": str(tmp_path / "adapter")}).status_code == 200
    adapted = client.post("/generate", json=body).json()
    ids = adapted["token_ids"][0]
    served = [float(next(iter(pos[0].values()))) for pos in adapted["logprobs"][0]]
    assert _reference_logprobs(peft_model, prompt, ids) == pytest.approx(served, abs=1e-5)
    assert served != pytest.approx(
        [float(next(iter(p[0].values()))) for p in before["logprobs"][0]], abs=1e-3
    )
    assert client.post("/lora/unload").json()["previous_adapter"] == str(tmp_path / "adapter")
    assert client.post("/generate", json=body).json()["logprobs"] == before["logprobs"]
    assert (
        client.post("/lora/load", json={"adapter_path": str(model_dir)}).status_code == 400
    )  # not an adapter
