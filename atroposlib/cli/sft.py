"""``atropos-sft-gen``: rejection-sampled SFT data from scored groups.

Reads a live run without disturbing it (``GET /inspect/recent``), or ``process`` JSONL files
(``--input``), or takes batches from the trainer's queue (``--consume``). Keeps the best sequences of
each group (see :func:`~atroposlib.cli._tooling.selection.select_sft`) and writes one JSON line per
kept sequence in the ``atropos`` layout (``--format atropos``) or TRL's (``--format trl``).
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence

from atroposlib.cli._tooling.dataset import add_dataset_arguments, run_generator
from atroposlib.cli._tooling.errors import run_cli
from atroposlib.cli._tooling.formats import GroupView, sft_record
from atroposlib.cli._tooling.selection import select_sft
from atroposlib.cli._tooling.sources import GroupRecord

PROG = "atropos-sft-gen"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Grab rejection-sampled SFT data from Atropos groups"
    )
    parser.add_argument("filepath", nargs="?", default="sft_data.jsonl", help="output JSONL file")
    add_dataset_arguments(parser, default_min_diff=0.0)
    parser.add_argument("--save-top-n-per-group", type=int, default=3, help="most records kept per group")
    parser.add_argument(
        "--tasks-per-step", type=int, default=64, help="with --register: batch size = group size x this"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def to_records(record: GroupRecord, view: GroupView, _rng: random.Random) -> list[dict]:
        scores = record.group["scores"]
        keep = select_sft(
            scores,
            top_n=args.save_top_n_per_group,
            allow_negative_scores=args.allow_negative_scores,
            min_score_diff=args.minimum_score_diff_max_min,
        )
        return [sft_record(view, i, scores[i], args.format) for i in keep]

    return run_cli(PROG, lambda: run_generator(args, PROG, to_records))


if __name__ == "__main__":
    raise SystemExit(main())
