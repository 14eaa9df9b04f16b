#!/usr/bin/env python3
"""Rebuilds the tables of BENCHMARKS.md from Criterion's results.

Run after `cargo bench`:

    cargo bench -p idutil-benches | tee target/bench.txt
    python3 benches/report.py                               # print the tables
    python3 benches/report.py --write --latency target/bench.txt

`--latency FILE` also replaces the latency table with the table lines (those
starting with `|`) that `benches/latency.rs` printed into FILE.

Reads `$CARGO_TARGET_DIR/criterion` (default `target/criterion`). Quotes
each benchmark's median; "peer / idutil" is the peer's median over
`IdUtil::next_id()`'s in the same group (above 1: idutil is faster).
"""

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GROUPS = [
    ("primitives", "Building blocks (one call)"),
    ("one_thread", "One thread: one ID per call"),
    ("two_threads", "Two threads sharing one generator (wall time per ID, both threads together)"),
    ("batch_1m", "Batch of 1,000,000 IDs"),
    ("cold", "Cold path"),
]
REFERENCE = "idutil IdUtil::next_id"
BEGIN = "<!-- report.py: begin -->"
END = "<!-- report.py: end -->"
LATENCY_BEGIN = "<!-- latency: begin -->"
LATENCY_END = "<!-- latency: end -->"


def fmt_time(ns):
    if ns < 1:
        return f"{ns:.2f} ns"
    if ns < 1_000:
        return f"{ns:.1f} ns"
    if ns < 1_000_000:
        return f"{ns / 1_000:.1f} µs"
    return f"{ns / 1_000_000:.2f} ms"


def load(target):
    results = {}
    for bench in sorted((target / "criterion").glob("*/*/new/benchmark.json")):
        meta = json.loads(bench.read_text())
        estimates = json.loads((bench.parent / "estimates.json").read_text())
        elements = (meta.get("throughput") or {}).get("Elements", 1)
        results.setdefault(meta["group_id"], []).append(
            (meta["function_id"], estimates["median"]["point_estimate"], elements)
        )
    return results


def tables(results):
    out = []
    for group, title in GROUPS:
        rows = results.get(group)
        if not rows:
            continue
        out.append(f"### {title}\n")
        medians = {name: median / elements for name, median, elements in rows}
        reference = medians.get(REFERENCE)
        batch = any(elements > 1 for _, _, elements in rows)
        header = "| benchmark | median |"
        rule = "|---|---:|"
        if batch:
            header += " per ID |"
            rule += "---:|"
        if reference and group in ("one_thread", "two_threads"):
            header += " IDs/s | peer / idutil |"
            rule += "---:|---:|"
        out += [header, rule]
        # idutil first, then the peers fastest first.
        rows.sort(key=lambda r: (not r[0].startswith("idutil"), r[1] / r[2]))
        for name, median, elements in rows:
            line = f"| {name} | {fmt_time(median)} |"
            per_id = median / elements
            if batch:
                line += f" {fmt_time(per_id)} |"
            if reference and group in ("one_thread", "two_threads"):
                line += f" {1e9 / per_id / 1e6:.1f} M | {per_id / reference:.2f} |"
            out.append(line)
        out.append("")
    return "\n".join(out)


def main():
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    text = tables(load(target))
    if "--write" not in sys.argv:
        print(text)
        return
    doc_path = ROOT / "BENCHMARKS.md"
    doc = replace_between(doc_path.read_text(), BEGIN, END, text)
    if "--latency" in sys.argv:
        output = Path(sys.argv[sys.argv.index("--latency") + 1]).read_text()
        table = "\n".join(l for l in output.splitlines() if l.startswith("|"))
        doc = replace_between(doc, LATENCY_BEGIN, LATENCY_END, table + "\n")
    doc_path.write_text(doc)
    print(f"updated {doc_path}")


def replace_between(doc, begin, end, text):
    start, stop = doc.index(begin) + len(begin), doc.index(end)
    return doc[:start] + "\n" + text + "\n" + doc[stop:]


if __name__ == "__main__":
    main()
