"""The measurement core: what a step decides, with no I/O, no threads and no reading of the time.

A transport (the live load generator's worker processes over HTTP, kvtui.runtime.load.generator; the
simulator's virtual client, kvtui.simulator.engine.continuous) sends the requests and counts what came
back; the core says what that means: when the warm-up ends, when the window closes, how long the
tail is held, which window requests count for TPOT and E2E. Time comes in as an argument (`now`,
in the transport's own seconds), so the same rules run on the wall clock and on virtual time, and
are tested in milliseconds on plain numbers (tests/core/test_step_phases.py).

- phases.py: a step's phases (warm-up, window, held tail, end), for every transport;
- slots.py: which slots a closed loop starts (the stagger) and retires first (a step down);
- arrivals.py: an open loop's gaps between sends (poisson, bursty, constant), for the live workers
  and the simulator alike;
- looks.py: when the sequential test looks at a window, and what a decided look records;
- drain.py: when a drained server is idle and still (the scrapes a live transport hands it);
- births.py: the "births" tail rule's cutoff (which window requests TPOT and E2E count);
- stats.py: percentiles and the sample counts they need;
- sequential.py: the sequential test that decides a step early, at its stated confidence;
  samples.py: the SLO figures' samples it looks at; early_stop.py: what a decided preemption says;
- protocol.py: the continuous protocol's plan for a step (its ramp, its tail rule, its test);
- record.py: the per-request record (the records file is kvtui.io.records');
- window_stats.py, evaluate.py, results.py: a step's figures and verdict from its records;
- knee_interval.py: how sure a verdict is near the knee (a seeded bootstrap);
- search.py, search_seeded.py: which load the next step measures (linear, fast, seeded from a
  prediction, the confirmation), and the knee the verdicts give (`best_load`);
- settled.py: whether a verdict near the knee is settled without a repeat.

Still outside it (issue 46): the cohort a look reads (each transport's own) and the loop that runs a
mode's steps (kvtui.explore.run: it starts servers, writes the journal and emits events).

Imports: the standard library's pure parts, the scenario's typed settings (kvtui.io.scenario.schema)
and the snapshot's typed documents (kvtui.io.snapshot.schema), nothing else: no clock, no file, no
process, no unseeded randomness (tests/core/test_step_phases.py reads every import of this package).
"""
