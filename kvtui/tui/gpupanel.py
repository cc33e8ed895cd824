"""The GPU panel: the memory split from the startup facts (weights, activations, graphs, KV pool
and the KV in use), NVML's used/total, SM utilisation, power, SM clock and J/token of the step shown."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rich.text import Text

from kvtui.io.snapshot.schema import Step
from kvtui.tui.charts import fmt_num, hexrgb
from kvtui.tui.redraw import KeyedText
from kvtui.tui.state import RunState


def _f(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


class MemoryBar(KeyedText):
    """The GPU memory split from the startup facts, KV in use inside the pool, NVML's used/total."""

    DEFAULT_CSS = """
    MemoryBar { height: 1; width: 1fr; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, state: RunState, palette: Any, **kw: Any):
        super().__init__(state, **kw)
        self._palette = palette

    def data_key(self) -> Any:
        mv = self.state.viewed
        return (mv.name if mv else None, mv.series.version if mv else 0, self.state.header_version,
                self.state.cursor, self.size.width, self.app.theme)

    def build(self) -> Text:
        st = self.state
        mv = st.viewed
        pal = self._palette()
        t = Text(no_wrap=True, overflow="ellipsis", end="")
        t.append("GPU mem ", style="bold")
        if mv is None or not mv.server:
            t.append("— (startup facts come when the server is ready)", style="dim")
            return t
        f = mv.server
        w = _f(f.weights_gib) or 0.0
        a = _f(f.activation_peak_gib) or 0.0
        g = _f(f.cuda_graph_gib) or 0.0
        kv = _f(f.kv_cache_gib) or 0.0
        t_max = st.t_max()
        usage = None
        total = None
        used = None
        if len(mv.series):
            vals = mv.series.values("kv_usage", t_max)
            usage = vals[-1] if vals else None
            tv = mv.series.values("gpu_mem_total_gib", t_max)
            total = tv[-1] if tv else None
            uv = mv.series.values("gpu_mem_used_gib", t_max)
            used = uv[-1] if uv else None
        total = total or _f(f.gpu_total_gib)
        denom = total or (w + a + g + kv) or 1.0
        narrow = (self.size.width or 80) < 130
        width = 12 if narrow else max(10, min(40, (self.size.width or 80) - 90))
        cells = []

        def add(n_gib: float, ch: str, color: tuple[int, int, int]) -> None:
            n = int(round(n_gib / denom * width))
            cells.append((ch * n, hexrgb(color)))

        add(w, "█", pal.line(3))
        add(a, "▓", pal.line(4))
        add(g, "▒", pal.line(5))
        in_use = kv * (usage or 0.0)
        add(in_use, "█", pal.line(1))
        add(max(0.0, kv - in_use), "░", pal.line(2))
        drawn = sum(len(c[0]) for c in cells)
        t.append("▕", style="dim")
        for s, c in cells:
            t.append(s, style=c)
        t.append(" " * max(0, width - drawn))
        t.append("▏", style="dim")
        d = 1 if narrow else 2
        words = (("w", "act", "gr", "KV", "use") if narrow else ("weights", "act", "graphs", "KV pool", "in use"))
        t.append(f" {words[0]} ", style=hexrgb(pal.line(3)))
        t.append(f"{w:.{d}f}")
        if a:
            t.append(f" {words[1]} ", style=hexrgb(pal.line(4)))
            t.append(f"{a:.{d}f}")
        if g:
            t.append(f" {words[2]} ", style=hexrgb(pal.line(5)))
            t.append(f"{g:.{d}f}")
        t.append(f" {words[3]} ", style=hexrgb(pal.line(2)))
        t.append(f"{kv:.{d}f}")
        t.append(f" {words[4]} ", style=hexrgb(pal.line(1)))
        if narrow:
            t.append(f"{usage:.0%}" if usage is not None else "—")
        else:
            t.append(f"{in_use:.2f}" + (f" ({usage:.0%})" if usage is not None else ""))
        t.append(" │ NVML ", style="dim")
        t.append(f"{fmt_num(used)}/{fmt_num(total)}" + ("" if narrow else " GiB"))
        tokens = f.kv_cache_tokens
        util = (mv.series.values("gpu_util_pct", t_max) or [None])[-1]
        power = (mv.series.values("gpu_power_w", t_max) or [None])[-1]
        clock = (mv.series.values("gpu_sm_clock_mhz", t_max) or [None])[-1]
        if util is not None or power is not None:
            # SM utilisation, power and clock: a flat memory line says nothing about why decode binds.
            t.append(" │ ", style="dim")
            t.append("SM ", style="dim")
            t.append(f"{util:.0f}%" if util is not None else "—")
            if power is not None:
                t.append(f" {power:.0f} W")
            if clock is not None and not narrow:
                t.append(f" {clock:.0f} MHz")
            j = step_j_per_token(mv, st.steps_of(mv))
            if j is not None:
                t.append(f" {j:.3f} J/tok", style="bold")
        if tokens and not narrow:
            t.append(f" │ {tokens:,} KV tokens", style="dim")
        return t


def step_j_per_token(mv: Any, steps: Sequence[Step | Mapping[str, Any]]) -> float | None:
    """Energy per output token of the last step shown: mean power over its times / its output tok/s."""
    if not steps:
        return None
    s = Step.of(steps[-1])
    lo, hi, tok = _f(s.t_rel_start), _f(s.t_rel_end), _f(s.output_tok_s)
    col = mv.series.cols.get("gpu_power_w")
    if lo is None or hi is None or not tok or not col:
        return None
    vals = [v for t, v in zip(mv.series.t, col) if v is not None and lo <= t <= hi]
    return (sum(vals) / len(vals)) / tok if vals else None
