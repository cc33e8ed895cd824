"""The Markdown report: the comparative answer first, then the evidence behind it.

Sections: title and labels, the answer (one line per mode), the comparison table with its
caveats, the quality guard, charts as text, one section per mode (settings, server facts,
search, step table, time series), the environment and the scenario. Deterministic: the
same snapshot always gives the same text (no export time, no file paths).
"""

from __future__ import annotations

import json
import time
from typing import Any

from kvtui.report import charts
from kvtui.report.quality_md import quality_section
from kvtui.report.text import (
    caveats,
    comparison,
    comparison_headers,
    comparison_rows,
    fmt,
    fmt_knee,
    fmt_load,
    fmt_pct,
    fmt_x,
    labels,
    mode_label,
    step_headers,
    step_rows,
    table,
)
from kvtui.snapshot.file import ran_on_devices


def _when(epoch: Any) -> str:
    if not isinstance(epoch, (int, float)):
        return "—"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(epoch))


def _load_word(kind: str) -> str:
    return "req/s" if kind == "rate" else "concurrent requests"


def _slo_text(sc: dict[str, Any]) -> str:
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
    if d == "measured mean":
        return f"{fmt(ln.get('mean'), 1)} (measured mean)"
    return f"{d} {ln.get('mean', 0):g}±{ln.get('std', 0):g}"


def _workload_text(sc: dict[str, Any]) -> str:
    w = sc.get("workload") or {}
    if not w:
        return "—"
    s = f"{_length(w.get('prompt_tokens'))} prompt tokens / {_length(w.get('output_tokens'))} output tokens"
    if w.get("api"):
        s += f", {w['api']} API"
    if w.get("dataset"):
        s += f", dataset {w['dataset']}"
    if w.get("shared_prefix"):
        s += f", shared prefix {w['shared_prefix']:.0%}"
    if (w.get("turns") or 1) > 1:
        s += f", {w['turns']} turns"
    return s


def _answer(doc: dict[str, Any], comp: dict[str, Any]) -> list[str]:
    rows = comp.get("rows", [])
    kind = comp.get("load_kind", "concurrency")
    unit = _load_word(kind)
    base = comp.get("baseline")
    out = []
    for r in rows:
        if r["best"] is None:
            why = r.get("error") or ("no step met the SLO" if r.get("complete", True) else "did not finish")
            out.append(f"- **{r['mode']}**: no result at the SLO ({why}).")
            continue
        cost = (f"${r['usd_per_mtok_out']:.3f} per million output tokens" if r.get("usd_per_mtok_out") is not None
                else "cost unknown")
        if r["mode"] == base:
            tag = "" if str(r["mode"]).lower() == "baseline" else " (baseline)"
            knee = fmt_knee(r['best'], r.get('knee_interval'), fmt_load)
            s = (f"- **{r['mode']}**{tag}: {knee} {unit} at the SLO, "
                 f"{fmt(r['output_tok_s'])} output tok/s, {cost}.")
        else:
            knee = fmt_knee(r['best'], r.get('knee_interval'), fmt_load)
            s = (f"- **{r['mode']}**: {knee} {unit} ({fmt_x(r.get('best_x'))} the baseline), "
                 f"{fmt(r['output_tok_s'])} output tok/s ({fmt_x(r.get('tok_s_x'))}), {cost}"
                 + (f" ({fmt_pct(r.get('cost_out_change'))})" if r.get("cost_out_change") is not None else "") + ".")
        extra = []
        if r.get("complete") is False:
            extra.append(f"its search did not finish ({r.get('search') or 'no verdict yet'}): "
                         "resume the run to confirm it")
        if r.get("peak_load") is not None and r["peak_load"] != r["best"]:
            extra.append(f"its output tok/s @SLO comes from {fmt_load(r['peak_load'])}, where it peaked: at "
                         f"{fmt_load(r['best'])} it made {fmt(r.get('knee_output_tok_s'))} tok/s"
                         + (f" with {fmt(r['preemptions_at_knee'])} preemptions" if r.get("preemptions_at_knee")
                            else ""))
        lim = r.get("knee_limited_by")
        if lim:
            from kvtui.explore.evaluate import LIMIT_WORDS
            from kvtui.report.answer import limit_sentence

            words = LIMIT_WORDS.get(lim, lim)
            # the answer's own sentence: every limit the next load's steps failed on, as the answer screen says
            extra.append(f"the next step: {limit_sentence(r)}")
            if (r.get("kv_tokens_x") or 0) >= 1.3 and (r.get("best_x") or 0) < 1.1 and lim != "kv_wall":
                extra.append(f"{fmt_x(r['kv_tokens_x'])} the KV tokens bought little here: {words}, "
                             "not the KV wall, set the limit")
        q = r.get("quality") or {}
        if q.get("flagged"):
            extra.append(f"**quality flagged**: {q.get('why')}")
        if extra:
            s = s[:-1] + "; " + "; ".join(extra) + "."
        out.append(s)
    ok = [r for r in rows if r["best"] is not None]
    if len(ok) > 1:
        top = max(r["best"] for r in ok)
        most = [r["mode"] for r in ok if r["best"] == top]
        priced = [r for r in ok if r.get("usd_per_mtok_out") is not None]
        if len(most) == len(ok):
            line = f"\nEvery mode reaches the same load at the SLO ({fmt_load(top)})"
        else:
            line = f"\nMost {unit} at the SLO: " + ", ".join(f"**{m}**" for m in most) + f" ({fmt_load(top)})"
        if priced:
            cheap = min(priced, key=lambda r: r["usd_per_mtok_out"])
            line += f"; cheapest output tokens: **{cheap['mode']}** (${cheap['usd_per_mtok_out']:.3f}/Mtok)"
        flagged = [r["mode"] for r in rows if (r.get("quality") or {}).get("flagged")]
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


def _charts_section(doc: dict[str, Any], comp: dict[str, Any]) -> list[str]:
    rows = comp.get("rows", [])
    kind = comp.get("load_kind", "concurrency")
    out = []
    if any(r["best"] is not None for r in rows):
        out += [f"Max {'rate (req/s)' if kind == 'rate' else 'concurrency'} at the SLO", "", "```text",
                charts.bars([(r["mode"], r["best"],
                              fmt_load(r["best"])
                              + (f"  {fmt_x(r.get('best_x'))}" if r.get("best_x") is not None else ""))
                             for r in rows]), "```", ""]
    if any(r.get("output_tok_s") is not None for r in rows):
        out += ["Output tok/s @SLO (the fastest load meeting it)", "", "```text",
                charts.bars([(r["mode"], r.get("output_tok_s"), fmt(r.get("output_tok_s"))) for r in rows]), "```", ""]
    if any(r.get("usd_per_mtok_out") is not None for r in rows):
        out += ["$ per million output tokens @SLO (shorter is cheaper)", "", "```text",
                charts.bars([(r["mode"], r.get("usd_per_mtok_out"),
                              fmt(r.get("usd_per_mtok_out"), 3)
                              + (f"  {fmt_pct(r.get('cost_out_change'))}" if r.get("cost_out_change") is not None
                                 else ""))
                             for r in rows]), "```", ""]
    if any(r.get("kv_tokens") for r in rows):
        out += ["KV cache tokens", "", "```text",
                charts.bars([(r["mode"], r.get("kv_tokens"), fmt(r.get("kv_tokens"))) for r in rows]), "```", ""]
    return out


def _mode_charts(doc: dict[str, Any], mode: dict[str, Any]) -> list[str]:
    steps = mode.get("steps", [])
    if not steps:
        return []
    slo = ((doc.get("scenario") or {}).get("slo") or {}).get("latency") or {}
    # One bar per load (the last step at each load: confirmations repeat loads).
    by_load: dict[float, dict[str, Any]] = {}
    for s in steps:
        by_load[s.get("load")] = s
    loads = sorted((x for x in by_load if isinstance(x, (int, float))))
    kind = next((s.get("load_kind") for s in steps if s.get("load_kind")), "concurrency")
    pre = "c=" if kind == "concurrency" else ""
    post = "" if kind == "concurrency" else " req/s"
    mark = lambda s: {True: "✓", False: "✗", None: "?"}.get(s.get("passed"), "")  # noqa: E731
    out = ["```text", "output tok/s by load",
           charts.bars([(f"{pre}{fmt_load(x)}{post}", by_load[x].get("output_tok_s"),
                         f"{fmt(by_load[x].get('output_tok_s'))} {mark(by_load[x])}") for x in loads])]
    for key, lim in slo.items():
        metric, p, _ = key.split("_", 2)
        items = []
        for x in loads:
            v = (by_load[x].get(f"{metric}_ms") or {}).get(p)
            items.append((f"{pre}{fmt_load(x)}{post}", v, f"{fmt(v, 1)} ms {mark(by_load[x])}"))
        out += ["", f"{metric.upper()} {p} by load (│ = SLO {lim:g} ms)", charts.bars(items, marker=float(lim))]
    series = mode.get("series") or []
    sl = charts.series_lines(series, [("gen_tok_s", "gen tok/s", ""), ("kv_usage", "KV usage", "%"),
                                      ("running", "running", ""), ("waiting", "waiting", ""),
                                      ("gpu_mem_used_gib", "GPU GiB", " GiB")])
    if sl:
        t = [r.get("t") for r in series if isinstance(r.get("t"), (int, float))]
        span = f" over {t[-1] - t[0]:.0f} s" if len(t) > 1 else ""
        out += ["", f"time series{span} (▁ min … █ max)", sl]
    out.append("```")
    return out


def _server_line(mode: dict[str, Any]) -> str:
    s = mode.get("server") or {}
    parts = [f"weights {fmt(s.get('weights_gib'), 2, ' GiB')}",
             f"KV cache {fmt(s.get('kv_cache_gib'), 2, ' GiB')} = {fmt(s.get('kv_cache_tokens'))} tokens"]
    if (s.get("engines") or 1) > 1:
        parts[-1] += f" over {s['engines']} data-parallel engines"  # the weights are each engine's
    if s.get("max_concurrency_reported") is not None:
        parts.append(f"max concurrency reported {fmt(s.get('max_concurrency_reported'), 1)}× "
                     f"at {fmt(s.get('max_concurrency_len'))} tokens")
    if s.get("cuda_graph_gib") is not None:
        parts.append(f"CUDA graphs {fmt(s['cuda_graph_gib'], 2, ' GiB')}")
    if s.get("max_num_seqs"):
        parts.append(f"max_num_seqs {s['max_num_seqs']}")
    if s.get("max_num_batched_tokens"):
        parts.append(f"max_num_batched_tokens {s['max_num_batched_tokens']}")
    if s.get("prefix_caching") is not None:
        parts.append(f"prefix caching {'on' if s['prefix_caching'] else 'off'}")
    if s.get("attention_backend"):
        parts.append(f"attention {s['attention_backend']}")
    if s.get("startup_s") is not None:
        parts.append(f"ready in {fmt(s['startup_s'], 1, ' s')}")
    from kvtui.engines.vllm.compile_cache import start_line

    if start_line(s):
        parts.append(start_line(s))
    return ", ".join(parts)


def _settings_line(mode: dict[str, Any]) -> str:
    st = mode.get("settings") or {}
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


def _mode_section(doc: dict[str, Any], mode: dict[str, Any]) -> list[str]:
    s = mode.get("search") or {}
    out = [f"### {mode.get('name')}", "", f"*{mode_label(doc, mode)}*", "",
           f"- settings: {_settings_line(mode)}",
           f"- server: {_server_line(mode)}"]
    if s:
        srch = f"- search: {s.get('strategy', '?')}: {s.get('describe') or '—'}"
        if s.get("steps") is not None:
            srch += f"; {s['steps']} steps"
        if s.get("wall_s") is not None:
            srch += f" in {fmt(s['wall_s'], 0, ' s')}"
        if mode.get("predicted_kv_concurrency"):
            srch += f"; KV-bound prediction {fmt(mode['predicted_kv_concurrency'], 0)}"
        out.append(srch)
    cmd = (mode.get("engine_info") or {}).get("command")
    if cmd:
        out.append("- command: `" + " ".join(cmd) + "`")
    if mode.get("error"):
        out.append(f"- **failed**: {mode['error'].get('kind', '')}: {mode['error'].get('message', '')}")
    for w in (mode.get("server") or {}).get("warnings") or []:
        out.append(f"- warning: {w}")
    out.append("")
    if mode.get("steps"):
        heads, rows = step_headers(mode), step_rows(mode)
        if any(isinstance(s.get("predicted"), dict) for s in mode["steps"]):
            from kvtui.report.prediction_report import step_prediction

            heads = heads + ["predicted"]
            rows = [r + [step_prediction(s)] for r, s in zip(rows, mode["steps"])]
        out += [table(heads, rows, markdown=True), "",
                "Latencies in ms; — = too few samples for that percentile (p99 needs hundreds) or not reported; "
                "∞ = failed requests pushed the percentile to infinity.", ""]
        out += _out_of_range_lines(mode)
        out += _mode_charts(doc, mode) + [""]
        from kvtui.report.replicas_md import replica_section

        out += replica_section(mode)  # several replicas only: nothing for one server
    else:
        out += ["No step was measured.", ""]
    return out


def _out_of_range_lines(mode: dict[str, Any]) -> list[str]:
    """Steps whose /metrics values were outside their range: dropped at parse (no verdict, no
    "limited by" uses them), and said here, where the figures they would have filled are read."""
    bad = [(s.get("load"), s["metrics_out_of_range"]) for s in mode.get("steps") or []
           if isinstance(s.get("metrics_out_of_range"), list) and s["metrics_out_of_range"]]
    if not bad:
        return []
    return [f"- **/metrics out of range** at load {fmt(load, 0)}: {', '.join(str(x) for x in names)} "
            "(dropped, not used for the verdict or the limit)" for load, names in bad] + [""]


def _env_section(doc: dict[str, Any]) -> list[str]:
    env = doc.get("environment") or {}
    rows = []
    for key, title in (("engine", "engine"), ("simulated", "simulated"), ("gpu_names", "GPU"),
                       ("gpu_count", "GPU count"), ("gpu_memory_gib", "GPU memory GiB"), ("driver", "driver"),
                       ("cuda", "CUDA"), ("host", "host"), ("platform", "platform"), ("python", "Python"),
                       ("kvtui_version", "kvtui"), ("started_at", "started")):
        if key not in env:
            continue
        v = env[key]
        if key == "started_at":
            v = _when(v)
        elif isinstance(v, list):
            v = ", ".join(str(x) for x in v)
        elif isinstance(v, bool):
            v = "yes" if v else "no"
        rows.append([title, str(v)])
    for m in doc.get("modes", []):
        info = m.get("engine_info") or {}
        rows.append([f"{m.get('name')}: server",
                     f"{info.get('engine') or m.get('engine') or '?'} {info.get('version') or '(version unknown)'}"])
    devices = ran_on_devices(doc.get("modes", []))
    if len(devices) > 1:  # modes joined from runs on different GPUs (of one host, or of several)
        rows += [[f"{', '.join(ms)}: ran on", d] for d, ms in devices.items()]
    run = doc.get("run") or {}
    if run.get("wall_s") is not None:
        rows.append(["run wall time", f"{run['wall_s']:.0f} s"])
    if run.get("stop_reason"):
        rows.append(["stopped", run["stop_reason"]])
    return [table(["", ""], rows, markdown=True)] if rows else ["—"]


def _scenario_section(doc: dict[str, Any]) -> list[str]:
    sc = doc.get("scenario") or {}
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
    comp = comparison(doc)
    sc = doc.get("scenario") or {}
    env = doc.get("environment") or {}
    title = sc.get("name") or "run"
    lines = [f"# kvtui report: {title}", ""]
    if env.get("simulated") or any(m.get("simulated") for m in doc.get("modes", [])):
        lines += ["> **SIMULATED** — every figure below comes from kvtui's simulated vLLM, not from a GPU.", ""]
    if doc.get("imported"):
        lines += [f"> Imported from {doc['imported'].get('tool')} results: "
                  "figures that tool does not report are shown as —.", ""]
    lines += [f"*{labels(doc)}*", ""]
    if sc.get("description"):
        lines += [sc["description"], ""]
    when = f"Run of {_when(env.get('started_at'))}" if env.get("started_at") else "Run"
    lines += [f"{when}: {len(doc.get('modes', []))} mode(s); SLO {_slo_text(sc)}; workload {_workload_text(sc)}.", ""]
    lines += ["## The answer", ""] + _answer(doc, comp) + [""]
    lines += ["## Comparison", "", f"Modes vs baseline **{comp.get('baseline') or '—'}** · *{labels(doc)}*", "",
              table(comparison_headers(doc), comparison_rows(doc), markdown=True), ""]
    if comp.get("note"):
        lines += [f"Note: {comp['note']}.", ""]
    lines += [LEGEND, ""]
    cv = caveats(doc)
    if cv:
        lines += ["### Caveats", ""] + [f"- {c}" for c in cv] + [""]
    lines += ["## Quality guard", ""] + quality_section(doc, comp) + [""]
    from kvtui.report.prediction_report import markdown_section

    lines += markdown_section(doc)  # nothing for a snapshot without predictions: old reports stay as they were
    ch = _charts_section(doc, comp)
    if ch:
        lines += ["## Charts", "", f"*{labels(doc)}*", ""] + ch
    lines += ["## Modes", ""]
    for m in doc.get("modes", []):
        lines += _mode_section(doc, m)
    lines += ["## Environment", ""] + _env_section(doc) + [""]
    lines += ["## Scenario", ""] + _scenario_section(doc) + [""]
    lines += ["---", f"kvtui snapshot schema {doc.get('schema', '?')}, "
                     f"written by kvtui {doc.get('kvtui_version') or env.get('kvtui_version') or '?'}."]
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.rstrip("\n") + "\n"


__all__ = ["render_markdown"]
