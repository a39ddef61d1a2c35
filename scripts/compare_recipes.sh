#!/usr/bin/env bash
# Trains the BF16 baseline and FP4 recipes with the same model, data order, seed and schedule, then
# plots train/val loss against tokens and prints the table of loss gaps at equal tokens.
# usage: scripts/compare_recipes.sh OUT_DIR "recipe1 recipe2 ..." [trainer flags...]
#   e.g. scripts/compare_recipes.sh runs/cmp "bf16 nvfp4 nvfp4-naive" --model d12 --steps 800 \
#            --train-data 'data/enwiki/enwiki_train_*.bin' --val-data 'data/enwiki/enwiki_val_*.bin'
# Each run writes OUT_DIR/<recipe>/log.jsonl; OUT_DIR/loss.png and OUT_DIR/gaps.md are the results.
# Multi-GPU: set LAUNCH="mpirun -np 8 --allow-run-as-root" to start each run under it.
# Before the first run it checks what every run needs (the trainer, the data files, python3 with numpy and
# matplotlib for the plot; PLOT=0 trains without plotting). A run that fails in a way the next ones would
# repeat (data, tokenizer, options, no GPU, or the same error as the run before) stops the comparison; any
# other failed recipe is left out of the plot. Failures end in one line "error: ..." (exit 1).
# TRAINER (default ./train_gpt_fp4) names the trainer.
set -uo pipefail
die() { echo "error: compare_recipes.sh: $*" >&2; exit 1; }
if [ $# -lt 2 ]; then
    sed -n 4,8p "$0" | sed 's/^# \{0,1\}//' >&2
    die "needs OUT_DIR and a quoted list of recipes (bf16 nvfp4 ...; ./train_gpt_fp4 --help lists them)"
fi
out=$1; recipes=$2; shift 2
trainer=${TRAINER:-./train_gpt_fp4}
[ -n "${recipes// /}" ] || die "the recipe list is empty; give e.g. \"bf16 nvfp4\""
[ -e "$out" ] && [ ! -d "$out" ] && die "OUT_DIR $out exists and is not a directory"
[ -f "$trainer" ] || die "$trainer not found: build it with make (or set TRAINER)"
[ -n "${LAUNCH:-}" ] || [ -x "$trainer" ] || die "$trainer is not executable"

# the data every run reads: the trainer's defaults unless -i/--train-data, -j/--val-data say otherwise
train_data=data/tinyshakespeare/tiny_shakespeare_train.bin
val_data=data/tinyshakespeare/tiny_shakespeare_val.bin
args=("$@")
for ((k = 0; k < ${#args[@]}; k++)); do
    a=${args[k]}; next=${args[k + 1]:-}
    case $a in
        -i|--train-data) train_data=$next ;;
        -j|--val-data) val_data=$next ;;
        --train-data=*) train_data=${a#--train-data=} ;;
        --val-data=*) val_data=${a#--val-data=} ;;
    esac
done
check_data() {   # FLAG PATTERN
    local flag=$1 pat=$2
    [ -n "$pat" ] || return 0   # -j '': no validation
    if [ -d "$pat" ]; then
        die "$flag '$pat' is a directory; give a pattern of the shard files in it, e.g. '${pat%/}/*_train*.bin'" \
            "(-i) or '${pat%/}/*_val*.bin' (-j)"
    fi
    compgen -G "$pat" >/dev/null ||
        die "no data file matches $flag '$pat': make the shards first (data/README.md: e.g." \
            "bash dev/data/enwiki.sh DIR, or python3 dev/data/prepro.py) or fix the path"
}
check_data -i "$train_data"
check_data -j "$val_data"
if [ "${PLOT:-1}" != 0 ]; then
    python3 -c "import numpy, matplotlib" >/dev/null 2>&1 ||
        die "the plot (scripts/plot_loss.py) needs python3 with numpy and matplotlib: python3 -m pip install -r" \
            "requirements.txt (or PLOT=0 to train without plotting)"
fi
mkdir -p "$out" || die "cannot create OUT_DIR $out"

# errors no recipe changes: every later run would fail the same way
repeats='data shard|data file|data pattern|data loader|tokenizer|unknown option|unexpected argument|needs a value|no CUDA GPU|out of host memory'
logs=(); failed=(); prev_err=
for r in $recipes; do
    echo "=== $r"
    # shellcheck disable=SC2086  # LAUNCH is a command line
    ${LAUNCH:-} "$trainer" --recipe "$r" --out-dir "$out/$r" --sample-every 0 "$@" 2>&1 | tee "$out/$r.txt" | \
        { grep -E "^step .*(val loss|/)" | awk 'NR % 50 == 1'; true; }
    rc=${PIPESTATUS[0]}
    if [ "$rc" = 0 ]; then
        logs+=("$r=$out/$r/log.jsonl")
        continue
    fi
    err=$(grep -a 'error: ' "$out/$r.txt" | tail -n 1 | sed 's/.*error: //')
    [ -n "$err" ] || err="exit status $rc, no error line (the last output: $(tail -n 1 "$out/$r.txt"))"
    same=${err//$r/RECIPE}
    if grep -qE "$repeats" <<<"$err" || [ "$same" = "$prev_err" ]; then
        die "recipe $r failed, and every later run would fail the same way: $err (stopped; all output: $out/$r.txt)"
    fi
    echo "$r failed: $err (all output: $out/$r.txt); going on with the next recipe" >&2
    prev_err=$same
    failed+=("$r")
done
if [ ${#logs[@]} -gt 0 ] && [ "${PLOT:-1}" != 0 ]; then
    python3 scripts/plot_loss.py "${logs[@]}" --out "$out/loss.png" --table "$out/gaps.md" ||
        die "scripts/plot_loss.py failed (above); the logs are in $out/<recipe>/log.jsonl"
fi
if [ ${#failed[@]} -gt 0 ]; then
    die "${#failed[@]} recipe(s) failed and are left out: ${failed[*]} (their output: $out/<recipe>.txt)"
fi
