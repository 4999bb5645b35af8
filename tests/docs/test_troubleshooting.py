"""docs/troubleshooting.md quotes the messages the code prints: each quoted fragment below is on the page and
in the source, so rewording a message without the page (or the reverse) fails here."""

from __future__ import annotations

import pytest

from tests.docs.shell_blocks import REPO

PAGE = (REPO / "docs" / "troubleshooting.md").read_text()
SOURCE = "\n".join(
    path.read_text(errors="replace")
    for root in ("atroposlib", "environments")
    for path in sorted((REPO / root).rglob("*.py"))
)

FRAGMENTS = [
    "has not answered for",
    "Check that it is running and reachable at this base_url",
    "gave up after --env.server_unavailable_timeout",
    "OpenAI endpoints return no token ids or logprobs, which ManagedServer needs",
    "items in a row produced no usable group",
    "set HF_HUB_OFFLINE=1 to use only cached files",
    "is in use by another run-api",
    "refusing to listen on non-loopback address",
    "missing or invalid API key: send the header",
    "waiting for the trainer to start",
    "cannot reach the API at",
    "the API refused registration",
    "must divide the trainer's batch size",
    "cannot serve on",
    "pick another port with --port N",
    "bubblewrap (bwrap) is not on PATH; install it (Debian/Ubuntu: apt-get install bubblewrap)",
    "is not on PATH; the sandbox needs it",
    "the sandbox cannot run Python",
    "slurm is enabled but $SLURM_JOB_NODELIST is not set; run inside a SLURM job or pass --slurm false",
    "is not set; it is required for SLURM server discovery",
    "scontrol is not on PATH; server discovery on SLURM needs the SLURM client tools",
    "leaves no inference node in a",
    "cannot reach the trajectory API at",
    "is run-api running there?",
    "token sequences but",
    "could not be started or reached",
    "both offer a tool named",
    "did not answer within",
]


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_quoted_message_is_the_codes(fragment):
    assert fragment in PAGE, "not on docs/troubleshooting.md"
    assert fragment in SOURCE, "no longer in the code: update docs/troubleshooting.md"
