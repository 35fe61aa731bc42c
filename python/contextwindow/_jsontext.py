"""JSON-like values as the engine reads them, and a caller's string as errors quote it.

One place for what every front needs before a value reaches the engine: lone surrogates
replaced (:func:`clean_str`, :func:`clean_value`; the one copy of that rule), numbers a
float cannot hold kept as written (:func:`loads_keeping_numbers`), a caller's string
quoted on one line in an error (:func:`quote`). A leaf module (it
imports nothing from the package), so the adapters, the engine bridge (which imports the
adapters), the file reader, the estimator and the errors can all import it.
"""

from __future__ import annotations

import json
import math
import operator
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from enum import Enum
from math import isfinite
from typing import Any

import msgspec

__all__ = [
    "MAX_DEPTH",
    "QUOTE_CHARS",
    "shown",
    "KeyClash",
    "as_int",
    "int_cause",
    "bare",
    "clean_str",
    "clean_value",
    "depth_unbounded",
    "escape_controls",
    "field_path",
    "has_odd_keys",
    "json_fault",
    "json_key",
    "loads_keeping_numbers",
    "nested_deeper",
    "nesting",
    "quote",
]

_SURROGATE_RUN = re.compile("[\ud800-\udfff]+")
_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _clean_run(m: re.Match[str]) -> str:
    run = m.group()
    if len(run) == 1 or _SURROGATE_PAIR.search(run) is None:
        return "\ufffd" * len(run)  # all lone: one step, not one error handler call each
    # a high surrogate followed by a low one is the character they encode
    return run.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def clean_str(s: str) -> str:
    """Replace lone surrogates with U+FFFD (one per surrogate); a high surrogate followed
    by a low one is the character they encode, as a JSON escape pair reads
    (``"\\ud83d\\ude00"``); other text unchanged (DESIGN.md section 7). Linear: a run of
    lone surrogates is replaced in one step (16 million took 4 s through the UTF-16
    decoder's ``replace`` handler, once per surrogate; fresh9 D2).

    >>> clean_str("ab\\ud83d")
    'ab\\ufffd'
    """
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return _SURROGATE_RUN.sub(_clean_run, s)


class KeyClash(Exception):
    """Two keys of one object are the same key once :func:`clean_value` cleaned them
    (``"\\ud800"`` and ``"\\udbff"`` are both ``"\\ufffd"``): keeping one would drop the
    other's value silently. Private: every caller turns it into its own error, naming
    where the object is (see :func:`field_path`).

    Attributes:
        path: keys and indices from the value given to :func:`clean_value` down to the
            object holding the key, outermost first.
        key: the key as cleaned.

    >>> KeyClash("\\ufffd", ["a", 0]).path
    ['a', 0]
    """

    def __init__(self, key: str, path: list[str | int] | None = None) -> None:
        super().__init__(key)
        self.key = key
        self.path: list[str | int] = path if path is not None else []

    def reason(self) -> str:
        """The gateway's words for a repeated key: ``the key "\\ufffd" appears more than
        once`` (``fit_request``/``count_request`` on the same bytes).

        >>> KeyClash("k").reason()
        'the key "k" appears more than once'
        """
        return f"the key {quote(self.key)} appears more than once"


def json_hook(value: Any) -> Any:
    """msgspec's ``enc_hook`` for what :func:`json_fault` takes and msgspec does not
    write itself: a ``str`` subclass (msgspec 0.23 refuses one that is not an enum) as its
    text, not its ``str()`` (``class Path(str)``, a ``(str, Enum)`` member), a ``float`` or
    ``int`` subclass (``numpy.float64``; an ``IntEnum`` msgspec writes already) as its
    number, a ``Mapping`` that is not a ``dict`` (``MappingProxyType``, ``UserDict``) as a
    ``dict``, as ``json.dumps`` and :func:`clean_value` write them.

    Raises:
        TypeError: anything else, in msgspec's words.

    >>> class Price(float): ...
    >>> class Path(str): ...
    >>> ENCODER.encode({"x": Price(2.5), "p": Path("a.txt")})
    b'{"x":2.5,"p":"a.txt"}'
    """
    if isinstance(value, str):
        return str.__str__(value)
    # float.__float__ and int.__int__, not float() and int(): a subclass's own __float__
    # or __int__ is not what json.dumps writes (fresh39 #1)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


#: A JSON encoder that writes what :func:`json_fault` takes (:func:`json_hook`).
ENCODER = msgspec.json.Encoder(enc_hook=json_hook)


def json_key(key: Any) -> Any:
    """The key as JSON writes it: a ``str`` with :func:`clean_str`; any other key msgspec
    takes (an ``int``, a ``float``, an enum, ...) as the string msgspec writes for it
    (``1`` is ``"1"``, ``1.5`` is ``"1.5"``, ``1e20`` is ``"1e20"``); a key msgspec
    refuses (a ``bool``, ``None``, a tuple) as it is, for the encoder to refuse.

    >>> json_key(1), json_key(1.5), json_key("k\\ud800"), json_key(True)
    ('1', '1.5', 'k\\ufffd', True)
    """
    if isinstance(key, str):
        return clean_str(key)
    # a number subclass as its plain number, as json.dumps writes it (not by its own
    # __int__ or __float__; fresh39 #1); an enum msgspec writes by its value
    if isinstance(key, int) and not isinstance(key, (bool, Enum)):
        key = int.__int__(key)
    elif isinstance(key, float) and not isinstance(key, Enum):
        key = float.__float__(key)
    try:
        return next(iter(msgspec.json.decode(msgspec.json.encode({key: None}))))
    except (TypeError, ValueError, msgspec.MsgspecError):
        return key


def has_odd_keys(value: Any) -> bool:
    """Whether an object (a ``Mapping``) inside ``value`` (``list``/``tuple`` arrays,
    ``Mapping`` objects, any depth; walked without recursion) has a key that is not a
    ``str``: only then can two of its keys be one key once written as JSON (``{1: "a",
    "1": "b"}``; fresh14 #11), which :func:`clean_value` then finds.

    >>> has_odd_keys([{"a": {"b": 1}}]), has_odd_keys([{"a": {2: 1}}])
    (False, True)
    """
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        v = pop()
        t = type(v)
        if t is str or t is int or t is float or v is None:
            continue
        if t is list or t is tuple:
            extend(v)
        elif t is dict or isinstance(v, Mapping):
            for k in v:
                if type(k) is not str and not isinstance(k, str):
                    return True
            extend(v.values())
        elif isinstance(v, (list, tuple)):
            extend(v)
    return False


def json_fault(value: Any) -> tuple[list[str | int], str] | None:
    """The first value inside ``value`` (document order; walked without recursion) that
    JSON has no type for, as ``(path, what)``: ``(["a", 1], "a Python bytes")``, or
    ``None``. JSON's types are what ``json.dumps`` writes: ``str``, ``int``, ``float``
    (subclasses too: an ``IntEnum``, ``numpy.float64``), ``bool``, ``None``, ``list``
    and ``tuple`` arrays, ``Mapping`` objects, and ``msgspec.Raw`` (a number kept as
    written). msgspec writes more, in ways the caller never sent: ``bytes``,
    ``bytearray`` and ``memoryview`` as base64 text, a ``set`` as an array, a
    ``Decimal`` or a ``datetime`` as a string; they would be counted so and handed back
    as they were (fresh17b #3). A float that is NaN or infinite has no JSON number
    (``json.dumps`` writes ``NaN``, which is not JSON; msgspec ``null``, which the
    caller never sent; struct18 #3): ``"a float nan"``, ``"a float -inf"``. A key must
    be a string or a number (``None``, a bool or a tuple as a key is named at the object
    holding it, and so is a NaN or infinite float: ``"a float nan as a key"``), and what
    lies deeper than :data:`MAX_DEPTH` is the depth check's.

    >>> json_fault({"a": [1, b"x"]}), json_fault({"a": (1, 2.5, None)})
    ((['a', 1], 'a Python bytes'), None)
    >>> json_fault({"a": [0.5, float("-inf")]})
    (['a', 1], 'a float -inf')
    """
    t = type(value)
    if t is str or t is int or value is None or t is bool or (t is float and isfinite(value)):
        return None  # the common case, no stack
    if _json_only(value):
        return None
    # found: walk again, keeping the path to each value
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    pop, push = stack.pop, stack.append
    while stack:
        v, path = pop()
        t = type(v)
        if t is str or t is int or v is None or t is bool:
            continue
        if isinstance(v, float):
            if not isfinite(v):
                return list(path), f"a float {float.__repr__(v)}"
            continue
        if len(path) > MAX_DEPTH:  # a value that holds itself: the depth check's to name
            continue
        if t is dict or isinstance(v, Mapping):
            items = list(v.items())
            for k, _ in items:
                if type(k) is not str and not _json_key(k):
                    if isinstance(k, float):
                        # NaN or inf: no JSON number, so no key JSON writes for it (msgspec
                        # wrote "nan"; tools19), named as such a value is
                        return list(path), f"a float {float.__repr__(k)} as a key"
                    # msgspec's "Only dicts with str-like or number-like keys are
                    # supported" named neither message nor field (fresh17c #6)
                    return list(path), f"a Python {type(k).__name__} as a key"
            for k, x in reversed(items):  # popped in document order
                push((x, (*path, k)))
        elif t is list or t is tuple or isinstance(v, (list, tuple)):
            for i in range(len(v) - 1, -1, -1):
                push((v[i], (*path, i)))
        elif not isinstance(v, (str, int, float, msgspec.Raw)):
            return list(path), f"a Python {t.__name__}"
    return None


def _json_key(key: Any) -> bool:
    """Whether JSON writes ``key`` as an object key: a string, or a number (written as its
    text, as ``json.dumps`` and msgspec do); ``None``, a bool, a tuple or a NaN or
    infinite float (no JSON number: msgspec writes ``"nan"``, ``json.dumps``
    ``"NaN"``) it does not."""
    if isinstance(key, float):
        return isfinite(key)
    return isinstance(key, (str, int)) and not isinstance(key, bool)


def _json_only(value: Any) -> bool:
    """Whether ``value`` holds JSON's types only (:func:`json_fault`), down to
    :data:`MAX_DEPTH` levels: the fast walk, keeping no path (it runs on every call)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        v, depth = pop()
        t = type(v)
        if t is dict or isinstance(v, Mapping):
            for k in v:
                if type(k) is not str and not _json_key(k):
                    return False
            children: Any = v.values()
        elif t is list or t is tuple:
            children = v
        elif isinstance(v, (list, tuple)):
            children = v
        elif isinstance(v, float):
            if not isfinite(v):  # NaN, inf: no JSON number (a subclass, or the value itself)
                return False
            continue
        elif v is None or isinstance(v, (str, int, msgspec.Raw)):
            continue
        else:
            return False
        if depth > MAX_DEPTH:  # a value that holds itself: the depth check's to name
            continue
        for x in children:
            t = type(x)
            if t is str or t is int or t is bool or x is None or (t is float and isfinite(x)):
                continue
            push((x, depth + 1))
    return True


def clean_value(value: Any) -> Any:
    """:func:`clean_str` on every string of a JSON-like value (dict keys included), as a
    copy; the value itself is not changed. Objects are any ``Mapping`` (written back as
    ``dict``), arrays ``list`` or ``tuple`` (written back as ``list``); other values are
    returned as they are. A key that is not a ``str`` becomes the string JSON writes for
    it (:func:`json_key`: ``1`` is ``"1"``), so ``{1: "a", "1": "b"}`` is two keys that
    are one once written, as two that differ only in lone surrogates are.

    Raises:
        KeyClash: two keys of one object clean to the same key; found in document order,
            an object's values before its keys, as the gateway reads a body (a value that
            is itself an object is read, and checked, before the key that follows it).
        RecursionError: ``value`` nests deeper than the interpreter's recursion limit.

    >>> clean_value({"k\\ud800": ["a\\ud83d\\ude00", 1]}) == {"k\\ufffd": ["a\\U0001f600", 1]}
    True
    """
    if isinstance(value, str):
        return clean_str(value)
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            key = clean_str(k) if isinstance(k, str) else json_key(k)
            try:
                cleaned = clean_value(v)
            except KeyClash as clash:
                clash.path.insert(0, key)
                raise
            if key in out:
                raise KeyClash(key)
            out[key] = cleaned
        return out
    if isinstance(value, (list, tuple)):
        items = []
        for i, v in enumerate(value):
            try:
                items.append(clean_value(v))
            except KeyClash as clash:
                clash.path.insert(0, i)
                raise
        return items
    return value


#: The deepest nesting of objects and arrays the dict path and the CLI take in a message,
#: a tool definition or (the CLI) any other top-level value, counted from it (it is level
#: 1 when it is an object or array; a ``Message`` or part struct counts as an object),
#: whatever ``sys.getrecursionlimit()`` says (fresh14 #10: 2,989 levels after
#: ``sys.setrecursionlimit(3000)``, and a crash at 200,000 after a limit of 1,000,000).
#: At the default recursion limit Python's own stops a little earlier (about 990 levels,
#: less from deep in a caller's stack), as before. The gateway's limit is serde_json's 128
#: from the top of the body.
MAX_DEPTH = 1000


def depth_unbounded() -> bool:
    """Whether a value nested deeper than :data:`MAX_DEPTH` could get past Python's own
    recursion limit, so :func:`nested_deeper` must look: the limit is above
    :data:`MAX_DEPTH`, or (Python 3.12 and later) msgspec's C code is held by a C
    recursion limit of its own instead. At the default limit on 3.10 and 3.11 every
    walk of a value (msgspec, :func:`clean_value`) raises ``RecursionError`` before
    :data:`MAX_DEPTH` levels, safely: nothing to check, nothing to pay."""
    return sys.version_info >= (3, 12) or sys.getrecursionlimit() > MAX_DEPTH


def nested_deeper(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests objects and arrays more than ``limit`` levels deep
    (``value`` is level 1 when it is one): :func:`nesting` up to ``limit + 1``.

    >>> nested_deeper([[[]]], 3), nested_deeper([[[]]], 2), nested_deeper({"a": [1]}, 2)
    (False, True, False)
    """
    return nesting(value, limit + 1) > limit


def nesting(value: Any, cap: int) -> int:
    """Levels of objects and arrays in ``value`` (itself level 1 when it is one; 0 for a
    scalar), counted up to ``cap``: ``Mapping`` objects; ``list``, ``tuple``, ``set`` and
    ``frozenset`` arrays; msgspec structs (their fields). Walked without recursion, depth
    first, stopping at the first value ``cap`` levels down, so a value that holds itself
    is ``cap`` after ``cap`` steps.

    >>> nesting([[[]]], 10), nesting({"a": [1]}, 10), nesting([[[[]]]], 2), nesting("x", 5)
    (3, 2, 2, 0)
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        v, depth = pop()
        t = type(v)
        if t is dict or isinstance(v, Mapping):
            children: Any = v.values()
        elif t is list or t is tuple or isinstance(v, (list, tuple, set, frozenset)):
            children = v
        elif isinstance(v, msgspec.Struct):
            children = [getattr(v, f, None) for f in v.__struct_fields__]
        else:
            continue
        if depth >= cap:
            return cap
        if depth > deepest:
            deepest = depth
        for c in children:
            if type(c) is not str and c is not None:
                push((c, depth + 1))
    return deepest


def cycle_at(value: Any, cap: int = MAX_DEPTH + 1) -> list[str | int] | None:
    """The path (keys, indices and struct fields from ``value``) to the first object or
    array found to hold itself, or ``None``: walked as :func:`nesting` walks (depth
    first, in its order, up to the first value ``cap`` levels down), keeping the path it
    is on, so a cycle on the path that made the value too deep is found, in no more steps
    than :func:`nesting` took to find the depth (a value that holds itself and another
    really nested deeper than ``cap`` is reported as the walk meets them). For the depth
    error only (:func:`too_deep`), never on every call.

    >>> d = {"a": 1}
    >>> d["self"] = d
    >>> cycle_at({"meta": [0, d]}), cycle_at([[[]]]), cycle_at(d)
    (['meta', 1], None, [])
    """
    on_path: dict[int, int] = {}  # id of each object or array on the path: its level
    ids: list[int] = []
    keys: list[str | int] = []  # how each level was reached from the one above (keys[0]: none)
    stack: list[tuple[Any, int, str | int]] = [(value, 1, 0)]
    pop = stack.pop
    while stack:
        v, depth, key = pop()
        t = type(v)
        if t is dict or (t is not list and isinstance(v, Mapping)):
            items: Any = v.items()
        elif t is list or isinstance(v, (tuple, set, frozenset)):
            items = enumerate(v)
        elif isinstance(v, msgspec.Struct):
            items = [(f, getattr(v, f, None)) for f in v.__struct_fields__]
        else:
            continue
        while len(ids) >= depth:  # leave the levels this value is not under
            del on_path[ids.pop()]
            keys.pop()
        first = on_path.get(id(v))
        if first is not None:
            return keys[1 : first + 1]
        if depth >= cap:
            return None
        on_path[id(v)] = len(ids)
        ids.append(id(v))
        keys.append(key)
        # pushed in order, as nesting pushes them: the same path down, the last child first
        stack += [
            (c, depth + 1, k if type(k) is str or type(k) is int else str(k))
            for k, c in items
            if type(c) not in _SCALARS and c is not None
        ]
    return None


#: Types :func:`cycle_at` does not look into.
_SCALARS = frozenset({str, int, float, bool})


def too_deep(value: Any) -> tuple[str, str | None]:
    """The reason and field of the error for ``value`` that nests too deeply: ``holds
    itself (a cycle)`` and the field of the object that does (:func:`cycle_at`; fresh17c
    #10), else ``is nested too deeply`` and no field.

    >>> d = {}
    >>> d["self"] = d
    >>> too_deep({"meta": d}), too_deep([[]])
    (('holds itself (a cycle)', 'meta'), ('is nested too deeply', None))
    """
    path = cycle_at(value)
    if path is None:
        return "is nested too deeply", None
    return "holds itself (a cycle)", field_path(path) or None


#: How many characters of a caller's string an error quotes (:func:`quote`) or names in a
#: field path (:func:`field_path`); the rest is counted, not written (fresh11 N6: a 10 KB
#: role gave a 10 KB one-line error). Rust ``error::QUOTE_CHARS`` is the same.
QUOTE_CHARS = 100


def _bounded(text: str) -> tuple[str, str]:
    """The first :data:`QUOTE_CHARS` characters (code points) of ``text``, and the
    marker that says how many were left out (``... (9,900 more characters)``; ``""``
    when none was). Rust ``error::bounded`` cuts the same."""
    left_out = len(text) - QUOTE_CHARS
    if left_out <= 0:
        return text, ""
    return text[:QUOTE_CHARS], f"... ({left_out:,} more character{'s' if left_out > 1 else ''})"


def check_name_type(value: object, option: str, names: str, *, none: bool = True) -> None:
    """Raise the ``TypeError`` of a name option (a ``format``, a ``provider``) that is not
    a string (nor ``None``, when ``none``): README, Errors, a ``TypeError`` for an object
    of the wrong type (fresh46 #6: ``format=5`` was a ``ValueError``, "unknown format").
    An unknown name is the caller's ``ValueError`` to raise.

    >>> check_name_type(5, "format", "'openai', 'anthropic'")
    Traceback (most recent call last):
    TypeError: format must be a str ('openai', 'anthropic') or None, got int
    """
    if not isinstance(value, str) and not (none and value is None):
        tail = " or None" if none else ""
        raise TypeError(f"{option} must be a str ({names}){tail}, got {type(value).__name__}")


def shown(value: object) -> str:
    """``repr(value)`` for an error that names an option the caller passed (a profile, a
    format, a model), with a string longer than :data:`QUOTE_CHARS` characters cut as
    :func:`quote` cuts one, and any other repr cut the same (fresh12 N1: ``profile=`` of
    10 KB gave a 10 KB error). ``repr`` escapes controls and bidi marks.

    >>> shown("nope"), shown("z" * 103)[-28:], shown(5)
    ("'nope'", "zzzz'... (3 more characters)", '5')
    """
    if isinstance(value, str):
        head, marker = _bounded(value)
        return repr(head) + marker
    head, marker = _bounded(repr(value))
    return head + marker


def as_int(value: object) -> int | None:
    """An integer option as a plain ``int``: any value :func:`operator.index` takes (an
    ``int``, an ``IntEnum``, ``numpy.int64``), never a ``bool``; ``None`` for anything
    else (a float, a string, ``None``, a value whose ``__index__`` raises: the caller
    chains its refusal from that, :func:`int_cause`), which the caller refuses in its own
    words. The
    one reading of every int option (budgets, limits, counts, indices; fresh16a F3:
    ``numpy.int64(100)`` was refused as a budget where a token count took it).

    >>> class Seven:
    ...     def __index__(self) -> int:
    ...         return 7
    >>> as_int(5), as_int(Seven()), as_int(True), as_int(5.0), as_int("5")
    (5, 7, None, None, None)
    """
    if type(value) is int:  # the common case first
        return value
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except Exception as exc:  # a caller's __index__ may raise anything
        if getattr(type(value), "__index__", None) is not None:
            # the value's own __index__ raised (or returned a non-int): refused as any
            # value that is not an integer, its exception kept for int_cause (struct18 #4)
            _INDEX_FAILURE.last = (value, exc)
        elif not isinstance(exc, TypeError):
            raise
        return None


_INDEX_FAILURE = threading.local()


def int_cause(value: object) -> BaseException | None:
    """The exception ``value``'s own ``__index__`` raised when :func:`as_int` last read it
    on this thread (taken: a second call gives ``None``), else ``None``: what the
    caller's refusal of ``value`` is chained from, ``raise ValueError(...) from
    int_cause(value)``, so the caller sees why its integer was not one (struct18 #4: the
    exception went out of the API unchanged, a ``RuntimeError`` from ``fit``, where any
    other bad int is a ``ValueError`` naming the option).

    >>> class Bad:
    ...     def __index__(self) -> int:
    ...         raise RuntimeError("boom")
    >>> bad = Bad()
    >>> as_int(bad), int_cause(bad), int_cause(bad)
    (None, RuntimeError('boom'), None)
    """
    last = getattr(_INDEX_FAILURE, "last", None)
    if last is None or last[0] is not value:
        return None
    _INDEX_FAILURE.last = None
    return last[1]  # type: ignore[no-any-return]


def bare(text: str) -> str:
    """A caller's string printed bare (a tool name or call id in the CLI's tables and
    repair lines): :func:`escape_controls`, cut after :data:`QUOTE_CHARS` characters as
    :func:`quote` cuts a string (fresh12 N2: ``repair`` printed a 300-character id whole
    where ``validate`` cut it).

    >>> bare("call\\x1b[0m"), bare("i" * 102)[-26:]
    ('call\\\\u001b[0m', 'iii... (2 more characters)')
    """
    head, marker = _bounded(text)
    return escape_controls(head) + marker


def field_path(path: Sequence[str | int], base: str = "") -> str:
    """A path of keys and indices as the adapters and the gateway name a field,
    ``content[0].input.q``, below ``base`` (a field already named, or ``""``). A key is
    not quoted; the controls :func:`quote` escapes are escaped in it the same way
    (``a\\u2028b``), so an error naming the path stays on one line, as the gateway
    writes it (Rust ``escape_controls``); a key longer than :data:`QUOTE_CHARS`
    characters is cut as :func:`quote` cuts a string (``kkk... (50 more characters)``).

    >>> field_path(["content", 0, "input", "q"]), field_path(["q\\u2028", 1], "content[0].input")
    ('content[0].input.q', 'content[0].input.q\\\\u2028[1]')
    """
    out = base
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            if isinstance(p, str):
                head, marker = _bounded(clean_str(p))
                key = escape_controls(head) + marker
            else:
                key = str(p)
            out += f".{key}" if out else key
    return out


# C0 controls are escaped by json.dumps itself; these are what it writes as they are
# but a terminal or ``str.splitlines`` takes as control: DEL, the C1 controls (U+0085
# NEXT LINE among them; U+009B is CSI to some terminals), LINE and PARAGRAPH SEPARATOR.
_UNPRINTED = re.compile("[\x7f-\x9f\u2028\u2029]")


def _escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # all that quote() escapes but " and \\
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _escape_control(m: re.Match[str]) -> str:
    return _SHORT.get(m.group()) or _escape(m)


def escape_controls(text: str) -> str:
    """``text`` with the characters :func:`quote` escapes but ``"`` and ``\\`` escaped the
    same way (C0 and C1 controls, DEL, U+2028, U+2029: ``\\n``, ``\\u001b``,
    ``\\u0085``), for a caller's string printed bare: a field path's key, a tool name or
    call id in the CLI's tables, so an escape sequence in one never reaches the terminal
    (fresh11 N2). Rust ``gateway::escape_controls`` writes the same.

    >>> print(escape_controls("ls\\x1b[31m\\u2028x"))
    ls\\u001b[31m\\u2028x
    """
    return _CONTROL.sub(_escape_control, text)


def quote(text: str) -> str:
    """``text`` as a JSON string on one line, to quote a caller's string in an error
    (``unknown role "wizard"``, ``the key "k" appears more than once``): escaped as JSON
    escapes it (``"``, ``\\``, every C0 control: ``\\n``, ``\\t``, ``\\u0000``), and DEL,
    the C1 controls (U+0085 among them), U+2028 and U+2029 as ``\\u007f``, ``\\u0085``,
    ``\\u2028``; every other character as it is, lone surrogates as U+FFFD. The gateway
    (Rust ``error::quote``) writes the same text, so the dict path, the gateway and the
    CLI print one line, the same (fresh9 B5). Only the first :data:`QUOTE_CHARS` (100)
    characters are written, then how many were left out, after the closing quote:
    ``"www..."... (9,900 more characters)`` (fresh11 N6).

    >>> print(quote('a"b\\n\\u2028\\x85\\x7fé'))
    "a\\"b\\n\\u2028\\u0085\\u007fé"
    """
    head, marker = _bounded(clean_str(text))
    return _UNPRINTED.sub(_escape, json.dumps(head, ensure_ascii=False)) + marker


def _keep_float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else msgspec.Raw(text.encode())


def _keep_int(text: str) -> Any:
    try:
        return int(text)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        return msgspec.Raw(text.encode())


def loads_keeping_numbers(text: str | bytes, **kw: Any) -> Any:
    """``json.loads``, except that a number a float cannot hold (``1e400``) or an integer
    with more digits than Python converts (4300 by default) is kept as written, as a
    ``msgspec.Raw`` (which msgspec writes back byte for byte, so it is counted by its
    text and never changed), where msgspec's decoder refuses both ("out of range") and
    ``json.loads`` reads the first as ``inf`` and refuses the second. The gateway keeps
    the same numbers as written (fresh8 N5). ``kw`` goes to ``json.loads``.

    >>> msgspec.json.encode(loads_keeping_numbers("[1e400, 2.5, 7]"))
    b'[1e400,2.5,7]'
    """
    return json.loads(text, parse_float=_keep_float, parse_int=_keep_int, **kw)
