"""Estimation rules on texts whose counts can be worked out by hand.

The ``cl100k`` column is what tiktoken's cl100k_base gives for the same text (measured once
with ``tools/measure_estimates.py``'s setup); ``conservative`` must not fall below it on
these texts, which are the ones that once made it undercount badly.
"""

from __future__ import annotations

import pytest

import contextwindow as cw


@pytest.mark.parametrize(
    ("text", "want", "cl100k"),
    [
        # one whitespace run + 19,999 further line breaks at 1/4: ceil(1 + 4999.75)
        ("\r\n" * 10_000, 5001, 2500),
        # one run + 9,999 further spaces at 1/16: ceil(1 + 624.94)
        (" " * 10_000, 626, 79),
        # one segment of 20,000 letters: ceil(1 + 19,996/8 + 19,988/2) = ceil(12,494.5)
        ("q" * 20_000, 12_495, 1_250),
        # per line "\n\t\tx = 1": line break 1, indentation 1 + 1/16, x 1, " =" 1, " " 1, "1" 1
        # (the first line has no line break): 999 * 6.0625 + 5.0625 = 6061.3
        ("\n".join("\t\tx = 1" for _ in range(1000)), 6062, 5999),
    ],
)
def test_conservative_on_runs(text: str, want: int, cl100k: int) -> None:
    got = cw.estimate_tokens(text)
    assert got == want
    assert got >= cl100k


def test_controls_and_astral_code_points() -> None:
    """Found by the second fresh-install review: NUL runs, CJK extension B and math
    alphanumerics were counted at a quarter to a third of cl100k's tokens."""
    assert cw.estimate_tokens("\x00" * 5000) == 5000  # 1 each; cl100k: 5000
    assert cw.estimate_tokens("\U00020000" * 100) == 400  # 4 each (its UTF-8 bytes)
    assert cw.estimate_tokens("\U0001d400" * 100) == 400  # math bold A; cl100k: about 300
    c = cw.count_classes("\x1b[0m\U00020000")
    assert (c["ascii_control"], c["astral"], c["ascii_punct"], c["punct_runs"]) == (1, 1, 1, 1)


def test_fim_and_bytes4_rules() -> None:
    assert cw.estimate_tokens("abcdefgh", "fim") == 2  # 8 / 4
    assert cw.estimate_tokens("你好世界", "fim") == 2  # floor(4 / 1.5)
    assert cw.estimate_tokens("你好世界", "bytes4") == 3  # ceil(12 / 4)
    assert cw.estimate_tokens("", "fim") == 0 and cw.estimate_tokens("a", "fim") == 1


def test_classes_and_lone_surrogate() -> None:
    c = cw.count_classes("ab 你\U0001f468\u200d\U0001f469")
    assert (c["ascii_alnum"], c["cjk"], c["emoji"], c["joiner"], c["bytes"]) == (2, 1, 2, 1, 17)
    # a lone surrogate counts as U+FFFD (other non-ASCII, 0.75)
    assert cw.estimate_tokens("\ud83d") == 1
    with pytest.raises(TypeError):
        cw.estimate_tokens(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown profile"):
        cw.estimate_tokens("x", "cl99k")
    with pytest.raises(TypeError):
        cw.count_classes(None)  # type: ignore[arg-type]
    with pytest.raises(cw.InvalidMessageError, match=r"message 0, field content\[0\]\.width"):
        cw.count_messages([cw.Message(role="user", content=[cw.ImagePart(width=-5)])])


def test_images_counted_by_size_never_base64_length() -> None:
    url = "data:image/png;base64," + "A" * 50_000
    msg = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
    # not a PNG header (all zero bytes): size unknown, OpenAI's documented-rule maximum
    assert cw.count_messages([msg]) == 4 + 1445
    low = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url, "detail": "low"}}]}
    assert cw.count_messages([low]) == 4 + 85
    sized = cw.Message(role="user", content=[cw.ImagePart(width=1024, height=1024, source="https://x/a.png")])
    assert cw.count_messages([sized]) == 4 + 765  # 768x768 after scaling: 4 tiles
    # no source, so no provider shape: the larger of OpenAI (765) and Anthropic (1048576/750)
    bare = cw.Message(role="user", content=[cw.ImagePart(width=1024, height=1024)])
    assert cw.count_messages([bare]) == 4 + 1399
    assert cw.count_messages([msg], profile="fim") == 4 + 765


def test_tool_schemas_and_arguments_count() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
    # 4 + 3 per call + "f" 1 + '{"a": 1}': punct runs '{"' and '":' (1 + 1/4 each), '}' 1,
    # "a" 1, the space before a digit does not merge (1), "1" 1 -> ceil(6.5) = 7
    assert cw.count_messages([call]) == 4 + 3 + 1 + 7
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert cw.count_messages([call], tools=tools) == 15 + cw.estimate_tokens(
        '[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]'
    )
