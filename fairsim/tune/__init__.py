"""``fairsim tune``: search policies and their parameters against a team's TTFT targets.

Modules: ``evaluate`` (windows of the trace, one policy's TTFT statistics on them, and the score
against the targets of ``fairsim.accept``), ``search`` (the Optuna study: SQLite storage in
``--out``, resume, staleness, trials in fixed batches on local processes or Ray), ``report``
(Pareto front, figure, Parquet, the chosen policy's file), ``command`` (the CLI).

Each policy's searchable parameters come from its own class (``fairsim.policies.space``).
"""
