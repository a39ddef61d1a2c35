#!/usr/bin/env bash
# early_probe.sh: the first STOP_AT steps of study runs (the plan dev/study/study.sh makes for d6 on the whole
# data/enwiki, written out here: d6, B=64, T=1024, 1312 steps, cosine to 10%), with other trainer flags, to see whether a change to the study's settings
# removes the "bad starts" of the d6 study (results/study_d6/README.md: FP4 runs that fall behind in the
# first ~130 steps, at the peak learning rate, and never catch up). Each run is stopped once its
# validation at step STOP_AT is logged; the schedule stays that of the full run (--steps STEPS), so the
# learning rate up to STOP_AT is exactly the full run's.
#
# usage: bash dev/study/early_probe.sh          (settings from the environment, defaults in brackets)
#   RECIPES ["nvfp4 mxfp4-2d quartet2-4o6 nvfp4-naive quartet2 bf16"]  SEEDS ["3 1 2"] (seed-major)
#   WARMUP [131] warmup steps (the study's: 26)   LR [1.5e-3]   EXTRA_ARGS: more trainer flags
#   STEPS [1312] the study's step count (one epoch of data/enwiki at B=64, T=1024)
#   STOP_AT [264] and VAL_EVERY [132]: the study's validation steps; VAL_BATCHES [32] (its whole split)
#   JOBS [2] runs at once on the one GPU (d6 leaves it part idle)   DEADLINE [520] s for the whole probe
#   PROBE_DIR [out/probe]   DATA [data/enwiki]   TRAINER [./train_gpt_fp4]
# Output: one line per run: recipe, seed, validation loss at each validation step up to STOP_AT;
# OUT/probe.txt (the same lines) and OUT/probe_logs.tgz (the runs' log.jsonl) when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
RECIPES=${RECIPES:-"nvfp4 mxfp4-2d quartet2-4o6 nvfp4-naive quartet2 bf16"}
SEEDS=${SEEDS:-"3 1 2"}
WARMUP=${WARMUP:-131}
LR=${LR:-1.5e-3}
STEPS=${STEPS:-1312}
STOP_AT=${STOP_AT:-264}
VAL_EVERY=${VAL_EVERY:-132}
VAL_BATCHES=${VAL_BATCHES:-32}
JOBS=${JOBS:-2}
DEADLINE=${DEADLINE:-520}
PROBE_DIR=${PROBE_DIR:-out/probe}
DATA=${DATA:-data/enwiki}
TRAINER=${TRAINER:-./train_gpt_fp4}
EXTRA_ARGS=${EXTRA_ARGS:-}
[ -x "$TRAINER" ] || { echo "early_probe: no trainer at $TRAINER (make train_gpt_fp4)"; exit 1; }
ls "$DATA"/enwiki_train_*.bin > /dev/null 2>&1 || { echo "early_probe: no training shards in $DATA"; exit 1; }
mkdir -p "$PROBE_DIR"

reached() { grep -q "\"type\":\"val\",\"step\":$STOP_AT," "$1/log.jsonl" 2> /dev/null; }   # val of STOP_AT logged

# one run, stopped once the validation line of step STOP_AT is in its log (or the deadline comes)
probe_one() {
    local r=$1 s=$2 d=$PROBE_DIR/$1/seed$2
    rm -rf "$d"; mkdir -p "$d"
    "$TRAINER" --model d6 -b 64 -t 1024 --total-batch 65536 --steps "$STEPS" --lr "$LR" --warmup "$WARMUP" \
        --schedule cosine --final-lr-frac 0.1 --val-every "$VAL_EVERY" --val-batches "$VAL_BATCHES" \
        --sample-every 0 --ckpt-every 0 --seed "$s" --recipe "$r" -i "$DATA/enwiki_train_*.bin" \
        -j "$DATA/enwiki_val_*.bin" -o "$d" $EXTRA_ARGS > "$d/train.txt" 2>&1 &
    local pid=$!
    while kill -0 $pid 2> /dev/null; do
        if reached "$d" || [ $((SECONDS - T0)) -ge "$DEADLINE" ]; then
            kill $pid 2> /dev/null; break
        fi
        sleep 0.5
    done
    wait $pid 2> /dev/null
    local vals
    vals=$(grep -o '"type":"val","step":[0-9]*,"tokens":[0-9]*,"val_loss":[0-9.]*' "$d/log.jsonl" 2> /dev/null |
           sed 's/.*"step":\([0-9]*\),.*"val_loss":\([0-9.]*\)/\1:\2/' | tr '\n' ' ')
    reached "$d" || vals+="(stopped early) "
    echo "probe: $r seed $s warmup $WARMUP: val ${vals}"
}

queue=()
for s in $SEEDS; do for r in $RECIPES; do queue+=("$r $s"); done; done
echo "probe: ${#queue[@]} runs, $JOBS at a time, warmup $WARMUP, lr $LR, stop at step $STOP_AT of $STEPS; extra: $EXTRA_ARGS"
running=0
for job in "${queue[@]}"; do
    [ $((SECONDS - T0)) -lt $((DEADLINE - 20)) ] || { echo "probe: deadline: not started: $job and later"; break; }
    probe_one $job | tee -a "$PROBE_DIR/probe.txt" &
    running=$((running + 1))
    if [ $running -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
done
wait
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    cp "$PROBE_DIR/probe.txt" "$OUT/probe.txt"
    (cd "$PROBE_DIR" && ls -d */seed*/log.jsonl 2> /dev/null | tar czf "$OUT/probe_logs.tgz" -T -)
fi
echo "probe: done in $((SECONDS - T0)) s"
