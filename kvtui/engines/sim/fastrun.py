"""`kvtui run … --fast`: the same search per mode, each step simulated offline in virtual time.

No HTTP, no wall clock: the scheduler model and a virtual client (kvtui.engines.sim.fast)
produce the records a real step would, and the run evaluates them exactly as it does a
real step. A whole ramp per mode takes seconds — for what-if questions. Every figure is
labelled SIMULATED (fast, offline).
"""

from __future__ import annotations

import time
from typing import Any

from kvtui.engines.sim import catalog
from kvtui.engines.sim.fast import simulate_step
from kvtui.engines.sim.scheduler import SchedulerSim, SimConfigError
from kvtui.engines.sim.server import SIM_VERSION, block_hashes
from kvtui.explore.evaluate import StepContext, evaluate_step
from kvtui.explore.search import make_search
from kvtui.explore.stats import PCTS, min_samples_for
from kvtui.load.records import write_records
from kvtui.load.workload import PromptFactory, TokenSpace
from kvtui.scenario.schema import Mode


def _metrics(res: Any, facts_kv_gib: float | None) -> dict[str, Any]:
    t0, t1 = res.window_start or res.t_start, res.window_end or res.t_end
    inside = [p for p in res.series if t0 <= p.t <= t1] or res.series
    b, a = res.stats_before, res.stats_after
    q = a.prefix_cache_queries_total - b.prefix_cache_queries_total
    h = a.prefix_cache_hits_total - b.prefix_cache_hits_total
    return {
        "kv_usage_max": round(max(p.kv_usage for p in inside), 4),
        "kv_usage_mean": round(sum(p.kv_usage for p in inside) / len(inside), 4),
        "running_max": max(p.running for p in inside),
        "waiting_max": max(p.waiting for p in inside),
        "preemptions": a.preemptions_total - b.preemptions_total,
        "prefix_cache_hit_rate": (h / q) if q else None,
        "server_tokens": {"prompt": a.prompt_tokens_total - b.prompt_tokens_total,
                          "generation": a.generation_tokens_total - b.generation_tokens_total},
    }


def _series_rows(res: Any, t_offset: float, load: float, used_gib: float, kv_gib: float | None, tp: int = 1) -> list[dict[str, Any]]:
    rows = []
    prev = None
    for p in res.series:
        row: dict[str, Any] = {"t": round(p.t - t_offset, 2), "load": load, "phase": "window", "kv_usage": round(p.kv_usage, 4),
                               "running": p.running, "waiting": p.waiting, "preemptions": p.preemptions_total,
                               "gpu_mem_used_gib": round(used_gib * tp, 3),
                               "gpus": [{"index": i, "mem_used_gib": used_gib, "simulated": True} for i in range(tp)]}
        if kv_gib:
            row["kv_in_use_gib"] = round(p.kv_usage * kv_gib, 3)
        if prev is not None and p.t > prev.t:
            row["gen_tok_s"] = round((p.generation_tokens_total - prev.generation_tokens_total) / (p.t - prev.t), 1)
        rows.append(row)
        prev = p
    return rows


def run_mode_fast(run: Any, mode: Mode, md: dict[str, Any]) -> None:
    """Fill `md` (the mode's snapshot entry) the way Run._run_mode would, offline."""
    sc = run.scenario
    s = sc.server
    try:
        sched = SchedulerSim(catalog.load_model(mode.model or s.model), catalog.load_gpu(s.gpu), mode, s, seed=sc.seed)
    except SimConfigError as e:
        md["error"] = {"kind": "oom_kv", "message": f"mode {mode.name}: {e}"}
        run.writer.mode_started(md)
        run._emit("error", mode.name, md["error"]["message"])
        return
    facts = sched.facts()
    mem = sched.memory()
    md["server"] = facts.to_dict()
    md["engine_info"] = {"engine": "sim", "simulated": True, "version": f"{SIM_VERSION} (fast, offline)", "command": [],
                         "gpu_names": [f"{s.gpu} (SIMULATED)"], "dummy_weights": False, "time_scale": 1.0, "fast": True}
    run.writer.mode_started(md)
    run._emit("engine_ready", mode.name, {"facts": md["server"], "info": md["engine_info"]})
    space = TokenSpace.synthetic(vocab_size=int(getattr(catalog.load_model(mode.model or s.model), "vocab_size", 128256) or 128256))
    factory = PromptFactory(sc.workload, space, s.max_model_len, run.salt, sc.seed + sc.workload.seed)
    shared = sc.workload.shared_prefix > 0 or sc.workload.dataset

    def sample(counter: int) -> tuple:
        if shared:
            p = factory.build(counter)
            ids = p.ids if p.ids is not None else list(range(p.prompt_tokens))
            return (len(ids), p.max_tokens, block_hashes(ids, sched.block_size))
        return factory.lengths(counter)

    from kvtui.explore.run import _mean_request_tokens

    guess = facts.kv_bound_concurrency(int(_mean_request_tokens(sc))) if run.closed else None
    md["predicted_kv_concurrency"] = round(guess, 1) if guess else None
    search = make_search(sc.ramp, run.closed, guess=guess)
    md["search"] = {"strategy": search.name, "guess": guess}
    need = max([min_samples_for(PCTS[p]) for _, p, _ in sc.slo.targets()] + [sc.ramp.min_samples])
    r = sc.ramp
    counter = 1_000_000 * (md["index"] + 1)
    t_mode = sched.now
    t_wall = time.monotonic()
    index = 0
    while not run.stopping and not run._skip.is_set():
        load = search.next()
        if load is None:
            break
        why = "confirm" if getattr(search.s, "confirming", False) else "search"
        run._emit("step_started", mode.name, {"load": load, "index": index, "why": why, "closed": run.closed})
        res = simulate_step(sched, sample, load, run.closed, r.warmup_s, r.window_s, 0, sc.seed, mode.name, index,
                            id_prefix=f"{run.salt:08x}-", counter_start=counter, request_timeout_s=r.request_timeout_s)
        if len(res.window_records()) < need:
            # Too few samples for the SLO's percentiles: the real run extends its window; here, re-run by count.
            res = simulate_step(sched, sample, load, run.closed, r.warmup_s, r.window_s, need, sc.seed, mode.name, index,
                                id_prefix=f"{run.salt:08x}-", counter_start=counter, request_timeout_s=r.request_timeout_s)
        counter += len(res.records) + 1
        run.records_written += write_records(run.writer.records_path, res.records)
        ctx = StepContext(load=load, closed=run.closed, t_window_start=res.window_start or res.t_start,
                          t_window_end=res.window_end or res.t_end, metrics=_metrics(res, facts.kv_cache_gib),
                          gpu_mem_used_gib_max=round(mem.used_gib * max(1, s.tensor_parallel_size), 3), max_num_seqs=facts.max_num_seqs)
        step = evaluate_step(res.records, ctx, sc.slo)
        step.update(index=index, why=why, started_at=time.time(), duration_s=round(res.t_end - res.t_start, 2),
                    t_window_start=ctx.t_window_start, t_window_end=ctx.t_window_end, fast=True,
                    engine_limits=res.limited_by)
        md["steps"].append(step)
        md["series"].extend(_series_rows(res, t_mode, load, round(mem.used_gib, 3), facts.kv_cache_gib, max(1, s.tensor_parallel_size)))
        run.writer.step_finished(mode.name, step)
        run._emit("step_finished", mode.name, step)
        search.record(load, step["passed"])
        index += 1
    res_ = search.result()
    md["best_concurrency"] = res_.best
    md["search"].update(best=res_.best, first_fail=res_.first_fail, confirmed=res_.confirmed, flips=res_.flips, noisy=res_.noisy,
                        reached_max=res_.reached_max, steps=len(md["steps"]), wall_s=round(time.monotonic() - t_wall, 2),
                        describe=res_.describe(), done=search.s.done)
    knee = next((st for st in md["steps"] if res_.first_fail is not None and st["load"] == res_.first_fail and st["passed"] is False), None)
    md["knee_limited_by"] = knee["limited_by"] if knee else None
