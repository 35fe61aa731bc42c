"""Run the benchmarks and print the README's Markdown table.

    pip install ".[bench]" && python tools/bench_table.py

runs ``pytest benches --benchmark-json=FILE`` (extra arguments go to pytest, e.g.
``-k count``) and prints one row per implementation and scenario: the median time of
its rounds, its throughput (MB/s for text, µs per message for counting, ms per trim,
calls/s for threads) and the speedup of contextwindow over it: its median / the median of
contextwindow with the same profile (below 1: contextwindow is slower); LangChain's rows
also give it over contextwindow with ``fim`` where that row exists (LangChain counts
characters / 4, an approximate counter of ``fim``'s kind). Thread rows give
their throughput over the 1-thread throughput instead. ``--save-json FILE`` keeps the run's data, ``--from-json
FILE`` prints the table of an earlier run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "pip install '.[bench]' && python tools/bench_table.py"


def run(pytest_args: list[str], out: Path) -> None:
    cmd = [sys.executable, "-m", "pytest", "benches", "-q", f"--benchmark-json={out}", *pytest_args]
    print("$", " ".join(cmd), file=sys.stderr)
    done = subprocess.run(cmd, cwd=ROOT, check=False, stdout=sys.stderr)
    if done.returncode != 0:
        sys.exit(f"pytest exited with {done.returncode}")


def _time(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def _label(info: dict[str, Any]) -> str:
    impl = info["impl"]
    return f"{impl} (`{info['profile']}`)" if info.get("profile") else impl


def _throughput(median: float, info: dict[str, Any]) -> str:
    if "threads" in info:
        return f"{info['calls'] / median:,.0f} calls/s"
    if "bytes" in info:
        return f"{info['bytes'] / median / 1e6:,.1f} MB/s"
    if info.get("trim"):
        return f"{median * 1e3:,.2f} ms per trim"
    if "messages" in info:
        return f"{median / info['messages'] * 1e6:,.2f} µs/message"
    return ""


def _ratio(median: float, base: float | None) -> str:
    if base is None:
        return ""
    r = median / base
    return f"{r:,.0f}x" if r >= 100 else f"{r:,.1f}x" if r >= 1 else f"{r:.2f}x"


def table(data: dict[str, Any]) -> str:
    groups: dict[str, list[dict[str, Any]]] = {}
    for b in data["benchmarks"]:
        groups.setdefault(b["group"], []).append(b)
    lines = [
        "| scenario | implementation | median | throughput | contextwindow speedup |",
        "|---|---|---:|---:|---:|",
    ]
    order = [
        "estimate_tokens",
        "count_messages",
        "count_request",
        "trim_turns",
        "fit_request",
        "fit",
        "prune_middle",
        "threads",
    ]
    for group, rows in sorted(groups.items(), key=lambda g: [g[0].startswith(o) for o in order].index(True)):
        first = True
        if all("threads" in r["extra_info"] for r in rows):
            rows.sort(key=lambda r: r["extra_info"]["threads"])
            one = next((r["stats"]["median"] for r in rows if r["extra_info"]["threads"] == 1), None)
            for r in rows:
                med, info = r["stats"]["median"], r["extra_info"]
                speedup = f"{one / med:.2f}x vs 1 thread" if one else ""
                scen = group if first else ""
                n = info["threads"]
                label = f"{n} thread{'s' if n > 1 else ''}"
                lines.append(f"| {scen} | {label} | {_time(med)} | {_throughput(med, info)} | {speedup} |")
                first = False
            continue
        cws = {
            r["extra_info"].get("profile"): r["stats"]["median"]
            for r in rows
            if r["extra_info"]["impl"] == "contextwindow"
        }
        default = cws.get("conservative", cws.get(None))
        rows.sort(
            key=lambda r: (
                r["extra_info"]["impl"] != "contextwindow",
                r["extra_info"].get("profile") not in ("conservative", None),
                r["stats"]["median"],
            )
        )
        for r in rows:
            med, info = r["stats"]["median"], r["extra_info"]
            vs = ""
            if info["impl"] != "contextwindow":
                base = cws.get(info.get("profile"), default)
                vs = _ratio(med, base)
                if info["impl"] == "langchain" and "fim" in cws:
                    vs += f" (`fim`: {_ratio(med, cws['fim'])})"
            scen = group if first else ""
            lines.append(f"| {scen} | {_label(info)} | {_time(med)} | {_throughput(med, info)} | {vs} |")
            first = False
    return "\n".join(lines)


#: CPU flags the estimator's 32-byte paths need (``Simd::detect`` in features_words.rs);
#: without them it runs its SSE2 paths, and the same code measures differently.
AVX2_FLAGS = frozenset({"avx2", "bmi1", "bmi2", "abm", "popcnt"})  # abm: LZCNT
#: and those its 64-byte classes need besides (``Simd::Avx512``)
AVX512_FLAGS = AVX2_FLAGS | {"avx512f", "avx512bw"}


def _level(flags: set[str]) -> str:
    if AVX512_FLAGS <= flags:
        return "AVX-512"
    return "AVX2" if AVX2_FLAGS <= flags else "SSE2"


def cpu_label(cpu: dict[str, Any]) -> str:
    """The CPU as pytest-benchmark's ``machine_info["cpu"]`` (py-cpuinfo) describes it: its
    name, family and model (a virtual machine often hides the name's model number) and
    which of the estimator's instruction sets it runs.

    >>> flags = ["avx2", "bmi1", "bmi2", "abm", "popcnt"]
    >>> cpu_label({"brand_raw": "AMD EPYC", "family": 26, "model": 2, "flags": flags})
    'AMD EPYC, family 26 model 2, estimator on AVX2'
    >>> cpu_label({"brand_raw": "Some CPU", "flags": ["sse2"]})
    'Some CPU, estimator on SSE2'
    >>> cpu_label({"brand_raw": "Xeon", "flags": [*flags, "avx512f", "avx512bw"]})
    'Xeon, estimator on AVX-512'
    """
    parts = [cpu.get("brand_raw") or platform.processor() or "unknown CPU"]
    if cpu.get("family") is not None and cpu.get("model") is not None:
        parts.append(f"family {cpu['family']} model {cpu['model']}")
    flags = set(cpu.get("flags") or ())
    if flags:
        parts.append("estimator on " + _level(flags))
    return ", ".join(parts)


def machine(data: dict[str, Any], load: tuple[float, float, float] | None) -> str:
    info = data.get("machine_info", {})
    commit = data.get("commit_info", {}).get("id", "")[:10]
    cpu = cpu_label(info.get("cpu", {}))
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {info.get('python_version', platform.python_version())}, "
        f"{info.get('system', platform.system())}; commit {commit or 'unknown'}; "
        f"median of rounds"
        + (f"; load average before the run {load[0]:.2f} (1 min), {load[2]:.2f} (15 min)" if load else "")
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from-json", type=Path, help="print the table of an earlier --benchmark-json file")
    ap.add_argument("--save-json", type=Path, help="keep this run's --benchmark-json file here")
    args, pytest_args = ap.parse_known_args(argv)
    load = None
    if args.from_json:
        data = json.loads(args.from_json.read_text())
    else:
        load = os.getloadavg()
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "bench.json"
            run(pytest_args, out)
            data = json.loads(out.read_text())
            if args.save_json:
                args.save_json.write_text(out.read_text())
    print(f"```bash\n{COMMAND}\n```\n")
    print(table(data))
    print(f"\n{machine(data, load)}")


if __name__ == "__main__":
    main()
