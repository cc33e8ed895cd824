"""The step table: one row per finished step of the viewed mode; ★ marks the best load.

Each step is read through the snapshot schema's typed `Step` (the state keeps the dicts)."""

from __future__ import annotations

from typing import Any, Mapping

from rich.text import Text
from textual.widgets import DataTable

from kvtui.core.evaluate import in_lock_step
from kvtui.io.snapshot.schema import Step
from kvtui.report.text import limit_cell, step_how
from kvtui.tui.cellfmt import as_stored, fmt_load, fmt_ms, fmt_share  # noqa: F401
from kvtui.tui.charts import fmt_num
from kvtui.tui.predicted import has_prediction, predicted_cell
from kvtui.tui.state import RunState

COLUMNS = [
    # key, label, compact?
    ("mark", " ", True),
    ("load", "c", True),
    ("verdict", "SLO", True),
    ("limit", "limit", True),
    ("n", "n", True),
    ("req_s", "req/s", False),
    ("tok_s", "tok/s", True),
    ("ttft", "TTFT p95", True),
    ("tpot", "TPOT p95", True),
    ("itl", "ITL p99", False),
    ("e2e", "E2E p95", False),
    ("goodput", "good", False),
    ("kv", "KV max", True),
    ("preempt", "preempt", False),
    ("prefix", "prefix", False),
    ("errors", "err", True),
    ("why", "step", False),
    ("pred", "predicted", True),  # only for a mode with a prediction (tui/predicted.py)
]
LABELS = {k: label for k, label, _ in COLUMNS}
# Where the full set does not fit (120 columns and less): these go first, whole.
DROP_ORDER = ["prefix", "req_s", "preempt", "goodput", "e2e", "itl", "why"]


class StepTable(DataTable):
    """One row per finished step of the viewed mode; ★ marks the best load."""

    DEFAULT_CSS = """
    StepTable { height: 1fr; min-height: 4; }
    """

    def __init__(self, state: RunState, **kw: Any):
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)
        self.state = state
        self._cols_for: tuple | None = None
        self._rows_key: Any = None
        self._n_rows = 0

    def label(self, key: str) -> str:
        return self.state.load_word if key == "load" else LABELS[key]

    def fit_columns(self, compact: bool, rows: list[dict[str, Any]]) -> list[str]:
        """The columns to show: the compact set at 80 columns; else all that fit the width, the least
        read going first (whole columns, never one cut at the edge)."""
        cols = [k for k, _, c in COLUMNS if (c or not compact) and (k != "pred" or has_prediction(self.state.viewed))]
        room = (self.size.width or 200) - 2  # the vertical scrollbar

        def need(k: str) -> int:
            cell = max([Text.from_markup(r[k]).cell_len if isinstance(r[k], str) else r[k].cell_len for r in rows]
                       or [0])
            return max(len(self.label(k)), cell) + 2 * self.cell_padding

        widths = {k: need(k) for k in cols}
        for k in DROP_ORDER:
            if sum(widths[c] for c in cols) <= room:
                break
            if k in cols:
                cols.remove(k)
        return cols

    def setup_columns(self, cols: list[str]) -> None:
        key = (tuple(cols), self.state.load_word)
        if key == self._cols_for:
            return
        self._cols_for = key
        self.clear(columns=True)
        for k in cols:
            self.add_column(self.label(k), key=k)
        self._rows_key = None
        self._n_rows = 0

    def row_cells(self, step: Step | Mapping[str, Any], best: float | None, th: Any) -> dict[str, Any]:
        s = Step.of(step)
        passed = s.passed
        verdict = {True: Text("✓ PASS", style=f"bold {th.success}"), False: Text("✗ FAIL", style=f"bold {th.error}"),
                   None: Text("? n/a", style="dim")}[passed]
        measured = s.ran_to_its_end
        if not measured and passed is not False:
            verdict = Text("✂ cut", style="dim")  # a stop ended it: no verdict (older snapshots kept theirs)
        if s.flags and passed is not False:
            # Untrusted server numbers or the client's own failure: the flag, never a plain n/a.
            verdict = Text("⚑ " + ",".join(sorted(s.flags))[:24], style=f"bold {th.warning or 'yellow'}")
        is_best = best is not None and s.load == best and passed and measured
        samples = s.samples or {}
        why = s.why or ""
        return {
            "mark": Text("★", style=f"bold {th.success}") if is_best else Text(""),
            "load": Text(fmt_load(s.load), style="bold" if is_best else ""),
            "verdict": verdict,
            "limit": limit_cell(s),  # a PASS says only the limit it came near, as the headless line does
            # the TTFT samples, else the requests counted, each as the step keeps it
            "n": str(samples["ttft"] if "ttft" in samples else as_stored(s, "requests")),
            "req_s": fmt_num(s.request_s),
            "tok_s": fmt_num(s.output_tok_s),
            "ttft": fmt_ms(_pct(s, "ttft", "p95")),
            "tpot": fmt_ms(_pct(s, "tpot", "p95")),
            "itl": fmt_ms(_pct(s, "itl", "p99")),
            "e2e": fmt_ms(_pct(s, "e2e", "p95")),
            "goodput": fmt_share(s.goodput),
            # A /metrics value out of its range was dropped (never a verdict or a label): flagged, not "—".
            "kv": "⚑ range" if any("kv" in str(x) for x in s.metrics_out_of_range or []) else
                  "⚑ none" if s.kv_cache_usage_max is None and s.metrics_missing else
                  fmt_share(s.kv_cache_usage_max),
            "preempt": fmt_load(s.preemptions),
            "prefix": fmt_share(s.prefix_cache_hit_rate),
            "errors": str(as_stored(s, "errors")),
            "why": " · ".join(x for x in ["" if why == "search" else why, *step_how(s)] if x)
                   + (" lock-step" if in_lock_step(s) else "") + out_of_range(s),
            "pred": predicted_cell(s),
        }

    def sync(self, compact: bool) -> None:
        st = self.state
        mv = st.viewed
        key = (mv.name if mv else None, st.steps_version, st.slo_version, st.cursor, self.app.theme, compact,
               self.size.width)
        if key == self._rows_key:
            return
        steps = mv.shown_steps(st.edited) if mv else []
        best = st.best(mv)
        th = self.app.current_theme
        rows = [self.row_cells(s, best, th) for s in steps]
        cols = self.fit_columns(compact, rows)
        self.setup_columns(cols)
        self._rows_key = key
        limit = len(steps) if not st.replay or st.cursor is None else st.cursor + 1
        cursor_row, prev = self.cursor_row, self._n_rows
        if prev and prev <= len(rows) and not st.replay:
            # Update the rows already there (an SLO change, a new best), append the new ones.
            for i in range(prev):
                for c in cols:
                    self.update_cell(str(i), c, rows[i][c])
            for i in range(prev, len(rows)):
                self.add_row(*[rows[i][c] for c in cols], key=str(i))
        else:
            self.clear()
            for i, r in enumerate(rows[:limit]):
                self.add_row(*[r[c] for c in cols], key=str(i))
        self._n_rows = min(len(rows), limit)
        if st.replay and st.cursor is not None and self.row_count:
            self.move_cursor(row=min(st.cursor, self.row_count - 1))
        elif self.row_count:
            follow = cursor_row < 0 or cursor_row >= prev - 1  # on the last row: follow new steps
            self.move_cursor(row=self.row_count - 1 if follow else cursor_row)


def _pct(s: Step, metric: str, pct: str) -> Any:
    """A latency's percentile (p95, p99…) of the step; None where it has none."""
    d = s.latency(metric)
    return d.by_key(pct) if d is not None else None


def out_of_range(step: Step | Mapping[str, Any]) -> str:
    """The step's /metrics values that were out of range (kvtui.runtime.telemetry.prom.check_ranges), in words."""
    st = Step.of(step)
    bad = st.metrics_out_of_range
    gone = f" ⚑ no /metrics: {st.metrics_missing}" if st.metrics_missing else ""
    return ((" ⚑ /metrics out of range: " + ", ".join(str(x) for x in bad)) if bad else "") + gone
