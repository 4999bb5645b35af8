"""GSM8K with on-policy distillation: the GSM8K environment whose groups also carry a teacher's top-k logprobs.

Every group the student generates is scored by a teacher model on the student's own tokens
(:mod:`atroposlib.envs.teacher_distillation_env`): ``distill_token_ids``/``distill_logprobs`` go to the API with
the group, and the trainer (``atropos-grpo --distill-coef C``, with ``--rl-coef 0`` for distillation alone)
adds a KL term towards the teacher. The teacher is any OpenAI-compatible server that returns top-k logprobs
(``--teacher.server_type openai``: ``/v1/completions`` with echo) or a vLLM/SGLang server (prompt logprobs)::

    python environments/gsm8k_server_teacher_distill.py serve \\
        --openai.base_url http://localhost:9001/v1 --openai.model_name STUDENT \\
        --teacher.base_url http://localhost:9003/v1 --teacher.model_name TEACHER --env.teacher_top_k 4

The teacher must use the student's vocabulary (checked at start).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script (``python environments/<this file>``), the repository root is not on the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atroposlib.envs.base import APIServerConfig  # noqa: E402
from atroposlib.envs.teacher_distillation_env import (  # noqa: E402
    TeacherDistillationConfig,
    TeacherDistillationEnv,
)
from environments.gsm8k_server import DEFAULT_MODEL, GSM8kEnv, GSM8kEnvConfig  # noqa: E402


class GSM8kTeacherDistillConfig(GSM8kEnvConfig, TeacherDistillationConfig):
    """The GSM8K settings plus the teacher switches."""


class GSM8kTeacherDistillEnv(TeacherDistillationEnv, GSM8kEnv):
    """GSM8K rollouts scored by the reward and by a teacher (top-k logprobs attached to every group)."""

    name = "gsm8k_teacher_distill"
    env_config_cls = GSM8kTeacherDistillConfig

    @classmethod
    def default_env_config(cls) -> GSM8kTeacherDistillConfig:
        return GSM8kTeacherDistillConfig(
            **GSM8kEnv.default_env_config().model_dump(), teacher_enabled=True, teacher_top_k=4
        )

    @classmethod
    def teacher_config_init(cls) -> APIServerConfig:
        """The teacher on ``localhost:9003``, served by vLLM (prompt logprobs); see the module docstring."""
        return APIServerConfig(
            base_url="http://localhost:9003/v1",
            model_name=DEFAULT_MODEL,
            api_key="x",
            server_type="vllm",
            timeout=1200,
        )


if __name__ == "__main__":
    GSM8kTeacherDistillEnv.cli()
