"""The one error type users see: a bad input, named by field, with what is allowed."""

from __future__ import annotations

import math
from typing import Any

#: the most characters of a message an error shows: a value echoed from a user's file is cut there
MAX_MESSAGE_CHARS = 1000


class InputError(ValueError):
    """A user mistake. ``field`` names the input; the message says what is allowed (at most
    :data:`MAX_MESSAGE_CHARS` of it: a value echoed from a large input is cut, the cut counted)."""

    def __init__(self, field: str, message: str) -> None:
        if len(message) > MAX_MESSAGE_CHARS:
            message = f"{message[:MAX_MESSAGE_CHARS]}... ({len(message) - MAX_MESSAGE_CHARS:,} characters more)"
        super().__init__(f"{field}: {message}")
        self.field = field


def require(cond: bool, field: str, message: str) -> None:
    """Raise :class:`InputError` for ``field`` unless ``cond`` holds."""
    if not cond:
        raise InputError(field, message)


def is_whole(v: Any) -> bool:
    """A count read from a user's file: an int (not a bool) or a finite float with no fraction."""
    if isinstance(v, bool):
        return False
    return isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and v.is_integer())


def config_int(field: str, v: Any) -> int:
    """A whole number from a config value (an int, a whole float, or the text of one)."""
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            pass
    elif is_whole(v):
        return int(v)
    raise InputError(field, f"must be an integer, got {v!r}")


def subtable(cfg: dict[str, Any], name: str, field: str | None = None) -> dict[str, Any]:
    """``cfg[name]`` when it is a table (TOML) or object (JSON), empty when absent; anything else is
    an :class:`InputError` for ``field`` (default: ``name``)."""
    sec = cfg.get(name, {})
    require(isinstance(sec, dict), field or name, f"must be a table of settings, got {sec!r}")
    return sec
