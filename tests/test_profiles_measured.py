"""The shipped measured CPU profile loads, is labelled measured, and drives `fairsim run`."""

import json

from fairsim.cli import main
from fairsim.costmodel import load_profile


class TestShippedMeasuredProfile:
    """`cpu-tiny-llama-vllm-measured` carries its provenance and fit error."""

    def test_metadata(self):
        p = load_profile("cpu-tiny-llama-vllm-measured")
        assert p.kind == "measured"
        meta = p.metadata
        assert meta["model"].startswith("fairsim tiny Llama") and meta["vllm_version"]
        assert meta["fit"]["holdout_mape"] >= 0 and meta["raw_measurements"]["steps"]
        assert p.idle_prefill_time(2048) > 0

    def test_run_uses_it(self, capsys):
        assert main(["run", "--profile", "cpu-tiny-llama-vllm-measured", "--policy", "fcfs",
                     "--max-requests", "30", "--kv-blocks", "64", "--format", "json"]) == 0
        assert json.loads(capsys.readouterr().out)["fcfs"]["requests"] == 30
