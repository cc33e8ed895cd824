"""Claiming a run's `--out`: its files (snapshot, journal, records) belong to one run only.

Two runs on one `--out` once shared a journal (the first to finish deleted it) and appended
to one records file (165 → 330 lines, two salts, a snapshot saying 165; replay then
re-evaluated both runs' requests as one). So a run claims its files before it measures:
  - an exclusive, non-blocking `fcntl.flock` on the journal, held while the run goes (the
    kernel drops it when the process dies, kill -9 included, so a crash leaves no stale lock);
  - files an earlier run left there are refused, unless this run resumes exactly that snapshot;
  - an `--out` that is a directory is refused before anything starts.
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO, Iterable

from kvtui.errors import UsageError


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _holds_data(p: Path) -> bool:
    """A regular file with something in it: what another run's measurement would be (an empty
    file or a device holds nothing a new run could mix into)."""
    try:
        return p.is_file() and p.stat().st_size > 0
    except OSError:
        return False


def check_out_path(out: Path) -> None:
    """What can be said about `out` before a run starts: not a directory, a writable parent."""
    out = Path(out)
    if out.is_dir():
        raise UsageError(f"--out {out}: is a directory; give a snapshot file path, e.g. {out / 'run.json'}")
    if out.name.endswith(".journal") or out.name.endswith(".records.jsonl"):
        raise UsageError(f"--out {out}: names a journal or records sidecar; give the snapshot's .json path")
    from kvtui.safeio import check_output

    check_output(out, "snapshot")
    check_output(out.with_name(out.name + ".journal"), "snapshot (its journal)")
    check_output(out.with_name(out.stem + ".records.jsonl"), "snapshot (its records sidecar)")


def claim(snapshot: Path, journal: Path, records: Path, open_journal, resumed: Iterable[str | Path] = ()) -> IO[str]:
    """Open `journal` (with `open_journal(path)`), locked for this run; refuse a shared `--out`.

    `resumed`: the paths of the snapshots (or journals) this run resumes; their own files may
    be reused, as a resume into the same `--out` rewrites them with the kept records only.
    """
    check_out_path(snapshot)
    existed = [p for p in (snapshot, journal, records) if _holds_data(p)]
    f = open_journal(journal)
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise UsageError(f"--out {snapshot}: another kvtui run is writing to it now ({journal.name} is locked); "
                         "choose another --out")
    except OSError:
        pass  # a filesystem without flock (some network mounts): the existence check below still holds
    own = any(_same(Path(r), snapshot) or _same(Path(r), journal) for r in resumed)
    if existed and not own:
        f.close()
        if journal not in existed:
            try:
                journal.unlink()
            except OSError:
                pass
        names = ", ".join(p.name for p in existed)
        hint = f"--resume {snapshot} to continue it" if snapshot in existed or journal in existed else "remove them"
        raise UsageError(f"--out {snapshot}: an earlier run's files are there ({names}); a run never shares them: "
                         f"choose another --out, or {hint}")
    return f


def unique_path(path: Path) -> Path:
    """`path`, or `path` with -2, -3, … before its suffix when a run's files already use it."""
    path = Path(path)
    n = 1
    cand = path
    while any(_holds_data(p) for p in (cand, cand.with_name(cand.name + ".journal"),
                                       cand.with_name(cand.stem + ".records.jsonl"))):
        n += 1
        cand = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return cand



def input_files(snapshot: str | Path, doc: dict | None = None) -> list[Path]:
    """A snapshot's files: itself, its journal, its records sidecar (the name the snapshot
    gives, or the default one) and their .gz — what a command that reads it must not write."""
    p = Path(snapshot)
    snap = p.with_name(p.name[: -len(".journal")]) if p.name.endswith(".journal") else p
    out = [p, snap, snap.with_name(snap.name + ".journal"), snap.with_name(snap.stem + ".records.jsonl")]
    name = (doc or {}).get("records")
    if isinstance(name, str) and name:
        rec = Path(name) if Path(name).is_absolute() else snap.with_name(name)
        out.append(rec)
    return out + [x.with_name(x.name + ".gz") for x in out]


def refuse_overwriting_inputs(out: str | Path, inputs: list[Path], command: str) -> None:
    """One line, exit 2, when `out` is one of the command's inputs (a snapshot, its journal or records)."""
    o = Path(out)
    for f in inputs:
        if _same(o, f) or (o.exists() and f.exists() and _samefile(o, f)):
            raise UsageError(f"--out {out}: is an input of this {command} ({f.name}); "
                             "it would overwrite it: pick another --out")


def _samefile(a: Path, b: Path) -> bool:
    import os

    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
