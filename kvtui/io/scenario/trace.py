"""Production traces (`[workload] trace = "FILE"`): read row by row, summarised, replayed.

Layouts, recognised by the header (CSV) or the first row's keys (JSON lines):
- Azure LLM inference traces 2023 and 2024: `TIMESTAMP,ContextTokens,GeneratedTokens` (ISO times);
- BurstGPT: `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type` (seconds); a row with
  0 response tokens is a failed request: skipped and counted;
- Mooncake JSON lines: `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (chained ids of
  512-token prompt blocks: the same id at the same place is the same prefix);
- the user's own CSV or JSON lines: arrival time, input tokens, output tokens and optionally a session
  (or prefix) id, under the names in `[workload] trace_columns` where they differ from the usual ones.

The file may be gzip, xz or zstandard compressed (recognised by its first bytes, not its name). It is
read as a stream, never whole: memory stays bounded on a week of the Azure trace. A row that cannot be
read is an error naming FILE:LINE. A time window (`trace_start_s`, `trace_end_s`, seconds from the
file's first row) and a row range (`trace_skip_rows`, `trace_rows`) choose part of a long trace.

`summarize` reads the selection once: rows, duration, mean rate, burstiness (the coefficient of
variation of the inter-arrival gaps: 1 for Poisson arrivals, above for bursts), input and output
percentiles (exact up to RESERVOIR rows, else from a uniform reservoir sample of that many, said in
the summary), the input/output correlation and the share of prompt tokens an earlier request of the
trace already sent (Mooncake hash_ids, or a session's earlier prompt: what an unbounded prefix cache
would hit).

`TraceRows` holds the selection's first MAX_REPLAY rows compactly for the prompt factory
(kvtui.runtime.load.workload.PromptFactory), which gives request number k the (input, output) pair of row
k mod N, jointly, and the row's prefix blocks.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
import random
from array import array
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Iterator, NamedTuple, Sequence, cast

from kvtui.errors import UsageError

MOONCAKE_BLOCK = 512  # tokens per hash id in the Mooncake traces
RESERVOIR = 100_000  # rows kept for the summary's percentiles (exact below, a uniform sample above)
MAX_REPLAY = 2_000_000  # rows a replay holds (~20 bytes each, more with hash_ids): far more than a run sends
MAX_SEEN = 1_000_000  # distinct sessions (or sparse block ids) remembered for the shared share (beyond: a lower bound)
MAX_DENSE_ID = 1 << 30  # block ids below this are remembered in a bitmap (Mooncake's count up from 0): ≤ 128 MiB
FORMATS = ("auto", "azure", "burstgpt", "mooncake", "csv", "jsonl")
COLUMN_KEYS = ("time", "input", "output", "session", "time_unit")
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}

# The user's own layout: the names looked for when trace_columns does not name a column.
DEFAULT_COLUMNS: dict[str, tuple[str, ...]] = {
    "time": ("timestamp", "time", "arrival_time", "arrival", "t"),
    "input": ("input_tokens", "prompt_tokens", "input_length", "context_tokens", "input"),
    "output": ("output_tokens", "completion_tokens", "output_length", "generated_tokens", "output"),
    "session": ("session_id", "session", "prefix_id", "conversation_id"),
}
_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BURST = ("Timestamp", "Request tokens", "Response tokens")


def _json_object(path: str, no: int, line: str) -> dict[str, Any]:
    """One JSONL line as an object, or the one-line error naming FILE:LINE."""
    try:
        d = json.loads(line)
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}:{no}: not JSON: {e.msg}") from None
    if not isinstance(d, dict):
        raise TraceError(f"{path}:{no}: each line must be a JSON object")
    return d


@dataclass(frozen=True)
class TraceSpec:
    """What to read: the file, its layout and the selection (from a Workload)."""

    path: str
    format: str = "auto"
    columns: tuple[tuple[str, str], ...] = ()
    start_s: float = 0.0
    end_s: float = 0.0  # 0: to the end
    skip_rows: int = 0
    rows: int = 0  # 0: all

    @classmethod
    def of(cls, w: Any) -> "TraceSpec":
        return cls(path=w.trace, format=w.trace_format, columns=tuple(sorted((w.trace_columns or {}).items())),
                   start_s=w.trace_start_s, end_s=w.trace_end_s, skip_rows=w.trace_skip_rows, rows=w.trace_rows)

    def selection(self) -> str:
        parts = []
        if self.skip_rows or self.rows:
            parts.append(f"rows {self.skip_rows + 1}–{self.skip_rows + self.rows if self.rows else 'end'}")
        if self.start_s or self.end_s:
            parts.append(f"{self.start_s:g} s–{f'{self.end_s:g} s' if self.end_s else 'end'}")
        return ", ".join(parts) or "all rows"


@dataclass
class TraceRow:
    line: int  # the file's line number (1-based, the header included)
    t: float  # seconds since the file's first row
    isl: int
    osl: int
    blocks: list[int] | None = None  # Mooncake hash_ids
    session: str | None = None


class TraceError(UsageError):
    """A trace that cannot be read: one line naming FILE:LINE (exit code 2)."""


# -- opening ------------------------------------------------------------------------------------


def open_text(path: str | Path) -> IO[str]:
    """The file as UTF-8 text, decompressed as it is read (gzip, xz or zstandard by magic bytes)."""
    from kvtui.safeio import input_problem

    p = str(path)
    why = input_problem(p)
    if why:
        raise TraceError(f"{p}: {why}")
    try:
        raw = open(p, "rb")
    except OSError as e:
        raise TraceError(f"{p}: cannot read: {e.strerror or e}")
    head = raw.read(6)
    raw.seek(0)
    stream: IO[bytes]
    if head[:2] == b"\x1f\x8b":
        import gzip

        stream = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))
    elif head == b"\xfd7zXZ\x00":
        import lzma

        stream = cast(IO[bytes], lzma.LZMAFile(raw, "rb"))
    elif head[:4] == b"\x28\xb5\x2f\xfd":
        try:
            import zstandard
        except ImportError:
            raw.close()
            raise TraceError(f"{p}: zstandard-compressed, and the zstandard module is not installed "
                             "(pip install zstandard)")
        stream = cast(IO[bytes], zstandard.ZstdDecompressor().stream_reader(raw, closefd=True))
    else:
        stream = raw
    return io.TextIOWrapper(stream, encoding="utf-8", errors="strict", newline="")


# -- rows ---------------------------------------------------------------------------------------


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool):
        raise ValueError(f"{what} must be a whole number of tokens, got {v!r}")
    if isinstance(v, int):
        n = v
    elif isinstance(v, float) and v.is_integer():
        n = int(v)
    elif isinstance(v, str):
        s = v.strip()
        try:
            n = int(s)
        except ValueError:
            try:
                f = float(s)
            except ValueError:
                raise ValueError(f"{what} must be a whole number of tokens, got {v!r}") from None
            if not f.is_integer():
                raise ValueError(f"{what} must be a whole number of tokens, got {v!r}") from None
            n = int(f)
    else:
        raise ValueError(f"{what} must be a whole number of tokens, got {v!r}")
    if n < 0 or n > 10_000_000:
        raise ValueError(f"{what} must be from 0 to 10,000,000 tokens, got {n}")
    return n


def _time(v: Any, unit: float, what: str) -> float:
    """Seconds (epoch or relative) from a number in `unit` or an ISO 8601 date and time."""
    if isinstance(v, bool):
        raise ValueError(f"{what} must be a time, got {v!r}")
    if isinstance(v, (int, float)):
        x = float(v) * unit
    elif isinstance(v, str):
        s = v.strip()
        try:
            x = float(s) * unit
        except ValueError:
            try:
                d = datetime.fromisoformat(s)
            except ValueError:
                raise ValueError(f"{what} must be a number or an ISO date and time, got {v!r}") from None
            if d.tzinfo is None:
                from datetime import timezone

                d = d.replace(tzinfo=timezone.utc)
            x = d.timestamp()
    else:
        raise ValueError(f"{what} must be a time, got {v!r}")
    if not math.isfinite(x):
        raise ValueError(f"{what} must be finite, got {v!r}")
    return x


_EPOCH = datetime(1970, 1, 1)


def _time_parser(sample: str, unit: float, what: str) -> Any:
    """A parser for one CSV column's times, chosen by its first value (numbers or ISO dates): the
    per-row cost of a week of Azure's rows."""
    try:
        float(sample)
    except ValueError:
        def iso(v: str) -> float:
            try:
                d = datetime.fromisoformat(v)
            except ValueError:
                return _time(v, unit, what)  # says why
            if d.tzinfo is None:
                return (d - _EPOCH).total_seconds()
            return d.timestamp()
        return iso

    def num(v: str) -> float:
        try:
            x = float(v) * unit
        except ValueError:
            return _time(v, unit, what)
        if x != x or x in (math.inf, -math.inf):
            return _time(v, unit, what)
        return x
    return num


def _int_str(v: str, what: str) -> int:
    try:
        n = int(v)
    except ValueError:
        return _int(v, what)
    if n < 0 or n > 10_000_000:
        return _int(v, what)
    return n


def _pick(names: list[str] | set[str], key: str, cols: dict[str, str]) -> str | None:
    if key in cols:
        return cols[key] if cols[key] in names else None
    low = {n.lower().strip(): n for n in names}
    for cand in DEFAULT_COLUMNS[key]:
        if cand in low:
            return low[cand]
    return None


def _layout(keys: list[str], kind: str, fmt: str, cols: dict[str, str], path: str
            ) -> tuple[str, dict[str, str | None]]:
    """(layout, {role: column}) for a CSV header or a first JSON row's keys."""
    ks = set(keys)
    if kind == "csv" and fmt in ("auto", "azure") and set(_AZURE) <= ks:
        return "azure", {"time": "TIMESTAMP", "input": "ContextTokens", "output": "GeneratedTokens", "session": None}
    if kind == "csv" and fmt in ("auto", "burstgpt") and set(_BURST) <= ks:
        return "burstgpt", {"time": "Timestamp", "input": "Request tokens", "output": "Response tokens",
                            "session": None}
    if kind == "json" and fmt in ("auto", "mooncake") and {"timestamp", "input_length", "output_length"} <= ks:
        return "mooncake", {"time": "timestamp", "input": "input_length", "output": "output_length",
                            "session": "hash_ids"}
    if fmt in ("azure", "burstgpt", "mooncake"):
        need = {"azure": _AZURE, "burstgpt": _BURST, "mooncake": ("timestamp", "input_length", "output_length")}[fmt]
        missing = [n for n in need if n not in ks]
        raise TraceError(f"{path}:1: trace_format = {fmt!r}, but the {'header' if kind == 'csv' else 'first row'} "
                         f"lacks {', '.join(missing)}")
    own = "csv" if kind == "csv" else "jsonl"
    roles: dict[str, str | None] = {r: _pick(keys, r, cols) for r in ("time", "input", "output", "session")}
    for role in ("input", "output"):
        if roles[role] is None:
            named = f"the column {cols[role]!r} named in trace_columns is absent" if role in cols else (
                f"no {role} tokens column (looked for {', '.join(DEFAULT_COLUMNS[role])})")
            raise TraceError(f"{path}:1: not a layout kvtui knows (Azure, BurstGPT, Mooncake) and, as your own "
                             f"{own}: {named}; name it in [workload] trace_columns = {{{role} = \"…\"}}")
    if "time" in cols and roles["time"] is None:
        raise TraceError(f"{path}:1: the time column {cols['time']!r} named in trace_columns is absent")
    if "session" in cols and roles["session"] is None:
        raise TraceError(f"{path}:1: the session column {cols['session']!r} named in trace_columns is absent")
    return own, roles


@dataclass
class Reader:
    """Iterates a trace's rows (the selection applied); `layout`, `skipped` and `skip_why` as it goes."""

    spec: TraceSpec
    layout: str = ""
    skipped: int = 0  # failed (BurstGPT: 0 response tokens) or empty (0 input or output tokens) rows
    data_rows: int = 0  # rows read from the file (before the selection)
    skip_why: str = ""

    def __iter__(self) -> Iterator[TraceRow]:
        sp = self.spec
        cols = dict(sp.columns)
        unit = TIME_UNITS.get(cols.pop("time_unit", "s"), 1.0)
        path = sp.path
        with open_text(path) as f:
            try:
                first = ""
                first_no = 0
                for no, line in enumerate(f, start=1):
                    if line.strip():
                        first, first_no = line, no
                        break
                if not first:
                    raise TraceError(f"{path}: the trace is empty")
                if first.lstrip().startswith("{"):
                    yield from self._json(f, first, first_no, cols, unit)
                else:
                    yield from self._csv(f, first, first_no, cols, unit)
            except UnicodeDecodeError as e:
                raise TraceError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start} of a line)")
            except (OSError, EOFError) as e:  # a truncated or corrupt compressed file
                raise TraceError(f"{path}: cannot read past row {self.data_rows}: {e}")
            except Exception as e:
                if type(e).__module__.startswith("zstandard"):
                    raise TraceError(f"{path}: cannot read past row {self.data_rows}: {e}")
                raise

    def _select(self, rows: Iterator[TraceRow]) -> Iterator[TraceRow]:
        sp = self.spec
        t0: float | None = None
        prev = -math.inf
        end_row = sp.skip_rows + sp.rows if sp.rows else None
        for r in rows:
            self.data_rows += 1
            if t0 is None:
                t0 = r.t
            if r.t < prev:
                raise TraceError(f"{sp.path}:{r.line}: the time goes back ({r.t - t0:.3f} s after the first row, "
                                 f"the row before at {prev - t0:.3f} s): a trace is in arrival order")
            prev = r.t
            r.t -= t0
            i = self.data_rows - 1
            if i < sp.skip_rows:
                continue
            if end_row is not None and i >= end_row:
                return
            if sp.end_s and r.t >= sp.end_s:
                return
            if r.t < sp.start_s:
                continue
            if r.isl < 1 or r.osl < 1:
                self.skipped += 1
                continue
            yield r

    def _csv(self, f: IO[str], first: str, first_no: int, cols: dict[str, str], unit: float) -> Iterator[TraceRow]:
        path = self.spec.path
        header = next(csv.reader([first]))
        header = [h.strip().lstrip("\ufeff") for h in header]
        self.layout, roles = _layout(header, "csv", self.spec.format, cols, path)
        if self.layout == "burstgpt":
            self.skip_why = "failed requests (0 response tokens)"
        else:
            self.skip_why = "rows with 0 input or 0 output tokens"
        idx = {r: (header.index(c) if c is not None else None) for r, c in roles.items()}
        ti, si = idx["time"], idx["session"]
        ii, oi = idx["input"] or 0, idx["output"] or 0  # never None: _layout refuses a header without them
        width = len(header)
        reader = csv.reader(f)
        tunit = 1.0 if self.layout in ("azure", "burstgpt") else unit

        tname, iname, oname = (header[ti] if ti is not None else ""), header[ii], header[oi]

        def rows() -> Iterator[TraceRow]:
            parse_t = None
            for rec in reader:
                no = first_no + reader.line_num
                if not rec or (len(rec) == 1 and not rec[0].strip()):
                    continue
                if len(rec) != width:
                    raise TraceError(f"{path}:{no}: {len(rec)} fields, the header has {width}")
                try:
                    if ti is None:
                        t = 0.0
                    else:
                        if parse_t is None:
                            parse_t = _time_parser(rec[ti].strip(), tunit, tname)
                        t = parse_t(rec[ti])
                    isl = _int_str(rec[ii], iname)
                    osl = _int_str(rec[oi], oname)
                except ValueError as e:
                    raise TraceError(f"{path}:{no}: {e}") from None
                yield TraceRow(no, t, isl, osl, None, rec[si] if si is not None and rec[si] != "" else None)

        try:
            yield from self._select(rows())
        except csv.Error as e:
            raise TraceError(f"{path}:{first_no + reader.line_num}: not CSV: {e}") from None

    def _json(self, f: IO[str], first: str, first_no: int, cols: dict[str, str], unit: float) -> Iterator[TraceRow]:
        path = self.spec.path
        row0 = _json_object(path, first_no, first)
        self.layout, roles = _layout(list(row0), "json", self.spec.format, cols, path)
        self.skip_why = "rows with 0 input or 0 output tokens"
        moon = self.layout == "mooncake"
        tk, sk = roles["time"], roles["session"]
        ik, ok = roles["input"] or "", roles["output"] or ""  # never None: _layout refuses a row without them
        tunit = 1e-3 if moon else unit

        def parse(no: int, line: str) -> TraceRow:
            d = _json_object(path, no, line)
            try:
                for key in (tk, ik, ok):
                    if key is not None and key not in d:
                        raise ValueError(f"no {key!r}")
                t = _time(d[tk], tunit, tk) if tk is not None else 0.0
                isl = _int(d[ik], ik)
                osl = _int(d[ok], ok)
                blocks = None
                sess = None
                if moon:
                    h = d.get("hash_ids")
                    if h is not None:
                        if not isinstance(h, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                                              for x in h):
                            raise ValueError("hash_ids must be a list of integers")
                        blocks = h
                elif sk is not None and d.get(sk) is not None:
                    sess = str(d[sk])
            except ValueError as e:
                raise TraceError(f"{path}:{no}: {e}") from None
            return TraceRow(no, t, isl, osl, blocks, sess)

        def rows() -> Iterator[TraceRow]:
            yield parse(first_no, first)
            for no, line in enumerate(f, start=first_no + 1):
                if not line.strip():
                    continue
                yield parse(no, line)

        yield from self._select(rows())


# -- the summary --------------------------------------------------------------------------------


class _Reservoir:
    """A uniform sample of at most `cap` values (Algorithm R, seeded): exact percentiles below cap."""

    def __init__(self, cap: int, seed: int):
        self.cap = cap
        self.n = 0
        self.a = array("l")
        self.b = array("l")
        self.rng = random.Random(seed)

    def add(self, x: int, y: int) -> None:
        self.n += 1
        if len(self.a) < self.cap:
            self.a.append(x)
            self.b.append(y)
            return
        j = self.rng.randrange(self.n)
        if j < self.cap:
            self.a[j] = x
            self.b[j] = y


def _pct(sorted_vals: list[int], q: float) -> float | None:
    """The q-th percentile (linear interpolation, as numpy's default)."""
    if not sorted_vals:
        return None
    pos = (len(sorted_vals) - 1) * q / 100
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


class _IdSet:
    """Block ids seen: a bitmap for ids counted up from 0 (Mooncake's: 1 bit each), a bounded set else."""

    def __init__(self) -> None:
        self.bits = bytearray()
        self.sparse: set[int] = set()

    def __contains__(self, h: int) -> bool:
        if 0 <= h < MAX_DENSE_ID:
            i = h >> 3
            return i < len(self.bits) and bool(self.bits[i] & (1 << (h & 7)))
        return h in self.sparse

    def add(self, h: int) -> bool:
        """Remember `h`; False when it could not be (the sparse set is full)."""
        if 0 <= h < MAX_DENSE_ID:
            i = h >> 3
            if i >= len(self.bits):
                self.bits.extend(bytes(max(i + 1 - len(self.bits), len(self.bits))))
            self.bits[i] |= 1 << (h & 7)
            return True
        if len(self.sparse) >= MAX_SEEN:
            return False
        self.sparse.add(h)
        return True


class _Shared:
    """Prompt tokens an earlier request of the trace already sent (an unbounded prefix cache's hits)."""

    def __init__(self) -> None:
        self.seen = _IdSet()
        self.sessions: dict[str, int] = {}
        self.tokens = 0
        self.shared = 0
        self.full = False  # MAX_SEEN reached: later ids are not remembered (the share a lower bound)
        self.any = False

    def add(self, r: TraceRow) -> None:
        self.tokens += r.isl
        if r.blocks is not None:
            self.any = True
            left = r.isl
            for h in r.blocks:
                n = min(MOONCAKE_BLOCK, left)
                if n <= 0:
                    break
                left -= n
                if h in self.seen:
                    self.shared += n
                elif not self.seen.add(h):
                    self.full = True
        elif r.session is not None:
            self.any = True
            before = self.sessions.get(r.session)
            if before is not None:
                self.shared += min(before, r.isl)
                if r.isl > before:
                    self.sessions[r.session] = r.isl
            elif len(self.sessions) < MAX_SEEN:
                self.sessions[r.session] = r.isl
            else:
                self.full = True


def _dist(vals: list[int], mean: float, var: float, top: int) -> dict[str, Any]:
    return {"mean": round(mean, 2), "std": round(math.sqrt(max(0.0, var)), 2), "p50": _pct(vals, 50),
            "p95": _pct(vals, 95), "p99": _pct(vals, 99), "max": top}


def summarize(spec: TraceSpec, seed: int = 0) -> dict[str, Any]:
    """One pass over the selection: the figures a capacity owner checks before measuring with it."""
    rd = Reader(spec)
    res = _Reservoir(RESERVOIR, seed)
    n = 0
    t_first = t_last = 0.0
    gaps = 0
    g_mean = g_m2 = 0.0
    sx = sy = sxx = syy = sxy = 0.0
    prev_t: float | None = None
    sh = _Shared()
    isl_max = osl_max = tok_max = 0
    for r in rd:
        if n == 0:
            t_first = r.t
        n += 1
        t_last = r.t
        if prev_t is not None:  # Welford on the inter-arrival gaps
            g = r.t - prev_t
            gaps += 1
            d = g - g_mean
            g_mean += d / gaps
            g_m2 += d * (g - g_mean)
        prev_t = r.t
        x, y = r.isl, r.osl
        sx += x
        sy += y
        sxx += x * x
        syy += y * y
        sxy += x * y
        isl_max = max(isl_max, x)
        osl_max = max(osl_max, y)
        tok_max = max(tok_max, x + y)
        res.add(x, y)
        sh.add(r)
    if n == 0:
        sel = f" in the selection ({spec.selection()})" if spec.selection() != "all rows" else ""
        raise TraceError(f"{spec.path}: no replayable row{sel} ({rd.data_rows} rows read, {rd.skipped} skipped: "
                         f"{rd.skip_why or 'none'})")
    duration = t_last - t_first
    a, b = sorted(res.a), sorted(res.b)
    exact = res.n <= res.cap
    vx = sxx / n - (sx / n) ** 2
    vy = syy / n - (sy / n) ** 2
    corr = ((sxy / n - (sx / n) * (sy / n)) / math.sqrt(vx * vy)) if vx > 0 and vy > 0 else None
    sd = math.sqrt(g_m2 / gaps) if gaps > 1 else None
    out: dict[str, Any] = {
        "file": os.path.basename(spec.path),
        "path": spec.path,
        "layout": rd.layout,
        "selection": spec.selection(),
        "rows": n,
        "rows_read": rd.data_rows,
        "skipped": rd.skipped,
        "skipped_why": rd.skip_why,
        "duration_s": round(duration, 3),
        "mean_rate_rps": round((n - 1) / duration, 4) if duration > 0 else None,
        "interarrival_cv": round(sd / g_mean, 3) if sd is not None and g_mean > 0 else None,
        "input_tokens": _dist(a, sx / n, vx, isl_max),
        "output_tokens": _dist(b, sy / n, vy, osl_max),
        "max_request_tokens": tok_max,
        "io_correlation": round(corr, 4) if corr is not None else None,
        "percentiles": "exact" if exact else f"estimated from a uniform reservoir sample of {res.cap:,} rows",
        "prefix_shared": round(sh.shared / sh.tokens, 4) if sh.any and sh.tokens else None,
        "prefix_source": ("hash_ids" if rd.layout == "mooncake" else "session ids") if sh.any else None,
    }
    if sh.full:
        out["prefix_note"] = (f"more than {MAX_SEEN:,} distinct sessions (or block ids beyond {MAX_DENSE_ID:,}): "
                              "the shared share is a lower bound")
    return out


@functools.lru_cache(maxsize=8)
def _cached_summary(spec: TraceSpec, stamp: tuple[int, int], seed: int) -> dict[str, Any]:
    return summarize(spec, seed)


def summary(spec: TraceSpec, seed: int = 0) -> dict[str, Any]:
    """`summarize`, once per file version in this process (the scenario's checks and the run both ask)."""
    try:
        st = os.stat(spec.path)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = (0, 0)
    return dict(_cached_summary(spec, stamp, seed))


def describe(s: dict[str, Any]) -> list[str]:
    """The summary in a few lines (headless output, reports)."""
    def q(d: dict[str, Any]) -> str:
        return " / ".join(f"{d[k]:,.0f}" if d.get(k) is not None else "—" for k in ("p50", "p95", "p99"))

    rate = f"{s['mean_rate_rps']:.3g} req/s" if s.get("mean_rate_rps") else "— req/s"
    cv = f"{s['interarrival_cv']:.2f}" if s.get("interarrival_cv") is not None else "—"
    skipped = f", {s['skipped']:,} skipped ({s['skipped_why']})" if s.get("skipped") else ""
    when = (f" over {s['duration_s']:,.1f} s, mean {rate}, burstiness (inter-arrival CV) {cv}" if s.get("duration_s")
            else ", no arrival times (lengths only)")
    lines = [f"trace {s['file']} ({s['layout']}, {s['selection']}): {s['rows']:,} rows{skipped}{when}",
             f"trace input tokens p50/p95/p99 {q(s['input_tokens'])}, output {q(s['output_tokens'])}"
             f" (mean {s['input_tokens']['mean']:,.0f} / {s['output_tokens']['mean']:,.0f}, "
             f"correlation {s['io_correlation'] if s.get('io_correlation') is not None else '—'}; "
             f"percentiles {s['percentiles']})"]
    if s.get("prefix_shared") is not None:
        lines.append(f"trace prompt tokens shared with an earlier request ({s['prefix_source']}): "
                     f"{s['prefix_shared']:.1%}")
    return lines


# -- replay -------------------------------------------------------------------------------------


@dataclass
class TraceRows:
    """The selection's first MAX_REPLAY rows, compact: lengths, times, block ids and sessions."""

    spec: TraceSpec
    isl: array = field(default_factory=lambda: array("l"))
    osl: array = field(default_factory=lambda: array("l"))
    t: array = field(default_factory=lambda: array("d"))
    boff: array = field(default_factory=lambda: array("q", [0]))  # row i's blocks: bids[boff[i]:boff[i+1]]
    bids: array = field(default_factory=lambda: array("q"))
    sess: array = field(default_factory=lambda: array("l"))  # interned session id (-1: none)
    truncated: bool = False
    sessions: int = 0  # distinct session ids

    @classmethod
    def load(cls, spec: TraceSpec, limit: int = MAX_REPLAY) -> "TraceRows":
        out = cls(spec)
        names: dict[str, int] = {}
        for r in Reader(spec):
            if len(out.isl) >= limit:
                out.truncated = True
                break
            out.isl.append(r.isl)
            out.osl.append(r.osl)
            out.t.append(r.t)
            if r.blocks:
                out.bids.extend(h & ((1 << 63) - 1) for h in r.blocks)
            out.boff.append(len(out.bids))
            out.sess.append(names.setdefault(r.session, len(names)) if r.session is not None else -1)
        out.sessions = len(names)
        if not out.isl:
            raise TraceError(f"{spec.path}: no replayable row in the selection ({spec.selection()})")
        return out

    def __len__(self) -> int:
        return len(self.isl)

    def row(self, counter: int) -> tuple[int, int, list[int] | None, int]:
        """(input, output, block ids or None, session or -1) of request `counter`: row counter mod N."""
        i = counter % len(self.isl)
        a, b = self.boff[i], self.boff[i + 1]
        return self.isl[i], self.osl[i], (list(self.bids[a:b]) if b > a else None), self.sess[i]

    @property
    def shares_prefixes(self) -> bool:
        return len(self.bids) > 0 or self.sessions > 0


@functools.lru_cache(maxsize=4)
def _cached_rows(spec: TraceSpec, stamp: tuple[int, int]) -> TraceRows:
    return TraceRows.load(spec)


def replay_rows(spec: TraceSpec) -> TraceRows:
    """`TraceRows.load`, once per file version in this process."""
    try:
        st = os.stat(spec.path)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = (0, 0)
    return _cached_rows(spec, stamp)


# -- open-loop replay of the trace's own arrival times (`[ramp] load = "trace"`) ---------------

MIN_FACTOR = 0.01  # a speed-up factor's sane range (`[ramp] start/max` under load = "trace")
MAX_FACTOR = 1000.0


class Arrival(NamedTuple):
    """One request of a trace step: sent `at` seconds after the step began; `k` its index in the
    step (its request counter's offset), `row` the selection's row it replays, with its lengths and
    Mooncake block ids (None: no blocks)."""

    at: float
    k: int
    row: int
    isl: int
    osl: int
    blocks: tuple[int, ...] | None


def trace_period(t: Sequence[float]) -> float:
    """The seconds one pass over the rows lasts at 1×: first to last arrival plus one mean gap (the
    wrap-around to the first row comes one mean gap after the last). ValueError: no rate to scale."""
    n = len(t)
    span = (t[n - 1] - t[0]) if n else 0.0
    if n < 2 or span <= 0:
        raise ValueError("a trace replay needs at least two rows at different times (the trace has no rate)")
    return span + span / (n - 1)


def trace_rate(t: Sequence[float]) -> float:
    """The rate a replay at 1× sends: rows per pass (req/s)."""
    return len(t) / trace_period(t)


def replay_arrivals(rows: TraceRows, factor: float, duration_s: float | None = None,
                    first: int = 0) -> Iterator[Arrival]:
    """The one arrival schedule of a trace step, a pure function of the rows (the selection already
    chosen), the speed-up factor and the step's duration (None: as long as it is read; a transport
    stops reading when its step ends). Every step replays the selection from its first row (each
    factor is judged on the same traffic, whatever the search's order), at the recorded gaps divided
    by `factor`; past the last row it wraps around to the first, one mean gap later. `first` skips
    that many arrivals (a worker that takes every n-th starts at its own)."""
    if not factor > 0:
        raise ValueError(f"a speed-up factor must be > 0, got {factor!r}")
    t = rows.t
    n = len(t)
    period = trace_period(t)
    t0 = t[0]
    k = first
    while True:
        p, i = divmod(k, n)
        at = (p * period + (t[i] - t0)) / factor
        if duration_s is not None and at >= duration_s:
            return
        a, b = rows.boff[i], rows.boff[i + 1]
        yield Arrival(at, k, i, rows.isl[i], rows.osl[i], tuple(rows.bids[a:b]) if b > a else None)
        k += 1


def replay_schedule(rows: TraceRows, factor: float, duration_s: float) -> list[Arrival]:
    """`replay_arrivals` up to `duration_s`, whole."""
    return list(replay_arrivals(rows, factor, duration_s))


def aligned_counter(base: int, n_rows: int) -> int:
    """The first request counter ≥ `base` whose row (counter mod N, as `TraceRows.row` and the prompt
    factory read it) is the selection's first: counter = aligned + k replays arrival k's row."""
    return -(-base // n_rows) * n_rows
