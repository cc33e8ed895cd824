"""Issue 31 item 8: `kvtui estimate`'s side-by-side rows come in one stated order (weights widest
first, then the KV cache dtype, auto first), whatever was asked and whatever the hash seed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kvtui.cli.estimate import pair_order

ROOT = Path(__file__).resolve().parents[2]


def _rows(seed: str, *extra: str) -> list[tuple[str, str]]:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "kvtui", "estimate", "--model", "llama-3.1-8b", "--gpu", "H200",
                          "--context", "8192", *extra], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    table = out.stdout.split("side by side:")[1].splitlines()[3:]  # the order line, the header, the rule
    return [(r.split()[0], r.split()[1]) for r in table if r.strip()]


def test_side_by_side_order_is_fixed_across_calls_and_seeds():
    first = _rows("1")
    assert first == [("bf16", "auto"), ("bf16", "fp8"), ("fp8", "auto"), ("fp8", "fp8")]
    assert _rows("2") == first
    # Asking for fp8/fp8 no longer moves its row to the top.
    assert _rows("3", "--weights", "fp8", "--kv-dtype", "fp8") == first


def test_pair_order_places_unknown_names_last_alphabetically():
    pairs = [("zz", "auto"), ("fp8", "fp8"), ("awq", "auto"), ("bf16", "fp8"), ("aa", "fp8"), ("bf16", "auto")]
    assert sorted(pairs, key=pair_order) == [("bf16", "auto"), ("bf16", "fp8"), ("fp8", "fp8"), ("awq", "auto"),
                                             ("aa", "fp8"), ("zz", "auto")]
