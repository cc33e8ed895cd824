"""A live step on the simulator, judged in modelled time: the same answer whatever the host's load.

The live simulator streams real HTTP on the wall clock, and a closed loop's next request leaves
when the client gets round to it: on a busy host the arrivals, and so the batches, the
preemptions and every percentile, moved with the CPU load (the shipped demo once ended "16
failed on decode, −15.5 %" and once "16 failed on prefill, −18.6 %", seed 0 both times).

So a live simulated step is measured twice, at once: the live client against the live server
(what the dashboard shows while it runs: the live feel), and the same step in the simulator's
modelled time — the scheduler model of `kvtui run --fast`, with the same scenario, seed, salt
and step plan, and a client that answers at once. The step's figures, its verdict and its records
are the modelled ones: same seed + same scenario = the same answer. The live measurement is kept
beside them (`step["live"]`: what the client measured, which is the model's plus the client's
and the host's delay); where the host held the live run back, that is said as the client's limit
of the live run, never as the server's.
"""

from __future__ import annotations

from typing import Any, Callable

from kvtui.engines.sim.budget import refusal
from kvtui.engines.sim.fastrun import OfflineServer, SimConfigError, step_metrics
from kvtui.explore.evaluate import StepContext, evaluate_step
from kvtui.explore.executor import Measured
from kvtui.scenario.schema import Mode, Scenario

# The live client's p95 above the model's by more than this share (and 5 modelled ms) is the host's delay.
LIVE_SLACK = 0.25


def applies(scenario: Scenario, mode: Mode) -> bool:
    """A live simulated mode whose engine the offline model reproduces: the sim engine, one server
    kvtui starts itself, the scheduler model (not the knee test model, not a calibration file)."""
    s = scenario.server
    if s.engine != "sim" or s.url or s.replica_urls or s.replicas > 1:
        return False
    return not (list(s.extra_args) + list(mode.extra_args))  # a test knob (--knee, --calibration) is another model


def paces(scenario: Scenario, modes: list[str] | None = None) -> bool:
    """Whether a TUI run of `scenario` that is not --fast runs paced in process (kvtui.explore.pacing):
    every mode it runs is one the offline model reproduces (`applies`). A test knob (--knee),
    replicas or a server URL keep the HTTP simulator."""
    chosen = [m for m in scenario.modes if not modes or m.name in modes]
    return bool(chosen) and all(applies(scenario, m) for m in chosen)


class ModelledSteps:
    """One mode's steps in modelled time, beside the live ones (module docstring)."""

    def __init__(self, scenario: Scenario, mode: Mode, salt: int, index: int, calibration: Any = None,
                 halt: Callable[[], bool] | None = None):
        self.scenario = scenario
        # halt: the run's stop or skip, which the modelled step's loop looks at (kvtui.engines.sim.budget)
        self.server = OfflineServer(scenario, mode, salt, calibration=calibration, halt=halt)
        # The counters `kvtui run --fast` uses: the live demo and its --fast twin give one answer. The live
        # records are not written when these are (LiveStepExecutor.measure), so no id is written twice.
        self.counter = 1_000_000 * (index + 1)

    @classmethod
    def for_mode(cls, scenario: Scenario, mode: Mode, salt: int, index: int, calibration: Any = None,
                 halt: Callable[[], bool] | None = None) -> "ModelledSteps | None":
        if not applies(scenario, mode):
            return None
        try:
            return cls(scenario, mode, salt, index, calibration, halt)
        except SimConfigError:
            return None  # the live server started, so this cannot happen; if it does, the live figures stand

    def judge(self, mode: Mode, load: float, index: int, need: int, closed: bool, live: Measured,
              stopped: bool = False, md: dict[str, Any] | None = None) -> Measured:
        """The step as the verdict sees it: the model's records and figures, the live ones beside.

        A live step that was cut (a stop, a skip: `stopped`; a dead engine) or saw a server error the
        model cannot make stays as measured: that is news about this run, not the model. A step the
        live *client* failed (a load-generator process that died or stalled on a starved host, its
        own errors) is still judged in modelled time, its failure said beside it (`live.host_limited`):
        on a loaded CI host it once turned the demo's first step into a verdict-less retry, and the
        same seed told another story (tests/e2e/test_demo_deterministic.py)."""
        c = live.ctx
        if cut_short(live, stopped):
            return live
        extra = dict(live.extra)
        if closed and md is not None:
            # The continuous protocol's modelled twin: the same drain rule, ramp, early stop and tail.
            from kvtui.explore.offline_step import continuous_step

            res, ctx, cont, self.counter = continuous_step(self.server, self.scenario, mode, md, load, index,
                                                           str(extra.get("why") or ""), need, self.counter)
            for k in ("drain", "phases_s", "ramp", "stopped_early", "early_stop", "sequential", "continued_from"):
                extra.pop(k, None)
                if k in cont:
                    extra[k] = cont[k]
        else:
            res = self.server.step(mode.name, index, load, closed, self.counter, need)
            trace = self.scenario.ramp.load == "trace"  # a trace step's counters start at a row-aligned base
            self.counter += len(res.records) + 1 + (self.server.trace_rows if trace else 0)
            ctx = StepContext(load=load, closed=closed, load_kind=self.scenario.ramp.load,
                              t_window_start=res.window_start or res.t_start,
                              t_window_end=res.window_end or res.t_end, metrics=step_metrics(res),
                              gpu_mem_used_gib_max=self.server.gpu_mem_used_gib(),
                              max_num_seqs=self.server.facts.max_num_seqs)
        if res.ended:  # the run's stop, or a bound (kvtui.engines.sim.budget): no verdict on the step
            live.ctx.cut = True
            live.ctx.aborted = live.ctx.aborted or refusal(res.ended, load) or "stopped while modelled"
            return Measured(live.records, live.ctx, dict(live.extra), aborted=True, check_samples=False,
                            mode_error=refusal(res.ended, load))
        extra.update(t_window_start=ctx.t_window_start, t_window_end=ctx.t_window_end, modelled=True,
                     engine_limits=res.limited_by)
        extra.pop("autoscale", None)
        live_fig = live_summary(live, self.scenario)
        model_fig = evaluate_step(list(res.records), ctx, self.scenario.slo)
        lag = host_delay(live_fig, model_fig)
        host_failed = [r for r in live.records if r.error in CLIENT_SIDE_ERRORS]
        if c.client_failure or host_failed:
            why = c.client_failure or (f"{len(host_failed)} live request(s) failed on the client's side: "
                                       + ", ".join(sorted({str(r.error) for r in host_failed})))
            lag = (f"the live client failed ({why}): this host limited the live run (the client's limit); "
                   "the verdict uses the modelled figures")
        if lag:
            live_fig["host_limited"] = lag
        extra["live"] = live_fig
        return Measured(list(res.records), ctx, extra, aborted=False, check_samples=False,
                        written=None if res.written is None else list(res.written))


# Live errors this host makes on its own: the step's end (cancelled), the client's own failure, and
# the transport giving up on a simulator that this same host starved (no connection, no chunk within
# the client's timeout). A CI host that stalled for over a minute turned one demo step into such a
# live failure, and the same seed told another story (tests/e2e/test_demo_deterministic.py). A dead
# simulator is named by the engine check ("engine died"), not by these.
CLIENT_SIDE_ERRORS = ("client", "timeout", "connect")
HOST_ERRORS = ("cancelled", *CLIENT_SIDE_ERRORS)


def server_errors(live: Measured) -> list[Any]:
    """The live records that failed in a way only the server can make (an HTTP error, a broken stream)."""
    return [r for r in live.records if not r.ok and r.error not in HOST_ERRORS]


def cut_short(live: Measured, stopped: bool) -> bool:
    """The live step says something about this run that the model cannot (module docstring)."""
    c = live.ctx
    if stopped or (c.aborted and "engine died" in str(c.aborted)):
        return True
    return bool(server_errors(live))


def live_summary(live: Measured, scenario: Scenario) -> dict[str, Any]:
    """What the live client measured (its own clock, the host's delays included)."""
    step = evaluate_step(live.records, live.ctx, scenario.slo)
    out: dict[str, Any] = {"requests": step["requests"], "passed": step["passed"],
                           "client_limited": bool(step.get("client_limited")), "output_tok_s": step["output_tok_s"]}
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        fig = step.get(key) or {}
        out[key] = {"p50": fig.get("p50"), "p95": fig.get("p95")}
    return out


def host_delay(live: dict[str, Any], model: dict[str, Any]) -> str | None:
    """Where the live client measured clearly more than the model: the host's delay, in words."""
    worst = None
    for key, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        lv, mv = (live.get(key) or {}).get("p95"), (model.get(key) or {}).get("p95")
        if isinstance(lv, (int, float)) and isinstance(mv, (int, float)) and lv > mv * (1 + LIVE_SLACK) + 5:
            worst = worst or f"the live client measured {name} p95 {lv:.0f} ms against the model's {mv:.0f} ms"
    if worst is None and live.get("client_limited"):
        worst = "the live client was short of CPU"
    if worst is None:
        return None
    return f"{worst}: this host limited the live run (the client's limit); the verdict uses the modelled figures"
