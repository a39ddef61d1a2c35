#!/usr/bin/env bash
# test_plot_labels.sh: which logs scripts/plot_loss.py and scripts/study_table.py take as seeds of one
# configuration, and the labels plot_loss.py gives runs without one (issue #52; the rule is in
# scripts/runlabels.py), on small synthetic log.jsonl files (seconds, CPU):
#   plot_loss.py   two recipes with the same seed in folders of one name, no labels: two configurations
#                  "bf16" and "nvfp4" and a nonzero gap; two seeds of one configuration (other machine, a
#                  resumed run's second config line): one configuration of 2 seeds; labels from what differs
#                  (lr, the model, the data); ufp4's seed=N slots following the run's seed; refused with one
#                  `error:` line and exit 1: one label over two recipes (the field named), the same seed twice
#                  with or without a label; a log without a config line: its directory's name and a warning
#   study_table.py a grid whose seeds agree; refused: a seed under other settings (the field named), a log
#                  whose config line names another seed than its folder; a log without a config line: a
#                  warning (and unfinished)
# Needs python3 (the plot_loss.py checks numpy and matplotlib too: without them they are skipped);
# prints "TESTS test_plot_labels: passed=P failed=F skipped=S".
cd "$(dirname "$0")/../.."
passed=0; failed=0; skipped=0
ok()   { passed=$((passed + 1)); echo "ok   $*"; }
bad()  { failed=$((failed + 1)); echo "FAIL test_plot_labels: $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
finish() { echo "TESTS test_plot_labels: passed=$passed failed=$failed skipped=$skipped"; exit 0; }
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP test_plot_labels: no python3"; skipped=1; finish
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MPLBACKEND=Agg

# mk PATH key=value ...: a log of 20 steps (train every step, val every 5 and at the end) whose final val loss
# is 3.0 + off; the config line is train_gpt_fp4's with the given fields replaced (noconfig=1: none;
# resumed=1: a second config line at step 10, as a resumed run appends; json values: lr=0.0003, model="d6")
mk() {
    python3 - "$@" <<'EOF'
import json, os, sys
path, kv = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
cfg = {"type": "config", "model": "d12", "layers": 12, "heads": 12, "channels": 768, "vocab": 50257,
       "parameters": 124475904, "batch_size": 4, "seq_len": 64, "total_batch": 256, "grad_accum": 1,
       "processes": 1, "steps": 20, "lr": 0.0006, "warmup": 2, "schedule": "cosine", "final_lr_frac": 0.1,
       "beta1": 0.9, "beta2": 0.95, "eps": 1e-08, "weight_decay": 0.1, "grad_clip": 1, "master_weights": "bf16",
       "seed": 1, "recipe": "bf16: fprop.x=bf16; fprop.w=bf16; dgrad.dy=bf16; dgrad.w=bf16; wgrad.dy=bf16; "
       "wgrad.x=bf16; bf16 blocks: first 0, last 0", "bf16_forward_from": 0, "bf16_forward_step": -1,
       "train_data": "data/enwiki/enwiki_train_*.bin", "val_data": "data/enwiki/enwiki_val_*.bin",
       "attention": "cudnn", "device": "NVIDIA H100 80GB HBM3", "sms": 132, "cuda_runtime": 13000,
       "cublaslt": 130100, "cudnn": 91400, "resumed_at": 0, "arch": "gpt2", "kv_heads": 12, "mlp_hidden": 3072,
       "tied": 1}
off = float(kv.pop("off", "0"))
noconfig, resumed = kv.pop("noconfig", "0") == "1", kv.pop("resumed", "0") == "1"
for k, v in kv.items():
    try:
        cfg[k] = json.loads(v)
    except ValueError:
        cfg[k] = v
os.makedirs(os.path.dirname(path), exist_ok=True)
steps, tb = cfg["steps"], cfg["total_batch"]
with open(path, "w") as f:
    w = lambda d: f.write(json.dumps(d) + "\n")
    if not noconfig:
        w(cfg)
    for step in range(steps):
        if resumed and step == 10:
            w(dict(cfg, resumed_at=10, device="NVIDIA H200"))
        if step % 5 == 0 or step == steps - 1:
            w({"type": "val", "step": step, "tokens": step * tb, "val_loss": 3.0 + off + 2.0 * (1 - step / (steps - 1))})
        w({"type": "train", "step": step + 1, "tokens": (step + 1) * tb, "loss": 3.05 + off + 2.0 * (1 - step / steps)})
EOF
}
NVFP4='nvfp4: fprop.x=e2m1,1x16,e4m3,rne,h0; fprop.w=e2m1,16x16,e4m3,rne,h0; dgrad.dy=e2m1,1x16,e4m3,sr,h0; dgrad.w=e2m1,16x16,e4m3,rne,h0; wgrad.dy=e2m1,1x16,e4m3,sr,h16,fixed; wgrad.x=e2m1,1x16,e4m3,rne,h16,fixed; bf16 blocks: first 0, last 2'
ufp4() { echo "ufp4: fprop.x=int4,1x16,e4m3,rne,h16,seed=$1; fprop.w=int4,1x16,e4m3,rne,h16,seed=$1; bf16 blocks: first 0, last 0"; }
# the last line of stderr is one error: line, and the only one
one_error() { [ "$(grep -c '^error:' "$1")" = 1 ] && tail -n 1 "$1" | grep -q "^error: .*$2"; }

if ! python3 -c "import numpy, matplotlib" >/dev/null 2>&1; then
    skipped=$((skipped + 1)); echo "SKIP test_plot_labels: plot_loss.py needs numpy and matplotlib"
else
    plot() { python3 scripts/plot_loss.py "$@" --out "$tmp/loss.png" > "$tmp/out.txt" 2> "$tmp/err.txt"; }

    # (1) issue #52: two recipes, one seed, folders of one name, no labels
    mk "$tmp/a/run/log.jsonl"; mk "$tmp/b/run/log.jsonl" recipe="$NVFP4" off=0.1
    plot "$tmp/a/run/log.jsonl" "$tmp/b/run/log.jsonl" --table "$tmp/gaps.md"; rc=$?
    sed 's/^/    /' "$tmp/out.txt" "$tmp/err.txt" | head -n 12
    check "plot_loss: two recipes of one seed without labels: exit 0, configurations 'bf16' (baseline) and 'nvfp4', 1 seed each" \
        test $rc = 0 -a -n "$(grep -F "configuration 'bf16' (baseline): 1 seed: $tmp/a/run/log.jsonl (seed 1)" "$tmp/out.txt")" \
        -a -n "$(grep -F "configuration 'nvfp4': 1 seed: $tmp/b/run/log.jsonl (seed 1)" "$tmp/out.txt")"
    check "plot_loss: their gap table: nvfp4's final val loss 3.1000, +0.1000 (+3.33%) over bf16" \
        grep -q '^| nvfp4 | 5.12K | .* | 3.1000 | +0.1000 | +3.33 |$' "$tmp/gaps.md"
    check "plot_loss: the png is written" test -s "$tmp/loss.png"

    # (2) two seeds of one configuration: another machine, and a resumed run's second config line
    mk "$tmp/s1/log.jsonl" recipe="$NVFP4" seed=1
    mk "$tmp/s2/log.jsonl" recipe="$NVFP4" seed=2 off=0.02 device="NVIDIA H200" cudnn=90800 attention="own kernel" resumed=1
    plot "$tmp/s1/log.jsonl" "$tmp/s2/log.jsonl" --table "$tmp/gaps2.md"; rc=$?
    check "plot_loss: two seeds of one configuration (other device, libraries, resumed): one configuration 'nvfp4', 2 seeds" \
        test $rc = 0 -a "$(grep -c '^configuration ' "$tmp/out.txt")" = 1 \
        -a -n "$(grep -F "configuration 'nvfp4' (baseline): 2 seeds: $tmp/s1/log.jsonl (seed 1), $tmp/s2/log.jsonl (seed 2)" "$tmp/out.txt")"
    check "plot_loss: the table averages them (nvfp4 (2), final val loss 3.0100)" \
        grep -q '^| nvfp4 (2) | 5.12K | .* | 3.0100 | +0.0000 | +0.00 |$' "$tmp/gaps2.md"

    # (3) one label over two recipes
    plot x="$tmp/a/run/log.jsonl" x="$tmp/b/run/log.jsonl"; rc=$?
    sed 's/^/    /' "$tmp/err.txt" | cut -c1-240
    check "plot_loss: one label over two recipes is refused (exit 1, one error: line naming both logs and 'recipe')" \
        test $rc = 1 -a -n "$(one_error "$tmp/err.txt" "$tmp/a/run/log.jsonl and $tmp/b/run/log.jsonl share the label 'x' but differ in recipe: 'bf16: .* vs 'nvfp4: .*give them different labels" && echo y)"
    mk "$tmp/lr/log.jsonl" recipe="$NVFP4" seed=2 lr=0.0003
    plot n="$tmp/s1/log.jsonl" n="$tmp/lr/log.jsonl"; rc=$?
    check "plot_loss: one label over two learning rates: the error names lr: 0.0006 vs 0.0003" \
        test $rc = 1 -a -n "$(one_error "$tmp/err.txt" "differ in lr: 0.0006 vs 0.0003; give them different labels" && echo y)"

    # (4) the same seed twice
    mk "$tmp/copy/log.jsonl" recipe="$NVFP4" seed=1 device="NVIDIA H200"
    plot "$tmp/s1/log.jsonl" "$tmp/copy/log.jsonl"; rc=$?
    check "plot_loss: the same configuration and seed twice, unlabeled, is refused (the same run twice?)" \
        test $rc = 1 -a -n "$(one_error "$tmp/err.txt" "$tmp/s1/log.jsonl and $tmp/copy/log.jsonl have the same configuration and the same seed 1: the same run twice?" && echo y)"
    plot n="$tmp/s1/log.jsonl" n="$tmp/copy/log.jsonl"; rc=$?
    check "plot_loss: the same seed twice under one label is refused" \
        test $rc = 1 -a -n "$(one_error "$tmp/err.txt" "share the label 'n' and the seed 1.*the same run twice?" && echo y)"
    plot fp8="$tmp/s1/log.jsonl" emu="$tmp/copy/log.jsonl"; rc=$?
    check "plot_loss: ... but under two labels it is the user's call (exit 0)" test $rc = 0

    # (5) a log without a config line: its directory's name, with a warning
    mk "$tmp/old/legacy/log.jsonl" noconfig=1 off=0.05
    plot "$tmp/a/run/log.jsonl" "$tmp/old/legacy/log.jsonl"; rc=$?
    check "plot_loss: a log without a config line is labelled by its directory, with a warning" \
        test $rc = 0 -a -n "$(grep -F "configuration 'legacy': 1 seed: $tmp/old/legacy/log.jsonl (seed ?)" "$tmp/out.txt")" \
        -a -n "$(grep "^warning: $tmp/old/legacy/log.jsonl: no config line: labelled 'legacy'" "$tmp/err.txt")"

    # labels from what differs; ufp4's signs drawn from the seed
    mk "$tmp/m6/log.jsonl" recipe="$NVFP4" model='"d6"' layers=6 seed=3
    plot "$tmp/a/run/log.jsonl" "$tmp/s1/log.jsonl" "$tmp/lr/log.jsonl" "$tmp/m6/log.jsonl"; rc=$?
    sed 's/^/    /' "$tmp/out.txt" | grep '^    configuration'
    check "plot_loss: labels name the model where models differ, and the lr where that alone tells two apart" \
        test $rc = 0 -a -n "$(grep -F "configuration 'bf16 d12' (baseline)" "$tmp/out.txt")" \
        -a -n "$(grep -F "configuration 'nvfp4 d12 lr=0.0006': 1 seed: $tmp/s1/log.jsonl" "$tmp/out.txt")" \
        -a -n "$(grep -F "configuration 'nvfp4 d12 lr=0.0003': 1 seed: $tmp/lr/log.jsonl" "$tmp/out.txt")" \
        -a -n "$(grep -F "configuration 'nvfp4 d6': 1 seed: $tmp/m6/log.jsonl (seed 3)" "$tmp/out.txt")"
    mk "$tmp/val2/log.jsonl" recipe="$NVFP4" seed=2 val_data="data/other/val_*.bin"
    plot "$tmp/s1/log.jsonl" "$tmp/val2/log.jsonl"; rc=$?
    check "plot_loss: other validation data is another configuration, not a seed (labels name val_data)" \
        test $rc = 0 -a "$(grep -c '^configuration ' "$tmp/out.txt")" = 2 \
        -a -n "$(grep -F "configuration 'nvfp4 val_data=data/other/val_*.bin': 1 seed" "$tmp/out.txt")"
    mk "$tmp/u2/log.jsonl" recipe="$(ufp4 2)" seed=2; mk "$tmp/u3/log.jsonl" recipe="$(ufp4 3)" seed=3
    mk "$tmp/u1fixed/log.jsonl" recipe="$(ufp4 1)" seed=4
    plot "$tmp/u2/log.jsonl" "$tmp/u3/log.jsonl" "$tmp/u1fixed/log.jsonl"; rc=$?
    sed 's/^/    /' "$tmp/out.txt" | grep '^    configuration' | cut -c1-200
    check "plot_loss: ufp4 with its slots' seed=N the run's seed: seeds of one configuration; fixed signs: another" \
        test $rc = 0 -a "$(grep -c '^configuration ' "$tmp/out.txt")" = 2 \
        -a -n "$(grep -F "configuration 'ufp4 (fprop.x=int4,1x16,e4m3,rne,h16,seed=S) (fprop.w=int4,1x16,e4m3,rne,h16,seed=S)' (baseline): 2 seeds: $tmp/u2/log.jsonl (seed 2), $tmp/u3/log.jsonl (seed 3)" "$tmp/out.txt")"
    plot "$tmp/nothere/log.jsonl"; rc=$?
    check "plot_loss: a missing log: one error: line, exit 1" test $rc = 1 -a -n "$(one_error "$tmp/err.txt" "no such log file" && echo y)"
fi

# ---- study_table.py: RECIPE/seedN/log.jsonl
st() { python3 scripts/study_table.py "$@" --no-plot > "$tmp/out.txt" 2> "$tmp/err.txt"; }
G=$tmp/grid
for s in 1 2 3; do
    mk "$G/bf16/seed$s/log.jsonl" seed=$s off=0.0$s
    mk "$G/nvfp4/seed$s/log.jsonl" recipe="$NVFP4" seed=$s off=0.1$s
    mk "$G/ufp4/seed$s/log.jsonl" recipe="$(ufp4 $s)" seed=$s off=0.2$s
done
st "$G"; rc=$?
check "study_table: a grid whose seeds agree (ufp4's signs follow the seed): exit 0, bf16 3 seeds, mean 3.0200" \
    test $rc = 0 -a -n "$(grep '^| bf16 | 3 | 3.0200 | ' "$tmp/out.txt")" -a ! -s "$tmp/err.txt"
mk "$G/nvfp4/seed2/log.jsonl" recipe="$NVFP4" seed=2 off=0.12 warmup=5
st "$G"; rc=$?
sed 's/^/    /' "$tmp/err.txt" | cut -c1-240
check "study_table: a seed trained under another warmup is refused (exit 1, one error: line naming both logs and warmup)" \
    test $rc = 1 -a -n "$(one_error "$tmp/err.txt" "$G/nvfp4/seed1/log.jsonl and $G/nvfp4/seed2/log.jsonl share the label 'nvfp4' but differ in warmup: 2 vs 5" && echo y)"
mk "$G/nvfp4/seed2/log.jsonl" recipe="$NVFP4" seed=1 off=0.12
st "$G"; rc=$?
check "study_table: a log whose config line names another seed than its folder is refused" \
    test $rc = 1 -a -n "$(one_error "$tmp/err.txt" "$G/nvfp4/seed2/log.jsonl: its config line says seed 1, its folder seed2" && echo y)"
mk "$G/nvfp4/seed2/log.jsonl" noconfig=1 off=0.12
st "$G"; rc=$?
check "study_table: a log without a config line: a warning, and the run is unfinished (no step count)" \
    test $rc = 0 -a -n "$(grep "^warning: $G/nvfp4/seed2/log.jsonl: no config line" "$tmp/err.txt")" \
    -a -n "$(grep '^| nvfp4 | 2 (+1 unfinished) | 3.1200 | ' "$tmp/out.txt")"
finish
