#!/usr/bin/env bash
# device_check.sh: the held-out evaluation and the Hugging Face export, end to end on a GPU machine
# (issue 15), for both model families. About 4 minutes on an H200. Needs nvcc, one GPU, and python3 with
# numpy, torch and transformers (no network).
#   bash dev/eval/device_check.sh        # from the repository root; logs and results under $OUT
# Stages:
#   build    make train_gpt_fp4 (GPU_ARCHS=90 unless set)
#   bf16     d6 on tinyshakespeare, 60 steps of 32 x 256 tokens, BF16; HellaSwag and LAMBADA (every item) at
#            steps 0 and 30 and after the last step; checkpoints at 30 and 60
#   evalonly --eval-only on the final checkpoint, with --eval-dump (per-row scores, the first batch's logits)
#   export   scripts/export_hf.py on that checkpoint
#   hf       dev/eval/check_eval.py hf: --eval-only reproduces the in-loop numbers; transformers' logits
#            match the trainer's within BF16 tolerance; HellaSwag/LAMBADA in transformers within 0.2
#            points of the trainer's; generation works
#   export_check  dev/eval/check_export.py on that export: transformers loads every tensor, its config and
#            parameters are the checkpoint's, its logits match a float64 forward of the checkpoint, its loss of
#            the 128 validation rows matches the trainer's val loss, and its logits the dumped BF16 logits
#   llama    llama-tiny (GQA: 4 heads, 2 key/value heads) 40 steps BF16, untied head; llama_tied: 20 steps with
#            --tie-embeddings on, --rope-theta 500000, --norm-eps 1e-6 (the header fields the export carries); each:
#            --eval-only with --eval-dump and 16 validation rows, scripts/export_hf.py, dev/eval/check_export.py
#   fp4      nvfp4, 20 steps, with in-loop evaluations in BF16 (2,000 items each) and without, both with
#            LLMC_ATTENTION=own (deterministic); --eval-only of its checkpoint in the recipe's precision and
#            in BF16; dev/eval/check_eval.py fp4: the evaluations leave training bit for bit unchanged
# Ends with "device_check: P passed, F failed"; exit status 1 when anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/device_check}
WORK=${WORK:-/tmp/device_check_work}   # checkpoints, the export and the logits dump stay here (large)
rm -rf "$WORK"; mkdir -p "$OUT/logs" "$WORK"
passed=0; failed=0
t_start=$SECONDS

# stage NAME CMD...: runs CMD with its output in $OUT/logs/NAME.log; prints one line, the lines worth
# seeing (SHOW: a grep pattern), and counts a failure when CMD exits nonzero (with CHECKS=1 the stage's
# PASS/FAIL lines count instead, one each; a check script that ends without any counts one failure)
stage() {
    local name=$1; shift
    local t0=$SECONDS
    "$@" > "$OUT/logs/$name.log" 2>&1
    local rc=$?
    if [ $rc -eq 0 ]; then echo "=== $name: ok ($((SECONDS - t0)) s)"; else echo "=== $name: FAILED, exit $rc ($((SECONDS - t0)) s)"; fi
    grep -E "${SHOW:-^(error|warning|PASS|FAIL|note)|eval \(|val loss|check_eval}" "$OUT/logs/$name.log" | tail -n 20
    if [ -n "${CHECKS:-}" ]; then
        local p f
        p=$(grep -c '^PASS' "$OUT/logs/$name.log"); f=$(grep -c '^FAIL' "$OUT/logs/$name.log")
        passed=$((passed + p)); failed=$((failed + f))
        if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed + 1)); fi
    elif [ $rc -ne 0 ]; then
        failed=$((failed + 1))
    fi
    if [ $rc -ne 0 ]; then echo "--- last lines of $OUT/logs/$name.log:"; tail -n 15 "$OUT/logs/$name.log"; fi
    return $rc
}
finish() {
    cp "$WORK"/bf16/log.jsonl "$OUT/bf16_log.jsonl" 2>/dev/null
    cp "$WORK"/bf16/eval.jsonl "$OUT/bf16_eval.jsonl" 2>/dev/null
    cp "$WORK"/fp4_eval/log.jsonl "$OUT/fp4_eval_log.jsonl" 2>/dev/null
    cp "$WORK"/hf/config.json "$OUT/hf_config.json" 2>/dev/null
    cp "$WORK"/llama/hf/config.json "$OUT/llama_hf_config.json" 2>/dev/null
    cp "$WORK"/llama_tied/hf/config.json "$OUT/llama_tied_hf_config.json" 2>/dev/null
    echo "device_check: $passed passed, $failed failed ($((SECONDS - t_start)) s; logs in $OUT/logs)"
    [ $failed -eq 0 ]
    exit $?
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1
python3 -c "import numpy, torch, transformers; print('python:', 'torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())" \
    || { echo "device_check: python3 with numpy, torch and transformers is needed"; failed=$((failed + 1)); finish; }

SHOW="error|warning" stage build make train_gpt_fp4 GPU_ARCHS="${GPU_ARCHS:-90}" || finish
passed=$((passed + 1))

common=(--model d6 --batch-size 32 --seq-len 256 --sample-every 0)
val=data/tinyshakespeare/tiny_shakespeare_val.bin
export_show="^(PASS|FAIL|note|error|[A-Za-z]+ForCausalLM|GPT2LMHeadModel|check_export|Traceback|[A-Za-z]*Error)"
if stage bf16 ./train_gpt_fp4 "${common[@]}" --steps 60 --lr 1e-3 --warmup 5 --seed 42 --val-every 30 --val-batches 4 \
        --eval-every 30 --ckpt-every 30 --out-dir "$WORK/bf16"; then
    passed=$((passed + 1))
    ckpt=$WORK/bf16/ckpt_00000060.bin
    stage evalonly ./train_gpt_fp4 --eval-only --init-from "$ckpt" --batch-size 32 --seq-len 256 -j "$val" \
        --val-batches 4 --out-dir "$WORK/bf16" --eval-dump "$WORK/dump" && passed=$((passed + 1))
    stage export python3 scripts/export_hf.py "$ckpt" "$WORK/hf" && passed=$((passed + 1))
    CHECKS=1 SHOW="^(PASS|FAIL|transformers|check_eval|Traceback|[A-Za-z]*Error)" stage hf python3 dev/eval/check_eval.py hf \
        --hf "$WORK/hf" --train-log "$WORK/bf16/log.jsonl" --eval-log "$WORK/bf16/eval.jsonl" --dump "$WORK/dump"
    # (the --eval-only run's validation: --val-batches 4 of 32 rows of 256 tokens, the first 128 rows of $val)
    CHECKS=1 SHOW="$export_show" stage export_check python3 dev/eval/check_export.py "$ckpt" "$WORK/hf" "$WORK/dump" \
        --tokens "$val" --rows 128 --seq-len 256 --eval-log "$WORK/bf16/eval.jsonl"
fi

# llama_run NAME STEPS FLAGS...: train llama-tiny in BF16 with FLAGS, then --eval-only with a logits dump and the
# validation of 16 rows of 256 tokens, export, and check the export against the checkpoint and the dump.
llama_run() {
    local name=$1 steps=$2; shift 2
    local run=$WORK/$name ckpt
    ckpt=$run/$(printf 'ckpt_%08d.bin' "$steps")
    stage "$name" ./train_gpt_fp4 --model llama-tiny --batch-size 16 --seq-len 256 --sample-every 0 --steps "$steps" \
        --lr 1e-3 --warmup 5 --seed 42 --val-every 0 --eval-every 0 --ckpt-every "$steps" --out-dir "$run" "$@" || return
    passed=$((passed + 1))
    stage "${name}_evalonly" ./train_gpt_fp4 --eval-only --init-from "$ckpt" --eval-precision bf16 --batch-size 16 \
        --seq-len 256 -j "$val" --val-batches 1 --eval-items 200 --out-dir "$run" --eval-dump "$run/dump" || return
    passed=$((passed + 1))
    stage "${name}_export" python3 scripts/export_hf.py "$ckpt" "$run/hf" || return
    passed=$((passed + 1))
    CHECKS=1 SHOW="$export_show" stage "${name}_check" python3 dev/eval/check_export.py "$ckpt" "$run/hf" "$run/dump" \
        --tokens "$val" --rows 16 --seq-len 256 --eval-log "$run/eval.jsonl"
}
llama_run llama 40
llama_run llama_tied 20 --tie-embeddings on --rope-theta 500000 --norm-eps 1e-6

fp4=(--recipe nvfp4 --steps 20 --lr 1e-3 --warmup 5 --seed 7 --val-every 0)
if LLMC_ATTENTION=own stage fp4_with_eval ./train_gpt_fp4 "${common[@]}" "${fp4[@]}" --eval-every 10 --eval-items 2000 \
        --eval-precision bf16 --out-dir "$WORK/fp4_eval" &&
   LLMC_ATTENTION=own stage fp4_without_eval ./train_gpt_fp4 "${common[@]}" "${fp4[@]}" --out-dir "$WORK/fp4_plain"; then
    passed=$((passed + 2))
    ckpt=$WORK/fp4_eval/ckpt_00000020.bin
    stage fp4_evalonly_recipe ./train_gpt_fp4 --eval-only --init-from "$ckpt" --recipe nvfp4 --batch-size 32 --seq-len 256 \
        -j "" --eval-items 2000 --out-dir "$WORK/fp4_recipe" && passed=$((passed + 1))
    stage fp4_evalonly_bf16 ./train_gpt_fp4 --eval-only --init-from "$ckpt" --recipe nvfp4 --eval-precision bf16 \
        --batch-size 32 --seq-len 256 -j "" --eval-items 2000 --out-dir "$WORK/fp4_bf16" && passed=$((passed + 1))
    CHECKS=1 SHOW="^(PASS|FAIL|check_eval|Traceback|[A-Za-z]*Error)" stage fp4 python3 dev/eval/check_eval.py fp4 \
        --with-eval "$WORK/fp4_eval/log.jsonl" --without-eval "$WORK/fp4_plain/log.jsonl" \
        --eval-logs "$WORK/fp4_recipe/eval.jsonl" "$WORK/fp4_bf16/eval.jsonl"
fi
finish
