"""Calibration: profile a live vLLM engine and fit fairsim's step-time cost model (COSTMODEL.md).

``calibration.fit`` (no vLLM) fits ``a, b, k, d`` by non-negative least squares and reports
held-out errors; ``calibration.measure`` times steps and ``T_idle(L)`` on a live engine;
``calibration.cli`` is ``fairsim calibrate``.
"""
