"""CLEVR CoGenT-A, complex questions (counting, comparison, yes/no), answered in ``\\boxed{}``.

Data: ``MMInstruction/Clevr_CoGenT_TrainA_70K_Complex`` (``train``; the last ``eval_size`` rows held out), or
a local file with its fields ``image``, ``problem``, ``solution`` (``<answer>`` tag or bare answer).
Reward: 1 when the one boxed answer after the reasoning says the gold answer (numbers by value,
``Yes.`` = ``yes``), else 0.

``python environments/multimodal_dpo/clevr_complex.py process --env.dataset_path FILE``
"""

from __future__ import annotations

from atroposlib.envs.vision import VisionQAEnv


class ClevrComplexEnv(VisionQAEnv):
    """Complex CLEVR questions, boxed answers (see the module docstring)."""

    name = "clevr_complex"
    hub_dataset = "MMInstruction/Clevr_CoGenT_TrainA_70K_Complex"
    required_fields = ("image", "problem", "solution")
    question_field = "problem"
    answer_field = "solution"
    answer_form = "boxed"
    system_prompt = (
        "Answer the question about the picture. Think inside <think> </think> tags if you like, then write "
        "the final answer as \\boxed{answer}: a number, yes or no, or one word."
    )


if __name__ == "__main__":
    ClevrComplexEnv.cli()
