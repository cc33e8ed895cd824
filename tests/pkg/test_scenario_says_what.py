"""A scenario says what it will do (issue 49, item 5): `kvtui init` on a bundled shape writes a
simulated what-if and says so, with how to measure for real; a bundled shape's name is never
offered as a Hugging Face id."""

from __future__ import annotations

from kvtui.cli.entry import main
from kvtui.io.scenario import load_scenario


def test_init_on_a_bundled_shape_says_it_is_a_simulated_what_if(tmp_path, capsys):
    out = tmp_path / "l8b.toml"
    assert main(["init", "llama-3.1-8b", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    text = out.read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert load_scenario(out).server.engine == "sim"
    assert "SIMULATED what-if" in header and "kvtui init /path/to/model" in header
    assert "meta-llama/Llama-3.1-8B-Instruct" in header  # the real model the shape was read from
    assert "Run it (on a machine with that GPU)" not in header
    # the answer in seconds first; nothing promises seconds for the live path
    assert said.index("--fast") < said.index("watch it live")
    live = next(line for line in said.splitlines() if "watch it live" in line)
    assert "seconds" not in live
    assert "kvtui init /path/to/model" in said


def test_preflight_never_offers_a_bundled_shape_as_a_hub_id(tmp_path, capsys):
    out = tmp_path / "l8b.toml"
    assert main(["init", "llama-3.1-8b", "--out", str(out)]) == 0
    capsys.readouterr()
    from kvtui.preflight import gate

    sc = load_scenario(out, ["server.engine=\"vllm\""])
    pf = gate(sc, sc.modes, fast=False)
    model = [c for c in pf.checks if c.name == "model"]
    assert model and model[0].status == "fail"
    said = model[0].line()
    assert "huggingface-cli download llama-3.1-8b" not in said
    assert "bundled" in said and "kvtui init /path/to/model" in said and "--engine sim --fast" in said
