"""A number in a counted JSON value costs the same on the gateway as on the dict path.

The gateway (``count_request`` on the raw body) reads a ``tool_use`` input, a tool
definition or a block the model does not hold with serde_json and counts the compact text
it writes back; the dict path (``count_messages`` on ``json.loads`` of the same body) and
the CLI count ``msgspec.json.encode`` of the Python value. Both must write a number alike
(fresh10 F-num): ``-0`` is the int 0 in Python (``0``), a float is written with its
shortest round-trip digits, fixed for a decimal exponent -5..15 (``100000.0``,
``0.00001``) and else ``1e16``, ``1.5e300``, ``1e-7`` (no ``+``, no padded exponent).
"""

from __future__ import annotations

import json
import math

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_input_consistency import cli_count

import contextwindow as cw

#: JSON number text -> what msgspec.json.encode writes for json.loads of it, by hand:
#: ``-0`` is an int (0); ``1e5`` a float whose decimal exponent (5) is in -5..15, so fixed
#: with ``.0``; ``1.5e300`` and ``1e16`` above 15, ``1e-7`` and ``5e-324`` below -5, so
#: exponent form without ``+`` or padding; ``0.0001`` (exponent -4) and ``0.00001`` (-5)
#: fixed. Integers within int64/uint64 keep their digits.
WRITTEN = {
    "-0": "0",
    "0": "0",
    "0.0": "0.0",
    "-0.0": "-0.0",
    "-0e0": "-0.0",
    "-0.0E-3": "-0.0",
    "1e5": "100000.0",
    "1E5": "100000.0",
    "1.0": "1.0",
    "-1.50": "-1.5",
    "1.5e300": "1.5e300",
    "1.5E+300": "1.5e300",
    "1.7976931348623157e308": "1.7976931348623157e308",
    "-1.7976931348623157e+308": "-1.7976931348623157e308",
    "5e-324": "5e-324",
    "2.5e-310": "2.5e-310",
    "1e-7": "1e-7",
    "-1e-07": "-1e-7",
    "1.5e-6": "1.5e-6",
    "0.00001": "0.00001",
    "1.5e-5": "0.000015",
    "0.0001": "0.0001",
    "1e15": "1000000000000000.0",
    "1e16": "1e16",
    "12345678901234567.0": "1.2345678901234568e16",
    "1e22": "1e22",
    "123456789012345678": "123456789012345678",
    "-123456789012345678": "-123456789012345678",
    "9223372036854775807": "9223372036854775807",
    "-9223372036854775808": "-9223372036854775808",
    "9223372036854775808": "9223372036854775808",
    "18446744073709551615": "18446744073709551615",
}


def test_the_table_is_what_msgspec_writes() -> None:
    # the oracle itself, pinned: the dict path counts msgspec's text
    for text, written in WRITTEN.items():
        assert msgspec.json.encode(json.loads(text)).decode() == written, text


def bodies(num: str, pad: int) -> dict[str, bytes]:
    """Request bodies holding ``num`` (JSON text) where the gateway re-serializes what it
    counts, each with a ``pad``-byte string next to it in the same counted text, so that
    under ``bytes4`` (ceil(bytes / 4) per text) four pads tell a one-byte difference."""
    ask = '{"role":"user","content":"hi"}'
    answer = '{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"}]}'
    use = (
        '{"messages":[ASK,{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":INPUT}]},ANS]}'
    )
    use = use.replace("ASK", ask).replace("ANS", answer)
    schema = '{"type":"object","properties":{"x":{"type":"number","default":NUM,"description":"PAD"}}}'
    texts = {
        "tool_use input": use.replace("INPUT", '{"x":NUM,"p":"PAD"}'),
        "tool_use input, nested": use.replace("INPUT", '{"a":[1,{"b":[NUM,"PAD"]}],"c":{"d":NUM},"e":"-0"}'),
        "anthropic tool schema default": '{"tools":[{"name":"f","input_schema":SCHEMA}],"messages":[ASK]}',
        "openai tool schema default": (
            '{"tools":[{"type":"function","function":{"name":"f","parameters":SCHEMA}}],"messages":[ASK]}'
        ),
        "block the model does not hold": (
            '{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"weird","x":NUM,"p":"PAD"}]}]}'
        ),
    }
    out = {
        k: t.replace("SCHEMA", schema).replace("ASK", ask).replace("NUM", num).replace("PAD", "a" * pad).encode()
        for k, t in texts.items()
    }
    # OpenAI arguments are a string: counted as sent on both paths, never re-written
    args = json.dumps('{"x": NUM, "p": "PAD"}'.replace("NUM", num).replace("PAD", "a" * pad))
    out["openai arguments"] = (
        (
            '{"messages":[ASK,{"role":"assistant","content":null,"tool_calls":[{"id":"t","type":"function",'
            '"function":{"name":"f","arguments":ARGS}}]},{"role":"tool","tool_call_id":"t","content":"r"}]}'
        )
        .replace("ASK", ask)
        .replace("ARGS", args)
        .encode()
    )
    return out


def dict_count(body: bytes, profile: str) -> int:
    """``count_messages`` on the parsed body, its tools included."""
    doc = json.loads(body)
    return cw.count_messages(doc["messages"], profile, tools=doc.get("tools"))


@pytest.mark.parametrize("num", list(WRITTEN))
def test_a_number_costs_the_same_on_the_gateway_and_on_the_dict_path(num: str) -> None:
    for pad in range(4):
        for place, body in bodies(num, pad).items():
            for profile in ("bytes4", "conservative", "fim"):
                assert cw.count_request(body, profile=profile) == dict_count(body, profile), (place, pad, profile)
            # and as the number written as Python writes it (an independent spelling), where
            # the value is re-written (arguments are a string, counted as sent)
            if place != "openai arguments":
                written = bodies(WRITTEN[num], pad)[place]
                assert cw.count_request(body, profile="bytes4") == cw.count_request(written, profile="bytes4")


@pytest.mark.parametrize("num", ["-0", "1.7976931348623157e308", "1e-7", "1E5"])
def test_the_cli_counts_them_alike_and_fit_request_sends_them_as_written(num: str) -> None:
    for place, body in bodies(num, 1).items():
        assert cli_count(body, "bytes4") == cw.count_request(body, profile="bytes4"), place
        # under budget the body goes out byte for byte, the number as it was written
        assert cw.fit_request(body, budget=10**6) == body


def test_the_finding() -> None:
    # fresh10 F-num: 52 against 49 (-0 written -0.0) and 71 against 70 (e+308), by the
    # default profile at 3 per message; now both doors count the dict path's text, and at
    # 4 per message the 3 messages are 49 + 3 = 52 and 70 + 3 = 73
    raw = (
        b'{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use",'
        b'"id":"t","name":"f","input":{"x":NUM}}]},{"role":"user","content":[{"type":"tool_result",'
        b'"tool_use_id":"t","content":"r"}]}]}'
    )
    for num, expected in ((b"-0", 52), (b"1.7976931348623157e308", 73)):
        body = raw.replace(b"NUM", num)
        assert cw.count_messages(json.loads(body)["messages"]) == expected
        assert cw.count_request(body) == expected


def test_bytes4_by_hand() -> None:
    # bytes4: ceil(bytes / 4) per text + 4 per message. The block {"type":"weird","x":X}
    # is 21 bytes + X: -0 is written 0 (22 bytes: 6 + 4 = 10, not -0.0: 25 bytes, 7 + 4);
    # 1.5E+300 is written 1.5e300 (28 bytes: 7 + 4 = 11, not 1.5e+300: 29 bytes, 8 + 4)
    def body(x: str) -> bytes:
        return b'{"messages":[{"role":"user","content":[{"type":"weird","x":X}]}]}'.replace(b"X", x.encode())

    assert cw.count_request(body("-0"), profile="bytes4") == 10
    assert cw.count_request(body("1.5E+300"), profile="bytes4") == 11


def _spellings(x: float) -> st.SearchStrategy[str]:
    """Ways a client may write the float ``x`` as JSON."""
    return st.sampled_from(
        [repr(x), format(x, ".17e"), format(x, ".17g"), format(x, ".16e").upper(), msgspec.json.encode(x).decode()]
    )


NUMBER_TEXT = st.one_of(
    st.integers(-(2**63), 2**64 - 1).map(str),
    st.just("-0"),
    st.floats(allow_nan=False, allow_infinity=False).flatmap(_spellings),
    st.builds(lambda m, e: f"{m}e{e}", st.integers(-(10**20), 10**20), st.integers(-340, 300)),
)


def _finite(text: str) -> bool:
    v = json.loads(text)
    return not isinstance(v, float) or math.isfinite(v)


@given(st.lists(NUMBER_TEXT.filter(_finite), min_size=1, max_size=4), st.integers(0, 3))
def test_random_numbers_in_a_tool_input_cost_the_same_on_both_paths(nums: list[str], pad: int) -> None:
    value = '{"n":[NUMS],"o":{"k":FIRST},"p":"PAD"}'.replace("NUMS", ",".join(nums))
    value = value.replace("FIRST", nums[0]).replace("PAD", "a" * pad)
    body = (
        (
            '{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t",'
            '"name":"f","input":VALUE}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t",'
            '"content":"r"}]}],"tools":[{"name":"f","input_schema":{"default":VALUE}}]}'
        )
        .replace("VALUE", value)
        .encode()
    )
    for profile in ("bytes4", "conservative"):
        assert cw.count_request(body, profile=profile) == dict_count(body, profile)


def test_a_kept_message_is_sent_as_written_when_others_are_dropped() -> None:
    # the counted text is msgspec's; the bytes sent for a message kept unchanged are the
    # body's own: an old turn (2,000 bytes) is dropped, the tool_use input stays -0, 1E5
    old = '{"role":"user","content":"%s"},{"role":"assistant","content":"ok"},' % ("w " * 1000)
    body = (
        '{"messages":[OLD{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use",'
        '"id":"t","name":"f","input":{"x":-0,"y":1E5,"z":1.5e+300}}]},{"role":"user","content":[{"type":'
        '"tool_result","tool_use_id":"t","content":"r"}]}]}'
    )
    out = cw.fit_request(body.replace("OLD", old).encode(), budget=200, profile="bytes4")
    assert b"w w" not in out
    assert b'"input":{"x":-0,"y":1E5,"z":1.5e+300}' in out
    assert cw.count_request(out, profile="bytes4") == dict_count(out, "bytes4") <= 200
