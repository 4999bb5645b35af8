"""GSM8K for training with Axolotl: the GSM8K environment served by TRL's vLLM server.

Axolotl's GRPO trainer generates through TRL's ``trl vllm-serve`` server, so this environment's default inference
server is that server (``server_type: trl``) on ``localhost:9001`` serving ``Qwen/Qwen3-1.7B``, the tokenizer
is the same model's (TRL's server renders chats with it too unless ``--openai.tokenizer_name`` names another), and
evaluation replies are greedy (temperature 0). Data, prompt and reward are those of
``gsm8k_server.py``: +1 for a last ``\\boxed{}`` equal to the gold number (``math_verify``), -1 otherwise, shorter
replies preferred among all-correct groups; ``--env.dataset_path`` reads GSM8K's ``question`` / ``answer`` rows.

    python environments/gsm8k_server_axolotl.py serve --openai.base_url http://localhost:9001
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script (``python environments/<this file>``), the repository root is not on the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atroposlib.envs.server_handling.trl_vllm_server import use_policy_tokenizer  # noqa: E402
from environments.gsm8k_server import GSM8kEnv, GSM8kEnvConfig  # noqa: E402

AXOLOTL_MODEL = "Qwen/Qwen3-1.7B"


class GSM8kAxolotlEnv(GSM8kEnv):
    """GSM8K against TRL's vLLM server (see the module docstring)."""

    name = "gsm8k"
    default_model = AXOLOTL_MODEL
    default_server_settings = {"server_type": "trl"}
    eval_temperature = 0.0

    def __init__(self, config: GSM8kEnvConfig, server_configs, slurm=True, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        use_policy_tokenizer(self.server, self.tokenizer)

    @classmethod
    def default_env_config(cls) -> GSM8kEnvConfig:
        config = super().default_env_config()
        config.tokenizer_name = AXOLOTL_MODEL
        config.total_steps, config.steps_per_eval = 1000, 100
        return config


if __name__ == "__main__":
    GSM8kAxolotlEnv.cli()
