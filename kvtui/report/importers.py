"""Existing benchmark results as kvtui snapshots, so they compare in the same table.

`vllm bench serve --save-result` JSON: one file is one step (one concurrency or rate).
Files are grouped into modes by `--mode`, else by the result's "label", else by the file
name without its `_c<N>` / `-c<N>` suffix (`a_c32.json`, `a_c128.json` → mode "a").

What such a file does not say stays None — never estimated: GPU memory, KV usage,
preemptions, prefix-cache hits, the limit of a step, weights and KV size (unless the
server's startup log is given with `--log MODE=PATH`, read by kvtui's vLLM log parser),
and any percentile the bench was not asked for (`--metric-percentiles`; the default
gives p99 and the median only). Each step is judged against the SLO given with
`--scenario`/`--set`; a target whose percentile is missing leaves the step undecided.
Unlike kvtui, vllm bench leaves failed requests out of its percentiles: a step with
failures says so in its notes.

GuideLLM's benchmarks JSON is recognised and refused with a clear message: its schema
(nested status distributions) changes between releases and no sample was at hand to
test against.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kvtui.errors import UsageError
from kvtui.io.snapshot.file import SCHEMA

TOOL = "vllm bench serve"
ENGINE = "vllm bench serve (imported)"
_SUFFIX = re.compile(r"[_-]c\d+$")
_PCT_KEY = re.compile(r"^p(\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
_BENCH_KEYS = ("completed", "duration", "output_throughput")


def read_json(path: str | Path) -> Any:
    p = Path(path)
    from kvtui.safeio import SNAPSHOT_CAP, read_text_file

    if not p.exists() and not p.is_symlink():
        raise UsageError(f"{p}: no such file")
    text = read_text_file(p, "bench result", SNAPSHOT_CAP)  # regular files only, capped
    from kvtui.safeio import JSONBoundsError, loads

    try:
        return loads(text, numbers=False)  # bounded depth and sizes (kvtui.safeio); another tool's NaN passes
    except JSONBoundsError as e:
        raise UsageError(f"{p}: not a bench result kvtui reads: {e}")
    except json.JSONDecodeError as e:
        raise UsageError(f"{p}:{e.lineno}: not JSON ({e.msg})")


def detect(data: Any) -> str | None:
    if isinstance(data, dict):
        if all(k in data for k in _BENCH_KEYS):
            return "vllm-bench"
        if isinstance(data.get("benchmarks"), list):
            return "guidellm"
        if data.get("schema", "").startswith("kvtui.snapshot") if isinstance(data.get("schema"), str) else False:
            return "kvtui"
    return None


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def _dist(data: dict[str, Any], metric: str, n: int | None, failures: int) -> dict[str, Any]:
    """kvtui's {n, failures, mean, p50, p90, p95, p99} from a bench result's keys for `metric` (ttft/tpot/itl/e2el)."""
    d: dict[str, Any] = {"n": n, "failures": failures, "mean": _num(data.get(f"mean_{metric}_ms")),
                         "p50": None, "p90": None, "p95": None, "p99": None}
    med = _num(data.get(f"median_{metric}_ms"))
    for k, v in data.items():
        m = _PCT_KEY.match(k)
        if m and m.group(2) == metric:
            name = f"p{float(m.group(1)):g}"
            if name in d:
                d[name] = _num(v)
    if d["p50"] is None and med is not None:
        d["p50"] = med
    std = _num(data.get(f"std_{metric}_ms"))
    if std is not None:
        d["std"] = std
    return d


def _verdict(step: dict[str, Any], slo: Any) -> tuple[bool | None, list[dict[str, Any]]]:
    verdict: bool | None = True
    checks = []
    for metric, pct, limit in slo.targets():
        value = (step.get(f"{metric}_ms") or {}).get(pct)
        if value is None:
            checks.append({"target": f"{metric}_{pct}_ms", "limit": limit, "value": None, "ok": None,
                           "why": f"{pct} {metric.upper()} not in the bench result"})
            if verdict is True:
                verdict = None
            continue
        ok = value <= limit
        checks.append({"target": f"{metric}_{pct}_ms", "limit": limit, "value": value, "ok": ok})
        if not ok:
            verdict = False
    er = step.get("error_rate")
    if er is not None and er > slo.max_error_rate:
        checks.append({"target": "error_rate", "limit": slo.max_error_rate, "value": er, "ok": False})
        verdict = False
    if slo.min_goodput:
        g = step.get("goodput")
        if g is None:
            checks.append({"target": "goodput", "limit": slo.min_goodput, "value": None, "ok": None,
                           "why": "no goodput in the bench result"})
            if verdict is True:
                verdict = None
        elif g < slo.min_goodput:
            checks.append({"target": "goodput", "limit": slo.min_goodput, "value": g, "ok": False})
            verdict = False
    if slo.max_preemptions_per_request is not None:
        checks.append({"target": "preemptions_per_request", "limit": slo.max_preemptions_per_request, "value": None,
                       "ok": None, "why": "no preemption count in the bench result"})
        if verdict is True:
            verdict = None
    if not step.get("requests"):
        verdict = False
    return verdict, checks


def bench_step(data: dict[str, Any], source: str, slo: Any, index: int) -> dict[str, Any]:
    """One `vllm bench serve` result as a kvtui step (snapshot step keys; unknowns None)."""
    completed = int(data.get("completed") or 0)
    failed = int(data.get("failed") or 0)
    requests = completed + failed
    duration = _num(data.get("duration"))
    rate = data.get("request_rate")
    rate_f = _num(rate)
    conc = data.get("max_concurrency")
    notes = []
    if rate_f is not None and rate_f != float("inf"):
        kind, load = "rate", rate_f
        if conc is not None:
            notes.append(f"open loop at {rate_f:g} req/s with at most {conc} in flight")
    elif conc is not None:
        kind, load = "concurrency", float(conc)
    else:
        kind, load = "concurrency", float(data.get("num_prompts") or requests)
        notes.append("no --max-concurrency and request rate inf: every prompt sent at once (load = num_prompts)")
    if failed:
        notes.append(f"{failed} failed request(s): vllm bench leaves them out of its percentiles "
                     "(kvtui counts them as ∞)")
    in_tok = _num(data.get("total_input_tokens"))
    out_thr = _num(data.get("output_throughput"))
    total_thr = _num(data.get("total_token_throughput"))
    req_thr = _num(data.get("request_throughput"))
    goodput_req = _num(data.get("request_goodput"))
    step: dict[str, Any] = {
        kind: load,
        "load": load,
        "load_kind": kind,
        "requests": requests,
        "errors": failed,
        "error_rate": round(failed / requests, 4) if requests else None,
        "errors_by_class": {"failed": failed} if failed else {},
        "samples": {"ttft": completed, "tpot": None, "itl": None, "e2e": completed},
        "output_tok_s": out_thr,
        "input_tok_s": round(in_tok / duration, 2) if in_tok is not None and duration else None,
        "total_tok_s": total_thr,
        "request_s": req_thr,
        "ttft_ms": _dist(data, "ttft", completed, failed),
        "tpot_ms": _dist(data, "tpot", None, failed),
        "itl_ms": _dist(data, "itl", None, 0),
        "e2e_ms": _dist(data, "e2el", completed, failed),
        "goodput": round(goodput_req / req_thr, 4) if goodput_req is not None and req_thr else None,
        "goodput_req_s": goodput_req,
        "limited_by": None,
        "prefix_cache_hit_rate": None,
        "kv_cache_usage_max": None,
        "preemptions": None,
        "running_max": None,
        "waiting_max": None,
        "gpu_mem_used_gib_max": None,
        "started_at": None,
        "duration_s": duration,
        "window_s": duration,
        "index": index,
        "why": "imported",
        "source": {"tool": TOOL, "file": source, "date": data.get("date"), "model_id": data.get("model_id"),
                   "tokenizer_id": data.get("tokenizer_id"), "backend": data.get("backend"),
                   "num_prompts": data.get("num_prompts"),
                   "request_rate": rate, "burstiness": data.get("burstiness"), "max_concurrency": conc,
                   "max_concurrent_requests": data.get("max_concurrent_requests"),
                   "total_input_tokens": data.get("total_input_tokens"),
                   "total_output_tokens": data.get("total_output_tokens")},
    }
    step["passed"], step["checks"] = _verdict(step, slo)
    if notes:
        step["notes"] = notes
    return step


def _search(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Best = the highest passing load below the first load that did not pass (in load order)."""
    best = first_fail = None
    undecided = None
    for s in sorted(steps, key=lambda s: s["load"]):
        if s["passed"] is True:
            best = s["load"]
            continue
        if s["passed"] is False:
            first_fail = s["load"]
        else:
            undecided = s["load"]
        break
    if best is None and first_fail is None and undecided is not None:
        describe = f"undecided: the SLO's percentiles are not in the bench result at {undecided:g}"
    elif best is None:
        describe = "none: the lowest imported load fails the SLO" if first_fail is not None else "none"
    else:
        nxt = f"next {first_fail:g} fails" if first_fail is not None else (
            f"next {undecided:g} undecided" if undecided is not None else "highest imported load")
        describe = f"{best:g} ({nxt}), imported steps (not confirmed)"
    loads = sorted({s["load"] for s in steps})
    return {"strategy": "imported", "best": best, "first_fail": first_fail, "confirmed": False, "flips": None,
            "noisy": None, "reached_max": best is not None and best == loads[-1], "steps": len(steps), "wall_s": None,
            "describe": describe, "done": True}


def _log_facts(path: str | Path) -> dict[str, Any]:
    from kvtui.runtime.engines.vllm.logparse import StartupLogParser

    p = Path(path)
    from kvtui.safeio import SNAPSHOT_CAP, read_text_file

    lines = read_text_file(p, "startup log", SNAPSHOT_CAP, errors="replace").splitlines()
    parser = StartupLogParser().feed_many(lines)
    return {"facts": parser.facts.to_dict(), "version": parser.version, "extra": parser.extra}


def mode_name_for(path: Path, data: dict[str, Any]) -> str:
    if data.get("label"):
        return str(data["label"])
    stem = path.stem
    return _SUFFIX.sub("", stem) or stem


def import_vllm_bench(files: list[str | Path], scenario: Any = None, mode: str | None = None,
                      logs: dict[str, str] | None = None, gpu: str | None = None,
                      version: str | None = None) -> dict[str, Any]:
    """A kvtui snapshot document from `vllm bench serve` result files."""
    from kvtui.io.scenario import load_scenario
    from kvtui.runtime.engines.base import StartupFacts
    from kvtui.secrets import redact_args

    sc = scenario if scenario is not None else load_scenario(None)
    logs = dict(logs or {})
    groups: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for f in files:
        p = Path(f)
        data = read_json(p)
        kind = detect(data)
        if kind == "guidellm":
            raise UsageError(f"{p}: a GuideLLM benchmarks file; "
                             "kvtui imports `vllm bench serve --save-result` JSON only "
                             "(GuideLLM's schema changes between releases)")
        if kind == "kvtui":
            raise UsageError(f"{p}: already a kvtui snapshot; open it with `kvtui replay` or compare with `kvtui diff`")
        if kind != "vllm-bench":
            raise UsageError(f"{p}: not a `vllm bench serve` result (needs {', '.join(_BENCH_KEYS)})")
        groups.setdefault(mode or mode_name_for(p, data), []).append((p, data))
    unknown = [m for m in logs if m not in groups]
    if unknown:
        raise UsageError(f"--log {unknown[0]}=…: no imported mode of that name (modes: {', '.join(groups)})")
    modes = []
    models = set()
    for i, (name, items) in enumerate(groups.items()):
        items.sort(key=lambda it: (_num(it[1].get("max_concurrency")) or 0, _num(it[1].get("request_rate")) or 0))
        steps = [bench_step(d, p.name, sc.slo, j) for j, (p, d) in enumerate(items)]
        steps.sort(key=lambda s: s["load"])
        for j, s in enumerate(steps):
            s["index"] = j
        for _, d in items:
            if d.get("model_id"):
                models.add(str(d["model_id"]))
        srch = _search(steps)
        facts = StartupFacts().to_dict()
        facts["phases"] = []
        settings: dict[str, Any] = {}
        mode_version = version
        dummy = None
        if name in logs:
            lf = _log_facts(logs[name])
            facts = lf["facts"]
            mode_version = version or lf["version"]
            extra = lf["extra"]
            nd = extra.get("non_default_args") or {}
            settings = {"name": name, "dtype": extra.get("dtype") or nd.get("dtype") or "auto",
                        "kv_cache_dtype": nd.get("kv_cache_dtype") or facts.get("kv_cache_dtype") or "auto",
                        "quantization": extra.get("quantization") or nd.get("quantization") or "",
                        "model": nd.get("model") or "",
                        "extra_args": redact_args([]), "env": {}}
            lf_load = extra.get("load_format") or nd.get("load_format")
            dummy = (lf_load == "dummy") if lf_load else None
            facts["source"] = f"startup log {Path(logs[name]).name}"
        modes.append({
            "name": name,
            "index": i,
            "settings": settings,
            "engine": ENGINE,
            "simulated": False,
            "server": facts,
            "engine_info": {"engine": ENGINE, "simulated": False, "version": mode_version, "command": [],
                            "gpu_names": [gpu] if gpu else [], "dummy_weights": dummy, "time_scale": 1.0},
            "best_concurrency": srch["best"],
            "search": srch,
            "knee_limited_by": None,
            "steps": steps,
            "series": [],
            "complete": True,
            "imported_from": [p.name for p, _ in items],
        })
    from_file = scenario is not None and scenario.source not in ("", "<defaults>")
    scd = sc.to_dict()
    scd["name"] = scenario.name if from_file else "imported vllm bench results"
    scd["server"]["engine"] = ENGINE
    if models:
        scd["server"]["model"] = ", ".join(sorted(models))
    # What the bench files tell about the workload (means over all imported requests); the rest is unknown.
    tot_in = sum(_num(d.get("total_input_tokens")) or 0 for items in groups.values() for _, d in items)
    tot_out = sum(_num(d.get("total_output_tokens")) or 0 for items in groups.values() for _, d in items)
    done = sum(int(d.get("completed") or 0) for items in groups.values() for _, d in items)
    if not from_file:  # kvtui's default workload and ramp would be invented here
        scd["workload"] = {"api": None,
                           "prompt_tokens": {"dist": "measured mean",
                                             "mean": round(tot_in / done, 1) if done else None},
                           "output_tokens": {"dist": "measured mean",
                                             "mean": round(tot_out / done, 1) if done else None}}
        scd["ramp"] = {}
    return {
        "schema": SCHEMA,
        "scenario": scd,
        "environment": {"engine": ENGINE, "simulated": False, "gpu_names": [gpu] if gpu else [], "host": None,
                        "started_at": None, "imported": True},
        "run": {"imported": True, "finished": True},
        "imported": {"tool": TOOL, "files": [Path(f).name for f in files],
                     "logs": {k: Path(v).name for k, v in logs.items()},
                     "note": "figures vllm bench does not report are None; steps judged against this SLO: "
                             + sc.slo.describe()},
        "modes": modes,
        "records": None,
    }
