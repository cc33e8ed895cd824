"""Small modal screens: `?` help (every key of every screen, and the abbreviations), and the
yes/no confirmation that guards stop, skip-mode and new-run while a run is live."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from kvtui.tui.keys import HELP_CONTEXTS, help_rows

ABBREVIATIONS = [
    ("c", "concurrent requests (the closed loop's load)"), ("@SLO", "at the highest load meeting the SLO"),
    ("×", "ratio to the baseline mode"), ("Δ", "change against the baseline"),
    ("TTFT", "time to first token"), ("TPOT", "time per output token after the first"),
    ("ITL", "inter-token latency (p99: stalls)"), ("E2E", "request latency end to end"),
    ("$/Mtok", "GPU cost per million output tokens"), ("J/tok", "GPU energy per output token (NVML power)"),
    ("KV wall", "the KV cache is full: requests wait or are preempted"), ("★", "the knee: best load meeting the SLO"),
    ("✂ cut", "a step a stop ended: no verdict"), ("lock-step", "most slots sent within one second (a wave)"),
    ("SIMULATED", "kvtui's simulated vLLM, not a GPU"), ("w / act / gr", "weights / activations / CUDA graphs (GiB)"),
    # the short forms a chart's legend takes where the full one would not fit (kvtui.tui.legend.SHORT)
    ("KV use / pool", "KV cache in use / the KV pool vLLM allocated"), ("tot", "the GPU's total memory"),
    ("KV≈", "KV-bound: the concurrency the KV pool holds at the mean request length"),
    ("clip N", "the latency axis stops at N (3× the SLO) so the SLO line stays visible"),
    ("run / wait / tgt / pre", "requests running / waiting / the target load / preempted"),
    ("+N", "N more legend items than fit: widen the terminal"),
]


def help_text(context: str) -> Text:
    t = Text()
    for screen in HELP_CONTEXTS:
        here = screen == context or screen == "everywhere"
        t.append(f"{screen}{'  (here)' if screen == context else ''}\n", style="bold underline" if here else "bold")
        for key, what in help_rows(screen):
            t.append(_key_cell(key), style="bold" if here else "")
            t.append(f"{what}\n", style="" if here else "dim")
    t.append("abbreviations\n", style="bold underline")
    for a, what in ABBREVIATIONS:
        t.append(_key_cell(a), style="bold")
        t.append(f"{what}\n")
    return t


KEY_COLUMN = 14


def _key_cell(key: str) -> str:
    """A key in its column, with a space before its text: one too long for the column gets a line
    of its own ("escape / c / qclose …" and "run / wait / tgt / prerequests …" ran into their text)."""
    if len(key) < KEY_COLUMN:
        return f"  {key:<{KEY_COLUMN}}"
    return f"  {key}\n" + " " * (KEY_COLUMN + 2)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss_none", "close", key_display="esc")]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen #box { width: 90%; max-width: 100; height: 90%; background: $surface; border: round $primary; padding: 0 1; }
    """  # noqa: E501 - one CSS rule whole: a line break in it would change the string

    def __init__(self, context: str):
        super().__init__()
        self.context = context

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="box"):
            yield Static(help_text(self.context), id="help")

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """"Stop the run?" y / n. Enter on the focused button, y, or n/escape."""

    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n,escape", "answer(False)", "no")]

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen #box { width: 60; height: auto; background: $surface; border: thick $warning; padding: 0 1; }
    ConfirmScreen #buttons { height: 3; align: center middle; }
    """

    def __init__(self, question: str, detail: str = ""):
        super().__init__()
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="box"):
            yield Static(Text(self.question, style="bold"), id="question")
            if self.detail:
                yield Static(self.detail, id="detail")
            with Horizontal(id="buttons"):
                yield Button("No (n)", id="no", variant="primary")
                yield Button("Yes (y)", id="yes", variant="warning")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # enter alone never stops a run

    def action_answer(self, yes: bool) -> None:
        self.dismiss(bool(yes))

    @on(Button.Pressed)
    def _pressed(self, event: Any) -> None:
        self.dismiss(event.button.id == "yes")
