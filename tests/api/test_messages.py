"""Message handling of ``/scored_data`` as pinned by the original's black-box tests."""

from __future__ import annotations

import pytest
import requests

from tests.helpers.api import TIMEOUT, get, group, post_group, register

MESSAGE_ERROR = "Value error, Message must have 'role' and 'content' fields"

ACCEPTED_MESSAGES = {
    "openai_with_reward_none": [
        [
            {"role": "system", "content": "You are a helpful assistant.", "reward": None},
            {"role": "user", "content": "What is the capital of France?", "reward": None},
            {"role": "assistant", "content": "Paris.", "reward": None},
        ]
    ],
    "without_reward": [[{"role": "user", "content": "poem"}, {"role": "assistant", "content": "Waves."}]],
    "mixed_reward_presence": [
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "!", "reward": 0.9}]
    ],
    "tool_role": [[{"role": "tool", "content": "Result: 345", "reward": None}]],
    "multimodal_list_content": [
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What's in this image?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}},
                ],
            }
        ]
    ],
    "dict_content": [[{"role": "user", "content": {"text": "x", "meta": {"nested": {"deeply": [1, 2]}}}}]],
    "extra_keys": [
        [
            {
                "role": "user",
                "content": "Hello",
                "definitely_not_in_typeddict_kwarg": "surprise!",
                "another_extra_field": 42,
                "yet_another_field": {"nested": "data"},
                "extra_bool": True,
                "extra_null": None,
            }
        ]
    ],
    "edge_strings": [[{"role": "user", "content": c} for c in ("12345", "", " ", "0")]],
    "unicode": [
        [
            {"role": "user", "content": "Hello 👋 世界 🌍 مرحبا Здравствуй"},
            {"role": "x", "content": "\n\t\r \" ' \\ /"},
        ]
    ],
    "custom_roles": [[{"role": r, "content": "woof"} for r in ("dog", "cat", "narrator", "USER", "robot")]],
    "large_content": [[{"role": "user", "content": "A" * 10000}, {"role": "assistant", "content": "short"}]],
    "empty_list": [],
    "empty_inner_list": [[]],
}


@pytest.mark.parametrize("messages", list(ACCEPTED_MESSAGES.values()), ids=list(ACCEPTED_MESSAGES))
def test_accepted_messages(url, messages):
    register(url, batch_size=1, max_token_len=10000)
    response = post_group(url, group(1, 3, messages=messages, advantages=[[0.5, 0.3, 0.2]]))
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "received"}
    assert get(url, "/latest_example").json()["messages"] == messages


def test_omitted_messages(url):
    register(url, batch_size=1)
    assert post_group(url, group(1)).json() == {"status": "received"}
    assert get(url, "/latest_example").json()["messages"] is None


@pytest.mark.parametrize(
    "messages",
    [
        [[{"content": "Missing role field"}, {"role": "assistant", "content": "ok"}]],
        [[{"role": "user"}, {"role": "assistant", "content": "ok"}]],
        ["ab"],
        [[1]],
        5,
    ],
    ids=["missing_role", "missing_content", "string_inner", "number_message", "number"],
)
def test_rejected_messages_are_422_with_the_original_message(url, messages):
    register(url, batch_size=1)
    response = post_group(url, group(1, messages=messages))
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail[0]["loc"] == ["body", "messages"]
    assert detail[0]["msg"] == MESSAGE_ERROR
    assert detail[0]["type"] == "value_error"
    assert get(url, "/status").json()["queue_size"] == 0


def test_messages_in_a_list_and_in_batches(url):
    register(url, batch_size=2)
    groups = [
        group(
            1,
            start=i * 10,
            messages=[[{"role": "user", "content": f"Q{i}"}, {"role": "assistant", "content": "A"}]],
        )
        for i in range(2)
    ]
    response = requests.post(f"{url}/scored_data_list", json=groups, timeout=TIMEOUT)
    assert response.json() == {"status": "received", "groups_processed": 2}
    batch = get(url, "/batch").json()["batch"]
    assert [item["messages"][0][0]["content"] for item in batch] == ["Q0", "Q1"]
    assert all(item["messages"][0][1]["role"] == "assistant" for item in batch)


def test_images_pass_through(url):
    register(url, batch_size=1)
    post_group(url, group(1, images=["base64_encoded_image_data"]))
    assert get(url, "/batch").json()["batch"][0]["images"] == ["base64_encoded_image_data"]
