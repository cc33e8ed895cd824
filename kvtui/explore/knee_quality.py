"""Quality at the operating point (`[quality] at_knee = true`): the mode's quality items again,
while the knee's load runs, after the search (the server still up, the load generator warm).

One extra phase per mode, never a step: none of its requests, the load's or the items', is
written to the records or counted in any latency figure. In flight at once: the knee's load in
all, k of it the quality requests (k = `[quality] concurrency`, at most the knee) and the rest
the load generator's closed loop (at least one: at a knee of k or less, k + 1 in flight), so
batches hold what they hold at the knee. The
generator warms up first (`ramp.warmup_s`), then the items go, then the load stops and the
server drains. The server's preemption counter and its KV-cache usage are read across the items'
span: the preemptions those requests met (the server's count over the span; vLLM does not say
which request was preempted, so it is an upper bound for the items alone).

Its result, `modes[].quality.at_knee`, holds the answers under load (`tasks`, the suite's shape)
and `vs_alone`, `kvtui.quality.under_load`'s comparison with the same mode's answers before its
load: answers changed, accuracy under load against alone (paired), agreement.

The harness's suites (`[quality] suites`) are prepared before the load starts: its worker imports
lm-eval and torch, builds its task index and loads the datasets, says it is ready, and sends its
requests only when told to go, after the built-in items (kvtui.quality.harness.HarnessSession).
Preparing under the load starved it on a host whose server saturates its CPUs (minutes, the load
running all along); `harness_ready_s` is how long it took, outside the load.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from kvtui import clock
from kvtui.explore import events as ev
from kvtui.quality.harness import HarnessSession

READY_TIMEOUT_S = 600.0  # imports and local data: minutes at most, even on a starved host


def knee_of(md: dict[str, Any]) -> float | None:
    from kvtui.core.search import best_load

    return best_load(md.get("steps") or [])


def measure_at_knee(executor: Any, md: dict[str, Any]) -> dict[str, Any]:
    """Run the at-knee phase on a live executor's warm server; the result for md["quality"]["at_knee"]."""
    run, sc = executor.run, executor.run.scenario
    q = md.get("quality") or {}
    if q.get("skipped") or not q.get("tasks"):
        return {"skipped": "no quality answers alone to compare with"}
    knee = knee_of(md)
    if knee is None:
        return {"skipped": "no load met the SLO: there is no knee"}
    if not run.closed:
        return {"skipped": "an open-loop (rate) knee: quality at the knee needs a concurrency"}
    loadgen, tel = executor.loadgen, executor.telemetry
    if loadgen is None or tel is None or run.stopping:
        return {"skipped": "the run was stopping"}
    k = max(1, min(int(sc.quality.concurrency), int(knee)))
    gen = max(1, int(round(knee)) - k)  # at least one load request beside the items, even at a knee of k
    name = md.get("name") or ""
    qsc = dataclasses.replace(sc, quality=dataclasses.replace(sc.quality, concurrency=k))
    harness = HarnessSession(executor.endpoint, qsc, on_log=lambda line: run.emit(ev.Log(name, line))) \
        if sc.quality.suites else None
    try:
        ready_s = _prepare(harness, run, name)
        if run.stopping:
            return {"skipped": "the run was stopping"}
        out = _under_load(executor, md, knee, k, gen, qsc, harness)
    finally:
        if harness is not None:
            harness.close()  # on every path: a stop, an exception, a worker never told to go
    if ready_s is not None:
        out["harness_ready_s"] = ready_s
    return out


def _prepare(harness: HarnessSession | None, run: Any, name: str) -> float | None:
    """The harness's slow start (imports, task index, datasets) before the load, not under it: seconds, or None
    (no suites; or not ready: its suites are then "not run" with why, and the built-in items go on)."""
    if harness is None:
        return None
    ready_s = harness.wait_ready(READY_TIMEOUT_S, should_stop=lambda: run.stop_reason)
    if ready_s is not None:
        run.emit(ev.Log(name, f"[kvtui] quality at the knee: the harness prepared its suites in {ready_s:.1f} s, "
                              "before the load (no request sent yet)"))
    elif harness.why is not None and harness.pid is not None:  # (lm-eval missing: result() says so)
        run.emit(ev.Log(name, f"[kvtui] quality at the knee: the harness is not ready ({harness.why}); "
                              "its suites are not run, the built-in items go on"))
    return ready_s


def _under_load(executor: Any, md: dict[str, Any], knee: float, k: int, gen: int, qsc: Any,
                harness: HarnessSession | None) -> dict[str, Any]:
    from kvtui.explore.quality import compare_quality, thresholds
    from kvtui.quality.runner import run_suite
    from kvtui.quality.under_load import compare_under_load
    from kvtui.runtime.load.generator import StepParams

    run, sc = executor.run, executor.run.scenario
    q = md.get("quality") or {}
    loadgen, tel = executor.loadgen, executor.telemetry
    name = md.get("name") or ""
    run.emit(ev.Log(name, f"[kvtui] quality at the knee: {gen} load + {k} quality requests in flight "
                          "(not counted in any step)"))
    done = threading.Event()
    ts = executor._time_scale()
    r = sc.ramp
    params = StepParams(name, 10_000, float(gen), True, r.warmup_s * ts, 24 * 3600.0, 0, r.arrival, r.burst_size,
                        10**9, window_timeout_s=r.request_timeout_s * ts)
    box: dict[str, Any] = {}

    def load() -> None:
        try:
            box["res"] = loadgen.run_step(params, should_stop=lambda: "quality at the knee done" if done.is_set()
                                          else run.stop_reason)
        except Exception as e:  # the load's failure is this phase's, never the run's
            box["error"] = f"{type(e).__name__}: {e}"

    th = threading.Thread(target=load, name="kvtui-knee-load", daemon=True)
    th.start()
    clock.sleep(max(0.5, r.warmup_s * ts))
    before = tel.scrape_now()
    t0 = clock.monotonic()
    try:
        suite = run_suite(executor.endpoint, qsc, on_log=lambda line: run.emit(ev.Log(name, line)),
                          should_stop=lambda: run.stop_reason, harness=harness)
    finally:
        t1 = clock.monotonic()
        after = tel.scrape_now()
        done.set()
        th.join(timeout=max(60.0, r.request_timeout_s * ts))
    executor._drain(tel)
    res = box.get("res")
    out: dict[str, Any] = {"load": knee, "generator_load": gen, "concurrency": k, "wall_s": round(t1 - t0, 2),
                           "started_at": suite.get("started_at"), "ended_at": suite.get("ended_at"),
                           "items": suite.get("items"), "tasks": suite.get("tasks") or {},
                           "load_requests": len(res.records) if res is not None else None,
                           "load_error": box.get("error"), "stopped": suite.get("stopped")}
    if before is not None and after is not None and getattr(before, "ok", False) and getattr(after, "ok", False):
        from kvtui.runtime.telemetry.replicas import replicas_delta

        out["preemptions"] = replicas_delta(before, after).get("preemptions")
    win = tel.window(t0, t1)
    out["kv_cache_usage_max"] = win.get("kv_usage_max")
    th_ = thresholds(sc)
    out["vs_alone"] = compare_under_load(q["tasks"], out["tasks"], float(sc.quality.tolerance_pt),
                                         agreement=lambda a, b: compare_quality(a, b, th_))
    return out


def quality_at_knee(executor: Any, md: dict[str, Any]) -> None:
    """md["quality"]["at_knee"] from `measure_at_knee`, whose failure is its own entry's (it runs on the way to
    the mode's teardown); nothing where the quality itself was skipped (no weights: nothing to compare)."""
    q = md.get("quality")
    if not isinstance(q, dict) or q.get("skipped"):
        return
    try:
        q["at_knee"] = measure_at_knee(executor, md)
    except Exception as e:
        q["at_knee"] = {"skipped": f"failed: {type(e).__name__}: {str(e)[:200]}"}
