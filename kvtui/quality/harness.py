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

The worker prepares (imports, task index, datasets) before it sends anything and waits to be told to
go (`HarnessSession`): quality at the knee prepares it before the knee's load starts, so that only
its requests run under the load. `run_suites` prepares and goes at once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from kvtui import clock
from kvtui.quality.harness_worker import GO, READY, WAIT_FLAG
from kvtui.quality.stats import wilson
from kvtui.runtime.procs import reaper

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


def _not_run(names: list[str], why: str) -> dict[str, Any]:
    return {n: to_task_result(n, {"status": "not run", "why": why}, "lm-eval") for n in names}


class HarnessSession:
    """One harness worker (kvtui.quality.harness_worker --wait): prepared first, told to go later.

    `start` spawns it; `wait_ready` waits until it has imported the harness and loaded every suite (no request
    sent); `go` lets it evaluate; `result` is `run_suites`'s {name: task result}; `close` (also on leaving a
    `with`) kills whatever is left of it. Nothing here raises for the harness's failures: a worker that dies,
    hangs or was never told to go gives every suite "not run" with one line why."""

    def __init__(self, endpoint: Any, scenario: Any, on_log: Callable[[str], None] | None = None):
        self.endpoint, self.scenario = endpoint, scenario
        self.names = list(scenario.quality.suites)
        self.log = on_log or (lambda _m: None)
        self.why: str | None = missing()  # why the suites are not run (set once, the first reason)
        self.ready_s: float | None = None  # how long preparing took, once ready
        self.proc: subprocess.Popen[str] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._ready = threading.Event()
        self._gone = False  # told to go
        self._t0 = 0.0

    def __enter__(self) -> HarnessSession:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        """Spawn the worker (once); it prepares in the background. With lm-eval missing, nothing is spawned."""
        if self.proc is not None or self.why is not None:
            return
        self._t0 = clock.monotonic()
        self._tmp = tempfile.TemporaryDirectory(prefix="kvtui-eval-")
        tmp = Path(self._tmp.name)
        (tmp / "spec.json").write_text(json.dumps(spec_for(self.endpoint, self.scenario)))  # no key in it
        self.log(f"[kvtui] quality suites through lm-eval: {', '.join(self.names)} "
                 f"({self.scenario.quality.suite_limit or 'all'} items a suite)")
        # stderr to a file, not a pipe: nobody reads it until the end, and a full pipe would block the worker.
        with open(tmp / "stderr.log", "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kvtui.quality.harness_worker", WAIT_FLAG, str(tmp / "spec.json"),
                 str(tmp / "out.json")],
                env=harness_env(getattr(self.endpoint, "api_key", None)) | reaper.server_env(),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, cwd=tmp,
                start_new_session=True)  # its own group: close() ends anything it started
        # Registered as the servers are: a run that exits (or is killed -9: the watchdog) takes it along.
        reaper.register(self.proc.pid, "lm-eval harness worker")
        threading.Thread(target=self._read, args=(self.proc,), name="kvtui-harness-ready", daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:  # one line, `ready`; EOF when the worker ends
                if line.strip() == READY:
                    self._ready.set()
                    return
        except (OSError, ValueError):  # close() closed the pipe under it: the worker is gone, not ready
            return

    def wait_ready(self, timeout_s: float | None = None, should_stop: Callable[[], Any] | None = None) -> float | None:
        """Seconds the worker took to prepare, once it is ready; None where it will not be (`why` says why:
        it exited, it was not ready in `timeout_s`, the run was stopping), the worker then ended."""
        self.start()
        if self.why is not None or self.proc is None:
            return None
        deadline = None if timeout_s is None else clock.monotonic() + timeout_s
        while not self._ready.wait(0.2):
            if self.proc.poll() is not None and not self._ready.is_set():
                self._fail(self._exit_why())
                return None
            if should_stop is not None and should_stop():
                self._fail("the run was stopping")
                return None
            if deadline is not None and clock.monotonic() > deadline:
                self._fail(f"the harness was not ready after {timeout_s:.0f} s")
                return None
        if self.ready_s is None:
            self.ready_s = round(clock.monotonic() - self._t0, 2)
        return self.ready_s

    def go(self) -> None:
        """Let a ready worker send its requests (once); a worker not ready is left as it is (its suites not run)."""
        if self._gone or self.proc is None or not self._ready.is_set() or self.why is not None:
            return
        self._gone = True
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(GO + "\n")
            self.proc.stdin.close()
        except (OSError, ValueError):  # it died in between: result() says how
            pass

    def result(self, timeout_s: float | None = None, should_stop: Callable[[], Any] | None = None) -> dict[str, Any]:
        """{name: task result} for every suite, as `run_suites` gives it; the worker ended either way."""
        if self.why is None and not self._gone:
            self._fail("the harness was never told to go")
        if self.why is None and self.proc is not None:
            deadline = None if timeout_s is None else clock.monotonic() + timeout_s
            while self.proc.poll() is None:
                if should_stop is not None and should_stop():
                    self._fail("the run was stopping")
                    break
                if deadline is not None and clock.monotonic() > deadline:
                    self._fail("the harness timed out")
                    break
                try:
                    self.proc.wait(0.5)
                except subprocess.TimeoutExpired:
                    pass
        doc = self._out() if self.why is None else {}
        if self.why is None and (not doc or doc.get("error")):
            self.why = str(doc.get("error") or self._exit_why())
        self.close()
        if self.why is not None:
            self.log(f"[kvtui] quality suites not run: {self.why}")
            return _not_run(self.names, self.why)
        harness = str(doc.get("harness") or "lm-eval")
        out = {}
        for n in self.names:
            res = to_task_result(n, (doc.get("suites") or {}).get(n) or {"status": "not run", "why": "no result"},
                                 harness)
            out[n] = res
            self.log(f"[kvtui] quality suite {n}: " + (f"not run: {res['not_run']}" if res.get("not_run")
                                                      else f"{res['correct']}/{res['n']} ({harness})"))
        self.log(f"[kvtui] quality suites took {clock.monotonic() - self._t0:.0f} s"
                 + (f" ({self.ready_s:.0f} s of it preparing)" if self.ready_s is not None else ""))
        return out

    def close(self) -> None:
        """End the worker (and anything it started) if it still runs, and remove its folder. Idempotent."""
        p = self.proc
        if p is not None and p.poll() is None:
            reaper.signal_group(p.pid, signal.SIGKILL)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if p is not None:
            reaper.unregister(p.pid)
            for f in (p.stdin, p.stdout):
                try:
                    if f is not None:
                        f.close()
                except (OSError, ValueError):
                    pass
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # -- helpers -------------------------------------------------------------------------------
    def _fail(self, why: str) -> None:
        if self.why is None:
            self.why = why
        self.close()

    def _out(self) -> dict[str, Any]:
        path = Path(self._tmp.name) / "out.json" if self._tmp is not None else None
        if path is None or not path.is_file():
            return {}
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}

    def _exit_why(self) -> str:
        """The worker ended without a result: its error document's line, else its exit and last stderr line."""
        doc = self._out()
        if doc.get("error"):
            return str(doc["error"])
        code = self.proc.poll() if self.proc is not None else None
        tail = ""
        if self._tmp is not None:
            try:
                lines = (Path(self._tmp.name) / "stderr.log").read_text(errors="replace").strip().splitlines()
                tail = lines[-1][:200] if lines else ""
            except OSError:
                pass
        return f"the harness exited {code}: {tail}"


def run_suites(endpoint: Any, scenario: Any, on_log: Callable[[str], None] | None = None,
               timeout_s: float | None = None, should_stop: Callable[[], Any] | None = None) -> dict[str, Any]:
    """{name: task result} for every suite of the scenario; a suite that cannot run is marked, never raised.

    Prepared and told to go at once (kvtui.quality.harness_worker), in one process of its own."""
    deadline = None if timeout_s is None else clock.monotonic() + timeout_s
    with HarnessSession(endpoint, scenario, on_log) as s:
        if s.wait_ready(timeout_s, should_stop) is not None:
            s.go()
        left = None if deadline is None else max(0.0, deadline - clock.monotonic())
        return s.result(left, should_stop)
