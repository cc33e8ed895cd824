"""The records file: every request's record (kvtui.core.record.Record) as one JSON line, appended
as the run goes, read back whole or line by line (a damaged line is counted, never a crash)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Iterator

from kvtui.core.record import Record


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
    from kvtui.io.records_cols import cols_path, decode_lines

    cols = cols_path(path)
    try:
        if not path.exists() and not gz.exists() and cols.exists():
            # the compact archive of a published run (kvtui/io/records_cols.py): the same lines
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
