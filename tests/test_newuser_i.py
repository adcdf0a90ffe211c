"""New-user pass i: calibration and live-hook settings refused with the option or setting named."""

from __future__ import annotations

import time

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
