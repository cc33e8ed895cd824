"""How the app ends a run it started: stop (x, q, a signal), wait for the run thread, and when a
start hangs (vLLM waiting for /health), stop the server's process group; ctrl+c exits 130, a lost
terminal (SIGHUP) 129. Nothing is left running and the snapshot is finalised.

A mixin of `kvtui.tui.app.KvtuiApp` (uses its run, state, dashboard, notify and exit).
"""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import Any

from kvtui.runtime.procs import reaper
from kvtui.tui.host import AppHost

# q mid-run (after its question): the run was stopped before its modes finished. Not 0 (a script
# must not read a partial run as a finished one), not 1 (nothing failed), not 130 (no signal).
STOPPED_RC = 3
QUIT_GRACE_S = 3.0  # after this, a run still starting its engine is killed rather than waited for
HUP_GRACE_S = QUIT_GRACE_S + 60.0  # a lost terminal: the run's own stop gets this long, then its servers are killed
KILL_GRACE_S = 2.0  # a forced stop: SIGTERM to the servers' groups, SIGKILL to what is left after this


class Shutdown(AppHost):
    # -- signals ------------------------------------------------------------------------------
    def _on_signal(self, sig: int) -> None:
        self.quitting = True
        self.stop_run(f"stopped by {signal.Signals(sig).name}")
        if sig == signal.SIGHUP:
            # The terminal is gone (a dropped SSH session): Textual's own exit writes to it and can
            # block on a full output queue. Exit from a watchdog thread once the run has stopped
            # the load and the server and finalised the snapshot.
            threading.Thread(target=self._exit_without_terminal, name="kvtui-hup", daemon=True).start()
            return
        if self.run_done.is_set():
            self.exit(self.rc)

    def _exit_without_terminal(self) -> None:
        import os

        if not self.run_done.wait(HUP_GRACE_S):
            self._kill_servers()
            self.run_done.wait(30.0)
        os._exit(129)  # 128 + SIGHUP

    # -- stopping the run ----------------------------------------------------------------------
    def stop_run(self, reason: str = "stopped by the user") -> None:
        if self.run_obj is not None and self.run_active:
            self.run_obj.stop(reason)
            self.state.status = "stopping" if self.state.status != "replay" else "replay"

    async def _finish_run(self, grace_s: float) -> None:
        """Stop the run and wait for its thread (server and load generator stopped, snapshot final)."""
        if self.run_obj is None or self.run_done.is_set():
            return
        self.run_obj.stop("kvtui closed")
        loop = asyncio.get_running_loop()
        done = await loop.run_in_executor(None, self.run_done.wait, grace_s)
        if not done:
            if self._engine_starting():
                await loop.run_in_executor(None, self._end_starting_engine)
            await loop.run_in_executor(None, self.run_done.wait, 120.0)

    def _engine_starting(self) -> bool:
        mv = self.state.modes.get(self.state.current or "")
        return mv is not None and mv.status == "starting"

    def _end_starting_engine(self) -> None:
        """A run stopped while its engine starts waits for /health (vLLM: minutes), and the run's
        own stop began with a gentle SIGINT that a starting server may sit out for half its
        stop_timeout_s. After the grace, kill the servers: the start fails, the run tears down
        and finalises."""
        self._kill_servers()

    def _kill_servers(self) -> None:
        """Every server group this process registered (kvtui.runtime.procs.reaper: only the run's own)
        gets SIGTERM, then SIGKILL after KILL_GRACE_S. The engine is told first, so that its start
        gives up as cancelled rather than as a crash (from a thread: a stop already in progress
        holds it for its whole escalation)."""
        engine = getattr(self.run_obj, "engine", None)
        if engine is not None:
            threading.Thread(target=engine.stop, name="kvtui-engine-cancel", daemon=True).start()
        reaper.reap_all(grace_s=KILL_GRACE_S)

    def _quit_grace_over(self) -> None:
        if self.run_active and self._engine_starting():
            self.notify("the engine is still starting: stopping it", severity="warning")
            self._in_thread(self._end_starting_engine)

    def _in_thread(self, fn: Any) -> None:
        self.run_worker(fn, thread=True, group="engine-stop", exit_on_error=False, name="kvtui-engine-stop")

    # -- actions -------------------------------------------------------------------------------------
    async def action_quit(self) -> None:
        if self.run_active:
            if self.quitting:  # asked twice: do not wait for a graceful drain
                self.notify("killing the server…", severity="warning")
                self._in_thread(self._kill_servers)
                return
            if self.rc not in (130, STOPPED_RC) and not getattr(self, "_quit_asked", False):
                # k9s' rule: a destructive key asks first (x does). The answer's detail names what is lost.
                self._quit_asked = True

                def answered(yes: bool | None) -> None:
                    self._quit_asked = False
                    if yes and self.run_active:
                        self.rc = STOPPED_RC
                        self._stop_and_quit()
                    elif yes:
                        self.exit(self.rc)  # the run ended while the question was open

                from kvtui.tui.dialogs import ConfirmScreen

                self.push_screen(ConfirmScreen("Stop the run and quit?",
                                               "The run is not finished: the step in flight ends, the modes not "
                                               "run yet are not measured. What was measured is kept (resume it "
                                               "with --resume)."), answered)
                return
            self._stop_and_quit()
            return
        self.exit(self.rc)

    def _stop_and_quit(self) -> None:
        self.quitting = True
        self.stop_run("quit")
        self.set_timer(QUIT_GRACE_S, self._quit_grace_over)
        self.notify("stopping the load and the server, keeping what was measured… (q again to force)", timeout=10)
        if self.dashboard is not None:
            self.dashboard.sync()

    async def action_interrupt(self) -> None:
        """ctrl+c: as q, with the exit code of an interrupted program (130 = 128 + SIGINT)."""
        self.rc = 130
        await self.action_quit()
