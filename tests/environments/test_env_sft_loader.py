"""The SFT loader: row formats and their masks, bad rows, pacing, ``process`` and ``serve`` (groups of one)."""

from __future__ import annotations

import pytest

from environments.sft_loader_server import DatasetFormat, SFTEnv
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import offline_env, setup_failure, write_jsonl

SAMPLE = FIXTURES / "sft_sharegpt_sample.jsonl"
TWO_TURNS = next(r for r in read_jsonl(SAMPLE) if len(r["conversations"]) == 5)


def _env(tiny_model_dir, **overrides) -> SFTEnv:
    values = {"dataset_path": str(SAMPLE), "dataset_format": DatasetFormat.SHAREGPT_FORMAT,
              "dataset_column_name": "conversations", **overrides}  # fmt: skip
    return offline_env(SFTEnv, tiny_model_dir, **values)


def _trained_text(env: SFTEnv, tokens: list[int], masks: list[int]) -> str:
    assert len(tokens) == len(masks)
    assert all(m == t for m, t in zip(masks, tokens, strict=True) if m != -100)
    return env.tokenizer.decode([t for t, m in zip(tokens, masks, strict=True) if m != -100])


async def test_a_chat_trains_every_assistant_answer_only(tiny_model_dir):
    env = _env(tiny_model_dir)
    group = await env.format_item(TWO_TURNS)
    assert group["scores"] == [1.0] and group["overrides"] == [{"sft": True}]
    assert group["advantages"] == [[1.0] * len(group["tokens"][0])]
    trained = _trained_text(env, group["tokens"][0], group["masks"][0])
    assert "11." in trained and "23." in trained
    assert "prime" not in trained and "briefly" not in trained and "above 20" not in trained
    assert group["messages"][0][0] == {"role": "system", "content": "You answer briefly."}


async def test_last_step_and_unmasked_chats(tiny_model_dir):
    last = _env(tiny_model_dir, mask_everything_but_last_step=True)
    group = await last.format_item(TWO_TURNS)
    trained = _trained_text(last, group["tokens"][0], group["masks"][0])
    assert "23." in trained and "11." not in trained
    everything = _env(tiny_model_dir, mask_everything_but_assistant_answer=False)
    group = await everything.format_item(TWO_TURNS)
    assert group["masks"][0] == group["tokens"][0]


async def test_oai_completion_and_prefixed_rows(tiny_model_dir, tmp_path):
    oai = _env(tiny_model_dir, dataset_format=DatasetFormat.OAI_FORMAT, dataset_column_name="messages")
    chat = {
        "messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello there."}]
    }
    group = await oai.format_item(chat)
    assert _trained_text(oai, group["tokens"][0], group["masks"][0]).startswith("Hello there.")
    text = _env(tiny_model_dir, dataset_format=DatasetFormat.COMPLETION, dataset_column_name="text")
    group = await text.format_item({"text": "Plain text to learn."})
    assert group["masks"] == group["tokens"] and "messages" not in group
    prefixed = _env(tiny_model_dir, dataset_format=DatasetFormat.PREFIXED_COMPLETION, dataset_column_name="text",
                    prefix_column_name="prompt")  # fmt: skip
    group = await prefixed.format_item({"prompt": "Question: 2+2? Answer:", "text": " four"})
    assert _trained_text(prefixed, group["tokens"][0], group["masks"][0]).strip() == "four"
    assert group["masks"][0][0] == -100


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            [{"conversations": [{"from": "human", "value": "x"}]}, {"convs": []}],
            "row 1: missing field 'conversations'",
        ),
        (
            [{"conversations": [{"from": "robot", "value": "x"}]}],
            "row 0: field 'conversations': each turn needs",
        ),
        ([{"conversations": "hello"}], "row 0: field 'conversations': not a non-empty list"),
        ([], "no rows"),
    ],
)
async def test_bad_rows_name_file_row_and_field(tiny_model_dir, tmp_path, rows, message):
    path = write_jsonl(tmp_path / "sft.jsonl", rows)
    error = await setup_failure(_env(tiny_model_dir, dataset_path=path), message)
    assert path in str(error)


async def test_prefix_format_needs_its_column_and_the_hub_is_the_default(tiny_model_dir, hub_offline):
    env = _env(tiny_model_dir, dataset_format=DatasetFormat.PREFIXED_COMPLETION)
    await setup_failure(env, "needs --env.prefix_column_name")
    env_config, _ = SFTEnv.config_init()
    assert (
        env_config.dataset_name == "AlignmentLab-AI/open-instruct-sharegpt"
        and env_config.max_sft_per_step == 8
    )
    hub = offline_env(SFTEnv, tiny_model_dir, dataset_name=env_config.dataset_name)
    await setup_failure(hub, "AlignmentLab-AI/open-instruct-sharegpt: cannot load from the hub")


def test_rows_fill_the_queue_up_to_the_cap(tiny_model_dir):
    env = _env(tiny_model_dir, batch_size=4, max_batches_offpolicy=3, max_sft_per_step=-1)
    env.status_dict = {"current_step": 1, "queue_size": 5}
    assert env.rows_to_send() == 3 * 4 - 5
    env.config.max_sft_per_step = 2
    assert env.rows_to_send() == 2
    env.status_dict["queue_size"] = 40
    assert env.rows_to_send() == 0


def _no_sampling(prompt, index):
    raise AssertionError("the SFT loader never samples")


def test_process_writes_groups_of_one(scripted):
    args = ["--env.dataset_path", SAMPLE, "--env.total_steps", "4"]
    requests = scripted.command(SFTEnv, "process", args, _no_sampling)
    assert not [r for r in requests if r["path"] != "/health"]
    groups = read_jsonl(scripted.tmp_path / "data" / "sft_loader.jsonl")
    assert len(groups) == 4
    for group in groups:
        assert group["scores"] == [1.0] and group["overrides"] == [{"sft": True}]
        assert group["group_overrides"] == {"sft": True, "group_size": 1}
        assert len(group["tokens"][0]) == len(group["masks"][0]) and group["masks"][0][0] == -100


def test_serve_sends_rows_to_the_api(scripted, api):
    served = scripted.serve(SFTEnv, ["--env.dataset_path", SAMPLE], _no_sampling, api)
    assert served.registration["group_size"] == 1
    group = served.group
    assert group["scores"] == [1.0] and group["overrides"] == [{"sft": True}]
    assert any(m != -100 for m in group["masks"][0])
    assert "sending" in served.log and "SFT rows" in served.log
