"""T1 tool planning: the tool set, plan parsing, per-turn scoring, whole conversations played turn by
turn with masking, ``process`` and ``evaluate`` with the hub unreachable."""

from __future__ import annotations

import itertools
import re

import pytest
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.envs.data_loading import DatasetError
from atroposlib.testing.scripted_server import launch_scripted_server
from environments.t1_tool_planning.t1_env import T1EnvConfig, T1ToolPlanningEnv, conversations_of, tasks_of
from environments.t1_tool_planning.t1_scoring import PlanError, Reference, plan_calls, score_turn
from environments.t1_tool_planning.t1_tools import T1_TOOLS, TOOL_NAMES
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.multi_turn_runs import episode_responder, tool_call
from tests.helpers.single_turn_runs import offline_env, setup_failure, write_jsonl

SAMPLE = FIXTURES / "t1_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
FLIGHT_RIGHT = [
    "(never sent: the recorded greeting is the conversation's first assistant turn)",
    tool_call("seek_information", question="Which day do you fly?"),
    tool_call(
        "search_flights",
        end_airport_city="denver",
        start_airport_city="Boston ",
        departure_date="June 3rd",
        num_passengers=2.0,
        class_type="economy",
    ),  # fmt: skip
    "You're welcome, have a good trip!",
]


def test_the_fourteen_tools_and_plans_read_as_calls():
    assert len(T1_TOOLS) == 14 and {"search_flights", "save_to_cache", "seek_information"} <= TOOL_NAMES
    plan = 'h = filter_hotels(prior_results=search_hotels("Austin", rating=4), amenities=["pool"])\nprint(h)'
    outer, inner = plan_calls(plan)
    assert outer.name == "filter_hotels" and outer.arguments == {"prior_results": Reference(
        "search_hotels('Austin', rating=4)"), "amenities": ["pool"]}  # fmt: skip
    assert inner.name == "search_hotels" and inner.arguments == {"city": "Austin", "rating": 4}
    (ask,) = plan_calls('seek_information("When?")')
    assert isinstance(ask.arguments["question"], Reference)  # the wording is the model's own
    assert plan_calls("") == [] and plan_calls(None) == []
    with pytest.raises(PlanError, match="not Python"):
        plan_calls("search_hotels(city=")


def test_turn_scores_accept_other_forms_and_refuse_wrong_malformed_and_empty_replies():
    planned = plan_calls(
        'f = search_flights(start_airport_city="Boston", num_passengers=2)\nsave_to_cache("f", f)'
    )
    right = tool_call("save_to_cache", key="my_flights", value="$f") + tool_call(
        "search_flights", num_passengers=2.0, start_airport_city=" boston", airline="any"
    )
    assert score_turn(planned, "<think>plan</think>" + right)["reward"] == 1.0
    wrong_value = tool_call("search_flights", start_airport_city="Austin", num_passengers=2) + tool_call(
        "save_to_cache", key="k", value="v"
    )
    scores = score_turn(planned, wrong_value)
    assert scores["tool_name_f1"] == 1.0 and scores["tool_call_f1"] == 0.5 and scores["reward"] == 0.75
    extra = right + tool_call("search_hotels", city="Boston")  # one call too many: precision 2/3
    assert score_turn(planned, extra)["tool_call_f1"] == pytest.approx(0.8)
    for bad in ["", "I will search now.", '<tool_call>{"name": "search_flights"</tool_call>',
                "<think>unclosed " + right]:  # fmt: skip
        assert score_turn(planned, bad)["reward"] == 0.0, bad
    assert score_turn([], "Glad to help!")["reward"] == 1.0
    assert score_turn([], tool_call("seek_information", question="More?"))["reward"] == 0.0


def test_conversations_group_by_id_and_become_tasks():
    conversations = conversations_of(ROWS, "f")
    assert [len(c) for c in conversations] == [5, 6]
    (hotel,) = tasks_of(conversations[0], "multistep")
    assert [m["role"] for m in hotel.history] == ["system", "assistant", "user"]
    assert [text for text, _ in hotel.user_turns] == ["Find me hotels in Austin from May 10 to May 12.",
                                                       "Only the ones with a pool, please."]  # fmt: skip
    first, second = tasks_of(conversations[0], "single")
    assert [m["role"] for m in second.history] == ["system", "assistant", "user", "assistant", "user"]
    assert second.history[3]["content"] == "I found 12 hotels in Austin for those dates."
    nested = conversations_of([{"conversation": [{"Role": "user", "Filled_Template": "hi"}]}], "g")
    assert tasks_of(nested[0], "multistep")[0].user_turns == (("hi", ()),)
    with pytest.raises(DatasetError, match="g: row 0: a turn lacks field 'Filled_Template'"):
        conversations_of([{"conversation": [{"Role": "user"}]}], "g")
    with pytest.raises(DatasetError, match="f: row 0: missing field 'ID'"):
        conversations_of([{"Role": "user", "Filled_Template": "x"}], "f")


async def test_a_conversation_is_played_turn_by_turn_with_only_the_models_tokens_trained(tiny_model_dir):
    values = {"tokenizer_name": str(tiny_model_dir), "use_wandb": False, "dataset_path": str(SAMPLE),
              "eval_dataset_path": str(SAMPLE), "max_tokens_per_turn": 256}  # fmt: skip
    with launch_scripted_server(
        respond=episode_responder([FLIGHT_RIGHT]), tokenizer=tiny_model_dir
    ) as server:
        env = T1ToolPlanningEnv(
            T1EnvConfig(**values),
            APIServerConfig(base_url=server.base_url, model_name="m", server_type="vllm"),
        )
        await env.setup()
        task = next(t for t in env.test if "Boston" in t.user_turns[0][0])
        session, episode = await env.play(task)
    roles = [m["role"] for m in episode.messages]
    assert roles == ["system", "assistant", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert "seek_information" in episode.messages[3]["content"]  # the model's own reply stays in the history
    assert env.score(session, episode) == 1.0
    assert env.episode_metrics(session, episode) == {
        "tool_call_f1": 1.0,
        "tool_name_f1": 1.0,
        "turns_answered": 1.0,
    }
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    trained = tokenizer.decode([m for m in episode.masks if m != -100], skip_special_tokens=False)
    assert trained == "".join(r + "<|im_end|>" for r in episode.replies)
    assert "Boston to Denver" not in trained and "Where would you like to go" not in trained


async def test_the_hub_set_is_the_default(tiny_model_dir, hub_offline, tmp_path):
    env = offline_env(T1ToolPlanningEnv, tiny_model_dir)
    with pytest.raises(DatasetError, match=r"capitalone/T1: cannot load from the hub"):
        await env.setup()
    only_assistant = write_jsonl(
        tmp_path / "t.jsonl", [{"ID": "a", "Role": "assistant", "Filled_Template": "hi"}]
    )
    await setup_failure(offline_env(T1ToolPlanningEnv, tiny_model_dir, dataset_path=only_assistant),
                        "t.jsonl: no conversation with a user turn")  # fmt: skip


def _planner(right_when=None):
    """Even episodes (or, with ``right_when``, episodes whose prompt holds that text) answer every turn
    with its plan's calls; the others answer in text only."""
    counter = itertools.count()
    plans = {r["Filled_Template"]: plan_calls(r["Filled_Plan"]) for r in ROWS if r["Role"] == "user"}

    def respond(prompt, index):
        text = str(prompt)
        marker = re.search(r"<think>episode (\d+)</think>", text)
        episode = int(marker.group(1)) if marker else next(counter)
        last_user = text.rsplit("<|im_start|>user\n", 1)[1].split("<|im_end|>")[0]
        head = f"<think>episode {episode}</think>"
        if (right_when not in text) if right_when else episode % 2:
            return head + "Sure, one moment."
        calls = plans[last_user]
        body = "".join(
            tool_call(
                c.name, **{k: (v.source if isinstance(v, Reference) else v) for k, v in c.arguments.items()}
            )
            for c in calls
        )
        return head + (body or "Happy to help.")

    return respond


def test_process_writes_token_exact_groups(scripted, tiny_model_dir):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "4", "--env.total_steps", "2",
            "--env.max_tokens_per_turn", "256"]  # fmt: skip
    groups = scripted.process(T1ToolPlanningEnv, args, _planner())
    assert len(groups) == 2
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for group in groups:
        right, wrong = max(group["scores"]), min(group["scores"])
        assert right == 1.0 and sorted(group["scores"]) == [wrong, wrong, 1.0, 1.0]
        for masks, messages in zip(group["masks"], group["messages"], strict=True):
            replies = [m["content"] for m in messages[2:] if m["role"] == "assistant"]
            trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)
            assert trained == "".join(r + "<|im_end|>" for r in replies)


def test_evaluate_reports_exact_metrics(scripted):
    args = [
        "--env.dataset_path",
        SAMPLE,
        "--env.eval_dataset_path",
        SAMPLE,
        "--env.max_tokens_per_turn",
        "256",
    ]
    metrics, samples, _ = scripted.evaluate(T1ToolPlanningEnv, args, _planner(right_when="Austin"))
    # the hotel conversation is planned right (1); the flight one in text only: its last turn, which plans
    # no call, is right (1/3)
    assert len(samples) == 2 and metrics["eval/percent_correct"] == 0.5
    assert metrics["eval/mean_score"] == pytest.approx(2 / 3)
    assert metrics["eval/tool_call_f1"] == pytest.approx(2 / 3) and metrics[
        "eval/tool_name_f1"
    ] == pytest.approx(2 / 3)
    assert metrics["eval/turns_answered"] == 1.0 and metrics["eval/mean_turns"] == 2.5
