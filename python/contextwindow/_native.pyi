"""Type stubs of the native engine (``rust/contextwindow-py``). Private: use the package API.

Every function taking ``messages`` expects the JSON array of canonical messages that
``msgspec.json.encode(list[Message])`` produces (UTF-8 bytes). Errors: malformed JSON raises
``InvalidRequestError``; an unknown profile, format or ``missing`` value raises ``ValueError``.
"""

from typing import Any, Literal

PROFILES: list[str]
FAMILIES: list[str]
PROFILE_JSON: str
"""``rust/contextwindow-core/data/profiles.json`` as embedded at build time."""

def estimate_text(text: str, profile: str) -> int:
    """Tokens of ``text`` under ``profile`` (0 for "", else >= 1)."""

def count_features(text: str, family: str) -> list[tuple[str, int]]:
    """(name, count) for each feature of ``family`` (see features.rs), then ("bytes", n)."""

def vocab_data(family: str) -> tuple[bytes, bytes]:
    """The family's Bloom filter (2**17 bytes) and cost table (17,088 bytes), as embedded."""

def profile_overheads(profile: str) -> tuple[int, int, int, int]:
    """Per-message, per-tool-call and per-tool overheads of ``profile``, in tokens."""

def estimate_many(texts: list[str], profile: str) -> list[int]:
    """Tokens of each text (read in place, GIL released)."""

def count_many(conversations: list[bytes], profile: str) -> list[int]:
    """Total tokens of each conversation (canonical message JSON bytes)."""

def count_messages(messages: bytes, profile: str) -> list[int]:
    """Tokens of each message."""

def count_dicts(messages: Any, format: str | None, profile: str) -> list[int] | None:
    """Tokens of each message of a ``list`` of OpenAI or Anthropic dicts (``format=None``
    detects), read in one walk in Rust with the adapters' rules (GIL released above 4 KB
    of text); ``None`` when the dict reader does not take the input (malformed, not plain
    dicts/lists/strs, lone surrogates, empty ...): use the Python adapters then."""

def read_dicts(messages: Any, format: str | None) -> tuple[str, str, str] | None:
    """For tests: ``(format, provider, canonical messages JSON)`` as the dict reader builds
    them, or ``None`` where :func:`count_dicts` is ``None``."""

def reencode(messages: bytes) -> str:
    """For tests: canonical message JSON as the engine reads it, written like :func:`read_dicts`."""

def count_many_dicts(conversations: list[Any], format: str | None, profile: str) -> list[int | None]:
    """Total tokens of each conversation of dicts; ``None`` where :func:`count_dicts` would be."""

def trim_turns_dicts(
    messages: Any, format: str | None, budget: int, profile: str, breadcrumb: bool, pinned: list[int] = ...
) -> tuple[Literal["openai", "anthropic"], Literal["openai", "anthropic"], str] | None:
    """``trim_turns`` on dicts read as :func:`count_dicts` reads them: ``(format, provider,
    outcome JSON)`` (the outcome as :func:`trim_turns`), or ``None`` (use the Python adapters).
    ``pinned``: input indices to treat as pinned (``ValueError`` for one out of range)."""

def trim_turn_count_dicts(
    messages: Any, format: str | None, max_turns: int, profile: str, breadcrumb: bool, pinned: list[int] = ...
) -> tuple[Literal["openai", "anthropic"], Literal["openai", "anthropic"], str] | None:
    """``trim_turn_count`` on dicts (see :func:`trim_turns_dicts`)."""

def segment_turns(messages: bytes) -> str:
    """JSON ``{"preamble_end", "turns", "units", "current_request"}``."""

def validate(messages: bytes, format: str) -> str:
    """JSON array of violations (``index``, ``code``, ``detail``, ``call_id``?)."""

def repair_tool_pairs(messages: bytes, format: str, missing: str, profile: str) -> str:
    """JSON ``{"messages": [ops], "report": {...}}``; an op is ``{"src": i}`` or ``{"src": i|null, "msg": {...}}``."""

def trim_turns(
    messages: bytes, budget: int, profile: str, breadcrumb: bool, format: str, pinned: list[int] = ...
) -> str:
    """Same outcome JSON as :func:`repair_tool_pairs`; ``pinned``: input indices to treat as pinned."""

def trim_turn_count(
    messages: bytes, max_turns: int, profile: str, breadcrumb: bool, format: str, pinned: list[int] = ...
) -> str:
    """Same outcome JSON as :func:`repair_tool_pairs`."""

def fit_request(
    body: bytes, budget: int, profile: str, provider: str | None, breadcrumb: bool, pinned: list[int] = ...
) -> tuple[bytes, str]:
    """Trim a raw OpenAI/Anthropic request body (``provider=None`` detects): the new body, and
    JSON ``{"provider", "budget", "tool_tokens", "schema_tokens", "report": {...}}``. A bad body raises
    ``InvalidRequestError`` (with ``offset``) or ``InvalidMessageError`` (with ``index``/``field``)."""

def fit_request_body(
    body: bytes, budget: int, profile: str, provider: str | None, breadcrumb: bool, pinned: list[int] = ...
) -> bytes:
    """``fit_request``'s new body without its report (the same bytes): old turns that no trim to
    the budget could keep are not estimated. Same errors."""

def json_syntax_error(text: str, one_value: bool = False) -> tuple[int | None, str] | None:
    """``(byte offset, reason)`` of why ``text`` is not one JSON value (``one_value``; the gateway's error on the
    same bytes) or not a sequence of them (JSONL), serde_json, any depth; ``None`` when it is."""

def nests_as_deep(text: str, limit: int) -> bool:
    """Whether the JSON (or JSONL) ``text`` nests ``limit`` levels deep somewhere, from its top (a top-level value is
    level 1); brackets inside strings do not count, a string never closed ends the search."""

def count_request(body: bytes, profile: str, provider: str | None) -> int:
    """Tokens of a raw request body's messages (Anthropic ``system`` included), its tools and
    its structured-output schema."""
