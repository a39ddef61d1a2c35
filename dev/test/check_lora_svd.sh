#!/usr/bin/env bash
# check_lora_svd.sh OUTDIR: the LoRA-SVD checks that need a GPU (docs/FULLSTACK_FP4.md section 4), about a minute on
# an H100 after `make train_gpt_fp4 build/test_lora_svd_gpu`:
#   1. build/test_lora_svd_gpu: the GPU refresh and side GEMMs against the CPU twin, rank 0 against no correction;
#   2. GPT-2 d6, 100 steps on the shipped tinyshakespeare tokens, --recipe nvfp4 --lora-svd-rank 16: finite losses, the
#      captured fraction printed every 25 steps, the refresh's cost in the phase_breakdown line;
#   3. the same with --lora-svd-rank 0 and without the flag: the same train and validation losses and the same final
#      checkpoint, bit for bit;
#   4. run 2 resumed from its step-50 checkpoint: the same losses for steps 51..100 (the stored factors carry the warm
#      start).
# Prints one PASS or FAIL line per check; exits 1 if any failed.
set -uo pipefail
out=${1:?usage: dev/test/check_lora_svd.sh OUTDIR}
mkdir -p "$out"
fail=0
say() { printf '%s %s\n' "$1" "$2"; [ "$1" = PASS ] || fail=1; }

./build/test_lora_svd_gpu > "$out/test_lora_svd_gpu.txt" 2>&1
tail -n 1 "$out/test_lora_svd_gpu.txt"
grep -q "failed=0 skipped=0" "$out/test_lora_svd_gpu.txt" && say PASS "test_lora_svd_gpu" ||
    { grep FAIL "$out/test_lora_svd_gpu.txt" | head; say FAIL "test_lora_svd_gpu ($out/test_lora_svd_gpu.txt)"; }

common=(--model d6 --batch-size 16 --seq-len 256 --steps 100 --recipe nvfp4 --val-every 50 --val-batches 4
        --sample-every 0 --diag-every 25 --ckpt-every 50)
# the train and validation lines of a log without timings
losses() {
    grep -E '"type":"(train|val)"' "$1/log.jsonl" |
        sed -E 's/,"(ms|compute_ms|quant_ms|gemm_ms|comm_ms|tok_per_s|mfu|seconds|gpu_memory_used_gib)":[^,}]*//g'
}

./train_gpt_fp4 "${common[@]}" -o "$out/lora16" --lora-svd-rank 16 > "$out/lora16.txt" 2>&1
echo "--- rank 16:"
grep -E "lora-svd|^step +(1|50|100)/" "$out/lora16.txt"
grep -o '"lora_svd":[0-9.]*' "$out/lora16/log.jsonl" | tail -n 1 | sed 's/^/phase_breakdown ms per step: /'
if [ -f "$out/lora16/ckpt_00000100.bin" ] && ! losses "$out/lora16" | grep -qiE 'nan|inf'; then
    say PASS "rank 16: 100 steps, finite losses (last: $(losses "$out/lora16" | grep train | tail -n 1 | grep -o '"loss":[0-9.]*'))"
else
    say FAIL "rank 16 run ($out/lora16.txt)"
fi
grep -q "lora-svd captured fraction" "$out/lora16.txt" && say PASS "captured fraction printed" ||
    say FAIL "no captured fraction in $out/lora16.txt"

./train_gpt_fp4 "${common[@]}" -o "$out/lora0" --lora-svd-rank 0 > "$out/lora0.txt" 2>&1
./train_gpt_fp4 "${common[@]}" -o "$out/noflag" > "$out/noflag.txt" 2>&1
if cmp -s <(losses "$out/lora0") <(losses "$out/noflag") &&
   cmp -s "$out/lora0/ckpt_00000100.bin" "$out/noflag/ckpt_00000100.bin" && [ -s "$out/noflag/ckpt_00000100.bin" ]; then
    say PASS "rank 0 = no flag: same losses ($(losses "$out/noflag" | wc -l) lines) and the same final checkpoint"
else
    say FAIL "rank 0 differs from no flag (diff <(grep -E 'train|val' $out/lora0/log.jsonl) ... $out/noflag/log.jsonl)"
fi

./train_gpt_fp4 "${common[@]}" -o "$out/lora16_resumed" --lora-svd-rank 16 --resume "$out/lora16/ckpt_00000050.bin" \
    > "$out/lora16_resumed.txt" 2>&1
after50() { losses "$1" | awk -F'"step":' '{ split($2, a, ","); if (a[1] + 0 >= 51) print }'; }
if [ -n "$(after50 "$out/lora16_resumed")" ] && cmp -s <(after50 "$out/lora16") <(after50 "$out/lora16_resumed"); then
    say PASS "rank 16 resumed at step 50: the same losses after it, steps 51..100 ($(after50 "$out/lora16" | wc -l) lines)"
else
    say FAIL "rank 16 resume differs ($out/lora16_resumed.txt)"
fi
exit $fail
