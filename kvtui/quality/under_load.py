"""The same mode's answers under the knee's load against its answers alone.

Under load, batch composition changes the numerics, a preempted request is recomputed, and a full
KV cache (fp8's holds more requests) is shared by more of them. Whether answers change there is
what this measures, per task, paired by item key:

- changed: items whose full answer differs (digest of the text) from the same item's answer
  alone; the answers alone and under load are both greedy (temperature 0), so any change is the
  serving's, not sampling's;
- accuracy under load against alone: the paired Δ with its 95 % interval and McNemar's p
  (`verdict.compare_task`, the reference being the mode alone);
- agreement (the agreement task, tokens and logprobs kept): exact, top-1 agreement and mean
  |Δ logprob| through the smoke test's comparator (passed in: it lives above this layer).

The pooled line adds the ground-truth tasks' discordant pairs together: "2 of 150 answers
changed, accuracy Δ −0.7 pt [−2.1…+0.7], within noise".
"""

from __future__ import annotations

from typing import Any, Callable

from kvtui.quality.stats import mcnemar_p, paired_difference
from kvtui.quality.verdict import ALPHA, compare_task


def _changed(alone: dict[str, Any], load: dict[str, Any]) -> tuple[int, int]:
    """(changed, compared): answers whose text digest differs, over items answered both times."""
    before = {r["key"]: r.get("text_sha") for r in alone.get("items") or [] if isinstance(r, dict) and "key" in r}
    changed = compared = 0
    for r in load.get("items") or []:
        if not isinstance(r, dict) or r.get("key") not in before:
            continue
        a, b = before[r["key"]], r.get("text_sha")
        if a is None or b is None:  # an error either time: not an answer to compare
            continue
        compared += 1
        changed += a != b
    return changed, compared


def compare_under_load(alone: dict[str, Any], load: dict[str, Any], tolerance_pt: float,
                       agreement: Callable[[Any, Any], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Per task and pooled: the answers under load (`load`, a quality["tasks"]) against alone (`alone`)."""
    tasks: dict[str, Any] = {}
    b = c = n = changed = compared = 0
    for name, t in load.items():
        if not isinstance(t, dict) or name not in alone or t.get("not_run"):
            continue
        if name == "agreement":
            if agreement is not None:
                tasks[name] = agreement(alone[name], t)
            continue
        v = compare_task(alone[name], t, tolerance_pt)
        ch, cmp_ = _changed(alone[name], t)
        v.update(changed=ch, compared=cmp_)
        tasks[name] = v
        changed, compared = changed + ch, compared + cmp_
        b, c, n = b + int(v.get("only_reference") or 0), c + int(v.get("only_mode") or 0), n + int(v.get("paired") or 0)
    out: dict[str, Any] = {"tasks": tasks, "changed": changed, "compared": compared}
    if n:
        d, lo, hi = paired_difference(b, c, n)
        p = mcnemar_p(b, c)
        out.update(paired=n, only_alone=b, only_load=c, delta_pt=round(100 * d, 2),
                   delta_ci_pt=[round(100 * lo, 2), round(100 * hi, 2)], p_value=round(p, 4),
                   verdict=("worse under load" if d < 0 else "better under load") if p < ALPHA else "within noise")
    return out


def sentence(mode: str, k: dict[str, Any]) -> str:
    """'fp8-kv at its knee (64): 2 of 150 answers changed, accuracy Δ −0.7 pt within noise; 3 preemptions'."""
    if k.get("skipped"):
        return f"{mode} at its knee: not measured ({k['skipped']})"
    v = k.get("vs_alone") or k  # a snapshot's mode entry, or the comparison row's summary of it
    load = k.get("load")
    load_s = f"{load:g}" if isinstance(load, (int, float)) else "?"
    text = f"{mode} at its knee ({load_s}): {v.get('changed', 0)} of {v.get('compared', 0)} answers changed"
    if v.get("delta_pt") is not None:
        text += f", accuracy Δ {v['delta_pt']:+.1f} pt {v.get('verdict')}"
    top1 = ((v.get("tasks") or {}).get("agreement") or {}).get("top1_agreement", v.get("top1_agreement"))
    if top1 is not None:
        text += f", top-1 agreement {100 * top1:.1f} %"
    pre = k.get("preemptions")
    if isinstance(pre, (int, float)):
        text += f"; {pre:g} preemption{'s' if pre != 1 else ''} while they ran"
    return text
