#!/usr/bin/env bash
# check_fullstack_gpu.sh: one device call that checks the Full-Stack FP4 options of issue #50, and #51's MoE kernels, on
# a GPU, every part at once (they share the GPU; each is a correctness check, none a timing): the GPU tests against
# their CPU twins (test_muon_gpu with --ns-fp4's path, test_attention_fp4, test_attention, test_optim_state_gpu,
# test_lora_svd_gpu, test_moe_gpu), test_gpt_fp4 with every dump (the attention-FP4 ones included), 50 d6 steps
# with --optimizer muon, and with --ns-fp4 nvfp4 beside the same without it; bit-exact resume with Muon (alone, with
# --zero on --master-weights fp32, with --ns-fp4 nvfp4), with --optimizer-state nvfp4 --zero on, and with Muon and
# LoRA-SVD together (the merged checkpoint layout); 100 d6 steps with --attention-fp4 nvfp4-2d beside the same run
# without it; and dev/test/check_lora_svd.sh (rank 16 finite, rank 0 = no flag bit for bit, resume bit for bit).
# usage: OUT=dir bash dev/test/check_fullstack_gpu.sh
#   Binaries: ./train_gpt_fp4, ./test_gpt_fp4 and build/test_* as built here (make -j GPU_ARCHS=90 ...), or prebuilt
#   ones carried in BIN_DIR (default .carry/vbin: copied in place and used as they are, without make).
#   GPU_TESTS: a subset of the GPU tests to run (default all six).
#   PACK_AT [300]: seconds after which the logs so far are packed into OUT/vlogs.tgz (a device call that runs past its
#   limit still returns OUT); OUT/summary.txt gets one line per part as it ends.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
OUTD=${OUT:-/tmp/check_fullstack}; L=/tmp/vlogs; rm -rf "$L"; mkdir -p "$L" "$OUTD" build
BIN_DIR=${BIN_DIR:-.carry/vbin}
read -r -a gpu_tests <<< "${GPU_TESTS:-test_muon_gpu test_attention_fp4 test_attention test_optim_state_gpu test_lora_svd_gpu test_moe_gpu}"
if [ -d "$BIN_DIR" ]; then   # prebuilt: used as they are (the tree may lack the sources; a carried tree is slimmed)
    cp "$BIN_DIR"/train_gpt_fp4 "$BIN_DIR"/test_gpt_fp4 .
    for t in "${gpu_tests[@]}"; do cp "$BIN_DIR/$t" build/; done
else
    make -j"$(nproc)" train_gpt_fp4 test_gpt_fp4 "${gpu_tests[@]/#/build/}" GPU_ARCHS="${GPU_ARCHS:-90}" > "$L/build.txt" 2>&1 ||
        { echo "build FAILED:"; grep -E "error|No rule" "$L/build.txt" | head -20; exit 1; }
fi
nvidia-smi --query-gpu=name --format=csv,noheader
( sleep "${PACK_AT:-300}"; tar -C /tmp -czf "$OUTD/vlogs.tgz" vlogs ) &
PACKER=$!
pids=()
st() {   # st NAME LIMIT command...: one part, its status, time and result lines
    local n=$1 lim=$2; shift 2
    local t=$SECONDS
    timeout "$lim" "$@" > "$L/$n.txt" 2>&1
    local rc=$?
    echo "=== $n rc=$rc $((SECONDS - t))s (t=$((SECONDS - T0))): $(grep -E '^TESTS|PASS|FAIL|check_resume: OK' "$L/$n.txt" |
        head -n 8 | tr '\n' '|')" | tee -a "$OUTD/summary.txt"
}
d6=(--model d6 --sample-every 0 --ckpt-every -1)
for t in "${gpu_tests[@]}"; do st "$t" 240 "build/$t" & pids+=($!); done
st test_gpt_fp4 150 ./test_gpt_fp4 & pids+=($!)
st muon_run 60 ./train_gpt_fp4 "${d6[@]}" --batch-size 8 --seq-len 256 --steps 50 --val-every 0 --seed 7 --optimizer muon \
    --out-dir /tmp/muon_run & pids+=($!)
st muon_resume 120 env CHECK_DIR=/tmp/cr_muon STEPS=12 bash scripts/check_resume.sh --optimizer muon & pids+=($!)
st muon_resume_zero 120 env CHECK_DIR=/tmp/cr_muonz STEPS=12 bash scripts/check_resume.sh --optimizer muon --zero on \
    --master-weights fp32 & pids+=($!)
st opt4_resume_zero 120 env CHECK_DIR=/tmp/cr_opt4 STEPS=12 bash scripts/check_resume.sh --optimizer-state nvfp4 \
    --master-weights fp32 --zero on & pids+=($!)
st muon_lora_resume 120 env CHECK_DIR=/tmp/cr_ml STEPS=12 bash scripts/check_resume.sh --recipe nvfp4 --optimizer muon \
    --lora-svd-rank 16 & pids+=($!)
attn=(--batch-size 16 --seq-len 256 --steps 100 --val-every 50 --val-batches 4 --recipe nvfp4)
st attn4_run 120 ./train_gpt_fp4 "${d6[@]}" "${attn[@]}" --attention-fp4 nvfp4-2d -o /tmp/attn4 & pids+=($!)
st attn4_base 120 ./train_gpt_fp4 "${d6[@]}" "${attn[@]}" -o /tmp/attn4b & pids+=($!)
st lora 170 bash dev/test/check_lora_svd.sh /tmp/lora_check & pids+=($!)
st ns4_run 90 ./train_gpt_fp4 "${d6[@]}" --batch-size 8 --seq-len 256 --steps 50 --val-every 0 --seed 7 --optimizer muon \
    --recipe nvfp4 --ns-fp4 nvfp4 --out-dir /tmp/ns4_run & pids+=($!)
st ns4_base 90 ./train_gpt_fp4 "${d6[@]}" --batch-size 8 --seq-len 256 --steps 50 --val-every 0 --seed 7 --optimizer muon \
    --recipe nvfp4 --out-dir /tmp/ns4_base & pids+=($!)
st ns4_resume 150 env CHECK_DIR=/tmp/cr_ns4 STEPS=12 bash scripts/check_resume.sh --optimizer muon --ns-fp4 nvfp4 & pids+=($!)
wait "${pids[@]}"
kill "$PACKER" 2>/dev/null
for f in /tmp/muon_run /tmp/attn4 /tmp/attn4b /tmp/ns4_run /tmp/ns4_base; do
    echo "$f: $(grep -c '"type":"train"' $f/log.jsonl 2>/dev/null) train steps; first and last loss:" \
         "$(grep '"type":"train"' $f/log.jsonl 2>/dev/null | sed -n '1p;$p' | grep -o '"loss":[^,]*' | tr '\n' ' ')" |
        tee -a "$OUTD/summary.txt"
done
grep -E "attention|recipe" "$L/attn4_run.txt" | head -n 3 >> "$OUTD/summary.txt"
cp /tmp/lora_check/lora16.txt "$L/" 2>/dev/null
tar -C /tmp -czf "$OUTD/vlogs.tgz" vlogs
echo "total $((SECONDS - T0)) s"
