"""JSON-like values as the engine reads them.

One place for what every front needs before a value reaches the engine: lone surrogates
replaced (:func:`clean_str`, :func:`clean_value`; the one copy of that rule), numbers a
float cannot hold kept as written (:func:`loads_keeping_numbers`). A leaf module (it
imports nothing from the package), so the adapters, the engine bridge (which imports the
adapters), the file reader, the estimator and the errors can all import it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = ["clean_str", "clean_value", "loads_keeping_numbers"]

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


def clean_value(value: Any) -> Any:
    """:func:`clean_str` on every string of a JSON-like value (dict keys included), as a
    copy; the value itself is not changed. Objects are any ``Mapping`` (written back as
    ``dict``), arrays ``list`` or ``tuple`` (written back as ``list``); other values are
    returned as they are.

    Raises:
        RecursionError: ``value`` nests deeper than the interpreter's recursion limit.

    >>> clean_value({"k\\ud800": ["a\\ud83d\\ude00", 1]}) == {"k\\ufffd": ["a\\U0001f600", 1]}
    True
    """
    if isinstance(value, str):
        return clean_str(value)
    if isinstance(value, Mapping):
        return {clean_str(k) if isinstance(k, str) else k: clean_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_value(v) for v in value]
    return value


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
