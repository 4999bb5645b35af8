"""``atropos-dpo-gen``: preference pairs from scored groups.

Same sources and output handling as ``atropos-sft-gen``; each group yields up to
``--save-n-pairs-per-group`` (chosen, rejected) pairs whose scores differ by more than
``--minimum-score-diff-max-min`` (see :func:`~atroposlib.cli._tooling.selection.select_dpo_pairs`).
``--seed`` makes the random choice of rejected sequences reproducible.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence

from atroposlib.cli._tooling.dataset import add_dataset_arguments, run_generator
from atroposlib.cli._tooling.errors import run_cli
from atroposlib.cli._tooling.formats import GroupView, dpo_record
from atroposlib.cli._tooling.selection import select_dpo_pairs
from atroposlib.cli._tooling.sources import GroupRecord

PROG = "atropos-dpo-gen"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Grab DPO preference pairs from Atropos groups")
    parser.add_argument("filepath", nargs="?", default="dpo_data.jsonl", help="output JSONL file")
    add_dataset_arguments(parser, default_min_diff=0.5)
    parser.add_argument("--save-n-pairs-per-group", type=int, default=3, help="most pairs kept per group")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # compat: --register asks for batch_size = group_size * 8, as atropos-dpo-gen 0.4.0 did.
    args.tasks_per_step = 8

    def to_records(record: GroupRecord, view: GroupView, rng: random.Random) -> list[dict]:
        scores = record.group["scores"]
        pairs = select_dpo_pairs(
            scores,
            n_pairs=args.save_n_pairs_per_group,
            allow_negative_scores=args.allow_negative_scores,
            min_score_diff=args.minimum_score_diff_max_min,
            rng=rng,
        )
        return [dpo_record(view, pos, neg, scores[pos], args.format) for pos, neg in pairs]

    return run_cli(PROG, lambda: run_generator(args, PROG, to_records))


if __name__ == "__main__":
    raise SystemExit(main())
