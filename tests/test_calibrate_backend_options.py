"""``calibrate``: an option the chosen ``--backend`` does not read is refused (exit 2, named)
before any measurement, rather than ignored."""

from __future__ import annotations

import time

import pytest

from fairsim.cli import main


def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("backend, option, value", [
    ("torch", "--dtype", "bfloat16"),
    ("torch", "--model", "meta-llama/Llama-3.1-8B-Instruct"),
    ("torch", "--load-format", "auto"),
    ("torch", "--block-size", "16"),
    ("torch", "--max-worst", "0.3"),
    ("torch", "--force", None),
    ("vllm", "--model-config", "config.json"),
    ("vllm", "--device", "cpu"),
])
def test_calibrate_refuses_the_other_backends_options(capsys, tmp_path, backend, option, value):
    argv = ["calibrate", "--backend", backend, option, *([] if value is None else [value]),
            "--out", str(tmp_path / "p.json")]
    t0 = time.perf_counter()
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == "" and "Traceback" not in err and err.count("\n") == 1
    assert err.startswith(f"fairsim: error: {option}: a ")
    assert ("--backend torch does not use" if backend == "torch" else "the vLLM backend does not use") in err
    assert not (tmp_path / "p.json").exists()
    assert time.perf_counter() - t0 < 30


def test_calibrate_torch_option_at_its_default_is_not_refused(capsys, tmp_path):
    """``--dtype auto`` is the default: not refused (the grid error comes next, as without it)."""
    code, _, err = _cli(capsys, "calibrate", "--backend", "torch", "--dtype", "auto", "--idle-lengths", "128",
                        "--out", str(tmp_path / "p.json"))
    assert code == 2 and "--idle-lengths: need >= 2 distinct lengths" in err
