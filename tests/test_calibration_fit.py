"""calibration.fit: NNLS recovers known coefficients; errors are reported on held-out points."""

import numpy as np
import pytest

from calibration.fit import StepSample, fit_cost_model


def synthetic(a=0.01, b=1e-4, k=2e-9, d=0.002, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for n in (32, 256, 1024, 2048):
        for ctx in (0, 2048, 8192):
            for r in (1, 4):
                ns = [n // r] * r
                ks = [ctx] * r
                t = a + b * sum(ns) + k * sum(x * (c + x / 2) for x, c in zip(ns, ks)) + d * r
                out.append(StepSample(tuple(ns), tuple(ks), t * (1 + noise * rng.standard_normal())))
    return out


class TestFit:
    """Exact data is fitted exactly; noisy data gives a small held-out error."""

    def test_recovers_exact_coefficients(self):
        fit = fit_cost_model(synthetic())
        assert fit.coefficients["a_s"] == pytest.approx(0.01, rel=1e-6)
        assert fit.coefficients["b_s_per_token"] == pytest.approx(1e-4, rel=1e-6)
        assert fit.coefficients["k_s_per_pair"] == pytest.approx(2e-9, rel=1e-6)
        assert fit.coefficients["d_s_per_request"] == pytest.approx(0.002, rel=1e-6)
        assert fit.holdout_mape < 1e-9 and fit.num_holdout == 6 and fit.num_train == 18

    def test_noisy_fit_reports_holdout_error(self):
        fit = fit_cost_model(synthetic(noise=0.05))
        assert 0 < fit.holdout_mape < 0.15
        assert all(v >= 0 for v in fit.coefficients.values())

    def test_too_few_samples(self):
        with pytest.raises(ValueError, match="need at least 4"):
            fit_cost_model(synthetic()[:3])


def test_recovers_decode_terms():
    # Prefill grid plus decode-heavy and mixed steps: f per decode, e per decoding context token.
    a, b, k, d, f, e = 0.01, 1e-4, 2e-9, 0.002, 3e-4, 5e-8
    out = synthetic(a, b, k, d)
    for r in (1, 8, 32):
        for ctx in (128, 1024, 4096):
            for mixed in (0, 512):
                ns = [1] * r + ([mixed] if mixed else [])
                ks = [ctx] * r + ([0] if mixed else [])
                dec = (True,) * r + ((False,) if mixed else ())
                t = (a + b * sum(ns) + k * sum(x * (c + x / 2) for x, c in zip(ns, ks)) + d * len(ns)
                     + f * r + e * ctx * r)
                out.append(StepSample(tuple(ns), tuple(ks), t, dec))
    fit = fit_cost_model(out)
    assert fit.coefficients["f_s_per_decode"] == pytest.approx(f, rel=1e-5)
    assert fit.coefficients["e_s_per_decode_ctx_token"] == pytest.approx(e, rel=1e-5)
    assert fit.coefficients["a_s"] == pytest.approx(a, rel=1e-5)
    assert fit.num_holdout_decode > 0 and fit.holdout_decode_mape < 1e-6
    # Without decode samples the decode columns are zero and fitted as 0.
    plain = fit_cost_model(synthetic(a, b, k, d))
    assert plain.coefficients["f_s_per_decode"] == 0 and plain.coefficients["e_s_per_decode_ctx_token"] == 0
