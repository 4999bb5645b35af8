"""The command line every environment gets from ``BaseEnv.cli()``.

``python my_env.py {serve,process,evaluate} [flags]``

* ``serve``    — produce rollouts for a trainer through the trajectory API;
* ``process``  — generate ``--env.total_steps`` groups offline into a JSONL file and an HTML page beside it;
* ``evaluate`` — run ``setup()`` then ``evaluate()`` once.

Flags: ``--env.<field>`` for every field of the environment's config class (including subclass fields),
``--openai.<field>`` for the inference server, ``--slurm``, ``--testing``, ``--max_n_completions``,
``--proxy_url`` and ``--config PATH`` (YAML with ``env``/``openai``/``slurm``/``testing`` sections).
Precedence: ``config_init()`` < YAML < flags. ``--help`` on a subcommand lists every flag with its
effective default. Bad flags or configuration print one line naming the field and exit with status 2.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, NoReturn

from pydantic import ValidationError

from atroposlib.envs.cli.command import (
    CONFIG_FIELD,
    ENV_PREFIX,
    OPENAI_PREFIX,
    CliCommand,
    CliRunError,
    ResolvedRun,
    build_command_cls,
)
from atroposlib.envs.cli.config import MODES, CliUsageError, format_validation_error
from atroposlib.envs.cli.values import describe_type, format_default, is_bool_annotation, make_value_parser

__all__ = [
    "CliCommand",
    "CliRunError",
    "CliUsageError",
    "ResolvedRun",
    "build_parser",
    "get_cli_evaluate_config_cls",
    "get_cli_process_config_cls",
    "get_cli_serve_config_cls",
    "parse_command",
    "run_cli",
]

EXIT_USAGE = 2
EXIT_RUN_FAILED = 1
EXIT_INTERRUPTED = 130
_COMMAND_DEST = "_atropos_subcommand"

_MODE_HELP = {
    "serve": "produce rollouts for a trainer through the trajectory API",
    "process": "generate --env.total_steps groups offline into JSONL + HTML (no API, no trainer)",
    "evaluate": "run setup() then evaluate() once and write the metrics",
}


def get_cli_serve_config_cls(env_cls: type) -> type[CliCommand]:
    """The ``serve`` subcommand model for ``env_cls`` (see :mod:`atroposlib.envs.cli.command`)."""
    return build_command_cls(env_cls, "serve")


def get_cli_process_config_cls(env_cls: type) -> type[CliCommand]:
    """The ``process`` subcommand model for ``env_cls``."""
    return build_command_cls(env_cls, "process")


def get_cli_evaluate_config_cls(env_cls: type) -> type[CliCommand]:
    """The ``evaluate`` subcommand model for ``env_cls``."""
    return build_command_cls(env_cls, "evaluate")


_BUILDERS = {
    "serve": ("get_cli_serve_config_cls", get_cli_serve_config_cls),
    "process": ("get_cli_process_config_cls", get_cli_process_config_cls),
    "evaluate": ("get_cli_evaluate_config_cls", get_cli_evaluate_config_cls),
}


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps help text at spaces only, so defaults such as model names and URLs stay intact."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=40, width=min(120, shutil.get_terminal_size().columns))

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = " ".join(text.split())
        return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False) or [""]


class _OneLineParser(argparse.ArgumentParser):
    """argparse parser whose usage errors are a single line on stderr (exit status 2)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}{self._suggestion(message)} (see --help)\n")

    def _suggestion(self, message: str) -> str:
        """``; did you mean --env.group_size?`` for the first unrecognized flag close to a known one."""
        prefix = "unrecognized arguments: "
        if not message.startswith(prefix):
            return ""
        unknown = next((arg for arg in message[len(prefix) :].split() if arg.startswith("--")), None)
        if unknown is None:
            return ""
        known = [opt for opt in _option_strings(self) if opt.startswith("--")]
        close = difflib.get_close_matches(unknown.split("=", 1)[0], known, n=1, cutoff=0.75)
        return f"; did you mean {close[0]}?" if close else ""


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of ``parser`` and of its subcommands' parsers."""
    found: list[str] = []
    for action in parser._actions:
        found.extend(action.option_strings)
        for sub in (getattr(action, "choices", None) or {}).values():
            if isinstance(sub, argparse.ArgumentParser):
                found.extend(_option_strings(sub))
    return found


def _command_cls(env_cls: type, mode: str) -> type[CliCommand]:
    method_name, fallback = _BUILDERS[mode]
    method = getattr(env_cls, method_name, None)
    return method() if method is not None else fallback(env_cls)


def _help_text(description: str | None, default: Any, shown_default: str | None = None) -> str:
    text = f"{description.strip()} " if description else ""
    shown = shown_default if shown_default is not None else format_default(default)
    return f"{text}(default: {shown})".replace("%", "%%")


def add_command_arguments(parser: argparse.ArgumentParser, cmd_cls: type[CliCommand]) -> None:
    """Add one flag per field of ``cmd_cls``: ``--<field name>`` with the field's type and default in the help.

    Values default to ``argparse.SUPPRESS`` so the parse result holds only what the user passed.
    Boolean flags take an optional value (``--slurm`` alone means true).
    """
    groups: dict[str, argparse._ArgumentGroup] = {}

    def group_for(name: str) -> argparse._ArgumentGroup:
        if name.startswith(ENV_PREFIX):
            key, title = "env", "environment config (--env.*)"
        elif name.startswith(OPENAI_PREFIX):
            key, title = "openai", "inference server (--openai.*)"
            server_default = getattr(cmd_cls, "server_default", None)
            if isinstance(server_default, list) and len(server_default) >= 2:
                title += f" [config_init() defines {len(server_default)} servers: use a --config openai list]"
        elif "." in name:
            key = title = f"{name.split('.', 1)[0]} (--{name.split('.', 1)[0]}.*)"
        else:
            key, title = "general", "general"
        if key not in groups:
            groups[key] = parser.add_argument_group(title)
        return groups[key]

    for name, info in cmd_cls.model_fields.items():
        kwargs: dict[str, Any] = {
            "dest": name,
            "default": argparse.SUPPRESS,
            "type": make_value_parser(info.annotation),
            "metavar": "PATH" if name == CONFIG_FIELD else describe_type(info.annotation),
            "help": info.description
            if name == CONFIG_FIELD
            else _help_text(info.description, info.default, cmd_cls.help_defaults.get(name)),
        }
        if is_bool_annotation(info.annotation):
            kwargs.update(nargs="?", const=True)
        group_for(name).add_argument(f"--{name}", **kwargs)


def build_parser(env_cls: type, commands: dict[str, type[CliCommand] | None]) -> argparse.ArgumentParser:
    """The argparse parser for ``env_cls``; subcommands whose class is ``None`` get no flags (not selected)."""
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else env_cls.__name__
    parser = _OneLineParser(
        prog=prog,
        description=f"CLI for {env_cls.__name__}",
        epilog="Run '<subcommand> --help' to list every flag with its default.",
    )
    sub = parser.add_subparsers(dest=_COMMAND_DEST, metavar="{" + ",".join(commands) + "}", required=True)
    for mode, cmd_cls in commands.items():
        sub_parser = sub.add_parser(
            mode,
            help=_MODE_HELP.get(mode),
            usage="%(prog)s [--config PATH] [--env.FIELD VALUE ...] [--openai.FIELD VALUE ...] "
            "[--slurm [BOOL]] [--testing [BOOL]] ...",
            description=f"{env_cls.__name__} {mode}: {_MODE_HELP.get(mode, '')}. "
            "Precedence: config_init() < --config YAML < flags.",
        )
        if cmd_cls is not None:
            add_command_arguments(sub_parser, cmd_cls)
    return parser


def parse_command(env_cls: type, argv: Sequence[str] | None = None) -> CliCommand:
    """Parse ``argv`` (default ``sys.argv[1:]``) into the selected subcommand's :class:`CliCommand`.

    Only the selected subcommand's flags are built (so ``config_init()`` runs once). argparse errors exit
    with status 2 after one line on stderr; ``--help`` exits 0.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    selected = args[0] if args and args[0] in MODES else None
    commands = {mode: (_command_cls(env_cls, mode) if mode == selected else None) for mode in MODES}
    parser = build_parser(env_cls, commands)
    namespace = vars(parser.parse_args(args))
    mode = namespace.pop(_COMMAND_DEST)
    cmd_cls = commands[mode]
    try:
        return cmd_cls(**namespace)
    except ValidationError as exc:
        raise CliUsageError(format_validation_error(exc, ""))


def _configure_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def run_cli(env_cls: type, argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point behind ``BaseEnv.cli()``: parse, layer, construct the environment, run, exit.

    Exit status: 0 on success, 2 for bad flags or configuration (one line on stderr naming the field),
    1 when the environment cannot be constructed, 130 on Ctrl-C. Exceptions raised while the environment
    runs propagate with their traceback (they are bugs in the environment or the framework).
    """
    _configure_logging()
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else env_cls.__name__
    try:
        command = parse_command(env_cls, argv)
        command.run()
    except CliUsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except CliRunError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_RUN_FAILED)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(0)
