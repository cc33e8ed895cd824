"""The scenario a command line asks for, with one precedence: defaults < TOML < --set < --engine.

`kvtui run` and `kvtui tui` both read it here, so the order can differ nowhere.
"""

from __future__ import annotations

import argparse
from typing import Any

from kvtui.errors import UsageError


def overrides(args: argparse.Namespace) -> list[str]:
    """The --set values in their order, then --engine (load_scenario applies them in order: the last wins)."""
    out = list(getattr(args, "overrides", None) or [])
    engine = getattr(args, "engine", None)
    if engine:
        out.append(f"server.engine=\"{engine}\"")
    return out


def check_fast(scenario: Any, fast: bool) -> None:
    if fast and scenario.server.engine != "sim":
        raise UsageError("--fast simulates offline and needs the sim engine (server.engine = \"sim\")")
    if fast and scenario.server.replicas > 1:
        raise UsageError(f"--fast models one server; server.replicas = {scenario.server.replicas} runs live "
                         "(without --fast), each replica its own kvtui sim serve")


def check_outputs(args: argparse.Namespace) -> None:
    """--out and its sidecars (journal, records) refused up front when one is not a regular file
    or an absent path (kvtui.safeio.check_output): one line, exit 2, before anything runs."""
    out = getattr(args, "out", None)
    if out:
        from pathlib import Path

        from kvtui.report.outclaim import check_out_path

        check_out_path(Path(out))


def resumes(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """The --resume snapshots, loaded (a bad file fails here with its one-line error)."""
    paths = getattr(args, "resume", None)
    if not paths:
        return None
    from kvtui.report.snapshot import load_snapshot

    return [load_snapshot(p) for p in paths]
