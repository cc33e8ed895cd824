"""TUI tests: real runs against the simulator (knee model), a frozen snapshot for replay and SVGs."""

from __future__ import annotations

import lzma
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"
# A real simulated run (L4, two modes), kept xz-compressed in the tree (43 KB instead of 584 KB);
# the fixtures write it back out as the plain snapshot and records a run leaves.
FROZEN = DATA / "l4-demo.json"


def unpack_frozen(where: Path) -> Path:
    """l4-demo.json and l4-demo.records.jsonl under `where`, from their .xz in tests/tui/data."""
    for name in (FROZEN.name, "l4-demo.records.jsonl"):
        (where / name).write_bytes(lzma.decompress((DATA / f"{name}.xz").read_bytes()))
    return where / FROZEN.name

# The simulator's knee model: a decode step takes 10 ms with ≤ 4 running requests, 100 ms above,
# so TPOT p95 ≤ 60 ms holds up to 4 and the fast search ends on 4 in four short steps. The margins
# are wide on purpose: a starved host adds its delay to every token the client times, and a verdict
# moves only after 50 ms of it below the knee (40 ms against the re-evaluated SLO of 150 above it).
# With 20/40 ms and a 30 ms target (10 ms of margin) a busy CI host moved the knee.
KNEE = """
name = "knee-tui"
[server]
engine = "sim"
max_model_len = 2048
extra_args = ["--knee", "4", "--knee-tpot-ms", "10", "--knee-slowdown", "10"]
[workload]
prompt_tokens = 64
output_tokens = 16
[ramp]
start = 1
max = 8
step = "double"
search = "fast"
confirm = false
warmup_s = 0.3
window_s = 1
[slo]
tpot_p95_ms = 60
"""


@pytest.fixture
def knee_path(tmp_path: Path) -> Path:
    p = tmp_path / "knee.toml"
    p.write_text(KNEE)
    return p


@pytest.fixture
def knee_scenario(knee_path: Path):
    from kvtui.io.scenario import load_scenario

    return load_scenario(knee_path)


@pytest.fixture
def frozen_path(tmp_path: Path) -> Path:
    """The frozen snapshot and its records, written where a test may write exports beside them."""
    return unpack_frozen(tmp_path)


@pytest.fixture
def frozen_doc(frozen_path: Path) -> dict[str, Any]:
    from kvtui.io.snapshot.file import load_snapshot

    return load_snapshot(frozen_path)
