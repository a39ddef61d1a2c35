"""Which training logs are seeds of one configuration, and what to call each configuration
(scripts/plot_loss.py and scripts/study_table.py; standard library only).

A log's configuration is its first {"type":"config",...} line (train_gpt_fp4's open_log; a resumed run
appends another config line, with resumed_at, which is not used). Two logs are seeds of one configuration
when their config lines agree on every field but these:
  seed                                      what tells the seeds apart
  resumed_at, device, sms, cuda_runtime,    the run's environment: where and with which libraries it ran,
  cublaslt, cudnn, attention                not what it trained (attention: the backend, cuDNN or the own
                                            kernel, follows from the machine's libraries)
Everything else counts, the data paths (train_data, val_data) included. A field only one of the two logs has
(older trainers wrote fewer: arch, kv_heads, mlp_hidden, tied, sms, ...) is not compared, nor a model named
"checkpoint" (a resumed run of older trainers). In the recipe text, a "seed=N" of the run's own seed counts
as the seed (dev/study/study.sh draws ufp4's Hadamard signs from the run's seed): ufp4 with seed=2 in its
slots under --seed 2 is the same configuration as seed=3 under --seed 3.

Labels (runs given without one): the recipe's preset name (the text before ':' in "recipe"), plus the model
when the configurations' models differ, plus the settings that tell configurations apart where that still
leaves two alike ("nvfp4 lr=0.0003", "nvfp4 (tensor amax: delayed)"), never the seed (a recipe item's
seed=N of the run's own seed reads seed=S: "ufp4 (fprop.x=int4,1x16,e4m3,rne,h16,seed=S)"). Refused (RunError):
two logs under one label that differ in more than the seed, and one seed twice in one configuration (the same
run given twice?). A log without a config line keeps its directory's name as its label, with a warning.
"""
import json
import os
import re
import sys

# fields that may differ between the seeds of one configuration (the seed, and the run's environment)
IGNORED = frozenset(("type", "seed", "resumed_at", "device", "sms", "cuda_runtime", "cublaslt", "cudnn",
                     "attention"))
# fields that follow from others: left out of labels
DERIVED = frozenset(("parameters", "bf16_forward_step", "grad_accum"))


class RunError(Exception):
    """A set of logs that cannot be compared as asked; the message is the `error:` line's text."""


def warn(msg):
    print(f"warning: {msg}", file=sys.stderr)


def first_config(path):
    """The first config line of a JSONL log as a dict, or None."""
    with open(path) as f:
        for line in f:
            line = line.strip()
            if '"config"' not in line:
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and r.get("type") == "config":
                return r
    return None


def dir_label(path):
    """The old label of a run: the name of its log's directory."""
    return os.path.basename(os.path.dirname(os.path.abspath(path))) or path


def preset(cfg):
    """The recipe's preset name: the text before ':' in the config's recipe ("nvfp4: fprop.x=..." -> nvfp4)."""
    r = cfg.get("recipe") if cfg else None
    if not isinstance(r, str) or not r.strip():
        return None
    return r.split(":", 1)[0].strip() or None


def seed_of(cfg):
    s = cfg.get("seed") if cfg else None
    return s if isinstance(s, int) and not isinstance(s, bool) else None


def _own_seed_out(text, seed):
    """The recipe text with "seed=<the run's seed>" written as "seed=S"."""
    if seed is None:
        return text
    return re.sub(r"(?<![\w.])seed=%d(?!\d)" % seed, "seed=S", text)


def _same(key, a, b):
    va, vb = a[key], b[key]
    if va == vb:
        return True
    if key == "model" and "checkpoint" in (va, vb):
        return True
    if key == "recipe" and isinstance(va, str) and isinstance(vb, str):
        return _own_seed_out(va, seed_of(a)) == _own_seed_out(vb, seed_of(b))
    return False


def first_difference(a, b):
    """(field, value in a, value in b) of the first field two config lines differ in beyond the seed and the
    environment, or None when they are seeds of one configuration."""
    for key in a:
        if key in IGNORED or key not in b:
            continue
        if not _same(key, a, b):
            return key, a[key], b[key]
    return None


def show(v):
    if isinstance(v, str):
        return "'" + v + "'"
    if isinstance(v, float):
        return format(v, "g")
    return json.dumps(v)


def recipe_hint(a, b, field):
    """Where two recipe texts of one preset differ: ' (the first item that differs: X vs Y)', or ''."""
    if field != "recipe" or preset(a) != preset(b):
        return ""
    ia, ib = _recipe_items(a), _recipe_items(b)
    for k in list(ia) + [k for k in ib if k not in ia]:
        va, vb = ia.get(k, (None, None)), ib.get(k, (None, None))
        if va[1] != vb[1]:
            return (f" (the first item that differs: {show(va[0]) if va[0] else 'none'} vs "
                    f"{show(vb[0]) if vb[0] else 'none'})")
    return ""


def check_group(label, runs, remedy="give them different labels"):
    """Raise RunError unless the runs (dicts with path, cfg) that share a label are seeds of one configuration:
    every two with config lines agree on everything but the seed, and no seed comes twice."""
    with_cfg = [r for r in runs if r["cfg"] is not None]
    for i, a in enumerate(with_cfg):
        for b in with_cfg[i + 1:]:
            d = first_difference(a["cfg"], b["cfg"])
            if d:
                raise RunError(f"{a['path']} and {b['path']} share the label '{label}' but differ in {d[0]}: "
                               f"{show(d[1])} vs {show(d[2])}{recipe_hint(a['cfg'], b['cfg'], d[0])}; {remedy}")
            sa, sb = seed_of(a["cfg"]), seed_of(b["cfg"])
            if sa is not None and sa == sb:
                raise RunError(f"{a['path']} and {b['path']} share the label '{label}' and the seed {sa} (their "
                               f"config lines agree): the same run twice? (if not: {remedy})")
    if len(runs) > 1:
        for r in runs:
            if r["cfg"] is None and not r.get("warned"):
                warn(f"{r['path']}: no config line: not checked against the other logs of '{label}'")


# ------------------------------------------------------------------------------------------------
# labels from config lines

def _merged(cfgs):
    """One config of a configuration's seeds: every field the first of them that has it gives."""
    out = {}
    for c in cfgs:
        for k, v in c.items():
            out.setdefault(k, v)
    return out


def _recipe_items(cfg):
    r = cfg.get("recipe")
    if not isinstance(r, str) or ":" not in r:
        return {}
    items = {}
    for it in r.split(":", 1)[1].split(";"):
        it = it.strip()
        if it:
            key = re.split(r"[=:]", it, 1)[0].strip()
            items[key] = (it, _own_seed_out(it, seed_of(cfg)))
    return items


def _fmt_field(k, v):
    return f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"


def _extras(cfgs):
    """For each config, the words that tell it from the others: the recipe items and fields that differ."""
    out = [[] for _ in cfgs]
    items = [_recipe_items(c) for c in cfgs]
    keys = []
    for it in items:
        keys += [k for k in it if k not in keys]
    for k in keys:
        vals = [it[k][1] if k in it else None for it in items]
        if len(set(vals)) > 1:
            for i, it in enumerate(items):
                if k in it:
                    out[i].append(f"({it[k][1]})")
    fields = []
    for c in cfgs:
        fields += [k for k in c if k not in fields]
    for k in fields:
        if k in IGNORED or k in DERIVED or k in ("recipe", "model"):
            continue
        vals = [c.get(k) for c in cfgs]
        known = [json.dumps(v, sort_keys=True) for v in vals if v is not None]
        if len(set(known)) > 1:
            for i, v in enumerate(vals):
                if v is not None:
                    out[i].append(_fmt_field(k, v))
    if len({c.get("model") for c in cfgs}) > 1:
        for i, c in enumerate(cfgs):
            if c.get("model") is not None:
                out[i].insert(0, str(c["model"]))
    return out


def derive_labels(cfgs, fallbacks):
    """Labels for configurations (one merged config each): the preset name, the model where models differ,
    then what tells alike labels apart; fallbacks[i] (a directory name) where a config has no recipe."""
    names = [preset(c) or fb for c, fb in zip(cfgs, fallbacks)]
    models = {c.get("model") for c in cfgs if c.get("model") not in (None, "checkpoint")}
    if len(models) > 1:
        names = [f"{n} {c['model']}" if c.get("model") not in (None, "checkpoint") else n
                 for n, c in zip(names, cfgs)]
    by = {}
    for i, n in enumerate(names):
        by.setdefault(n, []).append(i)
    for n, idx in by.items():
        if len(idx) > 1:
            for i, e in zip(idx, _extras([cfgs[i] for i in idx])):
                if e:
                    names[i] = n + " " + " ".join(e)
    seen = {}
    for i, n in enumerate(names):   # still alike (configurations that differ only where one log is silent)
        if n in seen:
            seen[n] += 1
            names[i] = f"{n} #{seen[n]}"
        else:
            seen[n] = 1
    return names


def group_runs(runs):
    """runs: dicts with path and label (None: derive it). Fills in cfg, seed and label, and returns the
    configurations in the order of their first log: [(label, [run, ...]), ...]. Raises RunError."""
    for r in runs:
        r["cfg"] = first_config(r["path"])
        r["seed"] = seed_of(r["cfg"])
    # unlabeled logs with config lines: seeds of one configuration where all agree but the seed
    classes = []
    for r in runs:
        if r["label"] is not None or r["cfg"] is None:
            continue
        for cl in classes:
            if all(first_difference(r["cfg"], o["cfg"]) is None for o in cl):
                dup = next((o for o in cl if r["seed"] is not None and o["seed"] == r["seed"]), None)
                if dup:
                    raise RunError(f"{dup['path']} and {r['path']} have the same configuration and the same seed "
                                   f"{r['seed']}: the same run twice? (give them labels, LABEL=PATH, if they "
                                   f"differ in something their config lines do not record)")
                cl.append(r)
                break
        else:
            classes.append([r])
    cfgs = [_merged([r["cfg"] for r in cl]) for cl in classes]
    names = derive_labels(cfgs, [dir_label(cl[0]["path"]) for cl in classes])
    # a derived label that an explicit one already names: the same configuration joins it, another one is
    # told apart from it
    explicit = {}
    for r in runs:
        if r["label"] is not None:
            explicit.setdefault(r["label"], []).append(r)
    for i, cl in enumerate(classes):
        ex = explicit.get(names[i])
        if ex is None:
            continue
        other = [o for o in ex if o["cfg"] is not None]
        if other and all(first_difference(a["cfg"], o["cfg"]) is None and
                         (a["seed"] is None or a["seed"] != o["seed"]) for a in cl for o in other):
            continue
        base = _merged([o["cfg"] for o in other]) if other else {}
        e = _extras([cfgs[i], base])[0] if base else []
        new = names[i] + (" " + " ".join(e) if e else "")
        k = 2
        while new in explicit or new in names:
            new = f"{names[i]} #{k}"
            k += 1
        names[i] = new
    for cl, n in zip(classes, names):
        for r in cl:
            r["label"] = n
    for r in runs:
        if r["label"] is None:
            r["label"] = dir_label(r["path"])
            r["warned"] = True
            warn(f"{r['path']}: no config line: labelled '{r['label']}' by its directory; not checked against "
                 f"the other logs")
    groups = {}
    for r in runs:
        groups.setdefault(r["label"], []).append(r)
    for label, members in groups.items():
        check_group(label, members)
    return list(groups.items())


def describe(groups):
    """One line per configuration: its label, its logs and their seeds."""
    lines = []
    for i, (label, members) in enumerate(groups):
        n = len(members)
        logs = ", ".join(f"{r['path']} (seed {r['seed'] if r['seed'] is not None else '?'})" for r in members)
        lines.append(f"configuration '{label}'{' (baseline)' if i == 0 else ''}: {n} seed{'s' if n > 1 else ''}: "
                     f"{logs}")
    return lines
