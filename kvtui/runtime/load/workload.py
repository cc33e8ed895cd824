"""Workload synthesis: prompts of exact token lengths, unique per request unless shared.

A prompt is built from a *token space*: words the server's tokenizer maps to exactly one
ordinary (non-special) token each, found by probing `/tokenize` once per run. Then
- completions send token ids (exact length, no tokenizer on the client), and
- chat sends those words joined by spaces (one token each; the chat template's own
  tokens are measured once and subtracted). A word is probed after another word (" word")
  and alone: a text's first word has no space before it, and a BPE vocabulary may split
  it there (SmolLM2's "morning", "guy"), so a chat text starts with one that stays whole.

Every request's prompt starts with a marker that encodes the run salt and a counter, so
no two requests share a prefix block across steps, warm-up, modes or resumed runs —
unless the scenario asks for a shared prefix, which then comes first.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from kvtui import clock
from kvtui.errors import UsageError
from kvtui.io.scenario.dataset import Dataset  # noqa: F401 - kvtui.runtime.load.workload.Dataset, its old home
from kvtui.io.scenario.schema import Length, Workload
from kvtui.safeio import fetch

MARKER_TOKENS = 4  # base-|space| digits of (salt, counter): 200^4 = 1.6e9 distinct prefixes
MOONCAKE_BLOCK = 512  # tokens per trace block (kvtui.io.scenario.trace.MOONCAKE_BLOCK)

# Candidate words for probing a tokenizer: the synthetic "tN" words (the dummy models'
# and the simulator's vocabulary) and common English words that most BPE vocabularies
# hold as one token with a leading space.
_ENGLISH = (
    "the of and to in is was for that on with as by at from his her are this have which be or had "
    "not but what all were when we there can an your their one has more if no out so said up its "
    "about into than them only other new some could time these two may then do first any my now "
    "such like our over man me even most made after also did many before must through back years "
    "where much way well down should because each just those people how too little state good very "
    "make world still own see men work long get here between both life being under never day same "
    "another know while last might us great old year off come since against go came right used take "
    "three small large next early young important few public bad able open case number point group "
    "problem fact hand part place week company system program question government night home water "
    "room mother area money story month lot study book eye job word business issue side kind head "
    "house service friend father power hour game line end member law car city community name team "
    "minute idea kid body information school face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force education"
).split()


@dataclass
class TokenSpace:
    """Words that are one ordinary token each, with their ids, and the chat template overhead."""

    words: list[str]
    ids: list[int]
    chat_overhead: int = 0  # tokens the chat template adds around one user message
    # Indices of the words that are one token at the start of a text too (no space before
    # them): a chat text's first word is one of these. Empty: every word is (tN vocabularies).
    starts: list[int] = field(default_factory=list)
    verified: bool = True  # False when the server has no /tokenize (lengths approximate)
    source: str = ""

    @classmethod
    def synthetic(cls, vocab_size: int = 128256, n: int = 4096) -> "TokenSpace":
        """The "tN" vocabulary of the simulator and the dummy-weight models: tN is id N."""
        n = min(n, vocab_size)
        step = max(1, vocab_size // n)
        ids = list(range(0, step * n, step))[:n]
        return cls(words=[f"t{i}" for i in ids], ids=ids, source="synthetic tN vocabulary")

    def __post_init__(self) -> None:
        self._start_set = frozenset(self.starts)

    def lead(self, i: int) -> int:
        """Word index `i` if it is one token at the start of a text, else a start word chosen by `i`."""
        if not self.starts or i in self._start_set:
            return i
        return self.starts[i % len(self.starts)]

    def to_dict(self) -> dict[str, Any]:
        return {"size": len(self.ids), "chat_overhead": self.chat_overhead, "verified": self.verified,
                "source": self.source, "start_words": len(self.starts) if self.starts else len(self.ids)}


@dataclass
class Prompt:
    """One request's payload. Exactly one of ids / text / messages is set."""

    ids: list[int] | None = None
    text: str | None = None
    messages: list[dict[str, str]] | None = None
    prompt_tokens: int = 0  # expected (exact when the token space is verified)
    max_tokens: int = 0


def sample_length(ln: Length, rng: random.Random, jitter: float = 0.0, cap: int = 0) -> int:
    """Draw one length. Fixed lengths get ±jitter so prefills do not march in lock-step."""
    if ln.dist == "fixed":
        v = float(ln.value)
        if jitter:
            v *= 1 + rng.uniform(-jitter, jitter)
    elif ln.dist == "uniform":
        v = rng.uniform(ln.min, ln.max + 1)
    elif ln.dist in ("normal", "trace"):  # trace: the factory takes the trace's rows; this only as a fallback
        v = rng.normalvariate(ln.mean, ln.std)
    else:  # lognormal with the given mean and std of the *result*
        sigma2 = math.log(1 + (ln.std / ln.mean) ** 2)
        mu = math.log(ln.mean) - sigma2 / 2
        v = rng.lognormvariate(mu, math.sqrt(sigma2))
    hi = ln.max if ln.max else (ln.upper if ln.dist != "fixed" else 1 << 30)
    if ln.dist == "fixed" and jitter:
        hi = 1 << 30
    n = int(round(v))
    n = max(ln.min if ln.dist != "fixed" else 1, min(n, hi))
    if cap:
        n = min(n, cap)
    return max(1, n)


def _digest(*parts: Any) -> int:
    h = hashlib.blake2b(repr(parts).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


@dataclass
class Conversation:
    """Multi-turn state: each turn re-sends the whole history."""

    cid: str
    turn: int = 0
    ids: list[int] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)


class PromptFactory:
    """Deterministic prompts: request number `counter` always gets the same prompt for a seed and salt."""

    def __init__(self, workload: Workload, space: TokenSpace, max_model_len: int, salt: int, seed: int = 0,
                 trace_rows: Any = None):
        self.w = workload
        self.space = space
        self.max_model_len = max_model_len
        self.salt = salt
        self.seed = seed
        self.dataset = Dataset(workload.dataset) if workload.dataset else None
        # A production trace (kvtui.io.scenario.trace): request `counter` takes row counter mod N, its
        # (input, output) pair jointly and its prefix blocks; read once per process, compactly.
        self.trace = None
        if workload.trace:
            from kvtui.io.scenario.trace import TraceSpec, replay_rows

            # rows already read (a load-generator worker gets the parent's), else read here
            self.trace = trace_rows if trace_rows is not None else replay_rows(TraceSpec.of(workload))
        self._blocks: dict[tuple, list[int]] = {}  # the trace's prompt blocks' token indices (bounded)
        n = len(space.ids)
        if n < 16:
            raise UsageError(f"token space too small ({n} single-token words found); cannot build unique prompts")
        self._indices = range(n)
        # The shared prefix is the same for every request of the run (and across runs with the same seed).
        self._shared_cache: dict[int, list[int]] = {}

    # -- lengths ---------------------------------------------------------------------
    @property
    def shares_prefixes(self) -> bool:
        """Do requests share prompt blocks (a shared prefix, a dataset, a trace's hash_ids or sessions)?"""
        return bool(self.w.shared_prefix > 0 or self.dataset is not None
                    or (self.trace is not None and self.trace.shares_prefixes))

    def lengths(self, counter: int) -> tuple[int, int]:
        """Request `counter`'s (prompt, output) tokens: the one place every protocol draws them
        (the live load generator, the simulator's --fast runs), a trace's row or the distributions."""
        if self.trace is not None:
            isl, osl = self.trace.row(counter)[:2]
            osl = min(osl, max(1, self.max_model_len - MARKER_TOKENS - 1))  # a longer row is cut to fit
        else:
            rng = random.Random(_digest(self.seed, "len", counter))
            isl = sample_length(self.w.prompt_tokens, rng, self.w.jitter)
            osl = sample_length(self.w.output_tokens, rng, self.w.jitter)
        # Never exceed the context (jitter can push a fixed length a little over).
        per_turn = max(1, self.max_model_len // max(1, self.w.turns))
        if isl + osl > per_turn:
            isl = max(MARKER_TOKENS + 1, per_turn - osl)
        return isl, osl

    # -- token-level building blocks ------------------------------------------------------
    def _marker(self, counter: int) -> list[int]:
        n = len(self.space.ids)
        # Mix salt and counter so consecutive requests differ in the first token too.
        x = _digest(self.salt, counter) % (n**MARKER_TOKENS)
        out = []
        for _ in range(MARKER_TOKENS):
            out.append(x % n)
            x //= n
        return out  # indices into the space

    def _shared(self, length: int) -> list[int]:
        if length not in self._shared_cache:
            rng = random.Random(_digest(self.seed, "shared"))
            self._shared_cache[length] = [rng.randrange(len(self.space.ids)) for _ in range(length)]
        return self._shared_cache[length]

    def _block(self, key: tuple, n: int) -> list[int]:
        """The token indices of one shared prompt block (a trace's hash id, or a chunk of a session's
        stream): the same key gives the same tokens within a run (salted: never across runs)."""
        got = self._blocks.get(key)
        if got is None or len(got) < n:
            if len(self._blocks) > 8192:
                self._blocks.clear()
            rng = random.Random(_digest(self.seed, self.salt, "block", key))
            got = self._blocks[key] = rng.choices(self._indices, k=max(n, MOONCAKE_BLOCK))
        return got[:n]

    def _trace_indices(self, counter: int, length: int) -> list[int] | None:
        """A trace row's prompt with exactly the trace's sharing, or None (no blocks, no session):
        Mooncake hash_ids are 512-token blocks (the same id, the same tokens); a session is one stream
        of tokens whose first `length` each of its requests sends (a later request shares the
        earlier one's prompt, as a conversation re-sends its history). Past the hashed blocks, the
        request's own marker and tokens."""
        assert self.trace is not None
        _, _, blocks, sess = self.trace.row(counter)
        # Each pass over the rows (counter // N: a run that outlasts the trace, a trace replay's step,
        # which starts a pass) has blocks of its own: the trace's sharing within a pass, never a whole
        # earlier pass's prompts again (a repeat that any prefix cache would serve whole).
        lap = counter // len(self.trace)
        out: list[int] = []
        if blocks:
            for h in blocks:
                if len(out) >= length:
                    break
                out += self._block(("h", h, lap), min(MOONCAKE_BLOCK, length - len(out)))
        elif sess >= 0:
            c = 0
            while len(out) < length:
                out += self._block(("s", sess, c, lap), min(MOONCAKE_BLOCK, length - len(out)))
                c += 1
        else:
            return None
        if len(out) < length:
            marker = self._marker(counter)
            rng = random.Random(_digest(self.seed, self.salt, "body", counter))
            out += marker + rng.choices(self._indices, k=max(0, length - len(out) - len(marker)))
        return out[:length]

    def _body_indices(self, counter: int, length: int) -> list[int]:
        """`length` token indices: shared prefix (if any), the unique marker, then random tokens."""
        if self.trace is not None:
            got = self._trace_indices(counter, length)
            if got is not None:
                return got
        shared_len = int(self.w.shared_prefix * length)
        shared = self._shared(shared_len) if shared_len else []
        marker = self._marker(counter)
        rest = max(0, length - len(shared) - len(marker))
        rng = random.Random(_digest(self.seed, self.salt, "body", counter))
        # choices() loops in C: ~10x faster than randrange per token, which matters when a
        # wave of slots rebuilds 2k-token prompts at once on the load generator's loop.
        body = rng.choices(self._indices, k=rest)
        return (shared + marker + body)[:length]

    # -- prompts -------------------------------------------------------------------------
    def build(self, counter: int, conversation: Conversation | None = None) -> Prompt:
        if self.dataset is not None:
            return self._from_dataset(counter)
        isl, osl = self.lengths(counter)
        api = self.w.api
        if api == "chat":
            overhead = self.space.chat_overhead
            idx = self._body_indices(counter, max(MARKER_TOKENS + 1, isl - overhead))
            idx[0] = self.space.lead(idx[0])  # no space before it: it must stay one token there too
            text = " ".join(self.space.words[i] for i in idx)
            if conversation is not None:
                msgs = conversation.messages + [{"role": "user", "content": text}]
                # Approximate: the assistant's real text need not be one token per word; usage has the truth.
                hist = sum(len(m["content"].split()) for m in conversation.messages)
                return Prompt(messages=msgs, prompt_tokens=hist + len(idx) + overhead, max_tokens=osl)
            return Prompt(messages=[{"role": "user", "content": text}], prompt_tokens=len(idx) + overhead,
                          max_tokens=osl)
        ids = [self.space.ids[i] for i in self._body_indices(counter, isl)]
        if conversation is not None:
            ids = conversation.ids + ids
        return Prompt(ids=ids, prompt_tokens=len(ids), max_tokens=osl)

    def extend_conversation(self, conv: Conversation, prompt: Prompt, output_text: str, output_tokens: int) -> None:
        """After a turn: the history is the prompt plus the answer (chat: the real text; ids: synthetic ids)."""
        conv.turn += 1
        if prompt.messages is not None:
            conv.messages = prompt.messages + [{"role": "assistant", "content": output_text or "ok"}]
        elif prompt.ids is not None:
            rng = random.Random(_digest(self.salt, conv.cid, conv.turn))
            n = len(self.space.ids)
            conv.ids = prompt.ids + [self.space.ids[rng.randrange(n)] for _ in range(max(1, output_tokens))]

    def _from_dataset(self, counter: int) -> Prompt:
        assert self.dataset is not None
        row = self.dataset.rows[counter % len(self.dataset.rows)]
        rng = random.Random(_digest(self.seed, "len", counter))
        osl = int(row.get("output_tokens") or sample_length(self.w.output_tokens, rng, self.w.jitter))
        marker = [] if self.w.shared_prefix else self._marker(counter)
        mwords = " ".join(self.space.words[i] for i in marker)
        if "prompt_ids" in row:
            ids = [self.space.ids[i] for i in marker] + list(row["prompt_ids"])
            return Prompt(ids=ids, prompt_tokens=len(ids), max_tokens=osl)
        if "messages" in row:
            msgs = [dict(m) for m in row["messages"]]
            if msgs and mwords:
                msgs[0]["content"] = mwords + " " + msgs[0]["content"]
            return Prompt(messages=msgs, prompt_tokens=0, max_tokens=osl)
        text = (mwords + " " + row["prompt"]) if mwords else row["prompt"]
        if self.w.api == "chat":
            return Prompt(messages=[{"role": "user", "content": text}], prompt_tokens=0, max_tokens=osl)
        return Prompt(text=text, prompt_tokens=0, max_tokens=osl)


def request_body(prompt: Prompt, model: str, workload: Workload, stream: bool = True) -> dict[str, Any]:
    """The OpenAI-compatible JSON body (vLLM extras: ignore_eos)."""
    body: dict[str, Any] = {"model": model, "max_tokens": prompt.max_tokens, "temperature": workload.temperature}
    if prompt.messages is not None:
        body["messages"] = prompt.messages
    elif prompt.ids is not None:
        body["prompt"] = prompt.ids
    else:
        body["prompt"] = prompt.text
    if workload.ignore_eos:
        body["ignore_eos"] = True
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


# -- token-space discovery over HTTP ------------------------------------------------------


def discover_token_space(base_url: str, model: str, headers: dict[str, str], timeout_s: float = 10.0,
                         should_stop: Callable[[], str | None] | None = None, budget_s: float = 300.0) -> TokenSpace:
    """Probe `/tokenize` for single-token words; fall back to the synthetic vocabulary.

    The "tN" words come first: on the simulator and on dummy-weight models each is
    exactly token N, which gives a large space. Real BPE vocabularies keep common
    English words as one token (with the leading space the join adds).

    Hundreds of probes against a slow /tokenize took hours and ignored SIGTERM: every probe
    first asks `should_stop` (a stop raises RunAborted), and after `budget_s` the remaining
    probes are skipped (the space is built from what was found, or refused, saying why).
    """
    import httpx

    from kvtui.errors import RunAborted

    deadline = clock.monotonic() + budget_s
    slow = []

    def check() -> bool:
        why = should_stop() if should_stop else None
        if why:
            raise RunAborted(f"token-space discovery stopped: {why}")
        if clock.monotonic() > deadline:
            slow.append(1)
            return False
        return True

    from kvtui.safeio import http_client

    # each probe's whole answer within timeout_s (fetch: the client's timeout), a trickle too
    with http_client(base_url=base_url, headers=headers, timeout=timeout_s) as client:

        def tok(payload: dict[str, Any]) -> list[int] | None:
            if not check():
                return None
            try:
                r = fetch(client, "POST", "/tokenize", json={"model": model, **payload})  # bounded (kvtui.safeio)
            except httpx.HTTPError:
                return None
            if r.status_code != 200:
                return None
            try:
                return list(r.json()["tokens"])
            except (ValueError, KeyError, TypeError):
                return None

        probe = " ".join(f"t{i}" for i in range(0, 4096))
        ids = tok({"prompt": probe, "add_special_tokens": False})
        if ids is None:
            space = TokenSpace.synthetic()
            space.verified = False
            space.source = "no /tokenize on the server: synthetic ids, prompt lengths unverified"
            return space
        if len(ids) == 4096 and ids == list(range(4096)):
            # The tN vocabulary (simulator, dummy models): ask how large it is.
            space = TokenSpace.synthetic(vocab_size=max(4096, _vocab_hint(client, model, check)))
            space.source = "tN vocabulary (verified with /tokenize)"
        else:
            words: list[str] = []
            wids: list[int] = []
            seen: set[int] = set()
            starts: list[int] = []
            candidates = [f"t{i}" for i in range(0, 2000, 7)] + _ENGLISH
            base = tok({"prompt": "the", "add_special_tokens": False})
            # Tokenize each candidate after a leading word, the "space + word" form every word but
            # a text's first has, and alone, the form a text's first word has.
            for w in candidates:
                got = tok({"prompt": f"the {w}", "add_special_tokens": False})
                if got is None or base is None:
                    continue
                if len(got) == len(base) + 1 and got[: len(base)] == base:
                    tid = got[-1]
                    if tid not in seen:
                        alone = tok({"prompt": w, "add_special_tokens": False})
                        seen.add(tid)
                        if alone is not None and len(alone) == 1:
                            starts.append(len(words))
                        words.append(w)
                        wids.append(tid)
            if len(words) < 16:
                late = f" (/tokenize too slow: probing stopped after {budget_s:g} s)" if slow else ""
                raise UsageError(f"/tokenize found only {len(words)} single-token words: "
                                 f"cannot build exact prompts{late}")
            # No start word at all: chat lengths may be one over (the first word split), and the source says so.
            lead = "" if starts else "; none is one token at a text's start: chat prompts may be 1 token longer"
            space = TokenSpace(words=words, ids=wids, starts=starts,
                               source=f"{len(words)} single-token words (verified with /tokenize){lead}")
        # Chat template overhead around one user message (whose first word is a start word, as in every prompt).
        text = " ".join(space.words[i] for i in [space.lead(0), *range(1, 10)])
        chat = tok({"messages": [{"role": "user", "content": text}]})
        plain = tok({"prompt": text, "add_special_tokens": False})
        if chat is not None and plain is not None:
            space.chat_overhead = max(0, len(chat) - len(plain))
        return space


def _vocab_hint(client: Any, model: str, check: Callable[[], bool] = lambda: True) -> int:
    """Largest tN id the server accepts (bisect with /tokenize on one word)."""
    lo, hi = 4096, 1 << 20
    # Find an upper bound that fails, then bisect. Unknown words map to <unk> or several tokens.
    def single(i: int) -> bool:
        if not check():
            return False
        try:
            r = fetch(client, "POST", "/tokenize",
                      json={"model": model, "prompt": f"t{i}", "add_special_tokens": False})
            return r.status_code == 200 and r.field("tokens") == [i]
        except Exception:
            return False

    if not single(lo - 1):
        return lo
    while lo < hi - 1:
        mid = (lo + hi) // 2
        if single(mid - 1):
            lo = mid
        else:
            hi = mid
    return lo


def context_problem(w: Workload, server_max_model_len: int | None) -> str | None:
    """Why the server's reported context cannot hold this workload, or None.

    The prompt factory fits prompts into the context it is given; a server reporting
    `max_model_len` 1 once shrank every 64-token prompt to 5 tokens without a word. So the
    server's figure is checked against the scenario's lengths before any prompt is built.
    """
    if not server_max_model_len or w.dataset or w.trace:
        return None  # a trace's longer rows are cut to the context (the scenario's checks warned)
    need = (w.prompt_tokens.upper + w.output_tokens.upper) * w.turns
    if need > server_max_model_len:
        return (f"the server reports max_model_len {server_max_model_len} < {need} prompt + output tokens"
                f"{f' (× {w.turns} turns)' if w.turns > 1 else ''}: prompts would be cut short; not measured")
    return None
