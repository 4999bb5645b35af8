"""The arithmetic task with on-policy distillation: the demo's environment whose groups also carry a teacher's
top-k logprobs on the student's own tokens (:mod:`atroposlib.envs.teacher_distillation_env`).

The teacher is any OpenAI-compatible server returning top-k logprobs; on a CPU,
``python -m example_trainer.inference.teacher_server --model TEACHER_DIR --port 9003`` serves a local model::

    python environments/arithmetic_server_teacher_distill.py serve \\
        --openai.base_url http://localhost:9001/v1 --openai.model_name STUDENT_DIR \\
        --teacher.base_url http://localhost:9003/v1 --teacher.model_name TEACHER_DIR --env.teacher_top_k 4

``python -m example_trainer.demo --teacher-model TEACHER_DIR`` runs it with the trainer's ``--distill-coef``.
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
from environments.arithmetic_server import ArithmeticEnv, ArithmeticEnvConfig  # noqa: E402


class ArithmeticTeacherDistillConfig(ArithmeticEnvConfig, TeacherDistillationConfig):
    """The arithmetic settings plus the teacher switches."""


class ArithmeticTeacherDistillEnv(TeacherDistillationEnv, ArithmeticEnv):
    """Arithmetic rollouts scored by the exact answer and by a teacher."""

    name = "arithmetic_teacher_distill"
    env_config_cls = ArithmeticTeacherDistillConfig

    @classmethod
    def default_env_config(cls) -> ArithmeticTeacherDistillConfig:
        return ArithmeticTeacherDistillConfig(
            **ArithmeticEnv.default_env_config().model_dump(), teacher_enabled=True, teacher_top_k=4
        )

    @classmethod
    def teacher_config_init(cls) -> APIServerConfig:
        """The teacher on ``localhost:9003``, any OpenAI-compatible server (``echo`` route)."""
        return APIServerConfig(
            base_url="http://localhost:9003/v1",
            model_name=ArithmeticEnv.default_model,
            api_key="x",
            server_type="openai",
        )


if __name__ == "__main__":
    ArithmeticTeacherDistillEnv.cli()
