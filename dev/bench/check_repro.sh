#!/usr/bin/env bash
# check_repro.sh: is FP4 training reproducible run to run, and if not, where does it read memory it never
# wrote or race? On the GPU machine, in one call:
#   1. the same d12 training twice per recipe (dev/bench/bench_train.sh, ROUNDS=2) as a user runs it (cuDNN's
#      attention, in its deterministic form, the default; ATTENTION=own for the program's own kernels): the same
#      per-step losses in both rounds? Also bf16+nondet and the first recipe +nondet (--deterministic off:
#      cuDNN's backward sums dQ with atomics), which may differ, and the price of determinism: the step time
#      of each deterministic run over its +nondet twin, from the same interleaved rounds.
#   2. compute-sanitizer over a few small steps (d6, B=4, T=256) of each FP4 recipe: initcheck (reads of
#      global memory never written), racecheck (shared-memory hazards), memcheck (out-of-bounds accesses).
#      Reports name the kernel; the library kernels' (cuBLASLt, cuDNN) are listed apart from ours. Each
#      run goes once per attention backend in SAN_ATTENTION: on 2026-12-02 initcheck named qf_amax_kernel
#      with cuDNN's attention (30 reports, the print limit), and the quantizer's first read of cuDNN's
#      output is the attention output projection's input; a clean run with the own kernels says the
#      reports come from cuDNN's writes (which the sanitizer may not track), not from our kernels.
#      (On 2026-12-02 it did not: with the own kernels initcheck named attn_own_forward_kernel, whose first
#      input, QKV, cuBLASLt writes. Part 3 tells such reports from real ones.)
#   3. poison: the same few d6 steps per recipe (own attention, so runs are deterministic), once plainly and
#      once with LLMC_POISON=1, which fills every buffer the trainer allocates with NaN bytes: a kernel that
#      reads memory nothing wrote changes the losses (or makes them NaN). Equal losses say the sanitizer's
#      reports are writes it did not see.
#   4. probe: build/san_probe (dev/test/san_probe.cu) under initcheck: a buffer written by a plain kernel,
#      cudaMemset, cuBLASLt's GEMM and cuDNN's attention, each read by a kernel of its own name, and one
#      never written (the control). Reports on read_after_cublaslt / read_after_cudnn, with the values
#      right, mean initcheck does not see those libraries' stores: the reports of part 2 are of that kind.
# usage: bash dev/bench/check_repro.sh [recipe ...]      (default: nvfp4 nvfp4-naive quartet2)
# env: OUT [/tmp/check_repro] (logs there), STEPS [12] and ATTENTION [cudnn; or own] for part 1, SAN_STEPS [2], SAN_B [4], SAN_T [256] for part 2 and SAN_TIMEOUT [150]
#      seconds per sanitizer run, GPU_ARCHS [90],
#      PARTS ["train sanitize poison"], POISON_STEPS [6], SAN_TOOLS ["initcheck memcheck racecheck"], SAN_ATTENTION ["cudnn own"]
# Files: OUT/train.txt, OUT/san_TOOL_RECIPE_ATTENTION.txt (each cut to its first 200 KB), OUT/summary.txt
# (the lines printed here, with the first three reports of every sanitizer run that had any).
# Exit status: 1 if the build failed, a recipe's losses differ between rounds or with poisoned memory, or a
# sanitizer reported an error in one of the program's own kernels.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/check_repro}
mkdir -p "$OUT"
recipes=("$@"); [ ${#recipes[@]} -gt 0 ] || recipes=(nvfp4 nvfp4-naive quartet2)
PARTS=${PARTS:-"train sanitize poison probe"}
SAN_TOOLS=${SAN_TOOLS:-"initcheck memcheck racecheck"}
export NCCL_NVLS_ENABLE=0
t0=$SECONDS
make -j"$(nproc)" train_gpt_fp4 GPU_ARCHS="${GPU_ARCHS:-90}" > "$OUT/build.txt" 2>&1 ||
    { grep -E "error" "$OUT/build.txt" | head -n 20; echo "check_repro: the build FAILED"; exit 1; }
echo "check_repro: built in $((SECONDS - t0)) s"
rc=0
: > "$OUT/summary.txt"
if [[ " $PARTS " == *" train "* ]]; then
    t1=$SECONDS
    envs=(); [ "${ATTENTION:-cudnn}" = own ] && envs=(LLMC_ATTENTION=own)
    env "${envs[@]}" ROUNDS=2 STEPS=${STEPS:-12} BENCH_OUT="$OUT/train" dev/bench/bench_train.sh bf16 "${recipes[@]}" \
        bf16+nondet "${recipes[0]}+nondet" > "$OUT/train.txt" 2>&1 || rc=1
    cat "$OUT/train.txt"
    # every run without +nondet must repeat its losses; the price of determinism from the table's ms/step
    python3 - "$OUT/train.txt" <<'PY' | tee -a "$OUT/summary.txt" || rc=1
import re, sys
text = open(sys.argv[1]).read()
line = next((l for l in text.splitlines() if l.startswith("same losses")), "")
verdicts = dict(re.findall(r"([\w.@+-]+) (yes|NO)", line.split(":", 1)[-1]))
ms = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+)\s+([\d.]+)\s+[\d,]+\s", text, re.M)}
bad = [r for r, v in verdicts.items() if v != "yes" and not r.endswith("+nondet")]
for r, v in verdicts.items():
    print(f"check_repro: repeat {r}: {'same losses' if v == 'yes' else 'DIFFERENT losses'}"
          f"{' (allowed: non-deterministic)' if r.endswith('+nondet') and v != 'yes' else ''}")
for r in ms:
    if r.endswith("+nondet") and r[:-7] in ms:
        print(f"check_repro: determinism costs {r[:-7]} {100 * (ms[r[:-7]] / ms[r] - 1):+.1f}% "
              f"({ms[r[:-7]]:.1f} against {ms[r]:.1f} ms/step)")
if not verdicts or bad:
    print(f"check_repro: part 1 FAILED: {'no verdicts' if not verdicts else 'not repeatable: ' + ' '.join(bad)}")
    sys.exit(1)
PY
    echo "check_repro: part 1 in $((SECONDS - t1)) s"
fi
if [[ " $PARTS " == *" sanitize "* ]]; then
    command -v compute-sanitizer > /dev/null || { echo "check_repro: no compute-sanitizer on this machine"; exit 1; }
    for r in "${recipes[@]}"; do
        for att in ${SAN_ATTENTION:-cudnn own}; do
            for tool in $SAN_TOOLS; do
                t1=$SECONDS
                log="$OUT/san_${tool}_${r}_$att.txt"
                envs=(); [ "$att" = own ] && envs=(LLMC_ATTENTION=own)
                env "${envs[@]}" timeout "${SAN_TIMEOUT:-150}" compute-sanitizer --tool "$tool" --print-limit 30 \
                    ./train_gpt_fp4 --model d6 --batch-size "${SAN_B:-4}" --seq-len "${SAN_T:-256}" \
                    --total-batch $(( ${SAN_B:-4} * ${SAN_T:-256} )) --steps "${SAN_STEPS:-2}" \
                    --val-every 0 --sample-every 0 --ckpt-every -1 --recipe "$r" --out-dir "$OUT/san_run" > "$log" 2>&1
                src=$?
                # the summary line, and the kernels the reports name (ours vs the libraries')
                summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
                [ -n "$summary" ] || summary="no summary: $([ $src = 124 ] && echo "stopped at SAN_TIMEOUT" || echo "exit status $src")"
                # (initcheck/memcheck: "at KERNEL+0x..." lines; racecheck: "... Read/Write access at KERNEL+0x...")
                kernels=$( { grep -E "^=+ +at " "$log" | sed -E 's/^=+ +at +//'
                             grep -oE "(between|and) (Read|Write) access at [^ ]+" "$log" | sed -E 's/.* access at //'; } |
                          sed -E 's/\+0x[0-9a-f]+.*$//; s/ in .*$//; s/\(.*$//' | sort | uniq -c | sort -rn)
                ours=$(grep -vE "cublas|cudnn|cutlass|sm90_|xmma|gemm|nvjet|Kernel2" <<<"$kernels" | grep -v '^\s*$' || true)
                echo "check_repro: $tool $r (attention $att): $summary ($((SECONDS - t1)) s)"
                if [ -n "$kernels" ]; then
                    echo "$kernels" | head -n 8 | sed 's/^/    /'
                    # the first three reports, whole (the access, the kernel, the thread, the host call stack)
                    awk '/^========= [A-Z]/ && !/COMPUTE-SANITIZER/ { n++ } /^=========/ && n >= 1 && n <= 3' "$log" | head -n 60 | sed 's/^/      /'
                fi
                # (this loop runs in a pipe's subshell: the status comes from summary.txt below)
                [ -n "$ours" ] && echo "    ^ the program's own kernels are named"
                truncate -s '<200K' "$log"
            done
        done
    done 2>&1 | tee -a "$OUT/summary.txt"
    grep -q "own kernels are named" "$OUT/summary.txt" && rc=1
fi
if [[ " $PARTS " == *" poison "* ]]; then
    for r in "${recipes[@]}"; do
        t1=$SECONDS
        for mode in plain poison; do
            envs=(LLMC_ATTENTION=own); [ $mode = poison ] && envs+=(LLMC_POISON=1)
            rm -rf "$OUT/poison_${r}_$mode"   # no log of an earlier run to compare by mistake
            env "${envs[@]}" ./train_gpt_fp4 --model d6 --batch-size 8 --seq-len 1024 --total-batch 8192 \
                --steps "${POISON_STEPS:-6}" --val-every 0 --sample-every 0 --ckpt-every -1 --recipe "$r" \
                --out-dir "$OUT/poison_${r}_$mode" > "$OUT/poison_${r}_$mode.txt" 2>&1 ||
                { echo "check_repro: poison $r: the $mode run FAILED (see $OUT/poison_${r}_$mode.txt)" | tee -a "$OUT/summary.txt"; rc=1; }
        done
        # the per-step losses of both runs, as logged (6 decimals)
        verdict=$(python3 - "${POISON_STEPS:-6}" "$OUT/poison_${r}_plain/log.jsonl" "$OUT/poison_${r}_poison/log.jsonl" <<'PY'
import json, sys
steps, runs = int(sys.argv[1]), []
for path in sys.argv[2:]:
    try:
        runs.append([l["loss"] for l in map(json.loads, open(path)) if l.get("type") == "train"])
    except (OSError, ValueError):
        runs.append(None)
a, b = runs
if not a or not b or len(a) != steps or len(b) != steps:
    print(f"NO: the runs logged {len(a or [])} and {len(b or [])} of {steps} steps")
elif a == b:
    print(f"same losses at all {len(a)} steps (last {a[-1]:.6f})")
else:
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    print(f"NO: they differ from step {k + 1} ({a[k] if k < len(a) else '-'} plain, {b[k] if k < len(b) else '-'} poisoned)")
PY
)
        echo "check_repro: poison $r: $verdict ($((SECONDS - t1)) s)" | tee -a "$OUT/summary.txt"
        [[ "$verdict" == same* ]] || rc=1   # an empty verdict (no python3, an exception) fails too
        rm -rf "$OUT/poison_${r}_plain" "$OUT/poison_${r}_poison"
    done
fi
if [[ " $PARTS " == *" probe "* ]]; then
    make -j"$(nproc)" build/san_probe GPU_ARCHS="${GPU_ARCHS:-90}" >> "$OUT/build.txt" 2>&1 || { echo "check_repro: san_probe build FAILED"; rc=1; }
    build/san_probe > "$OUT/probe_plain.txt" 2>&1 || { echo "check_repro: san_probe read wrong values"; rc=1; }
    grep -E "^read_|backend" "$OUT/probe_plain.txt" | sed 's/^/check_repro: probe (plain): /' | tee -a "$OUT/summary.txt"
    # one initcheck run per case, so that each error summary counts that case's reports alone
    declare -A nrep=()
    for k in read_after_kernel read_after_memset read_after_cublaslt read_after_cudnn read_uninitialized; do
        compute-sanitizer --tool initcheck --print-limit 3 build/san_probe "$k" > "$OUT/probe_initcheck_$k.txt" 2>&1
        nrep[$k]=$(sed -nE 's/^=+ ERROR SUMMARY: ([0-9]+) error.*/\1/p' "$OUT/probe_initcheck_$k.txt" | head -n 1)
        echo "check_repro: probe initcheck: $k: ${nrep[$k]:-no summary} report(s)" | tee -a "$OUT/summary.txt"
    done
    # the control must be reported and our own writers must not be
    [ "${nrep[read_uninitialized]:-0}" -gt 0 ] || { echo "check_repro: probe: initcheck missed the control"; rc=1; }
    [ "${nrep[read_after_kernel]:-1}" = 0 ] && [ "${nrep[read_after_memset]:-1}" = 0 ] ||
        { echo "check_repro: probe: a report after our own writes (or no summary)"; rc=1; }
fi
echo "check_repro: $([ $rc = 0 ] && echo "all clean" || echo "FOUND something (see $OUT)") in $((SECONDS - t0)) s"
exit $rc
