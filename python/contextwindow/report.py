"""Reports returned by every trimming and repair function (DESIGN.md section 5).

All are msgspec Structs: ``msgspec.json.encode(report)`` gives JSON, and the CLI's
``--json`` prints exactly that.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

__all__ = ["Fate", "PairChange", "FitReport", "TrimResult", "Violation", "Segmentation"]

T = TypeVar("T")


class Fate(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What happened to one input message.

    Attributes:
        index: position in the input list.
        fate: ``"kept"``, ``"dropped"``, ``"truncated"`` or ``"repaired"``.
        rule: the rule that decided it.

            * ``trim_turns`` / ``trim_turn_count``: ``fits``, ``preamble``, ``kept_turn``,
              ``pinned_turn`` (kept because its turn holds a pinned message, where the
              turn would have gone without it: a newer turn was dropped, the turns
              that could go were not enough, or it is older than ``max_turns``),
              ``oldest_turn``, ``oldest_tool_unit``, ``tool_result_shrunk``,
              ``reply_shrunk`` (assistant text after the current request),
              ``request_truncated``, ``turn_limit``, ``breadcrumb_added`` (Anthropic
              shape: the breadcrumb became this message's leading text block).
            * pair repair: ``orphan_result`` (fate ``repaired`` when the message stays,
              ``dropped`` when it goes: an OpenAI tool message), ``emptied_by_repair``,
              ``result_moved``, ``stub_inserted``, ``call_removed``, ``results_reordered``,
              ``placeholder_inserted``.
            * ``fit``: ``preamble``, ``pinned``, ``current_request``, ``open_tool_call``,
              ``thinking_block`` (Anthropic: the newest turn's first assistant message,
              which starts with a thinking block),
              ``priority_override``, ``unpinned_over_share``, ``kept``, ``p1_evicted``,
              ``p2_evicted``, ``p3_evicted`` (the class the message was evicted from).
            * ``budget_tool_results`` / ``micro_compact``: ``message_char_cap``,
              ``tool_result_cut``, ``tool_result_cleared``.
            * ``prune_middle``: ``first_user_message``, ``current_request``,
              ``recent_messages``, ``pinned``, ``thinking_block`` (that message and the
              real user message starting its turn), ``policy_class`` (a class the policy
              never evicts, in :meth:`~contextwindow.ContextGuard.recover`'s middle
              step), ``tool_unit``, ``alternation`` (kept),
              ``middle_pruned``, ``notice_replaced``, ``notice_removed`` (dropped),
              ``notice_added`` (the notice became a text block of this message).
        chars_removed: characters (code points) cut from the message's text.

    >>> Fate(index=0, fate="kept", rule="fits").fate
    'kept'
    """

    index: int
    fate: str
    rule: str
    chars_removed: int = 0


class PairChange(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One change made to tool pairs.

    Attributes:
        kind: ``orphan_result_dropped``, ``result_moved``, ``stub_inserted``,
            ``call_removed``, ``message_dropped``, ``results_reordered`` or
            ``placeholder_inserted`` (Anthropic: a user message repair left without any
            block stays, holding ``RESULTS_REMOVED``, where its going would leave two
            assistant messages side by side, an assistant message first or last).
        index: input index of the message concerned (for ``stub_inserted``, the message
            holding the call).
        call_id: the tool call id concerned, when there is one.

    >>> PairChange(kind="stub_inserted", index=2, call_id="c1").kind
    'stub_inserted'
    """

    kind: str
    index: int
    call_id: str | None = None


class FitReport(msgspec.Struct, frozen=True, kw_only=True):
    """Every decision a trim or repair made.

    Attributes:
        tokens_before: estimated tokens of the input (profile's units: tokens).
        tokens_after: estimated tokens of the output.
        budget: the token budget, ``None`` for count limits and repairs.
        fits: whether ``tokens_after <= budget`` (``True`` without a budget).
        reason: why the output differs from the input, ``None`` when it is the input:
            ``token_budget`` and ``turn_limit`` (``trim_turns``, ``trim_turn_count``),
            ``tool_pairs`` (only pairs were repaired), ``priority_budget`` (``fit``),
            ``context_overflow`` (``recover_from_overflow``), ``tool_result_budget`` and
            ``message_char_cap`` (``budget_tool_results``), ``micro_compact``,
            ``middle_pruned`` (``prune_middle``).
        turns_before: turns in the input (after repair).
        kept_turns: turns kept.
        dropped_turns: whole turns dropped.
        dropped_messages: input messages dropped.
        truncated_messages: input messages whose text was shortened.
        inserted_messages: messages the library inserted (breadcrumb, stub results).
        breadcrumb: whether the breadcrumb was inserted.
        repairs: every tool-pair change.
        fates: one entry per input message, in input order.

    >>> r = FitReport(tokens_before=10, tokens_after=10, budget=20, fits=True, reason=None,
    ...               turns_before=1, kept_turns=1, dropped_turns=0, dropped_messages=0,
    ...               truncated_messages=0, inserted_messages=0, breadcrumb=False,
    ...               repairs=[], fates=[])
    >>> msgspec.json.encode(r)[:20]
    b'{"tokens_before":10,'
    """

    tokens_before: int
    tokens_after: int
    budget: int | None
    fits: bool
    reason: str | None
    turns_before: int
    kept_turns: int
    dropped_turns: int
    dropped_messages: int
    truncated_messages: int
    inserted_messages: int
    breadcrumb: bool
    repairs: list[PairChange]
    fates: list[Fate]


class TrimResult(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """What a trimming function returns.

    Attributes:
        messages: the output, in the same shape as the input (dicts or ``Message``);
            messages that were not changed are the very objects passed in.
        report: the :class:`FitReport`.

    >>> TrimResult(messages=[], report=None).messages
    []
    """

    messages: list[Any]
    report: Any


class Violation(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One violation of a provider's rules, found by ``validate``.

    Attributes:
        index: index of the offending message.
        code: ``orphan_result``, ``duplicate_result``, ``unanswered_call``,
            ``result_after_content``, ``result_outside_tool_message``,
            ``result_outside_user_message``, ``call_outside_assistant``, ``duplicate_call``,
            ``empty_tool_message``, ``first_not_user``, ``not_alternating``,
            ``role_not_allowed``, ``empty_content`` (content the provider refuses as
            empty: an Anthropic message with no content but a final assistant one, a
            text block that is empty or of whitespace only, also in a ``tool_result``
            or the system, OpenAI's ``"tool_calls": []``), ``trailing_whitespace``
            (Anthropic: the final message is an assistant message, a prefill, whose
            last part is text ending in whitespace), ``detail_not_allowed`` (OpenAI:
            an image's ``detail`` other than ``"low"``, ``"high"`` or ``"auto"``),
            ``image_not_allowed`` (OpenAI: an image outside a user message, in another
            role's message or a tool result),
            ``tool_name_not_allowed``, ``call_id_not_allowed`` (Anthropic: a
            ``tool_use`` name not matching ``^[a-zA-Z0-9_-]{1,64}$``, an id not matching
            ``^[a-zA-Z0-9_-]+$``), ``reused_call_id`` (Anthropic: a ``tool_use`` id an
            earlier message already used), ``block_not_allowed`` (Anthropic: a
            ``tool_result``'s content holding a block that belongs in a message only, a
            ``tool_use``, ``tool_result`` or thinking block, one each; OpenAI: a ``file``
            or ``input_audio`` part outside a user message; either: a block of the other
            provider's, read as an unknown one) or (``Message`` structs
            only) ``unwritable_message``: the provider's adapter cannot write the
            message (an OpenAI tool message holding two results, an image with no
            source it takes).
        detail: what is wrong, in words.
        call_id: the tool call id concerned, when there is one.

    >>> Violation(index=3, code="orphan_result", detail="...").code
    'orphan_result'
    """

    index: int
    code: str
    detail: str
    call_id: str | None = None


class Segmentation(msgspec.Struct, frozen=True, kw_only=True):
    """Preamble, turns and tool units of a conversation (DESIGN.md section 4).

    Attributes:
        preamble_end: messages ``[0, preamble_end)`` are the preamble.
        turns: ``(start, end)`` index ranges, end exclusive, in order; they cover every
            message after the preamble.
        units: tool units as sorted message indices (assistant call message and every
            message holding one of its results).
        current_request: index of the last real user message, ``None`` when there is none.

    >>> Segmentation(preamble_end=1, turns=[(1, 3)], units=[], current_request=1).turns
    [(1, 3)]
    """

    preamble_end: int
    turns: list[tuple[int, int]]
    units: list[list[int]]
    current_request: int | None
