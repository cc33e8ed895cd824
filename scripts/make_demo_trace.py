"""Write the shipped demo trace (kvtui/data/scenarios/traces/demo-mooncake.jsonl.zst), in Mooncake's layout.

    python scripts/make_demo_trace.py [OUT]

Synthetic and deterministic (seed 0): 2,000 requests over ~8 minutes at ~4 req/s in bursts; each
prompt is one of 60 shared prefixes (a system prompt or a document, 2–4 blocks of 512 tokens, picked
with Zipf popularity) followed by 0–2 blocks of its own; outputs lognormal, longer for longer
prompts. The prefixes' working set (~90k tokens) outgrows a simulated L4's bf16 KV cache, and less
so its fp8 one: the prefix cache binds, and fp8 KV raises its hit rate (sim-trace.toml)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

ROWS = 2000
PREFIXES = 60
BLOCK = 512


def rows(seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    prefixes = []
    next_id = 0
    for _ in range(PREFIXES):
        n = rng.randint(2, 4)
        prefixes.append(list(range(next_id, next_id + n)))
        next_id += n
    weights = [1 / (k + 1) ** 0.9 for k in range(PREFIXES)]
    out = []
    t = 0.0
    for _ in range(ROWS):
        t += rng.expovariate(4.0) * (0.2 if rng.random() < 0.3 else 1.4)  # bursts and lulls
        pre = rng.choices(prefixes, weights)[0]
        own = rng.randint(0, 2)
        ids = pre + list(range(next_id, next_id + own))
        next_id += own
        length = len(ids) * BLOCK - rng.randrange(0, BLOCK // 2 if own else 1)
        out_len = max(8, min(400, int(rng.lognormvariate(4.4 + length / 8000, 0.5))))
        out.append({"timestamp": int(t * 1000), "input_length": length, "output_length": out_len, "hash_ids": ids})
    return out


def main() -> None:
    import zstandard

    dest = Path(sys.argv[1] if len(sys.argv) > 1 else
                Path(__file__).resolve().parent.parent / "kvtui/data/scenarios/traces/demo-mooncake.jsonl.zst")
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows())
    dest.write_bytes(zstandard.ZstdCompressor(level=19).compress(text.encode()))
    print(f"{dest}: {ROWS} rows, {dest.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
