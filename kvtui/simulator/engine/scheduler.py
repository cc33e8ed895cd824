"""A vLLM-like continuous-batching scheduler with a modelled clock (the simulator's engine core).

What it does per `step()`, as vLLM's V1 scheduler does:
- token budget = max_num_batched_tokens; RUNNING requests first, in admission order: a
  decoding request takes 1 token, a partly prefilled one takes the rest of its prompt up to
  the budget (chunked prefill);
- each scheduled request needs KV blocks for its new tokens (block_size tokens per block);
  when none are free, the *last* running request is preempted (recompute: its blocks are
  freed, it goes back to the front of the waiting queue and later recomputes prompt +
  output so far), repeatedly, until the allocation fits or the request preempted itself;
- if nobody was preempted this step, WAITING requests are admitted in FCFS order while the
  budget, max_num_seqs and free blocks allow; with prefix caching, the leading full blocks
  whose chained hashes are cached are reused (at most (tokens − 1) // block_size blocks);
- a request that has computed all its tokens samples one token; it finishes at max_tokens.
Free blocks form one LRU queue (vLLM's free block queue): freed blocks keep their hash and
can be hit until they are reallocated, oldest-freed first.

The step's duration comes from `roofline.Roofline`; `now` advances by it. Pure model: no
I/O, no threads, no wall clock. Deterministic (the only randomness is optional step-time
jitter, seeded).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from itertools import count

from kvtui.io.scenario.lengths import expected
from kvtui.runtime.engines.base import StartupFacts
from kvtui.simulator.engine.blocks import BlockPool, SimRequest, SimSeq
from kvtui.simulator.model.catalog import GpuSpec, ModelSpec
from kvtui.simulator.model.estimator import EngineSettings, MemoryEstimate, estimate_memory, resolve_settings
from kvtui.simulator.model.roofline import Calibration, Roofline, as_calibration


class SimConfigError(ValueError):
    """The configuration cannot start (vLLM would refuse at startup). `str()` is vLLM-like."""


@dataclass
class StepOutcome:
    duration_s: float  # modelled time of this engine step (prefill chunk + decode batch)
    tokens: dict[str, int]  # rid -> output tokens emitted by this step (first token included)
    finished: list[str]
    preempted: list[str]
    prefill_tokens: int
    decode_seqs: int
    scheduled_tokens: int = 0
    limited_by: str = ""  # the largest term of the step time: weights|compute|kv|attention|overhead|cpu|idle
    # the step-time model's inputs (for traces and explanations)
    seqs: int = 0  # scheduled sequences
    sampled: int = 0  # sequences that sampled a token
    ctx_read: int = 0  # tokens of KV cache the scheduled sequences read
    attn_pairs: int = 0  # causal (query, key) pairs computed


@dataclass
class SimStats:  # what /metrics shows
    running: int
    waiting: int
    kv_usage: float
    preemptions_total: int
    prompt_tokens_total: int
    generation_tokens_total: int
    prefix_cache_queries_total: int
    prefix_cache_hits_total: int
    num_gpu_blocks: int
    block_size: int
    requests_finished_total: int = 0
    requests_aborted_total: int = 0
    steps_total: int = 0
    now: float = 0.0


@dataclass
class MemorySplit:
    weights_gib: float
    activation_gib: float
    cuda_graph_gib: float
    kv_cache_gib: float
    kv_tokens: int
    gpu_total_gib: float  # what NVML reports as total
    used_gib: float  # what NVML would show (vLLM pre-allocates: nearly flat)
    non_torch_gib: float = 0.0
    kv_in_use_gib: float = 0.0  # kv_usage x pool


def extrapolations(model: ModelSpec, gpu: GpuSpec, cal: Calibration) -> list[str]:
    """Where the simulator's figures go beyond what its calibration measured, one caveat each: a GPU
    from datasheet figures, a calibration fitted on another GPU, MoE routing and MLA attention
    (modelled, never calibrated against vLLM on such a model). The server's startup warnings carry
    them, so every view's caveats (kvtui.report.text.caveats) say them."""
    out = []
    fitted = cal.gpu or ""
    if fitted and fitted.upper() == gpu.name.upper():
        pass  # calibrated on this very GPU
    elif not gpu.measured:
        out.append(f"{gpu.name}: simulated from datasheet figures, efficiencies fitted on "
                   + (f"{'an' if fitted[:1] in 'AEFHILMNORSX' else 'a'} {fitted}" if fitted else "no GPU (priors)"))
    elif fitted:
        out.append(f"{gpu.name}: simulated with a calibration fitted on another GPU ({fitted}: {cal.name})")
    else:
        out.append(f"{gpu.name}: simulated with uncalibrated priors ({cal.name})")
    if model.is_moe:
        out.append(f"{model.name}: MoE routing ({model.num_experts} experts, {model.experts_per_tok} per token) "
                   "modelled, not calibrated against vLLM")
    if model.is_mla:
        out.append(f"{model.name}: MLA attention (compressed latent KV) modelled, not calibrated against vLLM")
    return out


class SchedulerSim:
    """The simulated engine core. See the module docstring; the HTTP server drives `step()`."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, mode, server=None, calibration: Calibration | str | None = None,
                 seed: int = 0, settings: EngineSettings | None = None):
        self.model = model
        self.gpu = gpu
        self.mode = mode
        self.cal = as_calibration(calibration)
        self.settings = settings or resolve_settings(model, gpu, server)
        s = self.settings
        self.weights_fmt = getattr(mode, "weights", "bf16") if mode is not None else "bf16"
        if self.weights_fmt not in ("bf16", "fp8", "int8", "int4"):
            self.weights_fmt = "bf16"
        kv_dtype = getattr(mode, "kv_cache_dtype", "auto") if mode is not None else "auto"
        self.kv_bytes = 1 if str(kv_dtype).startswith("fp8") else 2
        self.est: MemoryEstimate = estimate_memory(model, gpu, self.weights_fmt,
                                                   "fp8" if self.kv_bytes == 1 else "auto", s, self.cal)
        if not self.est.fits:
            raise SimConfigError(self.est.problem)
        self.block_size = s.block_size
        self.num_gpu_blocks = self.est.num_gpu_blocks
        self.caching = s.prefix_caching
        self.max_num_seqs = s.max_num_seqs
        self.max_batched = s.max_num_batched_tokens
        self.max_model_len = s.max_model_len
        self.roof = Roofline(model, gpu, self.weights_fmt, self.kv_bytes, self.cal, s.tp)
        self.rng = random.Random(seed)
        self.jitter = self.cal.step_jitter
        self.now = 0.0
        # vLLM keeps one "null" block out of the free queue
        self.pool = BlockPool(max(0, self.num_gpu_blocks - 1))
        self.waiting: deque[SimSeq] = deque()
        self.running: list[SimSeq] = []
        # Asynchronous scheduling (vLLM 0.26 default: "Asynchronous scheduling is enabled"): step
        # k+1 is scheduled while step k runs, so a request that arrives while the engine is busy
        # joins the step after next. `incoming` holds (step count at arrival, request).
        self.async_scheduling = True
        self.incoming: deque[tuple[int, SimSeq]] = deque()
        self._busy = False
        self.reqs: dict[str, SimSeq] = {}
        self._uid = count(1)
        # counters
        self.preemptions_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.pc_queries = 0
        self.pc_hits = 0
        self.finished_total = 0
        self.aborted_total = 0
        self.steps_total = 0

    # --- requests ----------------------------------------------------------------------
    def add(self, req: SimRequest) -> None:
        if req.rid in self.reqs:
            raise ValueError(f"duplicate request id {req.rid!r}")
        if req.prompt_tokens < 1 or req.max_tokens < 1:
            raise ValueError("prompt_tokens and max_tokens must be >= 1")
        if req.prompt_tokens + req.max_tokens > self.max_model_len:
            raise ValueError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{req.prompt_tokens + req.max_tokens} tokens ({req.prompt_tokens} in the messages, {req.max_tokens} "
                f"in the completion)."
            )
        need = -(-(req.prompt_tokens + req.max_tokens - 1) // self.block_size)
        if need > self.pool.total:  # could never finish: vLLM refuses such a config at startup
            raise ValueError(f"request needs {need} KV blocks at its longest; the KV cache has {self.pool.total}")
        r = SimSeq(req, next(self._uid), self.now, self.caching)
        self.reqs[req.rid] = r
        if self.async_scheduling:
            self.incoming.append((self.steps_total, r))
        else:
            self.waiting.append(r)

    def abort(self, rid: str) -> None:
        r = self.reqs.pop(rid, None)
        if r is None or r.done:
            return
        r.done = True
        self.aborted_total += 1
        if r in self.running:
            self.running.remove(r)
        elif r in self.waiting:
            self.waiting.remove(r)
        else:
            self.incoming = deque(x for x in self.incoming if x[1] is not r)
        self.pool.release(r)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self.incoming)

    def idle_until(self, t: float) -> None:
        """Advance the clock with nothing to do (the engine waits for requests)."""
        if t > self.now:
            self.now = t

    # --- the engine iteration ------------------------------------------------------------
    def _preempt(self, v: SimSeq) -> None:
        self.pool.release(v)
        v.computed = 0
        self.waiting.appendleft(v)
        self.preemptions_total += 1

    def step(self) -> StepOutcome:
        if self.incoming:
            inc = self.incoming
            if not self._busy:  # the engine was idle: it schedules new arrivals at once
                while inc:
                    self.waiting.append(inc.popleft()[1])
            else:
                step_no = self.steps_total
                while inc and inc[0][0] < step_no:
                    self.waiting.append(inc.popleft()[1])
        bs = self.block_size
        pool = self.pool
        budget = self.max_batched
        running = self.running
        tokens: dict[str, int] = {}
        finished: list[str] = []
        preempted: list[str] = []
        n_tok = n_seqs = sampled = ctx_read = prefill_tok = decode_seqs = 0
        pairs = 0
        prompt_done = 0
        n_lean = 0  # rows of the lean decode path: one token, one sequence, one sample each
        cached = pool.cached

        # 1) running requests, in order
        i = 0
        nrun = len(running)
        while i < nrun and budget > 0:
            r = running[i]
            c = r.computed
            n = r.num_tokens - c
            if n == 1:  # decoding: the common case, kept lean
                if c >= r.nblocks * bs:  # the new token opens a block
                    if pool.never_used:
                        pool.never_used -= 1
                    elif pool.seq - pool.ptr - pool.n_holes > 0:
                        pool.alloc(1)
                    else:
                        if self._make_room(r, 1, preempted):
                            break
                        nrun = len(running)
                        pool.alloc(1)
                    r.nblocks += 1
                n_lean += 1
                ctx_read += c
                pairs += c + 1
                budget -= 1
                nc = c + 1
                r.computed = nc
                if r.caching and not nc % bs:  # a block just filled: cache its key (inline register)
                    j = nc // bs - 1
                    k = r.hashes[j] if j < r.nh else (r.uid, j)
                    v = cached.get(k)
                    if v is None or (v <= 0 and -v - 1 < pool.ptr):
                        cached[k] = 1
                        r.keys.append(k)
                if r.out:
                    decode_seqs += 1
                else:  # a one-token prompt chunk
                    prefill_tok += 1
                    prompt_done += r.prompt
                r.out += 1
                r.num_tokens = nc + 1
                tokens[r.rid] = 1
                if r.out >= r.max_tokens:
                    r.done = True
                    finished.append(r.rid)
                i += 1
                continue
            # a prefill (or recompute) chunk
            if n > budget:
                n = budget
            need = (c + n + bs - 1) // bs - r.nblocks
            if need > 0:
                if need > pool.never_used + pool.seq - pool.ptr - pool.n_holes:
                    if self._make_room(r, need, preempted):
                        break
                    nrun = len(running)
                pool.alloc(need)
                r.nblocks += need
            n_tok += n
            n_seqs += 1
            ctx_read += c
            pairs += n * c + (n * (n + 1) >> 1)
            budget -= n
            prefill_tok += n
            nc = c + n
            r.computed = nc
            if r.caching and nc // bs > c // bs:
                pool.register(r, r.keys_range(c // bs, nc // bs))
            if nc == r.num_tokens:
                if not r.out:
                    prompt_done += r.prompt
                r.out += 1
                r.num_tokens = nc + 1
                sampled += 1
                tokens[r.rid] = 1
                if r.out >= r.max_tokens:
                    r.done = True
                    finished.append(r.rid)
            i += 1

        # 2) waiting requests, FCFS, only when nobody was preempted this step
        if not preempted:
            waiting = self.waiting
            max_seqs = self.max_num_seqs
            caching = self.caching
            while waiting and budget > 0 and len(running) < max_seqs:
                r = waiting[0]
                hit = 0
                evictable = 0
                if caching:
                    if r.caching:
                        limit = (r.num_tokens - 1) // bs
                        lookup = pool.lookup
                        while hit < limit:
                            st = lookup(r.key(hit))
                            if st < 0:
                                break
                            if st == 0:
                                evictable += 1
                            hit += 1
                c = hit * bs
                n = r.num_tokens - c
                if n > budget:
                    n = budget
                need = (c + n + bs - 1) // bs - hit
                if need + evictable > pool.free:
                    break
                waiting.popleft()
                if caching:
                    self.pc_queries += r.num_tokens
                    self.pc_hits += c
                if hit:
                    keys = r.keys_range(0, hit)
                    for k in keys:
                        pool.touch(k)
                    r.keys.extend(keys)
                pool.alloc(need)
                r.nblocks = hit + need
                running.append(r)
                n_tok += n
                n_seqs += 1
                ctx_read += c
                pairs += n * c + (n * (n + 1) >> 1)
                budget -= n
                prefill_tok += n
                nc = c + n
                r.computed = nc
                if r.caching and nc // bs > c // bs:
                    pool.register(r, r.keys_range(c // bs, nc // bs))
                if nc == r.num_tokens:
                    if not r.out:
                        prompt_done += r.prompt
                    r.out += 1
                    r.num_tokens = nc + 1
                    sampled += 1
                    tokens[r.rid] = 1
                    if r.out >= r.max_tokens:
                        r.done = True
                        finished.append(r.rid)

        if finished:
            reqs = self.reqs
            for rid in finished:
                pool.release(reqs.pop(rid))
            self.running = [r for r in self.running if not r.done]
            self.finished_total += len(finished)

        n_tok += n_lean
        n_seqs += n_lean
        sampled += n_lean
        if n_tok:
            dur, limited_by = self.roof.time_limit(n_tok, n_seqs, sampled, ctx_read, pairs, prefill_tok > 0)
            if self.jitter:
                dur *= math.exp(self.rng.gauss(0.0, self.jitter))
        else:  # nothing schedulable (or nothing to do): the engine still spins once
            dur, limited_by = (self.roof.o_step, "idle") if self.has_work() else (0.0, "idle")
        self.now += dur
        self.steps_total += 1
        # busy: the next step was scheduled while this one ran (async scheduling); an engine
        # left with nothing to run goes idle and takes the next arrival at once
        self._busy = n_tok > 0 and bool(self.running or self.waiting)
        self.generation_tokens_total += len(tokens)
        self.prompt_tokens_total += prompt_done
        return StepOutcome(dur, tokens, finished, preempted, prefill_tok, decode_seqs, n_tok, limited_by, n_seqs,
                           sampled, ctx_read, pairs)

    def _make_room(self, r: SimSeq, need: int, preempted: list[str]) -> bool:
        """Preempt from the tail of `running` until `need` blocks are free. True if `r` itself went."""
        running = self.running
        pool = self.pool
        while need > pool.free:
            victim = running.pop()
            self._preempt(victim)
            preempted.append(victim.rid)
            if victim is r:
                return True
        return False

    # --- reporting -----------------------------------------------------------------------
    def kv_usage(self) -> float:
        total = self.pool.total
        return 1.0 - self.pool.free / total if total else 0.0

    def stats(self) -> SimStats:
        return SimStats(
            running=len(self.running),
            waiting=len(self.waiting) + len(self.incoming),
            kv_usage=self.kv_usage(),
            preemptions_total=self.preemptions_total,
            prompt_tokens_total=self.prompt_tokens_total,
            generation_tokens_total=self.generation_tokens_total,
            prefix_cache_queries_total=self.pc_queries,
            prefix_cache_hits_total=self.pc_hits,
            num_gpu_blocks=self.num_gpu_blocks,
            block_size=self.block_size,
            requests_finished_total=self.finished_total,
            requests_aborted_total=self.aborted_total,
            steps_total=self.steps_total,
            now=self.now,
        )

    def memory(self) -> MemorySplit:
        e = self.est
        nvml_total = self.gpu.usable_gib + 0.6 if self.gpu.measured else self.gpu.usable_gib + 0.5
        return MemorySplit(
            weights_gib=e.weights_gib,
            activation_gib=e.activation_gib,
            cuda_graph_gib=e.cuda_graph_gib,
            kv_cache_gib=e.kv_cache_gib,
            kv_tokens=e.kv_tokens,
            gpu_total_gib=nvml_total,
            used_gib=e.used_gib,
            non_torch_gib=e.non_torch_gib,
            kv_in_use_gib=self.kv_usage() * e.kv_cache_gib,
        )

    def facts(self) -> StartupFacts:
        e = self.est
        s = self.settings
        warnings = []
        if self.kv_bytes == 1:
            warnings.append("fp8 KV cache without calibrated scales (scale 1.0)")
        if self.mode.weights == "fp8" and not self.gpu.has_fp8:
            warnings.append(f"fp8 weights weight-only on {self.gpu.name} (W8A16, FP8 Marlin): no FP8 tensor cores, "
                            "16-bit matmuls with a dequant")
        warnings += extrapolations(self.model, self.gpu, self.cal)
        return StartupFacts(
            weights_gib=round(e.weights_gib, 2),
            kv_cache_gib=round(e.kv_cache_gib, 2),
            kv_cache_tokens=e.kv_tokens,
            max_concurrency_reported=round(e.max_concurrency_reported, 2),
            max_concurrency_len=s.max_model_len,
            cuda_graph_gib=round(e.cuda_graph_gib, 2),
            activation_peak_gib=round(e.activation_gib, 2),
            num_gpu_blocks=e.num_gpu_blocks,
            block_size=s.block_size,
            kv_cache_dtype="fp8" if self.kv_bytes == 1 else "auto",
            device="GPU",
            attention_backend="FLASH_ATTN (simulated)",
            max_num_seqs=s.max_num_seqs,
            max_num_batched_tokens=s.max_num_batched_tokens,
            prefix_caching=s.prefix_caching,
            gpu_total_gib=self.gpu.usable_gib,
            gpu_memory_utilization=s.gpu_memory_utilization,
            warnings=warnings,
        )


def _typical(length) -> int:
    """A representative value of a kvtui.io.scenario.schema.Length: its expected value, at least 1."""
    return max(1, int(expected(length)))


def peak_chunk_rate(scenario, mode) -> float:
    """Token chunks per second the simulator would stream at the ramp's top load (for slow motion).

    Decode-only steps at the top concurrency (capped by max_num_seqs and the KV cache), with the
    context half-way through the output: an upper bound of what the real-time server must emit.
    """
    from kvtui.simulator.model.catalog import load_gpu, load_model

    srv = scenario.server
    model = load_model(mode.model or srv.model)
    gpu = load_gpu(srv.gpu)
    s = resolve_settings(model, gpu, srv)
    fmt = getattr(mode, "weights", "bf16")
    fmt = fmt if fmt in ("bf16", "fp8", "int8", "int4") else "bf16"
    est = estimate_memory(model, gpu, fmt, mode.kv_cache_dtype, s)
    isl, osl = _typical(scenario.workload.prompt_tokens), _typical(scenario.workload.output_tokens)
    ramp = scenario.ramp
    if ramp.load == "rate":
        return float(ramp.max) * osl
    n = int(ramp.max)
    n = max(1, min(n, s.max_num_seqs, est.num_gpu_blocks // max(1, -(-(isl + osl) // s.block_size))))
    roof = Roofline(model, gpu, fmt, 1 if str(mode.kv_cache_dtype).startswith("fp8") else 2, as_calibration(None), s.tp)
    ctx = isl + osl // 2
    t = roof.time(n, n, n, n * ctx, n * (ctx + 1), False)
    return n / t if t > 0 else 0.0
