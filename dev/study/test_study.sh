#!/usr/bin/env bash
# test_study.sh: the multi-seed study's tooling on the CPU, with stand-ins for the GPU parts (seconds):
#   scripts/study_table.py  the t distribution against textbook values; the table of a 3x3 grid whose
#                           final losses are known (dev/study/fake_trainer.py): means, std, gaps, and which
#                           differences exceed the seed noise (Welch) or only the paired test
#   dev/study/study.sh      a grid cut by its deadline leaves a checkpoint and resumes from it (every step
#                           logged once), finished runs are skipped, a failing run is marked and skipped,
#                           ufp4's Hadamard signs follow the seed, earlier sessions' logs (PREV) count,
#                           a missing data part is refused, variants (VARIANTS: a preset with flags, in a
#                           folder of its own name) run with their flags, next to plain presets
#   dev/study/enwiki_part.sh  (a stand-in tokenizer) parts in any order, shard names, validation only
#                           from part a, idempotence, redo after a lost shard or other settings, foreign
#                           shards refused (FORCE=1 removes them)
#   dev/study/early_probe.sh  runs stopped at the validation of STOP_AT, with the full schedule; the table
#                           of scripts/study_table.py --at-step
# Needs python3 (standard library only); prints "TESTS study: passed=P failed=F skipped=S".
cd "$(dirname "$0")/../.."
# the scripts' knobs come from the environment: the checks below expect their defaults unless they set them
unset B CKPT_EVERY DATA DEADLINE DIAG_EVERY ENWIKI_OUT EXTRA_ARGS FINAL_LR_FRAC FORCE GPU_ARCHS JOBS KEEP_CKPT LR \
      MIN_LEFT MODEL OUT PARTS PREPRO PREV PROBE_DIR PYTHON RECIPES RETRY_FAILED SEEDS SHARD_SIZE STEPS STOP_AT \
      STOP_MARGIN STUDY_DIR T TOKENS TRAINER VAL VAL_BATCHES VAL_EVALS VAL_EVERY VAL_TOKENS VARIANTS VARY_SIGNS WARMUP \
      WARMUP_FRAC
passed=0; failed=0; skipped=0
ok()   { passed=$((passed + 1)); echo "ok   $*"; }
bad()  { failed=$((failed + 1)); echo "FAIL study: $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP study: no python3"; echo "TESTS study: passed=0 failed=0 skipped=1"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- the t distribution
out=$(python3 - <<'EOF'
import sys
sys.path.insert(0, "scripts")
import study_table as s
cases = [(2.776445, 4, 0.05), (12.7062, 1, 0.05), (2.228139, 10, 0.05), (1.0, 3, 0.390994), (0.0, 5, 1.0)]
bad = [(t, df, s.t_two_sided_p(t, df), p) for t, df, p in cases if abs(s.t_two_sided_p(t, df) - p) > 2e-5]
w = s.welch([1, 2, 3], [2, 3, 4, 5])   # scipy.stats.ttest_ind(equal_var=False): t -1.7321, p 0.14429
if abs(w["t"] + 1.7320508) > 1e-6 or abs(w["df"] - 4.9591837) > 1e-6 or abs(w["p"] - 0.14429) > 1e-4:
    bad.append(("welch", w))
pr = s.paired({1: 1.0, 2: 2.0, 3: 3.5}, {1: 0.5, 2: 1.8, 3: 3.0})   # ttest_rel: t 4.0, p 0.05719
if abs(pr["t"] - 4.0) > 1e-9 or abs(pr["p"] - 0.057191) > 1e-5:
    bad.append(("paired", pr))
print("bad" if bad else "good", bad)
EOF
)
check "study_table: Student t p values, Welch and paired tests against textbook values ($out)" grep -q '^good' <<<"$out"

# ---- a small grid with the fake trainer: shards of B=4 x T=8 rows, 2 x 5 batches -> 10 steps
data=$tmp/data
mkdir -p "$data"
python3 - "$data" <<'EOF'
import struct, sys
def shard(path, n):
    with open(path, "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, n) + b"\0" * (1024 - 12) + b"\0\0" * n)
d = sys.argv[1]
shard(f"{d}/enwiki_train_000000.bin", 4 * 8 * 5 + 1)
shard(f"{d}/enwiki_train_000100.bin", 4 * 8 * 5 + 7)
shard(f"{d}/enwiki_val_000000.bin", 4 * 8 * 2 + 1)
EOF
export B=4 T=8 PARTS="" PREV=$tmp/none MIN_LEFT=1 STOP_MARGIN=0 \
       CKPT_EVERY=2 DATA=$data FAKE_ARGS=$tmp/args.txt
unset OUT
# study.sh runs $TRAINER as one word: the stand-in itself (executable, with its interpreter line; nothing is
# executed from $tmp, which may be mounted noexec)
export TRAINER=$PWD/dev/study/fake_trainer.py
S=$tmp/study
grid() { STUDY_DIR=$S RECIPES="bf16 nvfp4 nvfp4-naive" SEEDS="1 2 3" bash dev/study/study.sh "$@"; }
out=$(FAKE_STOP_AT=5 DEADLINE=3 grid 2>&1); rc=$?
echo "$out" | sed 's/^/    /'
check "study.sh: a call cut by its deadline exits 10 and says INCOMPLETE" \
    test $rc = 10 -a -n "$(grep INCOMPLETE <<<"$out")"
check "study.sh: plan = one epoch (10 steps), warmup 1, val every ceil(10/10)=1 on the whole validation split (2 batches)" \
    grep -q "steps 10 tokens 320 lr 1.5e-3 warmup 1 .*val_every 1 val_batches 2 " <<<"$(tr '\n' ' ' < "$S/plan.txt")"
check "study.sh: the cut run left its checkpoint at step 4 (every 2) and logged step 5 after it" \
    test -f "$S/bf16/seed1/ckpt_00000004.bin" -a -n "$(grep '"step":5,' "$S/bf16/seed1/log.jsonl" | grep train)"
out=$(FAKE_RESUME_MODEL=checkpoint DEADLINE=60 grid 2>&1); rc=$?
echo "$out" | sed 's/^/    /'
check "study.sh: the next call resumes and completes the grid (exit 0), also when the resumed run's log names its model \"checkpoint\" (older trainers)" test $rc = 0
check "study.sh: the cut run resumed with --resume latest" grep -q -- "--seed 1 --recipe bf16 .*--resume latest" "$tmp/args.txt"
check "study.sh: one progress line per run finished in the call, with the final val loss (8 + the resumed one)" \
    test "$(grep -c 'done in .* final val loss' <<<"$out")" = 9
steps_ok=$(python3 - "$S" <<'EOF'
import glob, json, sys
bad = []
for p in sorted(glob.glob(sys.argv[1] + "/*/seed*/log.jsonl")):
    steps = [json.loads(l)["step"] for l in open(p) if '"type":"train"' in l]
    if steps != list(range(1, 11)):
        bad.append((p, steps))
print(len(glob.glob(sys.argv[1] + "/*/seed*/log.jsonl")), bad)
EOF
)
check "study.sh: 9 logs, each with train steps 1..10 exactly once ($steps_ok)" grep -q '^9 \[\]' <<<"$steps_ok"
check "study.sh: finished runs' checkpoints removed (KEEP_CKPT=0)" test -z "$(ls "$S"/*/seed*/ckpt_* 2>/dev/null)"
n=$(wc -l < "$tmp/args.txt")
out=$(DEADLINE=60 grid 2>&1); rc=$?
check "study.sh: a complete grid runs nothing again (exit 0, no trainer call)" test $rc = 0 -a "$(wc -l < "$tmp/args.txt")" = "$n"

# ---- the table of that grid
out=$(python3 scripts/study_table.py "$S" --out "$tmp/table" --no-plot 2>&1); rc=$?
echo "$out" | sed 's/^/    /'
check "study_table: exit 0, table.md and summary.json written" test $rc = 0 -a -s "$tmp/table/table.md" -a -s "$tmp/table/summary.json"
row() { grep "^| $1 | " "$tmp/table/table.md" | head -n 1; }
# bf16: 3.02 3.04 3.06 -> mean 3.04, std 0.02, spread 0.04; nvfp4: +0.1 -> gap 100*0.1/3.04 = +3.29%
check "study_table: bf16 row (3 seeds, mean 3.0400, std 0.0200, spread 0.0400)" \
    grep -q "^| bf16 | 3 | 3.0400 | 0.0200 | 0.0400 |  | 3.0200 | 3.0400 | 3.0600 |$" <<<"$(row bf16)"
check "study_table: nvfp4 row (mean 3.1400, gap +3.29%)" grep -q "^| nvfp4 | 3 | 3.1400 | 0.0200 | 0.0400 | +3.29% |" <<<"$(row nvfp4)"
check "study_table: nvfp4 vs bf16 exceeds the seed noise (Welch)" \
    grep -q "^| nvfp4 | bf16 | +0.1000 | +3.29% | 0.0163 | yes | 6.12 | 4.0 | 0.0036 | 3 | +0.1000 | 0.0000 | <0.001 | \*\*higher: exceeds the seed noise\*\* |$" "$tmp/table/table.md"
check "study_table: nvfp4-naive vs bf16 is within the noise for Welch, higher in the paired test only" \
    grep -q "^| nvfp4-naive | bf16 | +0.0110 | +0.36% | .* | no | .* | 3 | +0.0110 | 0.0010 | 0.0027 | higher in the paired test only |$" "$tmp/table/table.md"
check "study_table: nvfp4-naive vs nvfp4 exceeds the noise (lower)" \
    grep -q "^| nvfp4-naive | nvfp4 | -0.0890 | .* | \*\*lower: exceeds the seed noise\*\* |$" "$tmp/table/table.md"
if python3 -c "import numpy, matplotlib" >/dev/null 2>&1; then
    python3 scripts/study_table.py "$S" --out "$tmp/table2" > "$tmp/plot.txt" 2>&1
    check "study_table: loss.png and gaps.md (numpy and matplotlib here)" test -s "$tmp/table2/loss.png" -a -s "$tmp/table2/gaps.md"
else
    skipped=$((skipped + 1)); echo "SKIP study_table plot: no numpy or matplotlib here"
fi

# ---- earlier sessions' logs, a failing recipe, ufp4's signs, a missing part
out=$(STUDY_DIR=$tmp/study2 PREV=$S RECIPES="bf16 nvfp4" SEEDS="1 2" DEADLINE=60 bash dev/study/study.sh 2>&1); rc=$?
check "study.sh: runs finished in an earlier session (PREV) are taken, not rerun" \
    test $rc = 0 -a "$(wc -l < "$tmp/args.txt")" = "$n" -a "$(grep -c 'finished in an earlier session' <<<"$out")" = 4
# OUT (the device tool's): the logs come back as one archive (the tool returns no file below OUT/a/b/), which
# unpacks into a PREV folder that a later grid takes
mkdir -p "$tmp/out"
out=$(OUT=$tmp/out STUDY_DIR=$tmp/study2 PREV=$S RECIPES="bf16 nvfp4" SEEDS="1 2" DEADLINE=60 bash dev/study/study.sh 2>&1)
check "study.sh: with OUT set, OUT holds study_logs.tgz and the table, and nothing below OUT/a/b/" \
    test -s "$tmp/out/study_logs.tgz" -a -s "$tmp/out/study_table.txt" -a -z "$(find "$tmp/out" -mindepth 3 | head -n 1)"
check "study.sh: study_logs.tgz holds the 4 runs' logs, plan.txt and plans.txt" \
    test "$(tar tzf "$tmp/out/study_logs.tgz" | LC_ALL=C sort | tr '\n' ' ')" = \
    "bf16/seed1/log.jsonl bf16/seed2/log.jsonl nvfp4/seed1/log.jsonl nvfp4/seed2/log.jsonl plan.txt plans.txt "
mkdir -p "$tmp/prev5" && tar xzf "$tmp/out/study_logs.tgz" -C "$tmp/prev5"
out=$(STUDY_DIR=$tmp/study5 PREV=$tmp/prev5 RECIPES="bf16 nvfp4" SEEDS="1 2" DEADLINE=60 bash dev/study/study.sh 2>&1); rc=$?
check "study.sh: the unpacked archive is a PREV a later grid takes (nothing rerun)" \
    test $rc = 0 -a "$(wc -l < "$tmp/args.txt")" = "$n" -a "$(grep -c 'finished in an earlier session' <<<"$out")" = 4
n6=$(wc -l < "$tmp/args.txt")
out=$(STUDY_DIR=$tmp/study6 PREV=$S WARMUP_FRAC=0.3 RECIPES="bf16" SEEDS="1" DEADLINE=60 bash dev/study/study.sh 2>&1); rc=$?
check "study.sh: earlier runs under another warmup are not taken from PREV; the run trains (warmup 3)" \
    test $rc = 0 -a -z "$(grep 'finished in an earlier session' <<<"$out")" -a "$(wc -l < "$tmp/args.txt")" = $((n6 + 1)) \
    -a -n "$(tail -n 1 "$tmp/args.txt" | grep -- '--warmup 3 ')"
n7=$(wc -l < "$tmp/args.txt")
out=$(STUDY_DIR=$tmp/study7 PREV=$S MODEL=d12 RECIPES="bf16" SEEDS="1" DEADLINE=60 bash dev/study/study.sh 2>&1); rc=$?
check "study.sh: earlier runs of another model are not taken from PREV; the run trains (--model d12)" \
    test $rc = 0 -a -z "$(grep 'finished in an earlier session' <<<"$out")" -a "$(wc -l < "$tmp/args.txt")" = $((n7 + 1)) \
    -a -n "$(tail -n 1 "$tmp/args.txt" | grep -- '--model d12 ')"
out=$(STUDY_DIR=$tmp/study7 RECIPES="bf16 nvfp4" SEEDS="1" MODEL=d12 DEADLINE=60 bash dev/study/study.sh 2>&1)
check "study.sh: plans.txt keeps each different plan once, in order (two calls, two plans)" \
    test "$(grep -c '^== plan ' "$tmp/study7/plans.txt")" = 2 -a "$(grep -c '^recipes bf16$' "$tmp/study7/plans.txt")" = 1
out=$(STUDY_DIR=$tmp/study7 RECIPES="bf16 nvfp4" SEEDS="1" MODEL=d12 DEADLINE=60 bash dev/study/study.sh 2>&1)
check "study.sh: the same plan again adds nothing to plans.txt" test "$(grep -c '^== plan ' "$tmp/study7/plans.txt")" = 2
out=$(STUDY_DIR=$S WARMUP_FRAC=0.3 RECIPES="bf16" SEEDS="1" DEADLINE=60 bash dev/study/study.sh 2>&1)
check "study.sh: a run finished under another warmup is named and left out" \
    grep -q "bf16 seed 1: finished under other settings than the plan's (warmup 1): left out" <<<"$out"
out=$(STUDY_DIR=$tmp/study3 FAKE_FAIL=nvfp4 RECIPES="ufp4 nvfp4" SEEDS="7" DEADLINE=60 bash dev/study/study.sh 2>&1); rc=$?
echo "$out" | sed 's/^/    /'
check "study.sh: a failing run is marked FAILED and the grid goes on" \
    test -f "$tmp/study3/nvfp4/seed7/FAILED" -a -n "$(grep 'ufp4 seed 7: done' <<<"$out")"
check "study.sh: ufp4's Hadamard signs drawn from the seed (VARY_SIGNS=1)" \
    grep -q -- "--seed 7 --recipe ufp4 .*--fprop-x int4,h16,seed=7 .*--wgrad-x int4,h16,seed=7" "$tmp/args.txt"
out=$(STUDY_DIR=$tmp/study4 PARTS="a" DEADLINE=60 bash dev/study/study.sh 2>&1); rc=$?
check "study.sh: a missing data part is refused (exit 1, names it)" test $rc = 1 -a -n "$(grep "parts/a.done is missing" <<<"$out")"
# ---- variants (VARIANTS): a preset with flags of its own, in a folder of its own name, next to plain presets
V=$tmp/study8
lora=$'nvfp4+lora16 nvfp4 --lora-svd-rank 16\nufp4+opt4   ufp4  --optimizer-state nvfp4'
n8=$(wc -l < "$tmp/args.txt")
out=$(STUDY_DIR=$V VARIANTS=$lora RECIPES="nvfp4 nvfp4+lora16 ufp4+opt4" SEEDS="3" DEADLINE=60 bash dev/study/study.sh 2>&1); rc=$?
echo "$out" | sed 's/^/    /'
check "study.sh: a grid of a preset and two variants completes (exit 0, 3 runs, 3 logs in their own folders)" \
    test $rc = 0 -a "$(wc -l < "$tmp/args.txt")" = $((n8 + 3)) -a -s "$V/nvfp4+lora16/seed3/log.jsonl" \
    -a -s "$V/ufp4+opt4/seed3/log.jsonl" -a -s "$V/nvfp4/seed3/log.jsonl"
check "study.sh: a variant runs its preset with its flags (--recipe nvfp4 ... --lora-svd-rank 16)" \
    grep -q -- "--seed 3 --recipe nvfp4 .* -o $V/nvfp4+lora16/seed3 --lora-svd-rank 16$" "$tmp/args.txt"
check "study.sh: a variant of ufp4 keeps the seed's Hadamard signs, then its flags" \
    grep -q -- "--seed 3 --recipe ufp4 .* -o $V/ufp4+opt4/seed3 .*--wgrad-x int4,h16,seed=3 --optimizer-state nvfp4$" "$tmp/args.txt"
check "study.sh: the plain preset in the same grid runs without the variants' flags" \
    grep -q -- "--seed 3 --recipe nvfp4 .* -o $V/nvfp4/seed3$" "$tmp/args.txt"
check "study.sh: plan.txt names each variant's recipe and flags" \
    grep -q "^variant nvfp4+lora16: --recipe nvfp4 --lora-svd-rank 16$" "$V/plan.txt"
check "study.sh: the plan of a grid without variants has no variant line (its plan id is as before)" \
    test -z "$(grep '^variant' "$tmp/study7/plan.txt")"
out=$(STUDY_DIR=$tmp/study9 PREV=$V VARIANTS=$lora RECIPES="nvfp4 nvfp4+lora16" SEEDS="3" DEADLINE=60 bash dev/study/study.sh 2>&1); rc=$?
check "study.sh: a variant's finished run in PREV is taken by its name, not rerun" \
    test $rc = 0 -a "$(wc -l < "$tmp/args.txt")" = $((n8 + 3)) -a "$(grep -c 'finished in an earlier session' <<<"$out")" = 2
out=$(STUDY_DIR=$tmp/study10 VARIANTS="a/b nvfp4" RECIPES="a/b" SEEDS="1" DEADLINE=60 bash dev/study/study.sh 2>&1); rc=$?
check "study.sh: a variant name that is not a folder name is refused (exit 1)" \
    test $rc = 1 -a -n "$(grep "VARIANTS: 'a/b' is not a folder name" <<<"$out")"
out=$(STUDY_DIR=$tmp/study10 VARIANTS="lonely" RECIPES="lonely" SEEDS="1" DEADLINE=60 bash dev/study/study.sh 2>&1); rc=$?
check "study.sh: a variant without a recipe is refused (exit 1)" test $rc = 1 -a -n "$(grep "'lonely' names no recipe" <<<"$out")"
out=$(STUDY_DIR=$tmp/study10 VARIANTS=$'x nvfp4\nx bf16' RECIPES="x" SEEDS="1" DEADLINE=60 bash dev/study/study.sh 2>&1); rc=$?
check "study.sh: a variant defined twice is refused (exit 1)" test $rc = 1 -a -n "$(grep "'x' is defined twice" <<<"$out")"
unset TRAINER B T PARTS PREV MIN_LEFT STOP_MARGIN CKPT_EVERY DATA FAKE_ARGS

# ---- early_probe.sh: runs stopped at the validation of step STOP_AT; the table at that step
P=$tmp/probe
out=$(TRAINER=$PWD/dev/study/fake_trainer.py PROBE_DIR=$P DATA=$data STEPS=20 STOP_AT=8 VAL_EVERY=4 VAL_BATCHES=2 RECIPES="bf16 nvfp4" SEEDS="1 2" JOBS=2 \
      FAKE_STOP_AT=10 DEADLINE=60 FAKE_ARGS=$tmp/probe_args.txt OUT=$tmp/probe_out bash dev/study/early_probe.sh 2>&1); rc=$?
echo "$out" | sed 's/^/    /'
check "early_probe: 4 runs, each with its validation at steps 0, 4 and 8, and stopped there (exit 0)" \
    test $rc = 0 -a "$(grep -c '^probe: .* val 0:[0-9.]* 4:[0-9.]* 8:[0-9.]* $' <<<"$out")" = 4
check "early_probe: the runs were stopped (no done event; the fake trainer would hang after step 10)" \
    test "$(ls "$P"/*/seed*/log.jsonl | wc -l)" = 4 -a -z "$(grep -l '"event":"done"' "$P"/*/seed*/log.jsonl)"
check "early_probe: the schedule is the full run's (--steps 20) with the probe's warmup (131)" \
    grep -q -- "--steps 20 --lr 1.5e-3 --warmup 131 " "$tmp/probe_args.txt"
check "early_probe: OUT holds probe.txt and probe_logs.tgz (4 logs)" \
    test -s "$tmp/probe_out/probe.txt" -a "$(tar tzf "$tmp/probe_out/probe_logs.tgz" | grep -c log.jsonl)" = 4
out=$(python3 scripts/study_table.py "$P" --at-step 8 --no-plot 2>&1); rc=$?
# fake val at step 8 of 20: final + 2 (1 - 8/19); nvfp4 = bf16 + 0.1 on every seed
check "study_table --at-step 8: 2 seeds per recipe, nvfp4 vs bf16 +0.1000" \
    test $rc = 0 -a -n "$(grep '^| bf16 | 2 | ' <<<"$out")" -a -n "$(grep '^| nvfp4 | bf16 | +0.1000 | ' <<<"$out")"
check "study_table --at-step 8: says which step it compares" grep -q "Validation loss at step 8 over seeds" <<<"$out"

# ---- enwiki_part.sh with a stand-in tokenizer (one train shard per input, named by it; a val shard)
cat > "$tmp/prepro.py" <<'EOF'
import argparse, os, struct
p = argparse.ArgumentParser()
p.add_argument("--input", nargs="+"); p.add_argument("--name"); p.add_argument("--out_dir")
p.add_argument("--val_tokens", type=int); p.add_argument("--shard_size", type=int); p.add_argument("--tokenizer_out")
a = p.parse_args()
assert a.tokenizer_out == ""
def shard(path, n):
    with open(path, "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, n) + b"\0" * (1024 - 12) + b"\0\0" * n)
for i, f in enumerate(a.input):
    shard(os.path.join(a.out_dir, f"{a.name}_train_{i:06d}.bin"), 100 + int(os.path.basename(f)[7:9]))
if a.val_tokens:
    shard(os.path.join(a.out_dir, f"{a.name}_val_000000.bin"), a.val_tokens)
print(f"{a.name}: {a.val_tokens} validation tokens, {len(a.input)} train shards")
EOF
mkdir -p "$tmp/xa" "$tmp/xb"
echo 0 > "$tmp/xa/enwiki_00.jsonl.xz"; echo 1 > "$tmp/xa/enwiki_01.jsonl.xz"; echo 2 > "$tmp/xb/enwiki_02.jsonl.xz"
E=$tmp/enwiki
part() { ENWIKI_OUT=$E PREPRO="python3 $tmp/prepro.py" VAL_TOKENS=${VT:-50} bash dev/study/enwiki_part.sh "$@" 2>&1; }
ntok() { python3 -c "import struct,sys;print(struct.unpack('<3i',open(sys.argv[1],'rb').read(12))[2])" "$1"; }
out=$(part b "$tmp/xb"; part a "$tmp/xa")
check "enwiki_part: parts b then a: train shards 000000, 000001 (a), 000100 (b), the validation split from a" \
    test "$(cd "$E" && ls enwiki_*.bin | tr '\n' ' ')" = "enwiki_train_000000.bin enwiki_train_000001.bin enwiki_train_000100.bin enwiki_val_000000.bin " \
    -a "$(ntok "$E/enwiki_train_000100.bin")" = 102 -a "$(ntok "$E/enwiki_val_000000.bin")" = 50
out=$(part a "$tmp/xa"; part b "$tmp/xb")
check "enwiki_part: a part already done is left alone" test "$(grep -c 'already done' <<<"$out")" = 2
rm "$E/enwiki_train_000001.bin"
out=$(part a "$tmp/xa")
check "enwiki_part: a lost shard makes the part redo itself" \
    test -f "$E/enwiki_train_000001.bin" -a -n "$(grep 'redoing' <<<"$out")"
out=$(VT=70 part a "$tmp/xa")
check "enwiki_part: other settings (VAL_TOKENS) redo the part" test "$(ntok "$E/enwiki_val_000000.bin")" = 70
touch "$E/enwiki_train_000050.bin.x"; cp "$E/enwiki_train_000100.bin" "$E/enwiki_train_000300.bin"
out=$(part b "$tmp/xb"); rc=$?
check "enwiki_part: a shard no part wrote is refused" test $rc != 0 -a -n "$(grep 'no part wrote' <<<"$out")"
out=$(FORCE=1 part b "$tmp/xb"); rc=$?
check "enwiki_part: FORCE=1 removes it" test $rc = 0 -a ! -e "$E/enwiki_train_000300.bin"
out=$(part B "$tmp/xb"); rc=$?
check "enwiki_part: a bad part name is refused" test $rc = 2

echo "TESTS study: passed=$passed failed=$failed skipped=$skipped"
[ "$failed" = 0 ]
