#!/usr/bin/env bash
# Training throughput of train_gpt_fp4: d12 (GPT-2 124M), B=64, T=1024, total batch 65536 on one GPU.
# Prints tokens/s and MFU (median of the steps after warm-up) for each recipe given, and the ratio of
# each recipe's step time to the first one's (the baseline, measured in the same run).
# usage: dev/bench/bench_train.sh [recipe[@gemm][+delayed][+nondet] ...]   (default: bf16); @gemm picks
#        --fp4-gemm (auto|native|fp8|emulated), e.g. mxfp4-2d@emulated mxfp4-2d@fp8; +delayed adds --amax delayed
#        (e.g. nvfp4 nvfp4+delayed); +nondet adds --deterministic off (cuDNN's atomic attention backward)
# env: STEPS (default 30), MODEL (d12), B (64), T (1024), DATA (tinyshakespeare train shard),
#      ROUNDS (1): run the recipe list this many times, interleaved, and keep each recipe's fastest
#      round (the GPU's clocks drift by a few % between runs; interleaving exposes both to it); with 2 or
#      more, also says whether each recipe's per-step losses (the log's 6 decimals) were the same in every round
#      (they are, run after run, unless +nondet: cuDNN's atomic backward differs in the last bits, and FP4
#      rounding magnifies that; dev/bench/check_repro.sh)
# A recipe whose run fails is named, with the end of its log, and left out of the table (the ratios are
# against the first recipe that ran, as the header says); the exit status is then 1.
set -euo pipefail
STEPS=${STEPS:-30}; MODEL=${MODEL:-d12}; B=${B:-64}; T=${T:-1024}; ROUNDS=${ROUNDS:-1}
DATA=${DATA:-data/tinyshakespeare/tiny_shakespeare_train.bin}
OUT=${BENCH_OUT:-/tmp/bench_train}
recipes=("$@"); [ ${#recipes[@]} -gt 0 ] || recipes=(bf16)
failed=()
mkdir -p "$OUT"
for ((k = 1; k <= ROUNDS; k++)); do
    for r in "${recipes[@]}"; do
        extra=()
        base=$r
        while [[ "$base" == *+* ]]; do   # the +suffixes, in any order
            case ${base##*+} in
            delayed) extra+=(--amax delayed) ;;
            nondet)  extra+=(--deterministic off) ;;
            *)       echo "bench_train: unknown suffix '+${base##*+}' in '$r' (+delayed, +nondet)" >&2; exit 1 ;;
            esac
            base=${base%+*}
        done
        name=${base%%@*}
        [ "$name" = bf16 ] || extra+=(--recipe "$name")
        [ "$name" = "$base" ] || extra+=(--fp4-gemm "${base#*@}")
        # a recipe that fails is reported and left out of the table; the others still run (exit status 1)
        if ! ./train_gpt_fp4 --model "$MODEL" --batch-size "$B" --seq-len "$T" --total-batch $((B * T)) --steps "$STEPS" \
                --train-data "$DATA" --val-every 0 --sample-every 0 --ckpt-every -1 --out-dir "$OUT/$r.$k" "${extra[@]}" \
                > "$OUT/$r.$k.txt" 2>&1; then
            echo "bench_train: $r (round $k) FAILED; the end of $OUT/$r.$k.txt:" >&2
            tail -n 5 "$OUT/$r.$k.txt" >&2
            failed+=("$r")
        fi
    done
done
python3 - "$OUT" "$ROUNDS" "${failed[*]:-}" "${recipes[@]}" <<'PY'
import json, statistics, sys
out, rounds, failed, recipes = sys.argv[1], int(sys.argv[2]), set(sys.argv[3].split()), sys.argv[4:]
if failed:
    print(f"left out (failed): {' '.join(r for r in recipes if r in failed)}")
recipes = [r for r in recipes if r not in failed]
if not recipes:
    sys.exit(0)
rows, same, split = [], {}, {}
for r in recipes:
    best = None
    losses = []
    for k in range(1, rounds + 1):
        log = [json.loads(line) for line in open(f"{out}/{r}.{k}/log.jsonl")]
        steps = [d for d in log if d.get("type") == "train"]
        warm = steps[5:] if len(steps) > 10 else steps[1:]
        ms = statistics.median(d["ms"] for d in warm)
        tok = statistics.median(d["tok_per_s"] for d in warm)
        mfu = statistics.median(d["mfu"] for d in warm)
        quant = statistics.median(d.get("quant_ms", 0.0) for d in warm)   # time inside quantization passes
        gemm = statistics.median(d.get("gemm_ms", 0.0) for d in warm)     # time inside the linear layers' GEMMs
        mem = [d for d in log if d.get("event") == "done"]
        losses.append([(d["step"], d["loss"]) for d in steps])
        row = (r, ms, tok, mfu, quant, gemm, mem[0]["gpu_memory_used_gib"] if mem else float("nan"), steps[-1]["loss"])
        if best is None or ms < best[1]:
            best = row
            split[r] = next((d for d in log if d.get("type") == "phase_breakdown"), None)
    rows.append(best)
    diff = [k for k in range(1, rounds) if losses[k] != losses[0]]
    if rounds > 1:
        first = None
        for k in diff:
            bad = [a[0] for a, b in zip(losses[0], losses[k]) if a != b]
            if bad and (first is None or bad[0] < first): first = bad[0]
        same[r] = "yes" if not diff else f"NO (rounds {', '.join(str(k + 1) for k in diff)} differ from round 1, " \
                                         f"first at step {first})"
base, bq, bg = rows[0][1], rows[0][4], rows[0][5]
# The step splits into quant (CUDA events around each quantization pass), gemm (around each linear layer's
# GEMM) and rest (everything else: attention, norms, optimizer, scale products, launch gaps), each a median
# over the warm steps (rest: the step's median minus the other two, so d quant + d gemm + d rest = extra
# exactly), so a recipe's extra step time (step - the baseline's) reads as what its quantization adds and what
# its GEMMs save or add. The GPU's clock can differ between recipes (results/README.md): a negative d rest is that.
print(f"{'recipe':<14}{'ms/step':>10}{'tokens/s':>12}{'MFU':>8}{'vs ' + rows[0][0]:>10}{'extra ms':>10}"
      f"{'quant ms':>10}{'gemm ms':>9}{'rest ms':>9}{'d quant':>9}{'d gemm':>8}{'d rest':>8}{'GPU GiB':>9}{'last loss':>11}")
for r, ms, tok, mfu, quant, gemm, mem, loss in rows:
    rest, brest = ms - quant - gemm, base - bq - bg
    print(f"{r:<14}{ms:>10.1f}{tok:>12,.0f}{100 * mfu:>7.1f}%{ms / base:>10.3f}{ms - base:>10.1f}"
          f"{quant:>10.1f}{gemm:>9.1f}{rest:>9.1f}{quant - bq:>9.1f}{gemm - bg:>8.1f}{rest - brest:>8.1f}"
          f"{mem:>9.1f}{loss:>11.4f}")
if same:
    print(f"same losses in all {rounds} rounds (to the log's 6 decimals): " + "; ".join(f"{r} {v}" for r, v in same.items()))
# Where the quantization and GEMM time goes: the trainer's phase_breakdown line (the mean per step over the steps
# after the first, so it also holds the diagnostics' steps, whose extra weight copies are the "diag" column), summed
# over the linear kinds by source and direction (X.fwd: the forward's passes over X, X.bwd: copies of X the backward
# makes, dY.bwd, W), and over the sources by linear kind; GEMMs by kind of GEMM.
srcs, kinds, gemms = ["X.fwd", "X.bwd", "W.fwd", "W.bwd", "dY.bwd"], ["qkv", "attproj", "fc", "fcproj"], ["fprop", "dgrad", "wgrad"]
if any(split.values()):
    print(f"\nper step, ms (mean over steps 2..N): quantization by source | by linear | GEMMs")
    print(f"{'recipe':<14}" + "".join(f"{c:>8}" for c in srcs + ["diag"]) + " |" + "".join(f"{c:>8}" for c in kinds)
          + " |" + "".join(f"{c:>8}" for c in gemms))
    for r in [row[0] for row in rows]:
        b = split.get(r)
        if not b:
            continue
        q, g = b["quant_ms"], b["gemm_ms"]
        by_src = [sum(v for k, v in q.items() if k.split(".", 1)[-1] == c) for c in srcs] + [q.get("diag", 0.0)]
        by_kind = [sum(v for k, v in q.items() if k.split(".")[0] == c) for c in kinds]
        by_gemm = [sum(v for k, v in g.items() if k.split(".")[1] == c) for c in gemms]
        print(f"{r:<14}" + "".join(f"{v:>8.2f}" for v in by_src) + " |" + "".join(f"{v:>8.2f}" for v in by_kind)
              + " |" + "".join(f"{v:>8.2f}" for v in by_gemm))
PY
[ ${#failed[@]} -eq 0 ]
