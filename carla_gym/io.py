"""Atomic, durable result files: a crash never leaves half a file; a replaced run stays until its successor is done.

One run per output directory: `claim_output_dir` locks it before ``--overwrite`` moves anything.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shlex
import shutil
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file's or a directory's contents to the disk (``os.fsync``).

    A directory is synced so that the renames and new names in it survive a power loss; on
    systems that cannot open a directory (Windows) that part is skipped.
    """
    path = Path(path)
    if path.is_dir():
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:  # Windows: directories cannot be opened; its renames are journaled
            return
    else:
        fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: str | os.PathLike) -> None:
    """`fsync_path` every file and directory under ``folder`` (deepest first), then ``folder`` itself."""
    folder = Path(folder)
    for root, dirs, files in os.walk(folder, topdown=False):
        for name in (*files, *dirs):
            fsync_path(Path(root) / name)
    fsync_path(folder)


def replace_durably(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """Rename a complete temporary file or folder ``tmp`` to ``path`` so that a crash keeps one of the two whole.

    ``tmp`` (and everything in it) is flushed to disk before the rename, and the directory
    holding ``path`` after it: the new name never points at data still in the page cache.
    """
    tmp, path = Path(tmp), Path(path)
    if tmp.is_dir():
        fsync_tree(tmp)
    else:
        fsync_path(tmp)
    os.replace(tmp, path)
    fsync_path(path.parent)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, flushed to disk, and a rename (`replace_durably`)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    replace_durably(tmp, path)


def write_json_atomic(path: str | os.PathLike, data) -> None:
    """Write ``data`` as indented JSON, atomically."""
    write_text_atomic(path, json.dumps(data, indent=2))


def write_csv_atomic(path: str | os.PathLike, header: Sequence[str], rows: Iterable[Sequence]) -> None:
    """Write a CSV file (a header line, then one line per row), atomically."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    write_text_atomic(path, buffer.getvalue())


def report_results(results: dict[str, float | str], json_path: str | os.PathLike | None = None) -> None:
    """Print ``name value`` lines (benchmarks) and, if a path is given, write them as JSON atomically.

    Numbers print with two decimals; anything else (the machine, "not measured: ..." notes) as text.
    """
    width = max(map(len, results), default=0) + 2
    for key, value in results.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        print(f"{key:{width}s} {value:14,.2f}" if number else f"{key:{width}s} {value}")
    if json_path is not None:
        write_json_atomic(json_path, results)


def set_aside(run_dir: str | os.PathLike) -> Path:
    """Move an existing run directory to ``<run_dir>.replaced`` (deleting an older one there).

    Used by ``--overwrite``: the old run is kept until the new one is complete, then removed with
    `discard_set_aside`.

    Returns:
        The ``.replaced`` path.
    """
    run_dir = Path(run_dir)
    old = run_dir.with_name(run_dir.name + ".replaced")
    shutil.rmtree(old, ignore_errors=True)
    os.replace(run_dir, old)
    fsync_path(run_dir.parent)
    return old


def discard_set_aside(run_dir: str | os.PathLike) -> None:
    """Delete ``<run_dir>.replaced`` (if any): the run that replaced it is complete."""
    run_dir = Path(run_dir)
    shutil.rmtree(run_dir.with_name(run_dir.name + ".replaced"), ignore_errors=True)


LOCK_NAME = ".lock"
"""The lock file inside an output directory (`claim_output_dir`); it never moves, so ``--overwrite`` cannot move a
running run aside."""


class OutputDirRefused(RuntimeError):
    """`claim_output_dir` refused the directory: another run holds its lock, or replacing it would lose a result."""


@contextmanager
def claim_output_dir(out: str | os.PathLike, *, program: str, overwrite: bool, complete: str,
                     resume: str) -> Iterator[Path]:
    """Hold the lock of the output directory ``out`` for one run; with ``overwrite``, set its old contents aside.

    The lock (``out/.lock``, ``fcntl.flock``) is taken before anything is moved, and its file stays in
    ``out``: a second run on the same directory is refused whatever its flags, and the refusal names the
    run holding it (its pid and command, written into the lock file). With ``overwrite``, the contents of
    ``out`` move to ``<out>.replaced`` under the lock, kept there until the new run is complete
    (`discard_set_aside`). An existing ``<out>.replaced`` is deleted only when ``out`` holds a complete run
    (its file ``complete``); otherwise ``<out>.replaced`` is the last complete run, and the claim is refused
    with the ``resume`` command. The lock is released when the block exits (an exception included).

    Args:
        out: The output directory (created with its parents when missing).
        program: The program name in the refusals, e.g. ``"agents.study"``.
        overwrite: Set the current contents aside (``--overwrite``).
        complete: The file that a complete run leaves in ``out`` (``"table.md"``, ``"summary.md"``).
        resume: The command that continues the run in ``out`` (printed when an overwrite is refused).

    Yields:
        ``out`` as a `Path`.

    Raises:
        OutputDirRefused: Another process holds the lock, or ``overwrite`` would delete the last complete run.
    """
    import fcntl

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOCK_NAME, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.seek(0)
            holder = lock.read().strip() or "an earlier version, which does not record itself"
            raise OutputDirRefused(f"{out} is in use by another {program} run ({holder}); wait for it to end, or "
                                   "choose another --out") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}: {shlex.join(sys.argv)}\n")
        lock.flush()
        if overwrite:
            _set_children_aside(out, complete, resume)
        yield out


def _set_children_aside(out: Path, complete: str, resume: str) -> None:
    """Move everything in ``out`` but its lock file to a new ``<out>.replaced`` (`claim_output_dir`)."""
    children = [p for p in out.iterdir() if p.name != LOCK_NAME]
    if not children:
        return  # nothing to keep: an earlier <out>.replaced stays until this run is complete
    old = out.with_name(out.name + ".replaced")
    if old.exists():
        if not (out / complete).is_file():
            raise OutputDirRefused(
                f"--overwrite {out}: refused, since {old} holds the last complete run (set aside by an earlier "
                f"--overwrite) and {out} an unfinished one (no {complete}); continue the unfinished one with: "
                f"{resume}; or delete {old} yourself first")
        shutil.rmtree(old)
    old.mkdir()
    for child in children:
        os.replace(child, old / child.name)
    fsync_path(old)
    fsync_path(out)
