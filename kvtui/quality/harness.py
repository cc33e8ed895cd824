"""Standard suites through lm-evaluation-harness (`pip install 'kvtui[eval]'`), per mode.

`[quality] suites = ["gsm8k", "kvtui_arith"]` names harness tasks: the harness's own registry
(gsm8k, mmlu_pro, …) and the task YAML in `suite_paths` (the harness's format, local data), with
kvtui's own `kvtui/data/eval/` always on the path. Each mode's server is evaluated through the
harness's OpenAI-compatible model type (`local-chat-completions`, or `local-completions` with
`suite_api = "completions"` for the log-likelihood tasks), `suite_limit` items a suite (the
harness takes the first N, the same in every mode), `suite_fewshot` shots (-1: the task's own).

The harness builds the prompts, the few-shot turns, extracts and scores the answers; its
per-item results (log_samples) become kvtui task results of the same shape as the built-in
tasks (`{"n", "correct", "accuracy", "ci", "items": [{"key", "ok", ...}]}`), so the paired
statistics, the verdicts, the quality-adjusted cost, the exports and `kvtui diff` read them as
they read passkey. An item's key is its document and prompt digests: an item pairs only with the
same document asked the same way.

Datasets are never downloaded at run time: HF_DATASETS_OFFLINE and HF_HUB_OFFLINE are set for the
harness unless the environment sets them. A suite whose dataset is not cached is marked
`not run` with one line saying what is missing and how to fetch it; the run goes on.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from kvtui.quality.stats import wilson

EVAL_DIR = Path(__file__).resolve().parent.parent / "data" / "eval"  # kvtui's own suites (kvtui_arith)
NOT_INSTALLED = "lm-eval is not installed: pip install 'kvtui[eval]'"


def missing() -> str | None:
    """Why the harness cannot run here, or None."""
    return None if importlib.util.find_spec("lm_eval") is not None else NOT_INSTALLED


def _key(task: str, s: dict[str, Any]) -> str:
    # A group's item names its leaf task too (doc_ids restart in each); a plain task's key is as it always was.
    parts = [task, s.get("doc_id"), s.get("doc_hash"), s.get("prompt_hash")] + ([s["task"]] if s.get("task") else [])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]


def to_task_result(name: str, suite: dict[str, Any], harness: str) -> dict[str, Any]:
    """One harness suite's output (the worker's) as a kvtui task result (kvtui.quality.runner's shape)."""
    if suite.get("status") != "ok":
        # n None, not 0: no item was asked (readers that count items, the live log's included, pass it by)
        return {"task": name, "source": harness, "not_run": str(suite.get("why") or "not run"), "n": None,
                "correct": None, "errors": 0, "accuracy": None, "ci": None, "items": []}
    rows = []
    for s in suite.get("samples") or []:
        v = s.get("value")
        item_id = (f"{s['task']}/" if s.get("task") else "") + str(s.get("doc_id"))  # a group's: leaf/doc
        rows.append({"id": item_id, "key": _key(name, s), "ok": bool(v is not None and v >= 1.0),
                     "value": v, "got": s.get("got"), "answer": s.get("answer"), "target": s.get("target"),
                     "text_sha": s.get("text_sha")})
    n = len(rows)
    k = sum(r["ok"] for r in rows)
    binary = all(r["value"] in (0.0, 1.0) for r in rows)
    lo, hi = wilson(k, n)
    out = {"task": name, "source": harness, "scoring": f"{harness}: {suite.get('metric')} ({suite.get('filter')})",
           "dataset": suite.get("dataset"), "num_fewshot": suite.get("num_fewshot"), "limit": suite.get("limit"),
           "n": n, "correct": k, "errors": 0, "accuracy": round(k / n, 4) if n else None,
           "ci": [round(lo, 4), round(hi, 4)], "wall_s": suite.get("wall_s"), "items": rows}
    # The harness's own figure for the suite, a group's leaf tasks, shots asked for and not applied.
    for key in ("harness_score", "by_task", "shots_note"):
        if suite.get(key) is not None:
            out[key] = suite[key]
    if not binary:  # McNemar needs right/wrong: a graded metric counts as right only at its top value
        out["note"] = f"{suite.get('metric')} is not 0/1 per item: an item counts as right at 1.0 only"
    return out


def harness_env(api_key: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["OPENAI_API_KEY"] = api_key or "EMPTY"  # the harness's models read it from here (never a file)
    return env


def spec_for(endpoint: Any, scenario: Any) -> dict[str, Any]:
    q = scenario.quality
    include = [str(EVAL_DIR)] + [str(p) for p in q.suite_paths]
    return {"base_url": endpoint.base_url, "model": endpoint.model, "api": q.suite_api,
            "concurrency": q.concurrency, "timeout_s": int(max(30.0, float(scenario.ramp.request_timeout_s or 600))),
            "max_length": getattr(endpoint, "max_model_len", None) or scenario.server.max_model_len or None,
            "include": include,
            "suites": [{"name": s, "limit": q.suite_limit, "num_fewshot": q.suite_fewshot} for s in q.suites]}


def run_suites(endpoint: Any, scenario: Any, on_log: Callable[[str], None] | None = None,
               timeout_s: float | None = None) -> dict[str, Any]:
    """{name: task result} for every suite of the scenario; a suite that cannot run is marked, never raised."""
    log = on_log or (lambda _m: None)
    names = list(scenario.quality.suites)
    why = missing()
    if why:
        log(f"[kvtui] quality suites not run: {why}")
        return {n: to_task_result(n, {"status": "not run", "why": why}, "lm-eval") for n in names}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kvtui-eval-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_path.write_text(json.dumps(spec_for(endpoint, scenario)))  # no key in it
        log(f"[kvtui] quality suites through lm-eval: {', '.join(names)} "
            f"({scenario.quality.suite_limit or 'all'} items a suite)")
        try:
            r = subprocess.run([sys.executable, "-m", "kvtui.quality.harness_worker", str(spec_path), str(out_path)],
                               env=harness_env(getattr(endpoint, "api_key", None)), capture_output=True, text=True,
                               timeout=timeout_s, stdin=subprocess.DEVNULL, cwd=tmp)
        except subprocess.TimeoutExpired:
            r = None
        doc: dict[str, Any] = {}
        if out_path.is_file():
            try:
                doc = json.loads(out_path.read_text())
            except ValueError:
                doc = {}
    if not doc or doc.get("error"):
        tail = "" if r is None else ((r.stderr or "").strip().splitlines() or [""])[-1][:200]
        why = doc.get("error") or ("the harness timed out" if r is None
                                   else f"the harness exited {r.returncode}: {tail}")
        log(f"[kvtui] quality suites not run: {why}")
        return {n: to_task_result(n, {"status": "not run", "why": why}, "lm-eval") for n in names}
    harness = str(doc.get("harness") or "lm-eval")
    out = {}
    for n in names:
        res = to_task_result(n, (doc.get("suites") or {}).get(n) or {"status": "not run", "why": "no result"}, harness)
        out[n] = res
        log(f"[kvtui] quality suite {n}: " + (f"not run: {res['not_run']}" if res.get("not_run")
                                             else f"{res['correct']}/{res['n']} ({harness})"))
    log(f"[kvtui] quality suites took {time.monotonic() - t0:.0f} s")
    return out
