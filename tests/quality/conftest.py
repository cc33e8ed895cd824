"""The simulator over HTTP and a task folder in lm-evaluation-harness's format, for the harness's tests
(test_harness_suites.py, test_harness_prepared.py). Started only where a test asks for `sim`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_server import serving_sim

from kvtui.runtime.engines.base import Endpoint

KEY = "test-key-harness-123"
TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
fewshot_split: test
{shots}output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n\\n"]
  max_gen_toks: 4
  do_sample: false
  temperature: 0.0
filter_list:
  - name: "first-letter"
    filter:
      - function: "regex"
        regex_pattern: "([tx])"
      - function: "take_first"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""
GROUP = """group: mine_both
task: [mine_a, mine_b]
aggregate_metric_list:
  - metric: exact_match
    aggregation: mean
    weight_by_size: true
metadata:
  version: 1.0
"""


def _task_folder(root: Path) -> Path:
    # One folder, as the harness's own groups are laid out (mmlu_pro/: its subjects and the group): the data
    # files are named relative to it (kvtui reads a suite's data from the folder of the YAML that names it).
    d = root / "evals" / "mine"
    d.mkdir(parents=True)
    for name, n in (("mine_a", 6), ("mine_b", 4), ("mine_zero", 2)):
        # mine_zero pins 0 shots in its YAML, as some of lm-eval's own tasks do: the harness keeps them.
        shots = "num_fewshot: 0\n" if name == "mine_zero" else ""
        (d / f"{name}.yaml").write_text(TASK.format(name=name, data=f"{name}.jsonl", shots=shots))
        rows = [{"question": f"{name} item {i}: say t.", "answer": "t" if i % 2 == 0 else "x"} for i in range(n)]
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "mine_both.yaml").write_text(GROUP)
    return d


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """The simulator over HTTP, and a folder holding the task folder (evals/mine)."""
    with serving_sim(KEY) as base:
        root = tmp_path_factory.mktemp("scn")
        _task_folder(root)
        yield Endpoint(base, "llama-3.1-8b", api_key=KEY, max_model_len=8192), root
