"""Plain-text tables for terminals and Markdown (one formatter, two borders).

Stable API for the TUI and the exports:
    comparison_headers(doc) -> list[str]      the comparison table's column titles
    comparison_rows(doc)    -> list[list[str]] one row of cells per mode (same length)
    labels(doc)             -> str             engine · GPU · version · SIMULATED · dummy weights
    caveats(doc)            -> list[str]       what must travel with every figure
`doc` is a snapshot document (live, replayed, imported or diffed). When it has no
"comparison" yet (a run still going) the rows are computed from its modes.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from kvtui.core.knee_interval import fmt_knee  # noqa: F401 - "46 [40–52]"; the report's and the screens' name
from kvtui.io.snapshot.schema import (
    Comparison,
    ComparisonRow,
    Distribution,
    Environment,
    Mode,
    RowQuality,
    RowSuite,
    Run,
    Search,
    Step,
)

# A comparison row, a mode or a step: the typed document, or the dict a caller (the TUI) still holds.
RowLike = ComparisonRow | Mapping[str, Any]
ModeLike = Mode | Mapping[str, Any]
StepLike = Step | Mapping[str, Any]


def fmt(x: Any, digits: int = 0, unit: str = "") -> str:
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    if isinstance(x, (int, float)):
        return f"{x:,.{digits}f}{unit}"
    return str(x)


def fmt_load(x: Any) -> str:
    """A concurrency or rate: no decimals when whole."""
    if x is None:
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x:g}" if isinstance(x, (int, float)) else str(x)


def fmt_x(r: float | None) -> str:
    return "—" if r is None else f"{r:.2f}×"


def fmt_pct(r: float | None) -> str:
    return "—" if r is None else f"{r:+.1%}"


def fmt_share(r: float | None, digits: int = 0) -> str:
    return "—" if r is None else f"{r:.{digits}%}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool = False) -> str:
    if markdown:
        esc = lambda c: str(c).replace("|", "\\|")  # noqa: E731
        out = ["| " + " | ".join(esc(h) for h in headers) + " |",
               "|" + "|".join(":---" if i == 0 else "---:" for i in range(len(headers))) + "|"]
        out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
        return "\n".join(out)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()
    out = [line, "  ".join("─" * w for w in widths)]
    out += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]
    return "\n".join(out)


# -- the comparison --------------------------------------------------------------------------

COMPARISON_HEADERS = (
    "mode", "max conc @SLO", "×", "out tok/s @SLO", "×", "peak GPU GiB", "weights GiB", "KV tokens", "×",
    "preempt @knee", "next step limit", "$/Mtok out", "Δ", "J/tok out", "Δ", "$/Mtok in", "Δ", "q-adj $/Mtok out",
    "quality",
)


def comparison(doc: dict[str, Any]) -> dict[str, Any]:
    """The doc's comparison with every figure on each row (kvtui.report.figures: the one place)."""
    from kvtui.report.figures import comparison as figures

    return figures(doc)


def comparison_headers(doc: dict[str, Any] | None = None, load_kind: str | None = None) -> list[str]:
    h = list(COMPARISON_HEADERS)
    kind = load_kind or (Comparison.view(comparison(doc)).load_kind if doc is not None else "concurrency")
    if kind == "rate":
        h[1], h[3] = "max req/s @SLO", "out tok/s @SLO"
    elif kind == "trace":
        h[1], h[3] = "max × trace @SLO", "out tok/s @SLO"
    elif kind == "mixed":
        h[1] = "max load @SLO"
    return h


def quality_cell(q: RowQuality | Mapping[str, Any] | None) -> str:
    if not q:
        return "—"
    q = RowQuality.of(q)
    if q.skipped:
        return "skipped"
    suite = q.suite or RowSuite()
    acc = suite.pooled_accuracy
    if q.reference:
        return "reference" + (f" {fmt_share(acc)}" if acc is not None else "")
    if acc is not None:
        ref = suite.reference_pooled_accuracy
        delta = f" Δ{100 * (acc - ref):+.0f}pt" if ref is not None else ""
        return ("FLAG " if q.flagged else "ok ") + fmt_share(acc) + delta
    em = fmt_share(q.exact_match_rate)
    lp = q.logprob_agreement
    body = f"{em} exact" + (f" · lp {lp:.3f}" if lp is not None else "")
    return ("FLAG " if q.flagged else "ok ") + body


def fmt_peak(r: RowLike) -> str:
    """Peak GPU memory; with several GPUs (tensor parallel) each GPU's peak, "64.1/63.9"."""
    row = ComparisonRow.of(r)
    per = row.peak_gpu_mem_gib_per_gpu or []
    if len(per) > 1:
        return "/".join(f"{v:.1f}" for v in per)
    return fmt(row.peak_gpu_mem_gib, 1)


def fmt_rate_at(r: RowLike) -> str:
    """Output tok/s @SLO, with the load it came from when that is not the knee ("4,144 @132")."""
    row = ComparisonRow.of(r)
    cell = figure_cell("output_tok_s", row)
    peak = row.peak_load
    if peak is not None and row.best is not None and peak != row.best and row.output_tok_s is not None:
        cell += f" @{fmt_load(peak)}"
    return cell


# How each figure of a comparison row (kvtui.report.figures) is written, in every view: one rule each.
FIGURE_CELLS: dict[str, Callable[[Any], str]] = {
    "best": fmt_load, "best_x": fmt_x,
    "output_tok_s": fmt, "tok_s_x": fmt_x,
    "kv_tokens": fmt, "kv_tokens_x": fmt_x,
    "usd_per_mtok_out": lambda v: fmt(v, 3), "cost_out_change": fmt_pct,
    "usd_per_mtok_in": lambda v: fmt(v, 4), "cost_in_change": fmt_pct,
    "usd_per_mtok_out_qadj": lambda v: fmt(v, 3),
    "j_per_token_out": lambda v: fmt(v, 3), "energy_change": fmt_pct,
}


def figure_cell(key: str, r: RowLike) -> str:
    """Row `r`'s figure `key` as every view writes it (FIGURE_CELLS); the knee with its interval
    ("46 [40–52]") where the row has one (kvtui.core.knee_interval)."""
    row = ComparisonRow.of(r)
    if key == "best":  # "≥ 22" where no measured load failed above it
        return fmt_knee(row.best, row.knee_interval, fmt_load, floor=bool(row.best_lower_bound))
    if key == "best_x":
        return fmt_ratio_bound(row.best_x, row.best_x_bound)
    return FIGURE_CELLS[key](row.by_key(key))


def fmt_ratio_bound(x: float | None, bound: str | None) -> str:
    """The max-load ×, as bounded as its knees: "≥ 1.27×", "≤ 0.80×", or "?" (both knees floors)."""
    if x is None:
        return fmt_x(x)
    if bound == "?":
        return "?"
    return f"{bound} {fmt_x(x)}" if bound in ("≥", "≤") else fmt_x(x)


def comparison_row(r: RowLike) -> list[str]:
    """One mode's cells (a row of `compare_modes`)."""
    from kvtui.core.evaluate import LIMIT_WORDS

    row = ComparisonRow.of(r)
    lim = row.knee_limited_by
    c = lambda key: figure_cell(key, row)  # noqa: E731
    return [
        row.mode or "—", c("best"), c("best_x"), fmt_rate_at(row), c("tok_s_x"),
        fmt_peak(row), fmt(row.weights_gib, 2), c("kv_tokens"), c("kv_tokens_x"),
        fmt(row.preemptions_at_knee), LIMIT_WORDS.get(lim or "", lim or "—"),
        c("usd_per_mtok_out"), c("cost_out_change"),
        c("j_per_token_out"), c("energy_change"),
        c("usd_per_mtok_in"), c("cost_in_change"),
        c("usd_per_mtok_out_qadj"),
        quality_cell(row.quality),
    ]


def comparison_rows(doc: dict[str, Any]) -> list[list[str]]:
    """The comparison table's rows, one per mode, cells as shown (stable signature for the TUI)."""
    return [comparison_row(r) for r in Comparison.view(comparison(doc)).rows or ()]


# -- labels and caveats ------------------------------------------------------------------------


def labels(doc: Mapping[str, Any] | Run) -> str:
    """The caveats that travel with every figure: engine, GPU, version, SIMULATED."""
    run = Run.of(doc)
    env = run.environment or Environment()
    modes = run.all_modes
    versions = sorted({m.info.version or "?" for m in modes}) or ["?"]
    parts = [f"engine {env.engine or '?'}", f"GPU {', '.join(env.gpu_names or ['?'])}",
             f"version {', '.join(versions)}"]
    if env.simulated or any(m.simulated for m in modes):
        parts.append("SIMULATED")
    if any(m.info.dummy_weights for m in modes):
        parts.append("dummy weights")
    real = sorted({w.split(",")[0] for m in modes if isinstance(w := m.info.weights, str) and w.startswith("real: ")})
    if real:
        parts.append("real weights (" + "; ".join(r[len("real: "):] for r in real) + ")")
    return " · ".join(parts)


def mode_label(doc: Mapping[str, Any] | Run, mode: ModeLike) -> str:
    """mode · engine · GPU · version (· SIMULATED · dummy weights) for one mode's figures."""
    env = Run.of(doc).environment or Environment()
    m = Mode.of(mode)
    info = m.info
    gpus = info.gpu_names or env.gpu_names or ["?"]
    parts = [f"mode {m.name}", f"engine {info.engine or m.engine or env.engine or '?'}",
             f"GPU {', '.join(gpus)}", f"version {info.version or '?'}"]
    if m.simulated or info.simulated:
        parts.append("SIMULATED")
    if info.dummy_weights:
        parts.append("dummy weights")
    elif isinstance(info.weights, str) and info.weights.startswith("real: "):
        parts.append("real weights")
    return " · ".join(parts)


def all_passed(m: Mode) -> str:
    """What a mode whose knee is a floor (`Mode.limit_is_higher`) measured, for its caveat."""
    top = f" (up to {fmt_load(m.best_concurrency)})" if m.best_concurrency is not None else ""
    return f"every load it measured passed{top}"


def caveats(doc: dict[str, Any]) -> list[str]:
    """Everything a reader must know before quoting a figure of this snapshot."""
    out: list[str] = []
    from kvtui.report.outcome import stopped_caveat

    partial = stopped_caveat(doc)
    if partial:  # before any figure is quoted: the run did not measure every mode it was asked for
        out.append(partial)
    run = Run.view(doc)
    env = run.environment or Environment()
    modes = run.all_modes
    comp = Comparison.view(comparison(doc))
    rows = {r.mode: r for r in comp.rows or ()}
    if env.simulated or any(m.simulated for m in modes):
        out.append("SIMULATED: figures come from kvtui's simulated vLLM, not from a GPU")
    dummy = [str(m.name) for m in modes if m.info.dummy_weights]
    if dummy:
        out.append(f"dummy weights ({', '.join(dummy)}): speed and memory only, outputs carry no accuracy")
    by_warning: dict[str, list[str]] = {}
    for m in modes:
        for w in m.facts.warnings or []:
            by_warning.setdefault(w, []).append(str(m.name))
    for w, names in by_warning.items():
        out.append(f"{w} ({', '.join(names)})" if len(names) < len(modes) or len(modes) == 1 else f"{w} (every mode)")
    scaled = [(m.info.time_scale or 1.0, m.name) for m in modes]
    for word in ("slow motion", "fast-forward"):
        named = [f"{n} {speed_words(ts).removeprefix(word).strip()}" for ts, n in scaled
                 if speed_words(ts).startswith(word)]
        if named:
            out.append(f"simulator in {word} ({', '.join(named)}): figures scaled back to modelled time")
    hits = [(n, r.prefix_cache_hit_rate_at_knee) for n, r in rows.items()]
    known = [(n, h) for n, h in hits if h is not None]
    trace = run.trace or {}
    if known and trace.get("prefix_shared") is not None:  # a trace's own sharing: real, not flattery
        out.append("prefix-cache hit rate at the knee: " + ", ".join(f"{n} {h:.0%}" for n, h in known)
                   + f"  (the trace's own prompt sharing: an unbounded cache would hit {trace['prefix_shared']:.0%})")
    elif known:
        out.append("prefix-cache hit rate at the knee: " + ", ".join(f"{n} {h:.0%}" for n, h in known)
                   + ("  (above 5 %: prompt throughput and TTFT are flattered)" if any(h > 0.05 for _, h in known)
                      else ""))
    from kvtui.explore.prefix_gain import describe as gain_words

    gains = [(str(m.name), m.prefix_cache_gain) for m in modes if m.prefix_cache_gain]
    named = [w for n, g in gains if (w := gain_words(n, g))]
    if named:  # after the hit rates it explains
        real = any((g or {}).get("basis") == "predicted" for _, g in gains)
        label = ("predicted by the simulator for both knees, not measured" if real
                 else "SIMULATED: the no-cache knee from the offline simulator")
        out.append(f"prefix cache, capacity gained ({label}): " + ", ".join(named))
    skipped = [f"{n}: {g.get('why')}" for n, g in gains if (g or {}).get("skipped")]
    if skipped:
        out.append("prefix cache, capacity gained: not simulated (" + "; ".join(skipped) + ")")
    if not known and modes and ((run.scenario or {}).get("server") or {}).get("enable_prefix_caching") is False:
        out.append("prefix caching off (server.enable_prefix_caching = false): no prompt-cache flattery")
    elif not known and modes:
        out.append("prefix-cache hit rate at the knee: not reported by the server")
    from kvtui.core.evaluate import in_lock_step

    for m in modes:
        s = m.search or Search()
        if s.noisy:
            out.append(f"{m.name}: the knee is noisy, the same load passed and failed: {s.describe}")
        if m.limit_is_higher:
            out.append(f"{m.name}: {all_passed(m)}; the limit is higher")
        if m.has_error:
            out.append(f"{m.name}: failed: {m.error_message}")
        elif not (m.complete if m.has("complete") else True):
            out.append(f"{m.name}: did not finish (stopped or interrupted); resume the run to confirm")
        waves = [s_ for s_ in m.all_steps if in_lock_step(s_)]
        if waves:
            out.append(f"{m.name}: the closed loop ran in lock-step at load "
                       + ", ".join(f"{fmt_load(s_.load)} ({s_.send_burst or 0:.0%} of the slots sent within 1 s)"
                                   for s_ in waves)
                       + ": those steps' TTFT tail is a wave's queue (fixed lengths keep waves together; "
                         "a length distribution breaks them up)"
                       # with the knee, so "lock-step at 11" beside a knee of 14 reads as the step it was
                       + (f"; its knee: {fmt_load(m.best_concurrency)}"
                          if isinstance(m.best_concurrency, (int, float)) else ""))
        lagged = [s_.load for s_ in m.all_steps if s_.client_limited]
        if lagged:
            out.append(f"{m.name}: the client lagged at load {', '.join(fmt_load(x) for x in lagged)}")
        # the live simulator's steps where this host, not the modelled server, set the client's figures
        hosted = [s_.load for s_ in m.all_steps
                  if isinstance(live := s_.live, Mapping) and live.get("host_limited")]
        if hosted:
            out.append(f"{m.name}: this host limited the live run at load {', '.join(fmt_load(x) for x in hosted)} "
                       "(the client's limit, not the server's): the verdicts use the modelled figures")
    eager = [str(m.name) for m in modes if "--enforce-eager" in (m.info.command or [])]
    if eager:
        who = "every mode" if len(eager) == len(modes) else ", ".join(eager)
        out.append(f"{who}: launched with --enforce-eager (no CUDA graphs): capacity measures kernel-launch "
                   "overhead on a small model; compare the modes' capacity with graphs on")
    rf = run.resumed_from or {}
    if rf.get("modes"):
        prev = (rf.get("environment") or {}).get("gpu_names")
        cur = env.gpu_names
        out.append(f"modes {', '.join(rf['modes'])} kept from an earlier run"
                   + (f" on {', '.join(prev)}" if prev and prev != cur else ""))
    for m in modes:
        c = m.continued
        if c:
            out.append(f"{m.name}: continued after an interruption; "
                       f"{c.get('steps')} of its steps were measured before it")
    for w in run.warnings or []:
        out.append(w)
    for w in run.load_warnings or []:
        out.append(w)
    if run.imported:
        out.append(f"imported from {run.imported.get('tool')}: "
                   "figures it does not report are shown as —, never estimated")
    cost = comp.cost or {}
    if cost:
        out.append(f"cost: ${cost.get('gpu_hourly_usd', 0):g}/GPU-hour × {cost.get('gpus', 1)} GPU(s); "
                   + ("failed requests' GPU time billed to the successful tokens" if cost.get("count_failed", True)
                      else "failed requests' GPU time left out"))
    return out


def comparison_table(doc: dict[str, Any], markdown: bool = False) -> str:
    comp = Comparison.view(comparison(doc))
    head = f"Modes vs baseline {comp.baseline or '—'} ({labels(doc)})"
    body = table(comparison_headers(doc), comparison_rows(doc), markdown)
    note = f"\nnote: {comp.note}" if comp.note else ""
    return f"{head}\n{body}{note}"


# -- steps -------------------------------------------------------------------------------------

STEP_HEADERS = (
    "#", "load", "why", "n", "err", "out tok/s", "in tok/s", "TTFT p50", "TTFT p95", "TTFT p99", "TPOT p50", "TPOT p95",
    "TPOT p99", "ITL p99", "E2E p95", "goodput", "KV max", "preempt", "prefix hit", "GPU GiB", "result", "limit",
)


def step_headers(mode: ModeLike) -> list[str]:
    h = list(STEP_HEADERS)
    kind = next((s.load_kind for s in Mode.of(mode).all_steps if s.load_kind), "concurrency")
    h[1] = "c" if kind == "concurrency" else "req/s"
    return h


def _pct(d: Distribution | None, p: str) -> str:
    return fmt(d.by_key(p) if d is not None else None, 1)


def step_how(step: StepLike) -> list[str]:
    """How a step ended where it was not by its full window, in the words every view shows: "early
    (sequential)" / "early (preemption)" when its verdict was decided before the window's end, and
    "watched 37.4 s of 59.7 s" on the KV wall's noisy side (docs/PROTOCOL.md, items 4 and 5)."""
    s = Step.of(step)
    out = []
    if s.stopped_early:
        by = (s.early_stop or {}).get("by")
        out.append(f"early ({by})" if by else "early")
    ramp = s.ramp or {}
    if isinstance(ramp.get("window_s"), (int, float)):  # protocol.watch_window
        out.append(f"watched {fmt(ramp.get('watched_s'), 1, ' s')} of {ramp['window_s']:.1f} s")
    return out


def step_why(step: StepLike) -> str:
    """The step table's "why" cell: why the step was run (search, confirm, ...) and how it ended."""
    s = Step.of(step)
    return " · ".join([s.why or "—", *step_how(s)])


def step_row(step: StepLike) -> list[str]:
    s = Step.of(step)
    verdict = {True: "PASS", False: "FAIL", None: "undecided"}[s.passed]
    if not s.ran_to_its_end:
        verdict = "cut short" if s.passed is None else f"{verdict}, cut short"
    if s.replicas_lost:  # a replica died mid-step: named where the verdict is read
        verdict += ", " + ", ".join(str(x.name) for x in s.replicas_lost) + " lost"
    return [
        fmt(s.index), fmt_load(s.load), step_why(s), fmt(s.requests),
        fmt(s.errors), fmt(s.output_tok_s), fmt(s.input_tok_s),
        _pct(s.ttft_ms, "p50"), _pct(s.ttft_ms, "p95"), _pct(s.ttft_ms, "p99"),
        _pct(s.tpot_ms, "p50"), _pct(s.tpot_ms, "p95"), _pct(s.tpot_ms, "p99"),
        _pct(s.itl_ms, "p99"), _pct(s.e2e_ms, "p95"),
        fmt_share(s.goodput), fmt_share(s.kv_cache_usage_max), fmt(s.preemptions),
        fmt_share(s.prefix_cache_hit_rate), fmt(s.gpu_mem_used_gib_max, 2),
        verdict, limit_cell(s),
    ]


def step_rows(mode: ModeLike) -> list[list[str]]:
    return [step_row(s) for s in Mode.of(mode).all_steps]


def quality_lines(mode: str, q: RowQuality | Mapping[str, Any] | None, reference: str | None = None) -> list[str]:
    """One line per quality task of a mode: accuracy [95 % CI] (n), Δ against the reference, verdict.

        [fp8-kv] quality passkey: 22/24 = 92% [74–98%], Δ −4.2 pt [−14–+6], p 0.62: within noise
    """
    if not q:
        return []
    q = RowQuality.of(q)
    if q.skipped:
        return [f"[{mode}] quality: skipped ({q.skipped})"]
    suite = q.suite or RowSuite()
    out = []
    for name, t in (suite.tasks or {}).items():  # each task's verdict: a plain object (kvtui.quality.verdict)
        if not isinstance(t, dict):
            continue
        if name == "agreement":
            out.append(f"[{mode}] quality agreement with the reference: exact {fmt_share(t.get('exact_match_rate'))} "
                       f"of {t.get('prompts', '?')}, top-1 {fmt_share(t.get('top1_agreement'), 1)}, mean |Δ logprob| "
                       + ("—" if t.get("mean_abs_logprob_diff") is None else f"{t['mean_abs_logprob_diff']:.3f}"))
            continue
        if t.get("not_run"):
            out.append(f"[{mode}] quality {name}: not run: {t['not_run']}")
            continue
        ci = t.get("ci") or [None, None]
        line = (f"[{mode}] quality {name}: {fmt_share(t.get('accuracy'))} "
                f"[{fmt_share(ci[0])}–{fmt_share(ci[1])}] (n = {t.get('n')})")
        if t.get("errors"):
            line += f", {t['errors']} errors"
        if t.get("verdict") == "reference":
            line += ": reference"
        elif t.get("delta_pt") is not None:
            lo, hi = t.get("delta_ci_pt") or [None, None]
            line += (f", Δ {t['delta_pt']:+.1f} pt [{lo:+.0f}…{hi:+.0f}], p {t.get('p_value'):.2g}: "
                     f"{'**REGRESSION**' if t.get('flagged') else t.get('verdict')}")
        out.append(line)
    if suite.cost_factor not in (None, 1.0):
        out.append(f"[{mode}] quality-adjusted $/Mtok = plain × {suite.cost_factor:.3f}"
                   f"{'' if suite.cost_factor_beyond_noise else ' (drop within noise)'}")
    out += equal_quality_lines(mode, q, reference)
    if suite.wall_s is not None:
        out.append(f"[{mode}] quality phase took {suite.wall_s:.0f} s (before the load; not counted in any step)")
    return out


def equal_quality_lines(mode: str, q: RowQuality | Mapping[str, Any], reference: str | None = None) -> list[str]:
    """Equivalence to the reference (TOST), pooled and per task, and the answers under the knee's load, one line
    each."""
    from kvtui.quality.equivalence import task_statements
    from kvtui.quality.under_load import sentence

    q = RowQuality.of(q)
    out = []
    suite = q.suite or RowSuite()
    eq = suite.equivalence
    if eq and not eq.reference:
        if eq.shown:
            out.append(f"[{mode}] quality: within {eq.margin_pt:g} pt of the reference over {eq.n} items "
                       "(TOST, 95 %)")
        else:
            need = (f"about {eq.items_needed:,} items needed" if eq.items_needed
                    else "no n shows it (Δ at or past the margin)")
            out.append(f"[{mode}] quality: equal within {eq.margin_pt:g} pt not shown at n = {eq.n}; {need}")
        out += [f"[{mode}] quality: {s}" for s in task_statements(mode, reference, suite)]
    if q.at_knee is not None:
        out.append(f"[{mode}] quality: {sentence(mode, q.at_knee.to_dict())}")
    return out


def speed_words(time_scale: float | None) -> str:
    """The simulator's pace in the words every view uses: "slow motion ×2", "fast-forward ×8", or ""."""
    ts = time_scale or 1.0
    if ts > 1.0:
        return f"slow motion ×{ts:g}"
    if 0 < ts < 1.0:
        return f"fast-forward ×{1 / ts:g}"
    return ""


def limit_cell(step: StepLike) -> str:
    """A step table's limit cell, in the verdict's terms: what limited a failing step; for a
    passing one only the limit it came near ("near KV wall"), never a bare limit beside PASS."""
    from kvtui.core.evaluate import LIMIT_WORDS

    s = Step.of(step)
    lim = s.limited_by or ""
    if not lim:
        return "—"
    words = LIMIT_WORDS.get(lim, lim)
    if s.passed is True:
        return f"near {words}" if lim == "kv_wall" else "—"
    return words


def verdict_words(step: StepLike) -> str:
    """A step's verdict in words that agree with themselves: a FAIL names the SLO figure that failed
    and what limited it ("FAIL TPOT p95 53 > 50 ms (limited by decode)"); a PASS never says "limited
    by" (at most the nearest limit: "PASS (nearest limit: KV 97 %)")."""
    from kvtui.core.evaluate import LIMIT_WORDS

    s = Step.of(step)
    passed = s.passed
    lim = s.limited_by or ""
    words = LIMIT_WORDS.get(lim, lim)
    if passed is True:
        kv = s.kv_cache_usage_max
        if lim == "kv_wall" and isinstance(kv, (int, float)):
            return f"PASS (nearest limit: KV {kv:.0%})"
        return "PASS"
    if passed is False:
        failed = [c for c in s.checks or () if c.ok is False]
        what = ""
        if failed:
            c = failed[0]
            t = str(c.target or "")
            parts = t.split("_")
            if len(parts) >= 3 and parts[-1] == "ms":  # "tpot_p95_ms"
                v, lim_ = fmt(c.value), fmt(c.limit)
                if v == lim_:  # 150.4 > 150 must not read "150 > 150"
                    v = fmt(c.value, 1)
                what = f" {parts[0].upper()} {parts[1]} {v} > {lim_} ms"
            elif t:
                what = f" {t.replace('_', ' ')} {c.value} vs {c.limit}"
        return "FAIL" + what + (f" (limited by {words})" if lim else "")
    return "UNDECIDED" + (f" ({words})" if lim else "")
