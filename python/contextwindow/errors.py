"""Exception hierarchy for contextwindow.

Every error the library raises on purpose derives from :class:`ContextWindowError`.
Errors about the caller's input are also ``ValueError`` so that code written for
``json``/``msgspec`` style validation keeps working.
"""

from __future__ import annotations

__all__ = [
    "ContextWindowError",
    "InvalidMessageError",
    "InvalidRequestError",
    "ContextOverflowError",
]


class ContextWindowError(Exception):
    """Base class of every error raised by contextwindow on purpose."""


class InvalidMessageError(ContextWindowError, ValueError):
    """A message does not have the shape its format requires.

    Attributes:
        index: position of the offending message in the list given, or ``None`` when the
            problem is with the list itself.
        field: dotted path of the offending field inside that message, e.g.
            ``"tool_calls[0].function.arguments"``; ``None`` when the whole message is wrong.
        reason: what is wrong, in words.

    >>> str(InvalidMessageError("must be a string", index=3, field="role"))
    'message 3, field role: must be a string'
    """

    def __init__(self, reason: str, *, index: int | None = None, field: str | None = None):
        self.index = index
        self.field = field
        self.reason = reason
        where = []
        if index is not None:
            where.append(f"message {index}")
        if field is not None:
            where.append(f"field {field}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {reason}" if prefix else reason)


class InvalidRequestError(ContextWindowError, ValueError):
    """A request body or file could not be parsed (not JSON, not UTF-8, unknown shape)."""


class ContextOverflowError(ContextWindowError):
    """A request cannot fit the model's context window even after every allowed trim."""
