"""The per-request record: everything later views need to recompute any figure.

Times are seconds on the run's clock (`kvtui.clock.monotonic()` minus the run's t0, which the
snapshot stores with its wall-clock epoch). On the system clock that is CLOCK_MONOTONIC, which
is system-wide on Linux, so the load-generator process and the controller read the same clock.

The type only (and its one JSON line); the records file is kvtui.io.records's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

# Error classes a record can carry (status != "ok").
ERROR_CLASSES = (
    "http_4xx",
    "http_429",
    "http_5xx",
    "connect",  # connection refused / reset before a response
    "timeout",  # per-request timeout (a stream that never finishes)
    "sse_malformed",  # a data: line that is not JSON
    "stream_error",  # the server put an error object into the stream
    "truncated",  # the stream ended without [DONE] or without usage
    "no_tokens",  # finished without a single token-bearing chunk
    "cancelled",  # the step ended while it was in flight (not counted against the SLO)
    "client",  # a bug or resource limit in the client itself (never a verdict about the server)
    "sse_oversize",  # one SSE line longer than the client's bound (MAX_EVENT_BYTES)
    "http_redirect",  # a 3xx: never followed (another origin would be measured)
    "http_status",  # any other status than 200 that is no error class above (204 No Content, a 1xx)
    "bad_response",  # an answer that is not readable HTTP (headers past the client's bound, a bad status line)
)

# Named doubts about a record's numbers (`Record.flags`): the request finished, but a figure
# the server gave cannot be trusted, so no step passes on it.
RECORD_FLAGS = (
    "usage_invalid",  # a usage count that is not a non-negative integer in range (1e308, -3, "12", [1, 2])
    "usage_mismatch",  # usage disagrees with the streamed chunks or the requested lengths
    "usage_missing",  # a usage count (prompt or completion) null or absent: the figure is not known
    "text_null",  # a token chunk whose text is null: not a token (the chunk is not counted)
)


@dataclass
class Record:
    id: str  # run salt + counter: unique across steps, modes and resumed runs
    mode: str
    step: int  # step index within the mode
    load: float  # the step's concurrency (closed loop) or rate (open loop)
    phase: str  # "warmup", "window" (counted) or "tail" (sent after the window closed)
    t_intended: float  # when the request should have been sent (open loop schedule)
    t_sent: float
    t_first: float | None = None  # first token-bearing chunk
    t_last: float | None = None  # last token-bearing chunk
    itl: list[float] = field(default_factory=list)  # every gap between token-bearing chunks, s
    prompt_tokens: int | None = None  # from usage
    output_tokens: int | None = None  # from usage
    expected_prompt_tokens: int | None = None
    expected_output_tokens: int | None = None
    status: str = "ok"  # "ok" or "error"
    error: str | None = None  # one of ERROR_CLASSES
    detail: str | None = None  # short human text (HTTP body excerpt, exception)
    http_status: int | None = None
    turn: int = 0
    conversation: str | None = None
    worker: int = 0  # load-generator process that sent it
    dispatch_delay: float = 0.0  # t_sent - t_intended (client lag)
    flags: list[str] = field(default_factory=list)  # RECORD_FLAGS raised on this request
    finish_reason: str | None = None  # the stream's last finish_reason ("length": max_tokens reached)
    replica: int | None = None  # which replica served it (index into the mode's replicas); None: one server

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def counted(self) -> bool:
        """Counted in the step's SLO evaluation: started in the window, not cancelled by us."""
        return self.phase == "window" and self.error != "cancelled"

    # Latencies from the *intended* send time: no coordinated omission in open loop.
    @property
    def ttft(self) -> float | None:
        return None if self.t_first is None or not self.ok else self.t_first - self.t_intended

    @property
    def e2e(self) -> float | None:
        return None if self.t_last is None or not self.ok else self.t_last - self.t_intended

    @property
    def tpot(self) -> float | None:
        """(E2E − TTFT) / (output tokens − 1), as vLLM's bench defines it."""
        if not self.ok or self.t_first is None or self.t_last is None:
            return None
        n = self.output_tokens or 0
        if n < 2:
            return None
        return (self.t_last - self.t_first) / (n - 1)

    def token_times(self) -> list[float]:
        """Times of the token-bearing chunks (first, then first + cumulative gaps)."""
        if self.t_first is None:
            return []
        out = [self.t_first]
        t = self.t_first
        for g in self.itl:
            t += g
            out.append(t)
        return out

    def to_json(self) -> str:
        d = asdict(self)
        if d["replica"] is None:
            del d["replica"]  # one server: the line as before replicas existed
        d["itl"] = [round(g, 6) for g in self.itl]
        for k in ("t_intended", "t_sent", "t_first", "t_last", "dispatch_delay"):
            if d[k] is not None:
                d[k] = round(d[k], 6)
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> "Record":
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})
