"""``view-run-multimodal``: ``view-run`` plus the images and text prompt of multimodal groups.

Same flags and the same non-destructive behaviour as ``view-run``; the tokenizer defaults to a
vision-language model's. Images are read from a group's ``images`` field (PIL images, base64 or
data-URI strings), from ``image_url`` parts of its messages, or from data URIs in its prompt.
"""

from __future__ import annotations

from collections.abc import Sequence

from atroposlib.cli.view_run import run

PROG = "view-run-multimodal"
DEFAULT_TOKENIZER = "Qwen/Qwen2-VL-2B-Instruct"
#: One above view-run's, so both can run at once.
DEFAULT_PORT = 7861


def main(argv: Sequence[str] | None = None) -> int:
    return run(
        argv,
        prog=PROG,
        default_tokenizer=DEFAULT_TOKENIZER,
        multimodal=True,
        title="Atropos multimodal run viewer",
        default_port=DEFAULT_PORT,
    )


if __name__ == "__main__":
    raise SystemExit(main())
