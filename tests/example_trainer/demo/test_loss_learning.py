"""Each loss type learns the demo's task: from the demo's warm-started model (its cache), 20 optimizer steps
on groups sampled from the policy itself raise held-out accuracy on the demo's 500 held-out problems.

The loop (:mod:`tests.helpers.demo_loop`) runs the trainer's ``prepare_batch`` and ``run_training_step`` in
one process, without the API and the inference server the demo starts, so five trainings fit the slow tier.
"""

from __future__ import annotations

import pytest
import torch

from atroposlib.testing.tiny_model import default_cache_dir
from example_trainer.demo.config import DemoConfig
from example_trainer.demo.sft_warmstart import warm_start
from tests.helpers.demo_loop import TASK, train_on_task

pytestmark = pytest.mark.slow

#: Each loss with the settings its paper uses (Dr. GRPO's normaliser is the generation budget).
LOSSES = {
    "grpo": {},
    "dr_grpo": {"max_completion_tokens": 8},
    "dapo": {"clip_eps_low": 0.2, "clip_eps_high": 0.28, "max_completion_tokens": 8, "overlong_buffer": 2},
    "gspo": {"clip_eps_low": 3e-4, "clip_eps_high": 4e-4},
    "cispo": {"clip_eps_low": 0.9, "clip_eps_high": 0.28, "advantage": "rloo"},
}


@pytest.fixture(scope="module")
def warm_model(tiny_model_dir):
    """The demo's warm-started model; torch on one thread meanwhile (the tiny model gains nothing from more,
    and the tests of the suite run in parallel on the other cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    demo = DemoConfig()
    assert demo.task_settings() == TASK
    model_dir, _ = warm_start(
        tiny_model_dir, demo.load_task(), demo.sft_settings(), default_cache_dir() / "demo"
    )
    yield model_dir
    torch.set_num_threads(threads)


@pytest.mark.parametrize("loss_type", list(LOSSES))
def test_held_out_accuracy_rises(warm_model, loss_type):
    before, after, history = train_on_task(
        warm_model, {"loss_type": loss_type, "lr": 2e-4, **LOSSES[loss_type]}, 20
    )
    assert len(history) >= 15  # steps whose groups all had equal scores are skipped
    assert after >= before + 0.02, (loss_type, before, after)
