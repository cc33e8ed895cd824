"""--resume: which modes of earlier snapshots a run keeps, continues or measures again.

Kept: modes that finished, under the settings the scenario has now. Run again: modes that
failed to start (the cause may be fixed: a model path, a dtype) and modes whose settings
changed since. Continued: modes cut short (a device call's time limit, Ctrl-C, kill -9)
keep their finished steps, and their search goes on from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvtui import clock
from kvtui.core.evaluate import no_server_verdict, ran_to_its_end
from kvtui.core.search import Search
from kvtui.core.search_seeded import rehint
from kvtui.core.settled import settle_passes
from kvtui.explore import events as ev
from kvtui.explore.document import mode_settings, setting_changes
from kvtui.io.records import Damaged, iter_record_lines, record_from_line
from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.io.snapshot.file import SnapshotWriter, atomic_write, ran_on_devices

UNCOMPARED = frozenset({"port", "startup_timeout_s", "parallel", "devices", "processes", "autoscale", "max_processes"})


def record_key(line: str) -> tuple[str | None, int | None]:
    """(mode, step index) of one records line."""
    try:
        from kvtui.safeio import loads

        d = loads(line)  # bounded (kvtui.safeio)
    except ValueError:
        return None, None  # a line cut by a crash mid-write
    if not isinstance(d, dict):
        return None, None  # JSON, but not a record
    return d.get("mode"), d.get("step")


def finished_steps(mode_doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A mode's steps up to the first one cut short (its verdict would be a stop's, not a measurement's)."""
    out = []
    for st in mode_doc.get("steps") or []:
        if not isinstance(st, dict) or not ran_to_its_end(st) or "load" not in st:
            break
        out.append(st)
    return out


def joined_devices(envs: list[dict[str, Any]]) -> dict[str, Any]:
    """The device lists of several runs' environments as one (each device once, in order)."""
    out: dict[str, Any] = {}
    uuids: list[str] = []
    rows: list[tuple[Any, Any, Any, Any]] = []
    for e in envs:
        n = len(e.get("gpu_uuids") or [])
        for j, u in enumerate(e.get("gpu_uuids") or []):
            if u in uuids:
                continue
            uuids.append(u)
            pick = [(e.get(k) or [None] * n) for k in ("gpu_names", "gpu_indices", "gpu_memory_gib")]
            rows.append((u, *(x[j] if j < len(x) else (x[-1] if x else None) for x in pick)))
    if rows:
        out["gpu_uuids"] = [r[0] for r in rows]
        out["gpu_indices"] = [r[2] for r in rows]
        if all(e.get("gpu_memory_gib") for e in envs):
            out["gpu_memory_gib"] = [r[3] for r in rows]
        if not any(e.get("simulated") for e in envs):
            out["gpu_names"] = [r[1] for r in rows]
            out["gpu_count"] = len(rows)
    return out


class Resume:
    """The resumed snapshots (oldest first: a later one's mode wins) and what this run takes from them."""

    def __init__(self, resumes: list[dict[str, Any]], emit: ev.Listener):
        self.resumes = resumes
        self.emit = emit
        self.partial: dict[str, dict[str, Any]] = {}  # mode name -> its interrupted doc, continued
        self.origin: dict[str, dict[str, Any]] = {}  # mode name -> the snapshot its kept data comes from

    def _note(self, doc: dict[str, Any], name: str | None, msg: str) -> None:
        self.emit(ev.RunWarning(name, msg))
        doc.setdefault("warnings", []).append(msg)

    def take(self, doc: dict[str, Any], scenario: Scenario, modes: list[Mode], fast: bool,
             join: bool = False) -> list[dict[str, Any]]:
        """The modes of the resumed snapshot(s) this run keeps (returned) and those it continues
        (`self.partial`); notes what it drops in `doc`'s warnings. A `join` (the lanes of
        kvtui run --parallel) keeps every mode as its snapshot has it: failed, cut short or done."""
        new = scenario.to_dict()
        wanted = {m.name: m for m in scenario.modes}
        requested = {m.name for m in modes}
        done: dict[str, dict[str, Any]] = {}
        partial: dict[str, dict[str, Any]] = {}
        origin: dict[str, dict[str, Any]] = {}
        for prev in self.resumes:
            src = prev.get("_path") or "(snapshot)"
            old = prev.get("scenario") or {}
            for key in ("server", "workload", "ramp", "slo"):
                # A key the older kvtui did not write is unset (None) there, or absent: not a change.
                # How the run was spread (parallel lanes, their devices, the load's workers) is not a
                # setting of the measurement either.
                a = {k: v for k, v in (old.get(key) or {}).items() if k not in UNCOMPARED and v is not None}
                b = {k: v for k, v in (new.get(key) or {}).items() if k not in UNCOMPARED and v is not None}
                if isinstance(old.get(key), dict):
                    b = {k: v for k, v in b.items() if k in old[key]}
                if a and a != b:
                    self.emit(ev.RunWarning(
                        None,
                        f"resumed snapshot's [{key}] differs from this scenario: "
                        "modes are not under identical settings"))
                    doc.setdefault("warnings", []).append(f"resumed across a changed [{key}]")
            for m in prev.get("modes") or []:
                name = m.get("name")
                if not isinstance(name, str):
                    continue
                if join:
                    if name in wanted and (name not in done or m.get("steps") or not done[name].get("steps")):
                        done[name], origin[name] = m, prev
                    continue
                if name in wanted:
                    changed = setting_changes(m.get("settings") or {}, mode_settings(scenario, wanted[name]))
                    if changed:
                        self._note(doc, name, f"mode {name}: settings changed since the resumed run {src} "
                                              f"({', '.join(changed)}): not kept from it")
                        continue
                error = m.get("error") or {}
                if error and not m.get("steps"):
                    if error.get("kind") != "cancelled":  # a start the user stopped is simply run now
                        self._note(doc, name, f"mode {name} failed in the resumed run {src} "
                                              f"({error.get('message', error.get('kind'))}): not kept from it")
                    continue
                if m.get("complete") or (name not in requested and m.get("steps")):
                    # Finished, or cut short but not asked for this time: kept as it is.
                    if name in done and done[name].get("complete") and not m.get("complete"):
                        continue
                    done[name] = m
                    partial.pop(name, None)
                    origin[name] = prev
                elif name not in done and finished_steps(m):
                    partial[name] = m
                    origin[name] = prev
        if fast:  # an offline simulation is seconds long: measure a cut-short mode again
            for name in partial:
                origin.pop(name, None)
            partial = {}
        self.partial = partial
        self.origin = origin
        kept = list(done.values())
        if kept and (join or all(m.name in done for m in modes)):
            # Nothing is measured here (a join of earlier runs): the figures are of the machine they ran on.
            envs: list[dict[str, Any]] = [e for n in done if (e := origin[n].get("environment"))]
            if envs:
                doc["environment"] = {**envs[-1], "joined_on": (doc.get("environment") or {}).get("host")}
                if join:  # the lanes' devices together: the run had all of them
                    doc["environment"].update(joined_devices(envs))
                gpus = {tuple(e.get("gpu_names") or ()) for e in envs}
                if len(gpus) > 1:
                    self._note(doc, None, "the joined modes ran on different GPUs: "
                                          + "; ".join(", ".join(g) for g in sorted(gpus)))
            devices = ran_on_devices(list(done.values()))
            if len(devices) > 1:
                self._note(doc, None, "the joined modes ran on " + str(len(devices)) + " devices: "
                                      + "; ".join(f"{d} ({', '.join(ms)})" for d, ms in devices.items()))
        doc["resumed_from"] = {
            "path": self.resumes[-1].get("_path"), "environment": self.resumes[-1].get("environment"),
            "modes": [m["name"] for m in kept], "continued": sorted(partial),
            "paths": [p.get("_path") for p in self.resumes],
        }
        return kept

    def carry_records(self, writer: SnapshotWriter, doc: dict[str, Any]) -> int:
        """Copy the kept modes' per-request records (and those of the continued modes' finished
        steps) into this run's sidecar, so the snapshot stays self-contained; returns how many.

        Resuming into the same sidecar rewrites it with those records only: the records of a
        mode measured again, or of a step cut short, are dropped.
        """
        lines: list[str] = []
        srcs: set[Path] = set()
        from kvtui.explore.resume_guard import records_source

        for prev in self.resumes:
            src = records_source(prev)
            if src is None:
                continue
            srcs.add(src.resolve())
            want: dict[str, int | None] = {}  # mode -> records of steps below this index (None: all)
            for mname, m in self.origin.items():
                if m is prev:
                    want[mname] = len(finished_steps(self.partial[mname])) if mname in self.partial else None
            if not want:
                continue
            damaged = Damaged()
            try:
                for rec in iter_record_lines(src, damaged):
                    mode, step = record_key(rec)
                    limit = want.get(mode) if mode is not None else None
                    if mode in want and (limit is None or (step is not None and step < limit)):
                        if record_from_line(rec) is None:
                            damaged.add(0)  # the right mode and step, but not a record: not carried
                            continue
                        lines.append(rec if rec.endswith("\n") else rec + "\n")
                if damaged.count:
                    msg = f"{src}: {damaged.count} damaged records line(s) skipped"
                    self.emit(ev.RunWarning(None, msg))
                    doc.setdefault("warnings", []).append(msg)
            except OSError as e:
                doc.setdefault("warnings", []).append(
                    f"per-request records of the kept modes not carried over ({src}: {e.strerror or e})")
        dst = writer.records_path
        if dst.resolve() in srcs:
            atomic_write(dst, "".join(lines))
        elif lines:
            from kvtui.safeio import open_append

            with open_append(dst, "records") as f:
                f.writelines(lines)
        return len(lines)

    def replay_finished_steps(self, search: Search, md: dict[str, Any], old: dict[str, Any], t0: float,
                              writer: SnapshotWriter,
                              sc: Scenario | None = None) -> tuple[int, list[dict[str, Any]]]:
        """Feed a continued mode's finished steps to its search, in their order, as long as the
        search asks for exactly those loads; returns how many were kept and the telemetry rows
        kept with them. The kept steps' times on the run's time line (`t_rel_*`) and their telemetry
        are moved onto this run's (origin `t0`), ending just before now; their window times stay
        on their records' clock."""
        steps = finished_steps(old)
        end = max([s.get("t_rel_end") or 0.0 for s in steps] + [r.get("t",
                                                                      0.0) for r in old.get("series") or []] + [0.0])
        shift = (clock.monotonic() - t0) - end - 1.0
        kept = 0
        for st in steps:
            if st.get("why") in ("search", "confirm"):
                if no_server_verdict(st):
                    pass  # the client failed it and the same load was measured again: not judged
                else:
                    rehint(search, st)  # a seeded search: the knee that chose this load
                    if search.next() != st.get("load"):
                        break  # the search now wants another load: measure from here
                    search.record(st["load"], st.get("passed"), st.get("settled"))
            st = dict(st)
            for k in ("t_rel_start", "t_rel_end"):
                if isinstance(st.get(k), (int, float)):
                    st[k] = round(st[k] + shift, 3)
            # Its window, end and births cutoff stay on the clock of its records, which are carried
            # as they were (carry_records): re-evaluated (another SLO, the knee's interval, the
            # archive's check), the step reads its own requests' figures. Until 2026-12-05 the
            # window was moved onto this run's clock and the rest was not, so a kept step re-read
            # gaps from after its end (docs/results/h200-8k512-itl100.md: ITL p95 104.8 → 40.5 ms).
            st["resumed"] = True
            md["steps"].append(st)
            if sc is not None:  # as the run did after each step: a journal may predate a pass's settling
                settle_passes(md["steps"], old.get("server") or {}, sc, search)
            writer.step_finished(md["name"], st)
            self.emit(ev.StepFinished(md["name"], st))
            kept += 1
        last_t = md["steps"][-1]["t_rel_end"] if kept else None
        prior_series = [
            {**r, "t": round(r["t"] + shift, 2)} for r in old.get("series") or []
            if isinstance(r.get("t"), (int, float)) and (last_t is None or r["t"] + shift <= last_t)
        ] if kept else []
        md["continued"] = {"steps": kept, "of": len(steps), "started_at": old.get("started_at")}
        # The servers the resumed run started for this mode (GPU time its answer cost, kvtui's time to
        # answer counts them): theirs, and those of any run that one continued.
        before = [x for x in ((old.get("continued") or {}).get("startup_s") or []) if isinstance(x, (int, float))]
        prior = (old.get("server") or {}).get("startup_s")
        if isinstance(prior, (int, float)):
            before.append(prior)
        if before:
            md["continued"]["startup_s"] = before
        if kept and old.get("ran_on"):
            md["continued"]["ran_on"] = old["ran_on"]  # the kept steps' device: maybe another GPU or host
        self.emit(ev.RunNote(md["name"],  # what --resume was asked to do: news, not a fault
                             f"continued from {kept} finished step(s) of the resumed run"))
        return kept, prior_series
