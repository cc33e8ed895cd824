"""The snapshot: one versioned JSON file per run, journaled while the run goes, finalised atomically.

Files for `--out run.json`:
    run.json            the snapshot (written atomically: temp file, fsync, rename)
    run.json.journal    JSON Lines of finished steps and modes while the run goes;
                        survives a crash, removed when the snapshot is final
    run.records.jsonl   every per-request record (sidecar, referenced from the snapshot)

All three are created with user-only permissions (0600). Infinite latencies (failed
requests count as +inf) are written as the string "inf" so the JSON stays standard.
"""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from kvtui import clock
from kvtui.errors import UsageError
from kvtui.io.snapshot.schema import SCHEMA, SUPPORTED, Mode  # noqa: F401 - the version lives in the schema; read here too


def _encode(x: Any) -> Any:
    if isinstance(x, float):
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        if math.isnan(x):
            return None
        return x
    if isinstance(x, dict):
        return {k: _encode(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_encode(v) for v in x]
    return x


def _decode(x: Any) -> Any:
    if x == "inf":
        return math.inf
    if x == "-inf":
        return -math.inf
    if isinstance(x, dict):
        return {k: _decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(v) for v in x]
    return x


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(_encode(doc), indent=1, allow_nan=False, ensure_ascii=False)


def _open_private(path: Path):
    from kvtui.safeio import open_append  # regular files only (kvtui.safeio: outputs checked like inputs)

    return open_append(path, "snapshot journal" if path.name.endswith(".journal") else "records")


def atomic_write(path: Path, text: str | bytes) -> None:
    """Write via a private (0600) temp file in the same directory, fsync, rename: never half a file."""
    from kvtui.safeio import atomic_write as write

    write(path, text)


def paths_for(out: str | Path) -> tuple[Path, Path, Path]:
    out = Path(out)
    return out, out.with_name(out.name + ".journal"), out.with_name(out.stem + ".records.jsonl")


class SnapshotWriter:
    """Keeps the run's document in memory, journals every finished step/mode, finalises atomically."""

    def __init__(self, out: str | Path, doc: dict[str, Any], resumed: list[str | Path] | tuple = ()):
        from kvtui.io.snapshot.outclaim import check_out_path, claim

        self.path, self.journal, self.records_path = paths_for(out)
        self.doc = doc
        self.doc.setdefault("schema", SCHEMA)
        self.doc["records"] = self.records_path.name
        check_out_path(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not os.access(self.path.parent, os.W_OK):
                raise PermissionError(f"directory not writable: {self.path.parent}")
            # Locked for this run, and never another run's files (kvtui.io.snapshot.outclaim).
            self._journal_f = claim(self.path, self.journal, self.records_path, _open_private,
                                    resumed)
            # Touch the sidecar with private permissions before anyone appends to it.
            _open_private(self.records_path).close()
            self._event("header", {k: v for k, v in doc.items() if k != "modes"})  # a full disk fails here
        except OSError as e:
            raise UsageError(f"{self.path}: cannot write the snapshot: {e.strerror or e}")

    def _event(self, kind: str, data: Any) -> None:
        line = json.dumps(_encode({"event": kind, "t": clock.time(), "data": data}), allow_nan=False,
                          ensure_ascii=False)
        self._journal_f.write(line + "\n")
        self._journal_f.flush()
        os.fsync(self._journal_f.fileno())

    def mode_started(self, mode: dict[str, Any]) -> None:
        self._event("mode", mode)

    def step_finished(self, mode_name: str, step: dict[str, Any]) -> None:
        self._event("step", {"mode": mode_name, "step": step})

    def mode_finished(self, mode: dict[str, Any]) -> None:
        self._event("mode_done", mode)

    def finalize(self, doc: dict[str, Any] | None = None) -> Path:
        if doc is not None:
            self.doc = doc
        self.doc["finalized_at"] = clock.time()
        atomic_write(self.path, dumps(self.doc))
        try:
            self._journal_f.close()
            self.journal.unlink()
        except OSError:
            pass
        return self.path

    def close(self) -> None:
        try:
            self._journal_f.close()
        except OSError:
            pass


def load_snapshot(path: str | Path) -> dict[str, Any]:
    """Read a snapshot, or rebuild one from its journal; clear one-line errors for bad files.

    A snapshot from an unknown schema version is read as far as its keys allow, with a
    warning in `doc["load_warnings"]`.
    """
    p = Path(path)
    if p.suffix == XZ and p.name.endswith(".json" + XZ) and p.is_file():
        # the archive named itself (X.json.xz): read as X.json is, which finds it and its records beside it
        p = p.with_name(p.name[: -len(XZ)])
    journal = p.with_name(p.name + ".journal") if p.suffix != ".journal" else p
    if p.suffix == ".journal" or (not p.exists() and journal.exists()):
        return load_journal(journal)
    from kvtui.safeio import SNAPSHOT_CAP, read_bytes_file

    try:
        xz = p.with_name(p.name + XZ)
        if not p.exists() and xz.exists():
            text = read_archived(xz, SNAPSHOT_CAP).decode("utf-8")  # a published run kept compressed (docs/results)
        else:
            text = read_bytes_file(p, "snapshot", SNAPSHOT_CAP).decode("utf-8")  # regular files only, capped
    except UnicodeDecodeError as e:
        raise UsageError(f"{p}: cannot read: {e}")
    from kvtui.safeio import MAX_STRING, JSONBoundsError, loads, longest_run_without

    try:
        doc = loads(text)  # bounded depth and string sizes (kvtui.safeio)
    except JSONBoundsError as e:
        raise UsageError(f"{p}: not a snapshot kvtui reads: {e}")
    except json.JSONDecodeError as e:
        if longest_run_without(text) > MAX_STRING:  # what salvage would walk char by char: refused
            raise UsageError(f"{p}:{e.lineno}: not a complete JSON snapshot ({e.msg}), with a string of more "
                             f"than {MAX_STRING:,} characters: not salvaged")
        if journal.exists():
            doc = load_journal(journal)
            doc.setdefault("load_warnings", []).append(f"{p} is damaged (line {e.lineno}); rebuilt from its journal")
            return doc
        doc = salvage(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("modes"), list) or not doc["modes"]:
            raise UsageError(f"{p}:{e.lineno}: not a complete JSON snapshot ({e.msg}); "
                             "truncated? no journal beside it to rebuild from")
        n = sum(len(m.get("steps") or []) for m in doc["modes"] if isinstance(m, dict))
        doc.setdefault("load_warnings", []).append(
            f"{p} is truncated (line {e.lineno}): showing what was readable, "
            f"{len(doc['modes'])} mode(s) and {n} whole step(s); "
            "the last mode is incomplete")
    if not isinstance(doc, dict):
        raise UsageError(f"{p}: not a kvtui snapshot (top level is not an object)")
    schema = doc.get("schema")
    if schema is None:
        raise UsageError(f"{p}: not a kvtui snapshot (no \"schema\" key)")
    if not isinstance(schema, str) or not schema.startswith("kvtui.snapshot/"):
        raise UsageError(f"{p}: not a kvtui snapshot (schema {schema!r}; kvtui reads {', '.join(SUPPORTED)})")
    doc = _decode(doc)
    if schema not in SUPPORTED:
        doc.setdefault("load_warnings", []).append(
            f"{p}: schema {schema!r} is not one this kvtui knows ({', '.join(SUPPORTED)}); showing what is readable"
        )
    if not isinstance(doc.get("modes"), list):
        raise UsageError(f"{p}: field \"modes\" missing or not a list")
    for i, m in enumerate(doc["modes"]):
        if not isinstance(m, dict) or not isinstance(m.get("steps", []), list):
            raise UsageError(f"{p}: modes[{i}] is not a mode object with a steps list")
        m.setdefault("steps", [])
    doc["_path"] = str(p)
    return doc


XZ = ".xz"  # a published snapshot's archive beside where the JSON would be: X.json.xz (kvtui/report/archive.py)


def read_archived(path: Path, cap: int) -> bytes:
    """The JSON inside an xz archive, refused past `cap` bytes unpacked (an archive cannot bomb the reader)."""
    import lzma

    from kvtui.safeio import read_bytes_file

    dec = lzma.LZMADecompressor()
    try:
        data = dec.decompress(read_bytes_file(path, "snapshot", cap), max_length=cap + 1)
    except lzma.LZMAError as e:
        raise UsageError(f"{path}: not an xz archive of a snapshot ({e})")
    if len(data) > cap or not dec.eof:
        raise UsageError(f"{path}: more than a snapshot can be unpacked, or cut short")
    return data


def salvage(text: str) -> Any:
    """The readable part of a JSON document cut short (a copy that broke off, a full disk).

    Cuts after the last complete value and closes what was open. Containers the cut went
    through are incomplete: the last step of the last mode is dropped if it was one of them,
    and that mode is marked incomplete. None when nothing is readable.
    """
    stack: list[str] = []
    best: tuple[int, str, int] | None = None  # (cut position, closers, open containers)
    in_str = esc = False

    def closers() -> str:
        return "".join("}" if c == "{" else "]" for c in reversed(stack))

    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append(ch)
            best = (i + 1, closers(), len(stack))
        elif ch in "}]":
            if not stack:
                return None
            stack.pop()
            if stack:
                best = (i + 1, closers(), len(stack))
        elif ch == "," and stack:
            best = (i, closers(), len(stack))
    if best is None:
        return None
    pos, close, depth = best
    from kvtui.safeio import loads

    try:
        doc = loads(text[:pos] + close)
    except ValueError:
        return None
    # The open containers at the cut are the document's rightmost spine, `depth` levels deep.
    spine: list[Any] = [doc]
    for _ in range(depth - 1):
        node = spine[-1]
        last = (list(node.values())[-1] if isinstance(node, dict) and node
                else (node[-1] if isinstance(node, list) and node else None))
        if not isinstance(last, (dict, list)):
            break
        spine.append(last)
    cut = {id(x) for x in spine}
    modes = doc.get("modes") if isinstance(doc, dict) else None
    if isinstance(modes, list) and modes and id(modes[-1]) in cut:
        last = modes[-1]
        if isinstance(last, dict) and "name" in last:
            steps = last.get("steps")
            if isinstance(steps, list) and steps and id(steps[-1]) in cut:
                steps.pop()
            last["complete"] = False
        else:
            modes.pop()
    return doc


def _journal_event_ok(kind: Any, data: dict[str, Any]) -> bool:
    """The shape load_journal relies on for each event kind."""
    if kind == "header":
        return True
    if kind in ("mode", "mode_done"):
        return isinstance(data.get("name"), str) and isinstance(data.get("steps", []), list)
    if kind == "step":
        return isinstance(data.get("mode"), str) and isinstance(data.get("step"), dict)
    return False


def load_journal(path: Path) -> dict[str, Any]:
    """Rebuild a snapshot from the journal of an unfinished run (crash, kill, lost SSH)."""
    doc: dict[str, Any] | None = None
    modes: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    bad = 0
    from kvtui.safeio import SNAPSHOT_CAP, loads, read_bytes_file

    raw = read_bytes_file(path, "journal", SNAPSHOT_CAP)  # a regular file, capped: else one line
    for bline in raw.splitlines():
        # Line by line, bytes first: a line cut inside a multi-byte character, garbage, a line
        # that is not an event object are each skipped and counted, never fatal to the rest.
        if not bline.strip():
            continue
        try:
            ev = _decode(loads(bline.decode("utf-8")))  # bounded (kvtui.safeio): past them, a damaged line
        except (UnicodeDecodeError, ValueError, RecursionError):
            bad += 1  # a line cut by a crash mid-write
            continue
        kind, data = (ev.get("event"), ev.get("data")) if isinstance(ev, dict) else (None, None)
        if not isinstance(data, dict) or not _journal_event_ok(kind, data):
            bad += 1
            continue
        if kind == "header":
            doc = dict(data)
        elif kind == "mode":
            name = data["name"]
            modes[name] = copy.deepcopy(data)
            modes[name].setdefault("steps", [])
            if name not in order:
                order.append(name)
        elif kind == "step" and data.get("mode") in modes:
            modes[data["mode"]]["steps"].append(data["step"])
        elif kind == "mode_done":
            name = data["name"]
            steps = modes.get(name, {}).get("steps", [])
            modes[name] = copy.deepcopy(data)
            if not modes[name].get("steps"):
                modes[name]["steps"] = steps
            modes[name]["complete"] = data.get("complete", True)  # a mode stopped mid-search stays incomplete
            if name not in order:
                order.append(name)
    if doc is None:
        raise UsageError(f"{path}: journal has no header line; nothing to rebuild")
    doc["modes"] = [modes[n] for n in order]
    for m in doc["modes"]:
        m.setdefault("complete", False)
    doc.setdefault("load_warnings", []).append(
        f"rebuilt from the journal {Path(path).name}: the run did not finish"
        + (f"; {bad} damaged line(s) skipped" if bad else "")
    )
    doc["_path"] = str(path)
    return doc


def ran_on_devices(modes: Sequence[Mode | Mapping[str, Any]]) -> dict[str, list[str]]:
    """Device (host and GPU index/uuid) → the modes that ran on it, for modes that say ("ran_on")."""
    out: dict[str, list[str]] = {}
    for mode in modes:
        m = Mode.of(mode)
        name = str(m.name)
        cont = m.continued or {}
        parts = [(m.ran_on or {}, name)]
        if cont.get("ran_on") and cont["ran_on"] != m.ran_on:
            # A mode continued elsewhere: its first steps ran on the earlier device.
            parts = [(cont["ran_on"], f"{name} steps 1–{cont.get('steps')}"),
                     (m.ran_on or {}, f"{name} from step {(cont.get('steps') or 0) + 1}")]
        for r, label in parts:
            if not r.get("gpu_uuids"):
                continue
            gpus = ", ".join(f"GPU {i} {u[:12]}" for i, u in zip(r.get("gpu_indices") or [], r["gpu_uuids"]))
            out.setdefault(f"{r.get('host', '?')} {gpus}", []).append(label)
    return out
