"""The /generate protocol, CLI normalisation and adapter helpers, tested as pure functions.

Responses are built from vLLM's own output classes (``RequestOutput``, ``CompletionOutput``,
``Logprob``), exactly what the engine hands to the route.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")

from vllm import SamplingParams  # noqa: E402
from vllm.logprobs import Logprob  # noqa: E402
from vllm.outputs import CompletionOutput, RequestOutput  # noqa: E402
from vllm.sampling_params import RequestOutputKind  # noqa: E402

from example_trainer.inference.routes.errors import BadRequest  # noqa: E402
from example_trainer.inference.routes.lora import list_adapter_dirs, read_adapter_config  # noqa: E402
from example_trainer.inference.vllm_api_server import normalize_argv  # noqa: E402
from example_trainer.inference.vllm_protocol import (  # noqa: E402
    format_generate_response,
    parse_generate_request,
    stream_chunk,
)


# --- parse_generate_request ----------------------------------------------------------------------
def test_text_prompt_and_sampling_params_pass_through():
    req = parse_generate_request({"prompt": "hi", "n": 3, "max_tokens": 7, "temperature": 0.5, "logprobs": 0})
    assert req.prompt == "hi" and req.stream is False
    sp = req.sampling_params
    assert (sp.n, sp.max_tokens, sp.temperature, sp.logprobs) == (3, 7, 0.5, 0)
    assert sp.output_kind == RequestOutputKind.FINAL_ONLY


@pytest.mark.parametrize("prompt", [{"prompt_token_ids": [1, 2, 3]}, [1, 2, 3]])
def test_token_id_prompts(prompt):
    req = parse_generate_request({"prompt": prompt}, vocab_size=10)
    assert req.prompt == {"prompt_token_ids": [1, 2, 3]}


def test_stream_requests_cumulative_outputs():
    req = parse_generate_request({"prompt": "x", "stream": True})
    assert req.stream and req.sampling_params.output_kind == RequestOutputKind.CUMULATIVE


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([1, 2], "JSON object"),
        ({"max_tokens": 3}, "missing required field 'prompt'"),
        ({"prompt": ""}, "must not be empty"),
        ({"prompt": 5}, "'prompt' must be"),
        ({"prompt": []}, "non-empty list"),
        ({"prompt": {"prompt_token_ids": [1, "2"]}}, "must hold integers"),
        ({"prompt": {"prompt_token_ids": [1, True]}}, "must hold integers"),
        ({"prompt": {"prompt_token_ids": [-1]}}, "outside the vocabulary"),
        ({"prompt": {"prompt_token_ids": [10]}}, "outside the vocabulary [0, 10)"),
        ({"prompt": {"prompt_token_ids": [1], "x": 1}}, "prompt_token_ids"),
        ({"prompt": "x", "stream": "yes"}, "'stream' must be a boolean"),
        ({"prompt": "x", "foo": 1}, "Unexpected keyword argument 'foo'"),
        ({"prompt": "x", "temperature": -1}, "temperature must be non-negative"),
        ({"prompt": "x", "n": 0}, "n must be at least 1"),
        ({"prompt": "x", "temperature": "hot"}, "invalid sampling parameters"),
    ],
)
def test_bad_bodies_name_the_problem(body, message):
    with pytest.raises(BadRequest, match=None) as info:
        parse_generate_request(body, vocab_size=10)
    assert message in str(info.value)


# --- format_generate_response --------------------------------------------------------------------
def _output(prompt_ids, outputs, prompt_logprobs=None, prompt="p"):
    return RequestOutput(
        request_id="r",
        prompt=prompt,
        prompt_token_ids=prompt_ids,
        prompt_logprobs=prompt_logprobs,
        outputs=outputs,
        finished=True,
    )


def _completion(index, token_ids, logprobs, text="t", finish="stop"):
    return CompletionOutput(
        index=index,
        text=text,
        token_ids=token_ids,
        cumulative_logprob=None,
        logprobs=logprobs,
        finish_reason=finish,
    )


def test_reply_without_logprobs_has_only_text_prompt_and_finish_reasons():
    out = _output([1, 2], [_completion(0, [5], None, "a", "length"), _completion(1, [6], None, "b", "stop")])
    reply = format_generate_response(out, SamplingParams(), "p")
    assert reply == {"text": ["a", "b"], "prompt": "p", "finish_reasons": ["length", "stop"]}


def test_logprobs_put_the_sampled_token_first():
    # Position 0 sampled token 7 although 9 is more likely: 7 must still be the first key, as
    # clients read the first entry of each position.
    pos0 = {9: Logprob(-0.1, rank=1), 7: Logprob(-2.5, rank=2)}
    pos1 = {4: Logprob(-0.3, rank=1)}
    out = _output([1, 2, 3], [_completion(0, [7, 4], [pos0, pos1])])
    reply = format_generate_response(out, SamplingParams(logprobs=1), "p")
    assert reply["logprobs"] == [[[{"7": -2.5, "9": -0.1}], [{"4": -0.3}]]]
    assert list(reply["logprobs"][0][0][0]) == ["7", "9"]
    assert reply["token_ids"] == [[7, 4]]
    assert reply["prompt_token_ids"] == [1, 2, 3]
    assert "prompt_logprobs" not in reply
    json.dumps(reply)  # JSON-serialisable as is


def test_prompt_logprobs_start_with_null_and_lead_with_the_prompt_token():
    prompt_lps = [None, {8: Logprob(-0.2), 2: Logprob(-1.5)}, {3: Logprob(-0.7)}]
    out = _output([1, 2, 3], [_completion(0, [5], None)], prompt_logprobs=prompt_lps)
    reply = format_generate_response(out, SamplingParams(prompt_logprobs=1), "p")
    assert reply["prompt_logprobs"] == [None, {"2": -1.5, "8": -0.2}, {"3": -0.7}]
    assert list(reply["prompt_logprobs"][1]) == ["2", "8"]
    assert "logprobs" not in reply


def test_stream_chunk_is_one_ndjson_line_with_prompt_plus_text():
    out = _output([1], [_completion(0, [5], None, " world"), _completion(1, [6], None, " there")])
    line = stream_chunk(out, "hello")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"text": ["hello world", "hello there"]}


# --- CLI -----------------------------------------------------------------------------------------
def test_log_level_accepts_lower_case_and_sets_uvicorn_level():
    assert normalize_argv(["--model", "m", "--log-level", "info"]) == [
        "--model", "m", "--log-level", "INFO", "--uvicorn-log-level", "info",
    ]  # fmt: skip
    assert normalize_argv(["--log-level=debug"]) == ["--log-level=DEBUG", "--uvicorn-log-level", "debug"]
    assert normalize_argv(["--log-level", "info", "--uvicorn-log-level", "error"]) == [
        "--log-level", "INFO", "--uvicorn-log-level", "error",
    ]  # fmt: skip
    assert normalize_argv(["--port", "9001"]) == ["--port", "9001"]


def test_parser_defaults_match_the_original_server():
    from example_trainer.inference.vllm_api_server import make_parser

    args = make_parser().parse_args(normalize_argv(["--model", "m", "--log-level", "info"]))
    assert args.port == 9001 and args.host is None
    assert args.uvicorn_log_level == "info"
    for flag in (
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_ca_certs",
        "enable_ssl_refresh",
        "ssl_cert_reqs",
        "root_path",
    ):
        assert hasattr(args, flag)


# --- adapters ------------------------------------------------------------------------------------
def test_adapter_config_summary_and_errors(tmp_path):
    adapter = tmp_path / "adapter_step_3"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(
        json.dumps({"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"], "base_model_name_or_path": "b"})
    )
    assert read_adapter_config(adapter) == {
        "r": 8,
        "lora_alpha": 16,
        "target_modules": ["q_proj"],
        "base_model": "b",
    }
    with pytest.raises(FileNotFoundError):
        read_adapter_config(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadRequest, match="no adapter_config.json"):
        read_adapter_config(tmp_path / "empty")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "adapter_config.json").write_text("{not json")
    with pytest.raises(BadRequest, match="unreadable"):
        read_adapter_config(tmp_path / "broken")
    assert list_adapter_dirs(tmp_path) == ["adapter_step_3", "broken"]
    assert list_adapter_dirs(tmp_path / "nowhere") == []
