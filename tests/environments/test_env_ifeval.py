"""The instruction-following (IFEval) environment: IFEval and RLVR-IFeval rows, scoring, ``process``, ``evaluate``."""

from __future__ import annotations

from typing import Any

import pytest

from atroposlib.envs.data_loading import DatasetError
from environments.instruction_following_algorithm_environment import (
    InstructionFollowingEnv,
    evaluation_metrics,
)
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import (
    check_groups,
    offline_env,
    prompt_text,
    setup_failure,
    write_jsonl,
)

IFEVAL = FIXTURES / "ifeval_sample.jsonl"
RLVR = FIXTURES / "rlvr_ifeval_sample.jsonl"

SUNRISE = (
    "The sun lifts slowly out of the sea, painting the calm water in shades of gold and rose while gulls "
    "circle above the harbour and the first fishing boats head out into the bright morning air."
)
GERMAN = (
    "Der Himmel ist blau, weil das Sonnenlicht in der Luft gestreut wird. Das kurzwellige blaue Licht wird "
    "dabei viel stärker gestreut als das rote Licht, deshalb sehen wir überall am Himmel die blaue Farbe."
)
# Per prompt (a phrase of it): a reply following every instruction, one following none, and for some
# prompts one that follows them only loosely (a chatty first line, markdown emphasis).
REPLIES: dict[str, dict[str, str]] = {
    "lost cat": {
        "good": "Hello neighbour! Our grey cat Miso has been missing since Monday. Please check your shed and "
        "garden. Is there anything else I can help with?",
        "bad": "Hello neighbour, our grey cat Miso is missing. Thanks!",
        "loose": "Sure, here is the note:\nOur grey cat Miso has been missing since Monday.\n"
        "Is there anything else I can help with?",
    },
    "poem about autumn": {
        "good": "the golden leaves drift slowly down to the ground\nthe harvest moon rises over the quiet fields\n"
        "and the farmers rest after a long and happy day",
        "bad": "The golden leaves drift slowly down to the ground while the wind sings.",
        "loose": "Here is my poem:\nthe golden leaves drift slowly down to the ground\n"
        "the harvest moon rises over the quiet fields and the farmers rest",
    },
    "sunrise over the sea": {
        "good": f'"{SUNRISE}"',
        "bad": "The sun rises over the sea.",
        "loose": f'Here it is:\n"{SUNRISE}"',
    },
    "paperclip": {
        "good": "<<Paperclip Uses>>\n* Hold papers together\n* Reset a small device\n* Clean a narrow groove",
        "bad": "Paperclip uses:\n* Hold papers together\n* Reset a small device",
    },
    "job offer": {
        "good": "Dear [name],\n\nI am delighted to accept the offer and can start on [date].\n\nBest regards\n\n"
        "P.S. I look forward to meeting the team.",
        "bad": "Dear Ms Lee, I accept the offer. Best regards.",
    },
    "sky is blue": {
        "good": GERMAN,
        "bad": "The sky is blue because air scatters blue sunlight more than red.",
    },
    "Pluto": {"good": "My answer is no.", "bad": "My answer is yes. My answer is no."},
    "bakery": {"good": "Golden Crust\n******\nRise and Shine Bakery", "bad": "Golden Crust"},
    "lighthouse keeper": {
        "good": "The keeper lit the lantern at dusk. The lantern swung in the wind. By dawn the lantern was dark.",
        "bad": "The keeper lit the lamp at dusk.",
    },
    "favourite meal": {
        "good": "my favourite meal is a warm bowl of tomato soup with fresh bread and a little butter on the side.",
        "bad": "My favourite meal is Tomato Soup.",
    },
    "Cinderella": {
        "good": "A kind girl meets a prince at a ball, loses a slipper, and he finds her again.",
        "bad": "A kind girl is treated badly by her stepfamily, but with help from a fairy godmother she goes to "
        "the royal ball, dances with the prince and loses a glass slipper there.",
    },
    "brew tea": {
        "good": "Boil fresh water and pour it over the leaves.\n\nFinally, wait three minutes and remove the leaves.",
        "bad": "Boil water, pour it, wait and drink.",
    },
}


def _replies(prompt: Any) -> dict[str, str]:
    text = prompt_text(prompt)
    return next(replies for phrase, replies in REPLIES.items() if phrase in text)


def good_or_bad(prompt: Any, index: int) -> str:
    """Even choices follow every instruction (after a think block), odd ones follow none."""
    replies = _replies(prompt)
    return "<think>Check each instruction.</think>\n" + replies["good"] if index % 2 == 0 else replies["bad"]


# Evaluation replies: which kind each prompt gets.
EVAL_PLAN = {
    "lost cat": "loose",
    "poem about autumn": "loose",
    "sunrise over the sea": "loose",
    "paperclip": "good",
    "job offer": "good",
    "sky is blue": "bad",
    "Pluto": "good",
    "bakery": "bad",
}


def planned(prompt: Any, index: int) -> str:
    text = prompt_text(prompt)
    phrase = next(phrase for phrase in EVAL_PLAN if phrase in text)
    return REPLIES[phrase][EVAL_PLAN[phrase]]


# The tiny tokenizer's think and tool-call tags are plain (non-special) tokens, as in chat models.
def _env(tiny_model_dir, **overrides) -> InstructionFollowingEnv:
    return offline_env(
        InstructionFollowingEnv, tiny_model_dir, **{"group_size": 4, "dataset_path": str(IFEVAL), **overrides}
    )


async def _item(env: InstructionFollowingEnv, phrase: str):
    return next(item for item in env.train if phrase in item.prompt)


# -- data -------------------------------------------------------------------------------------------------


async def test_setup_reads_ifeval_rows_with_nulls(tiny_model_dir):
    env = _env(tiny_model_dir)
    await env.setup()
    assert len(env.train) == len(env.test) == 8
    item = await _item(env, "lost cat")
    assert item.key == 1001
    assert item.instruction_ids == ["punctuation:no_comma", "startend:end_checker"]
    assert item.instructions[1].arguments.end_phrase == "Is there anything else I can help with?"
    messages = env.prompt_messages(item)
    assert messages[0]["role"] == "system" and messages[1] == {"role": "user", "content": item.prompt}


async def test_rlvr_rows_load_as_instructions(tiny_model_dir):
    env = _env(tiny_model_dir, dataset_path=str(RLVR), eval_dataset_path=str(IFEVAL))
    await env.setup()
    assert len(env.train) == 4 and len(env.test) == 8
    lantern = await _item(env, "lighthouse keeper")
    assert lantern.instruction_ids == ["keywords:frequency"]
    assert lantern.instructions[0].arguments.relation == "exactly"
    tea = await _item(env, "brew tea")
    assert tea.instruction_ids == ["length_constraints:nth_paragraph_first_word"]
    assert env.score_reply(REPLIES["brew tea"]["good"], tea) == 1.0


async def test_default_data_is_the_hub_and_never_a_stand_in(tiny_model_dir, hub_offline):
    """The original replaced a data set it could not load by two dummy prompts and trained on them;
    here the hub loader's failure stops the environment with one line."""
    await setup_failure(
        _env(tiny_model_dir, dataset_path=None), "allenai/RLVR-IFeval: cannot load from the hub"
    )


async def test_default_sources_train_on_rlvr_and_evaluate_on_ifeval(tiny_model_dir, monkeypatch):
    import environments.instruction_following_algorithm_environment as module

    hub = {("allenai/RLVR-IFeval", "train"): read_jsonl(RLVR), ("google/IFEval", "train"): read_jsonl(IFEVAL)}
    asked = []

    def fake_hub_split(name, split, config=None):
        asked.append((name, split, config))
        return lambda: hub[(name, split)]

    monkeypatch.setattr(module, "hub_split", fake_hub_split)
    env = _env(tiny_model_dir, dataset_path=None)
    await env.setup()
    assert asked == [("allenai/RLVR-IFeval", "train", None), ("google/IFEval", "train", None)]
    assert len(env.train) == 4 and len(env.test) == 8


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"key": 1, "prompt": "Hi", "kwargs": [{}]}, "row 1: missing field 'instruction_id_list'"),
        (
            {"key": 1, "prompt": "Hi", "instruction_id_list": ["punctuation:no_comma"]},
            "row 1: missing field 'kwargs'",
        ),
        (
            {"key": 1, "prompt": "Hi", "instruction_id_list": ["keywords:rhyme"], "kwargs": [{}]},
            "row 1: unknown instruction id 'keywords:rhyme'",
        ),
        (
            {
                "key": 1,
                "prompt": "Hi",
                "instruction_id_list": ["keywords:frequency"],
                "kwargs": [{"keyword": "a"}],
            },
            "row 1: instruction 'keywords:frequency': argument 'frequency': missing",
        ),
        (
            {
                "messages": [{"role": "user", "content": "Hi"}],
                "ground_truth": '{"func_name": "verify_rhyme"}',
            },
            "row 1: unknown RLVR verifier 'verify_rhyme'",
        ),
        ({"ground_truth": '{"func_name": "validate_title"}'}, "row 1: missing field 'messages'"),
    ],
)
async def test_bad_rows_name_the_file_row_and_problem(tiny_model_dir, tmp_path, row, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [read_jsonl(IFEVAL)[0], row])
    with pytest.raises(DatasetError, match=f"{path}: {message}"):
        await _env(tiny_model_dir, dataset_path=path).setup()


async def test_an_empty_file_is_an_error(tiny_model_dir, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DatasetError, match="no rows"):
        await _env(tiny_model_dir, dataset_path=str(empty)).setup()


def test_process_reports_an_unknown_instruction_in_one_line(scripted, tmp_path):
    row = {"key": 7, "prompt": "Hi", "instruction_id_list": ["keywords:rhyme"], "kwargs": [{}]}
    path = write_jsonl(tmp_path / "bad.jsonl", [row])
    assert f"{path}: row 0: unknown instruction id 'keywords:rhyme'" in scripted.failure(
        InstructionFollowingEnv, path
    )


# -- scoring ----------------------------------------------------------------------------------------------


async def test_reward_is_the_share_of_instructions_followed(tiny_model_dir):
    env = _env(tiny_model_dir)
    await env.setup()
    item = await _item(env, "lost cat")
    good, bad = REPLIES["lost cat"]["good"], REPLIES["lost cat"]["bad"]
    assert env.score_reply(good, item) == 1.0
    assert env.score_reply("<think>Plan: no commas, then the phrase.</think>\n\n" + good, item) == 1.0
    assert env.score_reply(bad, item) == 0.0
    assert env.score_reply(good.replace("Monday.", "Monday, sadly."), item) == 0.5  # one of two
    assert env.score_reply(REPLIES["lost cat"]["loose"], item) == 0.5  # loose passes do not count in training


async def test_hacks_score_nothing(tiny_model_dir):
    env = _env(tiny_model_dir)
    await env.setup()
    cat = await _item(env, "lost cat")
    good = REPLIES["lost cat"]["good"]
    assert env.score_reply("", cat) == 0.0  # an empty reply trivially has no commas
    assert (
        env.score_reply("<think>" + good + "</think>", cat) == 0.0
    )  # the answer only inside the think block
    assert env.score_reply("<think>" + good, cat) == 0.0  # the think block never closes
    assert env.score_reply("<think>a</think>" + good + "<think>b</think>", cat) == 0.0  # two think blocks
    pluto = await _item(env, "Pluto")
    assert env.score_reply("My answer is yes. My answer is no. My answer is maybe.", pluto) == 0.0  # a hedge
    assert env.score_reply("My answer is maybe.", pluto) == 1.0


def test_evaluation_metrics_are_ifevals_four_accuracies():
    samples = [{"strict": [True, False], "loose": [True, True]}, {"strict": [True], "loose": [True]}]
    assert evaluation_metrics(samples) == {
        "eval/prompt_level_strict_acc": 0.5,
        "eval/inst_level_strict_acc": 2 / 3,
        "eval/prompt_level_loose_acc": 1.0,
        "eval/inst_level_loose_acc": 1.0,
    }


def test_the_replies_of_these_tests_are_what_they_claim(tiny_model_dir):
    """Every scripted 'good' reply follows all its instructions and every 'bad' one none of them."""
    import asyncio

    env = _env(tiny_model_dir, dataset_path=str(RLVR), eval_dataset_path=str(IFEVAL))
    asyncio.run(env.setup())
    for item in [*env.train, *env.test]:
        replies = _replies([{"role": "user", "content": item.prompt}])
        assert env.score_reply(replies["good"], item) == 1.0, item.prompt
        assert env.score_reply(replies["bad"], item) == 0.0, item.prompt


# -- process and evaluate ----------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [IFEVAL, RLVR], ids=["ifeval", "rlvr"])
def test_process_with_the_local_fixture(scripted, data):
    args = ["--env.dataset_path", data, "--env.group_size", 4, "--env.total_steps", 3]
    groups = scripted.process(InstructionFollowingEnv, args, good_or_bad)
    check_groups(groups, 3, [0.0, 0.0, 1.0, 1.0])
    for group in groups:
        for messages, score in zip(group["messages"], group["scores"], strict=True):
            assert messages[0]["role"] == "system" and messages[-1]["role"] == "assistant"
            assert messages[-1]["content"].startswith("<think>") is (score == 1.0)


def test_evaluate_reports_strict_and_loose_accuracy(scripted):
    metrics, samples, printed = scripted.evaluate(
        InstructionFollowingEnv, ["--env.dataset_path", IFEVAL], planned
    )
    # Strict: 3 of 8 prompts, 8 of 13 instructions; loose adds the three chatty or emphasised replies.
    assert metrics == {
        "eval/prompt_level_strict_acc": 3 / 8,
        "eval/inst_level_strict_acc": 8 / 13,
        "eval/prompt_level_loose_acc": 6 / 8,
        "eval/inst_level_loose_acc": 11 / 13,
    }
    assert "prompt_level_strict_acc=0.3750" in printed and "inst_level_loose_acc=0.8462" in printed
    by_key = {sample["key"]: sample for sample in samples}
    assert by_key[1001]["strict"] == [False, True] and by_key[1001]["loose"] == [True, True]
    assert by_key[1006]["instruction_id_list"] == ["language:response_language"]


# -- 0.4.0's curriculum and split ------------------------------------------------------------------------


async def _drain(env: InstructionFollowingEnv, scores_of) -> list[str]:
    """Ask for items and report each one's group scores (``scores_of(item)``); the prompts in order."""
    seen = []
    for _ in range(20):
        item = await env.get_next_item()
        seen.append(item.prompt)
        env.on_group_scored(item, scores_of(item))
    return seen


async def test_solved_items_leave_the_queue_until_every_item_is_solved(tiny_model_dir):
    env = _env(tiny_model_dir)
    await env.setup()
    hard = {item.prompt for item in env.train[:2]}
    # hard items: one full success in four (average 0.25); the others: average 0.8 (above 0.75: solved)
    order = await _drain(
        env, lambda item: [0.0, 0.0, 0.0, 1.0] if item.prompt in hard else [1.0, 1.0, 1.0, 0.2]
    )
    assert order[:8] == [item.prompt for item in env.train]
    assert set(order[8:]) == hard  # the solved six left the queue, the two unsolved come round again
    assert len(env.solved_items) == 6

    single = _env(tiny_model_dir, solve_on_single_correct=True)
    await single.setup()
    order = await _drain(single, lambda item: [0.0, 0.0, 0.0, 1.0] if item.prompt in hard else [0.5] * 4)
    unsolved = set(order[:8]) - hard
    assert set(order[8:16]) == unsolved  # one reply following everything solves the hard items
    assert not single.is_solved([0.5, 0.5, 0.5, 0.5]) and single.is_solved([0.0, 1.0])
    assert env.is_solved([0.95] * 4) and not env.is_solved([0.0, 1.0, 0.0, 0.0])

    everything = _env(tiny_model_dir)
    await everything.setup()
    order = await _drain(everything, lambda item: [1.0] * 4)
    assert order[8:16] == order[:8]  # all solved: the queue starts again with every item


async def test_test_set_ratio_holds_training_rows_out_and_the_seed_shuffles(tiny_model_dir):
    env = _env(tiny_model_dir, test_set_ratio=0.25, dataset_shuffle_seed=3)
    await env.setup()
    assert len(env.train) == 6 and len(env.test) == 2
    assert not {i.prompt for i in env.train} & {i.prompt for i in env.test}
    other = _env(tiny_model_dir, dataset_shuffle_seed=4)
    await other.setup()
    same = _env(tiny_model_dir, dataset_shuffle_seed=4)
    await same.setup()
    assert [i.key for i in other.train] == [i.key for i in same.train]
    seeded = _env(tiny_model_dir, dataset_shuffle_seed=3)
    await seeded.setup()
    assert [i.key for i in seeded.train] != [i.key for i in other.train]
    assert InstructionFollowingEnv.env_config_cls(dataset_config_name="x").dataset_config == "x"


def test_groups_above_max_group_average_are_not_trained(scripted, tmp_path):
    config = tmp_path / "if.yaml"
    config.write_text(
        f"env:\n  dataset_path: {IFEVAL}\n  group_size: 4\n  total_steps: 1\n"
        "  max_group_average_for_training: 0.4\n  process_max_consecutive_failures: 2\n"
    )
    with pytest.raises(AssertionError, match="items in a row produced no usable group"):
        scripted.command(InstructionFollowingEnv, "process", ["--config", config], good_or_bad)
    config.write_text(config.read_text().replace("0.4\n", "0.5\n"))  # average 0.5 is not above 0.5
    scripted.command(InstructionFollowingEnv, "process", ["--config", config], good_or_bad)
    check_groups(read_jsonl(tmp_path / "data" / "instruction_following.jsonl"), 1, [0.0, 0.0, 1.0, 1.0])
