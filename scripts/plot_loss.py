#!/usr/bin/env python3
"""Compare training runs from their JSONL logs: loss and accuracy plots, and a table of gaps at equal tokens.

  python3 scripts/plot_loss.py bf16=runs/bf16/log.jsonl nvfp4=runs/nvfp4/log.jsonl --out loss.png --table gaps.md
  python3 scripts/plot_loss.py bf16=s1/bf16/log.jsonl bf16=s2/bf16/log.jsonl nvfp4=s1/nvfp4/log.jsonl nvfp4=s2/nvfp4/log.jsonl

Each run is LABEL=PATH or PATH. Runs that share a label are seeds of one configuration: its curves are the
mean over its seeds, with a band from the lowest to the highest seed. The first label is the baseline.
Logs under one label must really be seeds (scripts/runlabels.py has the rule): their first config lines
must agree on everything but the seed and the run's environment (resumed_at, device, sms, cuda_runtime,
cublaslt, cudnn, attention; the data paths do count), and no seed may come twice; otherwise the script
stops with an `error:` line naming the two logs and the first field they differ in. Without a label, a run
is labelled from its config line: the recipe's preset name ("nvfp4"), plus the model where the runs' models
differ ("nvfp4 d12"), plus what else tells configurations with alike labels apart ("nvfp4 lr=0.0003"),
never the seed; unlabeled logs whose config lines agree on everything but the seed become seeds of one
configuration, and two with the same seed are refused (the same run twice?). A log without a config line
is labelled by its directory's name, with a warning. One line per configuration (label, logs, seeds) is
printed before the plot. Lines read from each log (others are ignored):
  {"type":"train","step":S,"tokens":N,"loss":L}   {"type":"val","step":S,"tokens":N,"val_loss":L}
  {"type":"eval","step":S,"tokens":N,"hellaswag_acc":A,"lambada_acc":A,...}   (train_gpt_fp4 --eval-every)
A step logged twice (a resumed run) keeps its last record.

Panels (against tokens):
  train loss   raw (faint) and smoothed (--smooth)
  val loss     from --skip of the tokens on (default 5%: the first steps' losses of 7-11 would flatten
               the rest), or on a log axis (--logx)
  gap          100 (loss - baseline) / baseline, per configuration: the validation loss (markers) and the
               smoothed train loss (thin); with several seeds the band spans the seeds' own gaps (each seed
               against the baseline's mean), the baseline's band is its seeds' spread around its own mean
  accuracy     HellaSwag (solid; 25% is chance) and LAMBADA (dashed) when the logs hold eval lines
Table: at 25/50/75/100% (--fractions) of the shortest configuration's tokens, each configuration's smoothed
train loss and val loss (mean over seeds, at the val point nearest to it that all share) and their gaps
to the baseline, then the last evaluation's accuracies. An EMA lags the raw loss, but every run is
smoothed the same way, so gaps at equal tokens stay comparable.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runlabels  # noqa: E402

EVAL_KEYS = ("hellaswag_acc", "lambada_acc")


def parse_run(spec):
    """LABEL=PATH -> (LABEL, PATH); PATH -> (None, PATH): the label comes from the log's config line."""
    if "=" in spec and not os.path.exists(spec):
        label, path = spec.split("=", 1)
        return label or None, path
    return None, spec


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def load(path):
    """-> (train tokens, train loss), (val tokens, val loss), {eval key: (tokens, values)}"""
    train, val, evals = {}, {}, {}
    bad = 0
    with open(path) as f:
        for line in f:
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
                elif kind == "eval" and "checkpoint" not in r:   # not an --eval-only line
                    evals[int(r["step"])] = (float(r["tokens"]), r)
            except (KeyError, TypeError, ValueError):
                bad += 1
    if bad:
        print(f"warning: {path}: skipped {bad} unreadable line(s)", file=sys.stderr)

    def arrays(d):
        if not d:
            return np.zeros(0), np.zeros(0)
        a = np.array([d[s] for s in sorted(d)], dtype=np.float64)
        return a[:, 0], a[:, 1]

    ev = {}
    for key in EVAL_KEYS:
        pts = [(evals[s][0], evals[s][1][key]) for s in sorted(evals) if evals[s][1].get(key) is not None]
        if pts:
            a = np.array(pts, dtype=np.float64)
            ev[key] = (a[:, 0], a[:, 1])
    return arrays(train), arrays(val), ev


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


# ------------------------------------------------------------------------------------------------
# configurations: the seeds of one label

def on_grid(x, y, grid):
    """y(x) at the grid points inside x's range (NaN outside); x increasing."""
    ok = np.isfinite(y)
    if ok.sum() < 1:
        return np.full(len(grid), np.nan)
    out = np.interp(grid, x[ok], y[ok])
    out[(grid < x[ok][0]) | (grid > x[ok][-1])] = np.nan
    return out


def common_points(arrays):
    """The x values every array has (exactly), sorted."""
    s = None
    for x in arrays:
        s = set(x.tolist()) if s is None else s & set(x.tolist())
    return np.array(sorted(s or []))


class Config:
    """One label: its seeds' curves, and their means on shared points."""

    def __init__(self, label, runs):
        self.label, self.runs = label, runs
        self.nseeds = len(runs)
        # val and eval points: the token counts every seed logged
        self.vt = common_points([r["vt"] for r in runs])
        self.vl_seeds = np.array([[r["vl"][np.searchsorted(r["vt"], t)] for t in self.vt] for r in runs]).reshape(len(runs), -1)
        self.vl = self.vl_seeds.mean(axis=0) if self.vt.size else np.zeros(0)
        # train: the smoothed loss of each seed on a grid over the tokens all seeds reached
        with_train = [r for r in runs if r["tt"].size]
        if with_train:
            lo, hi = max(r["tt"][0] for r in with_train), min(r["tt"][-1] for r in with_train)
            self.tt = np.linspace(lo, hi, 400) if hi > lo else np.array([lo])
            self.ts_seeds = np.array([on_grid(r["tt"], r["ts"], self.tt) for r in with_train])
            self.ts = self.ts_seeds.mean(axis=0)
        else:
            self.tt, self.ts_seeds, self.ts = np.zeros(0), np.zeros((0, 0)), np.zeros(0)
        self.evals = {}
        for key in EVAL_KEYS:
            if all(key in r["ev"] for r in runs):
                et = common_points([r["ev"][key][0] for r in runs])
                seeds = np.array([[r["ev"][key][1][np.searchsorted(r["ev"][key][0], t)] for t in et] for r in runs])
                self.evals[key] = (et, seeds.reshape(len(runs), -1))


def gap_curves(cfg, base, kind):
    """(tokens, mean gap %, low, high) of cfg against the baseline's mean; low/high span the seeds."""
    if kind == "val":
        t = np.array(sorted(set(cfg.vt.tolist()) & set(base.vt.tolist())))
        if not t.size:
            return t, t, t, t
        b = np.array([base.vl[np.searchsorted(base.vt, x)] for x in t])
        seeds = np.array([[s[np.searchsorted(cfg.vt, x)] for x in t] for s in cfg.vl_seeds])
    else:
        if not cfg.tt.size or not base.tt.size:
            z = np.zeros(0)
            return z, z, z, z
        t = cfg.tt
        b = on_grid(base.tt, base.ts, t)
        seeds = cfg.ts_seeds
    g = 100.0 * (seeds - b) / b
    return t, g.mean(axis=0), g.min(axis=0), g.max(axis=0)


# ------------------------------------------------------------------------------------------------
# the table

def gap_table(configs, fractions):
    """Markdown table of losses and gaps versus the first configuration at equal token counts."""
    with_train = [c for c in configs if c.tt.size]
    if not with_train:
        return "no train records in any run\n"
    shortest = min(c.tt[-1] for c in with_train)
    common_val = common_points([c.vt for c in configs])
    seeds_note = any(c.nseeds > 1 for c in configs)
    rows = [f"| run{' (seeds)' if seeds_note else ''} | tokens | train loss | train gap | train gap % | val tokens | "
            "val loss | val gap | val gap % |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base = configs[0]
    for frac in fractions:
        tok = frac * shortest

        def train_at(c):   # each seed's smoothed loss interpolated at tok, then their mean
            vals = [on_grid(r["tt"], r["ts"], np.array([tok]))[0] for r in c.runs if r["tt"].size]
            return float(np.mean(vals)) if vals else float("nan")

        def val_at(c):
            pts = common_val if common_val.size else c.vt
            if not pts.size:
                return float("nan"), float("nan")
            vt = pts[np.argmin(np.abs(pts - tok))]
            return float(vt), float(c.vl[np.searchsorted(c.vt, vt)])

        bt = train_at(base)
        _, bv = val_at(base)
        for c in configs:
            t = train_at(c)
            vt, v = val_at(c)
            gap, vgap = t - bt, v - bv
            name = f"{c.label} ({c.nseeds})" if seeds_note else c.label
            rows.append(
                f"| {name} | {fmt_tokens(tok)} | {fmt(t)} | {fmt(gap, '+.4f')} | "
                f"{fmt(100 * gap / bt, '+.2f')} | {fmt_tokens(vt) if math.isfinite(vt) else '-'} | "
                f"{fmt(v)} | {fmt(vgap, '+.4f')} | {fmt(100 * vgap / bv, '+.2f')} |")
    if any(c.evals for c in configs):
        rows += ["", "| run | eval tokens | HellaSwag | LAMBADA |", "|---|---:|---:|---:|"]
        for c in configs:
            cells = []
            for key in EVAL_KEYS:
                if key in c.evals and c.evals[key][0].size:
                    et, seeds = c.evals[key]
                    cells.append((et[-1], f"{100 * seeds[:, -1].mean():.2f}%"))
                else:
                    cells.append((float("nan"), "-"))
            tok = next((t for t, _ in cells if math.isfinite(t)), float("nan"))
            rows.append(f"| {c.label} | {fmt_tokens(tok) if math.isfinite(tok) else '-'} | {cells[0][1]} | {cells[1][1]} |")
    return "\n".join(rows) + "\n"


# ------------------------------------------------------------------------------------------------
# the plot

def plot(configs, out, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_eval = any(c.evals for c in configs)
    if has_eval:
        fig, axes = plt.subplots(2, 2, figsize=(14, 10))
        ax_t, ax_v, ax_g, ax_e = axes.flatten()
    else:
        fig, axes = plt.subplots(1, 3, figsize=(19, 5.2))
        ax_t, ax_v, ax_g = axes
        ax_e = None
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    max_tok = max([c.tt[-1] for c in configs if c.tt.size] + [c.vt[-1] for c in configs if c.vt.size] + [1.0])
    x0 = args.skip * max_tok   # where the zoomed panels start (linear x)

    def band(ax, x, lo, hi, color):
        ax.fill_between(x, lo, hi, color=color, alpha=0.18, linewidth=0)

    for i, c in enumerate(configs):
        col = colors[i % len(colors)]
        lab = f"{c.label} ({c.nseeds} seeds)" if c.nseeds > 1 else c.label
        for r in c.runs:   # train: every seed's raw loss, faint; the smoothed mean, solid
            if r["tt"].size:
                ax_t.plot(r["tt"], r["tl"], color=col, alpha=0.15, linewidth=0.7)
        if c.tt.size:
            ax_t.plot(c.tt, c.ts, color=col, linewidth=1.6, label=lab)
            if c.nseeds > 1:
                band(ax_t, c.tt, np.nanmin(c.ts_seeds, axis=0), np.nanmax(c.ts_seeds, axis=0), col)
        if c.vt.size:
            keep = c.vt > 0 if args.logx else c.vt >= x0
            ax_v.plot(c.vt[keep], c.vl[keep], color=col, marker="o", markersize=3.5, linewidth=1.4, label=lab)
            if c.nseeds > 1:
                band(ax_v, c.vt[keep], c.vl_seeds.min(axis=0)[keep], c.vl_seeds.max(axis=0)[keep], col)
        # the baseline's gap to itself is zero with one seed; with several, its band shows the seed noise
        for kind in (("val", "train") if args.gap_of == "both" else (args.gap_of,)) if i > 0 or c.nseeds > 1 else ():
            t, g, lo, hi = gap_curves(c, configs[0], kind)
            keep = (t > 0 if args.logx else t >= x0) & np.isfinite(g)
            if not keep.any():
                continue
            if kind == "val":
                ax_g.plot(t[keep], g[keep], color=col, marker="o", markersize=3.5, linewidth=1.5,
                          label=f"{lab}: validation")
            else:
                ax_g.plot(t[keep], g[keep], color=col, linewidth=0.9, alpha=0.6, label=f"{lab}: train (smoothed)")
            if c.nseeds > 1:
                band(ax_g, t[keep], lo[keep], hi[keep], col)
        if ax_e is not None:
            for key, style in zip(EVAL_KEYS, ("-", "--")):
                if key not in c.evals:
                    continue
                et, seeds = c.evals[key]
                name = "HellaSwag" if key.startswith("hellaswag") else "LAMBADA"
                ax_e.plot(et, 100 * seeds.mean(axis=0), color=col, linestyle=style, marker="o", markersize=3,
                          label=f"{lab}: {name}")
                if c.nseeds > 1:
                    band(ax_e, et, 100 * seeds.min(axis=0), 100 * seeds.max(axis=0), col)

    # the val panel's y range from what it shows
    shown = np.concatenate([c.vl[(c.vt > 0) if args.logx else (c.vt >= x0)] for c in configs if c.vt.size] or [np.zeros(0)])
    shown = shown[np.isfinite(shown)]
    if shown.size > 1:
        lo, hi = shown.min(), shown.max()
        pad = 0.05 * (hi - lo + 1e-9)
        ax_v.set_ylim(lo - pad, hi + pad)
    # train: zoom onto the later part, where runs differ by a few percent
    fin = np.concatenate([c.ts[len(c.ts) // 10:] for c in configs if c.ts.size] or [np.zeros(0)])
    fin = fin[np.isfinite(fin)]
    if fin.size > 1:
        lo, hi = np.percentile(fin, 0.5), np.percentile(fin, 99.5)
        pad = 0.05 * (hi - lo + 1e-9)
        ax_t.set_ylim(lo - pad, hi + 4 * pad)
    ax_g.axhline(0.0, color="gray", linewidth=0.8)
    seeds = max(c.nseeds for c in configs)
    ax_t.set_title(f"train loss (faint: raw, solid: smoothed, {smooth_name(args.smooth)})")
    start = "log tokens" if args.logx else f"from {fmt_tokens(x0)} tokens ({100 * args.skip:g}%)"
    ax_v.set_title(f"validation loss, {start}")
    ax_g.set_title(f"loss gap to {configs[0].label}, %" + (" (bands: spread of the seeds)" if seeds > 1 else
                                                         " (one seed each: no band)"))
    ax_t.set_ylabel("loss")
    ax_v.set_ylabel("loss")
    ax_g.set_ylabel("100 (loss - baseline) / baseline")
    panels = [ax_t, ax_v, ax_g]
    if ax_e is not None:
        ax_e.axhline(25.0, color="gray", linewidth=0.8, linestyle=":", label="HellaSwag chance (25%)")
        ax_e.set_title("held-out accuracy (solid: HellaSwag, dashed: LAMBADA)")
        ax_e.set_ylabel("accuracy, %")
        panels.append(ax_e)
    for ax in panels:
        ax.set_xlabel("tokens")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        if args.logx and ax is not ax_t:
            ax.set_xscale("log")
        else:
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: fmt_tokens(v)))
    if not args.logx:
        ax_v.set_xlim(left=x0 - 0.02 * max_tok)
        ax_g.set_xlim(left=x0 - 0.02 * max_tok)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description="Plot and compare training runs from JSONL logs; the first label is the "
                                             "baseline, runs sharing a label are seeds (of one configuration: "
                                             "their config lines must agree but for the seed); a run without a "
                                             "label is labelled from its config line.",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="[LABEL=]PATH",
                    help="JSONL log of one run (no LABEL: its recipe, and what else tells it from the others)")
    ap.add_argument("--out", default="loss.png", help="PNG to write")
    ap.add_argument("--table", default=None, help="also write the Markdown gap table here")
    ap.add_argument("--smooth", type=float, default=0.95,
                    help="train-loss smoothing: EMA decay if < 1, trailing window in points if >= 1, 0 = none")
    ap.add_argument("--fractions", default="0.25,0.5,0.75,1.0",
                    help="table checkpoints, as fractions of the shortest run's tokens")
    ap.add_argument("--skip", type=float, default=0.05,
                    help="the val and gap panels start at this fraction of the tokens (linear axis)")
    ap.add_argument("--logx", action="store_true", help="log token axis for the val, gap and accuracy panels instead")
    ap.add_argument("--gap-of", choices=["val", "train", "both"], default="both", help="what the gap panel compares")
    args = ap.parse_args()

    runs = []
    for spec in args.runs:
        label, path = parse_run(spec)
        if not os.path.isfile(path):
            die(f"no such log file: {path} (give LABEL=PATH or PATH)")
        runs.append(dict(label=label, path=path))
    try:
        groups = runlabels.group_runs(runs)
    except runlabels.RunError as e:
        die(str(e))
    for line in runlabels.describe(groups):
        print(line)
    for label, members in groups:
        for run in members:
            path = run["path"]
            (tt, tl), (vt, vl), ev = load(path)
            if not tt.size and not vt.size:
                print(f"warning: {path}: no train or val records", file=sys.stderr)
            nonfinite = int((~np.isfinite(tl)).sum())
            if nonfinite:
                print(f"warning: {label}: {nonfinite} non-finite train loss value(s)", file=sys.stderr)
            run.update(tt=tt, tl=tl, ts=smooth(tl, args.smooth), vt=vt, vl=vl, ev=ev)
            last = f"{fmt_tokens(tt[-1])} tokens, {len(tt)} train / {len(vt)} val / " \
                   f"{len(next(iter(ev.values()), ([],))[0])} eval points" if tt.size else "no train points"
            print(f"{label}: {path} ({last})")
    configs = [Config(label, members) for label, members in groups]
    if not any(c.evals for c in configs):
        print("note: no eval lines (train_gpt_fp4 --eval-every) in these logs: the accuracy panel is left out")
    fractions = [float(f) for f in args.fractions.split(",") if f.strip()]
    plot(configs, args.out, args)
    print(f"wrote {args.out}")
    table = gap_table(configs, fractions)
    print(f"\nGaps versus {configs[0].label} at equal tokens:\n")
    print(table)
    if args.table:
        with open(args.table, "w") as f:
            f.write(f"Gaps versus baseline `{configs[0].label}` at equal tokens "
                    f"(train loss smoothed: {smooth_name(args.smooth)}"
                    f"{'; seeds averaged' if any(c.nseeds > 1 for c in configs) else ''}).\n\n")
            f.write(table)
        print(f"wrote {args.table}")


if __name__ == "__main__":
    main()
