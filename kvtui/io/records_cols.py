"""The compact archive of a records file: `X.records.jsonl.cols.xz` (the published runs' records; since issue 49 in git
history and, cut small, in tests/fixtures/records).

A records file is mostly inter-token gaps (a 256-token answer carries 255 floats of six
decimals). The archive stores the records as columns, each in the cheapest exact form:

    xz( header line (JSON: schema, records, exact, coarse, body_bytes, coarse_us) \\n
        body:  JSON {"keys": [key orders], "kt": [key order per record], "cols": {key: [values]}}
               times (t_intended, t_sent, t_first, t_last, dispatch_delay) as whole microseconds,
               each a delta from the field it follows (t_intended from the record before it,
               t_sent from t_intended, t_first from t_sent, t_last from t_first); ids
               "salt-counter" as the salt and the counter's delta; a value that is not whole
               microseconds is kept as it was, wrapped in a one-item list.
        exact: uint32 little-endian, gaps in microseconds (records with "itl": n ≥ 0)
        coarse: uint16 little-endian, token times in ms steps (records with "itl": -n) )

What each costs on the published runs, per gap: an exact gap 1.0–1.4 bytes (its low byte is
the client's scheduling noise, incompressible), a coarse one 0.08; the body 32 bytes a record.

Exact (every gap, to the microsecond, as kvtui wrote it) for the requests a step's figures are
computed from (phase "window": ITL percentiles, TTFT, TPOT, E2E, goodput). Warm-up and tail
requests enter a step only through how many of their tokens fall inside its measurement
window (the step's tokens/s); their token times are kept to the millisecond (the offset from
t_first rounded, so errors never add up), and only where that leaves the count inside the
window, and the token count, unchanged for their step (`coarse_ok`); any other record stays
exact. A coarse record's line says so (`"itl_resolution_s": 0.001` after its itl), so no reader
mistakes it for a measurement to the microsecond. Re-evaluation under any SLO, replay and
export therefore give the same bytes with either form (kvtui/report/archive.py checks it on
every archive it writes).

The reader gives back JSON lines, so everything downstream (replay, export, resume,
re-evaluation) is unchanged. Version 1 archives (every gap exact, JSON body) still read.
"""

from __future__ import annotations

import array
import json
import lzma
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

SCHEMA = "kvtui.records-cols/2"
SCHEMA_V1 = "kvtui.records-cols/1"
SUFFIX = ".cols.xz"
COARSE_US = 1000  # the step of a warm-up or tail request's token times: 1 ms
# each time is stored as the delta from this field of the same record (None: the record before's t_intended)
_BASE = {"t_intended": None, "t_sent": "t_intended", "t_first": "t_sent", "t_last": "t_first", "dispatch_delay": ""}
_ID = re.compile(r"(.*)-([1-9][0-9]*|0)")
# (record, its itl at COARSE_US, its itl as measured) -> whether the coarse one changes nothing
CoarseOk = Callable[[dict[str, Any], list[float], list[float]], bool]


def cols_path(records: Path) -> Path:
    """Where the compact form of `records` (X.records.jsonl) lives."""
    records = Path(records)
    base = records.name[:-3] if records.name.endswith(".gz") else records.name
    return records.with_name(base + SUFFIX)


def _us(v: Any) -> int | None:
    """v as whole microseconds when that gives v back exactly (a float kvtui wrote), else None."""
    if isinstance(v, float) and 0 <= v < 4.2e9:
        u = round(v * 1e6)
        if u / 1e6 == v:
            return u
    return None


def _exact_gaps(itl: Any) -> list[int] | None:
    if not isinstance(itl, list) or not all(isinstance(v, float) and 0 <= v < 4294 for v in itl):
        return None
    us = [round(v * 1e6) for v in itl]
    return us if all(u / 1e6 == v for u, v in zip(us, itl)) else None


def _coarse_steps(d: dict[str, Any], gaps_us: list[int], coarse_ok: CoarseOk | None) -> list[int] | None:
    """The token times in COARSE_US steps, when `coarse_ok` says that changes nothing a step computes."""
    if coarse_ok is None or d.get("phase") == "window" or not gaps_us:
        return None
    steps, prev, t = [], 0, 0
    for g in gaps_us:
        t += g
        q = round(t / COARSE_US)  # the offset from t_first rounded: the errors never add up
        if not 0 <= q - prev <= 0xFFFF:
            return None
        steps.append(q - prev)
        prev = q
    return steps if coarse_ok(d, _coarse_itl(steps), [g / 1e6 for g in gaps_us]) else None


def _coarse_itl(steps: Iterable[int]) -> list[float]:
    return [s * COARSE_US / 1e6 for s in steps]


def encode(lines: Iterable[str], coarse_ok: CoarseOk | None = None) -> bytes:
    """The archive of these JSON lines. `coarse_ok` lets a warm-up or tail request keep its token
    times to the ms where it says so (kvtui/report/archive.py: where its step's figures stay the
    same); without it every gap is exact."""
    orders: dict[tuple[str, ...], int] = {}
    kt: list[int] = []
    cols: dict[str, list[Any]] = {}
    exact, coarse = array.array("I"), array.array("H")
    prev_t, prev_id = 0, 0
    n = 0
    for line in lines:
        if not line.strip():
            continue
        d = json.loads(line)
        n += 1
        kt.append(orders.setdefault(tuple(d), len(orders)))
        us: dict[str, int] = {}  # the times already stored for this record, as the decoder will know them
        for k, v in d.items():
            out: Any = v
            if k in _BASE and (u := _us(v)) is not None:
                base = _BASE[k]
                out = u - (prev_t if base is None else us.get(base, 0) if base else 0)
                us[k] = u
                if base is None:
                    prev_t = u
            elif k == "id" and isinstance(v, str) and (m := _ID.fullmatch(v)):
                cols.setdefault("id.salt", []).append(m.group(1))
                out = int(m.group(2)) - prev_id
                prev_id = int(m.group(2))
            elif k == "itl":
                g = _exact_gaps(v)
                q = _coarse_steps(d, g, coarse_ok) if g is not None else None
                if q is not None:
                    coarse.extend(q)
                    out = -len(q)
                elif g is not None:
                    exact.extend(g)
                    out = len(g)
            if k in _BASE or k == "id" or k == "itl":
                out = out if isinstance(out, int) and not isinstance(out, bool) and out is not v else [v]
            cols.setdefault(k, []).append(out)
    if sys.byteorder != "little":
        exact.byteswap()
        coarse.byteswap()
    body = json.dumps({"keys": [list(o) for o in orders], "kt": kt, "cols": cols}, separators=(",", ":")).encode()
    head = json.dumps({"schema": SCHEMA, "records": n, "exact": len(exact), "coarse": len(coarse),
                       "body_bytes": len(body), "coarse_us": COARSE_US}).encode()
    return lzma.compress(head + b"\n" + body + exact.tobytes() + coarse.tobytes(), preset=9 | lzma.PRESET_EXTREME)


def decode_lines(data: bytes) -> Iterator[str]:
    """The records' JSON lines from an archive (version 1 or 2)."""
    from kvtui.safeio import SNAPSHOT_CAP, loads

    dec = lzma.LZMADecompressor()  # bounded: an archive cannot unpack past what a records file may be
    raw = dec.decompress(data, max_length=SNAPSHOT_CAP + 1)
    if len(raw) > SNAPSHOT_CAP:
        raise ValueError(f"unpacks past {SNAPSHOT_CAP >> 20} MiB: not a records archive")
    nl = raw.index(b"\n")
    head = loads(raw[:nl])
    if not isinstance(head, dict):
        raise ValueError("not a records archive")
    if head.get("schema") == SCHEMA_V1:
        yield from _decode_v1(head, raw[nl + 1:])
        return
    if head.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} file")
    start = nl + 1
    end = start + head["body_bytes"]
    body = loads(raw[start:end], max_string=SNAPSHOT_CAP)  # depth bounded; its columns may be long
    if not isinstance(body, dict):
        raise ValueError("not a records archive")
    exact = array.array("I")
    exact.frombytes(raw[end:end + 4 * head["exact"]])
    coarse = array.array("H")
    coarse.frombytes(raw[end + 4 * head["exact"]:end + 4 * head["exact"] + 2 * head["coarse"]])
    if sys.byteorder != "little":
        exact.byteswap()
        coarse.byteswap()
    if len(exact) != head["exact"] or len(coarse) != head["coarse"]:
        raise ValueError("gap column cut short")
    step_s = head.get("coarse_us", COARSE_US) / 1e6
    orders = [tuple(o) for o in body["keys"]]
    cols = body["cols"]
    at = {k: 0 for k in cols}
    ke = kc = 0
    prev_t = prev_id = 0
    for kti in body["kt"]:
        d: dict[str, Any] = {}
        us: dict[str, int] = {}
        for k in orders[kti]:
            v = cols[k][at[k]]
            at[k] += 1
            if k in _BASE or k == "id" or k == "itl":
                if isinstance(v, list):
                    d[k] = v[0]
                    continue
                if k in _BASE:
                    base = _BASE[k]
                    u = v + (prev_t if base is None else us.get(base, 0) if base else 0)
                    if base is None:
                        prev_t = u
                    us[k] = u
                    v = u / 1e6
                elif k == "id":
                    salt = cols["id.salt"][at["id.salt"]]
                    at["id.salt"] += 1
                    prev_id += v
                    v = f"{salt}-{prev_id}"
                elif v >= 0:
                    n = v
                    v = [g / 1e6 for g in exact[ke:ke + n]]
                    ke += n
                else:
                    d[k] = [s * step_s for s in coarse[kc:kc - v]]
                    d["itl_resolution_s"] = step_s
                    kc -= v
                    continue
            d[k] = v
        yield json.dumps(d, separators=(",", ":")) + "\n"


def _decode_v1(head: dict[str, Any], raw: bytes) -> Iterator[str]:
    """Version 1: a JSON array of records with "itl_n", then every gap exact (uint32 µs)."""
    body = json.loads(raw[:head["body_bytes"]])
    gaps = array.array("I")
    gaps.frombytes(raw[head["body_bytes"]:])
    if sys.byteorder != "little":
        gaps.byteswap()
    if len(gaps) != head["gaps"]:
        raise ValueError("gap column cut short")
    k = 0
    for d in body:
        n = d.pop("itl_n", None)
        if n is not None:
            out = {}
            for key, v in d.items():  # itl sits after t_last, where kvtui writes it
                out[key] = v
                if key == "t_last":
                    out["itl"] = [g / 1e6 for g in gaps[k:k + n]]
            out.setdefault("itl", [g / 1e6 for g in gaps[k:k + n]])
            d = out
            k += n
        yield json.dumps(d, separators=(",", ":")) + "\n"


def same_records(original: list[str], archived: list[str]) -> bool:
    """Whether an archive gave the records back: every key and value, in order, but the itl of a
    coarse record (checked against its step window by `encode`), whose token count is kept."""
    if len(original) != len(archived):
        return False
    for a, b in zip(original, archived):
        da, db = json.loads(a), json.loads(b)
        if "itl_resolution_s" in db:
            db.pop("itl_resolution_s")
            if len(db.get("itl") or []) != len(da.get("itl") or []):
                return False
            db["itl"] = da.get("itl")
        if list(da.items()) != list(db.items()):
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    """python -m kvtui.io.records_cols X.records.jsonl[.gz] …: X.records.jsonl.cols.xz beside each, every
    gap exact (python -m kvtui.report.archive X.json archives a run with its snapshot, ms warm-up times)."""
    import gzip

    from kvtui.safeio import atomic_write

    for name in (sys.argv[1:] if argv is None else argv):
        p = Path(name)
        opener = gzip.open(p, "rt", encoding="utf-8") if p.suffix == ".gz" else open(p, encoding="utf-8")
        with opener as f:
            lines = [ln for ln in f if ln.strip()]
        data = encode(lines)
        if [json.loads(a) for a in decode_lines(data)] != [json.loads(b) for b in lines]:
            print(f"{p}: the compact form does not give the records back; not written", file=sys.stderr)
            return 1
        out = cols_path(p)
        atomic_write(out, data)  # regular files only (kvtui.safeio)
        print(f"{p}: {p.stat().st_size:,} → {out.name} {len(data):,} bytes ({len(lines):,} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
