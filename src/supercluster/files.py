"""Files the tool writes: never over an existing file unless asked (``--force``), never over one of
the command's own inputs, never through a symbolic link, and each one whole or not at all (written
to a temporary file beside it, then renamed into place).

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_atomic(check_output(d / "a.json", "out"), "{}")
>>> check_output(d / "a.json", "out")
Traceback (most recent call last):
...
supercluster.errors.InputError: out: ... exists; give --force to overwrite it, or another path
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from .errors import InputError, require


def check_output(path: str | Path, field: str, *, force: bool = False,
                 inputs: Iterable[str | Path | None] = ()) -> Path:
    """``path`` as a file this command may write (checked before any work is done): an InputError
    under ``field`` if it exists (unless ``force``), is one of ``inputs`` (even with ``force``), is a
    symbolic link, or lies in a folder that does not exist."""
    p = Path(path)
    require(not p.is_symlink(), field, f"{p} is a symbolic link; give the file itself")
    if p.exists():
        for other in inputs:
            if other is not None and Path(other).exists() and os.path.samefile(p, other):
                raise InputError(field, f"{p} is also an input of this command; write elsewhere")
        require(p.is_file(), field, f"{p} exists and is not a file")
        require(force, field, f"{p} exists; give --force to overwrite it, or another path")
    parent = p.parent if str(p.parent) else Path(".")
    require(parent.is_dir(), field, f"folder {parent} does not exist")
    return p


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` whole: a temporary file beside it, then renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError("out", f"cannot write {path}: {exc.strerror or exc}") from None
