"""The lm-evaluation-harness side of `kvtui.quality.harness`, run in a process of its own.

    python -m kvtui.quality.harness_worker SPEC.json OUT.json

SPEC: {"base_url", "model", "api" ("chat" | "completions"), "concurrency", "timeout_s",
"suites": [{"name", "limit", "num_fewshot"}], "include": [folders of task YAML]}. The server's
API key comes in the environment (OPENAI_API_KEY, as the harness's OpenAI-compatible models read
it), never in a file or an argument.

OUT: {"harness": "lm-eval X.Y.Z", "suites": {name: {"status": "ok", "metric", "filter",
"samples": [...], ...} | {"status": "not run", "why": "..."}}}. One suite that cannot run (its
dataset not cached and no network, an unknown name, a server error) is marked and the others go on.

The harness does all the work a reviewer trusts it for: the prompts, the few-shot turns, the
answer extraction (its filters) and the scoring (its metrics). This module only picks, per sample,
the task's first metric under its first filter, and passes the per-item rows on.

In its own process because lm-eval imports datasets, pandas and friends (seconds, hundreds of MB)
that the run's process has no use for, and because a harness crash must not end the run.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

TEXT_CHARS = 120  # how much of each answer the snapshot keeps


def _first_text(x: Any) -> str:
    """The first string in a (nested) list of responses: the harness's resps are [[text]]."""
    while isinstance(x, (list, tuple)) and x:
        x = x[0]
    return x if isinstance(x, str) else ("" if x is None else str(x))


def _missing_data(e: BaseException) -> str | None:
    """A dataset not in the local cache, offline: what to do about it (one line), else None."""
    text = f"{type(e).__name__}: {e}"
    keys = ("offline", "Couldn't reach", "ConnectionError", "connect", "not found in cache", "LocalEntryNotFound",
            "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "Max retries", "resolve")
    if any(k.lower() in text.lower() for k in keys):
        return text.splitlines()[0][:200]
    return None


def _dataset_of(task: Any) -> str:
    cfg = getattr(task, "config", None)
    path = getattr(cfg, "dataset_path", None) or "?"
    name = getattr(cfg, "dataset_name", None)
    return f"{path}" + (f", {name}" if name else "")


def _samples(result: dict[str, Any], name: str) -> dict[str, Any]:
    cfg = (result.get("configs") or {}).get(name) or {}
    metrics = [m.get("metric") for m in cfg.get("metric_list") or [] if isinstance(m, dict)]
    metric = metrics[0] if metrics and isinstance(metrics[0], str) else None
    rows = (result.get("samples") or {}).get(name) or []
    filters = list(dict.fromkeys(r.get("filter") for r in rows))
    flt = filters[0] if filters else None
    if metric is None and rows:
        metric = next(iter(rows[0].get("metrics") or []), None)
    out = []
    for r in rows:
        if r.get("filter") != flt:
            continue
        v = r.get(metric) if metric else None
        out.append({"doc_id": r.get("doc_id"), "doc_hash": r.get("doc_hash"), "prompt_hash": r.get("prompt_hash"),
                    "target": str(r.get("target"))[:TEXT_CHARS],
                    "answer": _first_text(r.get("filtered_resps"))[:TEXT_CHARS],
                    "raw": _first_text(r.get("resps")),
                    "value": float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None})
    for o in out:  # the full reply as a digest (answers compared across runs), a prefix as text
        raw = o.pop("raw")
        o["text_sha"] = hashlib.sha256(raw.encode()).hexdigest()[:16]
        o["got"] = raw[:TEXT_CHARS]
    nshot = (result.get("n-shot") or {}).get(name)
    version = (result.get("versions") or {}).get(name)
    return {"status": "ok", "metric": metric, "filter": flt, "samples": out, "num_fewshot": nshot,
            "task_version": version, "output_type": cfg.get("output_type")}


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import importlib.metadata as md

    import lm_eval
    from lm_eval.tasks import TaskManager, get_task_dict

    version = md.version("lm_eval")
    tm = TaskManager(include_path=[str(p) for p in spec.get("include") or []] or None)
    known = set(tm.all_tasks)
    out: dict[str, Any] = {"harness": f"lm-eval {version}", "suites": {}}
    chat = spec.get("api", "chat") == "chat"
    base = spec["base_url"].rstrip("/")
    model_args: dict[str, Any] = {
        "model": spec["model"], "base_url": f"{base}/v1/{'chat/completions' if chat else 'completions'}",
        "num_concurrent": int(spec.get("concurrency") or 1), "max_retries": 2,
        "timeout": int(spec.get("timeout_s") or 600),
        "tokenizer_backend": None if chat else "remote", "tokenized_requests": False,
    }
    if spec.get("max_length"):
        model_args["max_length"] = int(spec["max_length"])
    cwd = os.getcwd()
    for s in spec["suites"]:
        name = s["name"]
        t0 = time.monotonic()
        if name not in known:
            near = difflib.get_close_matches(name, sorted(known), n=1)
            out["suites"][name] = {"status": "not run", "why": f"no task {name!r} in {out['harness']} or the suite "
                                   f"paths" + (f" (did you mean {near[0]!r}?)" if near else "")}
            continue
        entry = tm.task_index.get(name)
        yaml_path = getattr(entry, "yaml_path", None) if entry is not None else None
        # A local task's data_files are relative to its YAML: the harness reads them from the cwd.
        here = Path(yaml_path).parent if yaml_path else Path(cwd)
        os.chdir(here)
        log = io.StringIO()
        try:
            try:
                with contextlib.redirect_stdout(log):
                    tasks = get_task_dict([name], tm)
            except Exception as e:  # the dataset: not cached, offline, unreadable
                why = _missing_data(e)
                if why is not None:
                    out["suites"][name] = {"status": "not run", "why": (
                        f"its dataset is not in the local cache and there is no network ({why}); fetch it once where "
                        f"there is: `python -c \"from lm_eval.tasks import TaskManager, get_task_dict; "
                        f"get_task_dict(['{name}'], TaskManager())\"` (fills ~/.cache/huggingface; copy that "
                        "folder along, or set HF_DATASETS_OFFLINE=0 HF_HUB_OFFLINE=0 to let kvtui's harness fetch it)"
                    )}
                else:
                    out["suites"][name] = {"status": "not run", "why": f"the harness cannot load it: "
                                           f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
                continue
            task = next(iter(tasks.values()))
            limit = int(s.get("limit") or 0) or None
            nshot = s.get("num_fewshot")
            try:
                with contextlib.redirect_stdout(log):
                    result = lm_eval.simple_evaluate(
                        model="local-chat-completions" if chat else "local-completions", model_args=model_args,
                        tasks=[task], num_fewshot=None if nshot is None or int(nshot) < 0 else int(nshot),
                        limit=limit, log_samples=True, apply_chat_template=chat, fewshot_as_multiturn=chat,
                        random_seed=0, numpy_random_seed=1234, torch_random_seed=1234, fewshot_random_seed=1234,
                        bootstrap_iters=0, gen_kwargs=None)
            except Exception as e:  # a server error after the harness's retries, a task the API cannot serve
                out["suites"][name] = {"status": "not run", "why": f"the harness failed: {type(e).__name__}: "
                                       f"{str(e).splitlines()[0][:200] if str(e) else ''}"}
                continue
            if not isinstance(result, dict):
                out["suites"][name] = {"status": "not run", "why": "the harness returned no results"}
                continue
            got = _samples(result, name)
            got.update(dataset=_dataset_of(task), limit=limit, wall_s=round(time.monotonic() - t0, 2))
            out["suites"][name] = got
        finally:
            os.chdir(cwd)
    return out


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    try:
        result = run(spec)
    except ImportError as e:
        result = {"error": f"lm-eval is not installed here ({e}): pip install 'kvtui[eval]'"}
    Path(argv[1]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
