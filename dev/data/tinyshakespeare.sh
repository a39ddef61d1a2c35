#!/usr/bin/env bash
# tinyshakespeare.sh: the default dataset, which ships in the repo (you only need this to rebuild it).
# Writes data/tinyshakespeare/tiny_shakespeare_val.bin (the first 10% of the tokens, ~33.8K: enough for
# a validation batch of B*T = 32768 on one GPU), tiny_shakespeare_train.bin (the rest, ~304K tokens)
# and data/gpt2_tokenizer.bin. The text is one document, so the stream starts with <|endoftext|>.
# Usage: bash dev/data/tinyshakespeare.sh [path/to/input.txt]
set -euo pipefail
cd "$(dirname "$0")/../.."
INPUT=${1:-${TINYSHAKESPEARE:-/work/shared/data/tinyshakespeare/input.txt}}
[ -f "$INPUT" ] || { echo "tinyshakespeare.sh: no text at $INPUT; give the path to tinyshakespeare's input.txt" \
    "(char-rnn's data/tinyshakespeare/input.txt, 1,115,394 bytes) as the first argument" >&2; exit 1; }
python3 dev/data/prepro.py --input "$INPUT" --name tiny_shakespeare --out_dir data/tinyshakespeare \
    --val_fraction 0.1 --plain_names --tokenizer_out data/gpt2_tokenizer.bin
