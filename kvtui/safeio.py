"""Read input files safely: regular files only, with a size cap, never blocking.

`/dev/zero` as a scenario ended in MemoryError and a FIFO hung kvtui forever. Every file
kvtui reads on a user's word (scenario, snapshot, journal, import, resume, dataset) goes
through `read_text_file`: opened non-blocking (a FIFO opens at once instead of waiting for a
writer), checked to be a regular file by fstat, and read to at most `cap` bytes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kvtui.errors import UsageError

MiB = 1 << 20
SCENARIO_CAP = 4 * MiB
SNAPSHOT_CAP = 2048 * MiB  # a long run's snapshot (steps, series) is tens of MB; the records live beside it
DATASET_CAP = 2048 * MiB


def open_regular(path: str | Path, what: str, cap: int) -> int:
    """An fd of `path` opened for reading, after checking it is a regular file of ≤ cap bytes."""
    p = str(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UsageError(f"{p}: no such {what} file")
    except IsADirectoryError:
        raise UsageError(f"{p}: cannot read: is a directory, not a {what} file")
    except OSError as e:
        raise UsageError(f"{p}: cannot read: {e.strerror or e}")
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{p}: cannot read: is a directory, not a {what} file")
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise UsageError(f"{p}: {kind}, not a regular {what} file")
        if st.st_size > cap:
            raise UsageError(f"{p}: {st.st_size / MiB:,.1f} MiB, more than a {what} file can be ({cap / MiB:,.0f} MiB)")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_bytes_file(path: str | Path, what: str, cap: int) -> bytes:
    fd = open_regular(path, what, cap)
    with os.fdopen(fd, "rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:  # grew while we read
        raise UsageError(f"{path}: more than a {what} file can be ({cap / MiB:,.0f} MiB)")
    return data


def read_text_file(path: str | Path, what: str, cap: int, errors: str = "strict") -> str:
    """The file's text (UTF-8); a UsageError naming the file when it is not one to read."""
    data = read_bytes_file(path, what, cap)
    try:
        return data.decode("utf-8", errors)
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: cannot read: not UTF-8 text (byte {e.start})")
