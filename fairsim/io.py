"""Output paths: check them before any work, write every file atomically.

Every command that writes results checks its ``--out`` first (``check_writable_dir`` /
``check_writable_file``), so a typo or a read-only folder fails in a second instead of after a
long simulation or measurement. Every file is written atomically: to a temporary file in the same
folder, then ``os.replace`` onto the final name (atomic on POSIX within one file system). A
reader therefore sees the old file or the new one, never half of one; on an error the temporary
file is removed and ``OutputError`` names the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fairsim.errors import OutputError

# mkstemp creates 0600 files; results get the usual 0666 & ~umask, like open() would give them.
_UMASK = os.umask(0)
os.umask(_UMASK)


def echo(value: float) -> str:
    """A number as a user writes it: ``4194305``, ``0.4``, ``1e-12`` (not ``4.1943e+06``, ``400.0``)."""
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def plural(count: int, noun: str) -> str:
    """``1 prefill instance``, ``2 prefill instances``, ``1 run``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def plural_have(count: int, noun: str) -> str:
    """``1 request has``, ``2 requests have``: a message's subject and verb."""
    return f"{plural(count, noun)} {'has' if count == 1 else 'have'}"


def file_stem(name: str) -> str:
    """``name`` (a policy name) as a portable file-name part: every character other than a letter,
    digit, ``.``, ``-`` or ``_`` becomes ``_`` (``mypol:Rev`` -> ``mypol_Rev``; ``:`` is not allowed
    in Windows file names and ``/`` would name a folder)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def check_file_stems(names: list[str], pattern: str = "requests-{}.parquet") -> None:
    """Refuse policy names whose ``file_stem`` coincide (their tables would overwrite each other;
    ``pattern``: the name of one such file, ``{}`` standing for the stem, for the message).

    Raises:
        ValueError: Two names with the same file stem, naming both.
    """
    seen: dict[str, str] = {}
    for name in names:
        stem = file_stem(name)
        if stem in seen and seen[stem] != name:
            raise ValueError(f"--policies: {seen[stem]!r} and {name!r} would both write "
                             f"{pattern.format(stem)}; rename one of the policies")
        seen[stem] = name


#: The kinds of file fairsim writes in an output folder (``check_writable_dir``).
OUTPUT_SUFFIXES = (".json", ".parquet", ".png", ".md", ".csv")


def check_writable_dir(path: str | Path, option: str = "--out", files: Iterable[str] = (),
                       folders: Iterable[str] = ()) -> Path:
    """Make sure ``path`` is (or can become) a folder fairsim can write files in.

    Creates the folder (and its parents) if missing, then creates and removes a probe file in it,
    which is the only reliable test (permissions, read-only mounts, ACLs, a full disk for new
    inodes).

    Args:
        path: The output folder.
        option: The option that named it, quoted in the message (e.g. ``"--out"``).
        files: Names of the files the command will write there: one that exists as a folder
            would fail only at the end, after the work, so it is refused here (as is any folder
            named like a file of ``OUTPUT_SUFFIXES``).
        folders: Names of the folders it keeps there: one that exists as a file is refused.

    Returns:
        ``path`` as a ``Path``.

    Raises:
        OutputError: ``path`` is empty, an existing non-folder, cannot be created, or is not
            writable; or one of ``files`` (or any name of ``OUTPUT_SUFFIXES``) is a folder
            there, a device, a pipe, a socket or a link to nothing, or one of ``folders`` a file.
    """
    _not_empty(path, option)
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise OutputError(out, "exists and is not a folder", option)
    if out.is_symlink() and not out.exists():
        raise OutputError(out, f"is a link to {os.readlink(out)}, which does not exist", option)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(out, f"cannot create the folder: {exc.strerror or exc}", option) from exc
    _probe(out, option, out)
    for name in files:
        if (out / name).is_dir():
            raise OutputError(out / name, f"is a folder, where {option} writes the file {name}", option)
    for entry in out.iterdir():  # the names a command builds per window or figure, all of these kinds
        if entry.suffix in OUTPUT_SUFFIXES and entry.is_dir():
            raise OutputError(entry, f"is a folder with a file's name (fairsim writes its {', '.join(OUTPUT_SUFFIXES)} "
                              f"files in {option}); move it away", option)
        if entry.suffix in OUTPUT_SUFFIXES or entry.name in files:
            # A device, a pipe or a socket, or a link to nothing, would fail only when the file is
            # written, after the work: refused here (``file_target``, which the write uses).
            file_target(entry, option)
    for name in folders:
        if (out / name).exists() and not (out / name).is_dir():
            raise OutputError(out / name, f"is a file, where {option} keeps the folder {name}", option)
    return out


def file_target(path: str | Path, option: str | None = None) -> Path:
    """The file to write for ``path``: ``path`` itself, or the file a link at ``path`` points to
    (a write renames a new file into place, which would replace the link, not write through it).

    Raises:
        OutputError: ``path`` exists and is not a regular file (a device such as ``/dev/full``, a
            pipe, a socket: a rename would replace it with a plain file), or is a link to nothing.
    """
    target = Path(path)
    if target.is_symlink():
        if not target.exists():
            raise OutputError(target, f"is a link to {os.readlink(target)}, which does not exist", option)
        target = Path(os.path.realpath(target))
    if target.exists() and not target.is_file() and not target.is_dir():
        raise OutputError(target, "is not a regular file (a device, a pipe or a socket), which a write "
                          "would replace with a plain file; give a file name", option)
    return target


def check_writable_file(path: str | Path, option: str = "--out") -> Path:
    """Make sure a file can be written at ``path`` (atomically: the folder must be writable).

    Creates the parent folder if missing. An existing file is left alone (it is replaced only when
    the result is written).

    Returns:
        The file to write: ``path``, or the file a link at ``path`` points to (``file_target``).

    Raises:
        OutputError: ``path`` is empty or a folder, not a regular file, a link to nothing, its
            parent cannot be created or is not writable, or an existing ``path`` is read-only.
    """
    _not_empty(path, option)
    target = file_target(path, option)
    if target.is_dir():
        raise OutputError(target, "is a folder; give a file name", option)
    parent = target.parent
    if parent.exists() and not parent.is_dir():
        raise OutputError(target, f"its parent {parent} is not a folder", option)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(target, f"cannot create the folder {parent}: {exc.strerror or exc}", option) from exc
    if target.exists() and not os.access(target, os.W_OK):
        raise OutputError(target, "exists and is read-only", option)
    _probe(parent, option, target)
    return target


def _not_blank(text: str, what: str, advice: str) -> str:
    """``text``, or ``argparse.ArgumentTypeError`` where it is empty or blank (an unset shell
    variable): ``empty WHAT 'TEXT' ...; ADVICE``."""
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError(f"empty {what} {text!r} (an unset shell variable?); {advice}")
    return text


def path_arg(text: str) -> Path:
    """``argparse`` type for a path option: refuses an empty or blank value, which ``Path("")``
    would turn into the working folder (an unset shell variable writing results there).

    Raises:
        argparse.ArgumentTypeError: The value is empty or blank (argparse: usage, exit 2).
    """
    return Path(_not_blank(text, "path", "give a folder or file name, '.' for the working folder"))


def file_arg(text: str) -> Path:
    """``argparse`` type for an option that names a file (``--policy-config``, a sweep spec,
    ``convert``'s ``OUT``, ``--record``): refuses an empty or blank value as ``path_arg`` does,
    without its advice to give ``'.'``, a folder, which such an option refuses.

    Raises:
        argparse.ArgumentTypeError: The value is empty or blank (argparse: usage, exit 2).
    """
    return Path(_not_blank(text, "path", "give a file name"))


def name_arg(text: str) -> str:
    """``argparse`` type for a name option whose default is derived (``--name``: the output file's
    stem): an empty or blank value is refused rather than read as "not given".

    Raises:
        argparse.ArgumentTypeError: The value is empty or blank (argparse: usage, exit 2).
    """
    return _not_blank(text, "name", "give a name, or leave the option out for its default")


def count_arg(text: str) -> int:
    """``argparse`` type for a count option (tokens, blocks, requests): a whole number in digits
    (``2048``, ``1_000_000``) or in exponent form (``1e6``, ``2.5e3``), read exactly, so ``1e12``
    and ``1000000000000`` are the same value; the option's bounds are checked where it is used,
    naming the option.

    Raises:
        argparse.ArgumentTypeError: Not a whole number (``1.5``, ``1e-3``, ``inf``, ``x``), or
            above ``1e30`` (beyond every count fairsim takes; a larger exponent would only cost
            time and memory to write out).
    """
    import argparse
    from decimal import Decimal, InvalidOperation

    try:
        value = Decimal(text)
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite() or value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"{text!r}: need a whole number, e.g. 2048 or 2e3")
    if value.adjusted() > 30:
        raise argparse.ArgumentTypeError(f"{text!r}: above 1e30, beyond any count fairsim takes")
    return int(value)


def _not_empty(path: str | Path, option: str | None) -> None:
    # Path("") is ".": an unset shell variable must not send results into the working folder.
    if isinstance(path, str) and not path.strip():
        raise OutputError(repr(path), "empty path (an unset shell variable?); give a folder or file "
                          "name, '.' for the working folder", option)


def _probe(folder: Path, option: str | None, named: Path) -> None:
    import tempfile  # here, not at import: a run without output files never needs it (start-up)

    try:
        fd, tmp = tempfile.mkstemp(prefix=".fairsim-probe-", dir=folder)
    except OSError as exc:
        raise OutputError(named, f"not writable: {exc.strerror or exc}", option) from exc
    os.close(fd)
    os.unlink(tmp)


def print_then_write(show: Callable[[], Any], write: Callable[[], Any]) -> BrokenPipeError | None:
    """Print a command's output (``show``), then write its files (``write``): they are written
    even when stdout's reader left (``| head``) or a Ctrl-C lands while printing.

    Returns:
        The ``BrokenPipeError`` of a reader that left, for the caller to raise once its other
        files (figures) are written too (exit 141, quietly: ``fairsim.cli``); else None.
    """
    try:
        show()
    except BrokenPipeError as exc:
        return exc  # (after ``write``: ``finally`` runs first)
    finally:
        write()
    return None


def atomic_write(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """Run ``write(tmp)`` on a temporary file next to ``path``, then rename it onto ``path``.

    Args:
        path: The final file.
        write: Writes the whole content to the path it is given.

    Returns:
        The file written: ``path``, or the file a link at ``path`` points to.

    Raises:
        OutputError: ``path`` is not a regular file or a link to one (``file_target``), or
            creating, writing or renaming failed (the temporary file is removed; the message
            names ``path`` and the reason).
    """
    import tempfile  # (as in _probe)

    final = file_target(path)  # (through a link: the rename replaces its target, keeping the link)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    except OSError as exc:
        raise OutputError(final, f"cannot write: {exc.strerror or exc}") from exc
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)
        write(tmp)
        os.replace(tmp, final)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise OutputError(final, f"cannot write: {exc.strerror or exc}") from exc
        raise
    return final


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; see ``atomic_write``."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; see ``atomic_write``."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def atomic_to_parquet(frame: Any, path: str | Path) -> Path:
    """Write a pandas DataFrame to ``path`` as Parquet (no index) atomically; see ``atomic_write``."""
    return atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))


def atomic_to_csv(frame: Any, path: str | Path) -> Path:
    """Write a pandas DataFrame to ``path`` as CSV (no index) atomically; see ``atomic_write``."""
    return atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, inf: "no figure", e.g. a TPOT when no request
    generated two tokens) replaced by ``None``, so ``json.dumps`` writes ``null`` (bare ``NaN`` is
    not JSON). Recurses into dicts, lists and tuples; numpy scalars become Python numbers."""
    import math

    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if hasattr(value, "item") and not isinstance(value, (list, dict)):  # numpy scalar
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


def strict_json(value: Any) -> str:
    """``value`` as indented, strict JSON (non-finite figures as ``null``; see ``json_safe``)."""
    import json

    return json.dumps(json_safe(value), indent=2, allow_nan=False)
