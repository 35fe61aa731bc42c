"""Turns and tool units (DESIGN.md section 4)."""

from __future__ import annotations

from typing import Any

import msgspec

from . import _engine
from ._engine import nesting_errors
from .report import Segmentation

__all__ = ["segment_turns"]

_SEG = msgspec.json.Decoder(Segmentation)


@nesting_errors()
def segment_turns(messages: Any, *, format: str | None = None) -> Segmentation:
    """Split a conversation into preamble, turns and tool units.

    The preamble is the run of leading system/developer messages. A turn starts at a real
    user message (role user, not a tool-result carrier, not text starting with
    ``[Tool results]``, not the breadcrumb); messages before the first one belong to the
    first turn. A user message whose only results are ``[tool result missing]`` stubs,
    next to what the user wrote, is real: repair puts the stub of an Anthropic call the
    user interrupted there, and the message still opens the user's next turn (it is in
    no tool unit; trimming takes the stubs out when the call goes). A tool unit is an
    assistant message with calls plus every message holding one of their results,
    matched by id to the nearest preceding call, and the user messages of images, files,
    audio or documents alone right after them (a screenshot an OpenAI agent sends after
    the tool messages: it opens no turn); a turn boundary never falls inside a tool unit.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.

    Returns:
        A :class:`~contextwindow.report.Segmentation` (indices into ``messages``).

    Raises:
        InvalidMessageError: a message is malformed.

    >>> segment_turns([{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
    ...                {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]).turns
    [(1, 3), (3, 4)]
    """
    prep = _engine.prepare(messages, format)
    return _SEG.decode(_engine.native.segment_turns(prep.payload))
