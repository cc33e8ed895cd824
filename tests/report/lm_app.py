"""A real HTTP server with a tiny deterministic "language model" behind vLLM's completions API.

Stands in for a model with real weights, which neither the simulator (it has none) nor
this CI box (no GPU, no vLLM) can serve, so the quality guard's HTTP path and arithmetic
can be checked against known answers. Non-streaming `/v1/completions` with token-id
prompts, `logprobs`, and vLLM's `return_tokens_as_token_ids`.

The model name picks the variant:
- "good":   next token = f(last three tokens); top-1 logprob from the context.
- "near":   the same tokens, each logprob 0.02 lower (a correct, slightly different mode).
- "broken": a different first token, then f of that (a fast but wrong mode).
- "drift":  like "good" but, on about half the prompts ((sum of ids // 7) even), a different token from position 8 on.
- "plain":  like "good" but a server without logprobs or vLLM extras (OpenAI-style text only).

Run: python lm_app.py PORT
"""

import sys

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

VOCAB = 50000


def nxt(ctx):
    return (ctx[-1] * 31 + ctx[-2] * 17 + ctx[-3] * 7 + 11) % VOCAB


def lp(ctx):
    return -((ctx[-1] % 97) / 97.0) * 0.5 - 0.01


def generate(variant, prompt, n):
    ctx = list(prompt)
    toks, lps = [], []
    diverge = variant == "drift" and (sum(prompt) // 7) % 2 == 0
    for i in range(n):
        t, l = nxt(ctx), lp(ctx)
        if variant == "broken" and i == 0:
            t, l = (t + 1) % VOCAB, l - 1.5
        if diverge and i >= 8:
            t = (t + 3) % VOCAB
        if variant == "near":
            l -= 0.02
        toks.append(t)
        lps.append(l)
        ctx.append(t)
    return toks, lps


async def completions(request: Request):
    body = await request.json()
    variant = body.get("model", "good")
    prompt = body.get("prompt")
    if not (isinstance(prompt, list) and len(prompt) >= 3 and all(isinstance(x, int) for x in prompt)):
        return JSONResponse({"error": {"message": "token-id prompt of 3+ ids expected"}}, status_code=400)
    if variant == "plain" and "return_tokens_as_token_ids" in body:
        return JSONResponse({"error": {"message": "unknown field return_tokens_as_token_ids"}}, status_code=400)
    if body.get("temperature") != 0 or body.get("stream"):
        return JSONResponse({"error": {"message": "this model only answers at temperature 0, non-streaming"}}, status_code=400)
    n = int(body.get("max_tokens") or 16)
    toks, lps = generate(variant, prompt, n)
    text = "".join(f" t{t}" for t in toks)
    choice = {"index": 0, "text": text, "finish_reason": "length", "logprobs": None}
    if body.get("logprobs") and variant != "plain":
        names = [f"token_id:{t}" if body.get("return_tokens_as_token_ids") else f" t{t}" for t in toks]
        offsets, pos = [], 0
        for t in toks:
            offsets.append(pos)
            pos += len(f" t{t}")
        choice["logprobs"] = {"text_offset": offsets, "token_logprobs": lps, "tokens": names,
                              "top_logprobs": [{nm: l} for nm, l in zip(names, lps)]}
    usage = {"prompt_tokens": len(prompt), "completion_tokens": n, "total_tokens": len(prompt) + n}
    return JSONResponse({"id": "cmpl-1", "object": "text_completion", "model": variant, "choices": [choice], "usage": usage})


app = Starlette(routes=[
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/health", lambda r: Response(status_code=200)),
])

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
