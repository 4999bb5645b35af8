"""The simulated patient: a persona, the case it knows, and its side of the consultation.

``patient_profiles`` are the three personas (uneasy, brief but consistent, open and talkative), each a
system prompt with a ``{symptoms}`` slot for the case. :class:`Patient` keeps the patient's own view of
the chat (the doctor's visible replies as user turns, its answers as assistant turns) and asks the
patient model, any OpenAI-compatible server, for each answer. The patient model's text is never trained:
its requests go outside the doctor's ManagedServer context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

patient_profiles = [
    """You are an uneasy patient seeing a doctor.

Your case:
{symptoms}

You want a diagnosis, but you are nervous. Do not tell the doctor everything at once: reveal your symptoms
a little at a time, as the doctor asks. Answer indirectly and briefly, never with a plain yes or no, yet
always give the doctor enough to go on. Never name a diagnosis or the answer options.""",
    """You are a patient seeing a doctor. You speak briefly, and everything you say is consistent with your
case.

Your case:
{symptoms}

You want a diagnosis. Answer each of the doctor's questions in a short sentence or two, never with a plain
yes or no, giving the doctor enough to go on. Never name a diagnosis or the answer options.""",
    """You are an open, talkative patient seeing a doctor, happy to share details.

Your case:
{symptoms}

You want a diagnosis. Answer the doctor's questions at length, never with a plain yes or no, and feel free
to say what you are worried it might be in everyday words, without naming any of the answer options.""",
]

#: The first thing the patient hears, so that its opening line answers something.
OPENING = "Hello, I'm the doctor on duty today. What brings you in?"


@dataclass
class Patient:
    """One simulated patient: its persona prompt (``system``) and its view of the chat so far.

    ``server`` is anything with the inference clients' async ``chat_completion(**kwargs)`` (a
    ``ServerManager``); ``sampling`` holds the request's ``max_tokens`` / ``temperature``.
    """

    system: str
    server: Any
    sampling: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.messages = [{"role": "system", "content": self.system}, {"role": "user", "content": OPENING}]

    async def _answer(self) -> str:
        completion = await self.server.chat_completion(messages=list(self.messages), n=1, **self.sampling)
        text = (completion.choices[0].message.content or "").strip() if completion.choices else ""
        self.messages.append({"role": "assistant", "content": text})
        return text

    async def opening(self) -> str:
        """The patient's first words (what brings them in)."""
        return await self._answer()

    async def reply_to(self, doctor_says: str) -> str:
        """The patient's answer to the doctor's visible reply ``doctor_says``."""
        self.messages.append({"role": "user", "content": doctor_says})
        return await self._answer()
