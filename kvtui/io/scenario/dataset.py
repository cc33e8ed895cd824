"""A scenario's dataset file (`[workload] dataset`): JSON Lines of prompts, read and checked row by
row when the scenario loads, so a bad row is a scenario error before any server starts. The load
generator (kvtui.runtime.load.workload.PromptFactory) sends its rows.

Streamed, with bounded memory: a 300 MB dataset (under the 2 GiB cap) once ended in a MemoryError
(the whole text, its lines and every row's dict at once, in every load worker), and a 2 GB sparse
file took 23 s and 3.9 GB to say "line 1: not JSON". The file is read a line at a time (a line at
most MAX_LINE_BYTES); what is kept is each row's offset and length (12 bytes a row), and a row is
read back from the file when it is sent. A line that cannot open a JSON object is refused at once.
"""

from __future__ import annotations

import json
import os
import re
from array import array
from typing import Any

from kvtui.errors import UsageError

_JSON_STARTS = frozenset(bytes([c]) for c in b'{["-0123456789tfnNI')
MAX_LINE_BYTES = 64 << 20  # one row (a long prompt's messages, its ids) is far below this
_SCANS: dict[tuple[Any, ...], tuple[array, array]] = {}  # (path, inode, size, mtime) → checked rows


class Dataset:
    """JSON Lines prompts: {"prompt": str} | {"messages": [...]} | {"prompt_ids": [int]}, optional "output_tokens".

    `rows` reads like a list of the rows' dicts (len, index), each read from the file on demand."""

    def __init__(self, path: str):
        self.path = path
        from kvtui.safeio import DATASET_CAP, open_regular

        fd = open_regular(path, "dataset", DATASET_CAP)  # regular file, capped; a FIFO or a device refused
        st = os.fstat(fd)
        key = (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key in _SCANS:
            os.close(fd)
            offsets, lengths = _SCANS[key]
        else:
            with os.fdopen(fd, "rb", buffering=1 << 20) as f:
                offsets, lengths = _scan(path, f)
            _SCANS.clear()  # one dataset at a time: the cache never grows
            _SCANS[key] = (offsets, lengths)
        if not offsets:
            raise UsageError(f"{path}: dataset is empty")
        self.rows = _Rows(path, offsets, lengths)


_BLANK = re.compile(rb"[ \t\r\n\f\v]*")
BLOCK = 1 << 20


def _scan(path: str, f: Any) -> tuple[array, array]:
    """Every line checked, in one pass of 1 MiB blocks (blank lines skipped at C speed: a file of
    newlines is no Python loop per line); the rows' (offsets, lengths)."""
    offsets, lengths = array("q"), array("l")
    buf, base, pos, no = b"", 0, 0, 1  # base: the file offset of buf[0]; no: the line at pos
    while True:
        end = _BLANK.match(buf, pos).end()  # type: ignore[union-attr]
        no += buf.count(b"\n", pos, end)
        pos = end
        if pos >= len(buf):
            base += len(buf)
            buf, pos = f.read(BLOCK), 0
            if not buf:
                break
            continue
        if buf[pos:pos + 1] not in _JSON_STARTS:
            # no JSON value starts so (a sparse file's zeros): refused before reading on
            raise UsageError(f"{path}:{no}: not JSON")
        start = base + pos
        nl = buf.find(b"\n", pos)
        if nl >= 0:
            line = buf[pos:nl + 1]
            pos = nl + 1
        else:  # the line goes on past this block: read on, at most MAX_LINE_BYTES
            parts, size = [buf[pos:]], len(buf) - pos
            base += len(buf)
            buf, pos = b"", 0
            while True:
                more = f.read(BLOCK)
                if not more:
                    break
                cut = more.find(b"\n")
                if cut >= 0:
                    parts.append(more[:cut + 1])
                    size += cut + 1
                    buf, pos = more, cut + 1
                    break
                parts.append(more)
                size += len(more)
                base += len(more)
                if size > MAX_LINE_BYTES:
                    raise UsageError(f"{path}:{no}: a line longer than {MAX_LINE_BYTES >> 20} MiB")
            line = b"".join(parts)
        if len(line) > MAX_LINE_BYTES:
            raise UsageError(f"{path}:{no}: a line longer than {MAX_LINE_BYTES >> 20} MiB")
        _check_row(path, no, _parse(path, no, line.strip()))
        offsets.append(start)
        lengths.append(len(line))
        no += 1 if line.endswith(b"\n") else 0
    return offsets, lengths


def _parse(path: str, no: int, body: bytes) -> Any:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path}:{no}: not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}:{no}: not JSON: {e.msg}") from None
    except (ValueError, RecursionError) as e:  # an integer of 5,000 digits, nesting past the stack
        raise UsageError(f"{path}:{no}: not JSON kvtui can read: {str(e)[:80]}") from None


def _check_row(path: str, no: int, row: Any) -> None:
    if not isinstance(row, dict) or not any(k in row for k in ("prompt", "messages", "prompt_ids")):
        raise UsageError(f"{path}:{no}: each line needs \"prompt\", \"messages\" or \"prompt_ids\"")
    why = _row_problem(row)
    if why:
        raise UsageError(f"{path}:{no}: {why}")
    ot = row.get("output_tokens")
    if ot is not None and (not isinstance(ot, int) or ot < 1):
        raise UsageError(f"{path}:{no}: output_tokens must be a positive integer")


class _Rows:
    """The dataset's rows, read from the file one at a time (os.pread: any thread, any process)."""

    def __init__(self, path: str, offsets: array, lengths: array):
        self.path, self._offsets, self._lengths = path, offsets, lengths
        self._fd: int | None = None
        self._pid = 0

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self._fd is None or self._pid != os.getpid():
            from kvtui.safeio import DATASET_CAP, open_regular

            self._fd, self._pid = open_regular(self.path, "dataset", DATASET_CAP), os.getpid()
        raw = os.pread(self._fd, self._lengths[i], self._offsets[i])
        row = _parse(self.path, i + 1, raw.strip())
        if not isinstance(row, dict) or _row_problem(row):  # the file changed since it was checked
            raise UsageError(f"{self.path}: changed while the run read it (row {i + 1}); run again")
        return row

    def __getstate__(self) -> dict[str, Any]:  # a worker process opens the file itself
        return {**self.__dict__, "_fd": None, "_pid": 0}

    def __del__(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            try:
                os.close(self._fd)
            except OSError:
                pass


def _row_problem(row: dict[str, Any]) -> str | None:
    """Why a dataset row cannot be sent as it is (checked when the scenario loads, before any server)."""
    if "prompt" in row and not isinstance(row["prompt"], str):
        return f"\"prompt\" must be a string, got {type(row['prompt']).__name__}"
    if "messages" in row:
        m = row["messages"]
        if not isinstance(m, list) or not m or not all(
                isinstance(x, dict) and isinstance(x.get("role"), str) and isinstance(x.get("content"), str)
                for x in m):
            return "\"messages\" must be a non-empty list of {\"role\": str, \"content\": str}"
    if "prompt_ids" in row:
        ids = row["prompt_ids"]
        if not isinstance(ids, list) or not ids or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            return "\"prompt_ids\" must be a non-empty list of token ids (integers ≥ 0)"
    ot = row.get("output_tokens")
    if isinstance(ot, bool):
        return "output_tokens must be a positive integer"
    return None
