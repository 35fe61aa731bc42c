"""Tool-output budgets and middle pruning, without any LLM (issue 5, items 2 and 3).

Three policies an agent loop runs on its history, cheapest first:

* :func:`budget_tool_results` (third seed, layer 1, before every model call): a tool result
  over ``max_result_share`` of the context window is cut at line boundaries to head +
  tail with a marker; when the whole input passes ``max_total_share`` of the window, the
  oldest results of output-heavy tools are cleared; and any message over
  ``max_message_chars`` characters is cut (first seed's 50,000-character cap: a tool
  result's text to head + tail at line boundaries, any other text to its head). A
  text-action agent's observation (user text starting with ``[Tool results]``) is tool
  output to both cuts, its prefix kept.
* :func:`micro_compact`: clears every tool result but the newest ``keep_recent``.
* :func:`prune_middle` (third seed, layer 2): keeps the preamble, the first user message,
  pinned messages, the current request and the last few messages, and replaces the rest
  with one notice ``[context compacted: N earlier messages removed]``.

All three accept OpenAI dicts, Anthropic dicts or :class:`~contextwindow.Message` structs,
return the same shape in a :class:`~contextwindow.TrimResult` with a
:class:`~contextwindow.FitReport`, never mutate their input, and return a new list of the
input's own message objects, in order (``reason=None``), when nothing needs doing. A
cleared or cut tool result is still a result: it keeps its call id and its place, so
pairing is untouched. Synthetic text (markers, the notice) is deterministic: it is built
only from what it replaces.

Units: ``context_window``, budgets and shares are tokens of the chosen ``profile``
(default ``conservative``); ``max_message_chars`` and every "characters" count are code
points.

>>> msgs = [{"role": "user", "content": "list the files"},
...         {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
...             "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]},
...         {"role": "tool", "tool_call_id": "c1", "content": "notes.txt\\n" * 20},
...         {"role": "assistant", "content": "Two files."}]
>>> micro_compact(msgs, keep_recent=0).messages[2]["content"]
'[tool result cleared: 200 characters of bash output]'
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import msgspec

from . import _engine
from . import _reference as ref
from ._engine import nesting_errors
from ._jsontext import as_int, int_cause, shown
from .budget import token_budget
from .estimate import resolve_profile
from .estimator import caller_cost, cost_source, on_raw_costs
from .messages import Message, Part, Role, TextPart, ToolCall, ToolResult
from .report import Fate, FitReport, PairChange, Segmentation, TrimResult

__all__ = [
    "OUTPUT_HEAVY_TOOLS",
    "WRITE_TOOLS",
    "RESULT_CUT_MARKER",
    "RESULT_CLEARED_MARKER",
    "MESSAGE_CAP_MARKER",
    "COMPACTION_NOTICE",
    "budget_tool_results",
    "micro_compact",
    "prune_middle",
]

#: Tools whose results are bulky and can be re-fetched: their oldest results are cleared
#: first when the input passes ``max_total_share`` (third seed, layer 1 whitelist: Read File,
#: Bash, Grep, Glob, Search Files, Web Fetch; plus the names the corpus' agents use for
#: the same jobs). Matched case-insensitively against the name of the call a result answers,
#: or the last segment of a namespaced one (``mcp__filesystem__read_file``, ``functions.read_file``).
OUTPUT_HEAVY_TOOLS: frozenset[str] = frozenset(
    {
        "read",
        "read_file",
        "readfile",
        "view",
        "view_file",
        "open",
        "cat",
        "bash",
        "bashoutput",
        "shell",
        "run_shell_command",
        "execute_command",
        "run_terminal_cmd",
        "terminal",
        "grep",
        "glob",
        "ls",
        "list_files",
        "list_dir",
        "list_directory",
        "find",
        "find_file",
        "search",
        "search_files",
        "search_file",
        "search_dir",
        "web_fetch",
        "webfetch",
        "fetch",
        "web_search",
        "websearch",
        "notebookread",
    }
)

#: Tools whose results are never cleared: their output is the record later steps rely on
#: (third seed: "Write/Create tool output is always kept"). The third seed lists Edit among
#: the output-heavy tools; here edits count as writes, as issue 5 asks. Case-insensitive.
WRITE_TOOLS: frozenset[str] = frozenset(
    {
        "write",
        "write_file",
        "create",
        "create_file",
        "edit",
        "edit_file",
        "multiedit",
        "multi_edit",
        "insert",
        "str_replace",
        "str_replace_editor",
        "str_replace_based_edit_tool",
        "apply_patch",
        "notebookedit",
        "todowrite",
    }
)

#: Put between the head and the tail of a cut tool result (by the share rule or the
#: character cap): characters (code points) and whole lines (a line and the break that
#: ends it; the text's last line may have none) taken out, written by
#: :func:`cut_marker`: ``(1 line)`` for one, and no line count when no whole line was
#: removed (the cut fell inside one line, or inside two neighbouring ones).
RESULT_CUT_MARKER = "[... {chars} characters ({lines} lines) removed ...]"
#: :data:`RESULT_CUT_MARKER` when no whole line was removed.
RESULT_CUT_MARKER_NO_LINES = "[... {chars} characters removed ...]"
#: Replaces the whole content of a cleared tool result (``chars``: characters of text the
#: result held when it was cleared; non-text parts are named when there were any).
RESULT_CLEARED_MARKER = "[tool result cleared: {chars} characters of {tool} output]"
#: Ends a text cut by the per-message character cap (first seed: "[Truncated]" suffix);
#: a tool result's text, or a text-action observation's, is cut head + tail with
#: :data:`RESULT_CUT_MARKER` instead.
MESSAGE_CAP_MARKER = "\n[Truncated: {chars} characters removed]"
#: The one notice that stands for the messages :func:`prune_middle` removed (third seed).
COMPACTION_NOTICE = "[context compacted: {n} earlier messages removed]"

_CAP_ONLY_RE = re.compile(r"\n\[Truncated: \d+ characters removed\]")
_CUT_ONLY_RE = re.compile(r"\[\.\.\. \d+ characters(?: \(\d+ lines?\))? removed \.\.\.\]")
_CLEARED_RE = re.compile(r"\[tool result cleared: \d+ characters(?: and \d+ non-text parts?)? of .* output\]", re.S)
_SEG = msgspec.json.Decoder(Segmentation)
_NOTICE_RE = re.compile(r"\[context compacted: (\d+) earlier messages removed\]")

# --------------------------------------------------------------------------- options


# A number option (a token budget, a count, a share) given anything but a number in
# range, a string or a bool as much as a negative number, is a ValueError naming it, as
# fit(m, "10") is (fit.py, fresh7 N13); an option that is an object or a collection of
# the wrong type is a TypeError.


def _count(name: str, value: Any, *, minimum: int, allow_none: bool = False) -> int | None:
    """A count option (tokens, characters, messages): an int >= ``minimum``, or ``None``
    when ``allow_none``."""
    if value is None and allow_none:
        return None
    n = as_int(value)
    if n is None or n < minimum:
        also = " or None" if allow_none else ""
        raise ValueError(f"{name} must be an int >= {minimum}{also}, got {shown(value)}") from int_cause(value)
    return n


def _share(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a number in (0, 1] or None, got {shown(value)}")
    return float(value)


def _names(tools: Any, name: str) -> frozenset[str]:
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Iterable):
        raise TypeError(f"{name} must be a collection of tool names, got {type(tools).__name__}")
    out = set()
    for t in tools:
        if not isinstance(t, str):
            raise TypeError(f"{name} must hold tool names (str), got {type(t).__name__}")
        out.add(t.casefold())
    return frozenset(out)


def _in_names(tool: str, names: frozenset[str]) -> bool:
    """Whether the tool ``tool`` is one of ``names`` (casefolded): by its whole name, or by
    the last segment of a namespaced one, after ``__`` (MCP's ``mcp__server__read_file``,
    as Claude Code names them) or ``.`` (``functions.read_file``): fresh55 #6, the
    corpus's own agent's MCP reads were never cleared."""
    t = tool.casefold()
    if t in names:
        return True
    last = t.rsplit("__", 1)[-1].rsplit(".", 1)[-1]
    return last != t and last in names


def _pinned_type(pinned: Any) -> set[int]:
    """``pinned`` as a set, checked for type: a collection of the wrong type, or an item
    of the wrong type in it, is a TypeError (README, Errors; fresh11 N6), as in
    :class:`~contextwindow.fit.FitPolicy`; the range is checked by :func:`_pinned_range`."""
    if isinstance(pinned, (str, bytes, Mapping)) or not isinstance(pinned, Iterable):
        raise TypeError(f"pinned must be a collection of message indices, got {type(pinned).__name__}")
    out = set()
    for i in pinned:
        k = as_int(i)
        if k is None:
            raise TypeError(f"pinned must hold message indices (int), got {type(i).__name__}") from int_cause(i)
        out.add(k)
    return out


def _pinned_range(pinned: set[int], n: int) -> set[int]:
    for i in sorted(pinned):
        if not 0 <= i < n:
            where = f"0..{n - 1}" if n else "there are no messages"
            raise ValueError(f"pinned index {shown(i)} is not a message index ({where})")
    return pinned


def _budget_tokens(budget: Any) -> int | None:
    """``None``, an ``int >= 0``, or a ``Budget`` (anything with an int ``usable``), read
    as ``fit`` reads it (:func:`~contextwindow.budget.token_budget`)."""
    return token_budget(budget, allow_none=True)


# --------------------------------------------------------------------------- costs and text


def _costs(msgs: list[Message], profile: str) -> list[int]:
    """Per-message tokens from the Rust estimator (additive over messages)."""
    return _engine.message_costs(msgs, profile)


def _segment(payload: bytes, msgs: list[Message] | None = None) -> Segmentation:
    """Preamble, turns and tool units from the Rust engine (``_reference.segment``'s rules)
    of ``payload``; with ``msgs`` (the messages it encodes), once per conversation in the
    guard's steps (``_engine.shaped``: the answer reads only ``turn_shape``)."""
    if msgs is None:
        return _SEG.decode(_engine.native.segment_turns(payload))
    return _engine.shaped(
        "segment", msgs, _engine.turn_shape, lambda: _SEG.decode(_engine.native.segment_turns(payload))
    )


def _request(msgs: list[Message], real_req: int | None, provider: str) -> int | None:
    """The current request of ``msgs`` by input index, as trim_turns, fit and
    prune_middle take it (README Tool pairs, ``_reference.current_request``): the last
    real user message (``real_req``, the input's segmentation), or a later message that
    is one once the tool pairs are repaired: a user message holding an orphan result
    beside what the user wrote is a carrier as it is, and the request once repair drops
    the orphan (small20: the cap cut it). Repairs only when a message after ``real_req``
    holds results beside other content (a pure-Python repair, so not on every call)."""
    start = 0 if real_req is None else real_req + 1
    mixed = (
        any(isinstance(q, ToolResult) for q in m.content) and any(not isinstance(q, ToolResult) for q in m.content)
        for m in msgs[start:]
    )
    if not any(mixed):
        return real_req
    work, _ = ref.repair(msgs, provider, "stub")
    srcs = [it.src for it in work]
    last = ref.last_real_user([it.msg(msgs) for it in work])
    req = ref.current_request(msgs, srcs, last)
    src = None if req is None else srcs[req]
    return real_req if src is None or (real_req is not None and src < real_req) else src


def _cost(m: Message, profile: str) -> int:
    return _costs([m], profile)[0]


def _change(role: Role, old: Part, new: Part, profile: str) -> int:
    """Tokens a message of ``role`` gains when its part ``old`` becomes ``new`` (negative:
    it saves), from the two parts alone: a message costs its own tokens plus the sum of
    its parts', so what else it holds does not matter, and a message of many tool results
    is not counted whole once per result (a 2,000-result message: 6.2 s -> 0.1 s)."""
    was, now = _costs([Message(role=role, content=[old]), Message(role=role, content=[new])], profile)
    return now - was


def _result_chars(r: ToolResult) -> int:
    return sum(len(q.text) for q in r.content if isinstance(q, TextPart))


def _named_chars(r: ToolResult) -> int:
    """Characters of ``r``'s text, each cut marker in it (``ref._markers``) counted as the
    characters it names and the line break a cut puts after one not at all: the output
    the result stands for, to the character when a line-boundary cut made it (a trimming
    cut's marker adds a line break before it too, counted here as one character).

    >>> cut = "a\\n[... 20 characters (2 lines) removed ...]\\nb"
    >>> _named_chars(ToolResult(call_id="c", content=[TextPart(text=cut)]))
    23
    """
    total = 0
    for q in r.content:
        if isinstance(q, TextPart):
            t = q.text
            total += ref.shown_removed(t, 0, len(t)) - sum(1 for _, b, _ in ref._markers(t) if t[b : b + 1] == "\n")
    return total


def _non_text(r: ToolResult) -> int:
    return sum(1 for q in r.content if not isinstance(q, TextPart))


def _is_cleared(r: ToolResult) -> bool:
    return len(r.content) == 1 and isinstance(r.content[0], TextPart) and bool(_CLEARED_RE.fullmatch(r.content[0].text))


def _cleared_text(r: ToolResult, tool: str | None, chars: int | None = None) -> str:
    """The text a cleared result holds: ``chars`` (default: ``r``'s) characters of text
    and its non-text parts."""
    chars = _result_chars(r) if chars is None else chars
    other = _non_text(r)
    parts = "part" if other == 1 else "parts"  # "1 non-text parts" (fresh56 #6)
    count = f"{chars} characters and {other} non-text {parts}" if other else f"{chars} characters"
    return f"[tool result cleared: {count} of {tool or 'tool'} output]"


def _clear(r: ToolResult, tool: str | None, chars: int | None = None) -> ToolResult:
    """``r`` cleared; ``chars``: the characters its marker names (default: ``r``'s)."""
    kind = r.content_kind if r.content_kind in ("text", "parts", None) else "parts"
    return msgspec.structs.replace(r, content=[TextPart(text=_cleared_text(r, tool, chars))], content_kind=kind)


def cut_marker(chars: int, lines: int) -> str:
    """The marker of a tool result cut head + tail: ``chars`` characters and ``lines``
    whole lines removed (:data:`RESULT_CUT_MARKER`; ``1 line``; without a line count
    when ``lines`` is 0).

    >>> cut_marker(18, 3)
    '[... 18 characters (3 lines) removed ...]'
    >>> cut_marker(5, 1), cut_marker(80, 0)
    ('[... 5 characters (1 line) removed ...]', '[... 80 characters removed ...]')
    """
    if lines == 0:
        return RESULT_CUT_MARKER_NO_LINES.format(chars=chars)
    return RESULT_CUT_MARKER.format(chars=chars, lines=lines).replace("(1 lines)", "(1 line)")


def _whole_lines(text: str, h: int, q: int) -> int:
    """How many whole lines of ``text`` lie in ``text[h:q]``: a line with the break that
    ends it, or the text's last line (which has none) when the cut reaches the end. A
    line the cut starts or ends inside is not counted (fresh15 #6: a cut inside one line
    said "(1 lines) removed")."""
    gone = text[h:q]
    if not gone:
        return 0
    at_line_start = h == 0 or text[h - 1] == "\n"
    breaks = gone.count("\n")
    whole = breaks - (0 if at_line_start or breaks == 0 else 1)
    if q == len(text) and not gone.endswith("\n") and (breaks > 0 or at_line_start):
        whole += 1  # the last line, which no break ends, removed from its start
    return whole


def _cut_lines(text: str, keep: int, floor: int = 0) -> tuple[str, int]:
    """Keep about ``keep`` characters after the first ``floor``, which always stay (0, or
    the ``[Tool results]`` prefix of an observation): head + :data:`RESULT_CUT_MARKER` +
    tail.

    Each side is cut where a line starts; when the nearest line start would keep less
    than half of that side (very long lines), it is cut on a grapheme boundary instead
    (``_reference._bad_cut``: never inside a code point sequence, a ZWJ emoji, a flag or
    ``\\r\\n``; the head never ends before ``floor``, as in ``_reference.cut_points``).
    Returns the new text and the characters removed.
    """
    n = len(text)
    if floor + keep >= n:
        return text, 0
    head_allow, tail_allow = floor + (keep + 1) // 2, keep // 2
    h = text.rfind("\n", max(0, floor - 1), head_allow) + 1
    if h - floor < (head_allow - floor) // 2:
        h = head_allow
        while h > floor and ref._bad_cut(text, h):
            h -= 1
        while h < n and ref._bad_cut(text, h):  # only at the floor (never at 0)
            h += 1
    t0 = n - tail_allow
    j = text.find("\n", t0 - 1)
    q = n if j == -1 else j + 1
    if n - q < tail_allow // 2:
        q = t0
        while q < n and ref._bad_cut(text, q):
            q += 1
    q = max(q, h)
    if q == h:
        return text, 0
    # a cut marker the text holds (an earlier call's, or trimming's) is never split: the
    # cut takes it whole and names its count plus what else it removes, as
    # `_reference.cut_points` does (fresh28 #1-#3: a cut of a cut named only its own
    # removal, or cut through the first marker)
    for a, b, _ in ref._markers(text):
        if a < h < b:
            h = a if a >= floor and not ref._bad_cut(text, a) else b
            while h < n and ref._bad_cut(text, h):
                h += 1
        if a < q < b:
            q = b
            while q < n and ref._bad_cut(text, q):
                q += 1
    q = max(q, h)
    if q == h:
        return text, 0
    head, tail = text[:h], text[q:]
    sep = "" if not head or head.endswith("\n") else "\n"
    # the lines a marker taken whole names count too, and its own line does not
    lines = _whole_lines(text, h, q)
    for m in ref._MARKER_RE.finditer(text, h, q):
        lines += int(m.group(2) or 0) - (m.end() < q and text[m.end()] == "\n")
    mark = cut_marker(ref.shown_removed(text, h, q), lines)
    return head + sep + mark + ("\n" + tail if tail else ""), q - h


def _cut_lines_to(text: str, allowed: int, floor: int = 0) -> tuple[str, int, int]:
    """``text`` cut by :func:`_cut_lines` (head + tail at line boundaries, one
    :data:`RESULT_CUT_MARKER`) to at most ``allowed`` characters, marker included, keeping
    as much as that allows: the character cap's cut of a tool result, whose end (a log's
    last lines, where the error is) matters as much as its start. The first ``floor``
    characters always stay (an observation's ``[Tool results]`` prefix). Returns the text,
    the characters removed (``0``: left as is, when even the marker alone would not be
    shorter) and the ``keep`` passed to :func:`_cut_lines` (rule 2 cuts the same text
    again with a ``keep`` no larger, so the two rules never stack two markers)."""
    n = len(text)
    # head + tail hold at most `keep` characters; the marker's numbers are at most n plus
    # what the markers the text holds name (a cut that takes one names its count too)
    # and the line count, and a line break may stand on each side of it
    named = sum(c for _, _, c in ref._markers(text))
    widest = len(cut_marker(n + named, text.count("\n") + 1)) + 2
    keep = max(0, allowed - widest - floor)
    out, gone = _cut_lines(text, keep, floor)
    for _ in range(4):  # use what that bound left over, while it still keeps more
        slack = allowed - len(out)
        if slack <= 0:
            break
        wider, less = _cut_lines(text, keep + slack, floor)
        if len(wider) > allowed or less >= gone:
            break
        keep, out, gone = keep + slack, wider, less
    if gone == 0 or len(out) >= n:
        return text, 0, n
    return out, gone, keep


def _floor(text: str) -> int:
    """Characters of a text-action observation's text that always stay: its
    ``[Tool results]`` prefix (as ``_reference.trim_turns`` keeps it), with whatever a cut
    may not separate from it (a combining mark on its ``]``: the cut's head ends after
    it, so :func:`_cut_only` must look after it too, or a second pass cut the marker
    again; a hypothesis example, ``"[Tool results]\u0301" + ".\n" * 50``), else none."""
    if not text.startswith(ref.TOOL_RESULTS_PREFIX):
        return 0
    floor = len(ref.TOOL_RESULTS_PREFIX)
    while floor < len(text) and ref._bad_cut(text, floor):
        floor += 1
    return floor


def _text_lines(text: str) -> int:
    """The lines a cut of the whole of ``text`` removes, as :func:`_cut_lines` names them:
    its whole lines, the lines each marker in it names, less a marker's own line."""
    n = len(text)
    lines = _whole_lines(text, 0, n)
    for m in ref._MARKER_RE.finditer(text):
        lines += int(m.group(2) or 0) - (m.end() < n and text[m.end()] == "\n")
    return lines


def _cut_only(text: str, floor: int = 0) -> bool:
    """``text`` is already cut to its marker alone (after its first ``floor``
    characters, and the line break :func:`_cut_lines` puts after them)."""
    rest = text[floor:]
    if floor and rest.startswith("\n"):
        rest = rest[1:]
    return bool(_CUT_ONLY_RE.fullmatch(rest))


def _cap_level(lengths: list[int], cap: int) -> int:
    """The largest ``level`` with ``sum(min(n, level) for n in lengths) <= cap``: the
    character cap's common length, to which a message's texts are cut at most (``0``
    when even that is over; ``max(lengths)`` when nothing needs cutting).

    >>> _cap_level([30, 30], 20), _cap_level([30, 5], 20), _cap_level([10], 50)
    (10, 15, 10)
    """
    lo, hi = 0, max(lengths, default=0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(n, mid) for n in lengths) <= cap:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _cap_text(text: str, allowed: int) -> tuple[str, int]:
    """``text`` cut to at most ``allowed`` characters, marker included: the head, cut on a
    grapheme boundary, then :data:`MESSAGE_CAP_MARKER`. Returns the text and the
    characters removed (``0``: left as is, when even the marker alone would not be shorter)."""
    n = len(text)
    keep = allowed
    while True:
        head = max(0, keep - len(MESSAGE_CAP_MARKER.format(chars=n - max(0, keep))))
        while head > 0 and ref._bad_cut(text, head):
            head -= 1
        out = text[:head] + MESSAGE_CAP_MARKER.format(chars=n - head)
        if len(out) <= allowed or head == 0:
            break
        keep -= len(out) - allowed
    if len(out) >= n:
        return text, 0
    return out, n - head


def _text_slots(m: Message) -> list[tuple[int, int | None]]:
    """Where the message's text sits: ``(part, None)`` for a text part, ``(part, inner)`` for
    a text part inside a tool result."""
    slots: list[tuple[int, int | None]] = []
    for p, part in enumerate(m.content):
        if isinstance(part, TextPart):
            slots.append((p, None))
        elif isinstance(part, ToolResult):
            slots.extend((p, q) for q, inner in enumerate(part.content) if isinstance(inner, TextPart))
    return slots


def _slot_text(m: Message, slot: tuple[int, int | None]) -> str:
    p, q = slot
    part = m.content[p]
    if q is None:
        return part.text  # type: ignore[union-attr]
    return part.content[q].text  # type: ignore[union-attr]


def _text_chars(m: Message) -> int:
    """Characters of the message's text, tool results' text included (what the cap counts):
    the texts of :func:`_text_slots`, summed in one walk (it runs on every message)."""
    total = 0
    for part in m.content:
        if isinstance(part, TextPart):
            total += len(part.text)
        elif isinstance(part, ToolResult):
            for inner in part.content:
                if isinstance(inner, TextPart):
                    total += len(inner.text)
    return total


def _set_slot(m: Message, slot: tuple[int, int | None], text: str) -> Message:
    return ref._with_text(m, slot[0], slot[1], text)


def _set_slots(m: Message, texts: dict[tuple[int, int | None], str]) -> Message:
    """``m`` with the text of every slot in ``texts`` replaced, each part's inner parts
    copied once."""
    if not texts:
        return m
    content = list(m.content)
    inner: dict[int, list[Any]] = {}
    for (p, q), text in texts.items():
        if q is None:
            content[p] = msgspec.structs.replace(content[p], text=text)
        else:
            if p not in inner:
                inner[p] = list(content[p].content)  # type: ignore[union-attr]
            inner[p][q] = msgspec.structs.replace(inner[p][q], text=text)
    for p, parts in inner.items():
        content[p] = msgspec.structs.replace(content[p], content=parts)
    return msgspec.structs.replace(m, content=content)


# --------------------------------------------------------------------------- reports


def _fates(n: int) -> list[dict[str, Any]]:
    return [{"index": i, "fate": "kept", "rule": "fits", "chars_removed": 0} for i in range(n)]


def _kept_fates(n: int) -> list[Fate]:
    """The fates of ``n`` messages kept as they were (rule ``fits``), as a new list; the
    (frozen) ``Fate`` structs themselves are made once per :func:`_engine.reuse_conversions`
    scope (the guard's steps report on one conversation)."""
    made: list[Fate] = _engine.scoped("kept_fates", list)
    for i in range(len(made), n):
        made.append(Fate(index=i, fate="kept", rule="fits", chars_removed=0))
    return made[:n]


def _report(
    *,
    tokens_before: int,
    tokens_after: int,
    budget: int | None,
    reason: str | None,
    turns: tuple[int, int],
    fates: list[dict[str, Any]] | list[Fate],
    inserted: int = 0,
    repairs: list[PairChange] | None = None,
) -> FitReport:
    """The report; ``fates``: one per input message, as dicts (``Fate``'s fields) or
    ``Fate`` structs."""
    if fates and type(fates[0]) is not Fate:
        fates = [Fate(**f) for f in fates]  # type: ignore[arg-type]
    return FitReport(
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        budget=budget,
        fits=budget is None or tokens_after <= budget,
        reason=reason,
        turns_before=turns[0],
        kept_turns=turns[1],
        dropped_turns=turns[0] - turns[1],
        dropped_messages=sum(f.fate == "dropped" for f in fates),  # type: ignore[union-attr]
        truncated_messages=sum(f.fate == "truncated" for f in fates),  # type: ignore[union-attr]
        inserted_messages=inserted,
        breadcrumb=False,
        repairs=repairs or [],
        fates=fates,  # type: ignore[arg-type]
    )


def _tool_names(msgs: list[Message]) -> list[list[str | None]]:
    """For each part of each message: the name of the call a tool result answers (the
    nearest preceding call with its id), else ``None``."""
    return _named_results(msgs)[0]


def _named_results(msgs: list[Message]) -> tuple[list[list[str | None]], list[int]]:
    """:func:`_tool_names`, and the indices of the messages holding a result it names (the
    only ones clearing can change), in order. Worked out once per conversation in the
    guard's steps (``_engine.shaped``: the answer reads only ``call_shape``)."""
    return _engine.shaped("tool_names", msgs, _engine.call_shape, lambda: _names_of_calls(msgs))


def _names_of_calls(msgs: list[Message]) -> tuple[list[list[str | None]], list[int]]:
    results, _ = _engine.resolved(msgs)
    out: list[list[str | None]] = []
    rows: list[int] = []
    for i, row in enumerate(results):
        if not any(row):  # answers no call (most messages): no name
            out.append([None] * len(row))
            continue
        names: list[str | None] = []
        for p, c in enumerate(row):
            if c is not None and isinstance(msgs[i].content[p], ToolResult):
                call = msgs[c[0]].content[c[1]]
                names.append(call.name if isinstance(call, ToolCall) else None)
            else:
                names.append(None)
        out.append(names)
        if any(n is not None for n in names):
            rows.append(i)
    return out, rows


# --------------------------------------------------------------------------- layer 1


@nesting_errors()
def budget_tool_results(
    messages: Any,
    context_window: int,
    *,
    profile: str | None = None,
    max_result_share: float | None = 0.5,
    max_total_share: float | None = 0.75,
    output_heavy_tools: Iterable[str] = OUTPUT_HEAVY_TOOLS,
    protected_tools: Iterable[str] = WRITE_TOOLS,
    max_message_chars: int | None = 50_000,
    pinned: Iterable[int] = (),
    keep_recent: int | None = None,
    format: str | None = None,
) -> TrimResult[Any]:
    """Keep tool output within its share of the context window (run before every call).

    Three rules, in this order (third seed, layer 1; first seed, ``max_message_chars``):

    1. **Character cap.** A message whose text (its text parts and the text of its tool
       results) is over ``max_message_chars`` characters has its largest texts cut until
       it is at most that many characters, markers included: the text of a tool result
       to head + tail at line boundaries with ``[... N characters (L lines) removed
       ...]`` in between (L: whole lines; ``(1 line)``; no line count when the cut
       falls inside a line), as rule 2 cuts (the end of a log, where the error is, stays),
       and so the text of a text-action observation (a user message whose text starts
       with ``[Tool results]``, ``_reference.is_observation``: a text-action agent's tool
       output), its ``[Tool results]`` prefix kept; any other text to its head plus
       ``"\\n[Truncated: N characters removed]"``.
       Pinned messages, the preamble and the current request (the last real user
       message, or a later one holding an orphan result beside its text, which is the
       request once repair drops the orphan, as :func:`~contextwindow.trim_turns` takes
       it) are never cut. Fate rule ``message_char_cap``.
    2. **One result over its share.** A tool result whose tokens (the result as a message
       of its own, per-message overhead included) exceed ``max_result_share`` x
       ``context_window`` is cut to head + tail at line boundaries (grapheme boundaries
       when lines are very long) with ``[... N characters (L lines) removed ...]`` in
       between, keeping as much as still fits the share. A text rule 1 cut is cut again
       from its original, keeping no more than rule 1 kept: one marker, the real tail.
       A text-action observation's text over the share (the text alone as a message of
       its own) is cut the same way, its ``[Tool results]`` prefix kept.
       Applies in every turn; not to pinned messages. Fate rule ``tool_result_cut``.
    3. **Total over its share.** While the conversation's tokens exceed
       ``max_total_share`` x ``context_window``, the oldest results of output-heavy tools
       (the call's name, case-insensitive, or the last segment of a namespaced one such
       as ``mcp__filesystem__read_file``, in ``output_heavy_tools`` and not in
       ``protected_tools``) are replaced by ``[tool result cleared: N characters of
       <tool> output]``, never in the current turn (the turn of the last real user
       message, :func:`~contextwindow.segment_turns`), never in pinned messages, never a
       result already cleared, and only when clearing saves tokens. Fate rule
       ``tool_result_cleared``. With ``keep_recent=N`` the newest ``N`` tool results are
       protected instead of the current turn (:func:`micro_compact`'s rule): an agent
       loop that runs as one long turn can then have its old output cleared too.

    A cut or cleared result keeps its call id, error flag and place: pairing is untouched
    (this function removes no message and repairs none; ``validate`` gives the same
    answer before and after). ``None`` for a share or for ``max_message_chars`` turns
    that rule off.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        context_window: the model's context window, tokens (> 0).
        profile: built-in profile for every token count (``None``: ``conservative``).
        max_result_share: largest share of the window one tool result may take, (0, 1].
        max_total_share: share of the window above which old results are cleared, (0, 1].
        output_heavy_tools: tool names whose old results may be cleared.
        protected_tools: tool names whose results are never cleared (wins over the above).
        max_message_chars: per-message character cap (code points), ``None`` for none.
        pinned: input indices to treat as pinned (dict input has no ``pinned`` field;
            as ``FitPolicy.pinned``), added to ``Message.pinned``.
        keep_recent: rule 3 protects the newest this many tool results instead of the
            current turn; ``None`` (the default) protects the current turn.
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.

    Returns:
        ``TrimResult(messages, report)`` in the caller's shape. ``report.budget`` is the
        total threshold ``floor(max_total_share * context_window)`` (the window when that
        rule is off); ``report.reason`` is ``tool_result_budget`` when a result was cut or
        cleared, ``message_char_cap`` when only the character cap applied, ``None`` when
        nothing changed (the output is then the input, same objects).

    Raises:
        InvalidMessageError: a message is malformed.
        ValueError: unknown profile, a ``pinned`` index that is not a message index, or
            a number option that is not a number in range, whatever its type (a string
            or a bool as much as a negative number, as for ``fit``'s budget):
            ``context_window`` not an int >= 1, a share not a number in (0, 1] or None,
            ``max_message_chars`` not an int >= 1 or None, ``keep_recent`` not an int
            >= 0 or None.
        TypeError: a collection option of the wrong type (a bare string for a tool list,
            a tool name that is not a string, ``pinned`` not a collection of ints).

    >>> msgs = [{"role": "user", "content": "build it"},
    ...         {"role": "assistant", "content": None, "tool_calls": [{"id": "b1", "type": "function",
    ...             "function": {"name": "bash", "arguments": "{}"}}]},
    ...         {"role": "tool", "tool_call_id": "b1", "content": "ok\\n" * 4000}]
    >>> r = budget_tool_results(msgs, 2000, profile="fim")   # 12,000 characters: ~3,000 tokens
    >>> r.report.reason, r.report.fates[2].rule, r.messages[2]["content"][:14]
    ('tool_result_budget', 'tool_result_cut', 'ok\\nok\\nok\\nok\\nok')
    """
    return _budget_tool_results(
        messages,
        context_window,
        profile=profile,
        max_result_share=max_result_share,
        max_total_share=max_total_share,
        output_heavy_tools=output_heavy_tools,
        protected_tools=protected_tools,
        max_message_chars=max_message_chars,
        pinned=pinned,
        keep_recent=keep_recent,
        format=format,
    )[0]


class _Tally(msgspec.Struct):
    """What each rule of :func:`budget_tool_results` did, by input index: characters cut
    per message by the cap, per ``(message, part)`` tool result cut or cleared. One
    message can hold several results (an Anthropic carrier), so its one Fate cannot say."""

    capped: dict[int, int] = {}
    cut: dict[tuple[int, int], int] = {}
    cleared: dict[tuple[int, int], int] = {}


def _budget_tool_results(
    messages: Any,
    context_window: int,
    *,
    profile: str | None,
    max_result_share: float | None,
    max_total_share: float | None,
    output_heavy_tools: Iterable[str],
    protected_tools: Iterable[str],
    max_message_chars: int | None,
    pinned: Iterable[int],
    format: str | None,
    keep_recent: int | None = None,
) -> tuple[TrimResult[Any], _Tally]:
    """:func:`budget_tool_results` and its :class:`_Tally` (for the guard's events)."""
    name = resolve_profile(profile)
    window = _count("context_window", context_window, minimum=1)
    assert window is not None
    result_share = _share(max_result_share, "max_result_share")
    total_share = _share(max_total_share, "max_total_share")
    heavy = _names(output_heavy_tools, "output_heavy_tools")
    protected = _names(protected_tools, "protected_tools")
    cap = _count("max_message_chars", max_message_chars, allow_none=True, minimum=1)
    recent = _count("keep_recent", keep_recent, allow_none=True, minimum=0)
    pinned_idx = _pinned_type(pinned)
    read = _engine.read(messages, format, name)  # prepared, decoded and counted at once
    prep, msgs = read.prep, read.messages
    _pinned_range(pinned_idx, len(msgs))
    threshold = int(total_share * window) if total_share is not None else None
    report_budget = threshold if threshold is not None else window

    work = list(msgs)
    costs = list(read.costs) if read.costs is not None else _costs(work, name)
    tokens_before = sum(costs)
    fate_of: dict[int, Fate] = {}  # the fates of the messages a rule changed (the rest: fits)
    # characters removed per (message, part, inner) slot, so a cut then a clearing count once
    removed: dict[tuple[int, int, int | None], int] = {}
    capped: dict[tuple[int, int, int | None], int] = {}  # the same, by rule 1
    cut: dict[tuple[int, int, int | None], int] = {}  # and by rule 2
    # the `keep` of rule 1's head + tail cut of a tool result's text, by slot: rule 2 cuts
    # that slot's input text again with a `keep` no larger (one marker, the real tail)
    cap_keep: dict[tuple[int, int, int | None], int] = {}
    cleared: dict[tuple[int, int], int] = {}  # characters a cleared result held first
    reasons: set[str] = set()
    seg = _segment(prep.payload, msgs)
    request = _request(msgs, seg.current_request, prep.provider)

    removed_in: dict[int, int] = {}  # the sum of `removed` by message (mark reads it)

    def set_removed(key: tuple[int, int, int | None], n: int) -> None:
        removed_in[key[0]] = removed_in.get(key[0], 0) + n - removed.get(key, 0)
        removed[key] = n

    def mark(i: int, rule: str) -> None:
        # the sum over `removed` for message i, kept up to date (a sum over all of
        # `removed` for every cleared result was quadratic in the results cleared)
        fate_of[i] = Fate(index=i, fate="truncated", rule=rule, chars_removed=removed_in.get(i, 0))

    # 1. per-message character cap (first seed)
    if cap is not None:
        for i, m in enumerate(work):
            # the current request is P0 (DESIGN.md section 5): trimming cuts it only when it
            # alone is over budget, never for a character cap
            if i < seg.preamble_end or m.pinned or i in pinned_idx or i == request:
                continue
            total = _text_chars(m)
            if total <= cap:
                continue
            slots = _text_slots(m)
            observation = ref.is_observation(m)
            by_size = sorted(slots, key=lambda s: -len(_slot_text(m, s)))
            # Largest first, each text cut by what is over the cap but never below the
            # common level of the texts that take a cut (`_cap_level`): several texts in
            # one message (a tool result in several parts) each keep their head and tail,
            # where the largest went down to its marker before the next was touched
            # (fresh26 #3). A text that takes no cut (already its marker alone, or too
            # short for the marker to save anything) is held at its length and the level
            # worked out again.
            fixed: set[tuple[int, int | None]] = set()
            while True:
                free = [len(_slot_text(m, s)) for s in slots if s not in fixed]
                level = _cap_level(free, cap - (total - sum(free)))
                # the cut texts by slot, put in at the end in one pass (putting each in as
                # it was cut copied the result's parts once per part: fresh56 #2)
                new_texts: dict[tuple[int, int | None], str] = {}
                cur_total, refused = total, set()
                cuts: dict[tuple[int, int | None], tuple[int, int | None]] = {}  # slot: (gone, keep)
                for s in by_size:
                    if cur_total <= cap:
                        break
                    if s in fixed:
                        continue
                    text = new_texts[s] if s in new_texts else _slot_text(m, s)
                    allowed = max(level, len(text) - (cur_total - cap))
                    keep: int | None = None
                    if s[1] is not None or observation:
                        # a tool result's text keeps its head and its tail (fresh14 finding 2:
                        # the error at the end of a build log was cut away), and so does a
                        # text-action observation's text, its prefix kept (fresh16b #3)
                        floor = _floor(text) if s[1] is None else 0
                        if _cut_only(text, floor):
                            refused.add(s)  # cut to its marker alone already
                            continue
                        new, gone, keep = _cut_lines_to(text, allowed, floor)
                    else:
                        if _CAP_ONLY_RE.fullmatch(text):
                            refused.add(s)  # cut to its marker alone already
                            continue
                        new, gone = _cap_text(text, allowed)
                    if gone == 0:
                        refused.add(s)
                        continue
                    new_texts[s] = new
                    cur_total += len(new) - len(text)
                    cuts[s] = (gone, keep)
                if cur_total > cap and refused - fixed:
                    fixed |= refused
                    continue
                cur = _set_slots(m, new_texts)
                break
            for s, (gone, keep) in cuts.items():
                key = (i, s[0], s[1])
                if keep is not None:
                    cap_keep[key] = keep
                set_removed(key, removed.get(key, 0) + gone)
                capped[key] = capped.get(key, 0) + gone
            changed = bool(cuts)
            m = cur
            if changed:
                work[i] = m
                costs[i] = _cost(m, name)
                mark(i, "message_char_cap")
                reasons.add("message_char_cap")

    # 2. one tool result over its share of the window (and one observation text: a
    # text-action agent's tool output, fresh16b #3)
    if result_share is not None:
        limit = int(result_share * window)

        def cut_text(
            key: tuple[int, int, int | None], text: str, floor: int, alone: Callable[[str], int]
        ) -> str | None:
            """The text of slot ``key`` (``text`` now) cut to fit ``limit`` alone (``alone``:
            the tokens of the slot's result, or observation message, holding a given text),
            or ``None`` when no cut helps; records the characters removed."""
            if _cut_only(text, floor):
                return None  # cut to its marker alone already: nothing left to take
            # a text rule 1 cut head + tail is cut again from the input's text, with a
            # `keep` no larger: one marker, the input's real tail (a cut of the cut kept
            # the end of the head as its "tail", after the first marker)
            source, top = text, len(text) - floor - 1
            if key in cap_keep:
                source, top = _slot_text(msgs[key[0]], (key[1], key[2])), cap_keep[key]

            def fits(k: int) -> bool:
                # never longer than the text it replaces: a cut from the input with a new
                # marker (lines named, more digits) could outgrow rule 1's cut, and the
                # message then its character cap, which the next call cut again
                t = _cut_lines(source, k, floor)[0]
                return alone(t) <= limit and len(t) <= len(text)

            keep = ref.largest_fitting(top + 1, fits)
            new_text, gone = _cut_lines(source, keep, floor)
            if gone == 0 or len(new_text) >= len(text):
                return None
            if alone(new_text) >= alone(text):
                return None  # the marker costs as much as the text it replaces
            record(key, gone)
            return new_text

        def record(key: tuple[int, int, int | None], gone: int) -> None:
            """Slot ``key`` lost ``gone`` characters to rule 2 (counted from its input text
            when rule 1 cut it first: rule 1's share included)."""
            if key in cap_keep:
                cut[key] = cut.get(key, 0) + gone - capped.get(key, 0)
                set_removed(key, gone)
            else:
                cut[key] = cut.get(key, 0) + gone
                set_removed(key, removed.get(key, 0) + gone)

        def cut_evenly(
            i: int, m: Message, slots: list[tuple[int, int | None]], alone: Callable[[Message], int]
        ) -> Message:
            """Message ``i`` (``m`` now) with its text slots ``slots`` (the text parts of
            one tool result, or an observation's own text parts) cut to one common
            ``keep``, the largest with which ``alone(m)`` (the tokens of the result, or of
            the observation's text, as a message of its own) fits ``limit``; parts no
            longer than that stay whole, each cut part keeps its head and its tail (an
            observation's first part its ``[Tool results]`` prefix). So several parts
            keep the head of the first and the tail of the last: cut largest first, one
            part went down to its marker before the next was touched (fresh26 #3), and
            an observation's parts each had the whole share (fresh27 #5). A part whose
            cut would not pay for its marker stays whole and the rest are cut again; with
            fewer than two parts left to cut, ``m`` is returned as it is (the caller cuts
            part by part)."""
            base = alone(m)
            if base <= limit:
                return m
            floors = {s: _floor(_slot_text(m, s)) if s[1] is None else 0 for s in slots}
            active = [s for s in slots if _slot_text(m, s) and not _cut_only(_slot_text(m, s), floors[s])]
            while len(active) >= 2:
                # each part's source text and the largest `keep` that cuts it: rule 1 cut
                # parts are cut again from the input, keeping no more than rule 1 kept
                src: dict[tuple[int, int | None], tuple[str, int]] = {}
                for s in active:
                    key = (i, *s)
                    text = _slot_text(m, s)
                    src[s] = (
                        (_slot_text(msgs[i], s), cap_keep[key]) if key in cap_keep else (text, len(text) - floors[s])
                    )

                def at(
                    k: int, ss: list[tuple[int, int | None]], src: dict[tuple[int, int | None], tuple[str, int]] = src
                ) -> tuple[Message, dict[tuple[int, int | None], int]]:
                    texts: dict[tuple[int, int | None], str] = {}
                    gone: dict[tuple[int, int | None], int] = {}
                    for s in ss:
                        source, top = src[s]
                        if k < top:
                            t, g = _cut_lines(source, k, floors[s])
                            if g:
                                texts[s], gone[s] = t, g
                    return _set_slots(m, texts), gone  # one copy of the parts (fresh56 #2)

                def fits(k: int, ss: list[tuple[int, int | None]] = active) -> bool:
                    # no part longer than it is now (see cut_text: a cut from the input
                    # with a longer marker put the message over its character cap)
                    mm = at(k, ss)[0]
                    return alone(mm) <= limit and all(len(_slot_text(mm, s)) <= len(_slot_text(m, s)) for s in ss)

                k = ref.largest_fitting(max(t for _, t in src.values()), fits)
                new, gone = at(k, active)
                if any(len(_slot_text(new, s)) > len(_slot_text(m, s)) for s in gone):
                    return m  # none fits but the markers alone, longer: cut part by part
                # a cut that does not save tokens, part by part (costs add up over parts:
                # the parts alone, in one estimator call; pricing the result once per part
                # was quadratic, 4,000 parts: 8.8 s, fresh56 #2)
                cand = list(gone)
                probes = [
                    Message(role=m.role, content=[TextPart(text=_slot_text(x, s))]) for x in (new, m) for s in cand
                ]
                priced = _costs(probes, name) if probes else []
                unworthy = [s for j, s in enumerate(cand) if priced[j] >= priced[len(cand) + j]]
                if unworthy:
                    drop = set(unworthy)
                    active = [s for s in active if s not in drop]
                    continue
                if not gone or alone(new) >= base:
                    return m
                for s, g in gone.items():
                    record((i, *s), g)
                return new
            return m

        def _tallies() -> tuple[dict[Any, int], dict[Any, int], dict[int, int]]:
            """What rule 2 has recorded so far (``record``), to compare two cuts."""
            return dict(cut), dict(removed), dict(removed_in)

        def _restore(saved: tuple[dict[Any, int], dict[Any, int], dict[int, int]]) -> None:
            cut.clear()
            cut.update(saved[0])
            removed.clear()
            removed.update(saved[1])
            removed_in.clear()
            removed_in.update(saved[2])

        def cut_span(
            i: int, m: Message, p: int, alone: Callable[[Message], int], force: bool = False
        ) -> Message | None:
            """Message ``i`` (``m`` now) with tool result ``p``'s text parts cut across
            parts when cutting inside each cannot fit ``limit`` (every part at its marker
            alone is still over: fresh55 #4, 1,500 grep hits each cut to a marker ended
            60 times over the share, in a quarter minute): the first and last parts whole,
            the ones between them gone behind one :data:`RESULT_CUT_MARKER` in the first of
            their places, naming the characters and lines they held. Keeps the parts
            ``_reference.span_split`` picks with ``alone(m)`` fitting; one marker alone
            when none fit. ``None`` when cuts inside the parts can fit (unless
            ``force``: the caller compares the two), or this saves nothing
            (``_reference._span_plan`` is ``trim_turns``' rule)."""
            result = m.content[p]
            assert isinstance(result, ToolResult)
            qs = [q for q, x in enumerate(result.content) if isinstance(x, TextPart) and x.text]
            n = len(qs)
            if n < 2:
                return None
            texts = [result.content[q].text for q in qs]  # type: ignore[union-attr]

            def with_texts(new: dict[int, str], gone: frozenset[int] = frozenset()) -> Message:
                inner = [
                    msgspec.structs.replace(x, text=new[q]) if q in new else x
                    for q, x in enumerate(result.content)
                    if q not in gone
                ]
                return ref._with_part(m, p, msgspec.structs.replace(result, content=inner))

            floor: dict[int, str] = {}  # every part at its marker alone, where that is shorter
            for q, x in zip(qs, texts, strict=True):
                t = _cut_lines(x, 0)[0]
                if len(t) < len(x):
                    floor[q] = t
            if not force and alone(with_texts(floor)) <= limit:
                return None

            shown, lines = [0], [0]  # running sums, so each trial is one marker and one copy
            for q, x in zip(qs, texts, strict=True):
                # a part the character cap cut counts as its input text (the cap's marker
                # with its line breaks is not what it held: fresh57 #4, one character high
                # a part)
                if (i, p, q) in cap_keep:
                    x = _slot_text(msgs[i], (p, q))
                shown.append(shown[-1] + ref.shown_removed(x, 0, len(x)))
                lines.append(lines[-1] + _text_lines(x))

            def at(h: int, t: int) -> Message:  # h parts kept at the head, t at the tail
                mark = cut_marker(shown[n - t] - shown[h], lines[n - t] - lines[h])
                return with_texts({qs[h]: mark}, frozenset(qs[h + 1 : n - t]))

            head, tail = ref.span_split(n, lambda h, t: alone(at(h, t)) <= limit)
            new = at(head, tail)
            if alone(new) >= alone(m):
                return None
            for q in qs[head : n - tail]:
                key = (i, p, q)
                record(key, len(_slot_text(msgs[i], (p, q))) if key in cap_keep else len(_slot_text(m, (p, q))))
            return new

        for i, m in enumerate(work):
            # a result alone costs at most its message (costs are additive over parts)
            if m.pinned or i in pinned_idx or costs[i] <= limit:
                continue
            observation = ref.is_observation(msgs[i])
            if not (observation or any(isinstance(p, ToolResult) for p in m.content)):
                continue
            changed = False
            if observation:

                def alone_texts(mm: Message) -> int:
                    return _cost(
                        msgspec.structs.replace(mm, content=[x for x in mm.content if isinstance(x, TextPart)]), name
                    )

                texts: list[tuple[int, int | None]] = [
                    (p, None) for p, x in enumerate(m.content) if isinstance(x, TextPart)
                ]
                evenly = cut_evenly(i, m, texts, alone_texts)
                changed, m = evenly is not m, evenly
            for p, part in enumerate(m.content):
                if isinstance(part, TextPart) and observation:

                    def alone_text(t: str, m: Message = m, part: TextPart = part) -> int:
                        return _cost(msgspec.structs.replace(m, content=[msgspec.structs.replace(part, text=t)]), name)

                    if not part.text or alone_text(part.text) <= limit:
                        continue
                    new_text = cut_text((i, p, None), part.text, _floor(part.text), alone_text)
                    if new_text is not None:
                        m = _set_slot(m, (p, None), new_text)
                        changed = True
                    continue
                if not isinstance(part, ToolResult) or _is_cleared(part):
                    continue

                def alone(r: ToolResult, m: Message = m) -> int:
                    return _cost(msgspec.structs.replace(m, content=[r]), name)

                if alone(part) <= limit:
                    continue

                def alone_result(mm: Message, p: int = p, m: Message = m) -> int:
                    return _cost(msgspec.structs.replace(m, content=[mm.content[p]]), name)

                spanned = cut_span(i, m, p, alone_result)
                if spanned is not None:
                    m, changed = spanned, True
                    continue
                before = _tallies()
                parts: list[tuple[int, int | None]] = [
                    (p, q) for q, x in enumerate(part.content) if isinstance(x, TextPart)
                ]
                result = cut_evenly(i, m, parts, alone_result).content[p]
                assert isinstance(result, ToolResult)
                changed = changed or result is not part
                order = sorted(
                    (q for q, x in enumerate(result.content) if isinstance(x, TextPart) and x.text),
                    key=lambda q: -len(result.content[q].text),  # type: ignore[union-attr]
                )
                for q in order:
                    if alone(result) <= limit:
                        break

                    def with_text(t: str, result: ToolResult = result, q: int = q) -> ToolResult:
                        inner = list(result.content)
                        inner[q] = msgspec.structs.replace(inner[q], text=t)
                        return msgspec.structs.replace(result, content=inner)

                    def alone_with(t: str, with_text: Callable[[str], ToolResult] = with_text) -> int:
                        return alone(with_text(t))

                    text = result.content[q].text  # type: ignore[union-attr]
                    new_text = cut_text((i, p, q), text, 0, alone_with)
                    if new_text is not None:
                        result = with_text(new_text)
                        changed = True
                # the cut across the parts instead when it fits and keeps more characters
                # (fresh56 #1: at a window of 9,100 every one of 300 lines kept 7 of its
                # characters, where at 9,000 the cut across kept 119 lines whole)
                evened, even_fits = _tallies(), alone(result) <= limit
                _restore(before)
                spanned = cut_span(i, m, p, alone_result, force=True)
                if spanned is not None and alone_result(spanned) <= limit:
                    gone_even = evened[2].get(i, 0) - before[2].get(i, 0)
                    if not even_fits or removed_in.get(i, 0) - before[2].get(i, 0) < gone_even:
                        m, changed = spanned, True
                        continue
                _restore(evened)
                if result is not part:
                    content = list(m.content)
                    content[p] = result
                    m = msgspec.structs.replace(m, content=content)
            if changed:
                work[i] = m
                costs[i] = _cost(m, name)
                mark(i, "tool_result_cut")
                reasons.add("tool_result_budget")

    # 3. the whole input over its share: clear the oldest output-heavy results
    if threshold is not None and sum(costs) > threshold:
        names, named = _named_results(msgs)
        current = seg.turns[-1][0] if seg.turns else len(work)
        spared: set[tuple[int, int]] = set()  # the newest `recent` results, when asked
        if recent is not None:
            current = len(work)
            results = [
                (wi, pi)
                for wi, wmsg in enumerate(work)
                for pi, q in enumerate(wmsg.content)
                if isinstance(q, ToolResult)
            ]
            spared = set(results[len(results) - recent :]) if recent else set()
        total = sum(costs)
        end = min(current, len(work))
        for i in named:  # a message holding no named result has nothing to clear
            if i >= end or total <= threshold:
                break
            m = work[i]
            if m.pinned or i in pinned_idx:
                continue
            # each result in order; one put off by the character cap (below) is tried once
            # more at the end, when the results cleared after it may have made room
            queue = list(range(len(m.content)))
            put_off: set[int] = set()
            for p in queue:
                if total <= threshold:
                    break
                part = m.content[p]
                tool = names[i][p]
                if not isinstance(part, ToolResult) or tool is None or _is_cleared(part) or (i, p) in spared:
                    continue
                if not _in_names(tool, heavy) or _in_names(tool, protected):
                    continue
                # the marker names the characters of output the result stands for, a cut
                # marker in it counted as what it names, not what rules 1-2 left of it
                # (fresh27 #4: "175 characters" for a 7,990-character log); read from
                # the result itself, so a second run names and decides the same
                cleared_part = _clear(part, tool, _named_chars(part))
                grows = _result_chars(cleared_part) - _result_chars(part)
                if grows >= 0 and not _non_text(part):
                    continue  # as micro_compact: a marker no shorter than the text
                capped_here = i >= seg.preamble_end and i != request
                if grows > 0 and capped_here and cap is not None and _text_chars(m) + grows > cap:
                    # a result of images alone becomes a marker longer than its text: not
                    # when that puts the message over the character cap (rule 1 would cut
                    # it on the next call, so a second call would not be a no-op)
                    if p not in put_off:
                        put_off.add(p)
                        queue.append(p)
                    continue
                cost = costs[i] + _change(m.role, part, cleared_part, name)
                if cost >= costs[i]:
                    continue
                content = list(m.content)
                content[p] = cleared_part
                trial = msgspec.structs.replace(m, content=content)
                total += cost - costs[i]
                work[i], costs[i], m = trial, cost, trial
                original = msgs[i].content[p]
                assert isinstance(original, ToolResult)
                for q, inner in enumerate(original.content):
                    if isinstance(inner, TextPart):
                        set_removed((i, p, q), len(inner.text))
                cleared[(i, p)] = _result_chars(original)
                mark(i, "tool_result_cleared")
                reasons.add("tool_result_budget")

    reason = "tool_result_budget" if "tool_result_budget" in reasons else ("message_char_cap" if reasons else None)
    ops = [(i, None if work[i] is msgs[i] else work[i]) for i in range(len(msgs))]
    t = len(seg.turns)
    fates = _kept_fates(len(msgs))
    for i, f in fate_of.items():
        fates[i] = f
    report = _report(
        tokens_before=tokens_before,
        tokens_after=sum(costs),
        budget=report_budget,
        reason=reason,
        turns=(t, t),
        fates=fates,
    )
    tally = _Tally()
    for (i, p, _), n in capped.items():
        if (i, p) not in cleared:
            tally.capped[i] = tally.capped.get(i, 0) + n
    for (i, p, _), n in cut.items():
        if (i, p) not in cleared:
            tally.cut[(i, p)] = tally.cut.get((i, p), 0) + n
    tally.cleared.update(cleared)
    return _engine.apply_ops(prep, ops, report), tally


# --------------------------------------------------------------------------- micro compaction


@nesting_errors()
def micro_compact(
    messages: Any,
    keep_recent: int = 6,
    *,
    tools: Iterable[str] | None = None,
    pinned: Iterable[int] = (),
    format: str | None = None,
    profile: str | None = None,
) -> TrimResult[Any]:
    """Clear every tool result except the newest ``keep_recent``.

    Each cleared result's content becomes ``[tool result cleared: N characters of <tool>
    output]`` (``N``: characters of text it held; ``<tool>`` the name of the call it
    answers, ``tool`` when it answers none); it keeps its call id, error flag and place,
    so pairing is untouched. The newest ``keep_recent`` results (counted over every result,
    cleared or not, in message order) stay whole. A result is left alone when it is
    already cleared, sits in a pinned message, or holds only text no longer than its
    marker, or when clearing would not save tokens in ``profile``'s count (the marker
    costs as many as what it replaces, or more: a rule line of 120 ``=``, 8 tokens
    against the marker's 14), as :func:`budget_tool_results` decides; with ``tools``,
    only results of those tools
    (case-insensitive) are cleared. Idempotent: a second call changes nothing and
    returns its input.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        keep_recent: how many of the newest tool results to keep whole (>= 0).
        tools: tool names whose results may be cleared; ``None`` for every tool.
        pinned: input indices to treat as pinned (dict input has no ``pinned`` field),
            added to ``Message.pinned``.
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.
        profile: built-in profile for the report's token counts (``None``: ``conservative``).

    Returns:
        ``TrimResult(messages, report)``; ``report.reason`` is ``"micro_compact"`` when a
        result was cleared (fate ``truncated``, rule ``tool_result_cleared``), ``None``
        otherwise (the output is then the input, same objects).

    Raises:
        InvalidMessageError: a message is malformed.
        ValueError: ``keep_recent`` not an int >= 0 (a string or a bool as much as a
            negative number, as for ``fit``'s budget), unknown profile, or a ``pinned``
            index that is not a message index.
        TypeError: ``tools`` not a collection of names, or ``pinned`` not a collection
            of ints (or holding something else than an int).

    >>> msgs = [{"role": "user", "content": "read both"},
    ...         {"role": "assistant", "content": None, "tool_calls": [
    ...             {"id": "r1", "type": "function", "function": {"name": "Read", "arguments": "{}"}},
    ...             {"id": "r2", "type": "function", "function": {"name": "Read", "arguments": "{}"}}]},
    ...         {"role": "tool", "tool_call_id": "r1", "content": "x" * 500},
    ...         {"role": "tool", "tool_call_id": "r2", "content": "y" * 500}]
    >>> [m["content"][:30] for m in micro_compact(msgs, keep_recent=1).messages[2:]]
    ['[tool result cleared: 500 char', 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyy']
    """
    name = resolve_profile(profile)
    keep = _count("keep_recent", keep_recent, minimum=0)
    assert keep is not None
    only = None if tools is None else _names(tools, "tools")
    pinned_idx = _pinned_type(pinned)
    # prepared, decoded and counted at once, through the Rust dict reader when it takes
    # the input (fresh47 #4: the Python adapters cost 1.1 s of 3.5 s on 80,000 messages)
    read = _engine.read(messages, format, name)
    prep, msgs = read.prep, read.messages
    _pinned_range(pinned_idx, len(msgs))
    names = _tool_names(msgs)
    slots = [(i, p) for i, m in enumerate(msgs) for p, q in enumerate(m.content) if isinstance(q, ToolResult)]
    old = slots[: max(0, len(slots) - keep)]
    work = list(msgs)
    fates = _fates(len(msgs))
    for i, p in old:
        m = work[i]
        part = msgs[i].content[p]
        assert isinstance(part, ToolResult)
        tool = names[i][p]
        if m.pinned or i in pinned_idx or _is_cleared(part):
            continue
        if only is not None and (tool is None or not _in_names(tool, only)):
            continue
        cleared = _clear(part, tool)
        if not _non_text(part) and _result_chars(cleared) >= _result_chars(part):
            continue
        # the marker costs as many tokens as what it replaces, or more (fresh45 #4: "=" *
        # 120 is 8 tokens, its marker 14: the conversation grew), as budget_tool_results
        # decides
        if _change(m.role, part, cleared, name) >= 0:
            continue
        content = list(m.content)
        content[p] = cleared
        work[i] = msgspec.structs.replace(m, content=content)
        fates[i].update(fate="truncated", rule="tool_result_cleared")
        fates[i]["chars_removed"] += _result_chars(part)
    changed = any(w is not m for w, m in zip(work, msgs, strict=True))
    before = read.costs if read.costs is not None else _costs(msgs, name)
    touched = [i for i, w in enumerate(work) if w is not msgs[i]]
    after = list(before)
    for i, c in zip(touched, _costs([work[i] for i in touched], name), strict=True):
        after[i] = c
    t = len(_segment(prep.payload).turns)
    report = _report(
        tokens_before=sum(before),
        tokens_after=sum(after),
        budget=None,
        reason="micro_compact" if changed else None,
        turns=(t, t),
        fates=fates,
    )
    return _engine.apply_ops(prep, [(i, None if w is msgs[i] else w) for i, w in enumerate(work)], report)


# --------------------------------------------------------------------------- layer 2


def _notice_count(text: str) -> int | None:
    m = _NOTICE_RE.fullmatch(text)
    return int(m.group(1)) if m else None


def _is_notice_message(m: Message) -> bool:
    """A message that is only our notice (OpenAI placement)."""
    return (
        m.role == "user"
        and len(m.content) == 1
        and isinstance(m.content[0], TextPart)
        and _notice_count(m.content[0].text) is not None
    )


def _notice_sum(parts: Iterable[Part]) -> int:
    """The message counts of the compaction notices among ``parts`` (0 for other parts)."""
    return sum(_notice_count(q.text) or 0 for q in parts if isinstance(q, TextPart))


def _op_message(msgs: list[Message], src: int | None, msg: Message | None) -> Message:
    """The message an op ``(src, msg)`` stands for: ``msg``, or the input's ``msgs[src]``
    when it is unchanged (``msg`` is ``None``)."""
    if msg is not None:
        return msg
    assert src is not None, "an op with neither a source nor a message"
    return msgs[src]


def _notice_blocks(m: Message) -> list[int]:
    """Indices of notice text blocks inside a user message that holds more than that (a
    ``tool`` struct too: written as a user message under Anthropic's rules, it can take
    the notice after its results; found by hypothesis: a second pruning kept it there
    and added another)."""
    if m.role not in ("user", "tool") or _is_notice_message(m):
        return []
    return [p for p, q in enumerate(m.content) if isinstance(q, TextPart) and _notice_count(q.text) is not None]


def _with_notice(m: Message, text: str, where: str) -> Message:
    """``m`` with the notice as a text block: ``lead`` (first), ``after_results`` (right
    after its leading tool results) or ``trail`` (last)."""
    block = TextPart(text=text)
    content: list[Part] = list(m.content)
    if where == "lead":
        content.insert(0, block)
    elif where == "after_results":
        k = 0
        while k < len(content) and isinstance(content[k], ToolResult):
            k += 1
        content.insert(k, block)
    else:
        content.append(block)
    return ref.fix_content_kind(msgspec.structs.replace(m, content=content))


@nesting_errors()
def prune_middle(
    messages: Any,
    budget: Any = None,
    *,
    keep_recent: int | None = None,
    pinned: Iterable[int] = (),
    profile: str | None = None,
    format: str | None = None,
    token_counter: Any = None,
    estimator: Any = None,
    tokenizer: Any = None,
) -> TrimResult[Any]:
    """Replace the middle of a long history with one notice (third seed, layer 2).

    Kept: the preamble, the first real user message, pinned messages, the current
    request (the last real user message) and the last ``N = min(6, total // 3)``
    messages (``total``: messages after pair repair; ``keep_recent`` overrides ``N``).
    A tool unit is never split: any unit holding a kept message is kept whole, which
    widens the kept tail back to the unit's call. In Anthropic shape (and for a plain
    chat) a dropped run between two messages of the same role also keeps the message
    just before the later one, so roles keep alternating. Under Anthropic's rules the
    newest turn's first assistant message, when it starts with a thinking block, is kept
    as a pinned one, with the real user message that starts its turn (README, Extended
    thinking); an assistant message pruning leaves last (a prefill) loses the whitespace
    its text ends in, as in ``fit``. Every other message is
    removed, and one notice ``[context compacted: N earlier messages removed]`` stands
    for them, placed where ``trim_turns`` places its breadcrumb (DESIGN.md section 5):

    * OpenAI shape: a user message of its own before the first message kept after the
      first removed run (never between a call and its results: units are whole); it
      never starts a turn or becomes the current request (DESIGN.md section 4). Only
      when nothing is kept after the removed run is it the last text block of the
      current request instead.
    * Anthropic shape: the leading text block of that next kept message when it is a
      user message (after its ``tool_result`` blocks when it carries results), else the
      last text block of the kept user message before the removed run, else the
      leading text block of a later kept user message. A message the notice would make
      or stop being a turn's start (a screenshot in a tool unit, which the notice's text
      would make the user's) is passed over when another can hold it.

    Pruning a pruned history never stacks notices: the old ones are removed and the new
    notice counts their messages plus the newly removed ones; when only old notices
    would go, nothing changes. Broken tool pairs are repaired first (as ``trim_turns``
    does), so every output passes ``validate`` for pairing.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        budget: ``None`` to prune unconditionally, or a token budget (an int, or an
            object with an int ``usable``, a ``Budget``, whose ``usable`` is read; above
            2**63 - 1: no limit): when the input fits, it comes back unchanged.
        keep_recent: how many of the newest messages to keep (>= 0); ``None`` for
            ``min(6, total // 3)``.
        pinned: input indices to treat as pinned (dict input has no ``pinned`` field;
            as ``FitPolicy.pinned``), added to ``Message.pinned``.
        profile: built-in profile for token counts (``None``: ``conservative``, or the
            estimator's profile).
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.
        token_counter: ``list of messages -> tokens`` (LangChain's convention), called
            with one message at a time in the caller's shape, as in
            :func:`~contextwindow.trim_turns`; ``budget`` and the report are then in its
            tokens.
        estimator: an :class:`~contextwindow.Estimator` (profile, tokenizer, calibrator).
        tokenizer: ``str -> tokens``, replacing ``profile``'s text rule.

    Returns:
        ``TrimResult(messages, report)``; ``report.reason`` is ``"middle_pruned"`` when
        messages were removed (fate ``dropped``, rule ``middle_pruned``), ``"tool_pairs"``
        when only a repair changed the input, ``None`` when the output is the input.
        ``report.fits`` compares the result with ``budget`` (one pruning pass; the caller
        decides what next when it still does not fit).

    Raises:
        InvalidMessageError: a message is malformed.
        TokenCounterError: the counter or tokenizer raised, or returned something other
            than an ``int >= 0`` (names it and the message index).
        ValueError: more than one cost source, ``profile`` beside ``token_counter``;
            ``budget`` not None, an int >= 0 or an object with an int >= 0 in
            ``usable``, ``keep_recent``
            not an int >= 0 or None (a string or a bool as much as a negative number, as
            for ``fit``'s budget), unknown profile, a ``pinned`` index that is not a
            message index. A hand-built ``Budget`` that
            :func:`~contextwindow.resolve_budget` could never return (fields that
            disagree; a reserve as large as the window, a ``ReserveError``; a non-int
            field is a ``TypeError``): see
            ``contextwindow.budget.checked_budget``.
        TypeError: ``pinned`` not a collection of indices (ints);
            ``token_counter``/``tokenizer`` not callable, ``estimator`` not an
            ``Estimator``.

    A pruning that would not lower the estimate (the notice costing as much as the
    messages it replaces) is not done: the input comes back (pairs repaired).

    >>> msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    >>> for k in range(5):
    ...     msgs += [{"role": "assistant", "content": f"step {k}"}, {"role": "user", "content": f"more {k}"}]
    >>> [m["content"] for m in prune_middle(msgs, keep_recent=2).messages]
    ['sys', 'task', '[context compacted: 8 earlier messages removed]', 'step 4', 'more 4']
    """
    name, est, counter = cost_source(profile, token_counter, estimator, tokenizer)
    calibrated = on_raw_costs(
        est,
        _budget_tokens(budget),
        lambda b, kw: prune_middle(messages, b, keep_recent=keep_recent, pinned=pinned, format=format, **kw),
    )
    if calibrated is not None:
        return calibrated  # type: ignore[no-any-return]
    return _prune_middle(
        messages,
        budget,
        keep_recent=keep_recent,
        pinned=pinned,
        profile=name,
        format=format,
        protected=(),
        caller=(est, counter) if est is not None or counter is not None else None,
    )


def _prune_middle(
    messages: Any,
    budget: Any,
    *,
    keep_recent: int | None,
    pinned: Iterable[int],
    profile: str | None,
    format: str | None,
    protected: Collection[int],
    caller: tuple[Any, Any] | None = None,
) -> TrimResult[Any]:
    """:func:`prune_middle`, also keeping the input indices in ``protected``; with
    ``caller`` (``(estimator, token_counter)``, one of them None: :func:`cost_source`),
    in the caller's costs.

    ``protected``: input indices a caller's policy never evicts
    (:meth:`~contextwindow.ContextGuard.recover`: class 0, or a class outside
    ``FitPolicy.eviction_order``). They are kept as pinned messages are, their tool units
    whole; a kept one's fate rule is ``policy_class`` (unless an earlier rule, such as
    ``recent_messages`` or ``pinned``, names why it stays). Indices out of range are
    ignored (the caller computes them from the same input).
    """
    name = resolve_profile(profile)
    limit = _budget_tokens(budget)
    if keep_recent is not None:
        keep_recent = _count("keep_recent", keep_recent, minimum=0)
    pinned_idx = _pinned_type(pinned)
    protected = frozenset(protected)
    # through the Rust dict reader when it takes the input (fresh47 #4)
    read = _engine.read(messages, format)
    prep, msgs = read.prep, read.messages
    _pinned_range(pinned_idx, len(msgs))
    provider = prep.provider
    if caller is None:

        def price(ms: list[Message]) -> list[int]:
            return _costs(ms, name)
    else:
        model = caller_cost(prep, msgs, *caller)

        def price(ms: list[Message]) -> list[int]:
            return [model.message_tokens(m) for m in ms]

    in_costs = price(msgs)
    tokens_before = sum(in_costs)

    items, repairs = ref.repair(msgs, provider, "stub")
    wm = [it.msg(msgs) for it in items]
    n = len(wm)
    costs = [in_costs[it.src] if it.src is not None and it.new is None else -1 for it in items]
    fresh = [w for w, c in enumerate(costs) if c < 0]
    for w, c in zip(fresh, price([wm[w] for w in fresh]), strict=True):
        costs[w] = c
    fates = _fates(len(msgs))
    ref.repair_fates(fates, repairs, items, msgs)
    repaired_fates = [dict(f) for f in fates]
    seg = _segment(_engine.encode_messages(wm))
    turns_before = len(seg.turns)

    def finish(
        out: list[tuple[int | None, Message | None]], reason: str | None, inserted: int, dropped_turns: int
    ) -> TrimResult[Any]:
        tokens_after = sum(price([_op_message(msgs, src, msg) for src, msg in out]))
        changed = len(out) != len(msgs) or any(msg is not None or src != i for i, (src, msg) in enumerate(out))
        if reason is None and changed:
            reason = "tool_pairs"
        report = _report(
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            budget=limit,
            reason=reason if changed else None,
            turns=(turns_before, turns_before - dropped_turns),
            fates=fates,
            inserted=inserted,
            repairs=repairs,
        )
        return _engine.apply_ops(prep, out, report)

    def as_is() -> TrimResult[Any]:
        out = [(it.src, it.new) for it in items]
        inserted = sum(1 for it in items if it.src is None)
        return finish(out, None, inserted, 0)

    if limit is not None and sum(costs) <= limit:
        return as_is()

    pre = seg.preamble_end
    # real user messages where they stand (a screenshot in a tool unit or after an
    # observation is none: fresh50 #1, fresh53 #2)
    real = ref.real_users_in(wm, seg.units)
    requests = [w for w in range(pre, n) if real[w] and not _is_notice_message(wm[w])]
    # the input's request stays the request when repair made it a carrier (a result moved
    # into it): kept, not pruned from the middle
    req = ref.current_request(msgs, [it.src for it in items], requests[-1] if requests else None)
    if req is not None and (not requests or req > requests[-1]):
        requests.append(req)
    old_notice = [w for w in range(n) if _is_notice_message(wm[w])]
    keep: set[int] = set(range(pre))
    if requests:
        keep.update((requests[0], requests[-1]))

    # the first assistant message of the newest turn when it starts with a thinking block
    # (Anthropic) is kept as a pinned one is: the API refuses the request without it
    # (fresh20b #1)
    anchor = ref.thinking_anchor(wm, provider)  # in the repaired list, the one sent

    def is_pinned(w: int) -> bool:
        return wm[w].pinned or items[w].src in pinned_idx

    # and the user message that ends the turn before (a real one, or one of no words,
    # which the API takes for a user's turn: ref.thinking_turn_start), when pruning would
    # take it: the turn before would join the newest, whose first assistant message then
    # has no thinking block (found by hypothesis: repair made the input's request, a
    # pinned image message, a result carrier, so the request kept was not the turn's start)
    start = ref.thinking_turn_start(wm)
    boundary = start - 1 if anchor is not None and start - 1 >= pre else None

    def is_anchor(w: int) -> bool:
        return w == anchor or w == boundary

    def is_protected(w: int) -> bool:
        return items[w].src in protected

    keep.update(w for w in range(n) if is_pinned(w) or is_protected(w) or is_anchor(w))
    tail = keep_recent if keep_recent is not None else min(6, n // 3)
    keep.update(range(max(pre, n - tail), n))
    keep.difference_update(old_notice)
    unit_of: dict[int, list[int]] = {w: u for u in seg.units for w in u}
    anthropic = provider == "anthropic"
    # real user messages holding stubs for the calls of the message before them (an
    # Anthropic call the user interrupted): kept with their caller; kept without it, they
    # lose the stubs (the caller's unit went, as the OpenAI shape's stub message goes)
    stub_head = {
        w for w in range(1, n) if wm[w - 1].role == "assistant" and ref.is_real_user(wm[w]) and ref.has_results(wm[w])
    }

    def close() -> None:
        """Whole units, and (Anthropic) alternating roles across removed runs.

        Each unit is taken in once (walking a unit again for each of its members was
        quadratic in a batch of parallel calls: fresh30 #1), and every removed run
        between two kept messages of the same role gets its message in one pass (one
        per pass, rescanning, was quadratic in the pinned messages). The result is
        the one-at-a-time rule's: a unit lies inside the run it was taken from (units
        are contiguous, and none holding a kept message was left out), so runs are
        mended independently of each other."""
        todo = list(keep)
        seen_units: set[int] = set()

        def take(v: int) -> None:
            if v not in keep:
                keep.add(v)
                todo.append(v)

        def units() -> None:
            while todo:
                w = todo.pop()
                u = unit_of.get(w)
                if u is not None and u[0] not in seen_units:
                    seen_units.add(u[0])
                    for v in u:
                        take(v)
                if w + 1 in stub_head:
                    take(w + 1)

        units()
        if not anthropic:
            return
        # a tool struct is written as a user message of tool_result blocks
        role = [ref.anthropic_role(m.role) for m in wm]
        while True:
            kept = sorted(w for w in keep if w >= pre)
            for a, b in itertools.pairwise(kept):
                if b - a > 1 and role[a] == role[b]:
                    c = next((c for c in range(b - 1, a, -1) if c not in old_notice and role[c] != role[b]), None)
                    if c is not None:
                        take(c)
            if not todo:
                return
            units()

    close()
    gone = [w for w in range(pre, n) if w not in keep and w not in old_notice]
    if not gone:
        return as_is()

    # the notice: old notices' counts plus the input messages removed now
    previous = _notice_sum(wm[w].content[0] for w in old_notice)
    # notice blocks count whether their message stays or goes (an earlier notice may lead a
    # message that is in the middle now)
    previous += _notice_sum(wm[w].content[p] for w in range(n) for p in _notice_blocks(wm[w]))
    count = previous + sum(1 for w in gone if items[w].src is not None)
    notice = COMPACTION_NOTICE.format(n=count)
    new: dict[int, Message] = {}
    noticed: set[int] = set()  # kept messages whose notice blocks were removed
    for w in sorted(keep):
        m = wm[w]
        src = items[w].src
        if w in stub_head and w - 1 not in keep:
            m = ref.without_stubs(m) or m
            # the caller's own message again when that is all repair changed
            m = msgs[src] if src is not None and m.content == msgs[src].content else ref.fix_content_kind(m)
            new[w] = m
            if (
                src is not None
                and m is msgs[src]
                and (fates[src]["fate"], fates[src]["rule"])
                == (
                    "repaired",
                    "stub_inserted",
                )
            ):
                # the stubs were all repair changed: the input message again (trim's rule)
                fates[src].update(fate="kept", rule="fits", chars_removed=0)
        blocks = _notice_blocks(m)
        if blocks:
            noticed.add(w)
            new[w] = ref.fix_content_kind(
                msgspec.structs.replace(m, content=[q for p, q in enumerate(m.content) if p not in blocks])
            )

    def cur(w: int) -> Message:
        return new.get(w, wm[w])

    first_gone = gone[0]
    after = next((w for w in range(first_gone, n) if w in keep), None)
    before = next((w for w in range(first_gone - 1, pre - 1, -1) if w in keep), None)
    standalone_at: int | None = None
    target: tuple[int, str] | None = None
    if not anthropic:
        # the notice is not a real user message (turns.is_real_user), so a message of its
        # own never starts a turn or becomes the current request, wherever it stands
        if after is not None or not requests:
            standalone_at = after if after is not None else n
        else:
            target = (requests[-1], "trail")
    else:

        def place(w: int | None, strict: bool, trail: bool = False) -> tuple[int, str] | None:
            """Where in kept message ``w`` the notice goes, when ``w`` is a user message
            (a tool struct is one) and, if ``strict``, stays what it was with it: a real
            user message must stay one, and a message that is none must not become one
            (found by hypothesis: an empty message, a turn's start until fresh53 #1,
            holding the notice alone was the notice's own message, and the newest
            thinking turn began a turn earlier, ``thinking_not_first``)."""
            if w is None or ref.anthropic_role(cur(w).role) != "user":
                return None
            where = "trail" if trail else "after_results" if ref.has_results(cur(w)) else "lead"
            # (nor a screenshot in a tool unit, which the notice's text would make a real
            # user message: fresh50 #1)
            if strict and (
                ref.is_real_user(_with_notice(cur(w), notice, where)) != ref.is_real_user(cur(w))
                or (ref.is_media_only(cur(w)) and not real[w])
            ):
                return None
            return (w, where)

        def choose(strict: bool) -> tuple[tuple[int, str] | None, int | None] | None:
            """``(target, standalone_at)``: the first kept user message after the gap,
            else (nothing kept before the gap, an assistant message after it) a user
            message of its own, so the conversation still starts with a user (found by
            hypothesis: merged into a later user message, it started with the
            assistant), else the last kept before the gap, else a later user message;
            ``None`` when ``strict`` finds no message that stays what it was."""
            t = place(after, strict)
            if t is not None:
                return t, None
            if before is None and after is not None and ref.anthropic_role(cur(after).role) != "user":
                return None, after
            t = place(before, strict, trail=True) or next(
                (t for w in range(first_gone, n) if w in keep and (t := place(w, strict)) is not None), None
            )
            if t is not None:
                return t, None
            return None if strict else (None, after if after is not None else n)

        # a message that would stop being a turn's start (or become one) only when no
        # other can hold the notice
        chosen = choose(True) or choose(False)
        assert chosen is not None
        target, standalone_at = chosen
    if target is not None:
        new[target[0]] = _with_notice(cur(target[0]), notice, target[1])

    # fates: why each input message stayed or went
    reason_of: dict[int, str] = {}
    for w in range(pre):
        reason_of[w] = "preamble"
    for w in sorted(keep):
        if w in reason_of:
            continue
        if w >= n - tail:
            reason_of[w] = "recent_messages"
        elif requests and w == requests[-1]:
            reason_of[w] = "current_request"
        elif requests and w == requests[0]:
            reason_of[w] = "first_user_message"
        elif is_pinned(w):
            reason_of[w] = "pinned"
        elif is_anchor(w):
            reason_of[w] = "thinking_block"
        elif is_protected(w):
            reason_of[w] = "policy_class"
        elif unit_of.get(w):
            reason_of[w] = "tool_unit"
        else:
            reason_of[w] = "alternation"
    for w, it in enumerate(items):
        if it.src is None:
            continue
        f = fates[it.src]
        if w in keep:
            if f["fate"] == "kept":
                f["rule"] = reason_of[w]
            if target is not None and target[0] == w:
                f["rule"] = "notice_added"
            elif w in noticed:
                f["rule"] = "notice_removed"
        else:
            f.update(fate="dropped", rule="notice_replaced" if w in old_notice else "middle_pruned", chars_removed=0)

    out: list[tuple[int | None, Message | None]] = []
    inserted = 0
    for w, it in enumerate(items):
        if w == standalone_at:
            out.append((None, Message(role="user", content=[TextPart(text=notice)])))
            inserted += 1
        if w not in keep:
            continue
        if it.src is None:
            inserted += 1
        m_out = new.get(w, it.new)
        out.append((it.src, None if it.src is not None and m_out is msgs[it.src] else m_out))
    if standalone_at == n:
        out.append((None, Message(role="user", content=[TextPart(text=notice)])))
        inserted += 1
    # an assistant message pruning left last (a prefill under Anthropic's rules) without
    # the whitespace its text ends in, as fit does (found by hypothesis)
    out = ref.trim_exposed_prefill(out, msgs, provider)
    dropped_turns = sum(1 for a, b in seg.turns if all(w not in keep for w in range(a, b)))
    pruned = finish(out, "middle_pruned", inserted, dropped_turns)
    if pruned.report.tokens_after >= sum(costs):
        fates[:] = repaired_fates  # the notice would cost as much as what it replaces
        return as_is()
    return pruned
