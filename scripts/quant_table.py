"""Readable table of the FP4 diagnostics in a training log (the {"type":"quant"} lines that
train_gpt_fp4 writes every --diag-every steps): per layer, linear and operand slot, the relative
quantization error, the fraction of nonzero elements flushed to zero, the fraction clipped by the
block scale, and for weights the disagreement between the copies the forward and the backward used.
usage: python3 scripts/quant_table.py out/log.jsonl [--step N] [--mean]
Standard library only. Expected failures (a missing log, a directory, a log without diagnostics) end in
one line "error: ..." on stderr and exit status 1."""
import argparse, json, os, sys
from collections import defaultdict

SLOTS = ["fprop.x", "fprop.w", "dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x"]


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def read_quant_lines(path):
    """The {"type":"quant"} records of a log.jsonl. A last line cut short (a run still writing, or killed
    mid-line) is passed over with a warning; any other line that is not JSON is an error."""
    if os.path.isdir(path):
        die(f"{path} is a directory; give the run's log file, e.g. {os.path.join(path, 'log.jsonl')}")
    if not os.path.isfile(path):
        die(f"{path} not found; give a training log (train_gpt_fp4 writes --out-dir/log.jsonl)")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError:
        die(f"{path}: not a text file; give a training log (--out-dir/log.jsonl)")
    except OSError as e:
        die(f"{path}: {e.strerror or e}")
    while lines and not lines[-1].strip():
        lines.pop()
    rows = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            if lineno == len(lines):
                print(f"warning: {path}:{lineno}: the last line is cut short; passed over", file=sys.stderr)
                continue
            die(f"{path}:{lineno}: not a JSON line; give a train_gpt_fp4 log (--out-dir/log.jsonl)")
        if isinstance(d, dict) and d.get("type") == "quant":
            if not isinstance(d.get("step"), int) or "linear" not in d or "layer" not in d:
                die(f"{path}:{lineno}: a quant line without step, layer or linear")
            rows.append(d)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("--step", type=int, help="which diagnostics step (default: the last one)")
    ap.add_argument("--mean", action="store_true", help="average over layers: one row per linear")
    a = ap.parse_args()
    rows = read_quant_lines(a.log)
    if not rows:
        die(f"{a.log}: no quant lines (was the run FP4, with --diag-every > 0?)")
    steps = sorted({d["step"] for d in rows})
    step = a.step if a.step is not None else steps[-1]
    rows = [d for d in rows if d["step"] == step]
    if not rows:
        die(f"no diagnostics at step {step}; steps with diagnostics: {steps}")
    try:
        if a.mean:
            groups = defaultdict(list)
            for d in rows:
                groups[d["linear"]].append(d)
            rows = []
            for lin, ds in groups.items():
                r = {"layer": "mean", "linear": lin}
                for k in SLOTS + ["w_fwd_bwd"]:
                    vals = [d[k] for d in ds if k in d]
                    if vals:
                        r[k] = {m: sum(v[m] for v in vals) / len(vals) for m in vals[0]}
                rows.append(r)
        print(f"step {step}: relative error / flushed % / clipped %   (w fwd/bwd: elements differing %, relative difference)")
        header = f"{'layer':>5} {'linear':<8}" + "".join(f"{s:>22}" for s in SLOTS) + f"{'w fwd/bwd':>18}"
        print(header)
        for d in rows:
            cells = []
            for s in SLOTS:
                v = d.get(s)
                cells.append(f"{v['relerr']:.3f}/{100 * v['flushed']:.1f}/{100 * v['clipped']:.1f}" if v else "bf16")
            w = d.get("w_fwd_bwd")
            wcell = f"{100 * w['differ']:.1f}% {w['rel']:.4f}" if w else "-"
            print(f"{str(d['layer']):>5} {d['linear']:<8}" + "".join(f"{c:>22}" for c in cells) + f"{wcell:>18}")
    except (KeyError, TypeError) as e:
        die(f"{a.log}: a quant line of step {step} lacks a field ({e}); is the log from another version of train_gpt_fp4?")


if __name__ == "__main__":
    main()
