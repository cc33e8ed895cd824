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
from dataclasses import dataclass

from kvtui.runtime.engines.base import StartupFacts
from kvtui.simulator.engine.scheduler import MemorySplit, SimStats, StepOutcome


@dataclass
class _Running:
    rid: str
    prompt_tokens: int
    max_tokens: int
    emitted: int = 0


class KneeModel:
    def __init__(self, knee: int, tpot_s: float = 0.02, slowdown: float = 2.0, max_seqs: int = 256,
                 kv_tokens: int = 1 << 20):
        self.knee = knee
        self.tpot_s = tpot_s
        self.slowdown = slowdown
        self.max_seqs = max_seqs
        self.kv_tokens = kv_tokens
        self.now = 0.0
        self.running: dict[str, _Running] = {}
        self.waiting: deque[_Running] = deque()
        self.prompt_total = 0
        self.gen_total = 0

    def add(self, req) -> None:
        self.waiting.append(_Running(req.rid, req.prompt_tokens, req.max_tokens))

    def abort(self, rid: str) -> None:
        self.running.pop(rid, None)
        self.waiting = deque(r for r in self.waiting if r.rid != rid)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def step(self) -> StepOutcome:
        out = StepOutcome(duration_s=0.0, tokens={}, finished=[], preempted=[], prefill_tokens=0, decode_seqs=0)
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

    def stats(self) -> SimStats:
        used = sum(r.prompt_tokens + r.emitted for r in self.running.values())
        return SimStats(
            running=len(self.running),
            waiting=len(self.waiting),
            kv_usage=min(1.0, used / self.kv_tokens),
            preemptions_total=0,
            prompt_tokens_total=self.prompt_total,
            generation_tokens_total=self.gen_total,
            prefix_cache_queries_total=0,
            prefix_cache_hits_total=0,
            num_gpu_blocks=self.kv_tokens // 16,
            block_size=16,
        )

    def memory(self) -> MemorySplit:
        return MemorySplit(weights_gib=1.0, activation_gib=0.1, cuda_graph_gib=0.0, kv_cache_gib=1.0,
                           kv_tokens=self.kv_tokens, gpu_total_gib=4.0, used_gib=2.1)

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
