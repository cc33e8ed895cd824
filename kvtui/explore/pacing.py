"""A step simulated in process, released over its modelled time on a paced clock ("watch it live").

The offline executor (kvtui.explore.offline_step) computes a step exactly as `kvtui run --fast`
does, then, where the run is paced, a `Pacer` releases what the step produced as a live step
would show it: its series rows (GPU memory, KV use, tok/s, running/waiting) as `Telemetry` events
and its progress as `StepProgress` events, each at its modelled time on a `kvtui.clock.PacedClock`
(modelled seconds / speed on the wall). The step's result lands at the end of its modelled time.

The figures are computed before they are paced, so pacing changes no number: `jump()` on the
clock (the TUI's "jump to the answer") stops the waiting and the rest arrives at once, with the
same figures. A stop or a skip during the pacing cuts the step at the modelled time it had
reached: what finished by then is kept, without a verdict (kvtui.core.evaluate: `cut`).
Pause holds the clock: no modelled time passes while the run is paused.
"""

from __future__ import annotations

from typing import Any

from kvtui import clock as kclock
from kvtui.explore import events as ev
from kvtui.io.scenario.schema import Mode, Scenario

# Modelled seconds per wall second in the TUI: a demo step of 60-100 modelled seconds shows in 3-5 s.
PACE_SPEED = 20.0
PIECE_WALL_S = 0.25  # the longest single wait: a stop, a skip, a pause or a jump acts within it


def applies(scenario: Scenario, mode: Mode) -> bool:
    """A simulated mode that runs in process (the offline model reproduces it): the sim engine, one
    server kvtui starts itself, the scheduler model. A test knob (--knee, --seed, --calibration in
    extra_args), replicas or a server URL keep the HTTP simulator (`kvtui sim serve`): the HTTP
    transport, judged on its own records."""
    s = scenario.server
    if s.engine != "sim" or s.url or s.replica_urls or s.replicas > 1:
        return False
    return not (list(s.extra_args) + list(mode.extra_args))


def paces(scenario: Scenario, modes: list[str] | None = None) -> bool:
    """Whether a run of `scenario` that is not --fast (the TUI's, or `kvtui run --headless`) runs in
    process, paced to the wall: every mode it runs is one the offline model reproduces (`applies`).
    Its figures are --fast's own, for the same seed; only the pacing differs."""
    chosen = [m for m in scenario.modes if not modes or m.name in modes]
    return bool(chosen) and all(applies(scenario, m) for m in chosen)


def paced_clock(scenario: Scenario, modes: list[str] | None, fast: bool, speed: float = PACE_SPEED,
                real: kclock.Clock | None = None) -> kclock.PacedClock | None:
    """The clock a run that is not --fast paces on (`paces`), or None: --fast, or the HTTP simulator."""
    return None if fast or not paces(scenario, modes) else kclock.PacedClock(speed, real=real)


class Pacer:
    """Releases one mode's offline steps over their modelled time (`t` relative to the mode's start)."""

    def __init__(self, clock: kclock.PacedClock, run: Any):
        self.clock = clock
        self.run = run
        self.pos = 0.0  # the mode's modelled time released so far

    def start_mode(self) -> None:
        self.pos = 0.0

    @property
    def speed(self) -> float:
        return self.clock.speed

    def _halted(self) -> bool:
        return bool(self.run.stopping or self.run.skipping)

    def _hold_while_paused(self) -> None:
        while getattr(self.run, "paused", False) and not self._halted():
            self.clock.real.sleep(0.1)  # the wall passes, the modelled time does not

    def wait_until(self, t: float) -> bool:
        """Let the modelled time reach `t`, in pieces of at most PIECE_WALL_S on the wall; False if
        the run's stop or skip came first (`pos` is where it came)."""
        while self.pos < t:
            if self._halted():
                return False
            self._hold_while_paused()
            if self._halted():
                return False
            speed = self.clock.speed
            dt = t - self.pos if speed <= 0 else min(t - self.pos, PIECE_WALL_S * speed)
            self.clock.sleep(dt)
            self.pos = t if dt >= t - self.pos else self.pos + dt
        return not self._halted()

    def release(self, mode: str, load: float, rows: list[dict[str, Any]], records: list[Any], t_mode: float,
                t_start: float, t_end: float, window: tuple[float, float]) -> float | None:
        """Pace one step: its rows as Telemetry, its progress as StepProgress, up to its end.

        Times `t_start`, `t_end`, `window` and the records' are the scheduler's (absolute); rows carry
        `t` relative to `t_mode`. Returns None when the step ran to its end, else the absolute modelled
        time at which the run's stop or skip cut it."""
        start, end = t_start - t_mode, t_end - t_mode
        w0, w1 = window[0] - t_mode, window[1] - t_mode
        sent = sorted(r.t_sent - t_mode for r in records if r.phase == "window")
        ended = sorted(_ended(r) - t_mode for r in records)

        told = [False]

        def progress(now: float) -> None:
            if self.clock.speed <= 0 and told[0]:
                return  # jumped: the rest arrives at once, its progress once a step ("paced" 0: no wait left)
            told[0] = True
            phase = "warmup" if now < w0 else ("window" if now <= w1 else "tail")
            self.run.emit(ev.StepProgress(
                mode, load=load, phase=phase, elapsed_s=round(max(0.0, now - start), 2),
                window_started=_count_le(sent, now), completed=_count_le(ended, now),
                paced=self.clock.speed, modelled_s=round(end - start, 2)))

        self.pos = max(self.pos, min(start, end))
        for row in sorted(rows, key=lambda r: float(r.get("t") or 0.0)):
            t = float(row.get("t") or 0.0)
            if not self.wait_until(t):
                return self.pos + t_mode
            self.run.emit(ev.Telemetry(mode, row))
            progress(t)
        if not self.wait_until(end):
            return self.pos + t_mode
        return None


def _ended(r: Any) -> float:
    return float(r.t_last if r.t_last is not None else (r.t_first if r.t_first is not None else r.t_sent))


def _count_le(xs: list[float], t: float) -> int:
    from bisect import bisect_right

    return bisect_right(xs, t)


def kept_by(records: list[Any], cut_at: float) -> list[Any]:
    """The records of a step cut at `cut_at` (modelled, absolute): those that had ended by then."""
    return [r for r in records if _ended(r) <= cut_at]


def rows_by(rows: list[dict[str, Any]], cut_rel: float) -> list[dict[str, Any]]:
    """The series rows released by `cut_rel` (modelled, relative to the mode's start)."""
    return [r for r in rows if float(r.get("t") or 0.0) <= cut_rel]
