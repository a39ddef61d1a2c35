#!/usr/bin/env python3
"""Compare training runs from their JSONL logs: a loss plot and a table of gaps at equal tokens.

  python3 scripts/plot_loss.py bf16=log_bf16/log.jsonl nvfp4=log_nvfp4/log.jsonl \
      --out loss.png --table gaps.md --smooth 0.9

Each run is LABEL=PATH or PATH (the label is then the name of the file's parent directory). The
first run is the baseline. Lines read from each log (others are ignored):
  {"type":"train","step":S,"tokens":N,"loss":L,...}   {"type":"val","step":S,"tokens":N,"val_loss":L}
A step logged twice (a resumed run) keeps its last record.

Plot: left panel train loss (raw, faint, and smoothed), right panel val loss, both against tokens.
Table: at 25/50/75/100% (--fractions) of the shortest run's tokens, each run's smoothed train loss
interpolated at that token count, and its val loss at the val point nearest to it that all runs
share (or, if the runs share none, each run's own nearest val point, whose token count is shown).
Gaps are run minus baseline, absolute and relative to the baseline. An EMA lags the raw loss, but
every run is smoothed the same way, so the gaps at equal tokens stay comparable.
"""
import argparse
import json
import math
import os
import sys

import numpy as np


def parse_run(spec):
    if "=" in spec and not os.path.exists(spec):
        label, path = spec.split("=", 1)
    else:
        path = spec
        label = os.path.basename(os.path.dirname(os.path.abspath(path))) or path
    return label, path


def load(path):
    train, val = {}, {}
    bad = 0
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                bad += 1  # e.g. a line cut short by a crash
                continue
            kind = r.get("type") if isinstance(r, dict) else None
            try:
                if kind == "train":
                    train[int(r["step"])] = (float(r["tokens"]), float(r["loss"]))
                elif kind == "val":
                    val[int(r["step"])] = (float(r["tokens"]), float(r["val_loss"]))
            except (KeyError, TypeError, ValueError):
                bad += 1
    if bad:
        print(f"warning: {path}: skipped {bad} unreadable line(s)", file=sys.stderr)

    def arrays(d):
        if not d:
            return np.zeros(0), np.zeros(0)
        a = np.array([d[s] for s in sorted(d)], dtype=np.float64)
        return a[:, 0], a[:, 1]

    return arrays(train), arrays(val)


def smooth(y, s):
    """s < 1: bias-corrected EMA with that decay; s >= 1: trailing mean over int(s) points.
    Non-finite values are skipped (the smoothed curve carries the last finite value)."""
    out = np.full_like(y, np.nan)
    if s <= 0:
        return y.copy()
    if s < 1:
        ema, w = 0.0, 0.0
        for i, v in enumerate(y):
            if math.isfinite(v):
                ema = s * ema + (1 - s) * v
                w = s * w + (1 - s)
            out[i] = ema / w if w > 0 else np.nan
        return out
    n = int(s)
    fin = np.isfinite(y)
    vals = np.where(fin, y, 0.0)
    cs = np.concatenate([[0.0], np.cumsum(vals)])
    cn = np.concatenate([[0], np.cumsum(fin)])
    for i in range(len(y)):
        lo = max(0, i + 1 - n)
        k = cn[i + 1] - cn[lo]
        out[i] = (cs[i + 1] - cs[lo]) / k if k else np.nan
    return out


def smooth_name(s):
    return f"EMA {s:g}" if 0 < s < 1 else (f"mean of last {int(s)}" if s >= 1 else "none")


def fmt_tokens(n):
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.4g}{unit}"
    return f"{n:.0f}"


def fmt(v, spec=".4f"):
    return "-" if v is None or not math.isfinite(v) else format(v, spec)


def gap_table(runs, fractions):
    """Markdown table of losses and gaps versus the first run at equal token counts."""
    with_train = [r for r in runs if r["tt"].size]
    if not with_train:
        return "no train records in any run\n"
    shortest = min(r["tt"][-1] for r in with_train)
    common_val = None
    for r in runs:
        s = set(r["vt"].tolist())
        common_val = s if common_val is None else common_val & s
    common_val = np.array(sorted(common_val or []))

    rows = ["| run | tokens | train loss | train gap | train gap % | val tokens | val loss | val gap | val gap % |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base = runs[0]
    for frac in fractions:
        tok = frac * shortest

        def train_at(r):
            if not r["tt"].size or tok < r["tt"][0] or tok > r["tt"][-1]:
                return float("nan")
            ok = np.isfinite(r["ts"])
            return float(np.interp(tok, r["tt"][ok], r["ts"][ok])) if ok.any() else float("nan")

        def val_at(r):
            if common_val.size:
                vt = common_val[np.argmin(np.abs(common_val - tok))]
            elif r["vt"].size:
                vt = r["vt"][np.argmin(np.abs(r["vt"] - tok))]
            else:
                return float("nan"), float("nan")
            return float(vt), float(r["vl"][np.searchsorted(r["vt"], vt)])

        bt = train_at(base)
        _, bv = val_at(base)
        for r in runs:
            t = train_at(r)
            vt, v = val_at(r)
            gap, vgap = t - bt, v - bv
            rows.append(
                f"| {r['label']} | {fmt_tokens(tok)} | {fmt(t)} | {fmt(gap, '+.4f')} | "
                f"{fmt(100 * gap / bt, '+.2f')} | {fmt_tokens(vt) if math.isfinite(vt) else '-'} | "
                f"{fmt(v)} | {fmt(vgap, '+.4f')} | {fmt(100 * vgap / bv, '+.2f')} |")
    return "\n".join(rows) + "\n"


def plot(runs, out, smooth_arg):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_v) = plt.subplots(1, 2, figsize=(13, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, r in enumerate(runs):
        c = colors[i % len(colors)]
        if r["tt"].size:
            ax_t.plot(r["tt"], r["tl"], color=c, alpha=0.2, linewidth=0.8)
            ax_t.plot(r["tt"], r["ts"], color=c, linewidth=1.6, label=r["label"])
        if r["vt"].size:
            ax_v.plot(r["vt"], r["vl"], color=c, marker="o", markersize=3, linewidth=1.4, label=r["label"])
    # Zoom the loss axis onto the later part of training, where runs differ by a few percent.
    for ax, key in ((ax_t, "ts"), (ax_v, "vl")):
        fin = np.concatenate([r[key][len(r[key]) // 10:] for r in runs if r[key].size] or [np.zeros(0)])
        fin = fin[np.isfinite(fin)]
        if fin.size > 1:
            lo, hi = np.percentile(fin, 0.5), np.percentile(fin, 99.5)
            pad = 0.05 * (hi - lo + 1e-9)
            ax.set_ylim(lo - pad, hi + 4 * pad)
    sm = smooth_name(smooth_arg)
    ax_t.set_title(f"train loss (faint: raw, solid: smoothed, {sm})")
    ax_v.set_title("val loss")
    for ax in (ax_t, ax_v):
        ax.set_xlabel("tokens")
        ax.set_ylabel("loss")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: fmt_tokens(v)))
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description="Plot and compare training runs from JSONL logs; the first run is the baseline.",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="[LABEL=]PATH", help="JSONL log of one run")
    ap.add_argument("--out", default="loss.png", help="PNG to write")
    ap.add_argument("--table", default=None, help="also write the Markdown gap table here")
    ap.add_argument("--smooth", type=float, default=0.95,
                    help="train-loss smoothing: EMA decay if < 1, trailing window in points if >= 1, 0 = none")
    ap.add_argument("--fractions", default="0.25,0.5,0.75,1.0",
                    help="table checkpoints, as fractions of the shortest run's tokens")
    args = ap.parse_args()

    runs = []
    for spec in args.runs:
        label, path = parse_run(spec)
        if not os.path.isfile(path):
            sys.exit(f"plot_loss: no such log file: {path} (give LABEL=PATH or PATH)")
        (tt, tl), (vt, vl) = load(path)
        if not tt.size and not vt.size:
            print(f"warning: {path}: no train or val records", file=sys.stderr)
        nonfinite = int((~np.isfinite(tl)).sum())
        if nonfinite:
            print(f"warning: {label}: {nonfinite} non-finite train loss value(s)", file=sys.stderr)
        runs.append(dict(label=label, path=path, tt=tt, tl=tl, ts=smooth(tl, args.smooth), vt=vt, vl=vl))
    labels = [r["label"] for r in runs]
    if len(set(labels)) != len(labels):
        sys.exit(f"plot_loss: duplicate run labels {labels}; name them with LABEL=PATH")

    fractions = [float(f) for f in args.fractions.split(",") if f.strip()]
    for r in runs:
        last = f"{fmt_tokens(r['tt'][-1])} tokens, {len(r['tt'])} train / {len(r['vt'])} val points" if r["tt"].size else "no train points"
        print(f"{r['label']}: {r['path']} ({last})")
    plot(runs, args.out, args.smooth)
    print(f"wrote {args.out}")
    table = gap_table(runs, fractions)
    print(f"\nGaps versus {runs[0]['label']} at equal tokens:\n")
    print(table)
    if args.table:
        with open(args.table, "w") as f:
            f.write(f"Gaps versus baseline `{runs[0]['label']}` at equal tokens "
                    f"(train loss smoothed: {smooth_name(args.smooth)}).\n\n")
            f.write(table)
        print(f"wrote {args.table}")


if __name__ == "__main__":
    main()
