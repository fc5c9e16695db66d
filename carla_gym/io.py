"""Atomic, durable result files: a crash never leaves half a file; a replaced run stays until its successor is done."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from collections.abc import Iterable, Sequence
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
