"""The pre-flight's suggestion when the scenario cannot run here: the same modes in the simulator."""

from __future__ import annotations

import difflib
import os
import re
import shlex

from kvtui.io.scenario.schema import Mode, Scenario

# --- the simulated what-if ------------------------------------------------------------------------


def _sim_shape(ref: str, awq: bool = False) -> str | None:
    """A bundled model shape the simulator knows for `ref`: itself if it loads (a config.json or a
    bundled name), else the closest bundled name by size ("8b", "70b") and family."""
    from kvtui.errors import UsageError
    from kvtui.simulator.model.catalog import bundled_models, load_model

    try:
        load_model(ref)
        return None
    except UsageError:
        pass
    names = bundled_models()
    base = os.path.basename(ref.rstrip("/")).lower()
    size = re.search(r"(\d+(?:\.\d+)?)b", base)
    cands = [n for n in names if size and re.search(rf"(?<![\d.]){re.escape(size.group(1))}b", n)] or names
    if awq or "awq" in base:
        cands = [n for n in cands if "awq" in n] or cands
    else:
        cands = [n for n in cands if "awq" not in n] or cands
    pref = [n for n in cands if n.startswith("llama")]
    return (difflib.get_close_matches(base, pref or cands, n=1, cutoff=0) or ["llama-3.1-8b"])[0]


def what_if_command(sc: Scenario, modes: list[Mode]) -> str:
    """`kvtui run … --engine sim --fast` of this scenario, with the model shapes the simulator needs."""
    src = sc.source if sc.source and not sc.source.startswith("<") else sc.name
    from kvtui import paths

    if os.path.dirname(os.path.abspath(src)) in (
        str(paths.shipped_dir("scenarios")),
        str(paths.user_subdir("scenarios")),
    ):
        src = os.path.splitext(os.path.basename(src))[0]  # `kvtui run NAME` finds it
    parts = ["kvtui", "run", src, "--engine", "sim", "--fast", "--headless"]
    shape = _sim_shape(sc.server.model) if sc.server.model else None
    if shape:
        parts += ["--set", f'server.model="{shape}"']
    for i, m in enumerate(sc.modes):
        if m.model and m in modes:
            s = _sim_shape(m.model, awq=m.weights == "int4")
            if s:
                parts += ["--set", f'modes.{i}.model="{s}"']
    return " ".join(shlex.quote(p) for p in parts)
