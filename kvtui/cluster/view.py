"""The lanes as the driver sees them: one row each, fed by the hub's events.

The same rows make the headless lines and the TUI's table (kvtui/tui/cluster_view.py). States:
queued (waiting for a GPU that fits) → running (on a node) → done / failed / stopped, or
retrying (its node was lost; Ray runs it again where one fits) → lost (lost twice, or no node
left for it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from kvtui.terminal import printable

COLUMNS = ("lane", "mode", "state", "node", "host", "GPU", "try", "steps", "last step", "knee")
WIDTHS = (4, 14, 8, 12, 14, 22, 3, 5, 52, 6)  # the TUI's columns: rows fill in after the table is drawn


@dataclass
class LaneRow:
    lane: str
    mode: str
    state: str = "queued"
    node_id: str = ""
    host: str = ""
    gpu: str = ""
    attempt: int = 0
    steps: int = 0
    last: str = ""
    knee: Any = None
    error: str = ""
    nodes: list[str] = field(default_factory=list)  # every node it ran on (a retry's too)

    def cells(self) -> tuple[str, ...]:
        knee = "" if self.knee is None and self.state != "done" else ("none" if self.knee is None else f"{self.knee:g}")
        return (self.lane, self.mode, self.state, self.node_id[:12], self.host, self.gpu, str(self.attempt or ""),
                str(self.steps), self.last, knee)


def step_words(st: dict[str, Any]) -> str:
    kind = {"concurrency": "c", "trace": "trace×"}.get(st.get("load_kind", "concurrency"), "rate")
    load = st.get("load")
    eq = "" if kind == "trace×" else "="
    parts = [f"{kind}{eq}{load:g}" if isinstance(load, (int, float)) else f"{kind}{eq}?"]
    for key, label in (("ttft_p95_ms", "TTFT p95"), ("tpot_p95_ms", "TPOT p95")):
        v = st.get(key)
        if isinstance(v, (int, float)):
            parts.append(f"{label} {v:,.0f} ms")
    tok = st.get("output_tok_s")
    if isinstance(tok, (int, float)):
        parts.append(f"{tok:,.0f} tok/s")
    parts.append("PASS" if st.get("passed") else "FAIL")
    return " ".join(parts)


def gpu_words(ev: dict[str, Any]) -> str:
    ids = ",".join(ev.get("gpu_ids") or []) or "-"
    names = ev.get("gpu_names") or []
    return f"GPU {ids}" + (f" {names[0]}" if names else "")


class LanesView:
    """The rows, and a line per change for whoever prints (headless) or redraws (the TUI)."""

    def __init__(self, modes: list[tuple[str, str]], on_line: Callable[[str], None] | None = None):
        self.rows: dict[str, LaneRow] = {lane: LaneRow(lane, mode) for lane, mode in modes}
        self.on_line = on_line
        self.changed = True

    def say(self, row: LaneRow | None, text: str) -> None:
        if self.on_line is not None:
            prefix = f"({row.lane} {row.mode}{' @ ' + row.host + ' ' + row.node_id[:8] if row.node_id else ''}) " \
                if row is not None else ""
            self.on_line(printable(prefix + text))

    def apply(self, ev: dict[str, Any]) -> None:
        row = self.rows.get(str(ev.get("lane")))
        if row is None:
            return
        self.changed = True
        kind = ev.get("kind")
        if kind == "started":
            before = row.node_id
            row.state, row.node_id, row.host = "running", str(ev.get("node_id") or ""), str(ev.get("host") or "")
            row.gpu, row.attempt, row.steps, row.last = gpu_words(ev), int(ev.get("attempt") or 1), 0, ""
            row.nodes.append(row.node_id)
            retry = f", try {row.attempt}: node {before[:12]} was lost mid-lane" if row.attempt > 1 else ""
            self.say(row, f"kvtui: lane {row.lane}: mode {row.mode} {'retried' if retry else 'started'} on node "
                          f"{row.node_id[:12]} ({row.host}), {row.gpu}{retry}")
        elif kind == "line":
            self.say(row, str(ev.get("text", "")))
        elif kind == "step":
            row.steps += 1
            row.last = step_words(ev.get("step") or {})
        elif kind == "mode_done":
            row.knee = ev.get("knee")
            if ev.get("error"):
                row.error = str(ev["error"])
        elif kind == "state":
            row.state = str(ev.get("state"))
            if ev.get("why"):
                row.error = str(ev["why"])
            if ev.get("say"):
                self.say(row, str(ev["say"]))

    def set_state(self, lane: str, state: str, why: str = "", say: str = "") -> None:
        self.apply({"lane": lane, "kind": "state", "state": state, "why": why, "say": say})

    def table(self) -> list[tuple[str, ...]]:
        return [r.cells() for r in self.rows.values()]
