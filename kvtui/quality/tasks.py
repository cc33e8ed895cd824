"""Quality items with ground truth, generated from a seed (same items in every mode and run).

An item is one chat request with an expected answer and a scoring rule. Token lengths are the
server's: `Sizer` measures the filler and the wrapper through the server's `/tokenize` once,
so a passkey prompt "of 4,096 tokens" is 4,096 tokens through the real tokenizer and chat
template (give or take one filler sentence); each answer's `usage.prompt_tokens` is kept too.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kvtui.errors import UsageError

SCORINGS = ("exact", "contains", "regex", "number", "choice")

# The filler of the passkey test (Mohtashami & Jaggi, 2023): repetitive, meaningless, so the
# only thing worth retrieving is the key.
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "

_NOUNS = ("teacher farmer doctor pilot child painter sailor baker driver singer writer miner "
          "student soldier nurse clerk").split()
_ADJS = "old young tall quiet brave tired happy clever patient careful".split()
_VERBS = "carried found painted repaired sold borrowed opened washed measured counted".split()
_THINGS = ("umbrella lantern basket ladder kettle bicycle blanket compass violin mirror "
           "notebook hammer").split()
_COLOURS = "red green blue yellow grey white black brown".split()
_PLACES = ("station harbour market library garden bridge bakery school tower chapel "
           "museum stable").split()

# Beginnings of real text for the agreement task: greedy continuations compared with the
# baseline's, token by token.
_TOPICS = ("the water cycle", "how a bicycle works", "why the sky is blue", "the history of bread",
           "how vaccines train the immune system", "the rules of chess", "how bees make honey",
           "what a prime number is", "how a refrigerator keeps food cold", "the causes of seasons",
           "how to plant a tree", "what photosynthesis does", "how a compass works",
           "the life of a star", "why we sleep", "how rainbows form")
_ASKS = ("Explain {t} in three sentences.", "Write a short paragraph about {t}.",
         "Describe {t} to a ten-year-old.", "Give two facts about {t}.")


@dataclass
class Item:
    task: str
    id: str
    messages: list[dict[str, str]]
    expected: list[str] = field(default_factory=list)  # any of these counts as right
    scoring: str = "contains"
    max_tokens: int = 32
    meta: dict[str, Any] = field(default_factory=dict)  # length, depth, …
    logprobs: bool = False  # agreement items: keep tokens and logprobs

    def key(self) -> str:
        return hashlib.sha256(json.dumps([self.task, self.id, self.messages, self.expected, self.scoring,
                                          self.max_tokens], sort_keys=True).encode()).hexdigest()[:12]


# --- scoring ---------------------------------------------------------------------------------

def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().casefold()


def _strip_quote(s: str) -> str:
    return _norm(s).strip(" \"'`.").strip()


def score(item: Item, answer: str) -> bool:
    """Does `answer` count as right for `item`?"""
    ans = answer or ""
    if item.scoring == "exact":
        return any(_strip_quote(ans) == _strip_quote(e) for e in item.expected)
    if item.scoring == "contains":
        a = _norm(ans)
        return any(_norm(e) in a for e in item.expected if e)
    if item.scoring == "regex":
        return any(re.search(e, ans) for e in item.expected)
    if item.scoring == "number":
        m = re.search(r"-?\d+(?:\.\d+)?", ans.replace(",", ""))
        return m is not None and any(abs(float(m.group()) - float(e)) < 1e-9 for e in item.expected)
    if item.scoring == "choice":  # the first letter A-Z standing alone
        m = re.search(r"\b([A-Z])\b", ans)
        return m is not None and m.group(1) in [e.strip().upper() for e in item.expected]
    raise ValueError(item.scoring)


# --- lengths through the server's tokenizer --------------------------------------------------

class Sizer:
    """Token counts of chat messages through the server's tokenizer and chat template.

    `count(messages)` asks `/tokenize` (vLLM's, with `messages`); without one it estimates at 4
    characters a token and says so (`exact` False)."""

    def __init__(self, tokenize: Callable[[list[dict[str, str]]], int | None]):
        self._tokenize = tokenize
        self.exact = True
        self._cache: dict[str, int] = {}

    def count(self, messages: list[dict[str, str]]) -> int:
        k = json.dumps(messages)
        if k not in self._cache:
            n = self._tokenize(messages)
            if n is None:
                self.exact = False
                n = sum(len(m.get("content", "")) for m in messages) // 4 + 8
            self._cache[k] = n
        return self._cache[k]


# --- the built-in tasks ----------------------------------------------------------------------

def _passkey_messages(key: int, units: int, depth: float) -> list[dict[str, str]]:
    before = int(round(units * depth))
    text = ("There is an important pass key hidden inside a lot of irrelevant text. Find it and "
            "memorize it. I will quiz you about the pass key.\n\n"
            + FILLER * before
            + f"The pass key is {key}. Remember it. {key} is the pass key. "
            + FILLER * (units - before)
            + "\n\nWhat is the pass key? Answer with the number only.")
    return [{"role": "user", "content": text}]


def passkey_items(n: int, lengths: list[int], seed: int, sizer: Sizer) -> list[Item]:
    """n passkey items spread evenly over `lengths` (tokens) and depths 0…1 in the filler."""
    if n <= 0 or not lengths:
        return []
    rng = random.Random(f"passkey:{seed}")
    wrap = sizer.count(_passkey_messages(10000, 0, 0.5))
    unit = max(1, sizer.count(_passkey_messages(10000, 40, 0.5)) - wrap) / 40
    per_len = max(1, n // len(lengths))
    items: list[Item] = []
    for li, length in enumerate(sorted(lengths)):
        count = per_len if li < len(lengths) - 1 else n - per_len * (len(lengths) - 1)
        units = max(0, int((length - wrap) / unit))
        # One correction through the real tokenizer: the filler's tokens depend on its neighbours. Rounded
        # down, so the prompt stays at or under its length (the top length is the context less the answer's room).
        got = sizer.count(_passkey_messages(10000, units, 0.5))
        units = max(0, units + math.floor((length - got) / unit))
        for j in range(count):
            depth = (j + 0.5) / count
            key = rng.randrange(10000, 100000)
            items.append(Item(task="passkey", id=f"L{length}-d{depth:.2f}-{j}", messages=_passkey_messages(key, units,
                depth),
                              expected=[str(key)], scoring="contains", max_tokens=12,
                              meta={"length": length, "depth": round(depth, 3)}))
    return items


_KEYS = ("amber harbor cobalt falcon garnet heron indigo juniper kestrel lotus maple nectar orchid pepper quartz "
         "raven saffron tundra umber violet willow yarrow zephyr cedar").split()


def _needles_messages(needles: list[tuple[str, int]], ask: str, units: int,
                      depths: list[float]) -> list[dict[str, str]]:
    """Filler with one sentence per needle at its depth, then the question about one key."""
    cuts = sorted((int(round(units * d)), k, v) for (k, v), d in zip(needles, depths))
    parts, at = [], 0
    for cut, k, v in cuts:
        parts.append(FILLER * (cut - at) + f"One of the special magic numbers for {k} is: {v}. ")
        at = cut
    parts.append(FILLER * (units - at))
    text = ("Some special magic numbers are hidden inside the following text. Make sure to memorize them. "
            "I will quiz you about the numbers afterwards.\n\n" + "".join(parts)
            + f"\n\nWhat is the special magic number for {ask} mentioned in the provided text? "
              "Answer with the number only.")
    return [{"role": "user", "content": text}]


def needle_items(n: int, lengths: list[int], seed: int, sizer: Sizer, needles: int = 4) -> list[Item]:
    """Multi-key needles (RULER's niah_multikey): `needles` keys with 7-digit numbers at spread depths,
    one of them asked for; the others are distractors of the same form, so an answer that grabs
    any number is wrong. Spread evenly over `lengths` (tokens) like the passkey items."""
    if n <= 0 or not lengths:
        return []
    rng = random.Random(f"needles:{seed}")
    probe = [(k, 1000000) for k in _KEYS[:needles]]
    wrap = sizer.count(_needles_messages(probe, _KEYS[0], 0, [0.5] * needles))
    unit = max(1, sizer.count(_needles_messages(probe, _KEYS[0], 40, [0.5] * needles)) - wrap) / 40
    per_len = max(1, n // len(lengths))
    items: list[Item] = []
    for li, length in enumerate(sorted(lengths)):
        count = per_len if li < len(lengths) - 1 else n - per_len * (len(lengths) - 1)
        units = max(0, int((length - wrap) / unit))
        got = sizer.count(_needles_messages(probe, _KEYS[0], units, [0.5] * needles))
        units = max(0, units + math.floor((length - got) / unit))  # at or under: see passkey_items
        for j in range(count):
            keys = rng.sample(_KEYS, needles)
            vals = [rng.randrange(1_000_000, 10_000_000) for _ in keys]
            depths = sorted(rng.random() for _ in keys)
            target = rng.randrange(needles)
            items.append(Item(task="needles", id=f"L{length}-{j}",
                              messages=_needles_messages(list(zip(keys, vals)), keys[target], units, depths),
                              expected=[str(vals[target])], scoring="contains", max_tokens=16,
                              meta={"length": length, "depth": round(depths[target], 3), "needles": needles}))
    return items


def _sentence(rng: random.Random) -> str:
    return (f"The {rng.choice(_ADJS)} {rng.choice(_NOUNS)} {rng.choice(_VERBS)} a {rng.choice(_COLOURS)} "
            f"{rng.choice(_THINGS)} near the {rng.choice(_PLACES)}.")


def quotation_items(n: int, seed: int, sentences: int = 12) -> list[Item]:
    """Reproduce one numbered sentence of the prompt verbatim (exact quotation of a span)."""
    rng = random.Random(f"quotation:{seed}")
    items = []
    for i in range(max(0, n)):
        lines = [_sentence(rng) for _ in range(sentences)]
        k = rng.randrange(sentences)
        body = "\n".join(f"{j + 1}. {s}" for j, s in enumerate(lines))
        text = (f"Here are {sentences} numbered sentences.\n\n{body}\n\n"
                f"Copy sentence number {k + 1} exactly as it is written, and nothing else.")
        items.append(Item(task="quotation", id=f"q{i}", messages=[{"role": "user", "content": text}],
                          expected=[lines[k]], scoring="contains", max_tokens=40, meta={"line": k + 1}))
    return items


def agreement_items(n: int, seed: int, max_tokens: int = 48) -> list[Item]:
    """Real-text requests whose greedy answers are compared token by token with the baseline's."""
    rng = random.Random(f"agreement:{seed}")
    pairs = [(a, t) for t in _TOPICS for a in _ASKS]
    rng.shuffle(pairs)
    out = []
    for i in range(max(0, n)):
        ask, topic = pairs[i % len(pairs)]
        out.append(Item(task="agreement", id=f"a{i}", messages=[{"role": "user", "content": ask.format(t=topic)}],
                        expected=[], scoring="agreement", max_tokens=max_tokens, logprobs=True))
    return out


# --- the user's own task files ---------------------------------------------------------------

def load_task_file(path: str | Path, default_max_tokens: int = 64) -> list[Item]:
    """JSON Lines, one item a line: {"prompt": str} or {"messages": [...]}, "expected": str | [str],
    optional "scoring" (exact, contains, regex, number, choice; default contains), "max_tokens", "id".
    Every problem names file:line: field."""
    p = Path(path)
    task = p.stem
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise UsageError(f"{p}: cannot read the quality task file ({e.strerror or e})") from None
    items: list[Item] = []
    for no, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{p}:{no}"
        try:
            row = json.loads(line)
        except ValueError as e:  # JSONDecodeError, or a plain ValueError (an integer over 4300 digits)
            raise UsageError(f"{where}: not JSON ({e.msg if isinstance(e, json.JSONDecodeError) else e})") from None
        if not isinstance(row, dict):
            raise UsageError(f"{where}: a task item must be a JSON object")
        if isinstance(row.get("messages"), list) and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in row["messages"]) and row["messages"]:
            messages = [{"role": m["role"], "content": m["content"]} for m in row["messages"]]
        elif isinstance(row.get("prompt"), str) and row["prompt"]:
            messages = [{"role": "user", "content": row["prompt"]}]
        else:
            raise UsageError(f"{where}: prompt: a non-empty string (or messages: a list of {{role, content}})")
        exp = row.get("expected")
        if isinstance(exp, (str, int, float)) and not isinstance(exp, bool):
            exp = [str(exp)]
        if not (isinstance(exp, list) and exp and all(isinstance(e, (str, int, float)) for e in exp)):
            raise UsageError(f"{where}: expected: a string or a list of strings")
        scoring = row.get("scoring", "contains")
        if scoring not in SCORINGS:
            raise UsageError(f"{where}: scoring: {scoring!r} is not one of {', '.join(SCORINGS)}")
        if scoring == "regex":
            for pat in exp:
                try:
                    re.compile(str(pat))
                except re.error as err:
                    raise UsageError(f"{where}: expected: bad regex {pat!r} ({err})") from None
        mt = row.get("max_tokens", default_max_tokens)
        if not isinstance(mt, int) or isinstance(mt, bool) or not 1 <= mt <= 4096:
            raise UsageError(f"{where}: max_tokens: an integer from 1 to 4096")
        items.append(Item(task=task, id=str(row.get("id", no)), messages=messages, expected=[str(e) for e in exp],
                          scoring=scoring, max_tokens=mt))
    if not items:
        raise UsageError(f"{p}: no task items in the file")
    return items


def default_lengths(max_context: int) -> list[int]:
    """Passkey lengths: a quarter, half and all of the largest context served (the seed article's
    'cover your largest context'), never below 256 tokens."""
    top = max(256, int(max_context))
    return sorted({max(256, top // 4), max(256, top // 2), top})
