#!/usr/bin/env bash
# bench_llama.sh: the Llama speed goals of issue #48 (item 5), in one run on one GPU:
#   1. in BF16, train_gpt_fp4's Llama at GPT-2-124M-like size is at least as fast as a PyTorch torch.compile
#      Llama of the same shape (dev/bench/bench_torch.py --arch llama: bf16 autocast, fused SDPA, fused AdamW);
#   2. nvfp4 over BF16 costs the Llama at most what it costs GPT-2 d12 (step-time ratio nvfp4 / bf16).
# Runs the trainer's Llama in bf16, nvfp4 and mxfp4, the PyTorch peer at the same shape, and GPT-2 d12 in bf16 and
# nvfp4, interleaved ROUNDS times (the GPU's clocks drift by a few % between runs; interleaving exposes every run
# to it), keeps each run's fastest round, and prints ms/step, tokens/s and the ratios.
# The Llama shape (default: GPT-2 d12's, L 12, C 768, NH 12, KVH 12, H 2048 = 8C/3, the same 85M non-embedding
# parameters as d12, plus an untied head) goes to both programs as the same flags:
#   --arch llama --n-layer L --n-embd C --n-head NH --kv-heads KVH --mlp-hidden H   (bench_torch.py: llama-d12)
# usage: dev/bench/bench_llama.sh          (build first: make train_gpt_fp4; needs torch for the peer)
# env: STEPS (30), B (64), T (1024), ROUNDS (2), DATA (tinyshakespeare train shard), BENCH_OUT (/tmp/bench_llama),
#      L C NH KVH H (12 768 12 12 2048; KVH=4 for grouped-query attention), LLAMA_MODEL (a trainer preset, e.g.
#      llama-100m, in place of L ... H), GPT2_MODEL (d12), TORCH_STEPS (STEPS; the first steps, compilation
#      included, are the warm-up), TORCH_ARGS (more bench_torch.py flags, e.g. "--gqa repeat"),
#      RUNS (default "llama-bf16 llama-torch llama-nvfp4 llama-mxfp4 gpt2-bf16 gpt2-nvfp4"): FAMILY-WHAT with
#      FAMILY llama or gpt2 and WHAT torch or a recipe as bench_train.sh takes them (nvfp4, mxfp4-2d@emulated,
#      nvfp4+delayed, ...), e.g. add gpt2-torch for the GPT-2 peer.
# ms/step: the median of the steps after warm-up of each run's log.jsonl "ms" (bench_train.sh's rule: steps 6..N
# when there are more than 10, else 2..N; the peer writes the same log with --log); tokens/s = B*T / that.
# Logs: BENCH_OUT/RUN.ROUND.txt (output) and BENCH_OUT/RUN.ROUND/log.jsonl. A run that fails is named, with the
# end of its output, and left out of the table; the exit status is then 1. ~4-5 minutes on an H100 at the defaults
# (the peer's first torch.compile is most of a minute).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-30}; B=${B:-64}; T=${T:-1024}; ROUNDS=${ROUNDS:-2}; TORCH_STEPS=${TORCH_STEPS:-$STEPS}
DATA=${DATA:-data/tinyshakespeare/tiny_shakespeare_train.bin}
OUT=${BENCH_OUT:-/tmp/bench_llama}
GPT2_MODEL=${GPT2_MODEL:-d12}
if [ -n "${LLAMA_MODEL:-}" ]; then
    llama=(--model "$LLAMA_MODEL")
else
    llama=(--arch llama --n-layer "${L:-12}" --n-embd "${C:-768}" --n-head "${NH:-12}" --kv-heads "${KVH:-12}"
           --mlp-hidden "${H:-2048}")
fi
read -r -a runs <<< "${RUNS:-llama-bf16 llama-torch llama-nvfp4 llama-mxfp4 gpt2-bf16 gpt2-nvfp4}"
read -r -a torch_args <<< "${TORCH_ARGS:-}"
[ -x ./train_gpt_fp4 ] || { echo "bench_llama: ./train_gpt_fp4 not found: make train_gpt_fp4 first" >&2; exit 1; }
failed=()
mkdir -p "$OUT"
echo "bench_llama: Llama ${llama[*]}; GPT-2 $GPT2_MODEL; B=$B, T=$T, $STEPS steps (peer $TORCH_STEPS), $ROUNDS round(s)"
t_all=$SECONDS
for ((k = 1; k <= ROUNDS; k++)); do
    for r in "${runs[@]}"; do
        fam=${r%%-*}; what=${r#*-}
        case $fam in
        llama) shape=("${llama[@]}") ;;
        gpt2)  shape=(--model "$GPT2_MODEL") ;;
        *)     echo "bench_llama: unknown run '$r' (FAMILY-WHAT, FAMILY llama or gpt2)" >&2; exit 1 ;;
        esac
        rm -rf "$OUT/$r.$k"; mkdir -p "$OUT/$r.$k"
        t0=$SECONDS
        if [ "$what" = torch ]; then
            cmd=(python3 dev/bench/bench_torch.py "${shape[@]}" --batch "$B" --seq-len "$T" --steps "$TORCH_STEPS"
                 --log "$OUT/$r.$k/log.jsonl" "${torch_args[@]}")
        else
            extra=()
            base=${what%+delayed}
            name=${base%%@*}
            [ "$name" = bf16 ] || extra=(--recipe "$name")
            [ "$name" = "$base" ] || extra+=(--fp4-gemm "${base#*@}")
            [ "$base" = "$what" ] || extra+=(--amax delayed)
            cmd=(./train_gpt_fp4 "${shape[@]}" --batch-size "$B" --seq-len "$T" --total-batch $((B * T)) --steps "$STEPS"
                 --train-data "$DATA" --val-every 0 --sample-every 0 --ckpt-every -1 --out-dir "$OUT/$r.$k" "${extra[@]}")
        fi
        # a run that fails is reported and left out of the table; the others still run (exit status 1)
        if ! "${cmd[@]}" > "$OUT/$r.$k.txt" 2>&1; then
            echo "bench_llama: $r (round $k) FAILED: ${cmd[*]}; the end of $OUT/$r.$k.txt:" >&2
            tail -n 5 "$OUT/$r.$k.txt" >&2
            failed+=("$r")
        fi
        echo "  round $k: $r ($((SECONDS - t0)) s)"
    done
done
echo "($((SECONDS - t_all)) s in all)"
python3 - "$OUT" "$ROUNDS" "$B" "$T" "${failed[*]:-}" "${runs[@]}" <<'PY'
import json, statistics, sys
out, rounds, B, T, failed, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), \
    set(sys.argv[5].split()), sys.argv[6:]
if failed:
    print(f"left out (failed): {' '.join(r for r in runs if r in failed)}")
rows = {}
for r in runs:
    if r in failed or r in rows:
        continue
    per_round = []
    for k in range(1, rounds + 1):
        log = [json.loads(line) for line in open(f"{out}/{r}.{k}/log.jsonl")]
        steps = [d for d in log if d.get("type") == "train"]
        warm = steps[5:] if len(steps) > 10 else steps[1:] or steps
        per_round.append(dict(ms=statistics.median(d["ms"] for d in warm),
                              quant=statistics.median(d.get("quant_ms", 0.0) for d in warm),
                              gemm=statistics.median(d.get("gemm_ms", 0.0) for d in warm),
                              loss=steps[-1]["loss"]))
    best = min(per_round, key=lambda d: d["ms"])
    best["spread"] = max(d["ms"] for d in per_round) / best["ms"] - 1
    rows[r] = best
if not rows:
    sys.exit(0)
def base_of(r):   # each family's ratios are against its trainer bf16 run
    b = r.split("-", 1)[0] + "-bf16"
    return rows.get(b)
# quant ms / gemm ms: the trainer's CUDA events around its quantization passes and its linear layers' GEMMs
# (bench_train.sh); the peer has neither. spread: the slowest round's ms over the fastest's (the noise).
print(f"\n{'run':<16}{'ms/step':>10}{'tokens/s':>12}{'vs bf16':>9}{'extra ms':>10}{'quant ms':>10}{'gemm ms':>9}"
      f"{'spread':>8}{'last loss':>11}")
for r, d in rows.items():
    b = base_of(r)
    ratio = f"{d['ms'] / b['ms']:>9.3f}{d['ms'] - b['ms']:>10.1f}" if b else f"{'':>9}{'':>10}"
    torch_run = r.endswith("-torch")
    qg = f"{'':>10}{'':>9}" if torch_run else f"{d['quant']:>10.1f}{d['gemm']:>9.1f}"
    print(f"{r:<16}{d['ms']:>10.1f}{B * T / d['ms'] * 1e3:>12,.0f}{ratio}{qg}{100 * d['spread']:>7.1f}%"
          f"{d['loss']:>11.4f}")
print("(the peer's loss is on random tokens, the trainer's on DATA: not comparable)")
print()
def verdict(ok):
    return "MET" if ok else "NOT MET"
lb, lt = rows.get("llama-bf16"), rows.get("llama-torch")
if lb and lt:
    s = lt["ms"] / lb["ms"]
    print(f"Llama BF16, trainer vs torch.compile: {lb['ms']:.1f} against {lt['ms']:.1f} ms/step; the peer's time over "
          f"the trainer's {s:.3f} (goal >= 1: {verdict(s >= 1)})")
gb = rows.get("gpt2-bf16")
for r in rows:   # each FP4 recipe's step time over BF16, the Llama's against GPT-2's where both ran
    rec = r.split("-", 1)[1]
    ln, gn = rows[r], rows.get(f"gpt2-{rec}")
    if not r.startswith("llama-") or rec in ("bf16", "torch") or not lb:
        continue
    line = f"{rec} over BF16: Llama {ln['ms'] / lb['ms']:.3f} (+{ln['ms'] - lb['ms']:.1f} ms)"
    if gb and gn:
        rl, rg = ln["ms"] / lb["ms"], gn["ms"] / gb["ms"]
        line += f", GPT-2 {rg:.3f} (+{gn['ms'] - gb['ms']:.1f} ms); Llama's ratio over GPT-2's {rl / rg:.3f}"
        if rec == "nvfp4":
            line += f" (goal <= 1: {verdict(rl <= rg)})"
    print(line)
if rows and max(d["spread"] for d in rows.values()) > 0.02:
    print("(a spread over 2% between rounds: a verdict within it is noise; more ROUNDS or STEPS)")
PY
[ ${#failed[@]} -eq 0 ]
