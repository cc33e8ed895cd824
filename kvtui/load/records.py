"""The per-request record: everything later views need to recompute any figure.

Times are seconds on the run's clock (`time.monotonic()` minus the run's t0, which the
snapshot stores with its wall-clock epoch). CLOCK_MONOTONIC is system-wide on Linux, so
the load-generator process and the controller read the same clock.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

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
    "client",  # a bug or resource limit in the client itself
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
        d["itl"] = [round(g, 6) for g in self.itl]
        for k in ("t_intended", "t_sent", "t_first", "t_last", "dispatch_delay"):
            if d[k] is not None:
                d[k] = round(d[k], 6)
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> "Record":
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})


def write_records(path: Path, records: Iterable[Record]) -> int:
    """Append records as JSON Lines; flushed so a crash keeps what was written."""
    n = 0
    with open(path, "a", encoding="utf-8") as f:
        for r in records:
            f.write(r.to_json() + "\n")
            n += 1
        f.flush()
    return n


def iter_record_lines(path: Path) -> Iterator[str]:
    """The non-empty lines of a records file (or of its .gz, as archived results keep them)."""
    path = Path(path)
    gz = path if path.suffix == ".gz" else path.with_name(path.name + ".gz")
    if gz.exists() and not (path.exists() and path.suffix != ".gz"):
        import gzip

        opener = gzip.open(gz, "rt", encoding="utf-8")
    else:
        opener = open(path, encoding="utf-8")
    with opener as f:
        for line in f:
            if line.strip():
                yield line


def read_records(path: Path) -> Iterator[Record]:
    """Records from a JSON Lines file (or its .gz); a truncated last line (crash mid-write) is skipped."""
    for line in iter_record_lines(path):
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        yield Record.from_dict(d)
