"""The three doors refuse the same input with the same words.

The dict path (``count_messages`` on Python dicts), the gateway (``count_request`` /
``fit_request`` on the raw body) and the CLI (``contextwindow count`` on a file) read the
same messages with the same rules (DESIGN section 1: one engine, many doors). Where a
message is bad, all three name the first bad message, with the same text (fresh8 N7).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextwindow as cw
from contextwindow.cli import main
from contextwindow.errors import InvalidMessageError

from shared_data import corpus_files, load


def dict_error(messages: list[Any], fmt: str | None = None) -> str:
    """The dict path's error text for ``messages``."""
    with pytest.raises(InvalidMessageError) as info:
        cw.count_messages(messages, format=fmt)
    return str(info.value)


def gateway_errors(body: bytes, provider: str | None = None) -> list[str]:
    """``count_request``'s and ``fit_request``'s error texts for ``body``."""
    out = []
    for call in (
        lambda: cw.count_request(body, provider=provider),
        lambda: cw.fit_request(body, budget=10**6, provider=provider),
    ):
        with pytest.raises(cw.ContextWindowError) as info:
            call()
        out.append(str(info.value))
    return out


def cli_error(body: bytes, fmt: str | None = None) -> str:
    """What ``contextwindow count`` prints for a file holding ``body``, without the
    ``contextwindow: error: <path>: `` prefix; it must exit 2 with one line."""
    with tempfile.TemporaryDirectory() as d:
        f = str(Path(d) / "in.json")
        Path(f).write_bytes(body)
        argv = ["count", f] + (["--format", fmt] if fmt else [])
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(argv)
    text = err.getvalue()
    assert rc == 2, text
    prefix = f"contextwindow: error: {f}: "
    assert text.startswith(prefix) and text.count("\n") == 1, text
    return text[len(prefix) : -1]


def same_everywhere(messages: list[Any], fmt: str | None = None) -> str:
    """The one error text all three doors give for ``messages`` (in a body of its own)."""
    body = json.dumps({"model": "m", "messages": messages}).encode()
    want = dict_error(messages, fmt)
    assert gateway_errors(body, fmt) == [want, want]
    assert cli_error(body, fmt) == want
    return want


# ------------------------------------------------------------------ fresh8 N7, repros


def test_first_bad_message_is_named_not_a_later_non_object() -> None:
    # message 0 has a bad content, message 2 is not an object: message 0 is named first
    msgs = [{"role": "user", "content": 5}, {"role": "user", "content": "a"}, "x"]
    assert same_everywhere(msgs) == "message 0, field content: must be a string or a list of blocks"
    # the other way round: the non-object is the first bad message
    msgs = [{"role": "user", "content": "a"}, 7, {"role": "user", "content": 5}]
    assert same_everywhere(msgs) == "message 1: must be an object"
    # Anthropic shape (a tool_use block makes it so), a non-object after a bad block
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "s"}]},
        None,
    ]
    assert same_everywhere(msgs) == "message 1, field content[0].input: must be an object"


def test_unknown_role_is_quoted_the_same_way() -> None:
    assert same_everywhere([{"role": "wizard", "content": "a"}]) == 'message 0, field role: unknown role "wizard"'
    # both shapes, and a name that needs escaping: written as a JSON string on every path
    assert (
        same_everywhere([{"role": "it's", "content": "a"}], "anthropic")
        == 'message 0, field role: unknown role "it\'s"'
    )
    assert same_everywhere([{"role": 'a"b\n', "content": "a"}], "openai") == (
        r'message 0, field role: unknown role "a\"b\n"'
    )
    # a non-ASCII name is written as it is (json.dumps(ensure_ascii=False), serde_json)
    assert same_everywhere([{"role": "мастер", "content": "a"}]) == 'message 0, field role: unknown role "мастер"'


# ------------------------------------------- differential: corpus messages, injected faults

FILES = corpus_files()


@functools.cache
def corpus_messages(i: int) -> tuple[str, str]:
    """File ``i``'s format and its messages as JSON text (decoded afresh per example)."""
    d = load(FILES[i])
    return d["format"], json.dumps(d["messages"])


FAULTS = ["non_object", "content_number", "unknown_role", "no_role", "role_number"]


def inject(messages: list[Any], at: int, fault: str) -> None:
    """Make message ``at`` bad in one of the ways every door refuses."""
    m = messages[at]
    if fault == "non_object" or not isinstance(m, dict):
        messages[at] = ["x"] if fault == "non_object" else 5
    elif fault == "content_number":
        m["content"] = 5
    elif fault == "unknown_role":
        m["role"] = "wizard"
    elif fault == "no_role":
        m.pop("role", None)
    else:
        m["role"] = 3


@pytest.mark.skipif(not FILES, reason="corpus not found beside the repo")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_corpus_with_faults_gives_the_same_error_on_every_door(data: st.DataObject) -> None:
    fmt, text = corpus_messages(data.draw(st.integers(0, len(FILES) - 1), label="file"))
    messages = json.loads(text)
    if not messages:
        return
    n = data.draw(st.integers(1, 3), label="faults")
    for _ in range(n):
        at = data.draw(st.integers(0, len(messages) - 1), label="at")
        inject(messages, at, data.draw(st.sampled_from(FAULTS), label="fault"))
    provider = data.draw(st.sampled_from([None, fmt]), label="provider")
    body = json.dumps({"messages": messages}).encode()
    want = dict_error(messages, provider)
    assert gateway_errors(body, provider) == [want, want]
    assert cli_error(body, provider) == want
