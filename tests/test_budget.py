"""resolve_budget, the model table and check_capacity: every rule of DESIGN.md section 6 and
both seeds, with the arithmetic worked out by hand in the comments."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextwindow.budget import (
    MODELS,
    Budget,
    ModelLimits,
    ReserveError,
    check_capacity,
    checked_budget,
    model_limits,
    resolve_budget,
)
from contextwindow.errors import ContextOverflowError, ContextWindowError


def rule_ids(b: Budget) -> list[str]:
    return [r.split(":", 1)[0] for r in b.rules]


# --- first seed: defaults, environment, floor ---------------------------------------------


def test_defaults_are_the_first_seeds() -> None:
    b = resolve_budget(env={})
    # 128,000 - 64,000 = 64,000
    assert (b.context_window, b.max_output_tokens, b.capacity, b.target, b.usable) == (
        128_000,
        64_000,
        64_000,
        64_000,
        64_000,
    )
    assert b.trim_enabled and not b.capacity_known and b.floor == 4_000
    assert rule_ids(b) == ["window_default_128000", "output_default_64000", "target_window_minus_output"]


def test_environment_is_read_when_no_argument_or_model() -> None:
    env = {"LLM_CONTEXT_SIZE": "32768", "LLM_MAX_OUTPUT_TOKENS": "4096"}
    b = resolve_budget(env=env)
    # 32,768 - 4,096 = 28,672
    assert (b.context_window, b.max_output_tokens, b.usable) == (32_768, 4_096, 28_672)
    assert b.capacity_known
    assert rule_ids(b)[:2] == ["window_from_env", "output_from_env"]
    # one variable alone: the other number keeps its default. 200,000 - 64,000 = 136,000
    assert resolve_budget(env={"LLM_CONTEXT_SIZE": " 200_000 "}).usable == 136_000


def test_precedence_argument_then_model_then_env_then_default() -> None:
    env = {"LLM_CONTEXT_SIZE": "50000", "LLM_MAX_OUTPUT_TOKENS": "1000"}
    # arguments win over the model table and the environment: 90,000 - 10,000
    b = resolve_budget(90_000, 10_000, model="gpt-4o", env=env)
    assert (b.context_window, b.max_output_tokens, b.usable) == (90_000, 10_000, 80_000)
    # the model table (per-model configuration) wins over the environment: 128,000 - 16,384
    b = resolve_budget(model="gpt-4o", env=env)
    assert (b.context_window, b.max_output_tokens, b.usable) == (128_000, 16_384, 111_616)
    assert rule_ids(b)[:2] == ["window_from_model", "output_from_model"]
    # each number separately: window from the argument, output from the model
    b = resolve_budget(100_000, model="gpt-4o", env=env)
    assert (b.context_window, b.max_output_tokens) == (100_000, 16_384)
    # a model without a published output limit takes the environment's: 131,072 - 1,000
    b = resolve_budget(model="mistral-large-latest", env=env)
    assert (b.context_window, b.max_output_tokens, b.usable) == (131_072, 1_000, 130_072)
    # ... and the 64,000 default without one: 131,072 - 64,000 = 67,072
    assert resolve_budget(model="mistral-large-latest", env={}).usable == 67_072


@pytest.mark.parametrize(
    ("env", "var"),
    [
        ({"LLM_CONTEXT_SIZE": "128k"}, "LLM_CONTEXT_SIZE"),
        ({"LLM_CONTEXT_SIZE": "128,00"}, "LLM_CONTEXT_SIZE"),
        ({"LLM_CONTEXT_SIZE": "0"}, "LLM_CONTEXT_SIZE"),
        ({"LLM_CONTEXT_SIZE": "-5"}, "LLM_CONTEXT_SIZE"),
        ({"LLM_MAX_OUTPUT_TOKENS": "1.5"}, "LLM_MAX_OUTPUT_TOKENS"),
        ({"LLM_MAX_OUTPUT_TOKENS": "-1"}, "LLM_MAX_OUTPUT_TOKENS"),
    ],
)
def test_bad_environment_names_the_variable(env: dict[str, str], var: str) -> None:
    with pytest.raises(ValueError, match=var):
        resolve_budget(env=env)


def test_environment_integer_past_pythons_digit_limit_is_named_as_such() -> None:
    """fresh22 #4: an integer of 5,000 digits was "not an integer number of tokens"; it is
    one, which ``int`` refuses only for Python's digit limit (4,300 by default)."""
    with pytest.raises(ValueError, match=r"LLM_CONTEXT_SIZE is an integer of more digits than Python reads \(4,300\)"):
        resolve_budget(env={"LLM_CONTEXT_SIZE": "9" * 5_000})
    with pytest.raises(ValueError, match="must be an integer number of tokens"):  # not digits: as before
        resolve_budget(env={"LLM_CONTEXT_SIZE": "9" * 5_000 + "k"})
    assert resolve_budget(env={"LLM_CONTEXT_SIZE": "9" * 40}).context_window == 10**40 - 1


def test_blank_environment_counts_as_unset() -> None:
    assert resolve_budget(env={"LLM_CONTEXT_SIZE": "", "LLM_MAX_OUTPUT_TOKENS": "  "}).usable == 64_000
    # Python's digit separator: 100,000 - 36,000 = 64,000
    assert resolve_budget(env={"LLM_CONTEXT_SIZE": "100_000", "LLM_MAX_OUTPUT_TOKENS": "36_000"}).usable == 64_000


def test_environment_sets_a_number_only_when_it_decides() -> None:
    env = {"LLM_CONTEXT_SIZE": "50000", "LLM_MAX_OUTPUT_TOKENS": "1000"}
    # arguments decide both numbers: 10,000 - 1,000
    assert resolve_budget(10_000, 1_000, env=env).usable == 9_000
    # the model table decides both: 128,000 - 16,384 = 111,616
    assert resolve_budget(model="gpt-4o", env=env).usable == 111_616


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {"model": "gpt-4o"}),  # the table decides the reserve (16,384)
        ((), {"model": "nope-1"}),  # unknown model: the variable would decide it
        ((10_000, 1_000), {}),  # arguments decide both numbers
        ((), {"model": "mistral-large"}),  # the table decides the window only
        ((), {}),  # nothing else decides: the variable does
    ],
)
def test_a_malformed_output_variable_is_the_same_error_whatever_decides(args: tuple, kwargs: dict) -> None:
    # fresh12 O3: with a known model LLM_MAX_OUTPUT_TOKENS=abc was silently ignored, with
    # an unknown one it was an error; the environment is the user's explicit setting
    want = "environment variable LLM_MAX_OUTPUT_TOKENS must be an integer number of tokens, got 'abc'"
    with pytest.raises(ValueError) as got:
        resolve_budget(*args, env={"LLM_MAX_OUTPUT_TOKENS": "abc"}, **kwargs)
    assert str(got.value) == want
    with pytest.raises(ValueError) as got:
        resolve_budget(*args, env={"LLM_MAX_OUTPUT_TOKENS": "-1"}, **kwargs)
    assert str(got.value) == "environment variable LLM_MAX_OUTPUT_TOKENS must be >= 0, got '-1'"
    # the window's variable too: LLM_CONTEXT_SIZE=128k
    with pytest.raises(ValueError) as got:
        resolve_budget(*args, env={"LLM_CONTEXT_SIZE": "128k"}, **kwargs)
    assert str(got.value) == "environment variable LLM_CONTEXT_SIZE must be an integer number of tokens, got '128k'"


def test_environment_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_CONTEXT_SIZE", "20000")
    monkeypatch.setenv("LLM_MAX_OUTPUT_TOKENS", "5000")
    assert resolve_budget().usable == 15_000  # 20,000 - 5,000
    assert resolve_budget(env={}).usable == 64_000  # env={} ignores it


def test_floor_raises_a_too_small_budget() -> None:
    b = resolve_budget(10_000, 2_000, tool_schema_tokens=3_000, safety_margin=2_000, env={})
    # 10,000 - 2,000 = 8,000 capacity; 8,000 - 3,000 - 2,000 = 3,000 < 4,000 -> floor 4,000;
    # room for messages = 8,000 - 3,000 = 5,000 >= 4,000, so 4,000 stands
    assert (b.capacity, b.target, b.usable) == (8_000, 8_000, 4_000)
    assert "floor" in rule_ids(b)
    # a custom floor: 3,000 < 3,500 -> 3,500
    assert resolve_budget(10_000, 2_000, tool_schema_tokens=3_000, safety_margin=2_000, floor=3_500).usable == 3_500


def test_floor_never_lifts_past_the_capacity() -> None:
    # 6,000 - 4,000 = 2,000 capacity; floor 4,000 would exceed it -> 2,000
    b = resolve_budget(6_000, 4_000, env={})
    assert (b.capacity, b.usable) == (2_000, 2_000)
    assert rule_ids(b)[-2:] == ["floor", "floor_capped_by_capacity"]
    # tool schemas bigger than the capacity leave 0 for messages, never a negative number
    assert resolve_budget(6_000, 4_000, tool_schema_tokens=2_500, env={}).usable == 0


def test_tool_schemas_and_margin_are_subtracted() -> None:
    b = resolve_budget(200_000, 8_192, tool_schema_tokens=1_234, safety_margin=1_000, env={})
    # 200,000 - 8,192 - 1,234 - 1,000 = 189,574
    assert (b.capacity, b.target, b.usable) == (191_808, 191_808, 189_574)
    assert "tools_and_margin: usable=189574 (191808 - 1234 - 1000)" in b.rules


def test_reserve_larger_than_window_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match=r"max_output_tokens=64,000 is larger than the context window 32,768"):
        resolve_budget(32_768, env={})  # the 64,000 default reserve
    with pytest.raises(ValueError, match=r"9,000 .* 8,000"):
        resolve_budget(8_000, 9_000, env={})
    with pytest.raises(ValueError, match="LLM_MAX_OUTPUT_TOKENS"):
        resolve_budget(env={"LLM_CONTEXT_SIZE": "1000", "LLM_MAX_OUTPUT_TOKENS": "2000"})
    # equal is refused too (fresh11 N4: the CLI ran with capacity 0, then "DOES NOT FIT"):
    # no token is left for the input
    with pytest.raises(ValueError) as info:
        resolve_budget(8_000, 8_000, env={})
    assert str(info.value) == (
        "output reserve max_output_tokens=8,000 is as large as the context window 8,000 (no token left for"
        " the input): set a smaller max_output_tokens (or LLM_MAX_OUTPUT_TOKENS) or the real window"
    )
    with pytest.raises(ValueError, match=r"max_output_tokens=64,000 is as large as the context window 64,000"):
        resolve_budget(64_000, env={})  # the 64,000 default reserve
    # one token of capacity is the least: 8,000 - 7,999 = 1; usable 1 (the floor cannot lift it)
    b = resolve_budget(8_000, 7_999, env={})
    assert (b.capacity, b.usable) == (1, 1)


# --- second seed: max_context_tokens, compact_ratio, caps, fallback ------------------------


def test_max_context_tokens_zero_disables_proactive_trimming() -> None:
    b = resolve_budget(model="gpt-4o", max_context_tokens=0, env={})
    assert not b.trim_enabled
    # the capacity check still has its numbers: 128,000 - 16,384 = 111,616
    assert (b.capacity, b.target, b.usable) == (111_616, 111_616, 111_616)
    assert "trim_disabled" in rule_ids(b)
    # the sentinel stays zero with a ratio or history cap beside it
    b = resolve_budget(model="gpt-4o", max_context_tokens=0, compact_ratio=0.5, history_cap=1_000, env={})
    assert not b.trim_enabled and b.target == 111_616 and "compact_ratio_ignored" in rule_ids(b)


def test_max_context_tokens_is_an_absolute_budget() -> None:
    b = resolve_budget(model="claude-sonnet-4", max_context_tokens=50_000, env={})
    # 200,000 - 64,000 = 136,000 capacity; 50,000 < 136,000 stands
    assert (b.capacity, b.target, b.usable) == (136_000, 50_000, 50_000)
    assert "target_max_context_tokens" in rule_ids(b)


def test_compact_ratio_of_the_window() -> None:
    b = resolve_budget(model="claude-sonnet-4", compact_ratio=0.5, env={})
    # floor(200,000 * 0.5) = 100,000 <= capacity 136,000
    assert (b.target, b.usable) == (100_000, 100_000)
    # the ratio's decimal value: 200,000 * 0.7 = 140,000 exactly (binary 0.7 would give
    # 139,999.99...), then capped by the capacity 136,000
    b = resolve_budget(model="claude-sonnet-4", compact_ratio=0.7, env={})
    assert b.target == 136_000 and rule_ids(b)[-1] == "capped_by_capacity"
    assert "target_compact_ratio: target=140000 (floor(200000 * 0.7))" in b.rules
    # 1 is in range: floor(128,000 * 1) = 128,000 -> capped to 128,000 - 16,384 = 111,616
    assert resolve_budget(model="gpt-4o", compact_ratio=1, env={}).usable == 111_616
    # floor(128,000 * 0.333) = 42,624
    assert resolve_budget(model="gpt-4o", compact_ratio=0.333, env={}).usable == 42_624


@pytest.mark.parametrize("ratio", [0, 0.0, -0.5, 1.0000001, 2, math.nan, math.inf])
def test_compact_ratio_out_of_range_counts_as_unset(ratio: float) -> None:
    b = resolve_budget(model="gpt-4o", compact_ratio=ratio, env={})
    # as if unset: 128,000 - 16,384 = 111,616
    assert b.usable == 111_616
    assert "compact_ratio_ignored" in rule_ids(b) and "target_compact_ratio" not in rule_ids(b)
    # and it does not make an undeclared window fall back to 32,000
    assert resolve_budget(compact_ratio=ratio, env={}).context_window == 128_000


def test_both_set_max_context_tokens_caps_the_ratio_from_above() -> None:
    # floor(200,000 * 0.5) = 100,000; capped by 60,000
    b = resolve_budget(model="claude-sonnet-4", compact_ratio=0.5, max_context_tokens=60_000, env={})
    assert b.target == 60_000 and rule_ids(b)[-1] == "target_capped_by_max_context_tokens"
    # a cap above the ratio budget changes nothing: 100,000 < 150,000
    b = resolve_budget(model="claude-sonnet-4", compact_ratio=0.5, max_context_tokens=150_000, env={})
    assert b.target == 100_000


def test_everything_is_capped_by_the_capacity() -> None:
    # max_context_tokens 1,000,000 > 128,000 - 16,384 = 111,616
    b = resolve_budget(model="gpt-4o", max_context_tokens=1_000_000, env={})
    assert (b.target, b.usable) == (111_616, 111_616) and rule_ids(b)[-1] == "capped_by_capacity"
    # a history cap larger than the capacity does not raise it either
    assert resolve_budget(model="gpt-4o", history_cap=500_000, env={}).usable == 111_616


def test_fallback_32000_when_the_capacity_is_unknown() -> None:
    b = resolve_budget(model="acme-llm-9000", env={})
    # unknown model: 32,000 stands in for the window; no output is reserved against it
    assert (b.context_window, b.max_output_tokens, b.usable) == (32_000, 0, 32_000)
    assert not b.capacity_known
    assert rule_ids(b)[:3] == ["model_unknown", "window_fallback_32000", "output_none_reserved"]
    # a ratio with no declared window is taken of the 32,000: floor(32,000 * 0.25) = 8,000
    b = resolve_budget(compact_ratio=0.25, env={})
    assert (b.context_window, b.target) == (32_000, 8_000)
    # an explicit output reserve still counts: 32,000 - 4,000 = 28,000
    assert resolve_budget(model="acme-llm-9000", max_output_tokens=4_000, env={}).usable == 28_000
    # the environment declares a window for an unknown model
    b = resolve_budget(model="acme-llm-9000", env={"LLM_CONTEXT_SIZE": "100000"})
    assert (b.context_window, b.capacity_known, b.usable) == (100_000, True, 36_000)  # 100,000 - 64,000


def test_positive_max_context_tokens_without_window_is_honoured_as_is() -> None:
    # not lowered to 32,000: 50,000 is the budget and the window
    b = resolve_budget(model="acme-llm-9000", max_context_tokens=50_000, env={})
    assert (b.context_window, b.max_output_tokens, b.target, b.usable) == (50_000, 0, 50_000, 50_000)
    assert "window_from_max_context_tokens" in rule_ids(b)
    # no model at all: the same, 200,000 is honoured (not cut to the 128,000 default)
    b = resolve_budget(max_context_tokens=200_000, env={})
    assert (b.context_window, b.usable) == (200_000, 200_000)
    # the ratio is then applied to it: floor(50,000 * 0.5) = 25,000
    b = resolve_budget(model="acme-llm-9000", max_context_tokens=50_000, compact_ratio=0.5, env={})
    assert b.target == 25_000


def test_history_cap_only_lowers() -> None:
    b = resolve_budget(model="gpt-4o", history_cap=30_000, env={})
    # 30,000 < 111,616 -> 30,000
    assert b.target == 30_000 and "history_cap" in rule_ids(b)
    # 0 and None mean no cap; a cap above the target is recorded and ignored
    zero = resolve_budget(model="gpt-4o", history_cap=0, env={})
    assert zero.target == 111_616
    assert "history_cap_ignored: 0 is no cap (only a positive value lowers the target)" in zero.rules
    b = resolve_budget(model="gpt-4o", max_context_tokens=20_000, history_cap=25_000, env={})
    assert b.target == 20_000 and "history_cap_ignored" in rule_ids(b)
    # it lowers the ratio budget too: floor(128,000 * 0.5) = 64,000 -> 10,000
    assert resolve_budget(model="gpt-4o", compact_ratio=0.5, history_cap=10_000, env={}).target == 10_000


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"context_window": "128000"}, TypeError),
        ({"context_window": 0}, ValueError),
        ({"context_window": True}, TypeError),
        ({"max_output_tokens": -1}, ValueError),
        ({"tool_schema_tokens": -1}, ValueError),
        ({"safety_margin": 1.5}, TypeError),
        ({"floor": -1}, ValueError),
        ({"max_context_tokens": -1}, ValueError),
        ({"history_cap": -1}, ValueError),
        ({"compact_ratio": "0.5"}, TypeError),
        ({"compact_ratio": True}, TypeError),
        ({"model": ""}, ValueError),  # the right type, a bad value (fresh9 D3)
        ({"model": 4}, TypeError),
        ({"env": ["LLM_CONTEXT_SIZE"]}, TypeError),
    ],
)
def test_bad_options_raise_typed_errors(kwargs: dict[str, object], exc: type[Exception]) -> None:
    kwargs.setdefault("env", {})
    with pytest.raises(exc):
        resolve_budget(**kwargs)  # type: ignore[arg-type]


@given(
    window=st.integers(1, 3_000_000),
    output_share=st.floats(0, 1),
    tools=st.integers(0, 200_000),
    margin=st.integers(0, 50_000),
    floor=st.integers(0, 100_000),
    mct=st.none() | st.integers(0, 3_000_000),
    ratio=st.none() | st.floats(-1, 2) | st.just(math.nan),
    cap=st.none() | st.integers(0, 3_000_000),
)
def test_usable_never_exceeds_capacity_and_is_never_negative(
    window: int,
    output_share: float,
    tools: int,
    margin: int,
    floor: int,
    mct: int | None,
    ratio: float | None,
    cap: int | None,
) -> None:
    # a reserve as large as the window is refused (see the configuration error test)
    output = min(int(window * output_share), window - 1)
    b = resolve_budget(
        window,
        output,
        tool_schema_tokens=tools,
        safety_margin=margin,
        floor=floor,
        max_context_tokens=mct,
        compact_ratio=ratio,
        history_cap=cap,
        env={},
    )
    assert 0 <= b.usable <= window - output
    assert b.usable + tools <= window - output or b.usable == 0
    assert b.target <= b.capacity == window - output


# --- model table ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "window", "output"),
    [
        ("gpt-4o", 128_000, 16_384),
        ("GPT-4o", 128_000, 16_384),
        ("gpt-4o-2024-08-06", 128_000, 16_384),
        ("gpt-4o-2024-05-13", 128_000, 4_096),  # its own entry beats the stripped name
        ("openai/gpt-4o-mini-2024-07-18", 128_000, 16_384),
        ("gpt-4.1-mini-2025-04-14", 1_047_576, 32_768),
        ("o4-mini-2025-04-16", 200_000, 100_000),
        ("gpt-5", 400_000, 128_000),
        ("anthropic/claude-3-5-sonnet-20241022", 200_000, 8_192),
        ("claude-3-7-sonnet-latest", 200_000, 64_000),
        ("claude-sonnet-4-20250514", 200_000, 64_000),
        ("claude-opus-4-1-20250805", 200_000, 32_000),
        ("claude-3-5-haiku@20241022", 200_000, 8_192),
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", 200_000, 64_000),
        ("mistral/mistral-small-2501", 32_768, None),
        ("meta-llama/Llama-3.3-70B-Instruct", 131_072, None),
        ("models/gemini-1.5-pro-002", 2_097_152, 8_192),
        ("google/gemini-2.5-flash", 1_048_576, 65_536),
    ],
)
def test_model_lookup_variants(name: str, window: int, output: int | None) -> None:
    assert model_limits(name) == ModelLimits(window, output)


def test_unknown_models_are_none() -> None:
    assert model_limits("acme-llm-9000") is None
    assert model_limits("gpt-4o-audio") is None  # no prefix matching: a different model
    assert model_limits("mistral-small-2409") is None  # not listed, not guessed


def test_caller_models_merge_over_the_table() -> None:
    mine = {
        "GPT-4o": ModelLimits(64_000, 4_000),
        "acme-llm-9000": {"context_window": 8_192, "max_output_tokens": 1_024},
    }
    assert model_limits("gpt-4o", mine) == ModelLimits(64_000, 4_000)
    assert model_limits("openai/gpt-4o", mine) == ModelLimits(64_000, 4_000)
    assert model_limits("acme-llm-9000-2025-01-01", mine) == ModelLimits(8_192, 1_024)
    assert model_limits("gpt-4o-mini", mine) == MODELS["gpt-4o-mini"]  # the rest unchanged
    b = resolve_budget(model="acme-llm-9000", models=mine, env={})
    # 8,192 - 1,024 = 7,168
    assert (b.usable, b.capacity_known) == (7_168, True)
    assert "gpt-4o" in MODELS and MODELS["gpt-4o"] == ModelLimits(128_000, 16_384)  # not mutated


def test_bad_models_entries() -> None:
    with pytest.raises(TypeError, match="models\\['x'\\]"):
        model_limits("x", {"x": (1, 2)})
    with pytest.raises(ValueError, match="context_window must be a positive int"):
        model_limits("x", {"x": ModelLimits(0, 0)})
    with pytest.raises(TypeError):
        model_limits("x", {"x": {"context_window": "big"}})
    with pytest.raises(TypeError):
        model_limits(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        model_limits("x", [("x", ModelLimits(1, 0))])  # type: ignore[arg-type]


def test_table_is_consistent() -> None:
    for name, lim in MODELS.items():
        assert name == name.lower() and lim.context_window > 0
        assert lim.max_output_tokens is None or 0 < lim.max_output_tokens < lim.context_window
        assert model_limits(name) is lim


# --- check_capacity ------------------------------------------------------------------------


def test_check_capacity_raises_with_the_numbers() -> None:
    b = resolve_budget(model="gpt-4o", tool_schema_tokens=1_000, env={})
    # capacity 128,000 - 16,384 = 111,616; 110,616 + 1,000 tools = 111,616 fits exactly
    assert check_capacity(110_616, b) == 0
    with pytest.raises(ContextOverflowError) as info:
        check_capacity(110_617, b)
    err = info.value
    # 110,617 + 1,000 = 111,617 = 1 over
    assert (err.tokens, err.capacity, err.over) == (111_617, 111_616, 1)
    assert isinstance(err, ContextWindowError)
    assert "111,617 tokens does not fit the model's capacity of 111,616" in str(err)


def test_check_capacity_applies_with_trimming_disabled() -> None:
    b = resolve_budget(model="claude-sonnet-4", max_context_tokens=0, env={})
    assert not b.trim_enabled
    # 200,000 - 64,000 = 136,000 capacity; 140,000 is 4,000 over
    with pytest.raises(ContextOverflowError) as info:
        check_capacity(140_000, b)
    assert info.value.over == 4_000
    # a trimming target below the capacity is not the limit: 100,000 > target 50,000 is fine
    b = resolve_budget(model="claude-sonnet-4", max_context_tokens=50_000, env={})
    assert check_capacity(100_000, b) == 36_000  # 136,000 - 100,000


def test_check_capacity_with_a_bare_window() -> None:
    # 8,192 - 1,024 - 7,000 - 100 = 68
    assert check_capacity(7_000, 8_192, max_output_tokens=1_024, tool_schema_tokens=100) == 68
    with pytest.raises(ContextOverflowError) as info:
        check_capacity(8_193, 8_192)
    assert (info.value.tokens, info.value.capacity, info.value.over) == (8_193, 8_192, 1)
    with pytest.raises(ValueError, match="larger than the context window"):
        check_capacity(1, 100, max_output_tokens=200)
    # the same rule as resolve_budget's: a reserve as large as the window leaves no room
    with pytest.raises(ValueError) as info:
        check_capacity(0, 100, max_output_tokens=100)
    assert str(info.value) == (
        "output reserve max_output_tokens=100 is as large as the context window 100 (no token left for the input)"
    )
    assert check_capacity(1, 100, max_output_tokens=99) == 0  # 100 - 99 - 1
    with pytest.raises(ValueError):
        check_capacity(-1, 100)
    with pytest.raises(ValueError):
        check_capacity(1.5, 100)  # type: ignore[arg-type]
    # an explicit tool count replaces the budget's
    b = resolve_budget(10_000, 0, tool_schema_tokens=5_000, env={})
    assert check_capacity(1_000, b, tool_schema_tokens=0) == 9_000
    assert check_capacity(1_000, b) == 4_000


def test_check_capacity_number_options_follow_the_readme_rule() -> None:
    """fresh13 N2: a number option that is not an int in range is a ValueError naming it,
    a string, a bool or a float as much as a negative number (fit and trim_turns say the
    same); with a Budget a bad ``max_output_tokens`` is refused too, not ignored."""
    b = resolve_budget(context_window=1_000, max_output_tokens=200, env={})
    cases = [
        (lambda: check_capacity(10, "100"), "budget must be a Budget or an int >= 1, got '100'"),
        (lambda: check_capacity(10, True), "budget must be a Budget or an int >= 1, got True"),
        (lambda: check_capacity(10, 0), "budget must be a Budget or an int >= 1, got 0"),
        (lambda: check_capacity("10", 100), "tokens must be an int >= 0, got '10'"),
        (lambda: check_capacity(-1, 100), "tokens must be an int >= 0, got -1"),
        (lambda: check_capacity(1.5, 100), "tokens must be an int >= 0, got 1.5"),
        (lambda: check_capacity(10, 100, max_output_tokens=False), "max_output_tokens must be an int >= 0, got False"),
        (lambda: check_capacity(10, 100, tool_schema_tokens="5"), "tool_schema_tokens must be an int >= 0, got '5'"),
        (lambda: check_capacity(10, b, max_output_tokens="x"), "max_output_tokens must be an int >= 0, got 'x'"),
        (lambda: check_capacity(10, b, max_output_tokens=-1), "max_output_tokens must be an int >= 0, got -1"),
        (lambda: check_capacity(10, b, tool_schema_tokens=2.0), "tool_schema_tokens must be an int >= 0, got 2.0"),
    ]
    for call, text in cases:
        with pytest.raises(ValueError) as got:
            call()  # type: ignore[no-untyped-call]
        assert not isinstance(got.value, TypeError)
        assert str(got.value) == text
    # a valid reserve next to a Budget is still the Budget's to decide (documented: ignored)
    assert check_capacity(10, b, max_output_tokens=5_000) == check_capacity(10, b) == 790


def test_an_object_with_usable_is_read_alike_by_every_entry() -> None:
    """fresh13 N3: an object with a ``usable`` attribute (the documented "object with an
    int ``usable``") was read by fit (clamped), prune_middle (not clamped, and its error
    text named only a Budget) and recover_from_overflow, each with other words for a bad
    ``usable``. The token-budget entries now read it alike: ``usable`` an int >= 0, above
    2**63 - 1 read as no limit (as an int budget is, trim_turns and fit alike); the
    entries that need the whole Budget (ContextGuard, check_capacity) refuse it, saying so."""
    import types

    import contextwindow as cw

    msgs = [{"role": "user", "content": "hi"}]
    token_entries = {
        "fit": lambda b: cw.fit(msgs, b).report.budget,
        "prune_middle": lambda b: cw.prune_middle(msgs, b).report.budget,
        # fresh44 note: trim_turns refused a Budget (an int only)
        "trim_turns": lambda b: cw.trim_turns(msgs, b).report.budget,
        # its report's budget is the target: the usable budget shows in the ratio's target
        "recover_from_overflow": lambda b: cw.recover_from_overflow(long, 2**64, budget=b).target,
    }
    long = [{"role": "user", "content": "hi " * 5_000}]
    # 4,902 tokens; a budget of 50 under the reported count: 4,902 x 50 // 2**64 = 0, below
    # the request cut to its marker, so raised to the smallest target at which the request
    # is cut (fresh22 #2): fit leaves it whole at 19 and cuts it at 20, to "h" and its
    # marker (the marker alone, 19 tokens, keeps none of the request's text, a cut never
    # made: fresh32 #1); no limit: the reported count (read as 2**63 - 1 too) is not over
    # it, the two-thirds rule: 3,268
    assert cw.fit(long, 19).report.tokens_after == 4_902 and cw.fit(long, 20).report.tokens_after == 20
    assert token_entries["recover_from_overflow"](50) == 20
    assert token_entries["recover_from_overflow"](10**30) == 3_268
    huge = types.SimpleNamespace(usable=10**30, context_window=0, capacity=-3)
    for name, call in token_entries.items():
        if name != "recover_from_overflow":
            assert call(types.SimpleNamespace(usable=50)) == call(50) == 50, name
            assert call(huge) == call(10**30) == 2**63 - 1, name
        assert call(types.SimpleNamespace(usable=50)) == call(50), name
        assert call(huge) == call(10**30) == call(2**63 - 1), name
        for bad, shown in (("5", "'5'"), (-1, "-1"), (1.5, "1.5"), (True, "True"), (None, "None")):
            with pytest.raises(ValueError) as got:
                call(types.SimpleNamespace(usable=bad))
            assert not isinstance(got.value, TypeError)
            assert str(got.value) == f"budget.usable must be a non-negative int, got {shown}", (name, bad)
    # a Budget from resolve_budget, as fit takes it: trim_turns gives the same trim as for
    # its usable
    b = cw.resolve_budget(context_window=1_000, max_output_tokens=800, env={}, floor=0)
    talk = [*long, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "new"}]
    assert b.usable == 200
    assert cw.trim_turns(talk, b) == cw.trim_turns(talk, 200)
    assert cw.trim_turns(talk, b).report.budget == 200
    # fit's words for a budget that is neither, since trim_turns takes a usable too
    # (fresh46 #3: its own words named no usable)
    for bad, shown in (("5", "'5'"), (object(), "<object object at "), (-1, "-1"), (True, "True")):
        with pytest.raises(
            ValueError, match=rf"^budget must be a non-negative int or have an int 'usable', got {shown}"
        ):
            cw.trim_turns(msgs, bad)
    # the text of a budget that is neither: prune_middle's names None too, and what it takes
    with pytest.raises(ValueError) as got:
        cw.fit(msgs, "5")
    assert str(got.value) == "budget must be a non-negative int or have an int 'usable', got '5'"
    with pytest.raises(ValueError) as got:
        cw.prune_middle(msgs, "5")
    assert str(got.value) == "budget must be None, a non-negative int or have an int 'usable', got '5'"
    want = (
        "budget must be a Budget from resolve_budget, got SimpleNamespace (an object with 'usable' is"
        " a token budget for fit, recover_from_overflow and prune_middle; this needs the window and reserve too)"
    )
    for call in (lambda: cw.ContextGuard(huge), lambda: check_capacity(1, huge)):
        with pytest.raises(TypeError) as got:
            call()  # type: ignore[no-untyped-call]
        assert str(got.value) == want


def test_guard_refuses_a_number_for_budget_and_says_what_to_pass() -> None:
    # fresh25 #3: the README's fit takes a number; the guard needs the window and reserve
    import contextwindow as cw

    want = (
        "budget must be a Budget from resolve_budget, got int (a number is a token budget for fit, trim_turns"
        " and the gateway; this needs the window and the output reserve too: pass"
        " resolve_budget(context_window=..., max_output_tokens=...), or those keywords)"
    )
    with pytest.raises(TypeError) as got:
        cw.ContextGuard(5000)  # type: ignore[arg-type]
    assert str(got.value) == want
    guard = cw.ContextGuard(context_window=5000, max_output_tokens=1000)
    assert (guard.budget.context_window, guard.budget.usable) == (5000, 4000)


def test_budget_serializes() -> None:
    import msgspec

    b = resolve_budget(model="gpt-4o", env={})
    assert msgspec.json.decode(msgspec.json.encode(b), type=Budget) == b


def test_a_bare_preview_suffix_is_another_model() -> None:
    # o1-preview is not o1 (128,000 / 32,768 vs 200,000 / 100,000, OpenAI's model pages);
    # only Gemini's dated "-preview-MM-DD" is stripped. Found by a new user.
    assert model_limits("o1-preview") == ModelLimits(128_000, 32_768)
    assert model_limits("o3-preview") is None
    assert model_limits("gemini-2.5-pro-preview-05-06") == model_limits("gemini-2.5-pro")
    assert resolve_budget(model="o1-preview", env={}).usable == 128_000 - 32_768


def test_openai_preview_aliases_are_listed() -> None:
    """fresh20a F3: the model_limits docstring listed ``-preview`` among the suffixes
    stripped, but only Gemini's ``-preview-MM-DD`` is (a bare one can be another model:
    o1-preview). gpt-4-turbo-preview, OpenAI's alias of gpt-4-0125-preview, fell through
    to the 32,000 guess; the real preview aliases are now in the table (128,000 / 4,096,
    OpenAI's model pages), and an unlisted bare preview is still not guessed."""
    turbo = ModelLimits(128_000, 4_096)
    for name in ("gpt-4-turbo-preview", "openai/gpt-4-turbo-preview", "gpt-4-0125-preview", "GPT-4-1106-preview"):
        assert model_limits(name) == turbo, name
    assert model_limits("gpt-4-turbo-preview") == model_limits("gpt-4-turbo")
    b = resolve_budget(model="gpt-4-turbo-preview", env={})
    assert b.capacity_known and (b.context_window, b.max_output_tokens, b.usable) == (128_000, 4_096, 123_904)
    assert model_limits("gpt-4o-mini-preview") is None and model_limits("o3-preview") is None
    assert "``-preview``)" not in (model_limits.__doc__ or "")


def test_legacy_chat_models_are_in_the_table() -> None:
    # gpt-4: 8,192 shared by prompt and output, no published output limit; the first
    # seed's 64,000 default reserve would swallow the window, so half of it is reserved
    b = resolve_budget(model="gpt-4", env={})
    assert (b.max_output_tokens, b.usable) == (4_096, 4_096)
    assert b.rules[1] == "output_half_window: max_output_tokens=4096 (gpt-4 publishes no output limit)"
    assert resolve_budget(model="gpt-4", max_output_tokens=1_000, env={}).usable == 7_192
    assert resolve_budget(model="openai/gpt-3.5-turbo", env={}).usable == 16_385 - 4_096


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_table_model_resolves_with_defaults(name: str) -> None:
    # found by a new user: gpt-4 was in the table yet could not be resolved
    b = resolve_budget(model=name, env={})
    limits = MODELS[name]
    assert b.context_window == limits.context_window and b.capacity_known
    assert 0 < b.usable <= b.capacity
    if limits.max_output_tokens is None:
        # 64,000 (first seed) unless that is over half the window: mistral-large 131,072
        # keeps 64,000; mistral-small-2501 32,768 reserves 16,384
        half = limits.context_window // 2
        assert b.max_output_tokens == (64_000 if 64_000 <= half else half)


def test_an_empty_model_name_is_a_value_error() -> None:
    """fresh9 D3: ``model=""`` is the right type with a bad value: ValueError, as the
    README's rule for options says (a window of the wrong type stays a TypeError), and a
    name that is not a str a TypeError. ContextGuard, which resolves through it, agrees."""
    import contextwindow as cw

    for model in ("", "   "):
        with pytest.raises(ValueError) as info:
            resolve_budget(model=model)
        assert not isinstance(info.value, TypeError)
        assert str(info.value) == f"model must be a non-empty str, got {model!r}"
        with pytest.raises(ValueError, match=r"^model must be a non-empty str"):
            cw.ContextGuard(model=model)
    with pytest.raises(TypeError) as err:
        resolve_budget(model=5)  # type: ignore[arg-type]
    assert str(err.value) == "model must be a str, got int"


# --- a hand-built Budget: every entry that takes one refuses what resolve_budget refuses ----


def _hand_budget(**over: object) -> Budget:
    # a consistent one: 1,000 - 200 = capacity 800; usable 700 <= 800 - 50 tool tokens
    fields: dict[str, object] = dict(
        context_window=1_000,
        max_output_tokens=200,
        tool_schema_tokens=50,
        safety_margin=0,
        capacity=800,
        target=750,
        usable=700,
        floor=0,
        trim_enabled=True,
        capacity_known=True,
    )
    fields.update(over)
    return Budget(**fields)  # type: ignore[arg-type]


def _budget_entries(b: Budget) -> dict[str, object]:
    import contextwindow as cw

    msgs = [{"role": "user", "content": "hi"}]
    return {
        "ContextGuard": lambda: cw.ContextGuard(b),
        "fit": lambda: cw.fit(msgs, b),
        "recover_from_overflow": lambda: cw.recover_from_overflow(msgs, 5, budget=b),
        "prune_middle": lambda: cw.prune_middle(msgs, b),
        "check_capacity": lambda: check_capacity(1, b),
    }


@pytest.mark.parametrize("entry", ["ContextGuard", "fit", "recover_from_overflow", "prune_middle", "check_capacity"])
def test_a_hand_built_budget_with_no_capacity_is_refused_everywhere(entry: str) -> None:
    # fresh12 O6: window 100, reserve 100, capacity 0 was accepted by ContextGuard and fit
    b = _hand_budget(context_window=100, max_output_tokens=100, tool_schema_tokens=0, capacity=0, target=0, usable=0)
    want = "output reserve max_output_tokens=100 is as large as the context window 100 (no token left for the input)"
    with pytest.raises(ReserveError) as got:
        _budget_entries(b)[entry]()  # type: ignore[operator]
    assert str(got.value) == want
    # the same wording check_capacity gives for the same reserve on a bare window
    with pytest.raises(ReserveError) as bare:
        check_capacity(1, 100, max_output_tokens=100)
    assert str(bare.value) == want
    # and resolve_budget refuses the same reserve, with its hint after the same words
    with pytest.raises(ReserveError) as resolved:
        resolve_budget(100, 100, env={})
    assert str(resolved.value).startswith(want + ": set a smaller max_output_tokens")
    # a reserve larger than the window: 150 > 100
    b = _hand_budget(context_window=100, max_output_tokens=150, tool_schema_tokens=0, capacity=0, target=0, usable=0)
    with pytest.raises(
        ReserveError, match=r"^output reserve max_output_tokens=150 is larger than the context window 100$"
    ):
        _budget_entries(b)[entry]()  # type: ignore[operator]


@pytest.mark.parametrize("entry", ["ContextGuard", "fit", "recover_from_overflow", "prune_middle", "check_capacity"])
def test_a_hand_built_budget_whose_fields_disagree_is_refused(entry: str) -> None:
    _budget_entries(_hand_budget())[entry]()  # type: ignore[operator]  # the consistent one is fine
    cases = [
        # the docstring's relation: capacity = context_window - max_output_tokens = 1,000 - 200 = 800
        (
            {"capacity": 900},
            ValueError,
            "Budget.capacity must be context_window - max_output_tokens = 1,000 - 200 = 800, got 900",
        ),
        ({"target": 801}, ValueError, "Budget.target 801 is larger than its capacity 800"),
        # usable <= capacity - tool_schema_tokens = 800 - 50 = 750
        (
            {"usable": 751},
            ValueError,
            "Budget.usable 751 is larger than capacity - tool_schema_tokens = 800 - 50 = 750",
        ),
        ({"usable": -1}, ValueError, "Budget.usable must be >= 0, got -1"),
        ({"context_window": 0}, ValueError, "Budget.context_window must be >= 1, got 0"),
        ({"usable": "700"}, TypeError, "Budget.usable must be an int, got str"),
        ({"capacity": True}, TypeError, "Budget.capacity must be an int, got bool"),
    ]
    for over, kind, text in cases:
        with pytest.raises(kind) as got:
            _budget_entries(_hand_budget(**over))[entry]()  # type: ignore[operator]
        assert str(got.value) == text, over
    # a duck-typed budget (any object with an int `usable`) is not a Budget and keeps working
    assert checked_budget(_hand_budget()).capacity == 800


@pytest.mark.parametrize("entry", ["ContextGuard", "fit", "recover_from_overflow", "prune_middle", "check_capacity"])
def test_a_hand_built_budgets_flags_and_names_are_type_checked(entry: str) -> None:
    """fresh13 N1: ``trim_enabled="no"`` switched trimming on (a non-empty string is
    true); the flags, ``model`` and ``rules`` were not checked at all. Every entry refuses
    them, as a flag that is not a bool is refused elsewhere (``breadcrumb="no"``)."""
    cases = [
        ({"trim_enabled": "no"}, "Budget.trim_enabled must be a bool, got str"),
        ({"trim_enabled": 0}, "Budget.trim_enabled must be a bool, got int"),
        ({"trim_enabled": None}, "Budget.trim_enabled must be a bool, got NoneType"),
        ({"capacity_known": None}, "Budget.capacity_known must be a bool, got NoneType"),
        ({"capacity_known": "false"}, "Budget.capacity_known must be a bool, got str"),
        ({"model": 5}, "Budget.model must be a str or None, got int"),
        ({"rules": "x"}, "Budget.rules must be a list of str, got str"),
        ({"rules": None}, "Budget.rules must be a list of str, got NoneType"),
        ({"rules": ["ok", 2]}, "Budget.rules[1] must be a str, got int"),
    ]
    for over, text in cases:
        with pytest.raises(TypeError) as got:
            _budget_entries(_hand_budget(**over))[entry]()  # type: ignore[operator]
        assert str(got.value) == text, over
    # the right types pass: no model, a model name, rules as resolve_budget writes them
    for over in ({"trim_enabled": False}, {"model": "gpt-4o"}, {"rules": ["a: b"]}, {"capacity_known": False}):
        _budget_entries(_hand_budget(**over))[entry]()  # type: ignore[operator]


def test_unknown_model_names_the_closest_table_entry() -> None:
    """A typo in a model name fell back to 32,000 tokens with no hint of the fix: the rule,
    the CLI's error and ContextGuard's name the closest model table entry (difflib ratio
    0.8 or more, as model_limits compares names), and nothing for a name far from all."""
    from contextwindow import ContextGuard
    from contextwindow.budget import did_you_mean

    assert resolve_budget(model="gpt-4oo", env={}).rules[0] == (
        "model_unknown: 'gpt-4oo' is not in the model table (did you mean 'gpt-4o'?)"
    )
    assert did_you_mean("openai/claude-sonet-4") == " (did you mean 'claude-sonnet-4'?)"
    assert did_you_mean("acme-llm-9000") == ""
    # the caller's models are candidates too
    assert did_you_mean("acme-lm-9000", {"acme-llm-9000": {"context_window": 9_000, "max_output_tokens": 0}}) == (
        " (did you mean 'acme-llm-9000'?)"
    )
    with pytest.raises(ValueError, match=r"^unknown model 'gpt-4oo' \(did you mean 'gpt-4o'\?\): not in the model"):
        ContextGuard(model="gpt-4oo")
