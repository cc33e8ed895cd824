"""The Markdown report: the comparative answer first, then the evidence behind it.

Sections: title and labels, the answer (one line per mode), the comparison table with its
caveats, the quality guard, charts as text, one section per mode (settings, server facts,
search, step table, time series), the environment and the scenario. Deterministic: the
same snapshot always gives the same text (no export time, no file paths).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping

from kvtui.io.snapshot.file import ran_on_devices
from kvtui.io.snapshot.schema import Comparison, ComparisonRow, Environment, Mode, Run, RunInfo, Step
from kvtui.report import charts
from kvtui.report.quality_md import quality_section
from kvtui.report.text import (
    caveats,
    comparison,
    comparison_headers,
    comparison_rows,
    figure_cell,
    fmt,
    fmt_load,
    fmt_pct,
    fmt_x,
    labels,
    mode_label,
    step_headers,
    step_rows,
    table,
)


def _when(epoch: Any) -> str:
    if not isinstance(epoch, (int, float)):
        return "—"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(epoch))


def _load_word(kind: str) -> str:
    return {"rate": "req/s", "trace": "× the trace's recorded rate"}.get(kind, "concurrent requests")


def _slo_text(sc: Mapping[str, Any]) -> str:
    slo = sc.get("slo") or {}
    parts = []
    for key, lim in (slo.get("latency") or {}).items():
        m, p, _ = key.split("_", 2)
        parts.append(f"{m.upper()} {p} ≤ {lim:g} ms")
    if slo.get("max_error_rate") is not None:
        parts.append(f"errors ≤ {slo['max_error_rate']:.0%}")
    if slo.get("min_goodput"):
        parts.append(f"goodput ≥ {slo['min_goodput']:.0%}")
    if slo.get("max_preemptions_per_request") is not None:
        parts.append(f"preemptions ≤ {slo['max_preemptions_per_request']:g}/request")
    return ", ".join(parts) or "—"


def _length(ln: Any) -> str:
    if not isinstance(ln, dict):
        return fmt(ln)
    d = ln.get("dist", "fixed")
    if d == "fixed":
        return str(ln.get("value"))
    if d == "uniform":
        return f"uniform {ln.get('min')}–{ln.get('max')}"
    if d == "trace":
        return f"trace (mean {fmt(ln.get('mean'))}, max {fmt(ln.get('max'))})"
    if d == "measured mean":
        return f"{fmt(ln.get('mean'), 1)} (measured mean)"
    return f"{d} {ln.get('mean', 0):g}±{ln.get('std', 0):g}"


def _workload_text(sc: Mapping[str, Any]) -> str:
    w = sc.get("workload") or {}
    if not w:
        return "—"
    s = f"{_length(w.get('prompt_tokens'))} prompt tokens / {_length(w.get('output_tokens'))} output tokens"
    if w.get("api"):
        s += f", {w['api']} API"
    if w.get("dataset"):
        s += f", dataset {w['dataset']}"
    if w.get("trace"):
        s += f", trace {Path(str(w['trace'])).name}"
    if w.get("shared_prefix"):
        s += f", shared prefix {w['shared_prefix']:.0%}"
    if (w.get("turns") or 1) > 1:
        s += f", {w['turns']} turns"
    return s


def _answer(comp: Comparison) -> list[str]:
    rows = comp.rows or ()
    unit = _load_word(comp.load_kind or "concurrency")
    base = comp.baseline
    out = []
    for r in rows:
        if r.best is None:
            why = r.error or ("no step met the SLO" if (r.complete if r.has("complete") else True)
                              else "did not finish")
            out.append(f"- **{r.mode}**: no result at the SLO ({why}).")
            continue
        cost = (f"${r.usd_per_mtok_out:.3f} per million output tokens" if r.usd_per_mtok_out is not None
                else "cost unknown")
        knee = figure_cell("best", r)  # "≥ 22" where the knee is a lower bound
        if r.mode == base:
            tag = "" if str(r.mode).lower() == "baseline" else " (baseline)"
            s = (f"- **{r.mode}**{tag}: {knee} {unit} at the SLO, "
                 f"{fmt(r.output_tok_s)} output tok/s, {cost}.")
        else:
            s = (f"- **{r.mode}**: {knee} {unit} ({figure_cell('best_x', r)} the baseline), "
                 f"{fmt(r.output_tok_s)} output tok/s ({fmt_x(r.tok_s_x)}), {cost}"
                 + (f" ({fmt_pct(r.cost_out_change)})" if r.cost_out_change is not None else "") + ".")
        extra = []
        if r.complete is False:
            extra.append(f"its search did not finish ({r.search or 'no verdict yet'}): "
                         "resume the run to confirm it")
        if r.peak_load is not None and r.peak_load != r.best:
            extra.append(f"its output tok/s @SLO comes from {fmt_load(r.peak_load)}, where it peaked: at "
                         f"{fmt_load(r.best)} it made {fmt(r.knee_output_tok_s)} tok/s"
                         + (f" with {fmt(r.preemptions_at_knee)} preemptions" if r.preemptions_at_knee else ""))
        lim = r.knee_limited_by
        if lim:
            from kvtui.core.evaluate import LIMIT_WORDS
            from kvtui.report.answer import limit_sentence

            words = LIMIT_WORDS.get(lim, lim)
            # the answer's own sentence: every limit the next load's steps failed on, as the answer screen says
            extra.append(f"the next step: {limit_sentence(r.to_dict())}")
            if (r.kv_tokens_x or 0) >= 1.3 and (r.best_x or 0) < 1.1 and lim != "kv_wall":
                extra.append(f"{fmt_x(r.kv_tokens_x)} the KV tokens bought little here: {words}, "
                             "not the KV wall, set the limit")
        if r.quality is not None and r.quality.flagged:
            extra.append(f"**quality flagged**: {r.quality.why}")
        if extra:
            s = s[:-1] + "; " + "; ".join(extra) + "."
        out.append(s)
    ok = [(r, r.best) for r in rows if r.best is not None]
    if len(ok) > 1:
        top = max(best for _, best in ok)
        most = [r.mode for r, best in ok if best == top]
        priced = [(r, usd) for r, _ in ok if (usd := r.usd_per_mtok_out) is not None]
        if len(most) == len(ok):
            line = f"\nEvery mode reaches the same load at the SLO ({fmt_load(top)})"
        else:
            line = f"\nMost {unit} at the SLO: " + ", ".join(f"**{m}**" for m in most) + f" ({fmt_load(top)})"
        if priced:
            cheap, usd = min(priced, key=lambda ru: ru[1])
            line += f"; cheapest output tokens: **{cheap.mode}** (${usd:.3f}/Mtok)"
        flagged = [str(r.mode) for r in rows if r.quality is not None and r.quality.flagged]
        if flagged:
            line += f"; quality flagged: {', '.join(flagged)}"
        out.append(line + ".")
    return out


LEGEND = (
    "*×*: ratio to the baseline. *max conc @SLO*: the mode's highest load meeting the SLO (the knee). "
    "*out tok/s @SLO*: the output rate of the fastest load meeting it — the knee (mean of the step and its "
    "confirmation), or a lower load that was more than 5 % faster, shown as \"@load\" (past the KV wall preemptions "
    "cost throughput). *@knee*: the passing steps at the knee (preemptions: the larger). *next step limit*: what "
    "stopped the first failing load above it. *peak GPU GiB*: largest GPU memory seen in any step. "
    "*$/Mtok*: GPU cost per million output (input) tokens at the fastest load, each carrying the whole bill; "
    "*J/tok out*: GPU energy per output token there (NVML power; — where the GPU reported none, as the simulator); "
    "*Δ*: change against the baseline. *quality*: fixed prompts at temperature 0 against the reference mode."
)


def _charts_section(comp: Comparison) -> list[str]:
    rows = comp.rows or ()
    kind = comp.load_kind or "concurrency"
    out = []

    def bars(items: list[tuple[ComparisonRow, float | None, str]]) -> str:
        return charts.bars([(str(r.mode), v, text) for r, v, text in items])

    if any(r.best is not None for r in rows):
        what = {"rate": "rate (req/s)", "trace": "speed-up of the trace (×)"}.get(kind, "concurrency")
        out += [f"Max {what} at the SLO", "", "```text",
                bars([(r, r.best, fmt_load(r.best) + (f"  {fmt_x(r.best_x)}" if r.best_x is not None else ""))
                      for r in rows]), "```", ""]
    if any(r.output_tok_s is not None for r in rows):
        out += ["Output tok/s @SLO (the fastest load meeting it)", "", "```text",
                bars([(r, r.output_tok_s, fmt(r.output_tok_s)) for r in rows]), "```", ""]
    if any(r.usd_per_mtok_out is not None for r in rows):
        out += ["$ per million output tokens @SLO (shorter is cheaper)", "", "```text",
                bars([(r, r.usd_per_mtok_out,
                       fmt(r.usd_per_mtok_out, 3)
                       + (f"  {fmt_pct(r.cost_out_change)}" if r.cost_out_change is not None else ""))
                      for r in rows]), "```", ""]
    if any(r.kv_tokens for r in rows):
        out += ["KV cache tokens", "", "```text",
                bars([(r, r.kv_tokens, fmt(r.kv_tokens)) for r in rows]), "```", ""]
    return out


def _mode_charts(run: Run, mode: Mode) -> list[str]:
    steps = mode.all_steps
    if not steps:
        return []
    slo = ((run.scenario or {}).get("slo") or {}).get("latency") or {}
    # One bar per load (the last step at each load: confirmations repeat loads).
    by_load: dict[float | None, Step] = {}
    for s in steps:
        by_load[s.load] = s
    loads = sorted((x for x in by_load if isinstance(x, (int, float))))
    kind = next((s.load_kind for s in steps if s.load_kind), "concurrency")
    pre = "c=" if kind == "concurrency" else ""
    post = {"concurrency": "", "trace": "×"}.get(kind, " req/s")
    mark = lambda s: {True: "✓", False: "✗", None: "?"}[s.passed]  # noqa: E731
    out = ["```text", "output tok/s by load",
           charts.bars([(f"{pre}{fmt_load(x)}{post}", by_load[x].output_tok_s,
                         f"{fmt(by_load[x].output_tok_s)} {mark(by_load[x])}") for x in loads])]
    for key, lim in slo.items():
        metric, p, _ = key.split("_", 2)
        items = []
        for x in loads:
            d = by_load[x].latency(metric)
            v = d.by_key(p) if d is not None else None
            items.append((f"{pre}{fmt_load(x)}{post}", v, f"{fmt(v, 1)} ms {mark(by_load[x])}"))
        out += ["", f"{metric.upper()} {p} by load (│ = SLO {lim:g} ms)", charts.bars(items, marker=float(lim))]
    series = mode.series or []
    sl = charts.series_lines(series, [("gen_tok_s", "gen tok/s", ""), ("kv_usage", "KV usage", "%"),
                                      ("running", "running", ""), ("waiting", "waiting", ""),
                                      ("gpu_mem_used_gib", "GPU GiB", " GiB")])
    if sl:
        t = [r.get("t") for r in series if isinstance(r.get("t"), (int, float))]
        span = f" over {t[-1] - t[0]:.0f} s" if len(t) > 1 else ""
        out += ["", f"time series{span} (▁ min … █ max)", sl]
    out.append("```")
    return out


def _server_line(mode: Mode) -> str:
    s = mode.facts
    parts = [f"weights {fmt(s.weights_gib, 2, ' GiB')}",
             f"KV cache {fmt(s.kv_cache_gib, 2, ' GiB')} = {fmt(s.kv_cache_tokens)} tokens"]
    if (s.engines or 1) > 1:
        parts[-1] += f" over {s.engines} data-parallel engines"  # the weights are each engine's
    if s.max_concurrency_reported is not None:
        parts.append(f"max concurrency reported {fmt(s.max_concurrency_reported, 1)}× "
                     f"at {fmt(s.max_concurrency_len)} tokens")
    if s.cuda_graph_gib is not None:
        parts.append(f"CUDA graphs {fmt(s.cuda_graph_gib, 2, ' GiB')}")
    if s.max_num_seqs:
        parts.append(f"max_num_seqs {s.max_num_seqs}")
    if s.max_num_batched_tokens:
        parts.append(f"max_num_batched_tokens {s.max_num_batched_tokens}")
    if s.prefix_caching is not None:
        parts.append(f"prefix caching {'on' if s.prefix_caching else 'off'}")
    if s.attention_backend:
        parts.append(f"attention {s.attention_backend}")
    if s.startup_s is not None:
        parts.append(f"ready in {fmt(s.startup_s, 1, ' s')}")
    from kvtui.runtime.engines.vllm.compile_cache import start_line

    if start_line(s):
        parts.append(start_line(s))
    return ", ".join(parts)


def _settings_line(mode: Mode) -> str:
    st = mode.settings or {}
    if not st:
        return "—"
    parts = [f"dtype {st.get('dtype', '?')}", f"kv_cache_dtype {st.get('kv_cache_dtype', '?')}",
             f"quantization {st.get('quantization') or '—'}"]
    if st.get("model"):
        parts.append(f"model {st['model']}")
    if st.get("extra_args"):
        parts.append("extra args `" + " ".join(st["extra_args"]) + "`")
    if st.get("env"):
        parts.append("env " + ", ".join(f"{k}={v}" for k, v in st["env"].items()))
    return ", ".join(parts)


def _mode_section(run: Run, mode: Mode) -> list[str]:
    s = mode.search
    out = [f"### {mode.name}", "", f"*{mode_label(run, mode)}*", "",
           f"- settings: {_settings_line(mode)}",
           f"- server: {_server_line(mode)}"]
    if s:
        srch = f"- search: {s.strategy or '?'}: {s.describe or '—'}"
        if s.steps is not None:
            srch += f"; {s.steps} steps"
        if s.wall_s is not None:
            srch += f" in {fmt(s.wall_s, 0, ' s')}"
        if mode.predicted_kv_concurrency:
            srch += f"; KV-bound prediction {fmt(mode.predicted_kv_concurrency, 0)}"
        out.append(srch)
    cmd = mode.info.command
    if cmd:
        out.append("- command: `" + " ".join(cmd) + "`")
    if mode.error:
        out.append(f"- **failed**: {mode.error.kind or ''}: {mode.error.message or ''}")
    for w in mode.facts.warnings or []:
        out.append(f"- warning: {w}")
    out.append("")
    if mode.all_steps:
        heads, rows = step_headers(mode), step_rows(mode)
        if any(s.predicted is not None for s in mode.all_steps):
            from kvtui.report.prediction_report import step_prediction

            heads = heads + ["predicted"]
            rows = [r + [step_prediction(s)] for r, s in zip(rows, mode.all_steps)]
        out += [table(heads, rows, markdown=True), "",
                "Latencies in ms; — = too few samples for that percentile (p99 needs hundreds) or not reported; "
                "∞ = failed requests pushed the percentile to infinity.", ""]
        out += _out_of_range_lines(mode)
        out += _mode_charts(run, mode) + [""]
        from kvtui.report.replicas_md import replica_section

        out += replica_section(mode)  # several replicas only: nothing for one server
    else:
        out += ["No step was measured.", ""]
    return out


def _out_of_range_lines(mode: Mode) -> list[str]:
    """Steps whose /metrics values were outside their range: dropped at parse (no verdict, no
    "limited by" uses them), and said here, where the figures they would have filled are read."""
    bad = [(s.load, s.metrics_out_of_range) for s in mode.all_steps if s.metrics_out_of_range]
    if not bad:
        return []
    return [f"- **/metrics out of range** at load {fmt(load, 0)}: {', '.join(str(x) for x in names)} "
            "(dropped, not used for the verdict or the limit)" for load, names in bad] + [""]


def _env_section(run: Run) -> list[str]:
    env = run.environment or Environment()
    rows = []
    for key, title in (("engine", "engine"), ("simulated", "simulated"), ("gpu_names", "GPU"),
                       ("gpu_count", "GPU count"), ("gpu_memory_gib", "GPU memory GiB"), ("driver", "driver"),
                       ("cuda", "CUDA"), ("host", "host"), ("platform", "platform"), ("python", "Python"),
                       ("kvtui_version", "kvtui"), ("started_at", "started")):
        if not env.has(key):
            continue
        v = env.by_key(key)
        if key == "started_at":
            v = _when(v)
        elif isinstance(v, list):
            v = ", ".join(str(x) for x in v)
        elif isinstance(v, bool):
            v = "yes" if v else "no"
        rows.append([title, str(v)])
    for m in run.all_modes:
        info = m.info
        rows.append([f"{m.name}: server",
                     f"{info.engine or m.engine or '?'} {info.version or '(version unknown)'}"])
    devices = ran_on_devices(run.all_modes)
    if len(devices) > 1:  # modes joined from runs on different GPUs (of one host, or of several)
        rows += [[f"{', '.join(ms)}: ran on", d] for d, ms in devices.items()]
    how = run.run or RunInfo()
    if how.wall_s is not None:
        rows.append(["run wall time", f"{how.wall_s:.0f} s"])
    if how.stop_reason:
        rows.append(["stopped", how.stop_reason])
    return [table(["", ""], rows, markdown=True)] if rows else ["—"]


def _scenario_section(sc: Mapping[str, Any], trace: Mapping[str, Any] | None = None) -> list[str]:
    if not sc:
        return ["—"]
    server = sc.get("server") or {}
    ramp = sc.get("ramp") or {}
    cost = sc.get("cost") or {}
    out = [f"- model: {server.get('model', '?')}, max_model_len {fmt(server.get('max_model_len'))}, "
           f"gpu_memory_utilization {server.get('gpu_memory_utilization', '?')}, "
           f"tensor_parallel_size {server.get('tensor_parallel_size', 1)}",
           f"- workload: {_workload_text(sc)}",
           f"- SLO: {_slo_text(sc)}"]
    if trace:  # what the run replayed (kvtui.io.scenario.trace's summary, read before any server started)
        from kvtui.io.scenario.trace import describe

        try:
            out += [f"- {line}" for line in describe(dict(trace))]
        except (KeyError, TypeError, ValueError):  # another version's summary: its keys as they are
            out.append(f"- trace: {json.dumps(dict(trace), default=str)[:500]}")
    if ramp:
        out.append(f"- ramp: {ramp.get('load', 'concurrency')} from {fmt_load(ramp.get('start'))} "
                   f"to {fmt_load(ramp.get('max'))}, step {ramp.get('step')}, search {ramp.get('search')}, "
                   f"warm-up {ramp.get('warmup_s')} s, window {ramp.get('window_s')} s")
    if cost:
        ngpu = cost.get("gpus") or f"{server.get('tensor_parallel_size') or 1} (the tensor-parallel size)"
        out.append(f"- cost: ${cost.get('gpu_hourly_usd', 0):g} per GPU-hour × {ngpu} GPU(s), "
                   f"failed requests {'counted' if cost.get('count_failed', True) else 'not counted'}")
    body = json.dumps(sc, indent=1, ensure_ascii=False, default=str)
    out += ["", "<details><summary>the scenario as run (secrets removed)</summary>", "", "```json", body, "```", "",
            "</details>"]
    return out


def render_markdown(doc: dict[str, Any]) -> str:
    """The whole report as Markdown (doc: a scrubbed, portable snapshot document)."""
    comp_doc = comparison(doc)
    comp = Comparison.view(comp_doc)
    run = Run.view(doc)
    sc = run.scenario or {}
    env = run.environment or Environment()
    modes = run.all_modes
    title = sc.get("name") or "run"
    lines = [f"# kvtui report: {title}", ""]
    if env.simulated or any(m.simulated for m in modes):
        lines += ["> **SIMULATED** — every figure below comes from kvtui's simulated vLLM, not from a GPU.", ""]
    if run.imported:
        lines += [f"> Imported from {run.imported.get('tool')} results: "
                  "figures that tool does not report are shown as —.", ""]
    lines += [f"*{labels(run)}*", ""]
    if sc.get("description"):
        lines += [sc["description"], ""]
    when = f"Run of {_when(env.started_at)}" if env.started_at else "Run"
    lines += [f"{when}: {len(modes)} mode(s); SLO {_slo_text(sc)}; workload {_workload_text(sc)}.", ""]
    traffic: list[str] = []
    if comp.load_kind == "trace":  # a trace replay: the answer in the capacity owner's words first
        from kvtui.report.answer import traffic_questions

        raw = comparison(doc)
        done = [r for r in raw.get("rows") or [] if r.get("best") is not None]
        traffic = [f"- {q['question']}: {q['text']}." for q in traffic_questions(done, raw)]
    lines += ["## The answer", ""] + traffic + _answer(comp) + [""]
    lines += ["## Comparison", "", f"Modes vs baseline **{comp.baseline or '—'}** · *{labels(run)}*", "",
              table(comparison_headers(doc), comparison_rows(doc), markdown=True), ""]
    if comp.note:
        lines += [f"Note: {comp.note}.", ""]
    lines += [LEGEND, ""]
    cv = caveats(doc)
    if cv:
        lines += ["### Caveats", ""] + [f"- {c}" for c in cv] + [""]
    lines += ["## Quality guard", ""] + quality_section(doc, comp_doc) + [""]
    from kvtui.report.prediction_report import markdown_section

    lines += markdown_section(run)  # nothing for a snapshot without predictions: old reports stay as they were
    ch = _charts_section(comp)
    if ch:
        lines += ["## Charts", "", f"*{labels(run)}*", ""] + ch
    lines += ["## Modes", ""]
    for m in modes:
        lines += _mode_section(run, m)
    lines += ["## Environment", ""] + _env_section(run) + [""]
    lines += ["## Scenario", ""] + _scenario_section(sc, doc.get("trace")) + [""]
    lines += ["---", f"kvtui snapshot schema {run.schema or '?'}, "
                     f"written by kvtui {run.kvtui_version or env.kvtui_version or '?'}."]
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.rstrip("\n") + "\n"


__all__ = ["render_markdown"]
