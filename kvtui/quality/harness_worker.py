"""The lm-evaluation-harness side of `kvtui.quality.harness`, run in a process of its own.

    python -m kvtui.quality.harness_worker SPEC.json OUT.json          # prepare, then evaluate at once
    python -m kvtui.quality.harness_worker --wait SPEC.json OUT.json   # prepare, say `ready`, wait for `go`

Both do the same two things in order: `prepare` (import the harness and torch, build the task index,
load every suite's data: no request is sent) and `evaluate` (the requests, the scoring). With
--wait the worker writes one line `ready` to stdout after preparing and reads one line from stdin:
`go` evaluates and writes OUT; anything else, or EOF, writes OUT with every prepared suite `not run`
and sends nothing. Quality at the knee prepares before the knee's load starts, so that only the
requests run under it (kvtui.explore.knee_quality).

SPEC: {"base_url", "model", "api" ("chat" | "completions"), "concurrency", "timeout_s",
"suites": [{"name", "limit", "num_fewshot"}], "include": [folders of task YAML]}. The server's
API key comes in the environment (OPENAI_API_KEY, as the harness's OpenAI-compatible models read
it), never in a file or an argument.

OUT: {"harness": "lm-eval X.Y.Z", "suites": {name: {"status": "ok", "metric", "filter",
"samples": [...], ...} | {"status": "not run", "why": "..."}}}. One suite that cannot run (its
dataset not cached and no network, an unknown name, a server error) is marked and the others go on.

The harness does all the work a reviewer trusts it for: the prompts, the few-shot turns, the
answer extraction (its filters) and the scoring (its metrics). This module only picks, per sample,
the task's first metric under its first filter, and passes the per-item rows on. A named group
(mmlu_pro) or tag is evaluated as the harness evaluates it, and its rows are its leaf tasks', each
naming its leaf; the harness's own figure for the suite travels with them (`harness_score`).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kvtui import clock

TEXT_CHARS = 120  # how much of each answer the snapshot keeps
WAIT_FLAG = "--wait"
READY, GO = "ready", "go"  # the protocol's two words (one line each)
STOPPED = "stopped before it ran: the harness was closed before it was told to go (no request was sent)"
_PROTO: IO[str] = sys.stdout  # the protocol's stdout; with --wait a copy of fd 1 that nothing else writes to


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


def _leaf_samples(result: dict[str, Any], leaf: str) -> tuple[list[dict[str, Any]], str | None, str | None]:
    """One harness task's per-item rows: its first metric under its first filter (rows, metric, filter)."""
    cfg = (result.get("configs") or {}).get(leaf) or {}
    metrics = [m.get("metric") for m in cfg.get("metric_list") or [] if isinstance(m, dict)]
    metric = metrics[0] if metrics and isinstance(metrics[0], str) else None
    rows = (result.get("samples") or {}).get(leaf) or []
    filters = list(dict.fromkeys(r.get("filter") for r in rows))
    flt = filters[0] if filters else None
    if metric is None and rows:
        metric = next(iter(rows[0].get("metrics") or []), None)
    out = []
    for r in rows:
        if r.get("filter") != flt:
            continue
        v = r.get(metric) if metric else None
        raw = _first_text(r.get("resps"))
        out.append({"doc_id": r.get("doc_id"), "doc_hash": r.get("doc_hash"), "prompt_hash": r.get("prompt_hash"),
                    "target": str(r.get("target"))[:TEXT_CHARS],
                    "answer": _first_text(r.get("filtered_resps"))[:TEXT_CHARS],
                    # the full reply as a digest (answers compared across modes and under load), a prefix as text
                    "text_sha": hashlib.sha256(raw.encode()).hexdigest()[:16], "got": raw[:TEXT_CHARS],
                    "value": float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None})
    return out, metric, flt


def _samples(result: dict[str, Any], name: str, leaves: list[str]) -> dict[str, Any]:
    """The named suite's per-item rows: one task's, or every leaf task's of a group or tag (mmlu_pro: its 14
    subjects), each row naming its leaf where that is not the suite itself (it is part of the item's key)."""
    out: list[dict[str, Any]] = []
    metrics: list[str | None] = []
    filters: list[str | None] = []
    by_task: dict[str, list[int]] = {}
    for leaf in leaves:
        rows, metric, flt = _leaf_samples(result, leaf)
        metrics.append(metric)
        filters.append(flt)
        if leaf != name:
            for r in rows:
                r["task"] = leaf
            by_task[leaf] = [sum(1 for r in rows if (r["value"] or 0) >= 1.0), len(rows)]
        out += rows
    metric = metrics[0] if len(set(metrics)) == 1 else "/".join(dict.fromkeys(str(m) for m in metrics))
    flt = filters[0] if len(set(filters)) == 1 else "/".join(dict.fromkeys(str(f) for f in filters))
    shots = {v for leaf in leaves if (v := (result.get("n-shot") or {}).get(leaf)) is not None}
    nshot = (result.get("n-shot") or {}).get(name)
    if nshot is None and len(shots) == 1:
        nshot = next(iter(shots))
    version = (result.get("versions") or {}).get(name)
    cfg = (result.get("configs") or {}).get(name if name in leaves else (leaves or [name])[0]) or {}
    # The harness's own figure for the suite (a group's: its aggregate), as it reports it: kvtui's accuracy is
    # the share of items at the metric's top value, the same number for a 0/1 metric and a size-weighted group.
    own = (result.get("results") or {}).get(name) or {}
    score = own.get(f"{metric},{flt}") if metric and flt else None
    return {"status": "ok", "metric": metric, "filter": flt, "samples": out, "num_fewshot": nshot,
            "task_version": version, "output_type": cfg.get("output_type"),
            "harness_score": float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
            **({"by_task": by_task} if by_task else {})}


def fetch_line(name: str) -> str:
    """The command that fills the local cache with a suite's dataset, where there is a network."""
    return (f"`python -c \"from lm_eval.tasks import TaskManager; TaskManager().load(['{name}'])\"` (fills "
            "~/.cache/huggingface; copy that folder along, or set HF_DATASETS_OFFLINE=0 HF_HUB_OFFLINE=0 to let "
            "kvtui's harness fetch it)")


def _load(tm: Any, name: str) -> tuple[list[Any], list[str]]:
    """The named suite as the harness builds it (its datasets loaded): the objects to evaluate and the leaf tasks.

    A task is itself; a group (mmlu_pro, mmlu) is evaluated as the group (its aggregate is the harness's own)
    and its items are its leaf tasks'; a tag expands to its tasks."""
    loaded = tm.load([name])
    tasks, groups = loaded.get("tasks") or {}, loaded.get("groups") or {}
    top = groups.get(name) or tasks.get(name)
    return ([top] if top is not None else list(tasks.values())), list(tasks)


def _shots_note(requested: Any, used: Any) -> str | None:
    """lm-eval keeps a task's own `num_fewshot: 0` whatever it is asked for: say so rather than report the shots
    asked for."""
    if requested is None or int(requested) < 0 or used is None or int(used) == int(requested):
        return None
    return (f"suite_fewshot = {int(requested)} was not applied: lm-eval ran {used} shots (a task that sets "
            "num_fewshot: 0 in its YAML keeps it)")


@dataclass
class _Suite:
    """One suite, loaded and ready to be asked: what `evaluate` needs and nothing that touches the server."""

    name: str
    objs: list[Any]
    leaves: list[str]
    here: Path  # the folder its data_files are relative to
    limit: int | None
    nshot: Any


@dataclass
class Prepared:
    """Everything done before the first request: the harness imported, its task index built, the suites loaded.

    `out` already holds the suites that cannot run (an unknown name, data not cached); `suites` the others."""

    out: dict[str, Any]
    model_args: dict[str, Any]
    chat: bool
    tm: Any
    suites: list[_Suite] = field(default_factory=list)


def prepare(spec: dict[str, Any]) -> Prepared:
    """The harness's slow start (imports, the task index, the datasets), sending nothing to the server.

    Done apart from `evaluate` so that quality at the knee can pay for it before the knee's load starts: on a
    host whose CPUs the server saturates, importing torch and loading datasets under load took minutes."""
    import importlib.metadata as md
    import importlib.util

    import lm_eval.api.registry
    import lm_eval.evaluator  # noqa: F401  (simple_evaluate's own imports, now rather than under load)
    from lm_eval.tasks import TaskManager

    if importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F401  (simple_evaluate seeds it; its import probes every CPU's affinity)

    version = md.version("lm_eval")
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
    lm_eval.api.registry.get_model(_model_type(chat))  # its module imported (the registry's entries are lazy)
    # One index of the harness's tasks for every suite (building it takes seconds: simple_evaluate would build
    # its own per call); the model's arguments are its metadata, as simple_evaluate would give them.
    tm = TaskManager(include_path=[str(p) for p in spec.get("include") or []] or None, metadata=dict(model_args))
    prepared = Prepared(out=out, model_args=model_args, chat=chat, tm=tm)
    known = set(tm.all_tasks)
    cwd = os.getcwd()
    for s in spec["suites"]:
        name = s["name"]
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
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                objs, leaves = _load(tm, name)
        except Exception as e:  # the dataset: not cached, offline, unreadable
            why = _missing_data(e)
            if why is not None:
                out["suites"][name] = {"status": "not run", "why": (
                    f"its dataset is not in the local cache and there is no network ({why}); fetch it once "
                    f"where there is: {fetch_line(name)}")}
            else:
                out["suites"][name] = {"status": "not run", "why": f"the harness cannot load it: "
                                       f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                                       + (f" (data_files are read relative to {here})" if isinstance(
                                           e, FileNotFoundError) else "")}
            continue
        finally:
            os.chdir(cwd)
        prepared.suites.append(_Suite(name, objs, leaves, here, int(s.get("limit") or 0) or None,
                                      s.get("num_fewshot")))
    return prepared


def _model_type(chat: bool) -> str:
    return "local-chat-completions" if chat else "local-completions"


def evaluate(p: Prepared) -> dict[str, Any]:
    """Every prepared suite asked and scored by the harness; OUT's document. A suite's `wall_s` is its requests'
    span (its loading was `prepare`'s)."""
    import lm_eval

    out = p.out
    cwd = os.getcwd()
    for s in p.suites:
        t0 = clock.monotonic()
        os.chdir(s.here)  # as at loading: a task may read files relative to its YAML
        try:
            nshot = s.nshot
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    result = lm_eval.simple_evaluate(
                        model=_model_type(p.chat), model_args=p.model_args,
                        tasks=s.objs, num_fewshot=None if nshot is None or int(nshot) < 0 else int(nshot),
                        limit=s.limit, log_samples=True, apply_chat_template=p.chat, fewshot_as_multiturn=p.chat,
                        random_seed=0, numpy_random_seed=1234, torch_random_seed=1234, fewshot_random_seed=1234,
                        bootstrap_iters=0, gen_kwargs=None, task_manager=p.tm)
            except Exception as e:  # a server error after the harness's retries, a task the API cannot serve
                out["suites"][s.name] = {"status": "not run", "why": f"the harness failed: {type(e).__name__}: "
                                         f"{str(e).splitlines()[0][:200] if str(e) else ''}"}
                continue
            if not isinstance(result, dict):
                out["suites"][s.name] = {"status": "not run", "why": "the harness returned no results"}
                continue
            got = _samples(result, s.name, s.leaves)
            got.update(dataset="; ".join(dict.fromkeys(_dataset_of(t) for t in _leaf_tasks(s.objs))), limit=s.limit,
                       wall_s=round(clock.monotonic() - t0, 2))
            if (note := _shots_note(nshot, got.get("num_fewshot"))) is not None:
                got["shots_note"] = note
            out["suites"][s.name] = got
        finally:
            os.chdir(cwd)
    return out


def stopped(p: Prepared, why: str = STOPPED) -> dict[str, Any]:
    """OUT's document where `go` never came: every prepared suite not run (no request was sent)."""
    for s in p.suites:
        p.out["suites"][s.name] = {"status": "not run", "why": why}
    return p.out


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Prepare and evaluate at once (the one-shot CLI)."""
    return evaluate(prepare(spec))


def _leaf_tasks(objs: list[Any]) -> list[Any]:
    leaves: list[Any] = []
    for o in objs:
        leaves += o.get_all_tasks() if hasattr(o, "get_all_tasks") else [o]
    return leaves


def _wait_for_go(p: Prepared) -> dict[str, Any]:
    """Say `ready` on the protocol's stdout, then block on one line of stdin: `go` evaluates, anything else (EOF:
    the parent closed or died) ends it with nothing sent."""
    print(READY, file=_PROTO, flush=True)
    line = sys.stdin.readline().strip()
    return evaluate(p) if line == GO else stopped(p)


def main(argv: list[str]) -> int:
    wait = bool(argv) and argv[0] == WAIT_FLAG
    if wait:
        argv = argv[1:]
        _own_stdout()
    spec = json.loads(Path(argv[0]).read_text())
    try:
        p = prepare(spec)
    except ImportError as e:
        result: dict[str, Any] = {"error": f"lm-eval is not installed here ({e}): pip install 'kvtui[eval]'"}
    else:
        result = _wait_for_go(p) if wait else evaluate(p)
    Path(argv[1]).write_text(json.dumps(result))
    return 0


def _own_stdout() -> None:
    """Keep fd 1 for the protocol's one line and send everything else written to stdout (the harness's prints,
    a library's banner) to stderr, where it cannot be mistaken for `ready`."""
    global _PROTO
    _PROTO = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
