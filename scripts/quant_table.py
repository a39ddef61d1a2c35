"""Readable table of the FP4 diagnostics in a training log (the {"type":"quant"} lines that
train_gpt_fp4 writes every --diag-every steps): per layer, linear and operand slot, the relative
quantization error, the fraction of nonzero elements flushed to zero, the fraction clipped by the
block scale, and for weights the disagreement between the copies the forward and the backward used.
usage: python3 scripts/quant_table.py out/log.jsonl [--step N] [--mean]"""
import argparse, json, sys
from collections import defaultdict

SLOTS = ["fprop.x", "fprop.w", "dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("--step", type=int, help="which diagnostics step (default: the last one)")
    ap.add_argument("--mean", action="store_true", help="average over layers: one row per linear")
    a = ap.parse_args()
    rows = [d for d in map(json.loads, open(a.log)) if d.get("type") == "quant"]
    if not rows:
        sys.exit(f"{a.log}: no quant lines (was the run FP4, with --diag-every > 0?)")
    steps = sorted({d["step"] for d in rows})
    step = a.step if a.step is not None else steps[-1]
    rows = [d for d in rows if d["step"] == step]
    if not rows:
        sys.exit(f"no diagnostics at step {step}; steps with diagnostics: {steps}")
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


if __name__ == "__main__":
    main()
