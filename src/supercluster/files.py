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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .errors import InputError, require


def check_output(path: str | Path, field: str, *, force: bool = False,
                 inputs: Iterable[str | Path | None] = ()) -> Path:
    """``path`` as a file this command may write (checked before any work is done): an InputError
    under ``field`` if it exists (unless ``force``), is one of ``inputs`` (even with ``force``), is a
    symbolic link, or lies in a folder that does not exist."""
    p = Path(path)
    try:
        return _check_output(p, field, force, inputs)
    except OSError as exc:  # a name too long for the file system, a folder that cannot be read
        raise InputError(field, f"cannot write {str(p)[:80]}{'...' if len(str(p)) > 80 else ''}: "
                                f"{exc.strerror or exc}") from None


#: the longest output file name (bytes): the file system's 255 less the room write_atomic's temporary
#: name beside it takes
MAX_OUTPUT_NAME_BYTES = 200


def _check_output(p: Path, field: str, force: bool, inputs: Iterable[str | Path | None]) -> Path:
    require(len(p.name.encode()) <= MAX_OUTPUT_NAME_BYTES, field,
            f"file name of {len(p.name.encode())} bytes; at most {MAX_OUTPUT_NAME_BYTES}")
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


# ---- reading what a user gives ------------------------------------------------------------------

#: The most bytes read from a configuration-like input (a model config, a launcher config, a device
#: profile, a failure-rates file, an nccl-tests log): a thousand times the largest real one.
MAX_INPUT_BYTES = 16 * 2**20


#: the file system's limits on a path a user gives (Linux: NAME_MAX and PATH_MAX, in bytes)
MAX_NAME_BYTES, MAX_PATH_BYTES = 255, 4096


def user_path(ref: str | Path, field: str) -> Path:
    """A path a user gives, as a :class:`Path`, its length within what a file system takes (an
    InputError under ``field`` otherwise: asking the system about it would fail with an OSError)."""
    p = Path(ref)
    raw = os.fsencode(p)
    require(len(raw) <= MAX_PATH_BYTES, field, f"a path of {len(raw):,} bytes; at most {MAX_PATH_BYTES:,}")
    longest = max((len(os.fsencode(part)) for part in p.parts), default=0)
    require(longest <= MAX_NAME_BYTES, field, f"a name of {longest:,} bytes in {str(p)[:60]}...; at most "
                                              f"{MAX_NAME_BYTES} a name")
    return p


def read_input(path: str | Path, field: str, *, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The text of a user's input file, bounded: an InputError under ``field`` if it is not a file, is
    larger than ``max_bytes``, cannot be read, or is not UTF-8 (a byte-order mark is dropped)."""
    p = user_path(path, field)
    require(p.is_file(), field, f"no such file: {p}")
    try:
        with p.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(field, f"cannot read {p}: {exc.strerror or exc}") from None
    require(len(data) <= max_bytes, field, f"{p} is larger than {max_bytes:,} bytes, the most read from such a file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(field, f"{p} is not UTF-8 text (byte {exc.start:,} is {data[exc.start:exc.start + 1]!r}); "
                                "save it as UTF-8") from None


def parse_json(text: str, field: str, where: str = "") -> object:
    """JSON text parsed, its errors (nesting too deep included) as one InputError under ``field``."""
    import json

    return _parse(json.loads, json.JSONDecodeError, "JSON", text, field, where)


def parse_toml(text: str, field: str, where: str = "") -> dict[str, object]:
    """TOML text parsed, its errors (nesting too deep included) as one InputError under ``field``."""
    import tomllib

    return _parse(tomllib.loads, tomllib.TOMLDecodeError, "TOML", text, field, where)  # type: ignore[no-any-return]


def _parse(loads: Callable[[str], Any], error: type[Exception], what: str, text: str, field: str, where: str) -> Any:
    try:
        return loads(text)
    except error as exc:
        raise InputError(field, f"{where}not valid {what}: {exc}") from None
    except RecursionError:
        raise InputError(field, f"{where}nested too deeply to be a configuration") from None
    except ValueError as exc:  # an integer of more digits than Python converts (4,300)
        raise InputError(field, f"{where}not valid {what}: {exc}") from None


#: the most text read as shell words (a launch script with its variables filled in, a launch line).
#: Python's shlex builds each word a character at a time, in time that grows with the square of the
#: word's length: bounding the text bounds the work (256 KiB: under a second on one core; launch
#: scripts are a few KiB)
MAX_SHELL_TEXT_CHARS = 256 * 2**10


def shell_words(text: str, field: str, what: str) -> list[str]:
    """``text`` split into words as a POSIX shell does (quotes, escapes, ``#`` comments; nothing
    expanded or run), at most :data:`MAX_SHELL_TEXT_CHARS` of it; errors as one InputError under
    ``field`` naming ``what`` was read."""
    import shlex

    require(len(text) <= MAX_SHELL_TEXT_CHARS, field,
            f"{what} of {len(text):,} characters; at most {MAX_SHELL_TEXT_CHARS:,} are read as shell words "
            "(launch scripts are a few thousand)")
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:
        raise InputError(field, f"cannot read {what}: {exc}") from None
