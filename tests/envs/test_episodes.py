"""Multi-turn episodes through ManagedServer: ending rules, token-exact masking, turn-level advantages."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from atroposlib.envs.episodes import (
    END_CONTEXT,
    END_DONE,
    END_LENGTH,
    END_TURN_LIMIT,
    Episode,
    EpisodeTrackingError,
    EpisodeTurn,
    Feedback,
    episodes_to_group,
    run_episode,
    token_advantages,
    turn_level_advantages,
)
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.server_manager import ServerManager
from atroposlib.testing.scripted_server import launch_scripted_server, scripted_logprob
from tests.helpers.multi_turn_runs import turn_of

OPENING = [{"role": "system", "content": "Play along."}, {"role": "user", "content": "Start."}]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


@pytest.fixture
async def scripted(tiny_model_dir):
    def respond(prompt, index):
        return f"<think>turn {turn_of(prompt)}</think><tool_call>move {turn_of(prompt)}</tool_call>"

    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        manager = ServerManager(
            [APIServerConfig(base_url=server.base_url, model_name="m", server_type="vllm")]
        )
        yield manager
        await manager.close()


class Counter:
    """A session that answers every reply with an observation and ends at ``done_at`` (if set)."""

    def __init__(self, done_at=None, reward=1.0):
        self.done_at = done_at
        self.reward = reward
        self.replies = []

    async def step(self, reply, turn):
        self.replies.append(reply)
        if self.done_at is not None and turn >= self.done_at:
            return Feedback(done=True, reward=10.0)
        return Feedback(messages=[{"role": "user", "content": f"observation {turn}"}], reward=self.reward)


@pytest.fixture
def play(scripted, tokenizer):
    """``play(step, max_turns=N, ...)`` runs one episode from ``OPENING`` against the scripted server.

    ``step`` defaults to a fresh :class:`Counter`'s, ``tokenizer`` to the tiny model's; replies get at most
    64 tokens each and the sequence 4096 unless the test says otherwise.
    """

    async def play(
        step=None, *, max_turns, tokenizer=tokenizer, max_tokens_per_turn=64, max_total_tokens=4096
    ) -> Episode:
        return await run_episode(
            scripted,
            tokenizer,
            OPENING,
            step or Counter().step,
            max_turns=max_turns,
            max_tokens_per_turn=max_tokens_per_turn,
            max_total_tokens=max_total_tokens,
        )

    return play


def _unmasked_runs(masks):
    runs, current = [], []
    for m in masks:
        if m == -100:
            if current:
                runs.append(current)
            current = []
        else:
            current.append(m)
    if current:
        runs.append(current)
    return runs


async def test_episode_ends_when_the_session_says_so(play):
    session = Counter(done_at=2)
    episode = await play(session.step, max_turns=10)
    assert episode.end_reason == END_DONE
    assert len(episode.turns) == 3 and episode.turn_rewards == [1.0, 1.0, 10.0]
    # Sessions get the reply with its special-token text (<think>, <tool_call> are special in this tokenizer).
    assert session.replies[1] == "<think>turn 1</think><tool_call>move 1</tool_call>"
    assert [m["role"] for m in episode.messages] == ["system", "user"] + ["assistant", "user"] * 2 + [
        "assistant"
    ]
    assert episode.discounted_return(0.5) == pytest.approx(1.0 + 0.5 + 0.25 * 10.0)


async def test_turn_limit_ends_the_episode(play):
    episode = await play(max_turns=3)
    assert episode.end_reason == END_TURN_LIMIT and len(episode.turns) == 3
    # The last observation is not part of the sequence: it ends with the model's last reply.
    assert episode.masks[-1] != -100


async def test_only_the_models_tokens_are_trained_with_the_servers_logprobs(play, tokenizer):
    episode = await play(max_turns=3)
    assert len(episode.tokens) == len(episode.masks) == len(episode.logprobs)
    runs = _unmasked_runs(episode.masks)
    assert len(runs) == 3
    for turn, (run, t) in enumerate(zip(runs, episode.turns, strict=True)):
        text = tokenizer.decode(run, skip_special_tokens=False)
        assert text == f"<think>turn {turn}</think><tool_call>move {turn}</tool_call><|im_end|>"
        assert episode.tokens[t.start : t.end] == run
        # The scripted server's logprob of each generated token at its output position.
        assert episode.logprobs[t.start : t.end] == [scripted_logprob(tok, j) for j, tok in enumerate(run)]
    masked = [tok for tok, m in zip(episode.tokens, episode.masks, strict=True) if m == -100]
    prompt_text = tokenizer.decode(masked, skip_special_tokens=False)
    assert "observation 0" in prompt_text and "observation 1" in prompt_text and "Play along." in prompt_text
    assert "turn 0" not in prompt_text
    assert all(lp == 1.0 for lp, m in zip(episode.logprobs, episode.masks, strict=True) if m == -100)


async def test_a_reply_cut_at_its_budget_ends_the_episode(play):
    session = Counter()
    episode = await play(session.step, max_turns=5, max_tokens_per_turn=3)
    assert episode.end_reason == END_LENGTH and len(episode.turns) == 1 and session.replies == []
    assert episode.turns[0].finish_reason == "length" and episode.turns[0].end - episode.turns[0].start == 3


async def test_the_sequence_budget_ends_the_episode(play, tokenizer):
    opening_len = len(tokenizer.apply_chat_template(OPENING, add_generation_prompt=True))
    episode = await play(max_turns=50, max_total_tokens=opening_len + 60)
    assert episode.end_reason in (END_CONTEXT, END_LENGTH)
    assert len(episode.tokens) <= opening_len + 60 + 16
    empty = await play(max_turns=5, max_total_tokens=4)
    assert empty.end_reason == END_CONTEXT and empty.turns == [] and empty.tokens == []


async def test_a_failing_session_step_propagates(play):
    async def broken(reply, turn):
        raise RuntimeError("game crashed")

    with pytest.raises(RuntimeError, match="game crashed"):
        await play(broken, max_turns=3)
    with pytest.raises(ValueError, match="max_turns"):
        await play(broken, max_turns=0, max_tokens_per_turn=8, max_total_tokens=99)


async def test_a_template_that_rewrites_earlier_replies_is_refused(play, tiny_model_dir):
    rewriting = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    rewriting.chat_template = rewriting.chat_template.replace(
        "{{ message['content'] }}",
        "{% if message['role'] == 'assistant' %}{{ message['content'] | upper }}{% else %}"
        "{{ message['content'] }}{% endif %}",
    )
    with pytest.raises(EpisodeTrackingError, match="one tracked sequence"):
        await play(tokenizer=rewriting, max_turns=3)


def test_turn_level_advantages_credit_later_turns_and_the_outcome():
    # Two episodes of two turns: the first earns the turn reward at turn 0, both the same at turn 1.
    advs = turn_level_advantages([[1.0, 0.0], [0.0, 0.0]], outcomes=[1.0, 0.0])
    assert advs[0] == pytest.approx([2.0, 1.0]) and advs[1] == pytest.approx([-2.0, -1.0])
    # Episodes of different lengths: turn 1 is normalised only over the episodes that reached it.
    advs = turn_level_advantages([[0.0, 1.0], [0.0, 3.0], [0.0]], outcomes=[0.0, 0.0, 0.0], turn_weight=0.5)
    assert advs[0] == pytest.approx([-0.5, -0.5]) and advs[1] == pytest.approx([0.5, 0.5])
    assert advs[2] == pytest.approx([0.0])
    with pytest.raises(ValueError):
        turn_level_advantages([[1.0]], [1.0, 2.0])
    with pytest.raises(ValueError):
        turn_level_advantages([], [])


def test_token_advantages_follow_the_turns_and_the_group_carries_them():
    episode = Episode(
        messages=[],
        tokens=list(range(10)),
        masks=[-100, -100, 2, 3, -100, -100, 6, 7, 8, -100],
        logprobs=[1.0] * 10,
        turns=[EpisodeTurn("a", "stop", 0.0, 2, 4), EpisodeTurn("b", "stop", 1.0, 6, 9)],
        end_reason=END_DONE,
    )
    values = token_advantages(episode, [0.5, -1.5])
    assert values == [0.0, 0.0, 0.5, 0.5, 0.0, 0.0, -1.5, -1.5, -1.5, 0.0]
    with pytest.raises(ValueError):
        token_advantages(episode, [1.0])
    group = episodes_to_group([episode, episode], [1.0, 0.0], [values, values])
    assert group["scores"] == [1.0, 0.0] and group["advantages"][0] == values
    assert len(group["inference_logprobs"]) == 2 and "advantages" not in episodes_to_group([episode], [1.0])
