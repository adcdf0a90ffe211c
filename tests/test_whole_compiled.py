"""The modules setup.py compiles whole from their own source (``fairsim.compiled.WHOLE_MODULES``).

The compiled engine and orders must decide what their source decides: whole ``compare`` runs of
every registered policy, prefill-only and colocated, with the extensions and with
``FAIRSIM_PURE_PYTHON=1`` (the sources), give equal request and step tables. The finder that
picks the source (``SourceFinder``: ``FAIRSIM_PURE_PYTHON=1``, a source edited since the build)
is tested on a package of its own in a temporary folder.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import fairsim.compiled as compiled
from fairsim.compiled import STAMP_SUFFIX, WHOLE_MODULES, SourceFinder, built_extension, source_stamp

WINDOW = Path(__file__).resolve().parents[1] / "fairsim" / "traces" / "data" / "conversation_window.jsonl"
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _module(tmp_path: Path, text: str = "X = 1\n") -> tuple[Path, Path]:
    """``tmp_path/pkg/mod.py`` and the path its extension would have (not written)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir(exist_ok=True)
    source = pkg / "mod.py"
    source.write_text(text)
    return source, pkg / f"mod{SUFFIX}"


def test_stamp_is_size_and_crc32(tmp_path):
    source, _ = _module(tmp_path, "abc")
    assert source_stamp(source) == "3 352441c2"  # zlib.crc32(b"abc") == 0x352441c2


def test_an_extension_is_used_only_when_built_from_these_bytes(tmp_path, capsys):
    source, ext = _module(tmp_path)
    assert built_extension(source) is None  # none built: the source, no warning
    ext.write_bytes(b"\x7fELF")
    stamp = Path(f"{ext}{STAMP_SUFFIX}")
    stamp.write_text(source_stamp(source) + "\n")
    assert built_extension(source) == ext
    assert capsys.readouterr().err == ""
    source.write_text("X = 2\n")  # edited since the build: same size, other bytes
    assert built_extension(source) is None
    err = capsys.readouterr().err
    assert err.startswith(f"fairsim: warning: {source} changed since mod{SUFFIX} was built from it")
    assert built_extension(source) is None
    assert capsys.readouterr().err == ""  # once per process
    stamp.unlink()  # an extension with no stamp (built by hand): not used either
    source.write_text("X = 1\n")
    assert built_extension(source) is None


def test_the_finder_picks_the_source_where_pure_python_or_stale(tmp_path, monkeypatch, capsys):
    source, ext = _module(tmp_path)
    ext.write_bytes(b"\x7fELF")
    Path(f"{ext}{STAMP_SUFFIX}").write_text(source_stamp(source))
    monkeypatch.setattr(compiled, "WHOLE_MODULES", ("pkg.mod",))
    monkeypatch.delenv(compiled.PURE_PYTHON_ENV, raising=False)
    finder = SourceFinder()
    path = [str(source.parent)]
    assert finder.find_spec("pkg.other", path) is None  # not compiled whole: not this finder's
    assert finder.find_spec("pkg.mod", None) is None  # a top-level name: not this finder's
    assert finder.find_spec("pkg.mod", path) is None  # fresh: Python's own import loads the extension
    monkeypatch.setenv(compiled.PURE_PYTHON_ENV, "1")
    spec = finder.find_spec("pkg.mod", path)
    assert spec.origin == str(source) and isinstance(spec.loader, importlib.machinery.SourceFileLoader)
    monkeypatch.delenv(compiled.PURE_PYTHON_ENV)
    source.write_text("X = 3\n")
    assert finder.find_spec("pkg.mod", path).origin == str(source)
    assert "changed since" in capsys.readouterr().err


def test_the_finder_is_first_on_the_import_path():
    assert isinstance(sys.meta_path[0], SourceFinder)
    assert sum(isinstance(f, SourceFinder) for f in sys.meta_path) == 1


def _loaded_files(env: dict[str, str]) -> dict[str, str]:
    code = ("import importlib, json\n"
            f"print(json.dumps({{n: importlib.import_module(n).__file__ for n in {WHOLE_MODULES!r}}}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def built_env() -> tuple[dict[str, str], dict[str, str]]:
    """This environment less ``FAIRSIM_PURE_PYTHON``, and the files its imports load; skips where
    no module was compiled whole (no C compiler)."""
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_PYTHON_ENV}
    files = _loaded_files(env)
    if not any(f.endswith(SUFFIX) for f in files.values()):
        pytest.skip("no module was compiled whole (no C compiler)")
    return env, files


def test_the_built_extensions_are_loaded_and_pure_python_loads_the_sources(built_env):
    env, files = built_env
    assert all(f.endswith(SUFFIX) for f in files.values()), files  # all built, none stale
    pure = _loaded_files(dict(env, **{compiled.PURE_PYTHON_ENV: "1"}))
    assert all(f.endswith(".py") for f in pure.values()), pure


@pytest.mark.parametrize("mode", [[], ["--mode", "colocated", "--time-scale", "4"]], ids=["prefill", "colocated"])
def test_compiled_and_source_decide_the_same(tmp_path, mode, built_env):
    """Every registered policy over the packaged conversation window (1,407 requests at 6.8x the
    engine's prefill capacity: long queues, evictions; colocated: preemptions): the request and
    step tables of the compiled modules equal those of their sources."""
    env, _ = built_env
    outs = {}
    for label, extra in (("compiled", {}), ("source", {compiled.PURE_PYTHON_ENV: "1"})):
        outs[label] = tmp_path / label
        subprocess.run([sys.executable, "-m", "fairsim", "compare", "--trace", str(WINDOW), "--policies", "all",
                        *mode, "--format", "json", "--out", str(outs[label])],
                       capture_output=True, text=True, check=True, env=dict(env, **extra))
    tables = sorted(p.name for p in outs["compiled"].glob("*.parquet"))
    assert len(tables) >= 2 * 20 and tables == sorted(p.name for p in outs["source"].glob("*.parquet"))
    for name in tables:
        pd.testing.assert_frame_equal(pd.read_parquet(outs["compiled"] / name), pd.read_parquet(outs["source"] / name))


def test_the_compiled_engines_data_attributes_are_declared_fields():
    """``fairsim/sim/engine.pxd`` declares every data attribute the engine sets, so the compiled
    methods read them as C fields: what is left in the instance's ``__dict__`` is only the
    methods that ``__init__`` replaces with compiled twins, before and after a run. An attribute
    added to ``engine.py`` without its declaration would show up here."""
    from fairsim.costmodel import load_profile
    from fairsim.policies import make_policy
    from fairsim.scenarios import build_scenario
    from fairsim.sim import engine as engine_mod

    if not engine_mod.__file__.endswith(SUFFIX):
        pytest.skip("the engine is not compiled here")
    assert type(engine_mod.Engine.__dict__["pool"]).__name__ == "getset_descriptor"
    profile = load_profile("a6000-llama3.1-8b-vllm-prior")
    rag = build_scenario("rag", profile, seed=5)

    def undeclared(engine):
        return {k for k in vars(engine) if not callable(getattr(engine_mod.Engine, k, None))}

    for name in ("fcfs", "fairway", "peek", "drr"):
        engine = engine_mod.Engine(rag.requests[:40], make_policy(name, profile), profile, rag.engine)
        assert not undeclared(engine), (name, "built", undeclared(engine))
        engine.run()
        assert not undeclared(engine), (name, "run", undeclared(engine))
    assert engine.pool is not None and engine.prefill_tokens > 0  # read from Python as before


def test_the_compiled_orders_data_attributes_are_declared_fields():
    """``credit_fast.pxd``, ``drr_dynamo.pxd``, ``credit.pxd`` and ``incremental.pxd`` declare every
    data attribute of the kept orders they make extension types (VTC's, DRR's, DLPM's and
    DRR-Dynamo's class queues, VTC's keys, the credit policies' replay log, FCFS's arrival order,
    LPM's sorted keys, LPM-aging's heap), so their compiled methods read C fields: nothing is
    left in an instance's ``__dict__`` after a run, with one class per request (no labels) and with shared classes (the RAG scenario's
    documents). An attribute added to one of those classes without its declaration shows up
    here."""
    from fairsim.costmodel import load_profile
    from fairsim.policies import credit_fast, make_policy
    from fairsim.record import replace
    from fairsim.scenarios import build_scenario
    from fairsim.sim import engine as engine_mod

    if not credit_fast.__file__.endswith(SUFFIX):
        pytest.skip("the orders are not compiled here")
    assert type(credit_fast.VTCOrder.__dict__["_keys"]).__name__ == "getset_descriptor"
    profile = load_profile("a6000-llama3.1-8b-vllm-prior")
    rag = build_scenario("rag", profile, seed=5)
    unlabelled = [replace(r, labels={}) for r in rag.requests[:60]]
    declared = ("ArrivalOrder", "ClassQueues", "VTCOrder", "DRROrder", "DLPMOrder", "DRRDynamoOrder",
                "RunSortedKeys", "Replay", "SortedKeyOrder", "LazyKeyOrder")
    for requests in (rag.requests[:60], unlabelled):
        for name, kinds in (("vtc", {"VTCOrder", "RunSortedKeys"}), ("drr", {"DRROrder", "Replay"}),
                            ("dlpm", {"DLPMOrder", "Replay"}), ("drr-dynamo", {"DRRDynamoOrder", "Replay"}),
                            ("fcfs", {"ArrivalOrder"}), ("fairway", {"ArrivalOrder"}), ("lpm", {"SortedKeyOrder"}),
                            ("klpm", {"ArrivalOrder", "LazyKeyOrder"}), ("lpm-aging", {"LazyKeyOrder"})):
            policy = make_policy(name, profile)
            engine = engine_mod.Engine(requests, policy, profile, rag.engine)
            engine.run()
            inc = engine._inc
            seen = [inc, *getattr(inc, "lanes", ()), getattr(inc, "_keys", None), getattr(policy, "_replay", None)]
            found = {type(o).__name__: o for o in seen if type(o).__name__ in declared}
            assert kinds <= set(found), (name, sorted(found))
            for kind, obj in found.items():
                assert vars(obj) == {}, (name, kind, sorted(vars(obj)))
