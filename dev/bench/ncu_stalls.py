#!/usr/bin/env python3
"""ncu_stalls.py: which instructions of a kernel its warps wait on, from Nsight Compute's source page.

Reads the per-instruction CSV of one profiled kernel and prints: the warp stall samples in all and by reason,
the instructions with the most samples (address, samples, executions, the SASS, their two largest reasons),
and how many samples and executions fall on local memory (spills: LDL / STL).

How the column kernel's profile was made (results/colfold_async; ncu on the GPU machine, this script anywhere):
    ncu --clock-control none --kernel-name regex:qf_colfold --launch-count 1 --set full --import-source yes \\
        -o /tmp/colfold build/bench_fp8_fold -n 1 -f "mxfp4 col (wgrad X)" -s 65536x3072
    ncu -i /tmp/colfold.ncu-rep --page source --csv --print-source sass > /tmp/colfold_sass.csv
    python3 dev/bench/ncu_stalls.py /tmp/colfold_sass.csv
"""
import argparse
import collections
import csv
import sys


def load(path):
    """The CSV's header row and instruction rows (ncu writes a kernel-name line first)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    for i, r in enumerate(rows):
        if "Address" in r and "Source" in r:
            return r, [x for x in rows[i + 1:] if len(x) == len(r)]
    sys.exit(f"ncu_stalls: {path}: no header row with Address and Source (want --page source --csv --print-source sass)")


def num(s):
    try:
        return int(float(s))
    except ValueError:
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="ncu -i REPORT --page source --csv --print-source sass > CSV")
    ap.add_argument("--top", type=int, default=15, help="instructions to list (default 15)")
    a = ap.parse_args()
    head, rows = load(a.csv)
    col = {name: i for i, name in enumerate(head)}
    for need in ("Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"):
        if need not in col:
            sys.exit(f"ncu_stalls: {a.csv}: no column '{need}'")
    reasons = [h for h in head if h.startswith("stall_") and "Not Issued" not in h]
    samples = lambda r: num(r[col["Warp Stall Sampling (All Samples)"]])
    total = sum(samples(r) for r in rows)
    if total == 0:
        sys.exit("ncu_stalls: no stall samples (profile with --set full or the WarpStateStats/SourceCounters sections)")
    by = collections.Counter({h: sum(num(r[col[h]]) for r in rows) for h in reasons})
    print(f"{len(rows)} instructions, {total} warp stall samples")
    print("by reason: " + ", ".join(f"{h[6:]} {100.0 * n / total:.1f}%" for h, n in by.most_common(8) if n))
    print(f"\n{'address':>8} {'samples':>8} {'%':>6} {'executed':>10}  instruction  [largest reasons]")
    for r in sorted(rows, key=lambda r: -samples(r))[:a.top]:
        rs = sorted(((num(r[col[h]]), h[6:]) for h in reasons), reverse=True)[:2]
        why = ", ".join(f"{h} {n}" for n, h in rs if n)
        print(f"{r[col['Address']][-8:]:>8} {samples(r):>8} {100.0 * samples(r) / total:>5.1f}% "
              f"{num(r[col['Instructions Executed']]):>10}  {r[col['Source']].strip()[:60]}  [{why}]")
    loc = [r for r in rows if any(op in r[col["Source"]] for op in ("LDL", "STL"))]
    print(f"\nlocal memory (spills): {len(loc)} instructions, {sum(num(r[col['Instructions Executed']]) for r in loc)} "
          f"executions, {sum(samples(r) for r in loc)} samples")


if __name__ == "__main__":
    main()
