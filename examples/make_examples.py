"""Write the example conversations in this folder (deterministic; run to regenerate).

    python examples/make_examples.py

They are written by the project, not taken from anyone's transcripts: an OpenAI request
body of a coding agent (system prompt, tool schemas, parallel tool calls, a long build
log, a Japanese question) and the same session as an Anthropic request body.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

SYSTEM = "You are a careful coding agent. Use the tools to inspect the repository before you change it."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command and return its output.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    },
]


def build_log(lines: int) -> str:
    out = [f"[{i:04d}] compiling module_{i % 37} ... ok" for i in range(lines)]
    out.append("error[E0308]: mismatched types in src/budget.rs:41: expected `u64`, found `i64`")
    return "\n".join(out)


def turns() -> list[tuple[str, list[tuple[str, str, dict[str, str], str]], str]]:
    """(user text, [(call id, tool, arguments, result)], assistant answer) per turn."""
    return [
        (
            "Where is the token budget computed? Look at the config and the budget module.",
            [
                (
                    "call_1",
                    "read_file",
                    {"path": "config.toml"},
                    "[budget]\ncontext_window = 128000\nmax_output = 64000\n",
                ),
                (
                    "call_2",
                    "read_file",
                    {"path": "src/budget.rs"},
                    "pub fn usable(window: u64, output: u64) -> u64 {\n    window.saturating_sub(output)\n}\n" * 6,
                ),
            ],
            "The budget is the window minus the reserved output, computed in src/budget.rs.",
        ),
        (
            "Run the build and tell me what fails.",
            [("call_3", "bash", {"cmd": "cargo build"}, build_log(400))],
            "The build fails in src/budget.rs line 41: an i64 is passed where a u64 is expected.",
        ),
        (
            "ありがとう。予算の計算で出力トークンを二重に引いていないか確認してください。",
            [
                (
                    "call_1",
                    "read_file",
                    {"path": "src/request.rs"},
                    "let budget = usable(window, output) - output; // BUG\n",
                )
            ],
            "src/request.rs subtracts the output reserve a second time; the fix is to drop `- output`.",
        ),
        ("Fix it and keep the change small.", [], ""),
    ]


def openai_body() -> dict[str, object]:
    msgs: list[dict[str, object]] = [{"role": "system", "content": SYSTEM}]
    for user, calls, answer in turns():
        msgs.append({"role": "user", "content": user})
        if calls:
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                        for cid, name, args, _ in calls
                    ],
                }
            )
            msgs.extend({"role": "tool", "tool_call_id": cid, "content": result} for cid, _, _, result in calls)
        if answer:
            msgs.append({"role": "assistant", "content": answer})
    return {"model": "gpt-4o", "temperature": 0, "tools": TOOLS, "messages": msgs}


def anthropic_body() -> dict[str, object]:
    msgs: list[dict[str, object]] = []
    for user, calls, answer in turns():
        msgs.append({"role": "user", "content": user})
        if calls:
            msgs.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": cid.replace("call", "toolu"), "name": name, "input": args}
                        for cid, name, args, _ in calls
                    ],
                }
            )
            msgs.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": cid.replace("call", "toolu"), "content": result}
                        for cid, _, _, result in calls
                    ],
                }
            )
        if answer:
            msgs.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    tools = [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],  # type: ignore[index]
            "input_schema": t["function"]["parameters"],
        }  # type: ignore[index]
        for t in TOOLS
    ]
    return {"model": "claude-sonnet-4-5", "max_tokens": 4096, "system": SYSTEM, "tools": tools, "messages": msgs}


def main() -> None:
    for name, body in [("agent_session.json", openai_body()), ("agent_session_anthropic.json", anthropic_body())]:
        (HERE / name).write_text(json.dumps(body, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
