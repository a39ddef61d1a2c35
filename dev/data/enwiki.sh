#!/usr/bin/env bash
# enwiki.sh: English Wikipedia (26,877 articles, ~97M GPT-2 tokens in 7 files) -> data/enwiki/ shards.
# usage: bash dev/data/enwiki.sh DIR   (or ENWIKI_DIR=DIR): DIR holds enwiki_0*.jsonl.xz, one {"text": ...} article
# per line (data/README.md says where the corpus comes from; on the team's machines it is ../shared/data/enwiki).
# The GPU machine sees only the repo: there carry a few of the .xz files in an ignored folder (e.g. .carry/enwiki)
# and pass it: bash dev/data/enwiki.sh .carry/enwiki
# Output (data/enwiki/ is gitignored): enwiki_val_000000.bin = the first 1,000,000 tokens of the stream
# (the opening articles of the first file), enwiki_train_000000.bin ... = the rest, in shards of
# SHARD_SIZE tokens (default 10M = 20 MB, so the data loader has several shards to shuffle, and a few
# shards fit in one carry to the GPU machine).
# Train with: -i "data/enwiki/enwiki_train_*.bin" -j "data/enwiki/enwiki_val_*.bin"
# The whole corpus does not fit one carry: dev/study/enwiki_part.sh tokenizes it in parts, one per call.
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${1:-${ENWIKI_DIR:-}}
if [ -z "$DIR" ]; then
    echo "usage: bash dev/data/enwiki.sh DIR   (DIR: the enwiki_0*.jsonl.xz files; data/README.md says where they come from)" >&2
    echo "error: dev/data/enwiki.sh needs the corpus directory (e.g. ../shared/data/enwiki on the team's machines)" >&2
    exit 1
fi
compgen -G "$DIR/enwiki_0*.jsonl.xz" > /dev/null ||
    { echo "error: dev/data/enwiki.sh: no enwiki_0*.jsonl.xz in '$DIR'" >&2; exit 1; }
rm -rf data/enwiki/.parts   # prepro.py replaces every shard: dev/study/enwiki_part.sh's part markers no longer hold
python3 dev/data/prepro.py --input "$DIR"/enwiki_0*.jsonl.xz --name enwiki --out_dir data/enwiki \
    --val_tokens "${VAL_TOKENS:-1000000}" --shard_size "${SHARD_SIZE:-10000000}" \
    --tokenizer_out data/gpt2_tokenizer.bin
