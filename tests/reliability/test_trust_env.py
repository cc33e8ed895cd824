"""Loopback and the trust model by every route (issue #30, class 5) and the smaller scenario
checks of class 8: extra_args that set what kvtui sets (--host, --port, --api-key, in any
spelling argparse accepts) are refused naming the field; an environment variable of a
code-loading family needs --allow-env; C1 control characters in names are refused; the sim
engine with both replicas and url is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtui.errors import ScenarioError
from kvtui.io.scenario import load_scenario
from kvtui.io.scenario.checks import owned_flag
from kvtui.io.scenario.schema import hijacks

BASE = '''name = "t"
[server]
engine = "sim"
{server}
[[modes]]
name = "{mode}"
'''


def load(tmp_path, server: str = "", mode: str = "m", allow_env: bool = False):
    p = tmp_path / "s.toml"
    p.write_text(BASE.format(server=server, mode=mode), encoding="utf-8")
    return load_scenario(p, allow_env=allow_env)


def spellings(flag: str):
    """--host, --hos (argparse abbreviations), --HOST, --api_key, each alone or with =value."""
    return st.tuples(st.integers(4, len(flag)), st.booleans(), st.booleans(), st.sampled_from(["", "=0.0.0.0", "=1"])
                     ).map(lambda t: ((flag[:t[0]].replace("-", "_") if t[1] else flag[:t[0]])
                                      .replace("__", "--", 1)) + t[3])


@given(st.sampled_from(["--host", "--port", "--api-key"]).flatmap(lambda f: st.tuples(st.just(f), spellings(f))))
def test_every_spelling_of_an_owned_flag_is_caught(pair) -> None:
    flag, arg = pair
    assert owned_flag(arg) == flag, arg


@pytest.mark.parametrize("args", [['"--host=0.0.0.0"'], ['"--host"', '"0.0.0.0"'], ['"--hos"', '"0.0.0.0"'],
                                  ['"--port=8000"'], ['"--api-key"', '"k"'], ['"--api_key=k"'], ['"--api-k"', '"k"']])
def test_extra_args_setting_host_port_or_key_refused_naming_the_field(tmp_path, args) -> None:
    with pytest.raises(ScenarioError) as e:
        load(tmp_path, f"extra_args = [{', '.join(args)}]")
    assert any("server.extra_args" in p and "kvtui sets itself" in p for p in e.value.problems)


@pytest.mark.parametrize("arg", ["--hf-token", "--help", "--portable", "--hostname-x", "--max-model-len", "-p"])
def test_other_flags_are_not_taken_for_owned_ones(arg) -> None:
    assert owned_flag(arg) is None


CODE_LOADING = ["CUDA_INJECTION64_PATH", "CUDA_INJECTION32_PATH", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN",
                "NCCL_PROFILER_PLUGIN", "LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "GLIBC_TUNABLES", "PYTHONPATH",
                "PYTHONSTARTUP", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_LIBCUDA_PATH",
                "VLLM_PLUGINS", "VLLM_LOGGING_CONFIG_PATH", "HF_MODULES_CACHE", "NCCL_NET", "CUDA_MODULE_LOADING",
                "SOMETHING_NEW_PLUGIN", "MY_LIB_PATH", "ANY_PRELOAD_X"]
TUNING = ["NCCL_NVLS_ENABLE", "VLLM_USE_FLASHINFER_SAMPLER", "VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS",
          "CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF", "TOKENIZERS_PARALLELISM", "NCCL_DEBUG"]


@pytest.mark.parametrize("name", [n for n in CODE_LOADING if n != "NCCL_NET"])
def test_code_loading_variables_need_allow_env(tmp_path, name) -> None:
    assert hijacks(name)
    with pytest.raises(ScenarioError) as e:
        load(tmp_path, f'[server.env]\n{name} = "/tmp/x.so"')
    assert any(name in p and "--allow-env" in p for p in e.value.problems)
    load(tmp_path, f'[server.env]\n{name} = "/tmp/x.so"', allow_env=True)  # the user's word


@pytest.mark.parametrize("name", TUNING)
def test_tuning_knobs_pass(tmp_path, name) -> None:
    assert not hijacks(name)
    load(tmp_path, f'[server.env]\n{name} = "0"')


@given(family=st.sampled_from(["LD_", "PYTHON", "TORCH_", "CUDA_INJECTION", "DYLD_", "TRITON_", "GLIBC_"]),
       word=st.sampled_from(["", "X", "NEW", "FOO_BAR"]),
       tail=st.sampled_from(["", "_PATH", "_PLUGIN", "_PRELOAD", "_LIB", "_DIR"]))
def test_a_new_variable_of_a_code_loading_family_is_caught(family, word, tail) -> None:
    name = family + word + tail
    if name not in ("PYTHONUNBUFFERED", "PYTHONHASHSEED"):
        assert hijacks(name), name


@given(pre=st.sampled_from(["NCCL_", "VLLM_", "CUDA_", "HF_", "X_"]), mid=st.sampled_from(["NET", "NEW", "A"]),
       word=st.sampled_from(["_PLUGIN", "_PATH", "_PRELOAD", "_LIBRARY", "_MODULE", "_HOOK", "_EXTENSION"]))
def test_a_new_plugin_or_path_variable_of_any_prefix_is_caught(pre, mid, word) -> None:
    assert hijacks(pre + mid + word)


@pytest.mark.parametrize("ch", ["\u0085", "\u009b", "\u0080", "\u009f", "\u008d"])
def test_c1_control_characters_in_a_name_are_refused(tmp_path, ch) -> None:
    p = tmp_path / "s.toml"
    p.write_text(BASE.format(server="", mode="m").replace('name = "t"', f'name = "a{ch}b"'), encoding="utf-8")
    with pytest.raises(ScenarioError):
        load_scenario(p)


def test_sim_with_both_replicas_and_url_is_refused(tmp_path) -> None:
    with pytest.raises(ScenarioError) as e:
        load(tmp_path, 'replicas = 2\nurl = "http://127.0.0.1:9"')
    assert any("server.url" in p and "replicas" in p for p in e.value.problems)


@pytest.mark.parametrize("key, value", [("start", 1.5), ("max", 8.5), ("max", 16.25)])
def test_a_fractional_concurrency_is_reported_at_its_own_field_and_line(tmp_path, key, value) -> None:
    p = tmp_path / "s.toml"
    ramp = {"start": 1, "max": 16}
    ramp[key] = value
    p.write_text(BASE.format(server="", mode="m") + "[ramp]\n" + "".join(f"{k} = {v}\n" for k, v in ramp.items()))
    line = p.read_text().splitlines().index(f"{key} = {value}") + 1
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    (prob,) = [x for x in e.value.problems if "whole numbers" in x]
    assert f":{line}: ramp.{key}:" in prob and f"{value:g}" in prob, prob


# -- the third pass's other routes: compilers, helpers, HOME, caches; listening; code flags ----------

PROGRAMS = ["CC", "CXX", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "CUDAHOSTCXX", "LDFLAGS", "CFLAGS",
            "HOME", "GIT_ASKPASS", "SSH_ASKPASS", "EDITOR", "HF_HUB_CACHE", "TRANSFORMERS_CACHE", "VLLM_CACHE_ROOT",
            "VLLM_ALLOW_INSECURE_SERIALIZATION", "VLLM_SERVER_DEV_MODE", "HF_ALLOW_CODE_EVAL", "SOME_NEW_TOOL_BIN"]
LISTENING = ["VLLM_HOST_IP", "MASTER_ADDR", "MASTER_PORT", "VLLM_PORT", "VLLM_DP_MASTER_IP", "GLOO_SOCKET_IFNAME"]
STILL_TUNING = ["VLLM_ATTENTION_BACKEND", "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_LOGGING_LEVEL", "HF_HUB_OFFLINE",
                "VLLM_CPU_KVCACHE_SPACE", "VLLM_MM_INPUT_CACHE_GIB", "HF_TOKEN", "NCCL_P2P_DISABLE", "MKL_NUM_THREADS"]


@pytest.mark.parametrize("name", PROGRAMS + LISTENING)
def test_programs_helpers_home_caches_and_listening_need_allow_env(tmp_path, name) -> None:
    from kvtui.io.scenario.schema import listens

    assert hijacks(name) or listens(name), name
    with pytest.raises(ScenarioError) as e:
        load(tmp_path, f'[server.env]\n{name} = "/tmp/x"')
    assert any(f"server.env.{name}:" in p and "--allow-env" in p for p in e.value.problems)
    load(tmp_path, f'[server.env]\n{name} = "/tmp/x"', allow_env=True)


@pytest.mark.parametrize("name", STILL_TUNING)
def test_more_tuning_knobs_still_pass(tmp_path, name) -> None:
    load(tmp_path, f'[server.env]\n{name} = "1"')


@given(pre=st.sampled_from(["", "VLLM_", "NCCL_", "NEWLIB_", "X_"]),
       word=st.sampled_from(["CC", "CXX", "CFLAGS", "ASKPASS", "HOME", "CACHE", "BIN", "HOST", "IP", "PORT", "ADDR"]),
       post=st.sampled_from(["", "_X", "_NEW"]))
def test_a_new_variable_naming_a_program_a_home_a_cache_or_an_address_is_caught(pre, word, post) -> None:
    from kvtui.io.scenario.schema import listens

    name = pre + word + post
    assert hijacks(name) or listens(name), name


CODE_FLAGS_SEEN = ["--trust-remote-code", "--tool-parser-plugin", "--reasoning-parser-plugin", "--middleware",
                   "--worker-extension-cls", "--worker-cls", "--logits-processors", "--kv-transfer-config",
                   "--distributed-executor-backend"]


@given(st.sampled_from(CODE_FLAGS_SEEN).flatmap(lambda f: st.tuples(st.integers(7, len(f)), st.booleans(),
                                                                    st.sampled_from(["", "=x", "=./evil.py"]))
                                                 .map(lambda t: (f[:t[0]].replace("-", "_").replace("__", "--", 1)
                                                                 if t[1] else f[:t[0]]) + t[2])))
def test_every_spelling_of_a_code_loading_flag_is_caught(arg) -> None:
    from kvtui.io.scenario.checks import code_flag

    assert code_flag(arg), arg


@pytest.mark.parametrize("args", [['"--trust-remote-code"'], ['"--tool-parser-plugin"', '"./evil.py"'],
                                  ['"--trust-rem"'], ['"--kv-transfer-config"', "'{\"kv_connector_module_path\": \"e\"}'"],
                                  ['"--compilation-config"', "'{\"level\": 3, \"cache_dir\": \"/tmp/c\"}'"],
                                  ['"--speculative-config={\\"method\\": \\"x\\", \\"plugin\\": 1}"']])
def test_extra_args_loading_code_need_allow_env(tmp_path, args) -> None:
    with pytest.raises(ScenarioError) as e:
        load(tmp_path, f"extra_args = [{', '.join(args)}]")
    assert any("server.extra_args" in p and "--allow-env" in p for p in e.value.problems), e.value.problems
    load(tmp_path, f"extra_args = [{', '.join(args)}]", allow_env=True)


@pytest.mark.parametrize("args", [['"--enforce-eager"'], ['"--max-num-seqs"', '"64"'], ['"--kv-cache-dtype"', '"fp8"'],
                                  ['"--compilation-config"', "'{\"level\": 3}'"], ['"--enable-chunked-prefill"'],
                                  ['"--speculative-config"', "'{\"model\": \"path/draft\", \"num_speculative_tokens\": 3}'"],
                                  ['"--load-format"', '"dummy"'], ['"--block-size"', '"16"'], ['"--seed"', '"1"']])
def test_ordinary_extra_args_pass(tmp_path, args) -> None:
    load(tmp_path, f"extra_args = [{', '.join(args)}]")


@pytest.mark.parametrize("args", [['"--uds"', '"/tmp/s"'], ['"--headless"'], ['"--ssl-keyfile=k.pem"'],
                                  ['"--ssl-certfile"', '"c.pem"'], ['"--data-parallel-address"', '"0.0.0.0"'],
                                  ['"--port"', '"0"'], ['"--api_key=k"'], ['"--ho"', '"::"']])
def test_extra_args_moving_the_api_server_are_refused_naming_the_field(tmp_path, args) -> None:
    """The API server off loopback HTTP (a Unix socket, none at all, TLS kvtui does not speak, a
    rank listening on an address) is refused as --host is: the start would only wait for its timeout."""
    with pytest.raises(ScenarioError) as e:
        load(tmp_path, f"extra_args = [{', '.join(args)}]")
    assert any("server.extra_args" in p and "kvtui sets itself" in p for p in e.value.problems), e.value.problems


@pytest.mark.parametrize("override, field", [("ramp.max=8.5", "ramp.max"), ("ramp.window_s=-1", "ramp.window_s"),
                                             ('workload.dataset="/dev/zero"', "workload.dataset"),
                                             ('modes.0.env={CC="x"}', "modes[0].env.CC")])
def test_a_set_value_is_reported_at_its_set_not_at_the_files_line(tmp_path, override, field) -> None:
    """The file's line of a key a --set replaced holds another value: the problem names the --set."""
    p = tmp_path / "s.toml"
    p.write_text(BASE.format(server="", mode="m") + "[ramp]\nstart = 1\nmax = 16\nwindow_s = 1\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p, [override])
    assert any(x.startswith(f"{p}: --set {override}: {field}") for x in e.value.problems), e.value.problems


@pytest.mark.parametrize("path", ["/dev/zero", "FIFO", "DIR"])
def test_a_dataset_that_is_not_a_regular_file_is_named_as_what_it_is(tmp_path, path) -> None:
    import os

    if path == "FIFO":
        path = str(tmp_path / "f")
        os.mkfifo(path)
    elif path == "DIR":
        path = str(tmp_path)
    with pytest.raises(ScenarioError) as e:
        load_scenario(_with_dataset(tmp_path, path))
    assert any("workload.dataset" in x and "not a regular file" in x for x in e.value.problems), e.value.problems


def _with_dataset(tmp_path, path: str):
    p = tmp_path / "d.toml"
    p.write_text(BASE.format(server="", mode="m") + f'[workload]\ndataset = "{path}"\n')
    return p


@pytest.mark.parametrize("where", ["description", "server.api_key", "server.replica_urls", "modes.name"])
@pytest.mark.parametrize("ch", [r"\u001b]0;x\u0007", r"\u009b2J", "\u0085", "\u009b"])  # TOML escapes, raw C1
def test_control_characters_are_refused_in_descriptions_keys_and_urls_too(tmp_path, where, ch) -> None:
    text = BASE.format(server="", mode="m")
    if where == "description":
        text = text.replace('name = "t"\n', f'name = "t"\ndescription = "a{ch}b"\n')
    elif where == "server.api_key":
        text = text.replace('engine = "sim"\n', f'engine = "external"\nurl = "http://127.0.0.1:9"\napi_key = "k{ch}"\n')
    elif where == "server.replica_urls":
        text = text.replace('engine = "sim"\n', f'engine = "external"\nreplica_urls = ["http://127.0.0.1:9/{ch}"]\n')
    else:
        text = text.replace('name = "m"', f'name = "m{ch}"')
    p = tmp_path / "s.toml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert any(where.split(".")[-1] in x for x in e.value.problems), e.value.problems
    if where == "server.api_key":  # never echoed: it is a secret
        assert not any("'k" in x for x in e.value.problems), e.value.problems


@pytest.mark.parametrize("engine", ["sim", "vllm"])
@pytest.mark.parametrize("key", ["url", "metrics_url"])
def test_a_url_for_an_engine_that_launches_its_own_server_is_refused(tmp_path, engine, key) -> None:
    """It was ignored silently: the launched server was measured, not the one named."""
    p = tmp_path / "s.toml"
    p.write_text(BASE.format(server=f'{key} = "http://10.1.2.3:8000"', mode="m").replace('engine = "sim"',
                                                                                       f'engine = "{engine}"'))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert any(f"server.{key}: only for the external engine" in x for x in e.value.problems), e.value.problems
