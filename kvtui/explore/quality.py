"""Quality guard: does a faster mode still answer like the baseline?

Per mode, right after the server is ready and before any load, `collect_outputs` sends N
fixed prompts one at a time (no batching effects), at temperature 0, non-streaming, with
`logprobs=1`, and keeps every output token and its top-1 logprob. The prompts are the
same in every mode and every run of the scenario: token-id prompts (exact length) built
by `kvtui.runtime.load.workload` from the run's token space with a fixed salt. Each prompt is a
short random phrase repeated to the prompt length, so a working model continues the
pattern with confidence; a broken mode (bad scales, wrong kernel, garbage weights)
does not.

`compare_quality(reference, mode)` then gives, against the reference mode (the first
mode that collected outputs, the baseline):

- exact_match_rate: share of prompts whose output tokens equal the reference's exactly;
- top1_agreement: over the positions where both saw the same context (each output up
  to and including its first differing token), the share where both picked the same
  top-1 token;
- logprob_agreement (mean top-1 logprob agreement): over the positions before the first
  difference (same context, same token), the mean of exp(−|Δ logprob|) = the smaller of
  the two probabilities over the larger; 1.0 = the same confidence;
- flagged when exact_match_rate < min_exact_match or logprob_agreement <
  min_logprob_agreement (defaults below; `[quality]` may set either).

Dummy weights (and the simulator, which has no weights at all) make outputs noise: then
the check is skipped with that note instead of flagging every mode.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from kvtui import clock
from kvtui.safeio import fetch

MIN_EXACT_MATCH = 0.5
MIN_LOGPROB_AGREEMENT = 0.9
QUALITY_SALT = 0x51A11  # fixed: the same prompts in every mode and every run
PATTERN_TOKENS = 24  # length of the phrase each prompt repeats

SKIP_DUMMY = "dummy weights: outputs are noise"
SKIP_SIM = "simulated engine: no model weights, outputs are noise"


def thresholds(scenario: Any) -> dict[str, float]:
    """min_exact_match / min_logprob_agreement from [quality] when it has them, else the defaults."""
    q = scenario.get("quality") if isinstance(scenario, dict) else getattr(scenario, "quality", None)
    get = (lambda k: q.get(k)) if isinstance(q, dict) else (lambda k: getattr(q, k, None))
    out = {"min_exact_match": MIN_EXACT_MATCH, "min_logprob_agreement": MIN_LOGPROB_AGREEMENT}
    if q is not None:
        for k in out:
            v = get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = float(v)
    return out


def quality_prompts(scenario: Any, space: Any, max_model_len: int | None = None) -> list[list[int]]:
    """The N fixed token-id prompts (deterministic for a scenario seed and token space)."""
    from kvtui.io.scenario.schema import Length, Workload
    from kvtui.runtime.load.workload import PromptFactory

    q = scenario.quality
    n_tok = max(8, int(q.prompt_tokens))
    period = min(PATTERN_TOKENS, n_tok)
    w = Workload(api="completions", prompt_tokens=Length(value=period), output_tokens=Length(value=max(1,
        int(q.max_tokens))),
                 ignore_eos=False, shared_prefix=0.0, temperature=0.0, turns=1, jitter=0.0, seed=0)
    limit = max_model_len or scenario.server.max_model_len or (n_tok + q.max_tokens)
    factory = PromptFactory(w, space, max(limit, period + q.max_tokens), salt=QUALITY_SALT, seed=scenario.seed)
    prompts = []
    for i in range(max(1, int(q.prompts))):
        phrase = factory.build(i).ids or []
        ids = (phrase * (n_tok // max(1, len(phrase)) + 1))[:n_tok]
        prompts.append(ids)
    return prompts


def _digest(prompts: list[list[int]]) -> str:
    return hashlib.sha256(repr(prompts).encode()).hexdigest()[:16]


def _parse_choice(choice: dict[str, Any]) -> dict[str, Any]:
    lp = choice.get("logprobs") or {}
    tokens = lp.get("tokens") if isinstance(lp, dict) else None
    token_lps = lp.get("token_logprobs") if isinstance(lp, dict) else None
    top = lp.get("top_logprobs") if isinstance(lp, dict) else None
    top1: list[float | None] | None = None
    if isinstance(top, list) and top:
        top1 = []
        for d in top:
            vals = [v for v in (d or {}).values() if isinstance(v, (int, float))]
            top1.append(max(vals) if vals else None)
    elif isinstance(token_lps, list):
        top1 = [v if isinstance(v, (int, float)) else None for v in token_lps]  # temperature 0: chosen = top-1
    return {
        "text": choice.get("text") or "",
        "tokens": list(tokens) if isinstance(tokens, list) else None,
        "logprobs": top1,
        "finish_reason": choice.get("finish_reason"),
    }


def collect_outputs(endpoint: Any, scenario: Any, space: Any, dummy_weights: bool = False) -> dict[str, Any]:
    """Outputs and top-1 logprobs for the fixed prompts, or {"skipped": why}. Never raises for server errors."""
    if dummy_weights:
        return {"skipped": SKIP_DUMMY}
    if getattr(scenario.server, "engine", None) == "sim":
        return {"skipped": SKIP_SIM}
    import httpx

    q = scenario.quality
    prompts = quality_prompts(scenario, space, getattr(endpoint, "max_model_len", None))
    result: dict[str, Any] = {
        "prompts": len(prompts), "prompt_tokens": len(prompts[0]), "max_tokens": int(q.max_tokens),
        "prompt_digest": _digest(prompts), "temperature": 0.0, "logprobs_requested": bool(q.logprobs),
        "outputs": [], "errors": [],
    }
    extras: dict[str, Any] = {"return_tokens_as_token_ids": True}
    t0 = clock.monotonic()
    timeout = max(30.0, float(getattr(scenario.ramp, "request_timeout_s", 60.0) or 60.0))
    from kvtui.safeio import http_client

    with http_client(base_url=endpoint.base_url, headers=endpoint.headers(), timeout=timeout) as client:
        for i, ids in enumerate(prompts):
            body: dict[str, Any] = {"model": endpoint.model, "prompt": ids, "max_tokens": int(q.max_tokens),
                                    "temperature": 0.0, "seed": 0, "stream": False, **extras}
            if q.logprobs:
                body["logprobs"] = 1
            try:
                r = fetch(client, "POST", "/v1/completions", json=body)  # bounded, untrusted (kvtui.safeio)
                if r.status_code == 400 and extras:
                    extras = {}  # a server that refuses vLLM's extra field: ask without it
                    body.pop("return_tokens_as_token_ids", None)
                    r = fetch(client, "POST", "/v1/completions", json=body)
            except httpx.HTTPError as e:
                result["errors"].append(f"prompt {i}: {type(e).__name__}: {str(e)[:120]}")
                result["outputs"].append(None)
                continue
            if r.status_code != 200:
                result["errors"].append(f"prompt {i}: HTTP {r.status_code}: {r.text[:120]}")
                result["outputs"].append(None)
                continue
            try:
                choice = r.json()["choices"][0]
            except (ValueError, KeyError, IndexError, TypeError):
                result["errors"].append(f"prompt {i}: answer is not a completion")
                result["outputs"].append(None)
                continue
            result["outputs"].append(_parse_choice(choice))
    got = [o for o in result["outputs"] if o]
    result["logprobs"] = any(o.get("logprobs") for o in got)
    result["wall_s"] = round(clock.monotonic() - t0, 2)
    if not got:
        return {"skipped": f"no output for any quality prompt "
                           f"({result['errors'][0] if result['errors'] else 'no prompt'})",
                "errors": result["errors"]}
    return result


def _seq(o: dict[str, Any]) -> list[Any]:
    """The output as a comparable sequence: its tokens when the server gave them, else its characters."""
    return list(o["tokens"]) if o.get("tokens") is not None else list(o.get("text") or "")


def compare_quality(ref: dict[str, Any], mode: dict[str, Any], th: dict[str, float] | None = None) -> dict[str, Any]:
    """Exact-match rate and mean top-1 logprob agreement of `mode`'s outputs against `ref`'s."""
    th = th or {"min_exact_match": MIN_EXACT_MATCH, "min_logprob_agreement": MIN_LOGPROB_AGREEMENT}
    if mode.get("skipped"):
        return {"skipped": mode["skipped"]}
    if ref.get("prompt_digest") and mode.get("prompt_digest") and ref["prompt_digest"] != mode["prompt_digest"]:
        return {"skipped": "different quality prompts than the reference (another tokenizer or [quality] settings)"}
    pairs = [(a, b) for a, b in zip(ref.get("outputs") or [], mode.get("outputs") or []) if a and b]
    if not pairs:
        return {"skipped": "no prompt answered in both modes"}
    exact = 0
    same_ctx = 0
    same_top1 = 0
    agree: list[float] = []
    absdiff: list[float] = []
    for a, b in pairs:
        sa, sb = _seq(a), _seq(b)
        if sa == sb:
            exact += 1
        k = 0
        while k < len(sa) and k < len(sb) and sa[k] == sb[k]:
            k += 1
        compared = min(k + 1, max(len(sa), len(sb)))
        same_ctx += compared
        same_top1 += k
        la, lb = a.get("logprobs"), b.get("logprobs")
        if la and lb and a.get("tokens") is not None and b.get("tokens") is not None:
            for j in range(min(k, len(la), len(lb))):
                x, y = la[j], lb[j]
                if isinstance(x, (int, float)) and isinstance(y, (int,
                                                                  float)) and math.isfinite(x) and math.isfinite(y):
                    d = abs(x - y)
                    absdiff.append(d)
                    agree.append(math.exp(-d))
    n = len(pairs)
    out: dict[str, Any] = {
        "prompts": n,
        "exact_match_rate": round(exact / n, 4),
        "top1_agreement": round(same_top1 / same_ctx, 4) if same_ctx else None,
        "logprob_agreement": round(sum(agree) / len(agree), 4) if agree else None,
        "mean_abs_logprob_diff": round(sum(absdiff) / len(absdiff), 4) if absdiff else None,
        "logprob_positions": len(agree),
        "thresholds": dict(th),
    }
    why = []
    if out["exact_match_rate"] < th["min_exact_match"]:
        why.append(f"exact match {out['exact_match_rate']:.0%} < {th['min_exact_match']:.0%}")
    if out["logprob_agreement"] is not None and out["logprob_agreement"] < th["min_logprob_agreement"]:
        why.append(f"logprob agreement {out['logprob_agreement']:.3f} < {th['min_logprob_agreement']:.3f}")
    out["flagged"] = bool(why)
    out["why"] = "; ".join(why) or None
    if out["logprob_agreement"] is None:
        out["note"] = "no logprobs to compare (the server returned none, or no output shared a first token)"
    return out


__all__ = ["collect_outputs", "compare_quality", "quality_prompts", "thresholds"]
