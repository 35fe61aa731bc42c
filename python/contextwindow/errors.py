"""Exception hierarchy for contextwindow.

Every error the library raises on purpose derives from :class:`ContextWindowError`.
Errors about the caller's input are also ``ValueError`` so that code written for
``json``/``msgspec`` style validation keeps working.
"""

from __future__ import annotations

import copyreg
from typing import Any

from ._jsontext import clean_str

__all__ = [
    "ContextWindowError",
    "InvalidMessageError",
    "InvalidRequestError",
    "ContextOverflowError",
    "TokenCounterError",
]


def _reduce_error(exc: BaseException) -> tuple[Any, ...]:
    """Pickle an exception as its ``args`` (the message) and its attributes, rebuilt
    without calling ``__init__``: a class whose ``__init__`` takes keyword-only or other
    arguments than the message (``TokenCounterError``'s ``counter``, ``ReserveError``'s
    ``window``) could not be unpickled, so an error raised in a ``ProcessPoolExecutor``
    worker broke the pool (fresh20a F2). ``copy.copy``/``copy.deepcopy`` use it too."""
    return (copyreg.__newobj__, (type(exc), *exc.args), dict(exc.__dict__))  # type: ignore[attr-defined]


class ContextWindowError(Exception):
    """Base class of every error raised by contextwindow on purpose.

    Every one pickles (and copies) with its message and attributes, so it crosses a
    process boundary (``ProcessPoolExecutor``, ``multiprocessing``) as raised. Catch it to
    handle any of them (bad messages, a bad budget, a request over the model's capacity).

    >>> import contextwindow as cw
    >>> try:
    ...     cw.count_messages([{"role": "user", "content": 5}])
    ... except cw.ContextWindowError as e:
    ...     print(type(e).__name__, e)
    InvalidMessageError message 0, field content: must be a string or a list of blocks
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return _reduce_error(self)


def _printable(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (a high one followed by a low
    one is the character they encode), as the gateway and the CLI read them, so an error
    that quotes the caller's input can be printed and logged (DESIGN.md section 7; fresh9 B1)."""
    return clean_str(text)


class InvalidMessageError(ContextWindowError, ValueError):
    """A message does not have the shape its format requires.

    Attributes:
        index: position of the offending message in the list given, or ``None`` when the
            problem is with the list itself.
        field: dotted path of the offending field inside that message, e.g.
            ``"tool_calls[0].function.arguments"``; ``None`` when the whole message is wrong.
        reason: what is wrong, in words.
        offset: byte offset in the request body (``fit_request``/``count_request``) of a key
            the gateway found repeated in the message (the second occurrence, or just past
            the repeat's value deeper down), or, for any other error in a message of a body,
            of that message's value (its ``{``, or the first byte of a message that is not an
            object); ``None`` for messages given as dicts or structs.

    A lone surrogate in ``field`` or ``reason`` (an unknown role quoted as given) is kept
    as U+FFFD, as the gateway and the CLI read it, so the error prints and logs.

    >>> str(InvalidMessageError("must be a string", index=3, field="role"))
    'message 3, field role: must be a string'
    """

    def __init__(self, reason: str, *, index: int | None = None, field: str | None = None, offset: int | None = None):
        field = _printable(field) if isinstance(field, str) else field
        reason = _printable(reason) if isinstance(reason, str) else reason
        self.index = index
        self.field = field
        self.reason = reason
        self.offset = offset
        where = []
        if index is not None:
            where.append(f"message {index}")
        if field is not None:
            where.append(f"field {field}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {reason}" if prefix else reason)


class InvalidRequestError(ContextWindowError, ValueError):
    """A request body or file could not be parsed (not JSON, not UTF-8, unknown shape).

    Attributes:
        offset: byte offset in the request body where the problem is (the first byte
            that is not UTF-8, where the JSON stops being valid, the offending value), when
            known; ``None`` otherwise.

    >>> InvalidRequestError("invalid request body at byte 7: expected value", offset=7).offset
    7
    """

    def __init__(self, *args: object, offset: int | None = None):
        self.offset = offset
        super().__init__(*(_printable(a) if isinstance(a, str) else a for a in args))


class ContextOverflowError(ContextWindowError):
    """A request cannot fit the model's context window even after every allowed trim.

    Raised before the request is sent (second seed; see
    :func:`contextwindow.budget.check_capacity`).

    Attributes:
        tokens: estimated tokens of the request (messages + tool schemas), when known.
        capacity: tokens the model can take as input (context window - output reserve),
            when known.
        over: ``tokens - capacity`` when both are known, else ``None``.

    >>> ContextOverflowError("too big", tokens=130_000, capacity=111_616).over
    18384
    """

    def __init__(self, *args: object, tokens: int | None = None, capacity: int | None = None):
        self.tokens = tokens
        self.capacity = capacity
        self.over = tokens - capacity if tokens is not None and capacity is not None else None
        super().__init__(*args)


class TokenCounterError(ContextWindowError, ValueError):
    """A caller's token counter or tokenizer failed, or returned something that is not a
    token count (an ``int >= 0``).

    Attributes:
        counter: the callable's name, e.g. ``"token_counter count_tokens"``.
        index: position, in the caller's list, of the message being counted; ``None`` for
            a message contextwindow made (breadcrumb, stub result, shortened copy) or a
            text outside any message.
        tool: position, in ``tools``, of the tool definition being counted (its JSON
            text is counted first, before the messages); ``None`` otherwise.
        reason: what went wrong, in words.

    When the callable itself raised, that exception is the ``__cause__``.

    >>> str(TokenCounterError("returned str, expected an int >= 0", counter="tokenizer enc", index=2))
    'tokenizer enc on message 2: returned str, expected an int >= 0'
    """

    def __init__(self, reason: str, *, counter: str, index: int | None = None, tool: int | None = None):
        counter, reason = _printable(counter), _printable(reason)
        self.counter = counter
        self.index = index
        self.tool = tool
        self.reason = reason
        where = f" on message {index}" if index is not None else f" on tools[{tool}]" if tool is not None else ""
        super().__init__(f"{counter}{where}: {reason}")
