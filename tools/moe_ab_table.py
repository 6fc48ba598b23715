#!/usr/bin/env python3
"""Compares peregrine_moe_bench runs of several binaries: one row per (op, dtype, batch), the
range of each binary's times over its runs, and the speedup of every binary over the first.

    python3 tools/moe_ab_table.py OUT/moe_before.jsonl OUT/moe_after.jsonl

Each file holds the JSON lines of one binary (appended once per run); the file name after
`moe_` names the binary.
"""
import json
import os
import sys
from collections import OrderedDict


def load(path):
    runs = OrderedDict()
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            row = json.loads(line)
            key = (row["op"], row["dtype"], int(row["batch"]))
            runs.setdefault(key, []).append((float(row["time_us"]), float(row["tb_s"])))
    return runs


def name_of(path):
    base = os.path.basename(path)
    if base.startswith("moe_"):
        base = base[len("moe_"):]
    return base[: -len(".jsonl")] if base.endswith(".jsonl") else base


def main(paths):
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    names = [name_of(p) for p in paths]
    tables = [load(p) for p in paths]
    keys = list(tables[0].keys())
    header = "%-14s %-18s %5s" % ("op", "dtype", "batch")
    for n in names:
        header += " %22s" % (n + " us (TB/s)")
    for n in names[1:]:
        header += " %10s" % (n + " x")
    print(header)
    for key in keys:
        line = "%-14s %-18s %5d" % key
        medians = []
        for table in tables:
            runs = table.get(key)
            if not runs:
                line += " %22s" % "-"
                medians.append(None)
                continue
            times = sorted(t for t, _ in runs)
            rates = sorted(r for _, r in runs)
            line += " %22s" % ("%.1f-%.1f (%.2f)" % (times[0], times[-1], rates[len(rates) // 2]))
            medians.append(times[len(times) // 2])
        for m in medians[1:]:
            line += " %10s" % ("%.3f" % (medians[0] / m) if medians[0] and m else "-")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
