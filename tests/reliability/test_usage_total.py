"""Streamed content and usage, the cross-check made total (issue #30, class 7): through the real
client over real HTTP (fault_server.py), whatever usage or content field is null, missing or
inconsistent, every record is the true figure or a named error or flag — never a silent None.

Cases named in the issue: `text: null` in every chunk; usage.prompt_tokens null without a
completion count. (Not yet: usage.completion_tokens above the token-bearing chunks when each
chunk may honestly carry several tokens: the client cannot tell the two apart without the
model's tokenizer.)"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvtui.load.client import StreamClient, stream_request
from kvtui.load.records import ERROR_CLASSES, RECORD_FLAGS, Record

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
