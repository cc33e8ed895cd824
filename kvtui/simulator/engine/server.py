"""`kvtui sim serve`: vLLM's HTTP surface in front of a simulated engine, in real time.

The engine model (`SchedulerSim`, or `KneeModel` for tests) decides what each engine step
does and how long it takes; this module runs those steps on the wall clock and streams
the tokens. With `time_scale` s > 1 (declared slow motion) every modelled second takes
s wall seconds, so a box that cannot push an H200's token rate still shows its dynamics;
the explorer divides measured times by s and multiplies rates by s, and says so.

Endpoints: /v1/completions, /v1/chat/completions (streaming with include_usage and not),
/v1/models, /tokenize, /detokenize, /version, /health, /metrics (vLLM names),
/kvtui/sim (the simulated GPU's memory split and the time scale).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from dataclasses import asdict
from typing import Any, AsyncIterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from kvtui import clock
from kvtui.simulator.engine.scheduler import MemorySplit, SimRequest
from kvtui.simulator.engine.startup_log import SIM_VERSION, print_startup  # noqa: F401 - also this module's names
from kvtui.simulator.engine.tokenizer import Tokenizer, block_hashes  # noqa: F401

_TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                 40.0, 80.0, 160.0, 640.0, 2560.0]
_ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0]
_E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
                960.0, 1920.0, 7680.0]


class _Stream:
    __slots__ = ("queue", "prompt_tokens", "emitted", "t_arrival", "t_first", "t_last", "done")

    def __init__(self, prompt_tokens: int, now: float):
        self.queue: asyncio.Queue = asyncio.Queue()
        self.prompt_tokens = prompt_tokens
        self.emitted = 0
        self.t_arrival = now
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.done = False


class SimServer:
    """Drives the engine model on the wall clock and serves the OpenAI-compatible API."""

    def __init__(self, model: Any, model_name: str, max_model_len: int, api_key: str | None, time_scale: float = 1.0,
                 gpu_name: str = "H200", vocab_size: int = 128256, mode_name: str = "", seed: int = 0):
        self.model = model
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.api_key = api_key
        self.time_scale = max(1e-3, time_scale)
        self.gpu_name = gpu_name
        self.mode_name = mode_name
        self.tok = Tokenizer(vocab_size)
        self.streams: dict[str, _Stream] = {}
        self.wake = asyncio.Event()
        self.lag_s = 0.0  # wall seconds the loop fell behind the modelled schedule
        self.steps = 0
        self.seed = seed
        self._counter = 0
        self.dead: str | None = None
        self._task: asyncio.Task | None = None
        self._build_metrics()

    # -- metrics -------------------------------------------------------------------------
    def _build_metrics(self) -> None:
        r = self.registry = CollectorRegistry()
        lbl = ["model_name", "engine"]
        self.m_running = Gauge("vllm:num_requests_running", "Running requests", lbl, registry=r)
        self.m_waiting = Gauge("vllm:num_requests_waiting", "Waiting requests", lbl, registry=r)
        self.m_kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage (1 = full)", lbl, registry=r)
        self.m_preempt = Counter("vllm:num_preemptions", "Preemptions", lbl, registry=r)
        self.m_prompt = Counter("vllm:prompt_tokens", "Prefill tokens", lbl, registry=r)
        self.m_gen = Counter("vllm:generation_tokens", "Generated tokens", lbl, registry=r)
        self.m_pq = Counter("vllm:prefix_cache_queries", "Prefix-cache queried tokens", lbl, registry=r)
        self.m_ph = Counter("vllm:prefix_cache_hits", "Prefix-cache hit tokens", lbl, registry=r)
        self.m_success = Counter("vllm:request_success", "Finished requests", lbl + ["finished_reason"], registry=r)
        self.h_ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT", lbl, buckets=_TTFT_BUCKETS, registry=r)
        self.h_itl = Histogram("vllm:inter_token_latency_seconds", "ITL", lbl, buckets=_ITL_BUCKETS, registry=r)
        self.h_tpot = Histogram("vllm:request_time_per_output_token_seconds", "TPOT", lbl, buckets=_ITL_BUCKETS,
                                registry=r)
        self.h_e2e = Histogram("vllm:e2e_request_latency_seconds", "E2E", lbl, buckets=_E2E_BUCKETS, registry=r)
        self.g_cache = Gauge("vllm:cache_config_info", "Cache config", [
            "block_size", "cache_dtype", "gpu_memory_utilization", "num_gpu_blocks", "kv_cache_size_tokens",
            "kv_cache_memory_bytes", "kv_cache_max_concurrency", "enable_prefix_caching"], registry=r)
        self.g_scale = Gauge("kvtui_sim_time_scale", "Wall seconds per modelled second", registry=r)
        self.c_lag = Counter("kvtui_sim_lag_seconds", "Wall seconds the simulator fell behind its model", registry=r)
        self.g_mem_used = Gauge("kvtui_sim_gpu_memory_used_bytes", "Simulated GPU memory in use", registry=r)
        self.g_mem_total = Gauge("kvtui_sim_gpu_memory_total_bytes", "Simulated GPU memory", registry=r)
        self.g_scale.set(self.time_scale)
        f = self.model.facts()
        mem = self.model.memory()
        self.g_cache.labels(
            block_size=str(f.block_size or 16),
            cache_dtype=str(f.kv_cache_dtype or "auto"),
            gpu_memory_utilization=str(f.gpu_memory_utilization or ""),
            num_gpu_blocks=str(f.num_gpu_blocks or 0),
            kv_cache_size_tokens=str(f.kv_cache_tokens or 0),
            kv_cache_memory_bytes=str(int((f.kv_cache_gib or 0) * (1 << 30))),
            kv_cache_max_concurrency=f"{f.max_concurrency_reported or 0:.2f}",
            enable_prefix_caching=str(bool(f.prefix_caching)),
        ).set(1)
        self.g_mem_total.set(mem.gpu_total_gib * (1 << 30))
        self._last_counts = {"pre": 0, "prompt": 0, "gen": 0, "pq": 0, "ph": 0}
        self._lbl = {"model_name": self.model_name, "engine": "0"}
        # Expose every series from the start (at 0), as vLLM does: a scrape before the
        # first request must already show the counters, or window deltas come out unknown.
        for metric in (self.m_running, self.m_waiting, self.m_kv, self.m_preempt, self.m_prompt, self.m_gen,
                       self.m_pq, self.m_ph, self.h_ttft, self.h_itl, self.h_tpot, self.h_e2e):
            metric.labels(**self._lbl)
        self.m_success.labels(finished_reason="length", **self._lbl)

    def _refresh_gauges(self) -> None:
        s = self.model.stats()
        L = self._lbl
        self.m_running.labels(**L).set(s.running)
        self.m_waiting.labels(**L).set(s.waiting)
        self.m_kv.labels(**L).set(s.kv_usage)
        for key, metric, value in (
            ("pre", self.m_preempt, s.preemptions_total),
            ("prompt", self.m_prompt, s.prompt_tokens_total),
            ("gen", self.m_gen, s.generation_tokens_total),
            ("pq", self.m_pq, s.prefix_cache_queries_total),
            ("ph", self.m_ph, s.prefix_cache_hits_total),
        ):
            d = value - self._last_counts[key]
            if d > 0:
                metric.labels(**L).inc(d)
                self._last_counts[key] = value
        self.g_mem_used.set(self.model.memory().used_gib * (1 << 30))

    # -- the engine loop -----------------------------------------------------------------
    async def run_engine(self) -> None:
        """The engine loop; if the model raises, the engine is dead (as vLLM's EngineDeadError):
        the traceback goes to the log, /health answers 503 and every open stream ends."""
        try:
            await self._engine_loop()
        except asyncio.CancelledError:
            raise
        except Exception:
            import traceback

            self.dead = traceback.format_exc()
            print("ERROR kvtui-sim: the engine loop died (EngineDeadError):\n" + self.dead, flush=True)
            for st in self.streams.values():
                st.queue.put_nowait(None)

    async def _engine_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_wall = loop.time()
        while True:
            if not self.model.has_work():
                self.wake.clear()
                self._refresh_gauges()
                await self.wake.wait()
                next_wall = loop.time()
            out = self.model.step()
            self.steps += 1
            next_wall += out.duration_s * self.time_scale
            delay = next_wall - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                # Behind schedule: the box could not keep up; count it and re-anchor.
                if delay < -0.002:
                    self.lag_s += -delay
                    self.c_lag.inc(-delay)
                    next_wall = loop.time()
                await asyncio.sleep(0)
            now = clock.monotonic()
            for rid, n in out.tokens.items():
                st = self.streams.get(rid)
                if st is None:
                    continue
                st.queue.put_nowait(n)
                if st.t_first is None:
                    st.t_first = now
                    self.h_ttft.labels(**self._lbl).observe((now - st.t_arrival) / self.time_scale)
                else:
                    self.h_itl.labels(**self._lbl).observe((now - (st.t_last or now)) / self.time_scale)
                st.t_last = now
                st.emitted += n
            for rid in out.finished:
                st = self.streams.get(rid)
                if st is None:
                    continue
                st.done = True
                st.queue.put_nowait(None)
                self.m_success.labels(finished_reason="length", **self._lbl).inc()
                e2e = (now - st.t_arrival) / self.time_scale
                self.h_e2e.labels(**self._lbl).observe(e2e)
                if st.emitted > 1 and st.t_first is not None:
                    self.h_tpot.labels(**self._lbl).observe((now - st.t_first) / self.time_scale / (st.emitted - 1))
            if self.steps % 8 == 0:
                self._refresh_gauges()

    def submit(self, ids: list[int], max_tokens: int) -> tuple[str, _Stream]:
        self._counter += 1
        rid = f"cmpl-{self._counter}"
        st = _Stream(len(ids), clock.monotonic())
        self.streams[rid] = st
        self.model.add(SimRequest(rid, len(ids), max_tokens, block_hashes(ids)))
        self.wake.set()
        return rid, st

    def release(self, rid: str) -> None:
        st = self.streams.pop(rid, None)
        if st is not None and not st.done:
            self.model.abort(rid)  # the client went away: vLLM aborts the request

    # -- HTTP ----------------------------------------------------------------------------
    def _auth(self, request: Request) -> Response | None:
        if self.api_key and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return None

    def _error(self, msg: str, code: int = 400) -> JSONResponse:
        return JSONResponse({"error": {"message": msg, "type": "BadRequestError", "code": code}}, status_code=code)

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    async def _generate(self, request: Request, chat: bool) -> Response:
        if (denied := self._auth(request)) is not None:
            return denied
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._error("request body is not JSON")
        if not isinstance(body, dict):
            return self._error("request body must be a JSON object")
        if body.get("model") not in (None, self.model_name):
            return self._error(f"The model `{body.get('model')}` does not exist.", 404)
        if chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                return self._error("messages must be a non-empty list")
            ids = self.tok.chat_ids(msgs)
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
                ids = prompt
            elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                ids = self.tok.encode(prompt[0])
            elif isinstance(prompt, str):
                ids = self.tok.encode(prompt)
            else:
                return self._error("prompt must be a string or a list of token ids (batches are not simulated)")
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if max_tokens is None:
            max_tokens = 16 if not chat else self.max_model_len - len(ids)
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return self._error("max_tokens must be a positive integer")
        if len(ids) + max_tokens > self.max_model_len:
            return self._error(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{len(ids) + max_tokens} tokens ({len(ids)} in the messages, {max_tokens} in the completion)."
            )
        if not ids:
            return self._error("the prompt is empty")
        stream = bool(body.get("stream"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        rid, st = self.submit(ids, max_tokens)
        if stream:
            return StreamingResponse(self._sse(rid, st, chat, max_tokens, include_usage),
                                     media_type="text/event-stream")
        try:
            n_out = 0
            while True:
                n = await st.queue.get()
                if n is None:
                    break
                n_out += n
        finally:
            self.release(rid)
        text = self._text(rid, n_out)
        usage = {"prompt_tokens": len(ids), "completion_tokens": n_out, "total_tokens": len(ids) + n_out}
        created = int(clock.time())
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
            return JSONResponse({"id": rid, "object": "chat.completion", "created": created, "model": self.model_name,
                                 "choices": [choice], "usage": usage})
        choice = {"index": 0, "text": text, "finish_reason": "length", "logprobs": None}
        return JSONResponse({"id": rid, "object": "text_completion", "created": created, "model": self.model_name,
                             "choices": [choice], "usage": usage})

    def _text(self, rid: str, n: int, start: int = 0) -> str:
        base = hash(rid) & 0xFFFF
        return "".join(f" t{(base + start + i * 7919) % self.tok.vocab_size}" for i in range(n))

    async def _sse(self, rid: str, st: _Stream, chat: bool, max_tokens: int, include_usage: bool) -> AsyncIterator[str]:
        created = int(clock.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = f'{{"id":"{rid}","object":"{obj}","created":{created},"model":{json.dumps(self.model_name)},"choices":['
        n_out = 0
        try:
            if chat:
                yield ("data: " + head + '{"index":0,"delta":{"role":"assistant","content":""},'
                       '"logprobs":null,"finish_reason":null}]}\n\n')
            while True:
                n = await st.queue.get()
                if n is None:
                    break
                text = self._text(rid, n, n_out)
                n_out += n
                finish = '"length"' if n_out >= max_tokens else "null"
                if chat:
                    choice = (f'{{"index":0,"delta":{{"content":{json.dumps(text)}}},'
                              f'"logprobs":null,"finish_reason":{finish}}}')
                else:
                    choice = (f'{{"index":0,"text":{json.dumps(text)},"logprobs":null,'
                              f'"finish_reason":{finish},"stop_reason":null}}')
                yield "data: " + head + choice + "]}\n\n"
            if include_usage:
                usage = {"prompt_tokens": st.prompt_tokens, "total_tokens": st.prompt_tokens + n_out,
                         "completion_tokens": n_out}
                yield "data: " + head + "]," + f'"usage":{json.dumps(usage)}}}\n\n'
            yield "data: [DONE]\n\n"
        finally:
            self.release(rid)

    async def models(self, request: Request) -> Response:
        if (denied := self._auth(request)) is not None:
            return denied
        return JSONResponse({"object": "list", "data": [{"id": self.model_name, "object": "model",
                                                         "owned_by": "kvtui-sim", "root": self.model_name,
                                                         "max_model_len": self.max_model_len}]})

    async def tokenize(self, request: Request) -> Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._error("request body is not JSON")
        if "messages" in body:
            ids = self.tok.chat_ids(body["messages"])
        else:
            prompt = body.get("prompt", "")
            ids = self.tok.encode(prompt if isinstance(prompt, str) else "")
            if body.get("add_special_tokens", True):
                ids = [128000 % self.tok.vocab_size] + ids
        return JSONResponse({"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids})

    async def detokenize(self, request: Request) -> Response:
        body = await request.json()
        return JSONResponse({"prompt": " ".join(f"t{i}" for i in body.get("tokens", []))})

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": SIM_VERSION})

    async def health(self, request: Request) -> Response:
        return Response(status_code=503 if self.dead else 200)

    async def metrics(self, request: Request) -> Response:
        self._refresh_gauges()
        return PlainTextResponse(generate_latest(self.registry).decode(), media_type="text/plain; version=0.0.4")

    async def sim_info(self, request: Request) -> Response:
        mem: MemorySplit = self.model.memory()  # SchedulerSim and KneeSim both split memory so
        return JSONResponse({
            "simulated": True,
            "version": SIM_VERSION,
            "gpu": self.gpu_name,
            "mode": self.mode_name,
            "time_scale": self.time_scale,
            "lag_s": round(self.lag_s, 4),
            "steps": self.steps,
            "memory": asdict(mem),
            "facts": self.model.facts().to_dict(),
            "stats": asdict(self.model.stats()),
        })

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(app):
            self._task = asyncio.create_task(self.run_engine())
            yield
            self._task.cancel()

        routes = [
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/models", self.models),
            Route("/tokenize", self.tokenize, methods=["POST"]),
            Route("/detokenize", self.detokenize, methods=["POST"]),
            Route("/version", self.version),
            Route("/health", self.health),
            Route("/metrics", self.metrics),
            Route("/kvtui/sim", self.sim_info),
        ]
        return Starlette(routes=routes, lifespan=lifespan)

def serve(server: SimServer, host: str, port: int) -> None:
    import uvicorn

    config = uvicorn.Config(server.app(), host=host, port=port, log_level="warning", access_log=False, lifespan="on")
    uv = uvicorn.Server(config)
    sys.stdout.flush()
    uv.run()


def env_api_key() -> str | None:
    return os.environ.get("KVTUI_SIM_API_KEY") or None
