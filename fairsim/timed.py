"""Timing a whole command as a process: its wall time, peak memory and exit status.

Shared by ``fairsim bench`` (each policy's run, the sched-sim peer) and its Dynamo peer
(``fairsim.bench_dynamo``), so both are measured the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path


#: The process that starts each timed command (``_timed``): a bare interpreter (``-I -S``, about
#: 9 MiB) that spawns the command, waits for it and writes its wall time, peak memory and exit
#: status to the report file named by its first argument. Linux records the memory a process
#: held before its ``exec`` in its peak (``exec_mmap``: ``setmax_mm_hiwater_rss``), so a command
#: started by bench itself, which holds the trace, would report bench's own peak instead of its own
#: when that is smaller (a 2 MiB script read 36 MiB). SIGINT gets a no-op handler here, so the
#: spawner still reaps the command after a Ctrl-C (which reaches the command too: handlers are
#: reset at its ``exec``).
_SPAWNER = """\
import json, os, signal, sys, time
signal.signal(signal.SIGINT, lambda *_: None)
report, cmd = sys.argv[1], sys.argv[2:]
try:
    t0 = time.perf_counter()
    pid = os.posix_spawn(cmd[0], cmd, os.environ)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    out = {"wall_s": wall, "peak_kib": usage.ru_maxrss, "status": os.waitstatus_to_exitcode(status)}
except OSError as exc:
    out = {"errno": exc.errno, "strerror": exc.strerror or str(exc)}
with open(report, "w") as f:
    json.dump(out, f)
"""


def _timed(cmd: list[str]) -> tuple[float, float, int, str, str]:
    """Run ``cmd`` (``cmd[0]`` a path to an executable) under ``_SPAWNER``; return (wall s, peak
    MiB, exit status, stdout, stderr). The peak cannot read below the spawner's own, about 9 MiB.

    Raises:
        OSError: ``cmd`` could not be started (e.g. a script without a shebang line).
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(suffix=".json") as report:
        code = subprocess.call([sys.executable, "-I", "-S", "-c", _SPAWNER, report.name, *cmd],
                               stdout=out, stderr=err)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        text = Path(report.name).read_text()
        if not text:  # the spawner itself died (killed, or interrupted before it spawned)
            return 0.0, 0.0, code if code != 0 else 1, stdout, stderr
        got = json.loads(text)
        if "errno" in got:
            raise OSError(got["errno"], got["strerror"])
        return got["wall_s"], got["peak_kib"] / 1024.0, got["status"], stdout, stderr
