"""environments/eval_environments/README.md has exactly one row per evaluation file, and the suite command it
shows lists what the folder holds."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.helpers.cli_runs import REPO_ROOT

FOLDER = REPO_ROOT / "environments" / "eval_environments"


def test_one_row_per_evaluation_file():
    rows = re.findall(r"^\| `([^`]+\.py)` \|", (FOLDER / "README.md").read_text(), flags=re.MULTILINE)
    files = sorted(p.name for p in FOLDER.glob("*.py") if p.name != "__init__.py")
    assert sorted(rows) == files


def test_atropos_eval_lists_the_suites_and_benchmarks():
    listed = subprocess.run(
        [sys.executable, "-m", "atroposlib.cli.eval_suite", "--list"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("suite core: mmlu mmlu_pro gpqa")
    benchmarks = listed.stdout.splitlines()[-1].split(": ", 1)[1].split()
    assert {"mmlu", "gpqa", "bbh", "musr", "pubmedqa"} <= set(benchmarks)
