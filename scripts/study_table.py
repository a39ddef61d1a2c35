#!/usr/bin/env python3
"""The multi-seed recipe study's table: final validation loss per recipe over seeds, and which differences
exceed the seed noise.

  python3 scripts/study_table.py out/study --out results/study_d6
  python3 scripts/study_table.py .carry/study_prev --out results/study_d6 --baseline bf16 --reference nvfp4
  python3 scripts/study_table.py out/probe --at-step 264     (runs cut short: dev/study/early_probe.sh)

Input: STUDY_DIR/RECIPE/seedN/log.jsonl, as dev/study/study.sh lays them out (train_gpt_fp4's logs; the
lines read are {"type":"config","steps":S,...}, {"type":"train","step":S,...} and
{"type":"val","step":S,"tokens":N,"val_loss":L}; a step logged twice keeps its last record). A run is
finished when it has the train line of its config's last step; its final validation loss is the val
line of the highest step (train_gpt_fp4 logs it before the last step's update). Unfinished runs are
counted, not used. With --at-step N, the value compared is the val line of step N instead, and a run
counts when it has one (the runs of dev/study/early_probe.sh stop there).

The seeds of a recipe must be seeds of one configuration (scripts/runlabels.py, as scripts/plot_loss.py
checks its labels): the first config lines of RECIPE/seed*/log.jsonl must agree on everything but the seed
and the run's environment (resumed_at, device, sms, cuda_runtime, cublaslt, cudnn, attention; steps, lr,
model, data paths and the recipe text do count; "seed=N" of the run's own seed in the recipe text counts
as the seed), and each config line's seed must be its folder's (seedN). Otherwise the script stops with an
`error:` line naming the two logs and the first field they differ in (e.g. a run that study.sh reports as
"finished under other settings than the plan's": delete it or move it elsewhere). A log without a config
line is unchecked and unfinished, with a warning. Two recipes whose logs agree on everything but the seed get a
warning (the same configuration under two names).

Output (--out DIR, printed too):
  table.md      per recipe: finished seeds, mean final val loss, std over seeds (n-1), spread (max-min),
                gap to the baseline's mean in %, each seed's value; then each recipe against the baseline
                (bf16) and the reference (nvfp4): the difference of means, its standard error
                sqrt(s1^2/n1 + s2^2/n2), Welch's t test (t, Welch-Satterthwaite df, two-sided p), whether
                |diff| > 2 SE, and the paired test over the seeds both have (the same seed gives the same
                initialization and data order under every recipe, so the paired differences cancel that
                part of the seed noise); a difference "exceeds the seed noise" when Welch's p < --alpha
  summary.json  the same numbers
  loss.png      (numpy and matplotlib only) validation loss against tokens, the mean over seeds with a
                band from the lowest to the highest seed, and the gap to the baseline in % with the
                seeds' band (scripts/plot_loss.py draws it); gaps.md beside it is plot_loss.py's table
The table needs only the standard library; the plot is skipped, with a note, where numpy or matplotlib
is missing.
"""
import argparse
import glob
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runlabels  # noqa: E402


# ------------------------------------------------------------------------------------------------
# Student's t distribution, without scipy: the two-sided p value is the regularized incomplete beta
# function I_x(df/2, 1/2) at x = df / (df + t^2) (Numerical Recipes' continued fraction).

def _betacf(a, b, x):
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        de = d * c
        h *= de
        if abs(de - 1.0) < eps:
            break
    return h


def betainc(a, b, x):
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1.0 - x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t, df):
    if not (math.isfinite(df) and df > 0):
        return float("nan")
    if math.isinf(t):
        return 0.0
    if not math.isfinite(t):
        return float("nan")
    return betainc(df / 2.0, 0.5, df / (df + t * t))


# ------------------------------------------------------------------------------------------------
# statistics of a list of floats

def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def std(xs):   # sample standard deviation (n - 1)
    if len(xs) < 2:
        return float("nan")
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def welch(a, b):
    """-> dict(diff, se, t, df, p) of mean(a) - mean(b); NaN where a side has fewer than 2 values."""
    out = dict(diff=mean(a) - mean(b), se=float("nan"), t=float("nan"), df=float("nan"), p=float("nan"))
    if len(a) < 2 or len(b) < 2:
        return out
    va, vb = std(a) ** 2 / len(a), std(b) ** 2 / len(b)
    se = math.sqrt(va + vb)
    out["se"] = se
    if se == 0.0:
        out["t"] = 0.0 if out["diff"] == 0 else math.copysign(math.inf, out["diff"])
        out["p"] = 1.0 if out["diff"] == 0 else 0.0
        return out
    out["t"] = out["diff"] / se
    den = (va * va / (len(a) - 1) if va else 0.0) + (vb * vb / (len(b) - 1) if vb else 0.0)
    out["df"] = (va + vb) ** 2 / den if den > 0 else float("inf")
    out["p"] = t_two_sided_p(out["t"], out["df"]) if math.isfinite(out["df"]) else \
        math.erfc(abs(out["t"]) / math.sqrt(2.0))
    return out


def paired(da, db):
    """Paired t test over the seeds both dicts (seed -> value) have: mean difference da - db."""
    seeds = sorted(set(da) & set(db))
    d = [da[s] - db[s] for s in seeds]
    out = dict(n=len(d), diff=mean(d), sd=std(d), t=float("nan"), p=float("nan"))
    if len(d) >= 2:
        se = out["sd"] / math.sqrt(len(d))
        if se == 0.0:
            out["t"] = 0.0 if out["diff"] == 0 else math.copysign(math.inf, out["diff"])
            out["p"] = 1.0 if out["diff"] == 0 else 0.0
        else:
            out["t"] = out["diff"] / se
            out["p"] = t_two_sided_p(out["t"], len(d) - 1)
    return out


# ------------------------------------------------------------------------------------------------
# the logs

def read_log(path):
    """-> dict(steps, finished, final_val, final_tokens, last_step, val={step: (tokens, loss)},
    cfg=the first config line or None)"""
    cfg_steps, cfg, train, val, bad = None, None, {}, {}, 0
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError:
                bad += 1
                continue
            kind = r.get("type") if isinstance(r, dict) else None
            try:
                if kind == "config":
                    cfg = r if cfg is None else cfg
                    cfg_steps = int(r["steps"])
                elif kind == "train":
                    train[int(r["step"])] = float(r["loss"])
                elif kind == "val":
                    val[int(r["step"])] = (float(r["tokens"]), float(r["val_loss"]))
            except (KeyError, TypeError, ValueError):
                bad += 1
    if bad:
        print(f"warning: {path}: skipped {bad} unreadable line(s)", file=sys.stderr)
    last = max(train) if train else 0
    finished = cfg_steps is not None and cfg_steps > 0 and last >= cfg_steps and bool(val)
    fv = val[max(val)] if val else (float("nan"), float("nan"))
    return dict(steps=cfg_steps, finished=finished, final_val=fv[1], final_tokens=fv[0], last_step=last,
                val=val, cfg=cfg)


def collect(study_dir):
    """-> {recipe: {seed: run}} for STUDY_DIR/RECIPE/seedN/log.jsonl"""
    runs = {}
    for path in sorted(glob.glob(os.path.join(study_dir, "*", "seed*", "log.jsonl"))):
        seed_dir = os.path.basename(os.path.dirname(path))
        recipe = os.path.basename(os.path.dirname(os.path.dirname(path)))
        m = re.fullmatch(r"seed(\d+)", seed_dir)
        if not m:
            continue
        run = read_log(path)
        run["path"] = path
        runs.setdefault(recipe, {})[int(m.group(1))] = run
    return runs


def check_seeds(runs):
    """Each recipe's runs are seeds of one configuration (scripts/runlabels.py); raises runlabels.RunError."""
    for recipe in sorted(runs):
        members = [dict(path=runs[recipe][s]["path"], cfg=runs[recipe][s]["cfg"], seed=s, warned=False)
                   for s in sorted(runs[recipe])]
        for m in members:
            cs = runlabels.seed_of(m["cfg"])
            if m["cfg"] is not None and "seed" in m["cfg"] and cs != m["seed"]:
                raise runlabels.RunError(f"{m['path']}: its config line says seed {m['cfg']['seed']}, its folder "
                                         f"seed{m['seed']}")
            if m["cfg"] is None:
                runlabels.warn(f"{m['path']}: no config line: not checked against the other seeds of {recipe}, and "
                               f"unfinished (its step count is the config line's)")
                m["warned"] = True
        runlabels.check_group(recipe, members, remedy="the seeds of a recipe may differ in the seed only (move "
                                                      "or delete the log that does not belong)")
    firsts = [(r, next(run for run in runs[r].values() if run["cfg"] is not None)) for r in sorted(runs)
              if any(run["cfg"] is not None for run in runs[r].values())]
    for i, (ra, a) in enumerate(firsts):
        for rb, b in firsts[i + 1:]:
            if runlabels.first_difference(a["cfg"], b["cfg"]) is None:
                runlabels.warn(f"recipes '{ra}' and '{rb}' have the same configuration ({a['path']} and {b['path']} "
                               f"agree on everything but the seed)")


def at_step(runs, step):
    """Every run's compared value becomes its validation loss at STEP; runs without one do not count."""
    for seeds in runs.values():
        for run in seeds.values():
            run["finished"] = step in run["val"]
            run["final_tokens"], run["final_val"] = run["val"].get(step, (float("nan"), float("nan")))


def recipe_order(study_dir, recipes, baseline, reference):
    """The baseline, the reference, then plan.txt's order (dev/study/study.sh writes it), then the rest."""
    planned = []
    try:
        with open(os.path.join(study_dir, "plan.txt")) as f:
            for line in f:
                if line.startswith("recipes "):
                    planned = line.split()[1:]
    except OSError:
        pass
    order = [r for r in [baseline, reference] + planned if r in recipes]
    order += sorted(r for r in recipes if r not in order)
    seen = []
    for r in order:
        if r not in seen:
            seen.append(r)
    return seen


# ------------------------------------------------------------------------------------------------
# the table

def f4(v, spec=".4f"):
    return "-" if v is None or not isinstance(v, (int, float)) or not math.isfinite(v) else format(v, spec)


def fp(p):
    if p is None or not math.isfinite(p):
        return "-"
    return f"{p:.2g}" if p >= 0.001 else "<0.001"


def fmt_tokens(n):
    if not math.isfinite(n):
        return "-"
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.4g}{unit}"
    return f"{n:.0f}"


def summarize(runs, order, baseline, reference, alpha):
    stats = {}
    for r in order:
        done = {s: run for s, run in runs[r].items() if run["finished"]}
        vals = [done[s]["final_val"] for s in sorted(done)]
        toks = sorted(set(done[s]["final_tokens"] for s in done))
        stats[r] = dict(recipe=r, seeds=sorted(done), unfinished=sorted(s for s in runs[r] if s not in done),
                        values={s: done[s]["final_val"] for s in sorted(done)}, n=len(vals), mean=mean(vals),
                        std=std(vals), min=min(vals) if vals else float("nan"),
                        max=max(vals) if vals else float("nan"), tokens=toks)
        st = stats[r]
        st["spread"] = st["max"] - st["min"]
        st["se"] = st["std"] / math.sqrt(st["n"]) if st["n"] >= 2 else float("nan")
    base = stats.get(baseline)
    for r in order:
        st = stats[r]
        st["gap_pct"] = 100.0 * (st["mean"] - base["mean"]) / base["mean"] if base and base["n"] else float("nan")
        st["vs"] = {}
        for other in (baseline, reference):
            if other not in stats or other == r or other in st["vs"] or r == baseline:
                continue
            o = stats[other]
            a, b = [st["values"][s] for s in st["seeds"]], [o["values"][s] for s in o["seeds"]]
            w = welch(a, b)
            pr = paired(st["values"], o["values"])
            w["gap_pct"] = 100.0 * w["diff"] / o["mean"] if o["n"] else float("nan")
            w["over_2se"] = bool(math.isfinite(w["se"]) and abs(w["diff"]) > 2.0 * w["se"])
            w["exceeds_noise"] = bool(math.isfinite(w["p"]) and w["p"] < alpha)
            pr["exceeds_noise"] = bool(math.isfinite(pr["p"]) and pr["p"] < alpha)
            st["vs"][other] = dict(welch=w, paired=pr)
    return stats


def verdict(w, pr):
    if not math.isfinite(w["p"]):
        return "too few seeds"
    side = "higher" if w["diff"] > 0 else "lower"
    if w["exceeds_noise"]:
        return f"**{side}: exceeds the seed noise**"
    if pr["exceeds_noise"]:
        return f"{side} in the paired test only"
    return "within the seed noise"


def markdown(stats, order, baseline, reference, alpha, study_dir, step=None):
    all_seeds = sorted(set(s for r in order for s in stats[r]["seeds"]))
    toks = sorted(set(t for r in order for t in stats[r]["tokens"]))
    what = "Final validation loss" if step is None else f"Validation loss at step {step}"
    lines = [f"{what} over seeds (`{study_dir}`; {', '.join(fmt_tokens(t) for t in toks) or 'no'} "
             f"tokens at that validation).", ""]
    if len(toks) > 1:
        lines += ["**Warning: the finished runs end at different token counts; their final losses do not compare.**",
                  ""]
    head = (f"| recipe | seeds | mean | std | spread | gap to {baseline} | "
            + " | ".join(f"seed {s}" for s in all_seeds) + " |")
    lines += [head, "|---|---:|---:|---:|---:|---:|" + "---:|" * len(all_seeds)]
    for r in order:
        st = stats[r]
        n = f"{st['n']}" + (f" (+{len(st['unfinished'])} unfinished)" if st["unfinished"] else "")
        cells = [f4(st["values"][s]) if s in st["values"] else "-" for s in all_seeds]
        gap = "" if r == baseline else f4(st["gap_pct"], "+.2f") + ("%" if math.isfinite(st["gap_pct"]) else "")
        lines.append(f"| {r} | {n} | {f4(st['mean'])} | {f4(st['std'])} | {f4(st['spread'])} | {gap} | "
                     + " | ".join(cells) + " |")
    lines += ["", f"Differences of the mean {what[0].lower() + what[1:]} (row minus column recipe). Welch: t test with "
              f"unequal variances, SE = sqrt(s1^2/n1 + s2^2/n2); paired: over the seeds both have (a seed is the "
              f"same initialization and data order under every recipe). Exceeds the seed noise: Welch's two-sided "
              f"p < {alpha:g}.", "",
              "| recipe | vs | diff | gap | SE | > 2 SE | Welch t | df | p | paired n | paired diff | paired sd | "
              "paired p | verdict |",
              "|---|---|---:|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in order:
        for other in (baseline, reference):
            if other not in stats[r]["vs"]:
                continue
            w, pr = stats[r]["vs"][other]["welch"], stats[r]["vs"][other]["paired"]
            lines.append(
                f"| {r} | {other} | {f4(w['diff'], '+.4f')} | "
                f"{f4(w['gap_pct'], '+.2f')}{'%' if math.isfinite(w['gap_pct']) else ''} | {f4(w['se'])} | "
                f"{('yes' if w['over_2se'] else 'no') if math.isfinite(w['se']) else '-'} | {f4(w['t'], '.2f')} | "
                f"{f4(w['df'], '.1f')} | {fp(w['p'])} | {pr['n']} | {f4(pr['diff'], '+.4f')} | {f4(pr['sd'])} | "
                f"{fp(pr['p'])} | {verdict(w, pr)} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------
# the plot (scripts/plot_loss.py: mean curves with a min-max band over seeds, and the gap panel)

def plot(runs, order, out_png, gap_of):
    try:
        import numpy  # noqa: F401
        import matplotlib  # noqa: F401
    except ImportError as e:
        return f"no plot: {e.name} is not installed"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import plot_loss
    configs = []
    for r in order:
        group = []
        for s in sorted(runs[r]):
            run = runs[r][s]
            if not run["finished"]:
                continue
            (tt, tl), (vt, vl), ev = plot_loss.load(run["path"])
            group.append(dict(label=r, path=run["path"], tt=tt, tl=tl, ts=plot_loss.smooth(tl, 0.95), vt=vt, vl=vl,
                              ev=ev))
        if group:
            configs.append(plot_loss.Config(r, group))
    if not configs:
        return "no plot: no finished run"
    args = argparse.Namespace(skip=0.05, logx=False, gap_of=gap_of, smooth=0.95)
    plot_loss.plot(configs, out_png, args)
    table = plot_loss.gap_table(configs, [0.25, 0.5, 0.75, 1.0])
    with open(os.path.join(os.path.dirname(out_png), "gaps.md"), "w") as f:
        f.write(f"Gaps versus `{configs[0].label}` at equal tokens (scripts/plot_loss.py; means over seeds).\n\n")
        f.write(table)
    return f"wrote {out_png} and gaps.md"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("study_dir", help="STUDY_DIR with RECIPE/seedN/log.jsonl")
    ap.add_argument("--out", default=None, help="folder for table.md, summary.json, loss.png, gaps.md")
    ap.add_argument("--baseline", default="bf16", help="the recipe gaps are measured against")
    ap.add_argument("--reference", default="nvfp4", help="a second recipe every other one is tested against")
    ap.add_argument("--alpha", type=float, default=0.05, help="significance level of the t tests")
    ap.add_argument("--gap-of", choices=["val", "train", "both"], default="val", help="the plot's gap panel")
    ap.add_argument("--no-plot", action="store_true", help="the table only")
    ap.add_argument("--at-step", type=int, default=None, metavar="N",
                    help="compare the validation loss at step N, not the final one (runs cut short)")
    args = ap.parse_args()

    runs = collect(args.study_dir)
    if not runs:
        print(f"error: no RECIPE/seedN/log.jsonl under {args.study_dir}", file=sys.stderr)
        sys.exit(1)
    try:
        check_seeds(runs)
    except runlabels.RunError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    if args.at_step is not None:
        at_step(runs, args.at_step)
    order = recipe_order(args.study_dir, runs, args.baseline, args.reference)
    if args.baseline not in runs:
        print(f"warning: no '{args.baseline}' runs: no gaps to the baseline", file=sys.stderr)
    stats = summarize(runs, order, args.baseline, args.reference, args.alpha)
    md = markdown(stats, order, args.baseline, args.reference, args.alpha, args.study_dir, args.at_step)
    print(md)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "table.md"), "w") as f:
            f.write(md)
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump({r: stats[r] for r in order}, f, indent=1, default=str, allow_nan=True)
        print(f"wrote {os.path.join(args.out, 'table.md')} and summary.json")
        if not args.no_plot:
            print(plot(runs, order, os.path.join(args.out, "loss.png"), args.gap_of))


if __name__ == "__main__":
    main()
