"""The parser and main(): parse, resolve the settings, run one command's module in a session."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import NoReturn, TypeVar, overload

from triton_release import __version__, cache, processes
from triton_release import session as sessions
from triton_release.cli import (
    build,
    bump,
    changed,
    doctor,
    promote,
    push,
    record,
    release,
    rollback,
    stage,
    test,
    validate,
    verify,
)
from triton_release.cli.common import Context, flag_default, given_settings, setting
from triton_release.console import Console
from triton_release.errors import UsageError
from triton_release.registry.credentials import unpaired_credentials
from triton_release.settings import CONFIG_FILE, resolve

COMMANDS: dict[str, ModuleType] = {
    "validate": validate,
    "changed": changed,
    "bump": bump,
    "build": build,
    "test": test,
    "record": record,
    "push": push,
    "release": release,
    "rollback": rollback,
    "stage": stage,
    "promote": promote,
    "verify": verify,
    "doctor": doctor,
}
MULTI_STEP = {"release", "bump", "push", "rollback", "stage", "promote"}  # commands whose steps each print their time


_N = TypeVar("_N")


class _HelpFormatter(argparse.HelpFormatter):
    """--help gives each flag's default, as the CLI reference does (for a flag that sets a setting,
    the setting's), unless its help already says it or the flag is required."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help = action.help or ""
        default = flag_default(action)
        if default is None or action.required or "default" in help or help == argparse.SUPPRESS:
            return action.help
        return f"{help} (default: {default.replace('%', '%%')})"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # exit 2 through main, like every usage error
        raise UsageError(f"{self.prog}: {message}{_did_you_mean(message)}. See `{self.prog} --help`.")

    @overload
    def parse_args(self, args: Iterable[str] | None = None, namespace: None = None) -> argparse.Namespace: ...
    @overload
    def parse_args(self, args: Iterable[str] | None, namespace: _N) -> _N: ...
    @overload
    def parse_args(self, *, namespace: _N) -> _N: ...
    def parse_args(self, args: Iterable[str] | None = None, namespace: _N | None = None) -> _N | argparse.Namespace:
        """As argparse's, with a "did you mean" for a flag the command does not take."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self.commands.get(getattr(parsed, "command", None) or "", self)
            flags = sorted({flag for action in command._actions for flag in action.option_strings})
            hints = [
                f"did you mean {close[0]}?"
                for extra in extras
                if extra.startswith("--")
                for close in [difflib.get_close_matches(extra.split("=", 1)[0], flags, n=1)]
                if close
            ]
            hint = f" ({'; '.join(hints)})" if hints else ""
            raise UsageError(
                f"{command.prog}: unrecognized arguments: {' '.join(extras)}{hint}. See `{command.prog} --help`."
            )
        return parsed

    commands: dict[str, argparse.ArgumentParser] = {}  # the top parser's: each command's parser


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


def _did_you_mean(message: str) -> str:
    """' (did you mean validate?)' for a misspelt command or choice in argparse's message, or ''."""
    found = _INVALID_CHOICE.search(message)
    if found is None:
        return ""
    choices = [choice.strip().strip("'") for choice in found.group(2).split(",")]
    close = difflib.get_close_matches(found.group(1), choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


# The flags every command takes, given before the command or after it, and their defaults.
GLOBAL_DEFAULTS = {"config": None, "report": None, "json": False, "debug": False}


def add_global_flags(parser: argparse.ArgumentParser) -> None:
    """Declared on the top parser and on each command's, with no default of their own (argparse
    copies a command's defaults over what the top parser read: `--json changed` would be lost).
    Each parser gets actions of its own, so the top parser's defaults reach no command's."""
    flags = parser.add_argument_group("every command")
    flags.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help=f"settings file (default: {CONFIG_FILE} where present, here or in the nearest parent "
        "folder up to the git top level)",
    )
    setting(flags, "--model-repository", "model_repository", metavar="DIR", default=argparse.SUPPRESS)
    flags.add_argument("--report", metavar="FILE", default=argparse.SUPPRESS, help="write the JSON report there")
    flags.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="the JSON report on stdout; human lines on stderr",
    )
    flags.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show a traceback on failure")


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="triton-release",
        description="Release NVIDIA Triton Python-backend models.",
        formatter_class=_HelpFormatter,
    )
    top.add_argument("--version", action="version", version=f"triton-release {__version__}")
    add_global_flags(top)
    top.set_defaults(**GLOBAL_DEFAULTS)
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    top.commands = {}
    for name, module in COMMANDS.items():
        command = sub.add_parser(name, help=module.HELP, description=module.HELP, formatter_class=_HelpFormatter)
        module.add_arguments(command)
        add_global_flags(command)
        top.commands[name] = command
    return top


def _named_in(argv: list[str]) -> tuple[str | None, str | None]:
    """The command and the --report file a command line names, read without the parser: for the
    report of a command line the parser refused."""
    command = report = None
    items = iter(argv)
    for item in items:
        if item == "--":
            break
        if item.startswith("--report="):
            report = item.partition("=")[2] or None
        elif item == "--report":
            value = next(items, None)
            report = value if value and not value.startswith("-") else None
        elif command is None and item in COMMANDS:
            command = item
    return command, report


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """The console script. The environment is read here, once, and passed on."""
    env = dict(os.environ if env is None else env)
    argv = sys.argv[1:] if argv is None else argv
    cache.configure(env)
    json_out = "--json" in argv
    console = Console(json_mode=json_out, ci=env.get("GITHUB_ACTIONS") == "true")
    try:
        args = parser().parse_args(argv)
    except UsageError as exc:
        console.failure(exc)
        command, report_path = _named_in(argv)
        if json_out or report_path:  # a refused command line gets its report too, with the error
            sessions.write_report(sessions.Report(command or "", error=exc), report_path, json_out, console)
        return exc.exit_code
    session = sessions.Session(args.command, console, timed=args.command in MULTI_STEP)

    def body(session: sessions.Session) -> None:
        for warning in unpaired_credentials(env):
            console.warning(warning)
        settings = resolve(given_settings(args), args.config)
        console.settings(settings)
        COMMANDS[args.command].run(Context(args, settings, console, env), session)

    return sessions.run(session, body, report_path=args.report, json_out=args.json, debug=args.debug)


script = processes.script(main)  # the console script: main, then the process ends at once

if __name__ == "__main__":
    script()
