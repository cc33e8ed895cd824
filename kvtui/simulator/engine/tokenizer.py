"""The simulator's tokenizer: one token per word, ids stable across runs, a chat template of fixed
size, and the prompt's prefix-cache block hashes (what vLLM's automatic prefix caching keys on)."""

from __future__ import annotations

from typing import Any

CHAT_TEMPLATE_TOKENS = 5  # tokens the simulated chat template adds around one message
CHAT_PER_MESSAGE = 4  # role header tokens per message


class Tokenizer:
    """The simulator's word-level vocabulary: word "tN" is token N; other words hash into the vocabulary."""

    def __init__(self, vocab_size: int = 128256):
        self.vocab_size = vocab_size

    def word_id(self, w: str) -> int:
        if len(w) > 1 and w[0] == "t" and w[1:].isdigit():
            n = int(w[1:])
            if n < self.vocab_size:
                return n
        h = 2166136261
        for ch in w.encode():
            h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
        return h % self.vocab_size

    def encode(self, text: str) -> list[int]:
        return [self.word_id(w) for w in text.split()]

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        ids = [128000 % self.vocab_size] * CHAT_TEMPLATE_TOKENS
        for m in messages:
            ids += [128006 % self.vocab_size] * CHAT_PER_MESSAGE
            content = m.get("content") or ""
            if isinstance(content, list):  # OpenAI content parts
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            ids += self.encode(str(content))
        return ids


def block_hashes(ids: list[int], block: int = 16) -> list[int]:
    """Chained hashes of full prompt blocks (vLLM's prefix-cache key shape)."""
    out, h = [], 0
    for i in range(0, len(ids) - block + 1, block):
        h = hash((h, tuple(ids[i : i + block])))
        out.append(h)
    return out
