"""VR-CLI: how much a reasoning makes a reference model expect the real completion.

Verifiable Rewards via Completion Likelihood Improvement (Gurung & Lapata, 2025): a fixed reference language
model scores the gold completion twice, after the prompt alone and after the prompt plus the policy's
reasoning; the improvement is ``1 - PPL(gold | prompt, reasoning) / PPL(gold | prompt)`` (positive when the
reasoning helped). :class:`ReferenceScorer` runs the reference model in ``transformers`` in this process;
:func:`vrcli_reward` turns an improvement into a reward.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

#: The paper's reward tiers: (lowest improvement in percent, reward), highest first; below all of them: 0.
PAPER_TIERS: tuple[tuple[float, float], ...] = ((2.0, 1.0), (1.0, 0.9), (0.05, 0.5))


def base_prompt(question: str) -> str:
    """The reference model's prompt without reasoning."""
    return f"Question: {question}\nAnswer:"


def reasoning_prompt(question: str, reasoning: str) -> str:
    """The reference model's prompt with the policy's reasoning."""
    return f"Question: {question}\nReasoning: {reasoning}\nAnswer:"


def vrcli_reward(improvement: float, tiers: bool = False) -> float:
    """The reward of an improvement: ``max(0, improvement)``, or with ``tiers`` the paper's thresholds on
    ``100 x improvement`` (:data:`PAPER_TIERS`: 1.0 from 2 %, 0.9 from 1 %, 0.5 from 0.05 %, else 0)."""
    if not tiers:
        return max(0.0, improvement)
    percent = 100.0 * improvement
    return next((reward for lowest, reward in PAPER_TIERS if percent >= lowest), 0.0)


def pick_device(gpu_device: int) -> str:
    """``cuda:<gpu_device>`` when CUDA is available, else ``cpu``."""
    import torch

    return f"cuda:{gpu_device}" if torch.cuda.is_available() else "cpu"


class ReferenceScorer:
    """A causal language model (a hub name or a local directory) scoring completions by perplexity.

    Loaded once, in bfloat16 on a GPU and float32 on the CPU. Calls are serialised by a lock, so several
    groups scored from worker threads share the model without oversubscribing the device. The perplexity of
    a completion after a prompt is cached per (question, gold) pair for the base prompt, which every reply
    to an item shares.
    """

    def __init__(self, model_name: str, device: str = "cpu", cache_size: int = 256):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        self.tokenizer = AutoTokenizer.from_pretrained(model_name)
        self.model = AutoModelForCausalLM.from_pretrained(model_name, dtype=dtype).eval().to(device)
        self.device = device
        self._lock = threading.Lock()
        self._base: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._cache_size = cache_size

    def perplexity(self, prompt: str, completion: str) -> float:
        """exp of the mean negative log-likelihood of ``completion``'s tokens after ``prompt``.

        The two texts are tokenized apart (the prompt with the tokenizer's special tokens, the completion
        without) so the boundary between them is the same in every call.
        """
        import torch

        prompt_ids = self.tokenizer(prompt).input_ids
        completion_ids = self.tokenizer(completion, add_special_tokens=False).input_ids
        if not completion_ids:
            raise ValueError("the completion has no tokens")
        ids = torch.tensor([prompt_ids + completion_ids], device=self.device)
        with self._lock, torch.no_grad():
            logits = self.model(input_ids=ids).logits[0, :-1].float()
        logprobs = torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])[:, 0]
        return math.exp(-logprobs[len(prompt_ids) - 1 :].mean().item())

    def base_perplexity(self, question: str, gold: str) -> float:
        """The gold completion's perplexity after the question alone (cached)."""
        key = (question, gold)
        if key not in self._base:
            self._base[key] = self.perplexity(base_prompt(question), completion_text(gold))
            if len(self._base) > self._cache_size:
                self._base.popitem(last=False)
        return self._base[key]

    def improvement(self, question: str, reasoning: str, gold: str) -> float:
        """``1 - PPL(gold | question, reasoning) / PPL(gold | question)``."""
        base = self.base_perplexity(question, gold)
        plus = self.perplexity(reasoning_prompt(question, reasoning), completion_text(gold))
        return 1.0 - plus / base


def completion_text(gold: str) -> str:
    """The scored completion: the gold punchline after one space (the prompt ends with ``Answer:``)."""
    return " " + gold.strip()
