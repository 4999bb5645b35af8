"""Cat behaviour: the model plays a cat that must make its caretaker meet its needs without words.

Episode: the cat (the model being trained) is told a scenario (its needs) and a list of cat behaviours;
for ``max_turns`` (5) rounds it communicates (``Sound! (what it does)``, rules in ``cat_rules.py``) and
a simulated caretaker answers with what it does. The caretaker is any OpenAI-compatible server
(``--env.caretaker_base_url`` / ``--env.caretaker_model_name``, key from ``$caretaker_api_key_env``), by
default the policy's own servers; its requests are never trained (only the cat's replies are).

Reward: after the last round a judge reads the scenario and the conversation and answers ``\\boxed{purr}``
(the caretaker met every need, nothing could have been done better: 1.0) or ``\\boxed{meow}`` (0.0); the
judge is told to answer meow when the cat used human words. A cat reply breaking the rules ends the
episode at -1.0 without the judge. A verdict the judge's reply cannot be read from is never a win: that
episode is left out of its group (and of evaluation means) and counted in ``train/judge_failures`` /
``eval/judge_failures``. The judge: ``--judge.base_url`` / ``--judge.model_name`` ... or the ``judge_*``
settings, else the policy's own servers (``environments/community/_judging``). Logged: ``train/purr``,
``train/rule_broken``; evaluate reports ``eval/percent_correct`` (purr rate over judged episodes).

Data: the scenarios written for this port (``cat_scenarios.json``; the original's file was not published),
used for training and evaluation as in the original; ``--env.dataset_path`` / ``--env.eval_dataset_path``
read rows with a ``scenario`` field.

``python environments/community/cat_behavior_env/cat_server.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

# Run as a script, the repository root is not on the path yet (the shared judge lives in the package).
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from atroposlib.envs.base import APIServerConfig  # noqa: E402
from atroposlib.envs.config_defaults import LocalServerDefaults  # noqa: E402
from atroposlib.envs.data_loading import load_rows  # noqa: E402
from atroposlib.envs.episodes import Episode, Feedback  # noqa: E402
from atroposlib.envs.multi_turn import MultiTurnEnv, MultiTurnEnvConfig  # noqa: E402
from atroposlib.envs.server_handling.server_manager import ServerManager  # noqa: E402
from atroposlib.evals.judge import Judgement  # noqa: E402
from atroposlib.utils.replies import answer_section  # noqa: E402
from environments.community._judging.policy_judge import (  # noqa: E402
    JudgeTally,
    PolicyJudgeMixin,
    PolicyJudgeSettings,
)
from environments.community.cat_behavior_env import cat_rules  # noqa: E402

logger = logging.getLogger(__name__)

cat_system_prompt = (
    "You are a cat. You communicate only as a cat does: meowing, mewing, trilling, purring, hissing, growling, "
    "yowling, chirping, a hairball hack, or silence, together with what you do. You are given a scenario "
    "describing needs you want your caretaker to meet: make the caretaker understand them.\n"
    "Rules: no English speech and no emojis. Write each line as a sound followed by what you do in "
    "parentheses, at most three lines; with no sound write ~Silent~. You may think inside <think> </think> "
    "tags first.\nExamples:\nMew! (Looks up at you)\n~Silent~ (Paws at the empty bowl)\nHiss! (Stares at the "
    "litter box)\n\n"
)
caretaker_system_prompt = (
    "You are the caretaker of this cat. It is trying to tell you its needs in cat language. Each time, reply "
    "with what you do for it, as a short set of interventions. You have 5 chances to help; choose wisely."
)
JUDGE_PROMPT = """A cat, in this situation, tried to make its caretaker meet its needs:
{scenario}

The conversation (the cat's sounds and actions, and what the caretaker did):
{conversation}

The conversation is over. Did the caretaker do everything perfectly, with nothing that could have been done
even slightly better? A purr should be rare. If the cat used human words to state its needs, the answer is
meow. After your reasoning, answer \\boxed{{purr}} or \\boxed{{meow}}."""


@dataclass
class CatSession:
    """One episode: the scenario, the caretaker's side of the chat and the rule the cat broke, if any."""

    scenario: str
    caretaker: Any
    sampling: dict[str, Any]
    max_turns: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    transcript: list[tuple[str, str]] = field(default_factory=list)
    broken: Optional[str] = None
    verdict: Optional[Judgement[float]] = None

    def __post_init__(self) -> None:
        self.messages = [
            {"role": "system", "content": cat_system_prompt + cat_rules.load_cat_behaviors_for_prompt()},
            {"role": "user", "content": self.scenario},
        ]

    async def _caretaker_answer(self) -> str:
        chat = [{"role": "system", "content": caretaker_system_prompt}]
        for cat, caretaker in self.transcript:
            chat.append({"role": "user", "content": cat})
            if caretaker:
                chat.append({"role": "assistant", "content": caretaker})
        completion = await self.caretaker.chat_completion(messages=chat, n=1, **self.sampling)
        return (completion.choices[0].message.content or "").strip() if completion.choices else ""

    async def step(self, reply: str, turn: int) -> Feedback:
        self.broken = cat_rules.rule_broken(reply)
        if self.broken is not None:
            return Feedback(done=True, reward=-1.0, info={"rule_broken": self.broken})
        self.transcript.append((answer_section(reply).strip(), ""))
        answer = await self._caretaker_answer()
        self.transcript[-1] = (self.transcript[-1][0], answer)
        return Feedback(messages=[{"role": "user", "content": answer}], done=turn + 1 >= self.max_turns)

    def conversation(self) -> str:
        """The conversation as the judge reads it."""
        return "\n".join(f"Cat: {cat}\nCaretaker: {care}" for cat, care in self.transcript)


class CatBehaviorEnvConfig(PolicyJudgeSettings, MultiTurnEnvConfig):
    """MultiTurnEnvConfig plus the data, the caretaker's server and the judge's settings."""

    max_turns: int = Field(5, ge=1, description="rounds of cat and caretaker")
    dataset_path: Optional[str] = Field(None, description="local scenarios (rows with 'scenario')")
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation scenarios (default: the same)"
    )
    caretaker_base_url: Optional[str] = Field(
        None, description="caretaker server (unset: the policy's servers)"
    )
    caretaker_model_name: str = Field("default", description="model name sent to the caretaker server")
    caretaker_api_key_env: str = Field("OPENAI_API_KEY", description="variable holding the caretaker's key")
    caretaker_max_tokens: int = Field(256, ge=1, description="token budget of one caretaker answer")
    caretaker_temperature: float = Field(0.7, ge=0.0, description="sampling temperature of the caretaker")


class CatBehaviorEnv(PolicyJudgeMixin, LocalServerDefaults, MultiTurnEnv):
    """A cat making its caretaker meet its needs, judged purr or meow (see the module docstring)."""

    name = "cat_behavior"
    env_config_cls = CatBehaviorEnvConfig
    config: CatBehaviorEnvConfig
    default_model = "NousResearch/DeepHermes-3-Llama-3-3B-Preview"

    def __init__(self, config: CatBehaviorEnvConfig, server_configs, slurm=False, testing=False, **kwargs):
        super().__init__(config, server_configs, slurm, testing, **kwargs)
        self.caretaker = self.server
        if config.caretaker_base_url:
            server = APIServerConfig(
                base_url=config.caretaker_base_url,
                model_name=config.caretaker_model_name,
                api_key=os.environ.get(config.caretaker_api_key_env) or "x",
                server_type="openai",
                health_check=False,
            )
            self.caretaker = ServerManager([server], slurm=False, testing=testing)
        self.train: list[str] = []
        self.test: list[str] = []
        self.tally = JudgeTally()
        self.eval_tally = JudgeTally()

    @classmethod
    def default_env_config(cls) -> CatBehaviorEnvConfig:
        return CatBehaviorEnvConfig(
            tokenizer_name=cls.default_model, group_size=8, total_steps=61, batch_size=1,
            steps_per_eval=60, max_token_length=2048,
        )  # fmt: skip

    async def _close_inference_clients(self) -> None:
        await super()._close_inference_clients()
        if self.caretaker is not self.server:
            await self.caretaker.close()

    async def setup(self) -> None:
        cfg = self.config

        def scenarios(path: Optional[str]) -> list[str]:
            rows = load_rows(
                path or cat_rules.CAT_SCENARIOS_FILEPATH, lambda: [], ["scenario"], "cat_scenarios.json"
            )
            return [str(row["scenario"]) for row in rows]

        self.train = scenarios(cfg.dataset_path)
        self.test = scenarios(cfg.eval_dataset_path) if cfg.eval_dataset_path else list(self.train)

    async def get_next_item(self) -> str:
        return self.next_in_turn(self.train)

    def eval_items(self) -> list[str]:
        return self.test

    async def new_session(self, item: str, *, evaluation: bool = False) -> CatSession:
        sampling = {
            "max_tokens": self.config.caretaker_max_tokens,
            "temperature": self.config.caretaker_temperature,
        }
        return CatSession(item, self.caretaker, sampling, self.config.max_turns)

    async def play(self, item: str, *, evaluation: bool = False) -> Optional[tuple[CatSession, Episode]]:
        """An episode judged (unless the cat broke a rule); ``None`` when it could not be tracked or its
        verdict could not be read (counted in the judge tally)."""
        played = await super().play(item, evaluation=evaluation)
        if played is None or played[0].broken is not None:
            return played
        session, _ = played
        if not session.transcript:
            return played  # cut off before its first reply: scored meow without the judge
        prompt = JUDGE_PROMPT.format(scenario=session.scenario, conversation=session.conversation())
        session.verdict = await self.judge.grade([{"role": "user", "content": prompt}], cat_rules.cat_verdict)
        (self.eval_tally if evaluation else self.tally).add(1, int(session.verdict.failed))
        return None if session.verdict.failed else played

    def outcome_reward(self, session: CatSession, episode: Episode) -> float:
        if session.broken is not None:
            return 0.0  # the -1.0 is the breaking turn's reward
        return float(session.verdict.value) if session.verdict is not None else 0.0

    def episode_metrics(self, session: CatSession, episode: Episode) -> dict[str, float]:
        purr = session.verdict is not None and session.verdict.value == 1.0
        return {"purr": float(purr), "rule_broken": float(session.broken is not None)}

    def eval_sample_fields(self, item: str, session: CatSession, episode: Episode) -> dict[str, Any]:
        record = session.verdict.record() if session.verdict else {}
        return {"scenario": item, "rule_broken": session.broken, **record}

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        self.eval_tally = JudgeTally()
        await super().evaluate(*args, **kwargs)

    async def report_evaluation(self, metrics: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """The evaluation's metrics with its judge failures (``eval/judge_failures``, ``..._rate``)."""
        failures = {k.replace("train/", "eval/"): v for k, v in self.eval_tally.drain().items()}
        await super().report_evaluation({**metrics, **failures}, *args, **kwargs)

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        await super().wandb_log({**(wandb_metrics or {}), **self.tally.drain()})


#: The original's class name (compat: its file defined the environment under this name).
GSM8kEnv = CatBehaviorEnv


if __name__ == "__main__":
    CatBehaviorEnv.cli()
