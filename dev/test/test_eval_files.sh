#!/usr/bin/env bash
# test_eval_files.sh: the committed held-out token files (data/eval) read back by the Python reader
# (dev/data/eval_prepro.py --verify: header, checksum, item walk), and, where tiktoken is installed and
# EVAL_RAW_DIR names a folder with the raw files (hellaswag_val_full.txt.xz, lambada_test.jsonl; data/README.md
# says where they come from), rebuilt from the raw files byte for byte, so the committed files are
# what the one command makes. Needs python3 with numpy (any python3 on PATH that has it, else
# /usr/bin/python3, or PYTHON=...); skips what it cannot run, with a message.
cd "$(dirname "$0")/../.."
passed=0; failed=0; skipped=0
py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c "import numpy" >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
    echo "SKIP eval_files: no python3 with numpy here (apt-get install python3-numpy, or pip install numpy)"
    echo "TESTS eval_files: passed=0 failed=0 skipped=1"
    exit 0
fi
out=$("$py" dev/data/eval_prepro.py --verify 2>&1); rc=$?
echo "$out"
if [ $rc -eq 0 ] && grep -q "hellaswag: 10042 items" <<<"$out" && grep -q "lambada: 5153 items" <<<"$out"; then
    passed=$((passed + 1)); echo "ok   the committed files read back (10042 HellaSwag and 5153 LAMBADA items)"
else
    failed=$((failed + 1)); echo "FAIL eval_files: dev/data/eval_prepro.py --verify (exit $rc)"
fi
raw=${EVAL_RAW_DIR:-}
if [ -z "$raw" ]; then
    skipped=$((skipped + 1)); echo "SKIP eval_files rebuild: EVAL_RAW_DIR is not set (a folder with the raw files)"
elif ! "$py" -c "import tiktoken" >/dev/null 2>&1; then
    skipped=$((skipped + 1)); echo "SKIP eval_files rebuild: no tiktoken here (pip install tiktoken)"
elif [ ! -e "$raw/hellaswag_val_full.txt.xz" ] || [ ! -e "$raw/lambada_test.jsonl" ]; then
    skipped=$((skipped + 1)); echo "SKIP eval_files rebuild: the raw files are not in $raw"
else
    tmp=$(mktemp -d)
    if "$py" dev/data/eval_prepro.py --eval_dir "$raw" --out_dir "$tmp" > "$tmp/log.txt" 2>&1 &&
       cmp data/eval/hellaswag_val.bin "$tmp/hellaswag_val.bin" && cmp data/eval/lambada_test.bin "$tmp/lambada_test.bin"; then
        passed=$((passed + 1)); echo "ok   rebuilt from $raw: the same bytes as the committed files"
    else
        failed=$((failed + 1)); echo "FAIL eval_files: the rebuilt files differ from data/eval (or the build failed):"
        cat "$tmp/log.txt"
    fi
    rm -rf "$tmp"
fi
echo "TESTS eval_files: passed=$passed failed=$failed skipped=$skipped"
[ $failed -eq 0 ]
