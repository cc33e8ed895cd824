"""The app's actions on the document: change the SLO (re-evaluated from the records off the UI
thread), compare the modes, export the document as shown (and its Markdown report), save a
screenshot, and the command palette that lists every action.

A mixin of `kvtui.tui.app.KvtuiApp`. The documents are read through the snapshot schema's typed
views (`Run`, `Step`); the export writes its own copy's keys as a dict (it makes that document)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from textual import work
from textual.app import SystemCommand
from textual.screen import Screen
from textual.worker import Worker

from kvtui import clock
from kvtui.errors import KvtuiError
from kvtui.explore.reevaluate import ModeRecords, ViewSteps, reevaluate_modes
from kvtui.io.scenario.schema import Slo
from kvtui.io.snapshot.schema import Run, RunInfo, Step
from kvtui.tui.host import AppHost

# What an SLO worker gives back to the app (KvtuiApp.on_worker_state_changed): the SLO it
# judged under, the steps re-judged, the problems met.
SloResult = tuple[Slo, ViewSteps, list[str]]


class DocumentActions(AppHost):
    def action_edit_slo(self) -> None:
        from kvtui.tui.screens import SloScreen

        def done(result: Any) -> None:
            if result is None:
                return
            if result == "reset":
                self.state.set_view_slo(None)
                self.notify(f"back to the run's SLO: {self.state.slo.describe()}")
                self.dashboard and self.dashboard.sync()
                return
            self.apply_slo(result)

        self.push_screen(SloScreen(self.state.shown_slo, self.state.slo), done)

    def apply_slo(self, slo: Slo) -> Worker:
        """Re-evaluate every step under `slo` from the records sidecar (a thread; the screen stays live)."""
        modes = [(mv.name, list(mv.steps), self.state.records_file_for(mv)) for mv in self.state.modes.values()]
        return self._reevaluate(slo, modes)

    @work(thread=True, exclusive=True, group="slo", exit_on_error=False, name="kvtui-slo")
    def _reevaluate(self, slo: Slo, modes: list[ModeRecords]) -> SloResult:
        results, problems = reevaluate_modes(modes, slo)
        return slo, results, problems

    def _reevaluate_new_step(self, slo: Slo | None, mode: str | None, index: int | None) -> None:
        mv = self.state.modes.get(mode or "")
        if slo is None or mv is None or index is None:
            return
        step = next((s for s in mv.steps if Step.of(s).index == index), None)
        if step is not None:
            self._reevaluate_step(slo, [(mv.name, [step], self.state.records_file_for(mv))], {(mv.name, index)})

    @work(thread=True, group="slo-step", exit_on_error=False, name="kvtui-slo-step")
    def _reevaluate_step(self, slo: Slo, modes: list[ModeRecords], only: set[tuple[str, int]]) -> SloResult:
        results, problems = reevaluate_modes(modes, slo, only=only)
        return slo, results, problems

    def action_compare(self) -> None:
        from kvtui.report.text import comparison_table
        from kvtui.tui.screens import CompareScreen

        doc = self._current_doc()
        if doc is None:
            self.notify("nothing measured yet", severity="information")
            return
        shown = None
        try:
            shown = self.state.export_doc(doc)
            text = comparison_table(shown)
        except Exception as e:  # a half-written mode must not take the screen down
            text = f"cannot compare yet: {type(e).__name__}: {e}"
            shown = None
        self.push_screen(CompareScreen(text, shown))

    def _current_doc(self) -> Mapping[str, Any] | None:
        """The run's document as it last published it (a copy made on the run thread, read-only:
        `export_doc` copies it before applying anything), else the replayed snapshot's."""
        published = self.run_obj.published() if self.run_obj is not None else None
        return published or self.state.doc or None

    def action_export(self) -> None:
        self._export()

    @work(thread=True, exclusive=True, group="export", exit_on_error=False, name="kvtui-export")
    def _export(self) -> Path | None:
        try:
            path, md = self.export_now()
        except (OSError, KvtuiError, ValueError, TypeError) as e:
            self.call_from_thread(self.notify, f"export failed: {e}", severity="error", timeout=10)
            return None
        msg = f"snapshot written: {path}" + (f"\nreport: {md}" if md else "")
        self.call_from_thread(self.notify, msg, title="export", timeout=10)
        return path

    def export_now(self) -> tuple[Path, Path | None]:
        """Write the document as shown (edited SLO applied) next to the run's snapshot; a Markdown report too."""
        from kvtui.io.snapshot.file import atomic_write, dumps

        base = self._current_doc()
        if not base:
            raise ValueError("nothing to export yet")
        doc = self.state.export_doc(base)  # its own copy, which this writes to
        run = Run.view(doc)
        finished = bool((run.run or RunInfo()).finished)
        doc["exported"] = {"at": clock.time(), "by": "kvtui tui", "finished": finished,
                           "replay_of": self.state.source_name or None}
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(clock.time()))
        if self.state.replay:
            # where the reader found the replayed file (kvtui.io.snapshot.file adds "_path"; no key of the run's)
            src = Path(self.snapshot.get("_path") or "snapshot.json") if self.snapshot else Path("snapshot.json")
            folder, stem = src.parent, src.name.split(".json")[0]  # run.json and run.json.journal → run
        else:
            out = self.run_obj.out if self.run_obj is not None else Path("runs/kvtui.json")
            folder, stem = out.parent, out.stem
        rec = run.records
        if rec and not Path(rec).is_absolute():
            doc["records"] = rec  # the sidecar sits in the same folder as the export
        path = folder / f"{stem}-export-{stamp}.json"
        n = 1
        while path.exists():
            n += 1
            path = folder / f"{stem}-export-{stamp}-{n}.json"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write(path, dumps(doc))
        except OSError:
            if rec and not Path(rec).is_absolute():
                doc["records"] = str((folder / rec).resolve())
            fallback = Path("runs")
            fallback.mkdir(exist_ok=True)
            path = fallback / path.name
            atomic_write(path, dumps(doc))
        md_path = None
        if finished or self.state.replay:
            md_path = write_markdown(doc, path.with_suffix(".md"))
            if md_path is not None:
                self.reports.append(md_path)
        self.exports.append(path)
        return path, md_path

    def action_svg_screenshot(self) -> None:
        folder = _svg_folder(self)
        name = f"kvtui-{time.strftime('%Y%m%d-%H%M%S', time.localtime(clock.time()))}.svg"
        try:
            path = self.save_screenshot(filename=name, path=str(folder))
        except OSError as e:
            self.notify(f"screenshot failed: {folder}: {e.strerror or e}", severity="error")
            return
        self.notify(f"screenshot written: {path}", title="screenshot")

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for c in super().get_system_commands(screen):
            if c.title.lower().startswith(("save screenshot", "screenshot", "quit")):
                continue  # Textual's screenshot needs ~/Downloads (ours below); its Quit would be a second one
            yield c
        cmds = [
            ("Start the run", "s · start (or restart) the scenario's run", self.action_start),
            ("Pause / resume", "space · pause after the step in flight", self.action_toggle_pause),
            ("Stop the run", "x · end the step, stop the server, finalise the snapshot", self.action_stop_run),
            ("Next mode", "n · skip to the next precision mode", self.action_skip_mode),
            ("Hold this load", "h · repeat the current concurrency until released", self.action_hold),
            ("Step up", "+ · next step one level higher, by hand", lambda: self.action_nudge(1)),
            ("Step down", "- · next step one level lower, by hand", lambda: self.action_nudge(-1)),
            ("Change the SLO", "e · recompute pass/fail and the best load from the stored records",
             self.action_edit_slo),
            ("Export snapshot", "ctrl+s · write the document as shown (and a Markdown report)", self.action_export),
            ("Compare modes", "c · the modes side by side against the baseline", self.action_compare),
            ("Show next mode", "m · view another mode's charts and steps", self.action_cycle_mode),
            ("Cycle theme", "t · " + ", ".join(self._theme_names), self.action_cycle_theme),
            ("Toggle server log", "l · the server's output, startup lines highlighted",
             lambda: self.dashboard and self.dashboard.action_toggle_log()),
            ("Quit", "q / ctrl+c · stops the run cleanly first", self.action_quit),
            ("Show the answer", "a · who won each question, and why", self.show_answer),
            ("Help: every key", "? · keys per screen and the abbreviations", self.action_help),
            ("Screenshot (SVG)", "the screen as an SVG beside the snapshot (or in the current folder)",
             self.action_svg_screenshot),
        ]
        for title, help_text, cb in cmds:
            yield SystemCommand(title, help_text, cb)



def _svg_folder(app: Any) -> Path:
    snap = app.snapshot_path()
    return snap.parent if snap is not None and snap.parent.is_dir() else Path.cwd()


def write_markdown(doc: dict[str, Any], path: Path) -> Path | None:
    """A Markdown report through kvtui.report.markdown when that module exists (else skipped)."""
    try:
        from kvtui.report import markdown as md_mod  # written by the exports work; optional here
    except ImportError:
        return None
    fn = None
    for name in ("render_markdown", "markdown_report", "render", "to_markdown", "report"):
        fn = getattr(md_mod, name, None)
        if callable(fn):
            break
    if fn is None:
        return None
    from kvtui.io.snapshot.file import atomic_write

    try:
        text = fn(doc)
    except Exception:
        return None
    if not isinstance(text, str):
        return None
    atomic_write(path, text)
    return path


