"""Canonical message model (DESIGN.md section 2).

Every front of contextwindow (OpenAI dicts, Anthropic dicts, these structs) is turned into
this model before the engine sees it. The structs are ``msgspec.Struct`` with
``frozen=True, kw_only=True``; parts are a tagged union on the field ``kind`` so a list
of them encodes to JSON and decodes back without ambiguity.

Fields beyond the contract, used only to make the provider adapters lossless:

* ``extra``: provider keys the canonical model has no field for (``reasoning_content``,
  ``cache_control``, ...). Adapters put them back verbatim.
* ``content_kind`` on :class:`Message` and :class:`ToolResult`: how the provider spelled the
  content (``"text"`` for a bare string, ``"parts"`` for a list of blocks, ``"null"`` for
  JSON null, ``"absent"`` for a missing key). ``None`` lets the adapter choose.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

__all__ = [
    "Role",
    "ContentKind",
    "TextPart",
    "ImagePart",
    "ToolCall",
    "ToolResult",
    "OpaquePart",
    "Part",
    "ResultPart",
    "Message",
    "message_text",
    "BREADCRUMB",
    "MISSING_RESULT",
    "RESULTS_REMOVED",
]

Role = Literal["system", "developer", "user", "assistant", "tool"]
ContentKind = Literal["text", "parts", "null", "absent"]

#: Text of the breadcrumb inserted where older turns were removed (DESIGN.md section 5).
BREADCRUMB = "[earlier turns omitted to fit the context window]"
#: Text of a synthetic tool result inserted for a call that has none (DESIGN.md section 4).
MISSING_RESULT = "[tool result missing]"
#: Text of an Anthropic user message that pair repair left without any block (its results
#: were orphans or moved to their calls): kept so roles keep alternating (DESIGN.md section
#: 4). It starts with ``[Tool results]``, so it never starts a turn.
RESULTS_REMOVED = "[Tool results] (removed by tool-pair repair)"

_OPTS: dict[str, Any] = {"frozen": True, "kw_only": True, "omit_defaults": True, "tag_field": "kind"}


class TextPart(msgspec.Struct, tag="text", **_OPTS):
    """A block of text.

    Attributes:
        text: the text, any length (counted in tokens by the estimator).
        extra: provider keys kept for a lossless round trip (e.g. ``cache_control``).

    >>> TextPart(text="hello").text
    'hello'
    """

    text: str
    extra: dict[str, Any] | None = None


class ImagePart(msgspec.Struct, tag="image", **_OPTS):
    """An image input.

    Attributes:
        width: width in pixels when known, else ``None``.
        height: height in pixels when known, else ``None``.
        detail: OpenAI ``detail`` (``"low"``, ``"high"``, ``"auto"``) when given; any
            other string is counted as ``"high"`` and reported by ``validate(...,
            "openai")`` as ``detail_not_allowed``.
        source: the provider's reference to the image, kept verbatim: an URL or data URL
            string for OpenAI, the ``source`` object for Anthropic. Its type tells the
            estimator which provider's image rule applies (see ``contextwindow.estimate``);
            inline base64 data gives the size when ``width``/``height`` are not set.
        extra: provider keys kept for a lossless round trip.

    >>> ImagePart(width=512, height=512).width
    512
    """

    width: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None
    height: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None
    detail: str | None = None
    source: Any = None
    extra: dict[str, Any] | None = None


class ToolCall(msgspec.Struct, tag="tool_call", **_OPTS):
    """A tool call made by the assistant.

    Attributes:
        id: the call id that results refer to.
        name: the tool's name.
        arguments: the arguments as the JSON text the model produced (OpenAI sends a
            string; the Anthropic adapter encodes ``input`` to compact JSON), or the free
            text ``input`` of an OpenAI custom tool call.
        extra: provider keys kept for a lossless round trip (``{"type": "custom"}`` marks
            an OpenAI custom tool call).

    >>> ToolCall(id="c1", name="search", arguments='{"q": "x"}').name
    'search'
    """

    id: str
    name: str
    arguments: str
    extra: dict[str, Any] | None = None


class OpaquePart(msgspec.Struct, tag="opaque", **_OPTS):
    """A block whose type contextwindow does not model; counted by its JSON text.

    Attributes:
        type: the provider's ``type`` value (e.g. ``"thinking"``, ``"input_audio"``).
        raw: the block exactly as given.

    >>> OpaquePart(type="thinking", raw={"type": "thinking", "thinking": "hm"}).type
    'thinking'
    """

    type: str
    raw: Any


ResultPart = TextPart | ImagePart | OpaquePart


class ToolResult(msgspec.Struct, tag="tool_result", **_OPTS):
    """The result of one tool call.

    Attributes:
        call_id: id of the :class:`ToolCall` this answers.
        content: the result's parts (text, images, opaque blocks).
        is_error: the provider's error flag (Anthropic ``is_error``).
        extra: provider keys kept for a lossless round trip.
        content_kind: how the provider spelled ``content`` (see module docs).

    >>> ToolResult(call_id="c1", content=[TextPart(text="42")]).call_id
    'c1'
    """

    call_id: str
    content: list[ResultPart] = []
    is_error: bool = False
    extra: dict[str, Any] | None = None
    content_kind: ContentKind | None = None


Part = TextPart | ImagePart | ToolCall | ToolResult | OpaquePart


class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One message of a conversation in canonical form.

    Attributes:
        role: ``system``, ``developer``, ``user``, ``assistant`` or ``tool``.
        content: the message's parts, in order.
        pinned: never dropped by trimming (DESIGN.md section 5).
        priority: explicit priority class 0-3 for ``fit``; ``None`` derives it.
        name: the provider's ``name`` field, when given.
        id: a caller's id for the message, when given.
        extra: provider keys kept for a lossless round trip. Not the message's own
            fields (``role``, ``content``) nor tool calls (``tool_calls`` but null or
            ``[]``, ``function_call`` but null), which would be written uncounted:
            every function taking structs, and the writers, refuse them
            (``InvalidMessageError``, ``field extra.tool_calls``); a call is a
            :class:`ToolCall` part.
        content_kind: how the provider spelled ``content`` (see module docs).

    >>> Message(role="user", content=[TextPart(text="hi")]).role
    'user'
    """

    role: Role
    content: list[Part] = []
    pinned: bool = False
    priority: Annotated[int, msgspec.Meta(ge=0, le=3)] | None = None
    name: str | None = None
    id: str | None = None
    extra: dict[str, Any] | None = None
    content_kind: ContentKind | None = None


def message_text(message: Message) -> str:
    """Join the text parts of a message (not of its tool results) with newlines.

    Args:
        message: a canonical message.

    Returns:
        The text, ``""`` when the message has no text part.

    >>> message_text(Message(role="user", content=[TextPart(text="a"), TextPart(text="b")]))
    'a\\nb'
    """
    return "\n".join(p.text for p in message.content if isinstance(p, TextPart))
