"""Does kvtui's vLLM launcher work on this box? Start one server, print what kvtui sees, stop it.

    python scripts/vllm_selfcheck.py MODEL_DIR [--kv-cache-dtype fp8] [--quantization fp8]
        [--max-model-len 2048] [--kv-cache-memory-bytes N | --gpu-memory-utilization 0.9]
        [--load-format dummy] [--tiny DIR] [--json OUT] [-- EXTRA VLLM ARGS…]

`--tiny DIR` builds the tiny test model there first and serves it. Prints the phases as they
come, the startup facts, one real completion, then stops the server and checks that no
process of its group is left. Exit status 0 when all of that worked, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import httpx

from kvtui.errors import EngineError
from kvtui.io.scenario.schema import Mode, Scenario, Server
from kvtui.runtime.engines.vllm.launcher import VllmEngine
from kvtui.runtime.procs import reaper


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(prog="python scripts/vllm_selfcheck.py", description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="")
    ap.add_argument("--tiny", default="", help="build the tiny test model in this directory and serve it")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--kv-cache-dtype", default="auto")
    ap.add_argument("--quantization", default="")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--kv-cache-memory-bytes", type=int, default=0)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    ap.add_argument("--load-format", default="")
    ap.add_argument("--startup-timeout", type=float, default=900.0)
    ap.add_argument("--json", default="", help="write facts, info and timings here")
    ap.add_argument("--quiet", action="store_true", help="do not echo the server log")
    a = ap.parse_args(argv)
    model = a.model
    if a.tiny:
        from kvtui.runtime.engines.vllm.tinymodel import build

        model = str(build(a.tiny))
    if not model:
        ap.error("give MODEL_DIR or --tiny DIR")

    sc = Scenario(
        server=Server(
            engine="vllm",
            model=model,
            served_model_name="selfcheck",
            max_model_len=a.max_model_len,
            kv_cache_memory_bytes=a.kv_cache_memory_bytes,
            gpu_memory_utilization=a.gpu_memory_utilization,
            load_format=a.load_format,
            extra_args=extra,
            startup_timeout_s=a.startup_timeout,
        )
    )
    mode = Mode(name="selfcheck", dtype=a.dtype, kv_cache_dtype=a.kv_cache_dtype, quantization=a.quantization)
    eng = VllmEngine()
    t0 = time.monotonic()
    last_phase = [""]

    def on_log(line: str) -> None:
        ph = eng.phase
        if ph != last_phase[0]:
            last_phase[0] = ph
            print(f"[selfcheck] {time.monotonic() - t0:7.1f} s  phase: {ph}", flush=True)
        if not a.quiet:
            print(f"  | {line}", flush=True)

    out: dict = {"ok": False}
    try:
        ep = eng.start(sc, mode, on_log)
    except EngineError as e:
        print(f"[selfcheck] start failed: {e}", flush=True)
        out.update(error_kind=e.kind, error=str(e))
        _write(a.json, out)
        return 1
    ok = True
    try:
        facts, info = eng.facts(), eng.info()
        print(f"[selfcheck] ready: {ep.base_url} model={ep.model} max_model_len={ep.max_model_len}")
        for k, v in facts.to_dict().items():
            if v not in (None, []):
                print(f"[selfcheck]   {k} = {v}")
        print(f"[selfcheck]   version = {info.version}  dummy_weights = {info.dummy_weights}")
        print(f"[selfcheck]   command = {' '.join(info.command)}")
        r = httpx.post(
            ep.base_url + "/v1/completions",
            headers=ep.headers(),
            json={"model": ep.model, "prompt": list(range(1, 65)), "max_tokens": 16, "ignore_eos": True},
            timeout=300,
            trust_env=False,
        )
        usage = r.json().get("usage", {}) if r.status_code == 200 else {}
        print(f"[selfcheck] completion: HTTP {r.status_code} usage={usage}")
        ok = ok and r.status_code == 200 and usage.get("completion_tokens") == 16
        alive = eng.check_alive()
        print(f"[selfcheck] check_alive: {alive}")
        ok = ok and alive is None
        out.update(facts=facts.to_dict(), info=info.__dict__, settings=eng.server_settings(), completion=usage)
    finally:
        pgid = eng.pgid
        ts = time.monotonic()
        eng.stop()
        left = reaper.group_members(pgid) if pgid else []
        print(f"[selfcheck] stopped in {time.monotonic() - ts:.1f} s; processes left in the group: {left}")
        ok = ok and not left
        out.update(stop_s=round(time.monotonic() - ts, 2), left=left, ok=ok)
        _write(a.json, out)
    print(f"[selfcheck] {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


def _write(path: str, data: dict) -> None:
    if path:
        from kvtui.safeio import atomic_write

        atomic_write(path, json.dumps(data, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
