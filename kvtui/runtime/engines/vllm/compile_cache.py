"""vLLM's torch.compile cache kept between modes and runs (issue 28, item 7), and its state per start.

vLLM (0.26 and 0.32 alike, vllm/envs.py) keeps its compiled graphs under VLLM_CACHE_ROOT
(default ~/.cache/vllm): torch_compile_cache/<hash of the model, its dtype, quantization, KV dtype,
compilation config…>/rank_0_0/backbone, and the AOT-compiled function under
torch_compile_cache/torch_aot_compile/<hash>. A later start of the same configuration loads them
("Directly load the compiled graph(s) … from the cache" / "Directly load AOT compilation from
path") instead of compiling again ("Compiling a graph for compile range … takes N s"). A mode is
one configuration: the saving comes from starting it again (a re-run, a resumed run, a confirming
restart), not from one mode to the next (another hash: another entry in the same root).

The hash covers every VLLM_* environment variable vLLM does not list as ignored; 0.26 does not list
VLLM_API_KEY, so kvtui's fresh key per start made every start a miss on the H200: there the key goes
through stdin instead of the environment (kvtui.runtime.engines.vllm.command.api_key_in_compile_hash). Measured
on the H200 then (docs/results/h200-compile-cache.md): a bf16 start 117.6 s cold, 66.3 s with a hit.

kvtui points VLLM_CACHE_ROOT at a per-user cache directory of its own (never the checkout) unless the
environment, the scenario's [server.env] or the mode's env already set it, so the cache outlives a
temporary HOME and is the same for every run of this user. KVTUI_VLLM_CACHE_ROOT overrides the place;
KVTUI_VLLM_CACHE_ROOT=vllm leaves vLLM's own default.

The state each start reports (modes[].server.compile_cache):
  hit   the graphs were loaded from the cache (no compile)
  miss  compiled, while the cache root already held other configurations' graphs
  cold  compiled into an empty (or new) cache root
  None  no torch.compile in the log (enforce_eager, another engine, a log without those lines)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from kvtui.io.snapshot.schema import ServerFacts

ENV = "VLLM_CACHE_ROOT"
ENV_KVTUI = "KVTUI_VLLM_CACHE_ROOT"


def default_root() -> Path:
    """kvtui's per-user cache directory for vLLM (platformdirs' user cache dir, e.g. ~/.cache/kvtui/vllm)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("kvtui", appauthor=False)) / "vllm"


def cache_env(environ: Mapping[str, str], *scenario_envs: Mapping[str, str]) -> dict[str, str]:
    """The env to add to a vLLM launch: {VLLM_CACHE_ROOT: kvtui's root}, or {} where it is set already."""
    if ENV in environ or any(ENV in e for e in scenario_envs):
        return {}
    want = environ.get(ENV_KVTUI, "").strip()
    if want == "vllm":
        return {}
    return {ENV: str(Path(want).expanduser() if want else default_root())}


def root_of(env: Mapping[str, str]) -> Path:
    """The cache root a launch with `env` uses (vLLM's default where VLLM_CACHE_ROOT is not set)."""
    return Path(env.get(ENV) or os.path.expanduser("~/.cache/vllm")).expanduser()


def has_graphs(root: Path) -> bool:
    """Whether the root holds any compiled configuration yet (read before the launch)."""
    d = root / "torch_compile_cache"
    try:
        return d.is_dir() and any(d.iterdir())
    except OSError:
        return False


def state(parsed: str | None, had_graphs: bool) -> str | None:
    """The start's cache state from the log's verdict ("hit" / "miss" / None) and the root before it."""
    if parsed == "miss" and not had_graphs:
        return "cold"
    return parsed


def start_line(server: ServerFacts | Mapping[str, Any]) -> str:
    """The start's phases with the cache state, for the screen and the reports: "load 3.1 s,
    torch.compile 17.3 s (cache cold), engine init 41.1 s" — "" for a start that says nothing of its
    cache (the simulator, a snapshot from before: their lines stay as they were)."""
    facts = ServerFacts.of(server)
    st = facts.compile_cache
    if not st:
        return ""
    parts = []
    for v, name in ((facts.load_s, "load"), (facts.compile_s, "torch.compile"), (facts.init_engine_s, "engine init")):
        if isinstance(v, (int, float)):
            parts.append(f"{name} {v:.1f} s" + (f" (cache {st})" if name == "torch.compile" else ""))
    if not any(p.startswith("torch.compile") for p in parts):
        parts.append(f"torch.compile cache {st}")
    return ", ".join(parts)
