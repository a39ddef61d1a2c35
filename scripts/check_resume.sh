#!/usr/bin/env bash
# Resuming continues bit for bit: trains N steps in one go, and N/2 + N/2 with a checkpoint and a
# resume in between, then compares the per-step losses of the two logs exactly. Then the same after a
# kill -9 that lands while a checkpoint is being written: the resume (from the newest whole
# checkpoint) must still give the uninterrupted run's losses. Both resumed logs must hold every step
# exactly once (the trainer drops the interrupted run's lines after its checkpoint), a resume line, and
# the uninterrupted run's events (such as --bf16-forward-from's switch) at the same steps, once each.
# usage: scripts/check_resume.sh [extra trainer flags...]   (needs a GPU and ./train_gpt_fp4)
# env: STEPS [12], CHECK_DIR [/tmp/check_resume] (the runs' logs and checkpoints)
# Ends with the test summary line scripts/run_tests.sh reads; skips (exit 0) without a GPU, as the GPU
# test binaries do: an installed but unusable driver, or REQUIRE_GPU=1 without a GPU, is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_or_skip.sh
gpu_or_skip check_resume
STEPS=${STEPS:-12}
HALF=$((STEPS / 2))
OUT=${CHECK_DIR:-/tmp/check_resume}   # the runs' logs and checkpoints stay there until the next run
rm -rf "$OUT"; mkdir -p "$OUT"
common=(--model d6 --batch-size 4 --seq-len 256 --steps "$STEPS" --val-every 0 --sample-every 0 --seed 7 "$@")
./train_gpt_fp4 "${common[@]}" --out-dir "$OUT/full" > "$OUT/full.txt"

# 1. stop after the checkpoint at HALF (as if killed right after it): the second half of the split run's
# log and its last checkpoint go, then the run resumes from the middle and logs those steps again
./train_gpt_fp4 "${common[@]}" --out-dir "$OUT/split" --ckpt-every "$HALF" > "$OUT/split1.txt"
rm -f "$OUT/split/ckpt_$(printf %08d "$STEPS").bin"
./train_gpt_fp4 "${common[@]}" --out-dir "$OUT/split" --resume latest > "$OUT/split2.txt"

# 2. kill -9 while a checkpoint is being written (a NAME.tmp next to a finished checkpoint), then resume
killed=0
./train_gpt_fp4 "${common[@]}" --out-dir "$OUT/kill" --ckpt-every 2 > "$OUT/kill1.txt" 2>&1 &
pid=$!
for _ in $(seq 1 30000); do
    if ls "$OUT"/kill/ckpt_*.bin > /dev/null 2>&1 && ls "$OUT"/kill/ckpt_*.bin.tmp > /dev/null 2>&1; then
        kill -9 "$pid" 2> /dev/null && killed=1
        break
    fi
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.005
done
rc_kill=0
wait "$pid" 2> /dev/null || rc_kill=$?
# not caught mid-write: a SKIP only if that run itself trained to the end and left its checkpoints
bg_fault=""
if [ "$killed" = 0 ]; then
    if [ "$rc_kill" != 0 ]; then bg_fault="the run to be killed exited with status $rc_kill (see $OUT/kill1.txt)"
    elif ! ls "$OUT"/kill/ckpt_*.bin > /dev/null 2>&1; then bg_fault="the run to be killed wrote no checkpoint"
    fi
fi
if [ "$killed" = 1 ]; then
    echo "killed while writing $(ls "$OUT"/kill/*.tmp 2> /dev/null | tr '\n' ' '); resuming from" \
         "$(ls "$OUT"/kill/ckpt_*.bin | tail -n 1)"
    ./train_gpt_fp4 "${common[@]}" --out-dir "$OUT/kill" --ckpt-every 2 --resume latest > "$OUT/kill2.txt"
fi

python3 - "$OUT/full/log.jsonl" "$OUT/split/log.jsonl" "$OUT/kill/log.jsonl" "$killed" "$bg_fault" <<'PY'
import json, sys
full, split, kill, killed, bg_fault = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5]

def read(p):
    """Train losses by step, and the problems: a step logged twice, a missing resume line; and the events."""
    rows = [json.loads(l) for l in open(p)]
    steps = [d["step"] for d in rows if d.get("type") == "train"]
    dup = sorted({s for s in steps if steps.count(s) > 1})
    resumes = [d for d in rows if d.get("type") == "resume"]
    events = [(d["step"], d["event"], d.get("on")) for d in rows if d.get("type") == "event"]
    return {d["step"]: d["loss"] for d in rows if d.get("type") == "train"}, dup, resumes, events

a, _, _, events_a = read(full)
passed = failed = skipped = 0
for name, path, run in (("resume after a checkpoint", split, True), ("resume after kill -9 mid-write", kill, killed)):
    if not run and bg_fault:
        print(f"FAIL check_resume: {name}: {bg_fault}")
        failed += 1
        continue
    if not run:
        print(f"SKIP check_resume: {name}: the run ended before a checkpoint write could be caught")
        skipped += 1
        continue
    b, dup, resumes, events_b = read(path)
    problems = 0
    if events_a != events_b:
        print(f"FAIL check_resume: {name}: events {events_b}, the uninterrupted run's {events_a}")
        problems += 1
    if dup:
        print(f"FAIL check_resume: {name}: steps logged more than once: {dup}")
        problems += 1
    if not resumes:
        print(f"FAIL check_resume: {name}: no resume line in {path}")
        problems += 1
    if sorted(a) != sorted(b):
        print(f"FAIL check_resume: {name}: steps differ: {sorted(a)} vs {sorted(b)}")
        failed += problems + 1
        continue
    bad = [s for s in sorted(a) if a[s] != b[s]]
    for s in sorted(a):
        print(f"{name}: step {s:3d}  uninterrupted {a[s]:.6f}  resumed {b[s]:.6f}{'  DIFFERENT' if a[s] != b[s] else ''}")
    if bad:
        print(f"FAIL check_resume: {name}: {len(bad)} of {len(a)} steps differ after resuming")
    elif not problems:
        print(f"check_resume: OK: {name}: all {len(a)} losses identical, each step logged once "
              f"(resumed at step {resumes[-1]['step']}, {resumes[-1]['dropped_lines']} repeated lines dropped)")
    passed += len(a) - len(bad)
    failed += len(bad) + problems
# The uninterrupted run's phase_breakdown line: one, over the steps after the first, its buckets adding up to the
# mean of those steps' quant_ms and gemm_ms (the same events; both logged rounded), with GEMM time in it.
rows = [json.loads(l) for l in open(full)]
split_lines = [d for d in rows if d.get("type") == "phase_breakdown"]
train = [d for d in rows if d.get("type") == "train"][1:]
problems = []
if len(split_lines) != 1:
    problems.append(f"{len(split_lines)} phase_breakdown lines, not 1")
else:
    b = split_lines[0]
    if b["steps"] != len(train):
        problems.append(f"phase_breakdown over {b['steps']} steps, not {len(train)}")
    for key in ("quant_ms", "gemm_ms"):
        want = sum(d[key] for d in train) / max(len(train), 1)
        got = sum(b[key].values())
        if abs(got - want) > 0.01 + 1e-3 * want:
            problems.append(f"its {key} add up to {got:.4f} ms, the steps' mean is {want:.4f}")
    if not b["gemm_ms"]:
        problems.append("no GEMM time in it")
for p in problems:
    print(f"FAIL check_resume: phase breakdown: {p}")
if not problems:
    print(f"check_resume: OK: the phase breakdown adds up to the steps' quant_ms and gemm_ms")
passed += not problems
failed += len(problems)
print(f"TESTS check_resume: passed={passed} failed={failed} skipped={skipped}")
sys.exit(1 if failed else 0)
PY
