"""The quality suite: what a precision mode costs in answers, on real weights.

- `tasks`: items with ground truth, generated from a seed (nothing to download): long-context
  passkey retrieval at several depths and lengths up to the scenario's max context, exact
  quotation of a span of the prompt, and the user's own JSONL task files.
- `runner`: sends a mode's items before its load (its own phase; none of its requests counts in
  a step), scores them, and keeps each item's outcome so modes can be compared item by item.
- `stats`: Wilson intervals, the paired difference against the baseline and McNemar's exact test.
- `verdict`: per task and mode, against the baseline: within noise, a drop within tolerance, or a
  regression (beyond noise AND beyond the scenario's tolerance), and the quality-adjusted $/Mtok.

The pattern check of `kvtui.explore.quality` stays as the quick smoke test for broken kernels;
agreement with the baseline's greedy outputs and logprobs comes from it.

Imports: the floor only (kvtui.runtime.procs and kvtui.io.snapshot are part of it).
"""
