"""Run a mode's quality items against its server, before its load, and score them.

One phase per mode, timed (`wall_s`), with `concurrency` requests in flight at most, each a
chat request at temperature 0 (the model's own chat template), non-streaming. None of these
requests is a step's: the load generator has not started when this runs, and the server is
drained (no request in flight) when it returns. A request that fails is an error of the item,
counted apart from wrong answers.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
from typing import TYPE_CHECKING, Any, Callable

from kvtui import clock
from kvtui.quality.stats import wilson
from kvtui.quality.tasks import (
    Item,
    Sizer,
    agreement_items,
    default_lengths,
    load_task_file,
    needle_items,
    passkey_items,
    quotation_items,
    score,
)
from kvtui.safeio import fetch

if TYPE_CHECKING:
    from kvtui.quality.harness import HarnessSession

GOT_CHARS = 120  # how much of each answer the snapshot keeps (enough to see what went wrong)
MARGIN_TOKENS = 32  # passkey prompts stay this far below max_context (answer + template slack)


def build_items(scenario: Any, sizer: Sizer, max_model_len: int | None) -> list[Item]:
    """Every quality item of the scenario, in a fixed order (the same in every mode)."""
    q = scenario.quality
    seed = int(scenario.seed)
    ctx = int(q.max_context or max_model_len or scenario.server.max_model_len or 2048)
    if max_model_len:
        ctx = min(ctx, int(max_model_len))
    items: list[Item] = []
    for task in q.tasks:
        if task == "passkey":
            lengths = list(q.lengths) or default_lengths(ctx - MARGIN_TOKENS)
            lengths = [min(n, ctx - MARGIN_TOKENS) for n in lengths]
            items += passkey_items(q.items, lengths, seed, sizer)
        elif task == "needles":  # RULER-style multi-key retrieval, at the same lengths as passkey
            lengths = list(q.lengths) or default_lengths(ctx - MARGIN_TOKENS)
            lengths = [min(n, ctx - MARGIN_TOKENS) for n in lengths]
            items += needle_items(q.items, lengths, seed, sizer)
        elif task == "quotation":
            items += quotation_items(q.items, seed)
        elif task == "agreement":
            items += agreement_items(q.items, seed)
    for f in q.task_files:
        items += load_task_file(f)
    return items


def items_digest(items: list[Item]) -> str:
    return hashlib.sha256("".join(i.key() for i in items).encode()).hexdigest()[:16]


def _tokenizer(client: Any, model: str) -> Callable[[list[dict[str, str]]], int | None]:
    state = {"ok": True}

    def count(messages: list[dict[str, str]]) -> int | None:
        if not state["ok"]:
            return None
        try:
            r = fetch(client, "POST", "/tokenize", json={"model": model, "messages": messages,
                                                         "add_generation_prompt": True})
            n = r.field("count") if r.status_code == 200 else None
        except Exception:  # no /tokenize (an external server): estimate, and say so
            n = None
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            state["ok"] = False
            return None
        return n

    return count


def _ask(client: Any, model: str, item: Item) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": item.messages, "max_tokens": item.max_tokens,
                            "temperature": 0.0, "seed": 0, "stream": False}
    if item.logprobs:
        body.update(logprobs=True, top_logprobs=1, return_tokens_as_token_ids=True)
    t0 = clock.monotonic()
    try:
        r = fetch(client, "POST", "/v1/chat/completions", json=body)  # bounded, untrusted (kvtui.safeio)
    except Exception as e:  # httpx errors and the like: the item's error, never the run's
        return {"error": f"{type(e).__name__}: {str(e)[:100]}"}
    if r.status_code != 200:
        return {"error": f"HTTP {r.status_code}: {r.text[:100]}"}
    try:
        doc = r.json()
        choice = doc["choices"][0]
        text = choice["message"].get("content") or ""
        if not isinstance(text, str):
            raise TypeError("content")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return {"error": "answer is not a chat completion"}
    usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
    out: dict[str, Any] = {"text": text, "finish_reason": choice.get("finish_reason"),
                           "prompt_tokens": usage.get("prompt_tokens"), "output_tokens": usage.get("completion_tokens"),
                           "s": round(clock.monotonic() - t0, 3)}
    if item.logprobs:
        tokens, lps = [], []
        for c in ((choice.get("logprobs") or {}).get("content") or []):
            if not isinstance(c, dict):
                continue
            tok = str(c.get("token", ""))
            tokens.append(int(tok.split(":", 1)[1]) if tok.startswith("token_id:") and tok[9:].isdigit() else tok)
            top_lps = [t.get("logprob") for t in (c.get("top_logprobs") or []) if isinstance(t, dict)]
            tops: list[float] = [v for v in top_lps if isinstance(v, (int, float))]
            lp = c.get("logprob")
            lps.append(max(tops) if tops else (lp if isinstance(lp, (int, float)) else None))
        out["tokens"], out["logprobs"] = tokens, lps
    return out


def _task_result(task: str, items: list[Item], answers: list[dict[str, Any]]) -> dict[str, Any]:
    rows = []
    correct = errors = 0
    by_length: dict[str, list[int]] = {}
    for it, a in zip(items, answers):
        if "error" in a:
            errors += 1
            ok = False
        else:
            ok = score(it, a["text"])
        correct += ok
        sha = hashlib.sha256((a.get("text") or "").encode()).hexdigest()[:16] if "error" not in a else None
        row = {"id": it.id, "key": it.key(), "ok": ok, "got": (a.get("text") or a.get("error") or "")[:GOT_CHARS],
               "text_sha": sha,  # the full answer's digest: answers under load are compared with these
               "prompt_tokens": a.get("prompt_tokens"), "output_tokens": a.get("output_tokens")}
        if "error" in a:
            row["error"] = a["error"]
        rows.append(row)
        if "length" in it.meta:
            cell = by_length.setdefault(str(it.meta["length"]), [0, 0])
            cell[0] += ok
            cell[1] += 1
    n = len(items)
    lo, hi = wilson(correct, n)
    pts = [v for r in rows if isinstance(v := r.get("prompt_tokens"), int)]
    return {"task": task, "scoring": items[0].scoring if items else None, "n": n, "correct": correct,
            "errors": errors, "accuracy": round(correct / n, 4) if n else None, "ci": [round(lo, 4), round(hi, 4)],
            "by_length": by_length or None, "prompt_tokens_max": max(pts) if pts else None, "items": rows}


def _agreement_result(items: list[Item], answers: list[dict[str, Any]]) -> dict[str, Any]:
    outs: list[dict[str, Any] | None] = []  # None where the item's request failed
    errors = []
    for it, a in zip(items, answers):
        if "error" in a:
            errors.append(f"{it.id}: {a['error']}")
            outs.append(None)
        else:
            outs.append({"text": a["text"], "tokens": a.get("tokens"), "logprobs": a.get("logprobs"),
                         "finish_reason": a.get("finish_reason")})
    return {"task": "agreement", "scoring": "agreement with the reference's greedy outputs", "n": len(items),
            "prompt_digest": items_digest(items), "outputs": outs, "errors": errors}


def run_suite(endpoint: Any, scenario: Any, on_log: Callable[[str], None] | None = None,
              should_stop: Callable[[], Any] | None = None, harness: HarnessSession | None = None) -> dict[str, Any]:
    """{"tasks": {name: result}, "wall_s", "items", "items_digest", "lengths_exact"}; never raises for server errors.

    `harness`: the scenario's suites already prepared (quality at the knee prepares them before its load); told
    to go after the built-in items. Its caller closes it. Without it the suites are prepared and run here."""
    import httpx

    log = on_log or (lambda _m: None)
    q = scenario.quality
    t0 = clock.monotonic()
    started_at = clock.time()
    timeout = max(30.0, float(getattr(scenario.ramp, "request_timeout_s", 600.0) or 600.0))
    limits = httpx.Limits(max_connections=q.concurrency, max_keepalive_connections=q.concurrency)
    from kvtui.safeio import http_client, thread_stop

    stopping = (lambda: bool(should_stop())) if should_stop is not None else (lambda: False)
    with http_client(base_url=endpoint.base_url, headers=endpoint.headers(), timeout=timeout,
                     limits=limits) as client:
        sizer = Sizer(_tokenizer(client, endpoint.model))
        items = build_items(scenario, sizer, getattr(endpoint, "max_model_len", None))
        log(f"[kvtui] quality: {len(items)} items ({', '.join(sorted({i.task for i in items}))}), "
            f"{q.concurrency} at a time, before the load")
        with concurrent.futures.ThreadPoolExecutor(max_workers=q.concurrency) as pool:
            def ask(it: Item) -> dict[str, Any]:
                if should_stop is not None and should_stop():  # a stop (q, Ctrl-C, SIGTERM) sends no more
                    return {"error": "not sent: the run was stopping"}
                with thread_stop(stopping):  # one in flight ends within 0.25 s of the stop
                    return _ask(client, endpoint.model, it)

            answers = list(pool.map(ask, items))
    tasks: dict[str, Any] = {}
    for name in dict.fromkeys(i.task for i in items):
        idx = [k for k, it in enumerate(items) if it.task == name]
        its, ans = [items[k] for k in idx], [answers[k] for k in idx]
        tasks[name] = _agreement_result(its, ans) if name == "agreement" else _task_result(name, its, ans)
    for name, t in tasks.items():
        if name != "agreement":
            log(f"[kvtui] quality: {name} {t['correct']}/{t['n']}"
                + (f" ({t['errors']} errors)" if t["errors"] else ""))
    if q.suites and not (should_stop is not None and should_stop()):
        if harness is not None:
            harness.go()
            tasks.update(harness.result(should_stop=should_stop))
        else:
            from kvtui.quality.harness import run_suites

            tasks.update(run_suites(endpoint, scenario, on_log=log, should_stop=should_stop))
    wall = round(clock.monotonic() - t0, 2)
    stopped = bool(should_stop is not None and should_stop())
    return {"tasks": tasks, "wall_s": wall, "items": len(items), "items_digest": items_digest(items),
            "lengths_exact": sizer.exact, "started_at": started_at, "ended_at": clock.time(),
            "concurrency": q.concurrency, "stopped": stopped}


def dumps(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1)
