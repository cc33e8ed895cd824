"""A model with a knee known in advance, for testing the explorer against real HTTP.

Every engine step emits one token for each running request (new requests get their first
token at the end of the step that admits them). A step takes `tpot_s` while at most
`knee` requests run, and `tpot_s × slowdown` above that. So with an SLO of TPOT p95
between the two, concurrency `knee` passes and `knee + 1` fails: the search must find
exactly `knee`. Above `max_seqs` requests wait in a queue (TTFT grows).

It speaks the same interface as `SchedulerSim` so one real-time server drives both.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kvtui.engines.base import StartupFacts


@dataclass
class KneeRequest:
    rid: str
    prompt_tokens: int
    max_tokens: int
    block_hashes: list[int] | None = None
    emitted: int = 0


@dataclass
class KneeOutcome:
    duration_s: float
    tokens: dict[str, int] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    prefill_tokens: int = 0
    decode_seqs: int = 0


@dataclass
class KneeStats:
    running: int
    waiting: int
    kv_usage: float
    preemptions_total: int
    prompt_tokens_total: int
    generation_tokens_total: int
    prefix_cache_queries_total: int = 0
    prefix_cache_hits_total: int = 0
    num_gpu_blocks: int = 0
    block_size: int = 16


@dataclass
class KneeMemory:
    weights_gib: float = 1.0
    activation_gib: float = 0.1
    cuda_graph_gib: float = 0.0
    kv_cache_gib: float = 1.0
    kv_tokens: int = 0
    gpu_total_gib: float = 4.0
    used_gib: float = 2.1


class KneeModel:
    def __init__(self, knee: int, tpot_s: float = 0.02, slowdown: float = 2.0, max_seqs: int = 256, kv_tokens: int = 1 << 20):
        self.knee = knee
        self.tpot_s = tpot_s
        self.slowdown = slowdown
        self.max_seqs = max_seqs
        self.kv_tokens = kv_tokens
        self.now = 0.0
        self.running: dict[str, KneeRequest] = {}
        self.waiting: deque[KneeRequest] = deque()
        self.prompt_total = 0
        self.gen_total = 0

    def add(self, req) -> None:
        self.waiting.append(KneeRequest(req.rid, req.prompt_tokens, req.max_tokens))

    def abort(self, rid: str) -> None:
        self.running.pop(rid, None)
        self.waiting = deque(r for r in self.waiting if r.rid != rid)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def step(self) -> KneeOutcome:
        out = KneeOutcome(duration_s=0.0)
        while self.waiting and len(self.running) < self.max_seqs:
            r = self.waiting.popleft()
            self.running[r.rid] = r
            out.prefill_tokens += r.prompt_tokens
            self.prompt_total += r.prompt_tokens
        n = len(self.running)
        out.decode_seqs = n
        out.duration_s = self.tpot_s * (self.slowdown if n > self.knee else 1.0)
        for rid, r in list(self.running.items()):
            r.emitted += 1
            out.tokens[rid] = 1
            self.gen_total += 1
            if r.emitted >= r.max_tokens:
                out.finished.append(rid)
                del self.running[rid]
        self.now += out.duration_s
        return out

    def stats(self) -> KneeStats:
        used = sum(r.prompt_tokens + r.emitted for r in self.running.values())
        return KneeStats(
            running=len(self.running),
            waiting=len(self.waiting),
            kv_usage=min(1.0, used / self.kv_tokens),
            preemptions_total=0,
            prompt_tokens_total=self.prompt_total,
            generation_tokens_total=self.gen_total,
            num_gpu_blocks=self.kv_tokens // 16,
        )

    def memory(self) -> KneeMemory:
        return KneeMemory(kv_tokens=self.kv_tokens)

    def facts(self) -> StartupFacts:
        return StartupFacts(
            weights_gib=1.0,
            kv_cache_gib=1.0,
            kv_cache_tokens=self.kv_tokens,
            num_gpu_blocks=self.kv_tokens // 16,
            block_size=16,
            max_num_seqs=self.max_seqs,
            device="GPU",
        )
