"""What a scenario's `model` names, found offline: a local directory, a Hugging Face id in the
local cache, an id that would need a download, or nothing at all — and why, in words.

vLLM treats any model argument that is not an existing directory as a Hub id, so a missing
`/tmp/model8b` comes back from it as `HFValidationError: Repo id must be in the form
'repo_name'…`. This says "/tmp/model8b does not exist" instead, before anything starts.
The Hub cache is read as huggingface_hub lays it out (HF_HUB_CACHE, else HF_HOME/hub, else
$XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub), without importing it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# huggingface_hub's rule for a repo id: "name" or "namespace/name", [\w.-], no "--" or ".."
_HF_ID = re.compile(r"^(?:[A-Za-z0-9][\w.\-]{0,95}/)?[A-Za-z0-9][\w.\-]{0,95}$")

DIR = "dir"  # a local directory with config.json
CACHED = "cached"  # a Hub id found in the local cache
REMOTE = "remote"  # a valid Hub id, not in the cache: vLLM would download it
MISSING = "missing"  # a path that does not exist, or a directory without config.json
INVALID = "invalid"  # neither a path nor a valid Hub id


@dataclass
class ModelRef:
    ref: str
    kind: str
    path: Path | None = None  # the directory holding config.json (DIR, CACHED)
    problem: str = ""

    @property
    def found(self) -> bool:
        return self.kind in (DIR, CACHED)

    def config(self) -> dict[str, Any]:
        """config.json as a dict ({} when not found or unreadable)."""
        if self.path is None:
            return {}
        try:
            d = json.loads((self.path / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return d if isinstance(d, dict) else {}


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return base / "huggingface" / "hub"


def offline() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _cached_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot of `repo_id` that has a config.json: refs/main's, else the newest."""
    repo = hub_cache() / ("models--" + repo_id.replace("/", "--"))
    snaps = repo / "snapshots"
    if not snaps.is_dir():
        return None
    try:
        main = (repo / "refs" / "main").read_text().strip()
    except OSError:
        main = ""
    cands = [snaps / main] if main else []
    try:
        cands += sorted((p for p in snaps.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        pass
    for c in cands:
        if (c / "config.json").is_file():
            return c
    return None


def _looks_like_path(ref: str) -> bool:
    return (
        ref.startswith(("/", "./", "../", "~", ".\\"))
        or os.sep + os.sep in ref
        or ref in (".", "..")
        or ref.count("/") > 1
        or Path(ref).expanduser().exists()
    )


def resolve_model(ref: str) -> ModelRef:
    """Where `ref` (a directory, a config.json, or a Hub id) is, without a network call."""
    ref = str(ref).strip()
    if not ref:
        return ModelRef(ref, INVALID, problem="no model given")
    if _looks_like_path(ref):
        p = Path(ref).expanduser()
        if p.is_file() and p.name == "config.json":
            return ModelRef(ref, DIR, p.parent)
        if not p.exists():
            return ModelRef(ref, MISSING, problem=f"{ref} does not exist")
        if not p.is_dir():
            return ModelRef(ref, MISSING, problem=f"{ref} is a file, not a model directory (one with config.json)")
        if not (p / "config.json").is_file():
            return ModelRef(ref, MISSING, problem=f"{ref} has no config.json: not a Hugging Face model directory")
        return ModelRef(ref, DIR, p)
    if not _HF_ID.match(ref) or "--" in ref or ".." in ref:
        return ModelRef(
            ref, INVALID, problem=f"{ref!r} is not a local directory and not a valid Hugging Face id (org/name)"
        )
    snap = _cached_snapshot(ref)
    if snap is not None:
        return ModelRef(ref, CACHED, snap)
    return ModelRef(ref, REMOTE, problem=f"{ref} is not in the local Hugging Face cache ({hub_cache()})")


# --- what a config.json says about its weights --------------------------------------------------


def checkpoint_quantization(cfg: dict[str, Any]) -> str:
    """The checkpoint's own weight format from `quantization_config`: "awq", "gptq", "fp8",
    another method's name, or "" (unquantized). compressed-tensors checkpoints are read from
    their config groups (w4a16 → "gptq"-like int4 is reported as "compressed-tensors")."""
    q = cfg.get("quantization_config")
    if not isinstance(q, dict) and isinstance(cfg.get("text_config"), dict):
        q = cfg["text_config"].get("quantization_config")
    if not isinstance(q, dict):
        return ""
    method = str(q.get("quant_method") or "").lower()
    if method in ("awq", "awq_marlin"):
        return "awq"
    if method in ("gptq", "gptq_marlin"):
        return "gptq"
    if method in ("fp8", "fbgemm_fp8", "modelopt"):
        return "fp8"
    return method
