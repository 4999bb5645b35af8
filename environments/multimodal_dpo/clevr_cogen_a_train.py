"""CLEVR CoGenT-A: questions about rendered 3D scenes of simple objects, answered in ``\\boxed{}``.

Data: ``leonardPKU/clevr_cogen_a_train`` (``train``; the last ``eval_size`` rows held out for evaluation),
or a local file with its fields: ``image``, ``problem``, ``solution`` (the gold answer, as
``<answer> 3 </answer>`` or bare). Reward: 1 when the one boxed answer after the reasoning says the gold
answer (``3`` = ``three`` = ``3.0``; words by their letters, case ignored), else 0; several different boxed
answers, none, or a malformed think block score 0.

``python environments/multimodal_dpo/clevr_cogen_a_train.py process --env.dataset_path FILE``
"""

from __future__ import annotations

from atroposlib.envs.vision import VisionQAEnv

#: The system turn of the CLEVR environments.
BOXED_SYSTEM_PROMPT = (
    "Look at the picture and answer the question. You may reason inside <think> </think> tags first. Give "
    "your final answer as \\boxed{answer}: a number for a count, a single word otherwise."
)


class ClevrCogenATrainEnv(VisionQAEnv):
    """CLEVR CoGenT-A questions, boxed answers (see the module docstring)."""

    name = "clevr_cogen_a_train"
    hub_dataset = "leonardPKU/clevr_cogen_a_train"
    required_fields = ("image", "problem", "solution")
    question_field = "problem"
    answer_field = "solution"
    answer_form = "boxed"
    system_prompt = BOXED_SYSTEM_PROMPT


if __name__ == "__main__":
    ClevrCogenATrainEnv.cli()
