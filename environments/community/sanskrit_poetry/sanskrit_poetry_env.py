"""Sanskrit poetry: compose a verse in a requested metre, in IAST, scored by its prosody.

The prompt asks for a verse of the metre's pādas (one per line) in ``meter`` (default ``tristubh``), with the
original's system prompt ("respond only with the poem in IAST", ``--env.system_prompt``). The reply may reason in
``<think>...</think>``; the verse is what follows.

Reward (the chandas metre check of ``chandas_meter.py``): each line's syllable weights (guru by long vowel,
anusvāra/visarga or a following conjunct) are compared with the metre's pāda pattern; a pāda scores the share of
its fixed positions it satisfies (0 for a wrong syllable count), the verse the mean over the metre's pādas
(missing pādas 0, extra lines scale the score down). 1.0 is a verse exactly in the metre. A malformed
reasoning block scores 0. Evaluate samples ``eval_size`` verses at ``eval_temperature`` and reports
``eval/percent_correct`` (perfect verses) and ``eval/mean_score``.

Data: none; the task is the prompt. The original's sampling settings (``temperature`` 0.7, ``top_p`` 0.9,
``max_tokens`` 256) and its default server (TRL's vLLM server, ``Qwen/Qwen3-1.7B`` on ``localhost:9001``) are the
defaults.

``python environments/community/sanskrit_poetry/sanskrit_poetry_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field, field_validator

from atroposlib.envs.config_defaults import local_server_config
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.server_handling.trl_vllm_server import use_policy_tokenizer
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import answer_section

try:
    from environments.community.sanskrit_poetry.chandas_meter import Meter, meter_named, meter_score
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from chandas_meter import Meter, meter_named, meter_score


class SanskritPoetryEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the original's ``meter`` and ``system_prompt``."""

    meter: str = Field("tristubh", description="the metre asked for (anustubh, tristubh, jagati, ...)")
    system_prompt: Optional[str] = Field(
        "You are a Sanskrit poet. Respond only with the poem in IAST.",
        description="system prompt (None: none)",
    )
    temperature: float = Field(0.7, ge=0.0, description="sampling temperature of training verses")
    top_p: float = Field(0.9, gt=0.0, le=1.0, description="nucleus-sampling mass of training verses")
    max_tokens: Optional[int] = Field(256, ge=1, description="generation budget per verse")
    eval_temperature: float = Field(0.7, ge=0.0, description="sampling temperature of evaluation verses")
    eval_size: int = Field(8, ge=1, description="verses sampled by evaluate")

    @field_validator("meter")
    @classmethod
    def _known_meter(cls, value: str) -> str:
        try:
            meter_named(value)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None
        return value


class SanskritPoetryEnv(DeclaredDefaults, SingleTurnEnv):
    """Rewards verses by how exactly they follow the requested metre."""

    name = "sanskrit_poetry"
    env_config_cls = SanskritPoetryEnvConfig
    config: SanskritPoetryEnvConfig
    default_model = "Qwen/Qwen3-1.7B"
    default_env_values = dict(
        group_size=8, total_steps=1000, batch_size=32, steps_per_eval=50, max_token_length=512
    )

    def __init__(self, config: SanskritPoetryEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        use_policy_tokenizer(self.server, self.tokenizer)

    @classmethod
    def default_server_config(cls):
        # the original's: TRL's vLLM server at the root of localhost:9001
        server = local_server_config(cls.default_model, 9001, num_requests_for_eval=64, server_type="trl")
        return server.model_copy(update={"base_url": "http://localhost:9001"})

    @property
    def meter(self) -> Meter:
        return meter_named(self.config.meter)

    async def setup(self) -> None:
        self.test = [self.config.meter] * self.config.eval_size

    async def get_next_item(self) -> str:
        self.iter += 1
        return self.config.meter

    def prompt_messages(self, item: str) -> list[dict[str, str]]:
        meter = meter_named(item)
        lines = len(meter.padas)
        user = (
            f"Compose a {lines}-line Sanskrit poem in the {item} meter, one pāda per line. "
            "Use IAST transliteration only."
        )
        system = (
            [{"role": "system", "content": self.config.system_prompt}] if self.config.system_prompt else []
        )
        return [*system, {"role": "user", "content": user}]

    def score_reply(self, reply: str, item: str) -> float:
        verse = answer_section(reply)
        return 0.0 if verse is None else meter_score(verse, meter_named(item))

    def eval_sample_fields(self, item: str) -> dict[str, Any]:
        return {"meter": item}


if __name__ == "__main__":
    SanskritPoetryEnv.cli()
