"""contextwindow: keep an LLM agent's conversation inside the model's context window.

>>> from contextwindow import trim_turns
>>> r = trim_turns([{"role": "user", "content": "hi"}], budget=100)
>>> r.report.fits
True
"""

from .breakdown import Breakdown, token_breakdown
from .budget import MODELS, Budget, ModelLimits, check_capacity, model_limits, resolve_budget
from .calibrate import Calibrator
from .compact import (
    COMPACTION_NOTICE,
    OUTPUT_HEAVY_TOOLS,
    WRITE_TOOLS,
    budget_tool_results,
    micro_compact,
    prune_middle,
)
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
from .fit import FitPolicy, Recovery, fit, priorities, recover_from_overflow
from .gateway import RequestReport, count_request, fit_request
from .guard import (
    HINTS,
    ContextGuard,
    GuardEvent,
    GuardResult,
    HistoryTrimmed,
    MessageTruncated,
    MiddlePruned,
    OverflowRecovered,
    Stats,
    ToolResultsCleared,
    ToolResultTruncated,
    hint_priorities,
)
from .messages import BREADCRUMB, ImagePart, Message, OpaquePart, TextPart, ToolCall, ToolResult
from .pairs import repair_tool_pairs, validate
from .report import Fate, FitReport, PairChange, Segmentation, TrimResult, Violation
from .trim import trim_turn_count, trim_turns
from .turns import segment_turns

__all__ = [
    "BREADCRUMB",
    "COMPACTION_NOTICE",
    "FAMILIES",
    "HINTS",
    "MODELS",
    "OUTPUT_HEAVY_TOOLS",
    "PROFILES",
    "WRITE_TOOLS",
    "Breakdown",
    "Budget",
    "Calibrator",
    "ContextGuard",
    "ContextOverflowError",
    "ContextWindowError",
    "Estimator",
    "Fate",
    "FitPolicy",
    "FitReport",
    "GuardEvent",
    "GuardResult",
    "HistoryTrimmed",
    "ImagePart",
    "InvalidMessageError",
    "InvalidRequestError",
    "Message",
    "MessageTruncated",
    "MiddlePruned",
    "ModelLimits",
    "OpaquePart",
    "OverflowRecovered",
    "PairChange",
    "Recovery",
    "RequestReport",
    "Segmentation",
    "Stats",
    "TextPart",
    "TokenCounterError",
    "ToolCall",
    "ToolResult",
    "ToolResultTruncated",
    "ToolResultsCleared",
    "TrimResult",
    "Violation",
    "budget_tool_results",
    "check_capacity",
    "count_features",
    "count_many",
    "count_messages",
    "count_request",
    "estimate_many",
    "estimate_tokens",
    "fit",
    "fit_request",
    "hint_priorities",
    "message_tokens",
    "micro_compact",
    "model_limits",
    "priorities",
    "prune_middle",
    "recover_from_overflow",
    "repair_tool_pairs",
    "resolve_budget",
    "segment_turns",
    "token_breakdown",
    "trim_turn_count",
    "trim_turns",
    "validate",
]

__version__ = "0.1.0"
