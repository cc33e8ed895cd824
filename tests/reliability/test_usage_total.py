"""Streamed content and usage, the cross-check made total (issue #30, class 7): through the real
client over real HTTP (fault_server.py), whatever usage or content field is null, missing or
inconsistent, every record is the true figure or a named error or flag — never a silent None.

Cases named in the issue: `text: null` in every chunk; usage.prompt_tokens null without a
completion count; usage.completion_tokens above what was streamed (1.75x the chunks) although it
equals max_tokens with finish_reason "length": past what the stream accounts for
(kvtui.runtime.load.client.streamed_tokens_bound: chunks, their pace, the text's words) it is flagged
`usage_mismatch` and not kept as the figure."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvtui.core.record import ERROR_CLASSES, RECORD_FLAGS, Record
from kvtui.runtime.load.client import (
    MAX_TIMED_TOKENS_PER_CHUNK,
    STREAMED_SLACK,
    StreamClient,
    cross_check_usage,
    stream_request,
    streamed_tokens_bound,
)

from reliability_helpers import liar_request


def true_or_named(rec: Record, prompt_len: int, max_tokens: int) -> None:
    if not rec.ok:
        assert rec.error in ERROR_CLASSES and rec.detail, rec
        return
    if rec.flags:
        assert set(rec.flags) <= set(RECORD_FLAGS), rec.flags
        return
    # No flag: every figure is there and true.
    assert rec.output_tokens == max_tokens and rec.prompt_tokens is not None, rec
    assert prompt_len <= rec.prompt_tokens <= prompt_len + 1, rec


NULLISH = st.sampled_from([None, {"value": None}, {"value": "7"}, {"value": -1}, {"times": 2}, {"minus": 1},
                           {"plus": 3}])
CHOICES = st.sampled_from([None, [{"index": 0, "text": None}], [{"index": 0}], [{"index": 0, "text": ""}],
                           [{"index": 0, "text": None, "finish_reason": "length"}]])


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(out=NULLISH, prompt=NULLISH, choices=CHOICES, per_chunk=st.sampled_from([1, 2]),
       prompt_len=st.integers(16, 64), max_tokens=st.integers(2, 16))
@example(out=None, prompt={"value": None}, choices=None, per_chunk=1, prompt_len=16, max_tokens=4)
@example(out={"value": None}, prompt={"value": None}, choices=None, per_chunk=1, prompt_len=16, max_tokens=4)
@example(out=None, prompt=None, choices=[{"index": 0, "text": None}], per_chunk=1, prompt_len=16, max_tokens=4)
def test_every_usage_and_content_field_null_missing_or_wrong(liar, out, prompt, choices, per_chunk, prompt_len,
                                                            max_tokens) -> None:
    answer: dict = {"usage_out": out, "usage_prompt": prompt, "per_chunk": per_chunk}
    if choices is not None:
        answer["choices"] = choices
    true_or_named(liar_request(liar.url, answer, prompt_len, max_tokens), prompt_len, max_tokens)


def test_text_null_in_every_chunk_is_no_output(liar) -> None:
    rec = liar_request(liar.url, {"choices": [{"index": 0, "text": None}]}, 16, 8)
    assert not rec.ok or "text_null" in rec.flags, rec
    assert rec.t_first is None  # no token was streamed


def test_prompt_tokens_null_without_a_completion_count_is_named(liar) -> None:
    rec = liar_request(liar.url, {"usage_prompt": {"value": None}, "usage_out": {"value": None}}, 16, 8)
    assert not rec.ok or rec.flags, rec
    rec = liar_request(liar.url, {"usage_prompt": {"value": None}}, 16, 8)
    assert rec.prompt_tokens is None and "usage_missing" in rec.flags, rec


# -- usage above what was streamed (issue 30 item 7) --------------------------------------------


@pytest.mark.parametrize("streamed,max_tokens", [(9, 16), (8, 16), (57, 100), (1, 4)])
def test_usage_above_what_was_streamed_is_flagged_even_at_max_tokens_and_length(liar, streamed, max_tokens):
    # The server streams `streamed` one-token chunks at an even pace, then says usage = max_tokens
    # with finish_reason "length": everything agrees except with what came down the wire.
    rec = liar_request(liar.url, {"streamed": streamed, "gap_ms": 10}, 32, max_tokens)
    assert rec.ok and rec.finish_reason == "length"
    assert len(rec.itl) + 1 == streamed
    assert "usage_mismatch" in rec.flags and rec.output_tokens is None, rec
    assert f"completion_tokens {max_tokens} >" in (rec.detail or "") and "stream shows" in rec.detail


@pytest.mark.parametrize("per_chunk", [1, 2, 3])
def test_honest_bundling_with_its_words_is_believed(liar, per_chunk):
    # Several tokens in one chunk, each a word of the text: the stream shows them.
    rec = liar_request(liar.url, {"per_chunk": per_chunk, "gap_ms": 2}, 32, 12)
    assert rec.ok and not rec.flags and rec.output_tokens == 12, rec


def _timed(gaps: list[float], usage: int, max_tokens: int, finish: str = "length") -> Record:
    rec = Record(id="x", mode="m", step=0, load=1, phase="window", t_intended=0.0, t_sent=0.0, t_first=0.1,
                 itl=gaps, output_tokens=usage, prompt_tokens=32, expected_prompt_tokens=32,
                 expected_output_tokens=max_tokens, finish_reason=finish)
    return rec


def test_merged_chunks_after_long_gaps_are_believed_an_even_pace_is_not():
    # vLLM merges the tokens it made while the client's side lagged: 4 chunks each after a gap
    # of 4 decode steps carry 4 tokens; the words say nothing (no spaces: CJK, code).
    step = 0.01
    merged = [step] * 40 + [4 * step] * 4
    rec = _timed(list(merged), 45 + 12, 57)
    cross_check_usage(rec, words=0)
    assert not rec.flags and rec.output_tokens == 57, rec
    # The same count over chunks at an even pace: nothing accounts for the extra tokens.
    rec = _timed([step] * 44, 60, 60)  # 45 chunks: 1.25 x 45 + 1 < 60
    cross_check_usage(rec, words=0)
    assert "usage_mismatch" in rec.flags and rec.output_tokens is None
    # An uneven pace credits at most MAX_TIMED_TOKENS_PER_CHUNK tokens a chunk.
    rec = _timed([1e-6] * 30 + [1.0] * 14, 200, 200)
    assert streamed_tokens_bound(rec, 0) == MAX_TIMED_TOKENS_PER_CHUNK * 45 * STREAMED_SLACK + 1
    cross_check_usage(rec, words=0)
    assert "usage_mismatch" in rec.flags


USAGE_OUT = st.sampled_from([None, {"value": None}, {"times": 2}, {"plus": 1}, {"plus": 8}, {"minus": 1},
                             {"minus": 5}, {"value": 0}])
FINISH = st.sampled_from(["length", "stop", None])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(out=USAGE_OUT, drop_out=st.booleans(), finish=FINISH, max_tokens=st.integers(2, 24),
       share=st.floats(0.2, 1.0), per_chunk=st.integers(1, 3), gap_ms=st.sampled_from([0.0, 1.0, 3.0]))
@example(out=None, drop_out=False, finish="length", max_tokens=16, share=9 / 16, per_chunk=1, gap_ms=3.0)
def test_usage_fields_by_finish_reason_against_what_was_streamed(liar, out, drop_out, finish, max_tokens, share,
                                                                per_chunk, gap_ms):
    """Over usage.completion_tokens null, missing, too big, too small, true x finish reasons x how
    much of it was streamed: an unflagged record's output figure is one the stream accounts for."""
    streamed = max(1, min(max_tokens, round(max_tokens * share)))
    answer: dict = {"usage_out": out, "finish": finish, "streamed": streamed, "per_chunk": per_chunk,
                    "gap_ms": gap_ms}
    if drop_out:  # usage without completion_tokens at all
        answer = {**answer, "usage": {"prompt_tokens": 32}}
    rec = liar_request(liar.url, answer, 32, max_tokens)
    if not rec.ok:
        assert rec.error in ERROR_CLASSES and rec.detail, rec
        return
    if rec.flags:
        assert set(rec.flags) <= set(RECORD_FLAGS), rec.flags
        return
    o, chunks = rec.output_tokens, len(rec.itl) + 1
    assert o is not None and rec.prompt_tokens == 32, rec
    assert chunks - 1 <= o <= max_tokens, rec
    words = streamed  # the fault server's text is one word per token
    assert o <= max(MAX_TIMED_TOKENS_PER_CHUNK * chunks, words) * STREAMED_SLACK + 1, rec
    if finish == "length":
        assert o == max_tokens, rec


TOKEN = '{"id": "x", "choices": [{"index": 0, "text": " t", "finish_reason": null}]}'
LAST = '{"id": "x", "choices": [{"index": 0, "text": " t", "finish_reason": "length"}]}'


def _usage(p: str, o: str) -> str:
    return '{"id": "x", "choices": [], "usage": {"prompt_tokens": %s, "completion_tokens": %s}}' % (p, o)


# Shapes a hostile server can send that the issue did not quote: each is the server's named
# error or a named flag, never a figure and never blamed on kvtui's own client ("client").
SHAPES = {
    "nested 100k deep": ["[" * 100_000 + "]" * 100_000],
    "an object nested 100k deep": ['{"a":' * 100_000 + "1" + "}" * 100_000],
    "an integer of 5,000 digits": [TOKEN, LAST, _usage("1" + "0" * 5000, "2")],
    "usage 1e999": [TOKEN, LAST, _usage("16", "1e999")],
    "usage NaN": [TOKEN, LAST, _usage("NaN", "2")],
    "usage a float": [TOKEN, LAST, _usage("16", "2.0")],
    "usage a string": [TOKEN, LAST, _usage('"16"', "2")],
    "usage negative": [TOKEN, LAST, _usage("16", "-2")],
    "usage 10**18": [TOKEN, LAST, _usage("16", str(10**18))],
    "usage true": [TOKEN, LAST, _usage("true", "2")],
    "text 0": ['{"id": "x", "choices": [{"index": 0, "text": 0}]}', LAST, _usage("16", "2")],
    "text a list": ['{"id": "x", "choices": [{"index": 0, "text": []}]}', LAST, _usage("16", "2")],
    "no choices at all": ['{"id": "x"}', _usage("16", "2")],
    "empty choices": ['{"id": "x", "choices": []}', _usage("16", "2")],
    "a chat delta on completions": ['{"id": "x", "choices": [{"index": 0, "delta": {"content": " t"}}]}',
                                    _usage("16", "2")],
    "choices an object": ['{"id": "x", "choices": {"0": {"text": " t"}}}', _usage("16", "2")],
    "usage without choices and no tokens": [_usage("16", "2")],
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_hostile_event_shapes_are_the_servers_named_error_or_a_flag(liar, shape) -> None:
    rec = liar_request(liar.url, {"raw": SHAPES[shape]}, prompt_len=16, max_tokens=2)
    if rec.ok:
        assert rec.flags and set(rec.flags) <= set(RECORD_FLAGS), (shape, rec)
    else:
        assert rec.error in ERROR_CLASSES and rec.error != "client" and rec.detail, (shape, rec)
    assert rec.output_tokens in (None, 2) and rec.prompt_tokens in (None, 16), (shape, rec)
