#!/usr/bin/env bash
# tinyshakespeare.sh: the default dataset, which ships in the repo (you only need this to rebuild it).
# Writes data/tinyshakespeare/tiny_shakespeare_val.bin (the first 10% of the tokens, ~33.8K: enough for
# a validation batch of B*T = 32768 on one GPU), tiny_shakespeare_train.bin (the rest, ~304K tokens)
# and data/gpt2_tokenizer.bin. The text is one document, so the stream starts with <|endoftext|>.
# Usage: bash dev/data/tinyshakespeare.sh path/to/input.txt
# The text: tinyshakespeare's input.txt from Andrej Karpathy's char-rnn repository (data/tinyshakespeare/
# input.txt, 1,115,394 bytes; data/README.md). With that file the outputs are byte for byte the shipped ones.
# Needs python3 with numpy and tiktoken (requirements.txt).
set -euo pipefail
cd "$(dirname "$0")/../.."
BYTES=1115394
SHA256=86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed
if [ $# -lt 1 ] || [ -z "$1" ]; then
    echo "usage: bash dev/data/tinyshakespeare.sh path/to/input.txt" >&2
    echo "error: tinyshakespeare.sh needs tinyshakespeare's text: input.txt ($BYTES bytes) from Andrej Karpathy's" \
         "char-rnn repository, data/tinyshakespeare/input.txt (data/README.md); the shards it rebuilds ship in" \
         "data/tinyshakespeare/ already" >&2
    exit 1
fi
INPUT=$1
[ -e "$INPUT" ] || { echo "error: tinyshakespeare.sh: $INPUT not found; give the path to tinyshakespeare's input.txt" \
    "(char-rnn's data/tinyshakespeare/input.txt, $BYTES bytes; data/README.md)" >&2; exit 1; }
[ -f "$INPUT" ] || { echo "error: tinyshakespeare.sh: $INPUT is not a file; give the path to tinyshakespeare's" \
    "input.txt itself, e.g. $INPUT/input.txt" >&2; exit 1; }
if command -v sha256sum >/dev/null 2>&1 && [ "$(sha256sum < "$INPUT" | cut -d' ' -f1)" != "$SHA256" ]; then
    echo "warning: $INPUT is not char-rnn's tinyshakespeare input.txt ($BYTES bytes, sha256 $SHA256):" \
         "the shards will differ from the shipped ones" >&2
fi
python3 dev/data/prepro.py --input "$INPUT" --name tiny_shakespeare --out_dir data/tinyshakespeare \
    --val_fraction 0.1 --plain_names --tokenizer_out data/gpt2_tokenizer.bin
