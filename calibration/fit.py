"""Fit the step-time cost model to measured steps (non-negative least squares).

Model (COSTMODEL.md)::

    step_time = a + b * sum(n_i) + k * sum(n_i * (k_i + n_i / 2)) + d * len(batch)
                + f * decodes + e * sum_decoding(k_j)

The last two (per decoding sequence, per context token a decoding sequence reads) are the
colocated-mode decode terms; samples without decoding requests leave their columns zero, and NNLS
then fits them as 0, so a prefill-only grid gives the prefill-only fit.

No vLLM import here: the fit works on plain measurement rows, so it can be redone from the raw
measurements stored in a profile's metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


#: Names of the fitted coefficients, in design-matrix column order.
COEFFICIENTS = ("a_s", "b_s_per_token", "k_s_per_pair", "d_s_per_request", "f_s_per_decode",
                "e_s_per_decode_ctx_token")


@dataclass(frozen=True)
class StepSample:
    """One measured engine step.

    Attributes:
        new_tokens: ``n_i`` per scheduled request, tokens, shape (r,).
        context_tokens: ``k_i`` per scheduled request (tokens already in its KV cache), shape (r,).
        seconds: Measured step time, seconds (median of repeats).
        decoding: Per scheduled request, whether it is a decode (one generated token on top of
            its context), shape (r,); ``()`` = none is.
    """

    new_tokens: tuple[int, ...]
    context_tokens: tuple[int, ...]
    seconds: float
    decoding: tuple[bool, ...] = ()

    @property
    def num_decodes(self) -> int:
        """Decoding requests in the step."""
        return sum(1 for d in self.decoding if d)

    def features(self) -> tuple[float, ...]:
        """``(1, sum n, sum n (k + n/2), r, decodes, sum decoding k)``: one design-matrix row."""
        n = np.asarray(self.new_tokens, dtype=np.float64)
        k = np.asarray(self.context_tokens, dtype=np.float64)
        dec = np.asarray(self.decoding or [False] * len(n), dtype=bool)
        return (1.0, float(n.sum()), float((n * (k + n / 2)).sum()), float(len(n)),
                float(dec.sum()), float(k[dec].sum()))


@dataclass(frozen=True)
class FitResult:
    """Fitted coefficients and diagnostics.

    Attributes:
        coefficients: ``{a_s, b_s_per_token, k_s_per_pair, d_s_per_request, f_s_per_decode,
            e_s_per_decode_ctx_token}``, each >= 0.
        train_mape: Mean absolute percentage error on the fitted points (fraction, 0.05 = 5 %).
        holdout_mape: The same on held-out points (never used by the fit).
        holdout_worst: Largest absolute relative error on held-out points (fraction).
        holdout_residuals_s: Predicted minus measured, seconds, per held-out point, shape (m,).
        condition_number: Condition number of the column-scaled training design matrix.
        num_train: Points fitted.
        num_holdout: Points held out.
        holdout_decode_mape: Held-out MAPE over the points with decoding requests (NaN if none).
        num_holdout_decode: Held-out points with decoding requests.
    """

    coefficients: dict[str, float]
    train_mape: float
    holdout_mape: float
    holdout_worst: float
    holdout_residuals_s: tuple[float, ...]
    condition_number: float
    num_train: int
    num_holdout: int
    holdout_decode_mape: float = float("nan")
    num_holdout_decode: int = 0

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (stored in the profile's metadata)."""
        return {
            "coefficients": self.coefficients,
            "train_mape": self.train_mape,
            "holdout_mape": self.holdout_mape,
            "holdout_worst_error": self.holdout_worst,
            "holdout_residuals_s": list(self.holdout_residuals_s),
            "condition_number": self.condition_number,
            "num_train": self.num_train,
            "num_holdout": self.num_holdout,
            "holdout_decode_mape": self.holdout_decode_mape,
            "num_holdout_decode": self.num_holdout_decode,
        }


def predict(coefficients: dict[str, float], samples: Sequence[StepSample]) -> np.ndarray:
    """Predicted step times, seconds, shape (len(samples),), float64."""
    x = np.array([s.features() for s in samples], dtype=np.float64).reshape(-1, len(COEFFICIENTS))
    c = np.array([coefficients.get(name, 0.0) for name in COEFFICIENTS], dtype=np.float64)
    return x @ c


def _relative_errors(coefficients: dict[str, float], samples: Sequence[StepSample]) -> np.ndarray:
    y = np.array([s.seconds for s in samples], dtype=np.float64)
    return np.abs(predict(coefficients, samples) - y) / y


def fit_cost_model(samples: Sequence[StepSample], holdout_every: int = 4) -> FitResult:
    """Fit ``a, b, k, d, f, e >= 0`` by non-negative least squares on relative error.

    Every ``holdout_every``-th sample (0-based index 1, 1 + holdout_every, ...) is held out and
    only used to report the error.

    Args:
        samples: Measured steps, at least 5 with ``holdout_every=4`` (4 fitted, 1 held out).
        holdout_every: Hold out one sample in this many (>= 2).

    Returns:
        A ``FitResult``.

    Raises:
        ValueError: Too few samples, a non-positive measured time, or ``holdout_every < 2``.

    Notes:
        Rows are divided by the measured time, so the fit minimises relative (percentage) error,
        the figure that is reported. Columns are scaled to unit norm before ``scipy.optimize.nnls``
        (the raw columns span ~1 to ~1e8), and the coefficients scaled back; the condition number
        reported is that of the scaled matrix. All arithmetic is float64.
    """
    if holdout_every < 2:
        raise ValueError(f"holdout_every={holdout_every}: need >= 2")
    if any(not s.seconds > 0 for s in samples):
        raise ValueError("every measured step time must be > 0 s")
    holdout = [s for i, s in enumerate(samples) if i % holdout_every == 1]
    train = [s for i, s in enumerate(samples) if i % holdout_every != 1]
    if len(train) < 4 or not holdout:
        raise ValueError(f"{len(samples)} samples: need at least 4 to fit and 1 to hold out")
    x = np.array([s.features() for s in train], dtype=np.float64)
    y = np.array([s.seconds for s in train], dtype=np.float64)
    xw = x / y[:, None]  # relative-error weighting
    yw = np.ones_like(y)
    norms = np.linalg.norm(xw, axis=0)
    norms[norms == 0] = 1.0
    scaled = xw / norms
    from scipy.optimize import nnls  # here, not at import: fairsim's start-up time

    sol, _ = nnls(scaled, yw)
    coef = sol / norms
    coefficients = {name: float(v) for name, v in zip(COEFFICIENTS, coef)}
    train_err = _relative_errors(coefficients, train)
    hold_err = _relative_errors(coefficients, holdout)
    residuals = predict(coefficients, holdout) - np.array([s.seconds for s in holdout])
    dec = np.array([s.num_decodes > 0 for s in holdout], dtype=bool)
    return FitResult(
        coefficients=coefficients,
        train_mape=float(train_err.mean()),
        holdout_mape=float(hold_err.mean()),
        holdout_worst=float(hold_err.max()),
        holdout_residuals_s=tuple(float(r) for r in residuals),
        condition_number=float(np.linalg.cond(scaled)),
        num_train=len(train),
        num_holdout=len(holdout),
        holdout_decode_mape=float(hold_err[dec].mean()) if dec.any() else float("nan"),
        num_holdout_decode=int(dec.sum()),
    )
