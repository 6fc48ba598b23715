"""tools/moe_ab_table.py: one row per (op, dtype, batch) in the first binary's order, each
binary's time range over its runs, and the first binary's median over each other's."""
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "tools", "moe_ab_table.py")


def write(path, rows):
    with open(path, "w") as f:
        for op, batch, us in rows:
            f.write(json.dumps({"op": op, "dtype": "mxfp4", "batch": batch, "time_us": us,
                                "tb_s": 1000.0 / us}) + "\n")


def run(*paths):
    return subprocess.run([sys.executable, SCRIPT, *paths], capture_output=True, text=True, check=False)


def test_rows_ranges_and_speedups(tmp_path):
    before, after = tmp_path / "moe_before.jsonl", tmp_path / "moe_after.jsonl"
    # Two runs each (appended), the second binary faster by 1.25x at batch 64 only.
    write(before, [("gate_up", 1, 40.0), ("gate_up", 64, 900.0), ("gate_up", 1, 42.0), ("gate_up", 64, 910.0)])
    write(after, [("gate_up", 1, 40.0), ("gate_up", 64, 720.0), ("gate_up", 1, 42.0), ("gate_up", 64, 728.0)])
    result = run(str(before), str(after))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert "before us" in lines[0] and "after us" in lines[0] and "after x" in lines[0]
    assert len(lines) == 3
    assert lines[1].split()[:3] == ["gate_up", "mxfp4", "1"]
    assert "40.0-42.0" in lines[1] and lines[1].split()[-1] == "1.000"
    assert "900.0-910.0" in lines[2] and "720.0-728.0" in lines[2]
    assert lines[2].split()[-1] == "%.3f" % (910.0 / 728.0)


def test_missing_rows_and_no_arguments(tmp_path):
    before, after = tmp_path / "moe_before.jsonl", tmp_path / "moe_after.jsonl"
    write(before, [("down", 16, 176.0)])
    write(after, [("gate_up", 16, 300.0)])
    result = run(str(before), str(after))
    assert result.returncode == 0, result.stderr
    row = result.stdout.strip().splitlines()[1]
    assert row.split()[:3] == ["down", "mxfp4", "16"] and row.split()[-2:] == ["-", "-"]
    assert run().returncode == 2
