"""The one error type users see: a bad input, named by field, with what is allowed."""

from __future__ import annotations


class InputError(ValueError):
    """A user mistake. ``field`` names the input; the message says what is allowed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def require(cond: bool, field: str, message: str) -> None:
    """Raise :class:`InputError` for ``field`` unless ``cond`` holds."""
    if not cond:
        raise InputError(field, message)
