"""Where kvtui's files live: what ships inside the package, and the per-user directory.

Shipped (package data, read through `importlib.resources`, so a wheel, pipx or uv install
works the same as a checkout): kvtui/data/scenarios/*.toml (the built-in demo among them)
and kvtui/data/themes/*.toml.

The user's own scenarios and themes live in one per-user directory, chosen in this order:

    1. a command's `--user-dir DIR` flag (kvtui scenarios, kvtui init)
    2. the environment variable KVTUI_HOME
    3. platformdirs' user config dir: $XDG_CONFIG_HOME/kvtui, else ~/.config/kvtui on Linux,
       ~/Library/Application Support/kvtui on macOS

with `scenarios/` and `themes/` under it. A user file with a shipped file's name wins.
Nothing here imports more than the standard library and platformdirs (`kvtui --version`
and the CLI's start-up stay fast).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Iterator

ENV_HOME = "KVTUI_HOME"
KINDS = ("scenarios", "themes")
DEMO_NAME = "sim-demo"


def shipped_dir(kind: str) -> Path:
    """The package's folder of `kind` ("scenarios" or "themes").

    `files()` gives a Traversable; kvtui is installed as plain files (setuptools never zips
    it), so the Traversable is a real directory and its path can be printed, copied, edited."""
    assert kind in KINDS, kind
    return Path(str(resources.files("kvtui") / "data" / kind))


def user_dir(override: str | os.PathLike | None = None) -> Path:
    """The per-user kvtui directory (not created here): flag > $KVTUI_HOME > platformdirs."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get(ENV_HOME, "").strip()
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("kvtui", appauthor=False))


def user_subdir(kind: str, override: str | os.PathLike | None = None) -> Path:
    assert kind in KINDS, kind
    return user_dir(override) / kind


def _tomls(d: Path) -> list[Path]:
    try:
        return sorted(p for p in d.glob("*.toml") if p.is_file())
    except OSError:
        return []


def shipped(kind: str) -> list[Path]:
    return _tomls(shipped_dir(kind))


def user_files(kind: str, override: str | os.PathLike | None = None) -> list[Path]:
    return _tomls(user_subdir(kind, override))


def all_files(kind: str, override: str | os.PathLike | None = None) -> list[Path]:
    """Shipped then user files of `kind`, a user file hiding the shipped one of the same name."""
    mine = user_files(kind, override)
    names = {p.name for p in mine}
    return [p for p in shipped(kind) if p.name not in names] + mine


def demo_scenario() -> Path:
    return shipped_dir("scenarios") / f"{DEMO_NAME}.toml"


def find_scenario(arg: str | os.PathLike) -> Path | None:
    """A scenario named by something that is not an existing file: a bare name
    (`h200-llama8b`, `h200-llama8b.toml`) or a checkout-style `scenarios/NAME.toml` (the
    scenarios used to live at the repository root; old commands and docs keep working).
    The user's directory first, then the shipped ones. None: no such scenario."""
    p = Path(arg)
    if p.exists():
        return p
    parts = p.parts
    if len(parts) == 1 or (len(parts) == 2 and parts[0] == "scenarios"):
        name = p.name if p.suffix == ".toml" else p.name + ".toml"
        for d in (user_subdir("scenarios"), shipped_dir("scenarios")):
            cand = d / name
            if cand.is_file():
                return cand
    return None


def rescue_dir() -> Iterator[Path]:
    """Where a run's snapshot goes when its --out cannot take it (a deleted folder, a full disk, a
    file-size limit), in order: $KVTUI_RESCUE_DIR, the user's state folder (platformdirs:
    ~/.local/state/kvtui/rescued on Linux), then a fresh private folder in the temp folder."""
    env = os.environ.get("KVTUI_RESCUE_DIR", "").strip()
    if env:
        yield Path(env).expanduser()
    import platformdirs

    yield Path(platformdirs.user_state_dir("kvtui", appauthor=False)) / "rescued"
    import tempfile

    try:
        yield Path(tempfile.mkdtemp(prefix="kvtui-rescued-"))  # 0700, new: no one else's folder
    except OSError:
        return
