"""Token estimation (DESIGN.md section 3).

One pass over the UTF-8 bytes (in Rust) splits text into the pieces a BPE tokenizer's
pre-tokenizer makes and looks each short piece up in a tokenizer family's vocabulary; the
counts it collects (:func:`count_features`) are weighted into tokens by a profile.

Profiles:

* ``conservative`` (default): weights fitted to the larger of the ``cl100k`` and ``tekken``
  real counts, on the features of its own vocabulary (a piece is one token only when it
  is one in both families, up to its Bloom filter's false positives, about 0.005% of
  random words; a character costs what the dearer family spends on it), times
  a margin (``data/profiles.json``; 1.03 as fitted), rounded up, with the larger of their
  overheads. One scan of the text, as for a fitted profile. Use it when an overflow costs
  more than a little waste: on held-out agent transcripts at most a few percent of text
  segments are undercounted by more than 5% by either family.
* ``cl100k``: fitted against tiktoken's ``cl100k_base`` (GPT-4, GPT-3.5 and the many
  models sharing that vocabulary); 4 tokens per message (OpenAI's chat format: 3 and
  the role) and 1 per ``name`` beside its text; the 3 tokens OpenAI adds per request to
  prime the reply are not counted.
* ``tekken``: fitted against Mistral's Tekken tokenizer (mistral-common); per-message,
  per-tool-call and per-tool overheads measured with mistral-common's request encoder.
* ``fim``: the FIM One rule: ASCII 4 characters a token, every code point >= 128 at 1.5
  characters a token, floor, at least 1 for non-empty text; 765 per image; 4 per message.
* ``bytes4``: ceil(UTF-8 bytes / 4) per text; 4 per message; 765 per image.

The fitted weights, vocabulary filters and per-character cost tables are data
(``rust/contextwindow-core/data``), written by ``tools/fit_profiles.py`` from the real
tokenizers; ``contextwindow accuracy`` measures them (README, "Token estimates").

Images (every profile but ``fim`` and ``bytes4``) cost by their size in pixels, never by the
length of their base64 text, never 0. The size is the part's explicit ``width`` and ``height`` when both are given,
else it is read from the header of inline base64 data (a ``data:`` URL or an Anthropic
``base64`` source; PNG, GIF, WebP and JPEG; only the header bytes are decoded). The rule
follows the part's provider shape: an OpenAI ``image_url`` costs OpenAI tiles (fit
2048x2048, short side to 768, 85 + 170 tokens per 512-pixel tile; ``detail: "low"`` 85), an
Anthropic ``image`` block ceil(width * height / 750) after Anthropic's downscale (long edge
at most 1568 pixels, at most 784 * 1568 pixels); a hand-built ``ImagePart`` without a
``source`` costs the larger of the two. When the size is unknown (a remote URL, a file id,
another format) the cost is the most the rule can give: 1445 tokens for OpenAI, 1640 for
Anthropic. Images inside tool results count the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import _engine
from ._engine import json_type_name, nesting_errors, tool_definition_error
from ._jsontext import (
    ENCODER,
    KeyClash,
    as_int,
    clean_str,
    clean_value,
    cycle_at,
    depth_unbounded,
    field_path,
    has_odd_keys,
    int_cause,
    json_fault,
    nested_deeper,
    shown,
)
from .errors import InvalidMessageError, InvalidRequestError, TokenCounterError

__all__ = [
    "DEFAULT_PROFILE",
    "FAMILIES",
    "PROFILES",
    "count_features",
    "count_many",
    "count_messages",
    "estimate_many",
    "estimate_tokens",
]

#: Names of the built-in profiles.
PROFILES: tuple[str, ...] = tuple(_engine.native.PROFILES)
#: Tokenizer families with fitted weights (a ``family`` of :func:`count_features`).
FAMILIES: tuple[str, ...] = tuple(_engine.native.FAMILIES)
#: The profile used when none is named.
DEFAULT_PROFILE = "conservative"
#: The vocabularies :func:`count_features` scans: the families', then the default profile's own.
_VOCABULARIES: tuple[str, ...] = (*FAMILIES, DEFAULT_PROFILE)


def resolve_profile(profile: object) -> str:
    """The built-in profile named ``profile`` (``None``: :data:`DEFAULT_PROFILE`); ``TypeError``
    for a value that is not a string, ``ValueError`` for a string that is not a profile name."""
    if profile is None:
        return DEFAULT_PROFILE
    if not isinstance(profile, str):
        raise TypeError(f"profile must be a profile name (str) or None, got {type(profile).__name__}")
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {shown(profile)}; known: {', '.join(PROFILES)}")
    return profile


def estimate_tokens(text: str, profile: str | None = DEFAULT_PROFILE) -> int:
    """Estimate the tokens of a text.

    Args:
        text: any string; lone surrogates count as U+FFFD.
        profile: name of a built-in profile (see module docs; ``None``: ``conservative``).

    Returns:
        Estimated tokens: 0 for ``""``, at least 1 for any other text.

    Raises:
        TypeError: ``text`` is not a ``str``.
        ValueError: unknown profile.

    >>> estimate_tokens("abcdefgh", profile="fim")
    2
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    profile = resolve_profile(profile)
    try:
        return int(_engine.native.estimate_text(text, profile))
    except UnicodeEncodeError:
        return int(_engine.native.estimate_text(clean_str(text), profile))


def estimate_many(texts: Iterable[str], profile: str | None = DEFAULT_PROFILE) -> list[int]:
    """Estimate the tokens of many texts in one call.

    The same rule as :func:`estimate_tokens`, one call into the engine for the whole
    batch: the strings are read in place (CPython's cached UTF-8) and the GIL is released
    while they are counted.

    Args:
        texts: strings (any iterable; lone surrogates count as U+FFFD).
        profile: name of a built-in profile (``None``: ``conservative``).

    Returns:
        Tokens of each text, in order.

    Raises:
        TypeError: ``texts`` is a single ``str``, bytes, a mapping or not iterable
            (``None``), or an item is not a ``str`` (the error names its index).
        ValueError: unknown profile.

    >>> estimate_many(["abcdefgh", "", "你好世界"], profile="fim")
    [2, 0, 2]
    """
    profile = resolve_profile(profile)
    if isinstance(texts, (str, bytes, bytearray, Mapping)) or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be a list of str, got {type(texts).__name__}")
    items = list(texts)
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be str, got {type(t).__name__}")
    try:
        return [int(n) for n in _engine.native.estimate_many(items, profile)]
    except UnicodeEncodeError:
        return [int(n) for n in _engine.native.estimate_many([clean_str(t) for t in items], profile)]


def count_many(
    conversations: Iterable[Any],
    profile: str | None = DEFAULT_PROFILE,
    *,
    tools: list[Any] | tuple[Any, ...] | None = None,
    format: str | None = None,
) -> list[int]:
    """Estimate the tokens of many conversations in one engine call.

    Each total equals ``count_messages(conversation, profile, tools=tools,
    format=format)``; the conversations are read first (lists of dicts in one walk in
    Rust, anything else checked and encoded by the Python adapters), then counted together
    with the GIL released. ``tools`` is one list of tool definitions, sent with every
    conversation: its tokens (counted once) are in each total, an empty conversation's too.

    Args:
        conversations: message lists (OpenAI dicts, Anthropic dicts or ``Message`` structs;
            each list is detected on its own unless ``format`` is given).
        profile: name of a built-in profile (``None``: ``conservative``).
        tools: the tool definitions every request sends, in any provider's shape, as for
            :func:`count_messages` (``None``: none).
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.

    Returns:
        Estimated prompt tokens of each conversation, in order (tokens).

    Raises:
        InvalidMessageError: a message is malformed (names the conversation, the message
            index and the field; ``.index`` and ``.field`` are set as for
            :func:`count_messages`, ``.conversation`` is the conversation's position).
        InvalidRequestError: a tool definition is malformed, as for :func:`count_messages`
            (names ``tools[i]``; checked before the conversations).
        TypeError: ``conversations`` is a single ``str``, bytes, a mapping or not iterable.
        ValueError: unknown profile, or ``tools`` is not a list (or tuple).

    >>> count_many([[{"role": "user", "content": "abcdefgh"}], []], profile="fim")
    [6, 0]
    >>> tools = [{"name": "f", "input_schema": {}}]   # 30 characters: 7 tokens + 0 per tool
    >>> count_many([[{"role": "user", "content": "abcdefgh"}], []], profile="fim", tools=tools)
    [13, 7]
    """
    profile = resolve_profile(profile)
    if isinstance(conversations, (str, bytes, bytearray, Mapping)) or not isinstance(conversations, Iterable):
        raise TypeError(f"conversations must be a list of message lists, got {type(conversations).__name__}")
    fixed = tools_tokens(tool_texts(tools), profile, lambda t: estimate_tokens(t, profile))
    convs = list(conversations)
    totals: list[int | None] = [None] * len(convs)
    if _engine.FAST_READER and format in (None, "openai", "anthropic"):
        totals = _engine.native.count_many_dicts(convs, format, profile)
    payloads = []
    for i, conv in enumerate(convs):
        if totals[i] is not None:
            continue
        try:
            payloads.append(_engine.prepare(conv, format).payload)
        except InvalidMessageError as exc:
            err = InvalidMessageError(exc.reason, index=exc.index, field=exc.field)
            err.args = (f"conversation {i}: {exc}",)
            err.conversation = i  # type: ignore[attr-defined]
            raise err from None
    slow = iter(_engine.native.count_many(payloads, profile))
    return [fixed + (int(n) if n is not None else int(next(slow))) for n in totals]


def count_features(text: str, family: str | None = None) -> dict[str, int]:
    """Count the single-pass features of a text for one tokenizer family.

    Args:
        text: any string; lone surrogates count as U+FFFD.
        family: whose vocabulary the pieces are looked up in: ``"cl100k"``, ``"tekken"``
            (:data:`FAMILIES`) or ``"conservative"``, the default profile's own vocabulary
            (``None``, the default: ``"conservative"``, as for the other functions).

    Returns:
        Feature name to count: ``known`` (pieces that are one token of the family),
        ``unknown_*`` (pieces that are not, by kind and length; ``unknown_upper_beyond_1``:
        the capitals of unknown letter segments beyond each one's first), ``digits``,
        ``digit_groups``, ``controls``, ``ngrams`` (2-3 character CJK or symbol
        tokens, and CJK tokens that hold the space before them),
        ``non_ascii_words``, ``non_ascii_upper_after_upper`` (non-ASCII uppercase
        letters of the BMP right after an uppercase letter: text in capitals, which
        tokenizers split finely), ``ch_<group>`` (code points of a script group read on
        their own: those inside a 2- or 3-character token of the family, counted in
        ``ngrams``, are not, so the count depends on the family) and
        ``ex_<group>`` (their standalone tokens beyond one each), and ``bytes`` (UTF-8
        length).

    Raises:
        TypeError: ``text`` or ``family`` is not a ``str``.
        ValueError: unknown family.

    >>> count_features("ab 你")["ch_cjk"]
    1
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    if family is None:
        family = DEFAULT_PROFILE
    if not isinstance(family, str):
        raise TypeError(f"family must be a family name (str) or None, got {type(family).__name__}")
    if family not in _VOCABULARIES:
        raise ValueError(f"unknown family {shown(family)}; known: {', '.join(_VOCABULARIES)}")
    return dict(_engine.native.count_features(clean_str(text), family))


def check_limit(limit: Any) -> int | None:
    """``limit`` as an ``int >= 0`` (any integer :func:`operator.index` takes, not a
    ``bool``) or ``None``; ``ValueError`` otherwise."""
    if limit is None:
        return None
    n = as_int(limit)
    if n is None or n < 0:
        raise ValueError(f"limit must be None or a non-negative int, got {shown(limit)}") from int_cause(limit)
    return n


def _too_deep_tool(tool: Any, i: int) -> InvalidRequestError:
    """The error for tool definition ``i`` nested too deeply, or holding itself (a
    cycle, named where it is: ``tools[0].input_schema: holds itself (a cycle)``)."""
    path = cycle_at(tool)
    if path is None:
        return InvalidRequestError(f"tools[{i}]: is nested too deeply")
    return InvalidRequestError(f"{field_path(path, f'tools[{i}]')}: holds itself (a cycle)")


def tool_texts(tools: Any) -> list[str]:
    """The compact JSON text of each of a request's tool definitions (``[]`` for ``None``);
    ``InvalidRequestError`` for a definition that is not an object, whose ``function`` /
    ``name`` has the wrong type, or that lacks the name its shape requires
    (:func:`~contextwindow._engine.tool_definition_error`)."""
    if tools is None:
        return []
    if not isinstance(tools, (list, tuple)):
        raise ValueError(f"tools must be a list of tool definitions, got {type(tools).__name__}")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping):
            # JSON's words, as the gateway and the CLI say it (fresh9 B4)
            raise InvalidRequestError(f"tools[{i}]: a tool definition must be an object, got {json_type_name(t)}")
        if depth_unbounded() and nested_deeper(t):  # before msgspec recurses into it
            raise _too_deep_tool(t, i)
        found = json_fault(t)  # bytes msgspec writes as base64 text, a set as an array (fresh17b #3)
        if found is not None:
            raise InvalidRequestError(
                f"{field_path(found[0], f'tools[{i}]')}: holds a value JSON cannot represent ({found[1]})"
            )
        try:
            try:
                out.append(ENCODER.encode(t).decode())
                if has_odd_keys(t):  # {1: "a", "1": "b"} is written with the key "1" twice
                    clean_value(t)
            except UnicodeEncodeError:
                # lone surrogates: U+FFFD (a high one followed by a low one: the character
                # they encode), as in message text and in the gateway's JSON escapes
                out.append(ENCODER.encode(clean_value(t)).decode())
        except KeyClash as clash:  # two keys lone surrogates make one: the gateway's words
            raise InvalidRequestError(f"{field_path(clash.path, f'tools[{i}]')}: {clash.reason()}") from None
        except RecursionError:
            raise _too_deep_tool(t, i) from None
        except (TypeError, ValueError, UnicodeEncodeError) as exc:
            raise InvalidRequestError(f"tools[{i}]: holds a value JSON cannot represent ({exc})") from None
        # then its shape, after its JSON text as the gateway (fresh12 O4)
        if (shape := tool_definition_error(i, t)) is not None:
            raise InvalidRequestError(shape)
    return out


#: Top-level keys of a request body that can carry a structured-output JSON schema.
OUTPUT_SCHEMA_KEYS = ("response_format", "output_config", "output_format")


def output_schema_texts(body: Mapping[str, Any]) -> list[str]:
    """The compact JSON text of each structured-output schema a request body sends, as
    the gateway reads them (``gateway::output_schemas`` in Rust): OpenAI chat's
    ``response_format.json_schema`` when ``response_format.type`` is ``"json_schema"``,
    Anthropic's ``output_config.format.schema`` and ``output_format.schema`` (the beta
    spelling) when that format's ``type`` is ``"json_schema"``. Anything else under these
    keys (``{"type": "json_object"}``, ``{"type": "text"}``, a value of another shape)
    adds nothing. ``body`` is a decoded request body (a file the CLI read: JSON values
    only).

    Args:
        body: the decoded request body.

    Returns:
        One compact JSON text per schema, in the order of the keys above.

    Raises:
        InvalidRequestError: a ``"json_schema"`` format whose schema is missing or not an
            object, which the providers refuse (it was counted as 0), in the gateway's
            words: ``response_format.json_schema: must be an object, got a string``,
            ``output_config.format.schema: is missing``.

    >>> output_schema_texts({"response_format": {"type": "json_schema",
    ...     "json_schema": {"name": "r", "schema": {"type": "object"}}}})
    ['{"name":"r","schema":{"type":"object"}}']
    """
    out = []
    for key in OUTPUT_SCHEMA_KEYS:
        fmt = body.get(key)
        place = key
        if key == "output_config":
            fmt = fmt.get("format") if isinstance(fmt, Mapping) else None
            place = "output_config.format"
        if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
            continue
        field = "json_schema" if key == "response_format" else "schema"
        if field not in fmt:
            raise InvalidRequestError(f"{place}.{field}: is missing")
        schema = fmt[field]
        if not isinstance(schema, Mapping):
            raise InvalidRequestError(f"{place}.{field}: must be an object, got {json_type_name(schema)}")
        out.append(ENCODER.encode(schema).decode())
    return out


def tools_tokens(texts: list[str], profile: str, text_tokens: Callable[[str], int]) -> int:
    """Tokens of tool definitions: per tool, its JSON text plus the profile's per-tool
    overhead."""
    if not texts:
        return 0
    per_tool = int(_engine.native.profile_overheads(profile)[2])
    total = 0
    for i, t in enumerate(texts):
        try:
            total += text_tokens(t) + per_tool
        except TokenCounterError as exc:  # a caller's tokenizer: name the tool (fresh23b #4)
            named = TokenCounterError(exc.reason, counter=exc.counter, tool=i)
            raise named from exc.__cause__
    return total


def sum_until(counts: Iterable[int], limit: int | None, scale: Callable[[int], int] = int) -> int:
    """``scale(sum(counts))``, stopping at the first running total whose scaled value
    exceeds ``limit`` and returning that value (``> limit``); lazy ``counts`` are not
    consumed further."""
    total = 0
    for n in counts:
        total += n
        if limit is not None and scale(total) > limit:
            break
    return scale(total)


@nesting_errors()
def count_messages(
    messages: Any,
    profile: str | None = DEFAULT_PROFILE,
    tools: list[Any] | tuple[Any, ...] | None = None,
    *,
    format: str | None = None,
    limit: int | None = None,
) -> int:
    """Estimate the tokens of a conversation as sent to the model.

    Message cost = per-message overhead + name (text, plus the profile's per-name
    overhead: 1 for ``cl100k`` and ``conservative``) + text parts + images + tool-call names
    and argument text (+ per-call overhead) + tool results. Additive: the count of a list
    is the sum of the counts of its messages. ``tools`` (the request's tool definitions)
    add, per tool, the estimate of its compact JSON text (every key included: ``anyOf``,
    ``default``, ``enum``, ``title`` ...) plus the profile's per-tool overhead.

    With ``limit``, counting may stop once the answer is known to exceed it: the running
    total (tool schemas first, then the messages in order) is returned as soon as it
    exceeds ``limit``. So a result ``<= limit`` is the exact count, and a result
    ``> limit`` is the count of the tools plus the shortest prefix of messages that
    exceeds ``limit`` (a lower bound of the full count).

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        profile: name of a built-in profile (``None``: ``conservative``).
        tools: the request's tool definitions, in any provider's shape.
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.
        limit: stop counting once the total exceeds this many tokens (``None``: count all).

    Returns:
        Estimated prompt tokens (see ``limit``).

    Raises:
        InvalidMessageError: a message is malformed (names its index and field).
        InvalidRequestError: a tool definition is not a dict (JSON: an object), is nested too deeply, holds
            a value JSON cannot represent, or has a ``function`` / ``name`` of the wrong type or
            missing (an Anthropic tool with no ``name``: ``tools[0].name: is missing``; names
            ``tools[i]``).
        ValueError: unknown profile, ``tools`` is not a list (or tuple), or ``limit`` is not an
            ``int >= 0``.

    >>> count_messages([{"role": "user", "content": "abcdefgh"}], profile="fim")
    6
    >>> count_messages([{"role": "user", "content": "abcdefgh"}] * 3, profile="fim", limit=7)   # 6 + 6 > 7
    12
    """
    profile = resolve_profile(profile)
    texts = tool_texts(tools)
    limit = check_limit(limit)
    per = profile_counts(messages, format, profile)
    schemas = tools_tokens(texts, profile, lambda t: estimate_tokens(t, profile))
    if limit is None:  # the common case: one C-level sum (a Python loop was 3% of the call)
        return schemas + sum(per)
    return sum_until([schemas, *per], limit)


@nesting_errors()
def message_tokens(messages: Any, profile: str | None = DEFAULT_PROFILE, *, format: str | None = None) -> list[int]:
    """Estimate the tokens of each message.

    Args:
        messages: OpenAI dicts, Anthropic dicts or ``Message`` structs.
        profile: name of a built-in profile (``None``: ``conservative``).
        format: ``"openai"`` or ``"anthropic"`` to skip auto-detection.

    Returns:
        One token count per message, in order (tokens of ``profile``); their sum is
        :func:`count_messages` without ``tools``.

    Raises:
        InvalidMessageError: a message is malformed (names its index and field), or
            ``messages`` is not a list of messages.
        ValueError: unknown profile or ``format``.
        TypeError: ``profile`` or ``format`` is not a string.

    >>> message_tokens([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}], "fim")
    [5, 5]
    """
    profile = resolve_profile(profile)
    return [int(n) for n in profile_counts(messages, format, profile)]


def profile_counts(messages: Any, format: str | None, profile: str) -> list[int]:
    """Tokens of each message: the native dict reader when it takes the input, else
    the Python adapters and the engine's JSON path."""
    if _engine.fast_reader(messages, format):
        per = _engine.native.count_dicts(messages, format, profile)
        if per is not None:
            return per
    return _engine.native.count_messages(_engine.prepare(messages, format).payload, profile)
