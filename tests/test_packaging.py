"""The wheel built from the tracked files: pure Python, with the package and its data files."""

from __future__ import annotations

import configparser
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_holds_the_packages_data_files_and_extension(tmp_path):
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.split(b"\0")
    source = tmp_path / "src"
    for name in filter(None, tracked):
        path = ROOT / name.decode()
        if path.is_file():
            target = source / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("atroposlib-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")  # pure Python: no compiled code
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    assert "atroposlib/frontend/template.html" in names
    assert "atroposlib/utils/tokenizers/qwen_chat_template.jinja" in names
    assert not any(n.endswith((".so", ".pyd", ".c")) for n in names)
    assert not any(n.startswith(("tests/", "environments/", "benchmarks/")) for n in names)
    # every console script points at a module that is in the wheel
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    parser = configparser.ConfigParser()
    parser.read_string(archive.read(entry_points).decode())
    assert "run-api" in parser["console_scripts"]
    for target in parser["console_scripts"].values():
        module = target.split(":")[0].replace(".", "/") + ".py"
        assert module in names, module
    # every tracked module of the two packages is shipped
    for name in filter(None, tracked):
        text = name.decode()
        if text.startswith(("atroposlib/", "example_trainer/")) and text.endswith(".py"):
            assert text in names, text
