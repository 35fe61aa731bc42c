"""contextwindow: keep an LLM agent's conversation inside the model's context window.

>>> from contextwindow import trim_turns
>>> r = trim_turns([{"role": "user", "content": "hi"}], budget=100)
>>> r.report.fits
True
"""

from __future__ import annotations

from .calibrate import Calibrator
from .errors import (
    ContextOverflowError,
    ContextWindowError,
    InvalidMessageError,
    InvalidRequestError,
    TokenCounterError,
)
from .estimate import (
    FAMILIES,
    PROFILES,
    count_features,
    count_many,
    count_messages,
    estimate_many,
    estimate_tokens,
    message_tokens,
)
from .estimator import Estimator
from .gateway import RequestReport, count_request, fit_request
from .messages import BREADCRUMB, ImagePart, Message, OpaquePart, TextPart, ToolCall, ToolResult
from .pairs import repair_tool_pairs, validate
from .report import Fate, FitReport, PairChange, Segmentation, TrimResult, Violation
from .trim import trim_turn_count, trim_turns
from .turns import segment_turns

__all__ = [
    "BREADCRUMB",
    "FAMILIES",
    "PROFILES",
    "Calibrator",
    "ContextOverflowError",
    "ContextWindowError",
    "Estimator",
    "Fate",
    "FitReport",
    "ImagePart",
    "InvalidMessageError",
    "InvalidRequestError",
    "Message",
    "OpaquePart",
    "PairChange",
    "RequestReport",
    "Segmentation",
    "TextPart",
    "TokenCounterError",
    "ToolCall",
    "ToolResult",
    "TrimResult",
    "Violation",
    "count_features",
    "count_many",
    "count_messages",
    "count_request",
    "estimate_many",
    "estimate_tokens",
    "fit_request",
    "message_tokens",
    "repair_tool_pairs",
    "segment_turns",
    "trim_turn_count",
    "trim_turns",
    "validate",
]

__version__ = "0.1.0"
