"""The SLO form (setup screen and SLO editor) and the SLO editor's modal: Enter or ctrl+r applies."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from kvtui.errors import ScenarioError
from kvtui.io.scenario.schema import Slo
from kvtui.io.scenario.slo_table import slo_from_table
from kvtui.tui.keys import bindings

DEFAULT_SLO_KEYS = ("ttft_p95_ms", "tpot_p95_ms", "itl_p99_ms", "e2e_p95_ms")


def parse_value(text: str) -> Any:
    """A form value as TOML (number, string, inline table); blank → None."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    text = text.strip()
    if not text:
        return None
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


class SloForm(Vertical):
    """Inputs for the SLO's latency targets (ms; blank = no target), error rate, goodput and
    preemptions per request (blank = no target, 0 = none allowed)."""

    DEFAULT_CSS = """
    SloForm { height: auto; }
    SloForm Grid { grid-size: 4; grid-columns: 14 12 14 12; grid-rows: 3; height: auto; }
    SloForm Label { padding: 1 0 0 1; }
    """

    def __init__(self, slo: Slo, **kw: Any):
        super().__init__(**kw)
        self.slo = slo

    def compose(self) -> ComposeResult:
        keys = list(dict.fromkeys(list(self.slo.latency) + list(DEFAULT_SLO_KEYS)))
        with Grid():
            for k in keys:
                m, p, _ = k.split("_")
                yield Label(f"{m.upper()} {p} ms")
                v = self.slo.latency.get(k)
                yield Input(f"{v:g}" if v is not None else "", placeholder="—", type="number", id=f"slo-{k}",
                            classes="slo-input")
            yield Label("max errors")
            yield Input(f"{self.slo.max_error_rate:g}", type="number", id="slo-max_error_rate", classes="slo-input")
            yield Label("min goodput")
            yield Input(f"{self.slo.min_goodput:g}" if self.slo.min_goodput else "", placeholder="—", type="number",
                        id="slo-min_goodput", classes="slo-input")
            yield Label("preempt/req")
            mp = self.slo.max_preemptions_per_request
            yield Input(f"{mp:g}" if mp is not None else "", placeholder="—", type="number",
                        id="slo-max_preemptions_per_request", classes="slo-input")

    def table(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for inp in self.query(".slo-input").results(Input):
            key = (inp.id or "")[4:]
            v = parse_value(inp.value)
            if v is not None:
                out[key] = v
        return out


class SloScreen(ModalScreen[Any]):
    """Change the SLO; the app re-evaluates every step from the stored per-request records."""

    BINDINGS = bindings("slo")  # kvtui.tui.keys

    DEFAULT_CSS = """
    SloScreen { align: center middle; }
    SloScreen #box { width: 64; height: auto; max-height: 90%; background: $surface; border: round $primary; padding: 0 1; }
    SloScreen #problems { color: $error; height: auto; }
    SloScreen #buttons { height: 3; }
    SloScreen #note { color: $text-muted; height: auto; }
    """  # noqa: E501 - one CSS rule whole: a line break in it would change the string

    def __init__(self, current: Slo, run_slo: Slo):
        super().__init__()
        self.current = current
        self.run_slo = run_slo

    def compose(self) -> ComposeResult:
        # The buttons first: at 80×24 the form is taller than the screen, and Apply must stay in
        # reach (Enter in any field applies too). The form scrolls below them.
        with VerticalScroll(id="box"):
            yield Static("Change the SLO  (enter applies · esc cancels)", classes="section")
            with Horizontal(id="buttons"):
                yield Button("Apply", variant="primary", id="apply")
                yield Button("Run's SLO", id="reset")
                yield Button("Cancel", id="cancel")
            yield Static("", id="problems")
            yield Static(f"the run's SLO: {self.run_slo.describe()}\nPass/fail and the best load are recomputed from "
                         "the stored per-request records; the search itself is not re-run.", id="note")
            yield SloForm(self.current, id="slo")

    def on_mount(self) -> None:
        # The first field has the focus (the buttons come first in the layout, so Textual's own
        # first focus was Apply: four Tabs to the first field); Enter in it applies.
        first = next(iter(self.query_one(SloForm).query(Input)), None)
        if first is not None:
            first.focus()

    @on(Button.Pressed, "#apply")
    @on(Input.Submitted)
    def action_apply(self) -> None:
        try:
            slo = slo_from_table(self.query_one(SloForm).table())
        except ScenarioError as e:
            self.query_one("#problems", Static).update(Text("\n".join(p.replace("SLO: ", "") for p in e.problems)))
            return
        self.dismiss(slo)

    @on(Button.Pressed, "#reset")
    def _reset(self) -> None:
        self.dismiss("reset")

    @on(Button.Pressed, "#cancel")
    def action_dismiss_none(self) -> None:
        self.dismiss(None)


