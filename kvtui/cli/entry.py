"""Command line: `kvtui [SCENARIO]`, `kvtui run`, `kvtui sim serve`, `kvtui estimate`, …

Each command lives in `kvtui/cli/<name>.py` with `add_parser(subparsers)` and
`run(args) -> int`. Exit codes: 0 ok, 2 usage or scenario error, 1 run failed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

from kvtui import __version__
from kvtui.errors import KvtuiError, ScenarioError
from kvtui.runtime.procs import tracker

COMMANDS = ("tui", "run", "sim", "estimate", "replay", "export", "diff", "web", "import", "model", "init", "scenarios",
            "calibrate", "whatif")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2 (as argparse does), without the usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"kvtui: error: {message} (see `{self.prog} --help`)\n")


class _Version(argparse.Action):
    """`kvtui --version`: kvtui's and the launchable vLLM's (a metadata look-up: no vLLM import)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from kvtui.runtime.engines.vllm.detect import vllm_install

        v = vllm_install()
        tail = "" if v.found else " (pip install 'kvtui[vllm]' on a GPU box; the simulator needs none)"
        sys.stdout.write(f"kvtui {__version__}\n{v.describe()}{tail}\n")  # stdout, as argparse's own version action
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kvtui",
        description="Live capacity explorer for vLLM: max concurrency at your latency SLO, per precision mode.",
        epilog="With no command: the TUI on a scenario (default: the built-in simulated demo), with the TUI's "
               "options: kvtui [SCENARIO] [--theme NAME] [--start] … (all of them: kvtui tui --help; the themes: "
               "kvtui scenarios).",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="kvtui's version, and vLLM's when it is installed")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"kvtui.cli.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from kvtui.terminal import guard_streams, unguard_streams

    # Every line any command prints: controls and bidi characters from files and servers made
    # visible, and an ASCII rendering where the stream cannot take UTF-8 (kvtui.terminal).
    guarded = guard_streams()
    try:
        return _main(argv)
    finally:
        if guarded:
            unguard_streams()


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    typed = list(argv)  # as the user wrote it: a stopped run's resume line repeats it
    # `kvtui` and `kvtui SCENARIO.toml [options]` open the TUI.
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv = ["tui"] + argv
    parser = build_parser()
    args = parser.parse_args(argv)
    args.typed_argv = typed
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    guard = _guard_stdout()
    try:
        rc = _dispatch(args)
        return _stdout_gone(guard, rc, getattr(args, "command", None))
    finally:
        # The load generator's spawns started a resource tracker: it goes with kvtui, not after.
        tracker.stop()


class _GuardedStdout:
    """sys.stdout, minus its failures: a closed stdout (`>&-`), a reader that went away (`| head -1`),
    a redirect to a full disk. The first failure is kept (`gone`), later output is dropped, and the
    command ends quietly with a stated exit code (_stdout_gone), never a BrokenPipeError or
    AttributeError traceback: what the command writes elsewhere (a run's snapshot) goes on."""

    def __init__(self, inner: object, gone: str | None = None):
        self._inner = inner
        self.gone = gone

    def _failed(self, e: BaseException) -> None:
        if self.gone is None:
            self.gone = (e.strerror if isinstance(e, OSError) and e.strerror else str(e)) or type(e).__name__
        try:  # Python's own flush at exit would fail again ("Exception ignored … BrokenPipeError")
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1)
            os.close(fd)
        except OSError:
            pass

    def write(self, text: str) -> int:
        if self.gone is None:
            try:
                return int(self._inner.write(text))  # type: ignore[attr-defined]
            except (OSError, ValueError) as e:  # EPIPE, EFBIG/ENOSPC, a closed file
                self._failed(e)
        return len(text)

    def flush(self) -> None:
        if self.gone is None:
            try:
                self._inner.flush()  # type: ignore[attr-defined]
            except (OSError, ValueError) as e:
                self._failed(e)

    def isatty(self) -> bool:
        if self.gone is not None:
            return False
        try:
            return bool(self._inner.isatty())  # type: ignore[attr-defined]
        except (OSError, ValueError):
            return False

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


def _guard_stdout() -> _GuardedStdout:
    if isinstance(sys.stdout, _GuardedStdout):
        return sys.stdout
    inner = sys.stdout
    guard = _GuardedStdout(inner if inner is not None else open(os.devnull, "w"),
                           None if inner is not None else "stdout is closed")
    setattr(sys, "stdout", guard)  # duck-typed: write, flush, isatty, and the rest delegated
    return guard


# `kvtui run`'s product is its snapshot (whole whatever became of stdout): its own exit code stands.
# Any other command's product is what it prints: a cut one exits 141, as a shell reports a command
# that a pipe's reader ended (128 + SIGPIPE).
STDOUT_GONE_EXIT = 141


def _stdout_gone(guard: _GuardedStdout, rc: int, command: str | None) -> int:
    if guard.gone is None:
        guard.flush()  # what is still buffered: a failure here is one too
    if guard.gone is None:
        return rc
    try:
        print(f"kvtui: stdout went away ({guard.gone}): the rest of the output was dropped", file=sys.stderr)
    except (OSError, ValueError, AttributeError):
        pass
    if command == "run":
        return rc
    return rc if rc != 0 else STDOUT_GONE_EXIT


def _dispatch(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except ScenarioError as e:
        for p in e.problems:
            print(f"kvtui: {p}", file=sys.stderr)
        return e.exit_code
    except KvtuiError as e:
        print(f"kvtui: {e}", file=sys.stderr)
        tail = getattr(e, "log_tail", "")
        if tail and os.environ.get("KVTUI_QUIET_TAIL") != "1":
            print("--- server log (last lines) ---", file=sys.stderr)
            print(tail, file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("kvtui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
