"""A compact, lossless form of an archived records file: `X.records.jsonl.cols.xz`.

Published runs keep every request's record (docs/results), and their inter-token gaps are
most of the bytes: a 256-token answer carries 255 floats of six decimals. Here each record's
`itl` list becomes whole microseconds in one uint32 column, and the rest stays JSON:

    xz( header line (JSON: schema, records, gaps, body bytes) \\n
        body: JSON array of the records, each with "itl" replaced by "itl_n" (its length)
        gaps: uint32 little-endian, the concatenated itl lists in microseconds )

Lossless by construction: a record goes into the column only when every gap survives the
round trip (µs / 1e6 == the float read from the JSON, true for the six-decimal gaps kvtui
writes); otherwise its `itl` stays in the JSON as it was. The reader gives back the records'
JSON lines, so everything downstream (replay, export, resume, re-evaluation) is unchanged:
`kvtui export` of a snapshot gives the same bytes with either form beside it.
"""

from __future__ import annotations

import array
import json
import lzma
import sys
from pathlib import Path
from typing import Iterable, Iterator

SCHEMA = "kvtui.records-cols/1"
SUFFIX = ".cols.xz"


def cols_path(records: Path) -> Path:
    """Where the compact form of `records` (X.records.jsonl) lives."""
    records = Path(records)
    base = records.name[:-3] if records.name.endswith(".gz") else records.name
    return records.with_name(base + SUFFIX)


def encode(lines: Iterable[str]) -> bytes:
    body = []
    gaps = array.array("I")
    for line in lines:
        if not line.strip():
            continue
        d = json.loads(line)
        itl = d.get("itl")
        if isinstance(itl, list) and all(isinstance(v, float) and 0 <= v < 4294 for v in itl):
            us = [round(v * 1e6) for v in itl]
            if all(u / 1e6 == v for u, v in zip(us, itl)):
                del d["itl"]
                d["itl_n"] = len(us)
                gaps.extend(us)
        body.append(d)
    if sys.byteorder != "little":
        gaps.byteswap()
    b = json.dumps(body, separators=(",", ":")).encode()
    head = json.dumps({"schema": SCHEMA, "records": len(body), "gaps": len(gaps), "body_bytes": len(b)}).encode()
    return lzma.compress(head + b"\n" + b + gaps.tobytes(), preset=9 | lzma.PRESET_EXTREME)


def decode_lines(data: bytes) -> Iterator[str]:
    raw = lzma.decompress(data)
    nl = raw.index(b"\n")
    head = json.loads(raw[:nl])
    if head.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} file")
    start = nl + 1
    body = json.loads(raw[start:start + head["body_bytes"]])
    gaps = array.array("I")
    gaps.frombytes(raw[start + head["body_bytes"]:])
    if sys.byteorder != "little":
        gaps.byteswap()
    if len(gaps) != head["gaps"]:
        raise ValueError("gap column cut short")
    k = 0
    for d in body:
        n = d.pop("itl_n", None)
        if n is not None:
            # keep the key order of the original line: itl sits where kvtui writes it
            d = _with_itl(d, [g / 1e6 for g in gaps[k:k + n]])
            k += n
        yield json.dumps(d, separators=(",", ":")) + "\n"


def _with_itl(d: dict, itl: list[float]) -> dict:
    out = {}
    for key, v in d.items():
        out[key] = v
        if key == "t_last":
            out["itl"] = itl
    if "itl" not in out:
        out["itl"] = itl
    return out


def main(argv: list[str] | None = None) -> int:
    """python -m kvtui.load.records_cols X.records.jsonl[.gz] …: write X.records.jsonl.cols.xz beside each."""
    import gzip

    for name in (sys.argv[1:] if argv is None else argv):
        p = Path(name)
        opener = gzip.open(p, "rt", encoding="utf-8") if p.suffix == ".gz" else open(p, encoding="utf-8")
        with opener as f:
            lines = [ln for ln in f if ln.strip()]
        data = encode(lines)
        back = list(decode_lines(data))
        if [json.loads(a) for a in back] != [json.loads(b) for b in lines]:
            print(f"{p}: the compact form does not give the records back; not written", file=sys.stderr)
            return 1
        out = cols_path(p)
        out.write_bytes(data)
        print(f"{p}: {p.stat().st_size:,} → {out.name} {len(data):,} bytes ({len(lines):,} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
