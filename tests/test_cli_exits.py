"""Exit statuses of the command line: Ctrl-C wherever it lands (start-up imports, parsing, a
command: exit 130, one line, no traceback), what an interrupted command keeps (``fairsim accept``),
and options refused with exit 2 naming them (``sweep --dry-run``, engine sizes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.utils import ctrl_c_when

ROOT = Path(__file__).resolve().parents[1]
MESSAGE = "fairsim: interrupted; results already written are kept"


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory) -> Path:
    """20,000 overloaded requests: ``compare --policies all`` on it runs for many seconds."""
    path = tmp_path_factory.mktemp("ctrl_c") / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": i * 5, "input_length": 1024, "output_length": 1,
                                        "hash_ids": [i % 50, 10_000 + i]}) + "\n" for i in range(20_000)))
    return path


def console_script(tmp_path: Path) -> Path:
    """The ``fairsim`` console script as pip writes it from ``pyproject.toml``'s entry point."""
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["fairsim"]
    module, func = entry.split(":")
    script = tmp_path / "fairsim-script.py"
    script.write_text(f"import re\nimport sys\nfrom {module} import {func}\nif __name__ == '__main__':\n"
                      f"    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                      f"    sys.exit({func}())\n")
    return script


def ctrl_c_after_import(argv: list[str], module: str, delay_s: float) -> subprocess.CompletedProcess:
    """Run ``python -X importtime ARGV`` (``argv`` without the interpreter) and send it Ctrl-C
    ``delay_s`` seconds after it finished importing ``module`` (its ``-X importtime`` line on
    stderr). Returns the status and the output, the import-time lines left out of stderr."""
    proc = subprocess.Popen([sys.executable, "-X", "importtime", *argv], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in proc.stderr:
        if line.startswith("import time:") and line.rsplit("|", 1)[-1].strip() == module:
            break
    else:
        pytest.fail(f"{module} was never imported: {proc.communicate()}")
    time.sleep(delay_s)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    stderr = "".join(ln for ln in stderr.splitlines(keepends=True) if not ln.startswith("import time:"))
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def assert_interrupted(res: subprocess.CompletedProcess) -> None:
    """Exit 130 with the one line, no traceback (not NumPy's "source directory" error either)."""
    assert res.returncode == 130, res.stderr
    assert res.stderr.strip().splitlines()[-1] == MESSAGE, res.stderr
    assert "Traceback" not in res.stderr and "Error" not in res.stderr, res.stderr


class TestCtrlCAtStartUp:
    """A Ctrl-C from the first module the command line imports on (the handler is installed
    before them) ends as any other one. Modules: ``argparse`` (the first one ``fairsim.cli``
    imports), NumPy's C core (inside NumPy's import, where the bug showed NumPy's "import numpy
    from its source directory"), NumPy, and ``fairsim.cli`` (parsing, then the command)."""

    @pytest.mark.parametrize("module", ["argparse", "numpy._core._multiarray_umath", "numpy", "fairsim.cli"])
    @pytest.mark.parametrize("entry", ["python -m fairsim", "console script"])
    def test_during_the_imports(self, long_trace, tmp_path, module, entry):
        start = ["-m", "fairsim"] if entry == "python -m fairsim" else [str(console_script(tmp_path))]
        # A prefill-only run imports no numpy (the Fast lane's compiled bound lines); a
        # colocated one does, for its decode stretches and token-gap table.
        mode = ["--mode", "colocated"] if module.startswith("numpy") else []
        assert_interrupted(ctrl_c_after_import([*start, "compare", "--policies", "all", *mode, "--trace",
                                                str(long_trace)], module, 0.0))

    @pytest.mark.parametrize("delay_s", [0.05, 0.15, 0.3, 0.5])
    def test_in_the_first_half_second(self, long_trace, delay_s):
        # from the first import on, at several moments: imports, parsing, reading, simulating
        assert_interrupted(ctrl_c_after_import(["-m", "fairsim", "compare", "--policies", "all", "--trace",
                                                str(long_trace)], "argparse", delay_s))

    @pytest.mark.parametrize("command", [["analyze"], ["accept", "--policy", "fairway"]])
    def test_commands_of_the_full_parser(self, long_trace, command):
        # their modules are imported while the full parser is built
        assert_interrupted(ctrl_c_after_import(["-m", "fairsim", *command, "--trace", str(long_trace)],
                                               "fairsim.cli", 0.1))


class TestHandler:
    """``fairsim.interrupt``'s handler where a ``KeyboardInterrupt`` would do harm."""

    def test_inside_an_extension_init_it_comes_again_after(self, monkeypatch):
        # A KeyboardInterrupt raised inside a C extension's init can crash it (orjson: SIGSEGV):
        # there the handler only records it and sends SIGINT again 10 ms later.
        from importlib.machinery import ExtensionFileLoader

        from fairsim import interrupt

        monkeypatch.setattr(interrupt, "REQUESTED", False)
        seen = []

        class Loader(ExtensionFileLoader):
            def exec_module(self, module):  # as importlib runs an extension's init
                interrupt._on_sigint(signal.SIGINT, sys._getframe())
                seen.append("init went on")

        previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append("SIGINT again"))
        try:
            Loader("ext", "ext.so").exec_module(None)
            assert seen == ["init went on"] and interrupt.REQUESTED
            deadline = time.monotonic() + 10
            while len(seen) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            signal.signal(signal.SIGINT, previous)
        assert seen == ["init went on", "SIGINT again"]
        with pytest.raises(KeyboardInterrupt):  # elsewhere it raises at once
            interrupt._on_sigint(signal.SIGINT, sys._getframe())

    def test_inside_the_import_systems_weakref_callback_it_is_only_recorded(self, monkeypatch):
        # CPython frees an import's module lock through a weakref callback (``cb`` in
        # ``_get_module_lock``); a KeyboardInterrupt raised there was printed as "Exception
        # ignored" with its traceback (a CI run). The handler knows the callback by file and name.
        import importlib._bootstrap as bootstrap

        from fairsim import interrupt

        lock = bootstrap._get_module_lock("fairsim_probe_module")
        callback = bootstrap._module_locks["fairsim_probe_module"].__callback__
        assert (callback.__code__.co_filename, callback.__code__.co_name) in interrupt._IMPORT_CALLBACKS
        del lock
        # a function of the same file and name, calling the handler as the signal would there
        namespace = {"on_sigint": interrupt._on_sigint, "sys": sys, "SIGINT": signal.SIGINT}
        exec(compile("def cb(ref):\n    on_sigint(SIGINT, sys._getframe())\n",
                     callback.__code__.co_filename, "exec"), namespace)
        monkeypatch.setattr(interrupt, "REQUESTED", False)
        namespace["cb"](None)  # no KeyboardInterrupt
        assert interrupt.REQUESTED
        with pytest.raises(KeyboardInterrupt):  # out of it, it raises
            interrupt._on_sigint(signal.SIGINT, sys._getframe())

    def test_an_interrupt_out_of_exec_code_still_exits_130(self, tmp_path):
        # CPython marks a KeyboardInterrupt that leaves exec() of a string (dataclasses build
        # their methods so at import) as unhandled, and under `python -m` then kills the process
        # by SIGINT (status -2) at exit, though the program caught it; the program clears the mark.
        (tmp_path / "exec_probe.py").write_text(
            "import sys\nimport fairsim.cli as cli\nfrom fairsim.__main__ import program\n"
            "cli.main = lambda: exec('import signal; signal.raise_signal(signal.SIGINT)')\n"
            "sys.exit(program())\n")
        res = subprocess.run([sys.executable, "-m", "exec_probe"], cwd=ROOT, capture_output=True, text=True,
                             timeout=120, env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert_interrupted(res)

    def test_a_ctrl_c_after_the_command_returned_is_reported(self):
        # it landed after the last check of main (the exit's clean-up): 130 all the same
        code = ("import sys; import fairsim.cli as cli; from fairsim.__main__ import program; "
                "from fairsim import interrupt; "
                "cli.main = lambda: (setattr(interrupt, 'REQUESTED', True), 0)[1]; sys.exit(program())")
        res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                             timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert_interrupted(res)


def _two_window_trace(path: Path) -> Path:
    """20,000 overloaded requests 5 ms apart (Mooncake: ms): window a = [0, 10) s holds 2,000,
    window b = [10, 100) s the other 18,000 (and all of them with its warm-up)."""
    path.write_text("".join(json.dumps({"timestamp": i * 5, "input_length": 1024, "output_length": 1,
                                        "hash_ids": [i % 50, 10_000 + i]}) + "\n" for i in range(20_000)))
    return path


def _assert_partial(out: Path, stdout: str, stderr: str) -> None:
    """Window a's rows printed and recorded in accept.json, marked partial; b named as not run."""
    rows = [ln.split() for ln in stdout.splitlines()]
    assert [r[4] for r in rows if r and r[0] == "a" and len(r) == 10] == ["fcfs", "lpm", "drr"], stdout
    assert not any(r and r[0] == "b" for r in rows), stdout
    assert "drr: unfinished" in stdout and "not run: b" in stdout, stdout
    assert "fairsim: the output above holds the 1 of 2 windows that finished (a)" in stderr, stderr
    data = json.loads((out / "accept.json").read_text())
    assert data["partial"] is True and data["pass"] is None and data["unfinished_windows"] == ["b"]
    assert [w["name"] for w in data["windows"]] == ["a"]
    assert {name: s["requests"] for name, s in data["windows"][0]["stats"].items()} == \
        {"fcfs": 2000, "lpm": 2000, "drr": 2000}


class TestAcceptKeepsFinishedWindows:
    """``fairsim accept`` stopped before its last window: the finished windows' rows are printed
    and recorded (``accept.json``, ``partial``), as ``run``/``compare`` keep finished policies."""

    def test_ctrl_c(self, tmp_path):
        trace, out = _two_window_trace(tmp_path / "t.jsonl"), tmp_path / "out"
        first_seen: list[float] = []

        def window_a_done() -> bool:  # its last file, and a moment for its verdict to be kept
            if not first_seen and (out / "steps-a-drr.parquet").exists():
                first_seen.append(time.monotonic())
            return bool(first_seen) and time.monotonic() - first_seen[0] > 0.3

        res = ctrl_c_when([sys.executable, "-m", "fairsim", "accept", str(trace), "--policy", "drr",
                           "--windows", "a:0-10,b:10-100", "--out", str(out)], window_a_done, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
        if res.returncode in (0, 1):
            pytest.skip("window b finished before the signal arrived")
        assert_interrupted(res)
        _assert_partial(out, res.stdout, res.stderr)
        assert not (out / "requests-b-drr.parquet").exists()
        assert not any(p.name.endswith(".tmp") for p in out.iterdir())

    def test_an_error_in_a_later_window(self, tmp_path, capsys, monkeypatch):
        # The candidate (an own policy: FCFS that raises once it sees a request of window b's
        # range, lines above 2,000) fails in window b's run: window a's verdict is kept.
        from fairsim.cli import main

        (tmp_path / "failslater.py").write_text(
            "class FailsInB:\n"
            "    name = 'fails-in-b'\n"
            "    def order(self, waiting, now):\n"
            "        if any(int(r.request_id.rsplit(':', 1)[1]) > 2000 for r in waiting):\n"
            "            raise RuntimeError('a request of window b')\n"
            "        return sorted(waiting, key=lambda r: (r.arrival_time, r.request_id))\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        trace, out = _two_window_trace(tmp_path / "t.jsonl"), tmp_path / "out"
        code = main(["accept", str(trace), "--policy", "failslater:FailsInB", "--windows", "a:0-10,b:10-100",
                     "--out", str(out)])
        cap = capsys.readouterr()
        assert code == 1 and "a request of window b" in cap.err, cap.err
        assert "fairsim: the output above holds the 1 of 2 windows that finished (a)" in cap.err, cap.err
        data = json.loads((out / "accept.json").read_text())
        assert data["partial"] is True and data["pass"] is None and data["unfinished_windows"] == ["b"]
        assert [w["name"] for w in data["windows"]] == ["a"]
        assert {name: s["requests"] for name, s in data["windows"][0]["stats"].items()} == \
            {"fcfs": 2000, "lpm": 2000, "failslater:FailsInB": 2000}

    def test_a_window_without_requests_is_refused_before_any_run(self, tmp_path, capsys):
        from fairsim.cli import main

        trace, out = _two_window_trace(tmp_path / "t.jsonl"), tmp_path / "out"
        code = main(["accept", str(trace), "--policy", "drr", "--windows", "a:0-10,b:200-300", "--out", str(out)])
        cap = capsys.readouterr()
        assert code == 2 and ("fairsim: error: --windows b:200-300: window b [200, 300) trace s holds no "
                              "request (the trace's arrivals run from 0 to 99.995 trace s)") in cap.err, cap.err
        assert cap.out == "" and not (out.exists() and any(out.iterdir()))  # nothing simulated, nothing written


def run_fairsim(*argv: str) -> subprocess.CompletedProcess:
    """``python -m fairsim ARGV`` in a subprocess: its exit status and output."""
    return subprocess.run([sys.executable, "-m", "fairsim", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


class TestSweepOptionsWithDryRun:
    """``sweep --dry-run`` refuses the options a real sweep refuses (exit 2, the option named)."""

    @pytest.mark.parametrize("options, message", [
        (["--workers", "-2"], "fairsim: error: --workers -2: need >= 1"),
        (["--workers", "0"], "fairsim: error: --workers 0: need >= 1"),
        (["--address", "ray://x:10001"], "fairsim: error: --address ray://x:10001: only used with --executor ray"),
    ])
    @pytest.mark.parametrize("dry_run", [True, False])
    def test_refused(self, tmp_path, options, message, dry_run):
        spec = tmp_path / "s.toml"
        spec.write_text('[[scenarios]]\nname = "rag"\nparams = { num_requests = 30 }\n'
                        '[[policies]]\nname = "fcfs"\n')
        res = run_fairsim("sweep", str(spec), "--out", str(tmp_path / "o"), *options,
                          *(["--dry-run"] if dry_run else []))
        assert res.returncode == 2 and res.stderr.strip().splitlines()[-1] == message, res.stderr
        assert res.stdout == "" and not (tmp_path / "o").exists()

    def test_good_workers_still_list(self, tmp_path):
        spec = tmp_path / "s.toml"
        spec.write_text('[[scenarios]]\nname = "rag"\nparams = { num_requests = 30 }\n'
                        '[[policies]]\nname = "fcfs"\n')
        res = run_fairsim("sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "2", "--dry-run")
        assert res.returncode == 0 and res.stdout.splitlines()[-1] == f"1 run; 0 done in {tmp_path / 'o'}"


BUDGET_CAP = "need at most 2147483647 tokens per step (2^31 - 1: vLLM counts a step's tokens in int32)"
SEQS_CAP = "need at most 2147483647 (2^31 - 1: vLLM counts a step's tokens, one at least per request, in int32)"
VLLM_RULE = "vLLM requires max_num_seqs <= max_num_batched_tokens"

SCHEDULER_CASES = [
    (["--budget", "1e30"], f"--budget {10**30}: {BUDGET_CAP}"),
    (["--budget", str(10**30)], f"--budget {10**30}: {BUDGET_CAP}"),
    (["--budget", "1e12"], f"--budget {10**12}: {BUDGET_CAP}"),  # was argparse's "invalid int value"
    (["--budget", "2147483648"], f"--budget 2147483648: {BUDGET_CAP}"),
    (["--max-num-seqs", "1e30"], f"--max-num-seqs {10**30}: {SEQS_CAP}"),
    (["--max-num-seqs", str(10**30), "--budget", str(10**30)], f"--budget {10**30}: {BUDGET_CAP}"),
    (["--budget", "128"], f"--max-num-seqs 256 is above --budget 128: {VLLM_RULE}"),
    (["--max-num-seqs", "4096"], f"--max-num-seqs 4096 is above --budget 2048: {VLLM_RULE}"),
    (["--budget", "0"], "--budget 0: need >= 1 token per step"),
]


def last_error(res: subprocess.CompletedProcess) -> str:
    return res.stderr.strip().splitlines()[-1]


class TestSchedulerLimits:
    """``--budget`` (vLLM ``max_num_batched_tokens``) and ``--max-num-seqs``: 1 to 2^31 - 1 (vLLM's
    int32 step offsets), ``--max-num-seqs`` at most ``--budget`` (vLLM's SchedulerConfig), the same
    value whether written 1e12 or 1000000000000; every refusal exit 2, naming the option."""

    @pytest.mark.parametrize("command, options, message", [
        *((["run"], options, message) for options, message in SCHEDULER_CASES),  # every value on one command
        *((command, options, message)  # both kinds of bound on the others
          for command in (["compare"], ["bench"], ["analyze"], ["accept", "--policy", "fcfs"])
          for options, message in (SCHEDULER_CASES[0], SCHEDULER_CASES[6]))])
    def test_refused(self, command, options, message):
        res = run_fairsim(*command, *options)
        assert res.returncode == 2 and last_error(res).startswith(f"fairsim: error: {message}"), res.stderr
        assert "Traceback" not in res.stderr

    @pytest.mark.parametrize("text", ["1.5", "1e-3", "inf", "x", "1e31"])
    def test_not_a_count(self, text):
        res = run_fairsim("run", "--budget", text)
        assert res.returncode == 2 and f"fairsim run: error: argument --budget: {text!r}" in res.stderr

    def test_exponent_form_is_the_same_value(self, capsys):
        from fairsim.cli import main

        rows = []
        for budget in ("4e3", "4000", "2147483647"):  # the largest budget runs too
            assert main(["run", "--policy", "fcfs", "--max-requests", "40", "--format", "json",
                         "--budget", budget, "--max-num-seqs", "3e2", "--kv-tokens", "2.5e5"]) == 0
            rows.append(json.loads(capsys.readouterr().out)["fcfs"])
        assert rows[0] == {**rows[1], "wall_time_s": rows[0]["wall_time_s"]}
        assert rows[0]["kv_tokens"] == 250_000 // 512 * 512
        assert rows[2]["requests"] == 40

    def test_sweep_engine_grid(self, tmp_path):
        spec = tmp_path / "s.toml"
        base = '[[scenarios]]\nname = "rag"\nparams = { num_requests = 30 }\n[[policies]]\nname = "fcfs"\n'
        spec.write_text(base + "[engine]\nbudget_tokens = [128]\n")
        res = run_fairsim("sweep", str(spec), "--dry-run")
        assert res.returncode == 2 and "max_num_seqs=256 is above budget_tokens=128" in res.stderr, res.stderr
        spec.write_text(base + f"[engine]\nbudget_tokens = [{2**31}]\n")
        res = run_fairsim("sweep", str(spec), "--dry-run")
        assert res.returncode == 2 and f"budget_tokens={2**31}: need at most 2147483647" in res.stderr, res.stderr

    def test_live_commands_refuse_before_an_engine(self):
        res = run_fairsim("equivalence", "--max-num-seqs", "1e30", "--policies", "fcfs")
        assert res.returncode == 2 and last_error(res) == (
            f"fairsim: error: --max-num-seqs {10**30}: need at most 2048, the step budget of both sides "
            f"(vLLM requires max_num_seqs <= max_num_batched_tokens)"), res.stderr
        res = run_fairsim("replay", "--engine", "vllm", "--virtual", "--budget", "128", "--max-requests", "5")
        assert res.returncode == 2 and last_error(res).startswith(
            f"fairsim: error: --max-num-seqs 256 is above --budget 128: {VLLM_RULE}"), res.stderr

    def test_live_config(self):
        from fairsim.live.engine import LiveConfig

        with pytest.raises(ValueError, match="max_num_seqs=300 is above budget_tokens=256"):
            LiveConfig(budget_tokens=256, max_num_seqs=300)
        with pytest.raises(ValueError, match=f"budget_tokens={2**31}: need at most"):
            LiveConfig(budget_tokens=2**31)


def test_the_exit_itself_ignores_ctrl_c():
    """Once the program's status is decided, SIGINT is ignored: CPython's finalisation would put
    the default action back for a Python handler and a late Ctrl-C would kill the process by
    SIGINT, with no line of ours (seen as exit -2 right after a finished table)."""
    code = ("import signal, sys; from fairsim.__main__ import program; sys.argv = ['fairsim', 'run', '--max-requests', '5', '--format', 'json'];"
            "status = program(); print(status, signal.getsignal(signal.SIGINT) is signal.SIG_IGN)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.stdout.split()[-2:] == ["0", "True"], res.stdout + res.stderr
