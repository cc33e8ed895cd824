"""Every key of every screen, in one table: the screens' bindings and the `?` help are both made from it.

A row is one binding (what Textual needs: keys, action, footer label) and what the help says of
it on each screen it acts on. The dashboard is one screen for a live run and a replay; its
footer shows a key only where it acts (`KvtuiApp.check_action`), and the help lists the two apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.binding import Binding, BindingType

# The help's sections, in the order it shows them (the screen named "(here)" is the one `?` came from).
HELP_CONTEXTS = ("everywhere", "answer", "live dashboard", "replay dashboard", "compare", "setup", "SLO form")
# Which screen's bindings a help section's keys belong to.
SCREEN_OF = {"everywhere": "app", "answer": "answer", "live dashboard": "dashboard", "replay dashboard": "dashboard",
             "compare": "compare", "setup": "setup", "SLO form": "slo"}


@dataclass(frozen=True)
class Key:
    keys: str  # Textual's key names, comma-separated
    action: str
    label: str  # the footer's word
    screen: str  # app, answer, dashboard, compare, setup, slo
    help: dict[str, str] = field(default_factory=dict)  # help section → what the key does there
    help_key: str | None = None  # how the help writes the key (default: key_display or keys)
    key_display: str | None = None
    show: bool = True
    priority: bool = False
    bound: bool = True  # False: Textual binds it itself (ctrl+p), or each screen does (?): help only

    def binding(self) -> Binding:
        return Binding(self.keys, self.action, self.label, show=self.show, key_display=self.key_display,
                       priority=self.priority)

    @property
    def shown_key(self) -> str:
        return self.help_key or self.key_display or " / ".join(self.keys.split(","))


LIVE, REPLAY = "live dashboard", "replay dashboard"

KEYS: list[Key] = [
    # everywhere (the app's own)
    Key("question_mark", "app.help", "help", "app", {"everywhere": "this help"}, key_display="?", bound=False),
    Key("q", "quit", "quit", "app", {"everywhere": "quit (a live run is stopped cleanly first; q again forces)"}),
    Key("ctrl+c", "interrupt", "quit", "app", {"everywhere": "quit now, exit code 130"}, show=False, priority=True),
    Key("t", "cycle_theme", "theme", "app", {"everywhere": "next theme"}),
    Key("ctrl+p", "command_palette", "palette", "app", {"everywhere": "command palette"}, bound=False),
    # the answer
    Key("d,enter", "dashboard", "dashboard", "answer", {"answer": "the dashboard (charts and steps of one mode)"},
        help_key="d / enter"),
    Key("c", "app.compare", "compare", "answer", {"answer": "the modes side by side"}),
    Key("e", "app.edit_slo", "SLO", "answer", {"answer": "change the SLO (recomputed from the records)"}),
    Key("ctrl+s", "app.export", "export", "answer", {"answer": "export the snapshot as shown (+ Markdown)"}),
    Key("l", "log", "log", "answer", {"answer": "the dashboard with the server log open"}, show=False),
    Key("w", "app.watch_live", "watch it live", "answer",
        {"answer": "watch it live: the same simulation again, paced to the wall on the dashboard, step by step, "
                   "with its ETA; the same figures (an answer computed offline, --fast, only)"}),
    # The answer's body scrolls itself (Textual's own keys): listed in the help, not bound again.
    Key("up,down,pageup,pagedown,home,end", "scroll", "scroll", "answer",
        {"answer": "scroll the answer (home / end: its top, its caveats and commands)"},
        help_key="↑↓ pgup pgdn", show=False, bound=False),
    Key("question_mark", "app.help", "help", "answer", {}, key_display="?"),
    # the dashboard, live and replay
    Key("space", "app.toggle_pause", "pause", "dashboard", {LIVE: "pause / resume after the step in flight "
                                                                  "(a paced simulation: at once)"}),
    Key("j", "app.jump", "jump to the answer", "dashboard",
        {LIVE: "a paced simulation: stop waiting, the rest computes at once and its answer shows (the same "
               "figures)"}),
    Key("x", "app.stop_run", "stop", "dashboard", {LIVE: "stop the run (asks first)"}),
    Key("n", "app.skip_mode", "skip mode", "dashboard", {LIVE: "skip to the next mode (asks first)"}),
    Key("h", "app.hold", "hold", "dashboard", {LIVE: "hold this load: repeat the step"}, show=False),
    Key("plus,equals_sign", "app.nudge(1)", "step +", "dashboard", {LIVE: "next step one level up / down, by hand"},
        key_display="+", help_key="+ / -", show=False),
    Key("minus", "app.nudge(-1)", "step −", "dashboard", {}, key_display="-", show=False),
    # Replay: the arrows move through the steps wherever the focus is.
    Key("left", "replay_move(-1)", "step", "dashboard", {REPLAY: "previous / next step"}, key_display="←→",
        help_key="← / →  [ / ]", priority=True),
    Key("right", "replay_move(1)", "step ▶", "dashboard", {}, show=False, priority=True),
    Key("home", "replay_jump(0)", "first step", "dashboard", {REPLAY: "first / last step"}, help_key="home / end",
        show=False, priority=True),
    Key("end", "replay_jump(-1)", "last step", "dashboard", {}, show=False, priority=True),
    Key("a", "app.show_answer", "answer", "dashboard", {LIVE: "the answer so far", REPLAY: "the answer"}),
    Key("m", "app.cycle_mode", "mode", "dashboard", {LIVE: "view another mode", REPLAY: "view another mode"}),
    Key("e", "app.edit_slo", "SLO", "dashboard", {LIVE: "change the SLO", REPLAY: "change the SLO"}),
    Key("ctrl+s", "app.export", "export", "dashboard", {LIVE: "export", REPLAY: "export"}),
    Key("c", "app.compare", "compare", "dashboard", {LIVE: "compare modes", REPLAY: "compare modes"}),
    Key("question_mark", "app.help", "help", "dashboard", {}, key_display="?"),
    Key("s", "app.start", "start", "dashboard", {}, show=False),
    Key("l", "toggle_log", "log", "dashboard", {LIVE: "server log", REPLAY: "what the snapshot keeps of each server"},
        show=False),
    Key("left_square_bracket", "app.replay_step(-1)", "◀ step", "dashboard", {}, show=False),
    Key("right_square_bracket", "app.replay_step(1)", "step ▶", "dashboard", {}, show=False),
    # the comparison, the setup form, the SLO form
    Key("escape,c,q", "dismiss_none", "close", "compare", {"compare": "close (back to where it was opened)"},
        help_key="escape / c / q"),
    Key("ctrl+f", "start_fast", "answer in seconds", "setup",
        {"setup": "a simulated scenario: its answer in seconds (simulated offline, --fast)"}, priority=True),
    Key("ctrl+r", "start", "start", "setup", {"setup": "start the run (a simulated scenario: watch it live)"},
        priority=True),
    Key("escape", "app.quit", "quit", "setup", {"setup": "quit"}),
    Key("escape", "dismiss_none", "cancel", "slo", {"SLO form": "cancel"}),
    Key("ctrl+r", "apply", "apply", "slo", {"SLO form": "apply (enter in a field too)"}, help_key="ctrl+r / enter",
        priority=True),
]


def bindings(screen: str) -> list[BindingType]:
    """A screen's BINDINGS, from the table (typed as Textual declares BINDINGS: a list is invariant,
    so list[Binding] would not do where the base class says list[BindingType])."""
    return [k.binding() for k in KEYS if k.screen == screen and k.bound]


def help_rows(context: str) -> list[tuple[str, str]]:
    """(key as written, what it does) for one section of the help."""
    return [(k.shown_key, k.help[context]) for k in KEYS if context in k.help]
