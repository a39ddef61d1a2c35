#!/usr/bin/env bash
# device_call.sh: one call of the device tool for the multi-seed recipe study (dev/study/study.sh).
#
# usage: bash dev/study/device_call.sh STAGE
#   STAGE a..z  tokenize that data part from .carry/enwiki_STAGE (dev/study/enwiki_part.sh; carry that
#               folder), building ./train_gpt_fp4 meanwhile if it is missing; once every part in PARTS
#               is there, the grid runs in the rest of the call
#   STAGE grid  the grid only, until the call's time is up (carry nothing, or .carry/study_prev)
# env: CALL_LIMIT [600] the device call's limit in seconds, MARGIN [30] s kept for copying the results
#      back; PARTS ["a b c d"]; GRID_AFTER_DATA [1]; and every setting of dev/study/study.sh (RECIPES,
#      SEEDS, LR, ...), which must be the same in every call of one grid.
# Results: $OUT/study_logs.tgz (RECIPE/seedN/log.jsonl of every run so far), $OUT/study_table/ (table.md,
# and loss.png where matplotlib is), $OUT/study_table.txt. Exit status: study.sh's (0 the grid is
# complete, 10 call again), 3 data parts are missing (the machine went cold: redo the calls it names).
#
# The sequence (here, once: bash dev/study/stage_carry.sh; each call right after the previous one, since
# data/enwiki/, the build and the checkpoints survive only while the machine stays warm, ~30 s):
#   1. carry [".carry/enwiki_a"]  bash dev/study/device_call.sh a    (~2-3 min: the build; tokenizing ~10 s)
#   2. carry [".carry/enwiki_b"]  bash dev/study/device_call.sh b    (~10 s + the call's start)
#   3. carry [".carry/enwiki_c"]  bash dev/study/device_call.sh c
#   4. carry [".carry/enwiki_d"]  bash dev/study/device_call.sh d    (then the grid, up to the 10 minutes)
#   5. no carry                   bash dev/study/device_call.sh grid (repeat while it exits 10)
# After each call, keep the returned logs: cp FILES_AT/study_logs.tgz results/study_d6/logs.tgz (it holds the
# earlier runs too). A later session (a fresh machine) unpacks that tracked archive as PREV (env PREV_TGZ;
# a carried .carry/study_prev folder takes precedence) and skips the runs finished there (a run cut short
# starts again: its checkpoints do not travel). The table, here:
# mkdir -p /tmp/s && tar xzf results/study_d6/logs.tgz -C /tmp/s && python3 scripts/study_table.py /tmp/s --out results/study_d6
# If a call says parts are missing (exit 3), the machine went cold: redo the calls of the parts it
# names (any order), each with its own carry; the trainer is rebuilt by whichever call finds it missing.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
STAGE=${1:-}
CALL_LIMIT=${CALL_LIMIT:-600}
MARGIN=${MARGIN:-30}
export PARTS=${PARTS-"a b c d"}
OUT=${OUT:-/tmp/study_out}
export OUT
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -n 1
parts_missing() {
    local m="" p
    for p in $PARTS; do [ -f "data/enwiki/.parts/$p.done" ] || m+="$p "; done
    echo "$m"
}
echo "device_call $STAGE: data parts here: $(ls data/enwiki/.parts 2>/dev/null | sed 's/\.done//' | tr '\n' ' ')" \
     "trainer: $([ -x train_gpt_fp4 ] && echo built || echo missing)"

build_pid=""
case $STAGE in
[a-z])
    if [ ! -x train_gpt_fp4 ]; then
        (make -j"$(nproc)" train_gpt_fp4 GPU_ARCHS="${GPU_ARCHS:-90}" > "$OUT/build.txt" 2>&1) &
        build_pid=$!
    fi
    [ -d ".carry/enwiki_$STAGE" ] || { echo "device_call: .carry/enwiki_$STAGE was not carried"; wait; exit 1; }
    bash dev/study/enwiki_part.sh "$STAGE" ".carry/enwiki_$STAGE"; rc=$?
    if [ -n "$build_pid" ]; then
        if wait "$build_pid"; then echo "device_call: built train_gpt_fp4 at t=$((SECONDS - T0)) s"
        else echo "device_call: the build FAILED:"; grep -E "error" "$OUT/build.txt" | head -n 20; exit 1; fi
    fi
    [ $rc = 0 ] || exit 1
    missing=$(parts_missing)
    if [ -n "$missing" ]; then
        echo "device_call: data parts still to do: $missing(t=$((SECONDS - T0)) s)"
        for p in $PARTS; do
            [ "$p" = "$STAGE" ] && break
            case " $missing" in *" $p "*) echo "device_call: WARNING: part $p, before this one, is missing: the" \
                "machine went cold (or the call was skipped); redo it" ;; esac
        done
        [ "$STAGE" = "$(echo $PARTS | awk '{print $NF}')" ] && exit 3
        exit 0
    fi
    [ "${GRID_AFTER_DATA:-1}" = 1 ] || exit 0
    ;;
grid)
    missing=$(parts_missing)
    if [ -n "$missing" ]; then
        echo "device_call: data parts missing: $missing- the machine went cold; redo those calls"
        exit 3
    fi
    ;;
*)
    echo "usage: bash dev/study/device_call.sh a|b|c|d|grid" >&2; exit 2 ;;
esac
# Runs finished in earlier sessions: a carried PREV folder, else the tracked archive of the study's logs
# (PREV_TGZ, unpacked as PREV), so a grid goes on across sessions without carrying anything
export PREV=${PREV:-.carry/study_prev}
PREV_TGZ=${PREV_TGZ-results/study_d6/logs.tgz}
if [ ! -d "$PREV" ] && [ -n "$PREV_TGZ" ] && [ -f "$PREV_TGZ" ]; then
    mkdir -p "$PREV" && tar xzf "$PREV_TGZ" -C "$PREV" && echo "device_call: earlier runs from $PREV_TGZ"
fi
export DEADLINE=$((CALL_LIMIT - MARGIN - (SECONDS - T0)))
echo "device_call: the grid, with ${DEADLINE} s"
bash dev/study/study.sh
