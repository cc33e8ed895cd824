"""The per-request record: everything later views need to recompute any figure.

Times are seconds on the run's clock (`kvtui.clock.monotonic()` minus the run's t0, which the
snapshot stores with its wall-clock epoch). On the system clock that is CLOCK_MONOTONIC, which
is system-wide on Linux, so the load-generator process and the controller read the same clock.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

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


def write_records(path: Path, records: Iterable[Record]) -> int:
    """Append records as JSON Lines; flushed so a crash keeps what was written."""
    n = 0
    import errno

    from kvtui.errors import UsageError
    from kvtui.safeio import open_append

    lines = [r.to_json() + "\n" for r in records]
    if not lines:
        return 0
    try:  # a FIFO, a device, a link put there while the run goes: refused, as a write error
        f = open_append(path, "records")
    except UsageError as e:
        raise OSError(errno.EINVAL, str(e)) from None
    data = memoryview("".join(lines).encode("utf-8"))
    with f:
        # Whole lines or none: a write cut by a full disk, a file-size limit (EFBIG) or the like is
        # taken back to where this batch began, so the file never ends in half a record.
        fd = f.fileno()
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(fd, data):]
        except OSError:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise
        n = len(lines)
    return n


class Damaged:
    """Counts the lines a reader skipped (cut by a crash mid-write, garbage, not an object)."""

    def __init__(self) -> None:
        self.count = 0
        self.first_line: int | None = None

    def add(self, lineno: int) -> None:
        self.count += 1
        if self.first_line is None:
            self.first_line = lineno

    def warning(self, path: Path | str) -> str | None:
        if not self.count:
            return None
        return f"{path}: {self.count} damaged line(s) skipped (first at line {self.first_line})"


# A records line is one request (its inter-token gaps: a 10,000-token answer is ~100 kB). A
# line past this is no record: it is skipped, counted, and never held whole in memory.
MAX_RECORD_LINE = 4 << 20


def iter_record_lines(path: Path, damaged: Damaged | None = None) -> Iterator[str]:
    """The non-empty lines of a records file (or of its .gz, as archived results keep them).

    Read as bytes and decoded line by line: a line cut inside a multi-byte character (a
    crash mid-write) is skipped and counted in `damaged`, never fatal to the whole file.

    The file is untrusted input like any other (its name comes from a snapshot): opened
    through kvtui.safeio (regular files only, non-blocking: a FIFO named there once hung a
    --resume that ignored SIGTERM), at most SNAPSHOT_CAP bytes read (unpacked, for a .gz),
    and no line held past MAX_RECORD_LINE. Anything else is an OSError naming the file.
    """
    import errno
    import os

    from kvtui.errors import UsageError
    from kvtui.safeio import SNAPSHOT_CAP, open_regular, read_bytes_file

    path = Path(path)
    gz = path if path.suffix == ".gz" else path.with_name(path.name + ".gz")
    from kvtui.load.records_cols import cols_path, decode_lines

    cols = cols_path(path)
    try:
        if not path.exists() and not gz.exists() and cols.exists():
            # the compact archive of a published run (kvtui/load/records_cols.py): the same lines
            yield from decode_lines(read_bytes_file(cols, "records archive", SNAPSHOT_CAP))
            return
        src = gz if gz.exists() and not (path.exists() and path.suffix != ".gz") else path
        fh = os.fdopen(open_regular(src, "records", SNAPSHOT_CAP), "rb")
    except UsageError as e:  # not a regular file, or too large: the callers' "cannot read" path
        raise OSError(errno.EINVAL, str(e)) from None
    if src is gz:
        import gzip

        f: Any = gzip.GzipFile(fileobj=fh, mode="rb")
    else:
        f = fh
    with fh, f:
        lineno = total = 0
        while True:
            raw = f.readline(MAX_RECORD_LINE + 1)
            if not raw:
                return
            lineno += 1
            total += len(raw)
            long = len(raw) > MAX_RECORD_LINE
            while raw and not raw.endswith(b"\n") and len(raw) > MAX_RECORD_LINE:
                raw = f.readline(MAX_RECORD_LINE + 1)  # the rest of an overlong line, never held whole
                total += len(raw)
            if total > SNAPSHOT_CAP:
                raise OSError(errno.EFBIG, f"{src}: more than a records file can be ({SNAPSHOT_CAP >> 20:,} MiB)")
            if long:
                if damaged is not None:
                    damaged.add(lineno)
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                if damaged is not None:
                    damaged.add(lineno)
                continue
            if line.strip():
                yield line


def record_from_line(line: str) -> Record | None:
    """A Record from one JSON line, or None when the line is not a record (garbage, a cut line,
    a non-object, wrong-typed fields)."""
    from kvtui.safeio import loads

    try:
        d = loads(line)  # bounded depth and strings (kvtui.safeio): past them, not a record
    except (ValueError, RecursionError):
        return None
    if not isinstance(d, dict):
        return None
    try:
        r = Record.from_dict(d)
    except TypeError:
        return None  # a required field missing
    num = (int, float)
    if not (isinstance(r.id, str) and isinstance(r.mode, str)
            and isinstance(r.step, int) and not isinstance(r.step, bool)
            and isinstance(r.load, num) and isinstance(r.t_intended, num) and isinstance(r.t_sent, num)
            and all(isinstance(x, num) for x in (r.itl if isinstance(r.itl, list) else [None]))
            and all(x is None or isinstance(x, num) for x in (r.t_first, r.t_last))
            and all(x is None or (isinstance(x, int) and not isinstance(x, bool))
                    for x in (r.prompt_tokens, r.output_tokens))
            and isinstance(r.phase, str) and isinstance(r.status, str) and isinstance(r.flags, list)
            and (r.finish_reason is None or isinstance(r.finish_reason, str))
            and (r.replica is None
                 or (isinstance(r.replica, int) and not isinstance(r.replica, bool) and r.replica >= 0))):
        return None
    return r


def read_records(path: Path, damaged: Damaged | None = None) -> Iterator[Record]:
    """Records from a JSON Lines file (or its .gz); damaged lines (a crash mid-write, garbage,
    non-objects, wrong types) are skipped and counted in `damaged`."""
    for lineno, line in enumerate(iter_record_lines(path, damaged), 1):
        r = record_from_line(line)
        if r is None:
            if damaged is not None:
                damaged.add(lineno)
            continue
        yield r
