"""The real vLLM engine: launch `vllm serve` for one precision mode, wait for it, stop it.

    eng = VllmEngine()
    endpoint = eng.start(scenario, mode, on_log=print)   # blocks until /health 200
    eng.facts()        # weights / KV GiB, KV tokens, max concurrency … (log + /metrics)
    eng.check_alive()  # None, or "crashed: …"
    eng.stop()         # SIGINT → SIGTERM → SIGKILL to the process group; idempotent

The server runs in its own process group on server.host (loopback) and a free port, with a
per-run random API key that only the Endpoint carries (the log and the recorded command
show it redacted). Its stdout and stderr stream, line by line, through `on_log` (called
from a reader thread) and into the startup log parser, which reports the phase reached.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shlex
import subprocess
import threading
from collections import deque
from pathlib import Path
from typing import Any, Callable

import httpx

from kvtui import clock
from kvtui.errors import EngineError, RunAborted
from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.runtime.engines.base import Endpoint, EngineInfo, LogSink, StartupFacts
from kvtui.runtime.engines.registry import register
from kvtui.runtime.engines.vllm import compile_cache, failures
from kvtui.runtime.engines.vllm.cache_facts import engines_in_metrics
from kvtui.runtime.engines.vllm.command import (
    KEY_FROM_STDIN,
    api_key_in_compile_hash,
    build_command,
    dummy_weights,
    resolve_launcher,
    shown,
    url_host,
    vllm_envs_source,
)
from kvtui.runtime.engines.vllm.logparse import READY, StartupLogParser, clean_line, facts_from_metrics_text
from kvtui.runtime.procs import reaper
from kvtui.runtime.procs.servers import free_port
from kvtui.safeio import fetch
from kvtui.secrets import Redactor, is_secret_env, redact_args

TAIL_LINES = 400  # kept in memory
ERROR_TAIL_LINES = 80  # carried by an EngineError

# uvicorn access lines ("INFO:     127.0.0.1:41336 - "GET /health HTTP/1.1" 200 OK", with a
# "(APIServer pid=N) " prefix in 0.2x): counted, not forwarded to the log sink or the tail.
_ACCESS_LOG = re.compile(r'^(?:\(APIServer pid=\d+\) )?INFO:\s+[\w.:\[\]]+ - "[A-Z]+ \S+ HTTP/[\d.]+" \d{3}')


@register("vllm")
class VllmEngine:
    """Engine protocol (kvtui.runtime.engines.base) for a vLLM server that kvtui launches itself."""

    name = "vllm"
    simulated = False
    time_scale = 1.0  # a real server runs in wall time

    def __init__(
        self,
        python: str | None = None,
        poll_s: float = 0.5,
        tail_lines: int = TAIL_LINES,
        nvml_release_timeout_s: float | None = None,
    ):
        self.python = python
        self._key_hashed: bool | None = None  # vLLM hashes VLLM_API_KEY into its compile cache (_key_in_cache_hash)
        self.poll_s = poll_s
        self.nvml_release_timeout_s = nvml_release_timeout_s
        self._lock = threading.RLock()
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._proc: subprocess.Popen[bytes] | None = None
        self._pgid: int | None = None
        self._pids: set[int] = set()
        self._reader: threading.Thread | None = None
        self._parser = StartupLogParser()
        self._redact = Redactor()
        self._endpoint: Endpoint | None = None
        self._command: list[str] = []
        self._version: str | None = None
        self._dummy = False
        self._cancel = threading.Event()
        self._stopped = True
        self._stop_timeout_s = 30.0
        self.failure: failures.Failure | None = None  # the last classified failure
        self.form: str | None = None

    # --- Engine protocol -----------------------------------------------------------------
    def start(self, scenario: Scenario, mode: Mode, on_log: LogSink) -> Endpoint:
        self.stop()
        self.failure = None
        s = scenario.server
        self._stop_timeout_s = float(s.stop_timeout_s or 30.0)
        form, prefix = self._launcher()
        self.form = form
        self._refuse_what_the_cpu_build_cannot_run(mode, on_log)
        scenario, mode = self._resolve_real_model(scenario, mode, on_log)
        attempts = 1 if s.port else 3  # a free port picked here may be taken before vLLM binds it
        for attempt in range(attempts):
            try:
                return self._start_once(scenario, mode, on_log, (form, prefix))
            except EngineError as e:
                if e.kind == failures.PORT_TAKEN and attempt + 1 < attempts:
                    on_log(f"[kvtui] port taken, retrying on another free port ({e})")
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _refuse_what_the_cpu_build_cannot_run(self, mode: Mode, on_log: LogSink) -> None:
        """A mode the installed vLLM CPU build is known to refuse at its start fails now, named as
        vLLM's own refusal would be (`unsupported`), instead of after a minute of loading."""
        from kvtui.runtime.engines.vllm.command import ENV_LAUNCHER
        from kvtui.runtime.engines.vllm.cpufeatures import launch_refusal
        from kvtui.runtime.engines.vllm.detect import vllm_install

        if os.environ.get(ENV_LAUNCHER, "").strip():
            return  # a launcher command of the user's own: which vLLM it starts is not known here
        install = vllm_install(self.python)
        why = launch_refusal(mode.kv_cache_dtype, install.distribution, install.version)
        if why:
            on_log(f"[kvtui] {why}")
            self.failure = failures.Failure(failures.UNSUPPORTED, why)
            raise self.failure.error()

    _cache_had_graphs = True  # until a launch looked: a compile is then a "miss", never "cold"

    def facts(self) -> StartupFacts:
        with self._lock:
            f = self._parser.facts
            f.compile_cache = compile_cache.state(f.compile_cache, self._cache_had_graphs)
            return f

    def _resolve_real_model(self, scenario: Scenario, mode: Mode, on_log: LogSink) -> tuple[Scenario, Mode]:
        """`kvtui:NAME` (a real model of kvtui's catalogue) → its built directory, built on first use.

        The served name defaults to the catalogue name, so requests say "smollm2-135m-instruct"
        rather than a cache path; the weights label records where the weights came from."""
        from kvtui.models.build import ModelBuildError, ensure_model, provenance
        from kvtui.models.catalog import is_real_ref, lookup

        ref = mode.model or scenario.server.model
        self._weights = None
        if not is_real_ref(ref):
            prov = provenance(ref) if ref and Path(ref).is_dir() else None
            self._weights = prov.get("weights") if prov else None
            return scenario, mode
        from kvtui.models.build import GGUF_SUFFIX, ensure_gguf

        try:
            path = ensure_model(ref, on_log=on_log)
            gguf = ensure_gguf(ref, on_log=on_log) if ref.endswith(GGUF_SUFFIX) else None
        except ModelBuildError as e:
            raise EngineError(failures.BAD_MODEL, str(e)) from None
        entry = lookup(ref)
        self._weights = (provenance(path) or {}).get("weights")
        server = scenario.server
        if not server.served_model_name and entry is not None:
            server = dataclasses.replace(server, served_model_name=entry.name)
        target = str(path)
        if gguf is not None and entry is not None:
            # The GGUF file served as it is (its own int4 quantization): vLLM reads the weights from
            # it, the tokenizer and config from the converted directory.
            target = str(gguf)
            mode = dataclasses.replace(mode, extra_args=["--tokenizer", str(path), "--hf-config-path", str(path),
                                                         *mode.extra_args])
            self._weights = f"real: {entry.title}, GGUF {entry.gguf_quant} served as it is"
        if mode.model:
            mode = dataclasses.replace(mode, model=target)
        else:
            server = dataclasses.replace(server, model=target)
        return dataclasses.replace(scenario, server=server), mode

    def info(self) -> EngineInfo:
        with self._lock:
            return EngineInfo(
                engine="vllm",
                simulated=False,
                version=self._version or self._parser.version,
                command=list(self._command),
                dummy_weights=self._dummy,
                weights="dummy" if self._dummy else getattr(self, "_weights", None),
            )

    def check_alive(self) -> str | None:
        proc = self._proc
        if proc is None:
            return "vLLM is not running"
        if self._stopped and self.failure is None:
            return "vLLM is not running (stopped)"
        rc = proc.poll()
        if rc is not None:
            self._join_reader(5.0)
            self.failure = failures.classify_exit(self.log_tail(), rc, during="run")
            return f"{self.failure.kind}: {self.failure.message}"
        ep = self._endpoint
        if ep is None:
            return None
        r = None
        from kvtui.safeio import http_client

        for timeout in (2.0, 10.0):
            try:
                with http_client(timeout=timeout) as c:  # the whole answer within `timeout` (a trickle too)
                    r = fetch(c, "GET", ep.base_url + "/health", total_s=timeout)
                break
            except httpx.TimeoutException:
                # Busy, or the API server just died and a child still holds its listening socket.
                try:
                    rc = proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    continue  # alive: ask again, more patiently
                self._join_reader(5.0)
                self.failure = failures.classify_exit(self.log_tail(), rc, during="run")
                return f"{self.failure.kind}: {self.failure.message}"
            except httpx.HTTPError as e:
                return self._unreachable(proc, e)
        if r is None:
            return None  # busy, not dead: the process is alive
        if r.status_code == 200:
            return None
        self.failure = failures.classify_unhealthy(r.status_code, proc.poll(), self.log_tail())
        return f"{self.failure.kind}: {self.failure.message}"

    def _unreachable(self, proc: subprocess.Popen[bytes], e: Exception) -> str:
        try:  # a refused or reset connection: is the process on its way out?
            rc = proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            rc = None
        if rc is not None:
            self._join_reader(5.0)
            self.failure = failures.classify_exit(self.log_tail(), rc, during="run")
        else:
            self.failure = failures.Failure(failures.CRASHED, f"/health unreachable: {type(e).__name__}: {e}")
        return f"{self.failure.kind}: {self.failure.message}"

    def stop(self) -> None:
        """SIGINT, SIGTERM, SIGKILL to the whole group (stop_timeout_s split 50/30/20), reap, wait for GPU memory."""
        self._cancel.set()  # a start() in progress gives up (RunAborted)
        with self._lock:
            proc, pgid = self._proc, self._pgid
            if proc is None or pgid is None or self._stopped:  # (the group is set with the process)
                return
            self._stopped = True
        try:
            self._collect_pids()
            reaper.terminate(proc, pgid, self._stop_timeout_s, graceful=proc.poll() is None)
            self._join_reader(5.0)
            self._wait_device_release()
        except Exception:  # never raises
            pass
        finally:
            with self._lock:
                self._endpoint = None

    # --- extras ---------------------------------------------------------------------------
    @property
    def phase(self) -> str:
        with self._lock:
            return self._parser.phase

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def pgid(self) -> int | None:
        return self._pgid

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    @property
    def endpoint(self) -> Endpoint | None:
        return self._endpoint

    @property
    def parser(self) -> StartupLogParser:
        return self._parser

    def log_tail(self, n: int | None = None) -> str:
        with self._lock:
            lines = list(self._tail)
        return "\n".join(lines[-n:] if n else lines)

    def server_settings(self) -> dict:
        """Effective settings the log showed (dtype, quantization, CUDA-graph sizes …)."""
        with self._lock:
            d = dict(self._parser.extra)
            d["max_model_len"] = self._parser.max_model_len
            d["version"] = self._version or self._parser.version
            return d

    # --- what a subclass changes (the simulator engine) -------------------------------------
    def _launcher(self) -> tuple[str, list[str]]:
        return resolve_launcher(self.python)

    def _build_command(self, scenario: Scenario, mode: Mode, port: int, api_key: str,
                       prefix: tuple[str, list[str]]) -> tuple[list[str], dict[str, str]]:
        return build_command(scenario, mode, port, api_key, prefix, key_from_stdin=self._key_in_cache_hash())

    def _key_in_cache_hash(self) -> bool:
        """Whether this vLLM hashes VLLM_API_KEY into its compile-cache key (then the key goes
        through stdin, so that a start of the same configuration hits the cache). Read once."""
        if self._key_hashed is None:
            self._key_hashed = api_key_in_compile_hash(vllm_envs_source(self.python))
        return self._key_hashed

    def pids(self) -> set[int]:
        """The server's process group (for NVML's per-process memory)."""
        with self._lock:
            return set(self._pids) if self._proc is not None and not self._stopped else set()

    def gpu_memory(self) -> dict[str, Any] | None:
        return None  # a real GPU: NVML reads its memory

    # --- internals --------------------------------------------------------------------------
    def _start_once(self, scenario: Scenario, mode: Mode, on_log: LogSink, prefix: tuple[str, list[str]]) -> Endpoint:
        s = scenario.server
        host = s.host or "127.0.0.1"
        port = int(s.port) if s.port else free_port(host)
        api_key = secrets.token_urlsafe(24)
        argv, extra_env = self._build_command(scenario, mode, port, api_key, prefix)
        env = dict(os.environ)
        env.update(extra_env)
        env.update(reaper.server_env())  # the run's tag: the watchdog and a later run know its processes by it
        env.update(compile_cache.cache_env(env))  # torch.compile's cache outlives the run (a per-user dir)
        cache_had_graphs = compile_cache.has_graphs(compile_cache.root_of(env))
        redactor = Redactor([api_key])
        for k, v in list(s.env.items()) + list(mode.env.items()):
            if is_secret_env(k, s.secret_env):
                redactor.add(v)
        with self._lock:
            self._redact = redactor
            self._tail.clear()
            self._parser = StartupLogParser()
            self._cache_had_graphs = cache_had_graphs
            self._command = redact_args(shown(argv))
            self._version = None
            self._dummy = dummy_weights(scenario, mode)
            self._pids = set()
            self._cancel.clear()
        try:
            on_log(f"[kvtui] launching: {shlex.join(self._command)}")
        except Exception:  # the sink's problem must not stop the launch
            pass
        base_url = f"http://{url_host(host)}:{port}"
        t0 = clock.monotonic()
        try:
            key_stdin = KEY_FROM_STDIN in argv  # the key through stdin, not the environment (command.py)
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if key_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            raise EngineError("unsupported", f"cannot launch {argv[0]}: {e}") from None
        if key_stdin and proc.stdin is not None:
            try:  # one line in the pipe's buffer, never on disk; a process that died early is seen below
                proc.stdin.write((api_key + "\n").encode("utf-8"))
                proc.stdin.close()
            except OSError:
                pass
        with self._lock:
            self._proc = proc
            self._pgid = proc.pid  # start_new_session: the leader's pid is the group id
            self._pids = {proc.pid}
            self._stopped = False
        reaper.register(proc.pid, shlex.join(self._command))
        self._reader = threading.Thread(
            target=self._read_output, args=(proc, on_log), name=f"vllm-log-{proc.pid}", daemon=True
        )
        self._reader.start()

        deadline = t0 + float(s.startup_timeout_s or 900.0)
        last_pids = 0.0
        from kvtui.safeio import http_client, total_deadline

        with http_client(timeout=httpx.Timeout(5.0, connect=2.0)) as client:
            while True:
                if self._cancel.is_set():
                    self.stop()
                    raise RunAborted("vLLM start cancelled")
                rc = proc.poll()
                if rc is not None:
                    self._join_reader(10.0)
                    if self._cancel.is_set():
                        self.stop()
                        raise RunAborted("vLLM start cancelled")
                    self.failure = failures.classify_exit(self.log_tail(), rc, during="startup")
                    tail = self.log_tail(ERROR_TAIL_LINES)
                    self.stop()
                    raise self.failure.error(tail)
                now = clock.monotonic()
                if now >= deadline:
                    with self._lock:
                        phase = self._parser.phase
                    self.failure = failures.classify_timeout(float(s.startup_timeout_s), phase)
                    tail = self.log_tail(ERROR_TAIL_LINES)
                    self.stop()
                    raise self.failure.error(tail)
                if now - last_pids > 2.0:
                    self._collect_pids()
                    last_pids = now
                # Each probe whole within 10 s, never past startup_timeout_s, cut by a cancel: a
                # trickling /health or /v1/models (a squatter) cannot hold the start.
                with total_deadline(max(0.1, min(10.0, deadline - clock.monotonic())), self._cancel.is_set):
                    healthy = self._healthy(client, base_url, api_key)
                if healthy:
                    break
                clock.sleep(self.poll_s)

        startup_s = clock.monotonic() - t0
        endpoint = Endpoint(
            base_url=base_url,
            model=s.served_model_name or (mode.model or s.model),
            api_key=api_key,
            metrics_url=base_url + "/metrics",
        )
        self._after_ready(endpoint, startup_s)
        with self._lock:
            self._endpoint = endpoint
        self._collect_pids()
        f = self.facts()
        on_log(
            f"[kvtui] vLLM {self._version or '?'} ready in {startup_s:.1f} s on {base_url}"
            + (f": {f.kv_cache_tokens:,} KV tokens" if f.kv_cache_tokens else "")
            + (f" over {f.engines} data-parallel engines" if (f.engines or 1) > 1 else "")
        )
        return endpoint

    def _healthy(self, client: httpx.Client, base_url: str, api_key: str) -> bool:
        """/health 200 from *our* server: /v1/models must refuse no key and accept ours.

        (Another server squatting the port would answer /health too.)
        """
        try:
            r = fetch(client, "GET", base_url + "/health")
            if r.status_code != 200:
                return False
            anon = fetch(client, "GET", base_url + "/v1/models")
            if anon.status_code != 401:
                return False
            mine = fetch(client, "GET", base_url + "/v1/models", headers={"Authorization": f"Bearer {api_key}"})
            return mine.status_code == 200
        except httpx.HTTPError:
            return False

    def _after_ready(self, ep: Endpoint, startup_s: float) -> None:
        with self._lock:
            self._parser.mark_phase(READY)
            self._parser.facts.startup_s = round(startup_s, 3)
        from kvtui.safeio import http_client

        with http_client(timeout=10.0, headers=ep.headers()) as c:
            try:
                v = fetch(c, "GET", ep.base_url + "/version", total_s=10.0)  # bounded, untrusted (kvtui.safeio)
                if v.status_code == 200:
                    self._version = str(v.field("version") or "")[:80] or None
            except (httpx.HTTPError, ValueError):
                pass
            try:
                m = fetch(c, "GET", ep.base_url + "/v1/models", total_s=10.0)
                if m.status_code == 200:
                    from kvtui.runtime.engines.base import served_models

                    try:
                        data = served_models(m.json(), ep.base_url)
                    except ValueError:
                        data = []  # not vLLM's shape: the startup log's max_model_len holds
                    if data:
                        ep.model = data[0].get("id") or ep.model
                        mml = data[0].get("max_model_len")
                        if isinstance(mml, int):
                            ep.max_model_len = mml
            except (httpx.HTTPError, ValueError):
                pass
            try:
                mt = c.get(ep.base_url + "/metrics")
                if mt.status_code == 200:
                    mf = facts_from_metrics_text(mt.text)
                    engines = engines_in_metrics(mt.text)
                    with self._lock:
                        if mf is not None:
                            self._parser.facts.merge(mf)
                        # Each data-parallel engine logs and labels its own KV cache: the server's
                        # capacity is their sum (the comparison's KV tokens, the KV-bound guess).
                        self._parser.facts.summed_over_engines(engines)
            except httpx.HTTPError:
                pass
        if ep.max_model_len is None:
            ep.max_model_len = self._parser.max_model_len

    def _read_output(self, proc: subprocess.Popen[bytes], on_log: LogSink) -> None:
        """Split the merged output on \\n and \\r (tqdm redraws), parse and forward each line."""
        fd = proc.stdout.fileno() if proc.stdout else None
        if fd is None:
            return
        buf = b""
        pending_cr: str | None = None  # the last \r-terminated segment (a progress bar state)

        def emit(raw: bytes, final: bool) -> None:
            nonlocal pending_cr
            text = raw.decode("utf-8", "replace")
            line = self._redact(clean_line(text))
            if not line.strip():
                return
            with self._lock:
                self._parser.feed(line)
            if not final:  # a progress redraw: parse it now, show only the last state
                pending_cr = line
                return
            pending_cr = None
            if _ACCESS_LOG.match(line):
                return
            with self._lock:
                self._tail.append(line)
            try:
                on_log(line)
            except Exception:  # a UI problem must not stop the pipe from draining
                pass

        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                buf += chunk
                while True:
                    i_n, i_r = buf.find(b"\n"), buf.find(b"\r")
                    if i_n < 0 and i_r < 0:
                        break
                    if i_r >= 0 and (i_n < 0 or i_r < i_n):
                        if i_r + 1 >= len(buf):
                            break  # maybe \r\n split across reads: wait for more
                        if buf[i_r + 1 : i_r + 2] == b"\n":
                            emit(buf[:i_r], True)
                            buf = buf[i_r + 2 :]
                        else:
                            emit(buf[:i_r], False)
                            buf = buf[i_r + 1 :]
                    else:
                        emit(buf[:i_n], True)
                        buf = buf[i_n + 1 :]
                if len(buf) > 1 << 20:  # a 1 MiB line: flush it
                    emit(buf, True)
                    buf = b""
        except OSError:
            pass
        finally:
            if buf.strip():
                emit(buf.rstrip(b"\r"), True)
            elif pending_cr:
                with self._lock:
                    self._tail.append(pending_cr)
            try:
                if proc.stdout:
                    proc.stdout.close()
            except OSError:
                pass

    def _join_reader(self, timeout_s: float) -> None:
        r = self._reader
        if r is not None and r.is_alive() and r is not threading.current_thread():
            r.join(timeout_s)

    def _collect_pids(self) -> None:
        pgid = self._pgid
        if pgid is None:
            return
        try:
            pids = reaper.group_members(pgid)
        except OSError:
            return
        with self._lock:
            self._pids.update(pids)

    def _wait_device_release(self) -> None:
        try:
            from kvtui.runtime.telemetry.nvml import wait_for_release  # written by the telemetry engineer
        except ImportError:
            return
        pids = set(self._pids)
        if not pids:
            return
        timeout = self.nvml_release_timeout_s
        if timeout is None:
            timeout = max(5.0, self._stop_timeout_s)
        try:
            wait_for_release(pids, timeout)
        except Exception:
            pass


def install_signal_handlers() -> Callable[[], None]:
    """Kill every launched vLLM group on SIGTERM/SIGHUP (call from the main thread)."""
    return reaper.install_signal_handlers()
