#!/usr/bin/env bash
# test_python_errors.sh: the Python tools' and their shell wrappers' expected failures end in one clear line
# (seconds; CPU only). For each failure case (a missing file, a directory given for a file, a wrong path, a
# missing package, simulated with a PYTHONPATH folder whose module of that name raises ImportError) it checks:
# exit status 1, the last line on stderr starts with "error: " (and names the problem), no Python traceback.
#   dev/data/prepro.py         missing packages and inputs, a directory as input, a split that would be empty,
#                              nothing left behind by a failed run (an earlier run's shards untouched), and a
#                              tiny corpus that gets both splits
#   dev/data/eval_prepro.py    missing packages, raw files and token files
#   scripts/eval_hf.py         missing packages (torch, transformers, numpy), model directory and token files
#   scripts/quant_table.py     a missing log, a directory, a file that is not a log, a log without diagnostics
#   dev/data/tinyshakespeare.sh  no argument, a missing file, a directory
#   scripts/compare_recipes.sh   no trainer, no data, a directory as data, no matplotlib, a data error in the
#                              first run (stops there; a stand-in trainer)
# Needs python3; what needs numpy, tiktoken, torch or transformers skips (with a message) where they are missing.
# Prints "TESTS test_python_errors: passed=P failed=F skipped=S".
cd "$(dirname "$0")/../.."
unset PYTHONPATH TRAINER LAUNCH PLOT
passed=0; failed=0; skipped=0
ok()   { passed=$((passed + 1)); echo "ok   $*"; }
bad()  { failed=$((failed + 1)); echo "FAIL test_python_errors: $*"; }
skip() { skipped=$((skipped + 1)); echo "SKIP $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP test_python_errors: no python3"; echo "TESTS test_python_errors: passed=0 failed=0 skipped=1"; exit 0
fi
has() { python3 -c "import $1" >/dev/null 2>&1; }
has_numpy=0; has numpy && has_numpy=1
has_tiktoken=0; [ $has_numpy = 1 ] && has tiktoken && has_tiktoken=1
has_hf=0; [ $has_numpy = 1 ] && has torch && has transformers && has_hf=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# PYTHONPATH folders in which one package fails to import
for m in numpy tiktoken torch transformers matplotlib; do
    mkdir -p "$tmp/no_$m/$m"
    echo "raise ImportError('$m is hidden by dev/test/test_python_errors.sh')" > "$tmp/no_$m/$m/__init__.py"
done

# expect_error WHAT PATTERN CMD...: exit 1, the last stderr line "error: ..." matching PATTERN (grep -E), no traceback
expect_error() {
    local what=$1 pat=$2; shift 2
    "$@" > "$tmp/out.txt" 2> "$tmp/err.txt" < /dev/null
    local rc=$? last
    last=$(grep -v '^[[:space:]]*$' "$tmp/err.txt" | tail -n 1)
    if [ $rc = 1 ] && [[ $last == "error: "* ]] && grep -qE -- "$pat" <<<"$last" &&
       ! grep -q Traceback "$tmp/err.txt" "$tmp/out.txt"; then
        ok "$what"
    else
        bad "$what: exit $rc, the last stderr line: '$last' (want exit 1 and 'error: ...' matching '$pat', no traceback)"
        sed 's/^/    /' "$tmp/err.txt" | tail -n 8
    fi
}
ntok() { python3 -c "import struct,sys;print(struct.unpack('<3i',open(sys.argv[1],'rb').read(12))[2])" "$1"; }

# ---- dev/data/prepro.py
P=dev/data/prepro.py
printf 'First Citizen:\nBefore we proceed any further, hear me speak.\n' > "$tmp/a.txt"
printf 'All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n' > "$tmp/b.txt"
expect_error "prepro: numpy missing" "needs numpy.*pip install" \
    env PYTHONPATH="$tmp/no_numpy" python3 $P --input "$tmp/a.txt" --name t --out_dir "$tmp/o" --tokenizer_out ''
if [ $has_numpy = 1 ]; then
    expect_error "prepro: tiktoken missing" "needs tiktoken.*pip install -r requirements.txt" \
        env PYTHONPATH="$tmp/no_tiktoken" python3 $P --input "$tmp/a.txt" --name t --out_dir "$tmp/o" --tokenizer_out ''
    expect_error "prepro: an input that matches no file" "no input file matches" \
        python3 $P --input "$tmp/nothing/*.txt" --name t --out_dir "$tmp/o" --tokenizer_out ''
    expect_error "prepro: a directory as input" "is a directory.*\*\.txt" \
        python3 $P --input "$tmp" --name t --out_dir "$tmp/o" --tokenizer_out ''
    expect_error "prepro: --out_dir is a file" "out_dir .* not a directory" \
        python3 $P --input "$tmp/a.txt" --name t --out_dir "$tmp/a.txt" --tokenizer_out ''
    expect_error "prepro: --tokenizer_out is a directory" "tokenizer_out .* is a directory" \
        python3 $P --input "$tmp/a.txt" --name t --out_dir "$tmp/o" --tokenizer_out "$tmp"
    expect_error "prepro: --bpe_dir without the BPE files" "bpe_dir|BPE file" \
        python3 $P --input "$tmp/a.txt" --name t --out_dir "$tmp/o" --tokenizer_out '' --bpe_dir "$tmp/nobpe"
    check "prepro: the failed runs left no output folder behind" test ! -e "$tmp/o"
else
    skip "prepro: the cases that need numpy (no numpy here)"
fi
if [ $has_tiktoken = 1 ]; then
    printf '\x89PNG\x00\xff\xfe' > "$tmp/binary.txt"
    expect_error "prepro: a file that is not text" "not UTF-8 text" \
        python3 $P --input "$tmp/binary.txt" --name t --out_dir "$tmp/o" --tokenizer_out ''
    expect_error "prepro: --val_tokens larger than the corpus names the flags to use" \
        "training split is empty.*--val_tokens.*--val_fraction" \
        python3 $P --input "$tmp/a.txt" "$tmp/b.txt" --name t --out_dir "$tmp/o" --tokenizer_out '' --val_tokens 1000000
    check "prepro: ... and left no folder and no val-only shard behind" test ! -e "$tmp/o"
    # an earlier run's shards survive a failed run untouched, and nothing is added
    mkdir -p "$tmp/keep"
    printf 'earlier' > "$tmp/keep/t_train.bin"; printf 'earlier' > "$tmp/keep/t_val.bin"
    expect_error "prepro: --plain_names with a split over one shard" "plain_names" \
        python3 $P --input "$tmp/a.txt" "$tmp/b.txt" --name t --out_dir "$tmp/keep" --tokenizer_out '' \
        --val_tokens 2 --shard_size 8 --plain_names
    check "prepro: ... an earlier run's shards are untouched, nothing added (no temporary folder)" \
        test "$(cat "$tmp/keep/t_train.bin")" = earlier -a "$(cat "$tmp/keep/t_val.bin")" = earlier \
        -a "$(ls -A "$tmp/keep" | wc -l)" = 2
    # a tiny corpus (about 40 tokens) with the default split: both splits, validation the first 10%
    out=$(python3 $P --input "$tmp/a.txt" "$tmp/b.txt" --name tiny --out_dir "$tmp/tiny" --tokenizer_out "$tmp/tok.bin" 2>&1)
    rc=$?
    echo "$out" | sed 's/^/    /'
    nv=$(ntok "$tmp/tiny/tiny_val_000000.bin" 2>/dev/null); nt=$(ntok "$tmp/tiny/tiny_train_000000.bin" 2>/dev/null)
    check "prepro: a tiny corpus gets both splits by default (val $nv, train $nt tokens; exit $rc)" \
        test "$rc" = 0 -a "${nv:-0}" -ge 1 -a "${nt:-0}" -gt "${nv:-0}" -a -s "$tmp/tok.bin"
    check "prepro: ... the note names the flags that choose otherwise" grep -q "note: .*--val_tokens N or --val_fraction F" <<<"$out"
    check "prepro: ... and the shards are all it wrote there" test "$(ls -A "$tmp/tiny" | tr '\n' ' ')" = "tiny_train_000000.bin tiny_val_000000.bin "
else
    skip "prepro: tokenizing cases (no numpy or tiktoken here: python3 -m pip install -r requirements.txt)"
fi

# ---- dev/data/eval_prepro.py
E=dev/data/eval_prepro.py
expect_error "eval_prepro: numpy missing" "needs numpy" env PYTHONPATH="$tmp/no_numpy" python3 $E --verify
if [ $has_numpy = 1 ]; then
    expect_error "eval_prepro: --eval_dir that does not exist" "eval_dir .* not a directory.*data/README.md" \
        python3 $E --eval_dir "$tmp/noeval" --out_dir "$tmp/eo"
    mkdir -p "$tmp/emptyeval"
    expect_error "eval_prepro: --eval_dir without the raw files" "hellaswag_val_full.txt.xz not found" \
        python3 $E --eval_dir "$tmp/emptyeval" --out_dir "$tmp/eo"
    check "eval_prepro: ... and wrote nothing" test ! -e "$tmp/eo"
    expect_error "eval_prepro: --verify without the token files" "hellaswag_val.bin not found; build it" \
        python3 $E --verify --out_dir "$tmp/emptyeval"
    mkdir -p "$tmp/direval/hellaswag_val.bin"
    expect_error "eval_prepro: --verify with a directory for a token file" "is a directory" \
        python3 $E --verify --out_dir "$tmp/direval"
    # tiktoken is needed only to tokenize: a hidden tiktoken with the raw files present
    printf 'A: b\n0\nc\nd\ne\nf\n' | xz > "$tmp/emptyeval/hellaswag_val_full.txt.xz" 2>/dev/null &&
    echo '{"text": "a b"}' > "$tmp/emptyeval/lambada_test.jsonl" &&
    expect_error "eval_prepro: tiktoken missing" "needs tiktoken" \
        env PYTHONPATH="$tmp/no_tiktoken" python3 $E --eval_dir "$tmp/emptyeval" --out_dir "$tmp/eo"
else
    skip "eval_prepro: the cases that need numpy (no numpy here)"
fi

# ---- scripts/eval_hf.py
H=scripts/eval_hf.py
expect_error "eval_hf: numpy missing" "needs numpy" env PYTHONPATH="$tmp/no_numpy" python3 $H "$tmp"
if [ $has_numpy = 1 ]; then
    expect_error "eval_hf: torch missing" "eval_hf.py needs torch and transformers \(torch missing here\): python3 -m pip install torch transformers" \
        env PYTHONPATH="$tmp/no_torch" python3 $H "$tmp"
    expect_error "eval_hf: transformers missing" "needs torch and transformers \(transformers missing here\)" \
        env PYTHONPATH="$tmp/no_transformers" python3 $H "$tmp"
else
    skip "eval_hf: the package cases (no numpy here)"
fi
if [ $has_hf = 1 ]; then
    expect_error "eval_hf: a model directory that does not exist" "model directory .* not found.*export_hf" \
        python3 $H "$tmp/nomodel"
    expect_error "eval_hf: a file for the model directory" "is not a directory" python3 $H "$tmp/a.txt"
    expect_error "eval_hf: a directory that is no model (no config.json)" "no config.json" python3 $H "$tmp/emptyeval"
    mkdir -p "$tmp/fakemodel" && echo '{}' > "$tmp/fakemodel/config.json"
    expect_error "eval_hf: --data_dir without the token files" "hellaswag_val.bin not found; build it" \
        python3 $H "$tmp/fakemodel" --data_dir "$tmp/emptyeval"
    expect_error "eval_hf: an unknown task" "unknown task" python3 $H "$tmp/fakemodel" --tasks hellaswag,nope
else
    skip "eval_hf: the path cases (no torch and transformers here; they are optional)"
fi

# ---- scripts/quant_table.py (standard library only)
Q=scripts/quant_table.py
expect_error "quant_table: a log that does not exist" "not found" python3 $Q "$tmp/nolog.jsonl"
expect_error "quant_table: a directory for the log" "is a directory.*log.jsonl" python3 $Q "$tmp"
expect_error "quant_table: a file that is not a log" "not a JSON line" python3 $Q README.md
echo '{"type":"train","step":1,"loss":5.0}' > "$tmp/bf16.jsonl"
expect_error "quant_table: a log without diagnostics" "no quant lines" python3 $Q "$tmp/bf16.jsonl"
cat > "$tmp/q.jsonl" <<'EOF'
{"type":"quant","step":5,"layer":0,"linear":"qkv","fprop.x":{"relerr":0.1,"flushed":0.01,"clipped":0.02}}
{"type":"train","step":5,
EOF
out=$(python3 $Q "$tmp/q.jsonl" 2>&1); rc=$?
check "quant_table: a log whose last line is cut short still gives its table (exit $rc)" \
    test $rc = 0 -a -n "$(grep -E '^ +0 qkv +0\.100/1\.0/2\.0' <<<"$out")"
expect_error "quant_table: a step without diagnostics" "no diagnostics at step 7" python3 $Q "$tmp/q.jsonl" --step 7

# ---- dev/data/tinyshakespeare.sh
expect_error "tinyshakespeare.sh: no argument says what it needs (char-rnn's input.txt)" "char-rnn" \
    bash dev/data/tinyshakespeare.sh
check "tinyshakespeare.sh: ... with a usage line" grep -q "^usage: bash dev/data/tinyshakespeare.sh path/to/input.txt" "$tmp/err.txt"
expect_error "tinyshakespeare.sh: a file that does not exist" "not found" bash dev/data/tinyshakespeare.sh "$tmp/none.txt"
expect_error "tinyshakespeare.sh: a directory" "not a file" bash dev/data/tinyshakespeare.sh "$tmp"

# ---- scripts/compare_recipes.sh, with a stand-in trainer run as "bash STANDIN" (nothing executes from $tmp)
cat > "$tmp/trainer.sh" <<'EOF'
echo "$*" >> "$CALLS"
echo "error: data shard 'data/x_train.bin' is truncated: 12 bytes, shorter than the 1024-byte header" >&2
exit 1
EOF
C=scripts/compare_recipes.sh
export CALLS=$tmp/calls
expect_error "compare_recipes: no arguments" "needs OUT_DIR" bash $C
expect_error "compare_recipes: no trainer" "not found: build it with make" env TRAINER="$tmp/none" bash $C "$tmp/cmp" "bf16 nvfp4"
expect_error "compare_recipes: no data file matches -i" "no data file matches -i" \
    env LAUNCH=bash TRAINER="$tmp/trainer.sh" bash $C "$tmp/cmp" "bf16 nvfp4" -i "$tmp/nodata/*_train_*.bin"
expect_error "compare_recipes: a directory as -j" "is a directory.*_val\*\.bin" \
    env LAUNCH=bash TRAINER="$tmp/trainer.sh" bash $C "$tmp/cmp" "bf16 nvfp4" --val-data="$tmp"
expect_error "compare_recipes: no matplotlib for the plot (checked before training)" "matplotlib.*PLOT=0" \
    env PYTHONPATH="$tmp/no_matplotlib" LAUNCH=bash TRAINER="$tmp/trainer.sh" bash $C "$tmp/cmp" "bf16 nvfp4"
check "compare_recipes: ... none of those ran the trainer" test ! -e "$CALLS"
expect_error "compare_recipes: a data error in the first run stops the comparison" "recipe bf16 failed, and every later run.*data shard" \
    env PLOT=0 LAUNCH=bash TRAINER="$tmp/trainer.sh" bash $C "$tmp/cmp" "bf16 nvfp4 nvfp4-naive"
check "compare_recipes: ... after one run (of 3)" test "$(wc -l < "$CALLS" 2>/dev/null)" = 1

# the success path: a stand-in that writes a log as the trainer does (a config line naming its recipe, train and val
# lines with a higher loss under nvfp4), then the plot and the gap table, labelled by recipe
cat > "$tmp/good_trainer.sh" <<'EOF'
recipe=bf16; out=
while [ $# -gt 0 ]; do case $1 in --recipe) recipe=$2; shift ;; --out-dir) out=$2; shift ;; esac; shift; done
mkdir -p "$out"
python3 - "$out/log.jsonl" "$recipe" <<'PY'
import json, sys
path, recipe = sys.argv[1], sys.argv[2]
up = 0.05 if recipe != "bf16" else 0.0
with open(path, "w") as f:
    f.write(json.dumps({"type": "config", "model": "d6", "seed": 1337, "recipe": recipe + ": fprop.x=...", "steps": 20,
                        "lr": 0.0006}) + "\n")
    for s in range(1, 21):
        f.write(json.dumps({"type": "train", "step": s, "tokens": 4096 * s, "loss": 6.0 - 0.1 * s + up}) + "\n")
        if s % 5 == 0:
            f.write(json.dumps({"type": "val", "step": s, "tokens": 4096 * s, "val_loss": 6.1 - 0.1 * s + up}) + "\n")
PY
echo "step    20/20 | loss 4.0000"
EOF
if python3 -c "import numpy, matplotlib" >/dev/null 2>&1; then
    rm -rf "$tmp/cmp_ok"
    MPLBACKEND=Agg LAUNCH=bash TRAINER="$tmp/good_trainer.sh" bash $C "$tmp/cmp_ok" "bf16 nvfp4" --model d6 \
        > "$tmp/ok.txt" 2>&1
    rc_ok=$?
    check "compare_recipes: two recipes train and plot (exit 0)" test "$rc_ok" = 0
    check "compare_recipes: ... loss.png written" test -s "$tmp/cmp_ok/loss.png"
    check "compare_recipes: ... gaps.md names nvfp4 with a nonzero gap" grep -q "nvfp4.*+[0-9]" "$tmp/cmp_ok/gaps.md"
else
    echo "SKIP compare_recipes success path: needs numpy and matplotlib"; skipped=$((skipped + 1))
fi

echo "TESTS test_python_errors: passed=$passed failed=$failed skipped=$skipped"
[ "$failed" = 0 ]
