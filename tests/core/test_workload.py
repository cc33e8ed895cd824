"""Workload synthesis: exact lengths, unique prefixes, determinism, distributions, datasets, turns."""

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui.errors import UsageError
from kvtui.io.scenario.schema import Length, Workload
from kvtui.runtime.load.workload import (
    MARKER_TOKENS,
    Conversation,
    PromptFactory,
    TokenSpace,
    discover_token_space,
    request_body,
    sample_length,
)

SPACE = TokenSpace.synthetic()


def factory(salt=1, seed=0, **kw):
    w = Workload(**kw)
    return PromptFactory(w, SPACE, max_model_len=8192, salt=salt, seed=seed)


def test_token_id_prompts_have_exact_lengths_without_jitter():
    f = factory(prompt_tokens=Length(value=2048), output_tokens=Length(value=256), jitter=0.0)
    for c in range(50):
        p = f.build(c)
        assert len(p.ids) == p.prompt_tokens == 2048 and p.max_tokens == 256


def test_jitter_stays_within_its_share_and_context():
    f = factory(prompt_tokens=Length(value=1000), output_tokens=Length(value=100), jitter=0.1)
    isl = [f.lengths(c)[0] for c in range(500)]
    assert 900 <= min(isl) < 950 and 1050 < max(isl) <= 1100


def test_no_special_or_out_of_space_ids():
    f = factory(prompt_tokens=Length(value=512), jitter=0.0)
    allowed = set(SPACE.ids)
    for c in range(20):
        assert set(f.build(c).ids) <= allowed


def test_unique_prefix_per_request_across_salts():
    a, b = factory(salt=1), factory(salt=2)
    heads = {tuple(a.build(c).ids[:MARKER_TOKENS]) for c in range(2000)}
    heads |= {tuple(b.build(c).ids[:MARKER_TOKENS]) for c in range(2000)}
    assert len(heads) == 4000  # no two requests share even their first block's start
    firsts = {a.build(c).ids[0] for c in range(200)}
    assert len(firsts) > 150  # consecutive requests differ in the very first token


def test_shared_prefix_is_common_then_unique():
    f = factory(prompt_tokens=Length(value=1000), shared_prefix=0.5, jitter=0.0)
    p1, p2 = f.build(1), f.build(2)
    assert p1.ids[:500] == p2.ids[:500]
    assert p1.ids[500:504] != p2.ids[500:504]


def test_deterministic_for_a_seed_and_salt():
    assert factory(seed=3).build(7).ids == factory(seed=3).build(7).ids
    assert factory(seed=3).build(7).ids != factory(seed=4).build(7).ids


@settings(max_examples=60, deadline=None)
@given(dist=st.sampled_from(["uniform", "normal", "lognormal"]), lo=st.integers(1, 500), span=st.integers(1, 3000), seed=st.integers(0, 99))
def test_distributions_respect_bounds(dist, lo, span, seed):
    hi = lo + span
    ln = Length(dist=dist, min=lo, max=hi, mean=lo + span / 2, std=span / 4)
    rng = random.Random(seed)
    for _ in range(50):
        assert lo <= sample_length(ln, rng) <= hi


def test_distribution_means_are_roughly_right():
    rng = random.Random(0)
    ln = Length(dist="lognormal", mean=2000, std=800, min=1, max=0)
    xs = [sample_length(ln, rng) for _ in range(4000)]
    assert 1900 < sum(xs) / len(xs) < 2100


def test_chat_prompt_uses_words_and_template_overhead():
    space = TokenSpace.synthetic()
    space.chat_overhead = 9
    f = PromptFactory(Workload(api="chat", prompt_tokens=Length(value=100), jitter=0.0), space, 8192, salt=1)
    p = f.build(0)
    assert len(p.messages[0]["content"].split()) == 91 and p.prompt_tokens == 100


def test_multi_turn_resends_history():
    f = factory(prompt_tokens=Length(value=100), output_tokens=Length(value=20), turns=3, jitter=0.0)
    conv = Conversation("c1")
    p1 = f.build(1, conv)
    f.extend_conversation(conv, p1, "", 20)
    p2 = f.build(2, conv)
    assert p2.ids[:100] == p1.ids and len(p2.ids) == 100 + 20 + 100


def test_dataset_rows_and_errors(tmp_path):
    good = tmp_path / "d.jsonl"
    good.write_text(json.dumps({"prompt": "hello world", "output_tokens": 5}) + "\n" + json.dumps({"prompt_ids": [5, 6, 7]}) + "\n")
    f = PromptFactory(Workload(dataset=str(good), output_tokens=Length(value=9), jitter=0.0), SPACE, 8192, salt=1)
    p0, p1 = f.build(0), f.build(1)
    assert p0.text.endswith("hello world") and p0.max_tokens == 5
    assert p1.ids[-3:] == [5, 6, 7] and p1.max_tokens == 9
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{oops\n')
    with pytest.raises(UsageError, match=r"bad.jsonl:2: not JSON"):
        PromptFactory(Workload(dataset=str(bad)), SPACE, 8192, salt=1)
    bad.write_text('{"text": "a"}\n')
    with pytest.raises(UsageError, match=r"bad.jsonl:1: each line needs"):
        PromptFactory(Workload(dataset=str(bad)), SPACE, 8192, salt=1)


def test_request_body_streams_with_usage():
    p = factory(jitter=0.0).build(0)
    body = request_body(p, "m", Workload())
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["prompt"] == p.ids and body["max_tokens"] == 128


def test_token_space_discovery_on_the_simulator(knee_server):
    headers = {"Authorization": f"Bearer {knee_server.api_key}"}
    space = discover_token_space(knee_server.base_url, knee_server.model, headers)
    assert space.verified and "tN vocabulary" in space.source
    assert space.chat_overhead == 9  # the simulated template: 5 + 4 per message
    assert len(space.ids) >= 4096
