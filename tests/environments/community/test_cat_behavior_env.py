"""The cat behaviour environment: the cat's rules, the judge's verdict (unreadable ones counted apart), the
episode with the caretaker, local data, ``process`` and ``evaluate``."""

from __future__ import annotations

import itertools
import re
import threading

import pytest

from environments.community.cat_behavior_env.cat_rules import cat_verdict, rule_broken
from environments.community.cat_behavior_env.cat_server import CatBehaviorEnv, CatSession, GSM8kEnv
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import offline_env, setup_failure, write_jsonl

SAMPLE = FIXTURES / "community" / "cat_behavior_env" / "scenarios.jsonl"


@pytest.mark.parametrize(
    "reply",
    [
        "Mew! (Looks up at you)",
        "~Silent~ (Rubs against your legs)",
        "<think>Thirsty.</think>Meeeow!! (Paws at the empty water bowl)\nPurrr. (Kneads the blanket)",
        "Mrrp-mrrp! (Trots to the kitchen)",
        "HISS! (Stares at the litter box)",
    ],
)
def test_cat_replies_keeping_the_rules(reply):
    assert rule_broken(reply) is None


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("Meow! Please give me water", "not 'Sound! (context)'"),  # English speech
        ("Meow! (I want water)", "the cat speaks"),  # speech hidden in the context
        ('Meow! (Says "water")', "the cat speaks"),
        ("Water! (Looks at the bowl)", "not a cat sound"),
        ("Meow 😺 (Looks up)", "emoji"),
        ("Mew! (a)\nMew! (b)\nMew! (c)\nMew! (d)", "more than three lines"),
        ("<think>Mew! (Looks up at you)</think>", "no cat communication"),  # only inside the reasoning
        ("<think>Mew! (Looks up at you)", "malformed"),
        ("", "no cat communication"),
    ],
)
def test_cat_replies_breaking_the_rules(reply, why):
    assert why in (rule_broken(reply) or "")


@pytest.mark.parametrize(
    ("judgement", "verdict"),
    [
        ("\\boxed{purr}", 1.0),
        ("<think>All needs met.</think>\\boxed{Purr}", 1.0),
        ("\\boxed{\\text{meow}}", 0.0),
        ("The caretaker missed the litter box. \\boxed{meow}", 0.0),
        ("not a purr", None),  # no verdict, never a win
        ("\\boxed{purr} or \\boxed{meow}", None),
        ("\\boxed{maybe}", None),
        ("purr", None),
        ("", None),
    ],
)
def test_judge_verdicts(judgement, verdict):
    assert cat_verdict(judgement) == verdict


class _Caretaker:
    def __init__(self):
        self.chats = []

    async def chat_completion(self, **kwargs):
        from types import SimpleNamespace

        self.chats.append(kwargs["messages"])
        return SimpleNamespace(
            choices=[SimpleNamespace(message=SimpleNamespace(content="I refill the bowl."))]
        )


async def test_a_session_talks_to_the_caretaker_and_stops_on_a_broken_rule():
    caretaker = _Caretaker()
    session = CatSession("Your water bowl is empty.", caretaker, {"max_tokens": 32}, 2)
    assert "You are a cat." in session.messages[0]["content"] and "Kneading" in session.messages[0]["content"]
    first = await session.step("<think>thirsty</think>Mew! (Paws at the bowl)", 0)
    assert not first.done and first.messages == [{"role": "user", "content": "I refill the bowl."}]
    assert caretaker.chats[-1][1] == {"role": "user", "content": "Mew! (Paws at the bowl)"}  # no reasoning
    last = await session.step("Purr. (Drinks)", 1)
    assert (
        last.done and len(caretaker.chats) == 2 and "Caretaker: I refill the bowl." in session.conversation()
    )
    broken = CatSession("s", caretaker, {}, 5)
    feedback = await broken.step("I am thirsty", 0)
    assert feedback.done and feedback.reward == -1.0 and broken.broken and len(caretaker.chats) == 2


async def test_data_and_the_original_settings(tiny_model_dir, tmp_path):
    env = offline_env(CatBehaviorEnv, tiny_model_dir)
    await env.setup()
    assert len(env.train) == 16 and env.test == env.train
    local = offline_env(
        CatBehaviorEnv, tiny_model_dir, dataset_path=str(SAMPLE), eval_dataset_path=str(SAMPLE)
    )
    await local.setup()
    assert len(local.train) == 3 and local.test == local.train
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"scenario": "x"}, {"need": "y"}])
    await setup_failure(
        offline_env(CatBehaviorEnv, tiny_model_dir, dataset_path=bad), "row 1: missing field 'scenario'"
    )
    config, server = CatBehaviorEnv.config_init()
    assert (config.group_size, config.max_turns, config.max_token_length) == (8, 5, 2048)
    assert server.model_name == "NousResearch/DeepHermes-3-Llama-3-3B-Preview" and GSM8kEnv is CatBehaviorEnv
    separate = offline_env(CatBehaviorEnv, tiny_model_dir, caretaker_base_url="http://127.0.0.1:9/v1")
    assert separate.caretaker is not separate.server and env.caretaker is env.server


_EPISODE = re.compile(r"<think>episode (\d+)</think>")
CAT_LINES = [
    "Mrrp! (Paws at the empty water bowl)",
    "Meow! (Sits by the door)",
    "I am thirsty, give me water",
]


def cat_caretaker_and_judge(garbage_when: str = ""):
    """Cat episode ``k`` (in order of arrival) says ``CAT_LINES[k % 3]`` (the last breaks the rules); the
    caretaker refills the bowl; the judge purrs when the cat pointed at the water bowl, else meows, and
    answers garbage when the conversation contains ``garbage_when``."""
    counter = itertools.count()
    lock = threading.Lock()

    def respond(prompt, index):
        text = "\n".join(m["content"] for m in prompt) if isinstance(prompt, list) else str(prompt)
        if "The conversation is over." in text:
            if garbage_when and garbage_when in text:
                return "Hard to say, really."
            return (
                "<think>Checking.</think>\\boxed{purr}"
                if "Paws at the empty water bowl" in text
                else "\\boxed{meow}"
            )
        if "You are the caretaker" in text:
            return "I refill your water and clean the litter box."
        found = _EPISODE.search(text)
        with lock:
            episode = int(found.group(1)) if found else next(counter)
        return f"<think>episode {episode}</think>{CAT_LINES[episode % 3]}"

    return respond


def test_process_scores_purr_meow_and_broken_rules(scripted):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "3", "--env.total_steps", "2",
            "--env.max_num_workers", "1", "--env.max_turns", "2"]  # fmt: skip
    groups = scripted.process(CatBehaviorEnv, args, cat_caretaker_and_judge())
    assert len(groups) == 2
    for group in groups:
        assert sorted(group["scores"]) == [-1.0, 0.0, 1.0]
        for messages, masks in zip(group["messages"], group["masks"], strict=True):
            assert messages[1]["role"] == "user" and masks[0] == -100
            assert [m["role"] for m in messages[2:]] in (["assistant"], ["assistant", "user", "assistant"])


def test_evaluate_counts_unreadable_verdicts_apart(scripted):
    evaluation = scripted.evaluation(
        CatBehaviorEnv,
        ["--env.dataset_path", SAMPLE, "--env.eval_dataset_path", SAMPLE, "--env.max_turns", "2",
         "--env.max_eval_workers", "1"],
        cat_caretaker_and_judge(garbage_when="door"),
    )  # fmt: skip
    metrics, samples = evaluation.metrics, evaluation.samples
    assert len(samples) == 2  # the episode whose verdict could not be read is left out
    assert metrics["eval/percent_correct"] == 0.5 and metrics["eval/mean_score"] == 0.0
    assert metrics["eval/judge_failures"] == 1.0 and metrics["eval/judge_failure_rate"] == 0.5
    assert sorted(s["rule_broken"] is not None for s in samples) == [False, True]
