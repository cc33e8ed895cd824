"""The setup screen: pick or open a scenario (or a model: `kvtui init` writes its scenario), change
what people change on the spot (modes, SLO, ramp, workload), validated by the scenario loader, start."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Label, Select, SelectionList, Static

from kvtui.errors import KvtuiError, ScenarioError
from kvtui.io.scenario.schema import Length, Scenario
from kvtui.tui.keys import bindings
from kvtui.tui.slo_form import SloForm, parse_value


def length_text(ln: Length) -> str:
    if ln.dist == "fixed":
        return str(ln.value)
    if ln.dist == "uniform":
        return f'{{dist = "uniform", min = {ln.min}, max = {ln.max}}}'
    cap = f", max = {ln.max}" if ln.max else ""
    return f'{{dist = "{ln.dist}", mean = {ln.mean:g}, std = {ln.std:g}, min = {ln.min}{cap}}}'


class SetupScreen(Screen):
    """Pick or open a scenario, change what people change on the spot, start."""

    BINDINGS = bindings("setup")

    DEFAULT_CSS = """
    SetupScreen { align: center top; }
    SetupScreen #form { width: 100%; max-width: 110; height: 1fr; padding: 0 1; }
    SetupScreen .section { text-style: bold; color: $primary; margin-top: 1; }
    SetupScreen #pick { height: 3; }
    SetupScreen #pick Select { width: 1fr; }
    SetupScreen #pick Input { width: 2fr; }
    SetupScreen #pick Button { width: 10; min-width: 8; }
    SetupScreen #modes { height: auto; max-height: 8; }
    SetupScreen .row { height: 3; }
    SetupScreen .row Label { padding: 1 1 0 1; width: auto; }
    SetupScreen .row Input { width: 1fr; }
    SetupScreen #problems { color: $error; height: auto; margin-top: 1; }
    SetupScreen #buttons { height: 3; margin-top: 1; }
    SetupScreen SloForm Grid { grid-size: 6; grid-columns: 14 12 14 12 14 12; }
    SetupScreen #desc { color: $text-muted; height: auto; }
    """

    def __init__(self, scenario: Scenario | None, modes: list[str] | None = None, notice: str | None = None):
        super().__init__()
        self.scenario = scenario
        self.path = scenario.source if scenario and scenario.source and not scenario.source.startswith("<") else None
        self.wanted_modes = modes
        self.notice = notice
        self.problems: list[str] = []
        self._built: Scenario | None = None

    @property
    def kapp(self) -> Any:
        """The KvtuiApp (typed loosely: the screens never import the app module back)."""
        return self.app

    def _options(self) -> list[tuple[str, str]]:
        from kvtui.io.scenario.defaults import bundled_scenarios

        opts = [(p.stem, str(p)) for p in bundled_scenarios()]
        if self.path and all(v != str(self.path) for _, v in opts):
            opts.insert(0, (Path(self.path).name, str(self.path)))
        return opts

    def compose(self) -> ComposeResult:
        sc = self.scenario or Scenario()
        with VerticalScroll(id="form"):
            yield Static("kvtui — set up a run", classes="section")
            with Horizontal(id="pick"):
                opts = self._options()
                yield Select(opts, prompt="scenarios/…", allow_blank=True, id="pick-select",
                             value=(str(self.path) if self.path and any(v == str(self.path) for _, v in opts)
                                    else Select.BLANK))
                yield Input(str(self.path or ""), placeholder="or a path to a scenario .toml", id="pick-path")
                yield Button("Open", id="open")
            yield Static(self._describe(sc), id="desc")
            yield Static("Modes", classes="section")
            yield SelectionList[str](*[(m.name + self._mode_note(m), m.name, self._mode_on(m.name))
                                       for m in sc.modes], id="modes")
            yield Static("SLO", classes="section")
            yield SloForm(sc.slo, id="slo")
            yield Static(f"Ramp ({sc.ramp.load})", classes="section")
            with Horizontal(classes="row"):
                yield Label("start")
                yield Input(f"{sc.ramp.start:g}", type="number", id="ramp-start")
                yield Label("max")
                yield Input(f"{sc.ramp.max:g}", type="number", id="ramp-max")
                yield Label("step")
                yield Input(sc.ramp.step, id="ramp-step", placeholder="double, x1.5, +8 or 1,2,4")
                yield Label("search")
                yield Select([("auto", "auto"), ("seeded", "seeded"), ("fast", "fast"), ("linear", "linear")],
                             value=sc.ramp.search, allow_blank=False, id="ramp-search")
            yield Static("Workload (tokens: a number or {dist = \"uniform\", min = …, max = …})", classes="section")
            with Horizontal(classes="row"):
                yield Label("prompt")
                yield Input(length_text(sc.workload.prompt_tokens), id="wl-prompt")
                yield Label("output")
                yield Input(length_text(sc.workload.output_tokens), id="wl-output")
            yield Static("", id="problems")
            with Horizontal(id="buttons"):
                if sc.server.engine == "sim":  # the what-if in seconds first; the live simulator a choice after it
                    yield Button("Answer in seconds  (ctrl+f)", variant="primary", id="start-fast")
                    live = not getattr(self.app, "fast", False)  # `kvtui X --fast`: its start stays offline
                    yield Button("Watch it live  (ctrl+r)" if live else "Start  (ctrl+r)", id="start")
                else:
                    yield Button("Start  (ctrl+r)", variant="primary", id="start")
                yield Button("Quit", id="quit")
        yield Footer()

    def _mode_on(self, name: str) -> bool:
        return not self.wanted_modes or name in self.wanted_modes

    @staticmethod
    def _mode_note(m: Any) -> str:
        bits = []
        if m.quantization:
            bits.append(f"--quantization {m.quantization}")
        if m.kv_cache_dtype != "auto":
            bits.append(f"--kv-cache-dtype {m.kv_cache_dtype}")
        return f"  ({', '.join(bits)})" if bits else ""

    @staticmethod
    def _describe(sc: Scenario) -> str:
        s = sc.server
        where = sc.source or "defaults"
        return (f"{sc.name} — {where}\n{sc.description.strip()}\n"
                f"engine {s.engine}{' (SIMULATED)' if s.engine == 'sim' else ''} · model {s.model} · "
                f"GPU {s.gpu if s.engine == 'sim' else '(this machine)'} "
                f"· max_model_len {s.max_model_len}").strip()

    def on_mount(self) -> None:
        if self.notice:
            self.notify(self.notice, severity="warning", timeout=8)
        self.validate()

    # -- loading another scenario -----------------------------------------------------------
    @on(Select.Changed, "#pick-select")
    def _picked(self, event: Select.Changed) -> None:
        if event.value is not Select.BLANK and str(event.value) != str(self.path or ""):
            self.load(str(event.value))

    @on(Button.Pressed, "#open")
    @on(Input.Submitted, "#pick-path")
    def _open(self, _event: Any) -> None:
        p = self.query_one("#pick-path", Input).value.strip()
        if p:
            self.load(p)

    def load(self, path: str) -> None:
        from kvtui.io.scenario import load_scenario

        sc: Scenario | None
        try:
            sc = load_scenario(path)
        except ScenarioError as e:
            try:  # a model directory or id instead of a scenario: `kvtui init` writes one for it (kvtui/init.py)
                from kvtui.init import init_into_user_dir

                made, what = init_into_user_dir(path)
                sc = load_scenario(made) if made else None
            except KvtuiError as e2:
                made, sc, what = None, None, str(e2)
            if sc is None:
                self.show_problems([what] if what else e.problems)
                return
            self.notify(what, title="kvtui init", timeout=10)
        except KvtuiError as e:
            self.show_problems([str(e)])
            return
        # the file the loader read (a bare name or `scenarios/X.toml` resolves to the shipped or user file)
        self.scenario, self.path, self.wanted_modes = sc, sc.source or path, None
        self.refresh(recompose=True)
        self.call_after_refresh(self.validate)

    # -- validation and start -----------------------------------------------------------------
    def build(self) -> Scenario | None:
        """The scenario with the form's edits, validated by the scenario loader; None on problems."""
        from kvtui.io.scenario import scenario_from_dict
        from kvtui.io.scenario.locate import LineIndex

        text = ""
        source = "<defaults>"
        doc: dict[str, Any] = {}
        if self.path:
            source = str(self.path)
            try:
                text = Path(self.path).read_text(encoding="utf-8")
                doc = tomllib.loads(text)
            except (OSError, tomllib.TOMLDecodeError) as e:
                self.show_problems([f"{source}: {e}"])
                return None
        problems: list[str] = []
        slo = self.query_one(SloForm).table()
        doc["slo"] = slo
        ramp = doc.setdefault("ramp", {})
        for key, wid in (("start", "#ramp-start"), ("max", "#ramp-max"), ("step", "#ramp-step")):
            v = parse_value(self.query_one(wid, Input).value)
            if v is None:
                problems.append(f"ramp.{key}: needs a value")
            else:
                ramp[key] = str(v) if key == "step" else v
        ramp["search"] = self.query_one("#ramp-search", Select).value
        wl = doc.setdefault("workload", {})
        for key, wid in (("prompt_tokens", "#wl-prompt"), ("output_tokens", "#wl-output")):
            v = parse_value(self.query_one(wid, Input).value)
            if v is None:
                problems.append(f"workload.{key}: needs a value")
            else:
                wl[key] = v
        if not self.query_one("#modes", SelectionList).selected:
            problems.append("modes: pick at least one mode")
        if problems:
            self.show_problems(problems)
            return None
        try:
            sc = scenario_from_dict(doc, source, LineIndex(text) if text else None)
        except ScenarioError as e:
            self.show_problems(e.problems)
            return None
        self.show_problems([])
        return sc

    def show_problems(self, problems: list[str]) -> None:
        self.problems = list(problems)
        try:
            self.query_one("#problems", Static).update(Text("\n".join(problems)))
            for b in self.query("#start, #start-fast").results(Button):
                b.disabled = bool(problems)
        except Exception:
            return
        for inp in self.query(Input):
            key = ((inp.id or "").replace("slo-", "slo.").replace("ramp-", "ramp.")
                   .replace("wl-prompt", "workload.prompt_tokens").replace("wl-output", "workload.output_tokens"))
            inp.set_class(any(key and key in p for p in problems), "-invalid")

    def validate(self) -> Scenario | None:
        self._built = self.build()
        return self._built

    @on(Input.Changed)
    @on(SelectionList.SelectedChanged)
    @on(Select.Changed, "#ramp-search")
    def _changed(self, _event: Any) -> None:
        if self.is_mounted:
            self.validate()

    @on(Button.Pressed, "#start")
    def action_start(self) -> None:
        self.start(None)

    @on(Button.Pressed, "#start-fast")
    def action_start_fast(self) -> None:
        """The simulated what-if offline (--fast): its answer in seconds; w there watches it live."""
        self.start(True)

    def start(self, fast: bool | None) -> None:
        sc = self.validate()
        if sc is None:
            self.notify("fix the problems shown first", severity="error")
            return
        if fast and sc.server.engine != "sim":
            self.notify("the answer in seconds simulates offline: a scenario with engine = \"sim\" only",
                        severity="warning")
            return
        modes = list(self.query_one("#modes", SelectionList).selected)
        self.post_message(self.StartRequested(sc, modes, fast=fast))

    class StartRequested(Message):
        """The form is valid: the app starts the run (the screen does not reach into the app).
        `fast`: True, the offline simulation (--fast); False, live; None, as the app was started."""

        def __init__(self, scenario: Scenario, modes: list[str], fast: bool | None = None) -> None:
            super().__init__()
            self.scenario = scenario
            self.modes = modes
            self.fast = fast

    @on(Button.Pressed, "#quit")
    def _quit(self) -> None:
        self.app.exit(0)
