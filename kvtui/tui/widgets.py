"""Dashboard widgets other than the charts: header, status line, memory split, step table, log, slider.

Each reads the `RunState` when the dashboard's timer asks it to (`sync()`), on the UI
thread, and redraws only when the part of the state it shows changed. Steps are read through the
snapshot schema's typed `Step`; the step in flight and the load generator's progress are the
events' own payloads, and the app's controls (paused, hold, stopping) its own flags.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.events import Click
from textual.message import Message
from textual.widget import Widget
from textual.widgets import RichLog, Static

from kvtui import clock
from kvtui.explore.events import StepProgress
from kvtui.io.snapshot.schema import Step
from kvtui.report.text import speed_words
from kvtui.tui.charts import fmt_num
from kvtui.tui.redraw import KeyedText
from kvtui.tui.state import RunState, limit_word

STATUS_WORDS = {
    "idle": "READY",
    "starting": "STARTING",
    "running": "RUNNING",
    "paused": "PAUSED",
    "stopping": "STOPPING",
    "finished": "FINISHED",
    "stopped": "STOPPED",
    "failed": "FAILED",
    "replay": "REPLAY",
}


from kvtui.tui.cellfmt import fmt_load  # noqa: E402,F401 - also this module's names


class InfoHeader(KeyedText):
    """Scenario, mode, engine, GPU, vLLM version and the SIMULATED badge: always on screen."""

    DEFAULT_CSS = """
    InfoHeader { height: 1; width: 1fr; background: $panel; color: $foreground; text-wrap: nowrap; }
    """

    def data_key(self) -> Any:
        return (self.state.header_version, self.size.width, self.app.theme)

    def on_resize(self) -> None:
        """Built before its first layout (width 0), or the terminal resized: fit it again."""
        self.sync()

    def build(self) -> Text:
        st = self.state
        lab = st.labels()
        th = self.app.current_theme
        badge = Text()
        if lab["simulated"]:
            badge.append(" SIMULATED ", style=f"bold reverse {th.warning or 'yellow'}")
        if st.replay:
            badge.append(" REPLAY ", style=f"bold reverse {th.primary}")
        if lab["dummy_weights"]:
            badge.append(" dummy weights ", style="bold reverse")
        ts = lab["time_scale"]
        if speed_words(ts):
            badge.append(f" {speed_words(ts)} ", style="reverse")
        width = max(20, self.size.width or 80)
        room = width - badge.cell_len
        gpu = lab["gpu"]
        version_word = "vLLM " if lab["engine"] == "vllm" else "version "
        mode = f"{lab['mode']} {lab['mode_pos']}".strip()
        full = [("", lab["scenario"]), ("mode ", mode), ("engine ", lab["engine"]), ("GPU ", gpu),
                (version_word, lab["version"])]
        short_gpu = gpu.replace(" (SIMULATED)", "") if lab["simulated"] else gpu
        short = [("", lab["scenario"]), ("", mode), ("", lab["engine"]), ("", short_gpu), ("", lab["version"])]
        t = Text()
        # Narrower: the short forms, then whole parts go (the version, then the engine), never a word cut.
        tries = ((full, True), (short, True), (short, False), (short[:4], False), (short[:2] + short[3:4], False))
        for variant, prefix in tries:
            t = Text(no_wrap=True, end="")
            if prefix:
                t.append(" kvtui ", style=f"bold {th.primary}")
            else:
                t.append(" ")
            for i, (k, v) in enumerate(variant):
                t.append("│ " if i else "", style="dim")
                t.append(k, style="dim")
                t.append(f"{v} ", style="bold" if v == mode else "")
            if t.cell_len <= room:
                break
        if t.cell_len > room:
            t.truncate(max(1, room), overflow="ellipsis")
        t.pad_right(max(0, room - t.cell_len))
        t.append_text(badge)
        return t


class StatusBar(Static):
    """Run state, the step in progress, the SLO, the best load so far and the KV-bound prediction."""

    MAX_LINES = 3
    DEFAULT_CSS = """
    StatusBar { height: auto; max-height: 3; width: 1fr; padding: 0 1; }
    """

    def __init__(self, state: RunState, **kw: Any):
        super().__init__("", **kw)
        self.state = state
        self._key: Any = None
        self.controls: dict[str, Any] = {}  # paused, hold, stopping flags from the app
        self._lines = 0

    def sync(self, controls: dict[str, Any] | None = None) -> None:
        st = self.state
        if controls is not None:
            self.controls = controls
        prog = st.progress if st.progress is not None else StepProgress()
        mv = st.viewed
        starting = int(clock.monotonic()) if mv is not None and mv.status == "starting" else 0
        key = (starting, st.header_version, st.steps_version, st.slo_version, st.status,
               tuple(sorted(self.controls.items())),
               prog.phase, prog.window_started, prog.completed, int(prog.elapsed_s or 0),
               self.app.theme, st.cursor)
        if key == self._key:
            return
        self._key = key
        text = self.build()
        lines = text.plain.count("\n") + 1
        self.update(text, layout=lines != self._lines)  # a layout pass only when the height changes
        self._lines = lines

    def build(self) -> Text:
        """Parts joined by │, broken into lines only between parts (never inside a figure)."""
        st = self.state
        th = self.app.current_theme
        mv = st.viewed
        lw = st.load_word
        parts: list[Text] = []
        t = Text(end="")
        word = STATUS_WORDS.get(st.status, st.status.upper())
        if self.controls.get("stopping"):
            word = "STOPPING"
        elif self.controls.get("paused") and st.status == "running":
            word = "PAUSED"
        color = {"RUNNING": th.success, "PAUSED": th.warning, "STOPPING": th.warning, "FAILED": th.error,
                 "STOPPED": th.warning, "FINISHED": th.primary, "REPLAY": th.primary}.get(word, th.secondary)
        t.append(f" {word} ", style=f"bold reverse {color or ''}")
        if self.controls.get("hold"):
            t.append(" HOLD ", style=f"bold reverse {th.accent}")
        t.append(" ")
        if mv is not None and mv.status == "starting":
            waited = f" ({clock.monotonic() - mv.started_mono:.0f} s)" if mv.started_mono else ""
            t.append(f"{mv.name}: starting the engine — {mv.phase or 'starting'}{waited}", style="bold")
        elif st.step and not st.replay:
            p = st.progress if st.progress is not None else StepProgress()  # nothing heard yet: the warm-up's start
            t.append(f"{st.step.mode}: {step_of(st)} {lw}={fmt_load(st.step.load)}", style="bold")
            why = st.step.why
            if why and why != "search":
                t.append(f" [{why}]")
            t.append(f" {p.phase or 'warmup'} {p.elapsed_s or 0:.0f}s · {p.window_started} in window · "
                     f"{p.completed} done")
            if p.paced:  # a paced simulation (kvtui.explore.pacing): modelled seconds, this many per second
                t.append(f" · paced ×{p.paced:g}", style=th.accent or "")
        elif st.replay and mv is not None:
            steps = mv.steps
            if steps and st.cursor is not None:
                s = Step.of(mv.shown_steps(st.edited)[st.cursor])
                t.append(f"{st.source_name} · {mv.name} step {st.cursor + 1}/{len(steps)} "
                         f"{lw}={fmt_load(s.load)}",
                         style="bold")
            else:
                t.append(f"{st.source_name} · {mv.name}: no steps", style="bold")
        elif st.status in ("finished", "stopped", "failed"):
            t.append(f"run {st.status}" + (f" ({st.stop_reason})" if st.stop_reason else ""), style="bold")
        elif st.status == "idle":
            t.append("press s to start", style="bold")
        parts.append(t)
        from kvtui.tui.progress import eta_text

        pt = eta_text(st)  # "mode ETA … · run ETA …", live only ("step n of about m" is in the part above)
        if pt:
            parts.append(Text(pt, style="dim", end=""))

        t = Text(end="")
        t.append("SLO ", style="dim")
        t.append(st.shown_slo.describe(), style=f"bold {th.accent}" if st.edited else "")
        if st.edited:
            t.append(" (edited: recomputed)", style=th.accent or "")
        parts.append(t)

        t = Text(end="")
        best = st.best(mv)
        droppable = [len(parts)]  # the best load: also ★ in the step table
        t.append("best ", style="dim")
        if best is not None:
            t.append(f"★ {lw}{'≥' if st.best_is_floor(mv) else '='}{best:g}", style=f"bold {th.success}")
        else:
            t.append("—")
        if mv is not None and mv.predicted_kv:
            t.append(f" · KV-bound ≈{mv.predicted_kv:,.0f}", style="dim")
        if mv is not None and mv.knee_limited_by:
            t.append(f" · knee: {limit_word(Step(limited_by=mv.knee_limited_by))}", style="dim")
        parts.append(t)

        if len(st.modes) > 1:
            droppable.insert(0, len(parts))  # the modes: also in the header (bf16 1/2); the first to go
            t = Text(end="")
            t.append("modes", style="dim")
            for m in st.modes.values():
                b = st.best(m, upto_cursor=False)
                mark = {"done": "✓", "running": "▶", "starting": "…", "failed": "✗", "skipped": "↷",
                        "stopped": "■", "kept": "✓"}.get(m.status, "·")
                t.append(" ")
                t.append(m.name, style="bold underline" if m is mv else "")
                t.append(f" {mark}{'' if b is None else ('≥' if st.best_is_floor(m) else '') + f'{b:g}'}")
            parts.append(t)

        width = max(20, (self.size.width or 80) - 2)
        # More parts than the bar's lines (80 columns): the least needed go whole, never a part cut off.
        keep = list(range(len(parts)))
        while len(keep) > 1:
            out, lines = _wrap_parts([parts[i] for i in keep], width)
            if lines <= self.MAX_LINES:
                return out
            gone = next((i for i in droppable if i in keep), keep[-1])
            keep.remove(gone)
        return _wrap_parts([parts[i] for i in keep], width)[0]


def _wrap_parts(parts: list[Text], width: int) -> tuple[Text, int]:
    """Parts joined by │, broken into lines only between parts (never inside a figure)."""
    out = Text(end="")
    line, lines = 0, 1
    for i, part in enumerate(parts):
        sep = Text("  │ ", style="dim")
        if i and line + sep.cell_len + part.cell_len > width:
            out.append("\n")
            line, lines = 0, lines + 1
        elif i:
            out.append_text(sep)
            line += sep.cell_len
        out.append_text(part)
        line += part.cell_len
    return out, lines


def step_of(st: RunState) -> str:
    """"step 3 of about 8" from the search's plan (live), or "step 3" when no plan is known."""
    from kvtui.tui.progress import progress

    p = progress(st)
    if p is not None:
        return f"step {p['n']} of about {p['about']}"
    return f"step {(st.step.index if st.step is not None else 0) + 1}"


class LogPane(RichLog):
    """The server's output; vLLM startup lines highlighted. Fed from the state's bounded buffer."""

    DEFAULT_CSS = """
    LogPane { height: 8; min-height: 3; }
    """

    def __init__(self, state: RunState, **kw: Any):
        super().__init__(max_lines=2000, wrap=False, markup=False, highlight=False, auto_scroll=True, **kw)
        self.state = state
        self.shown_total = 0

    def sync(self) -> None:
        st = self.state
        new = st.log_total - self.shown_total
        if new <= 0:
            return
        th = self.app.current_theme
        styles = {"fact": f"bold {th.success}", "warning": th.warning or "yellow", "error": f"bold {th.error}",
                  "kvtui": th.primary}
        lines = list(st.log)[-min(new, len(st.log), 500):]
        for mode, line, kind in lines:
            t = Text(no_wrap=True, end="")
            if mode:
                t.append(f"[{mode}] ", style="dim")
            t.append(line, style=styles.get(kind, ""))
            self.write(t)
        self.shown_total = st.log_total


class StepSlider(Widget, can_focus=True):
    """Replay: a time slider over the viewed mode's steps (click, ←/→, home/end)."""

    DEFAULT_CSS = """
    StepSlider { height: 1; width: 1fr; padding: 0 1; }
    StepSlider:focus { background: $boost; }
    """

    BINDINGS = [
        Binding("left,comma", "move(-1)", "◀ step", show=False),
        Binding("right,full_stop", "move(1)", "step ▶", show=False),
        Binding("home", "jump(0)", "first step", show=False),
        Binding("end", "jump(-1)", "last step", show=False),
    ]

    class Moved(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, state: RunState, **kw: Any):
        super().__init__(**kw)
        self.state = state
        self._key: Any = None

    def sync(self) -> None:
        key = (self.state.steps_version, self.state.cursor, self.size.width, self.app.theme)
        if key != self._key:
            self._key = key
            self.refresh()

    def _track(self) -> tuple[int, int]:
        w = self.content_size.width
        return 12, max(4, w - 12 - 18)

    def render(self) -> Text:
        st = self.state
        mv = st.viewed
        n = len(mv.steps) if mv else 0
        t = Text(no_wrap=True, end="")
        t.append(" ◀ step ▶  ", style="bold")
        left, width = self._track()
        if mv is None or not n:
            t.append("no steps", style="dim")
            return t
        cur = st.cursor if st.cursor is not None else n - 1
        pos = 0 if n == 1 else round(cur / (n - 1) * (width - 1))
        steps = [Step.of(s) for s in mv.shown_steps(st.edited)]
        th = self.app.current_theme
        ticks = ["─"] * width
        for i, s in enumerate(steps):
            x = 0 if n == 1 else round(i / (n - 1) * (width - 1))
            ticks[x] = "┼" if s.passed else "┴"
        for i, ch in enumerate(ticks):
            style = f"bold {th.primary}" if i == pos else ("dim" if i > pos else "")
            t.append("●" if i == pos else ch, style=style)
        s = steps[cur]
        t.append(f"  {cur + 1}/{n} t={fmt_num(s.t_rel_end)}s", style="bold")
        return t

    def action_move(self, delta: int) -> None:
        self.post_message(self.Moved((self.state.cursor if self.state.cursor is not None else 0) + delta))

    def action_jump(self, to: int) -> None:
        mv = self.state.viewed
        n = len(mv.steps) if mv else 0
        self.post_message(self.Moved(n - 1 if to < 0 else to))

    def on_click(self, event: Click) -> None:
        mv = self.state.viewed
        n = len(mv.steps) if mv else 0
        if n < 2:
            return
        left, width = self._track()
        x = event.x - left - 1
        if 0 <= x < width:
            self.post_message(self.Moved(round(x / (width - 1) * (n - 1))))


from kvtui.tui.gpupanel import MemoryBar  # noqa: E402,F401 - imported from here by callers
from kvtui.tui.steptable import StepTable  # noqa: E402,F401 - imported from here by callers
