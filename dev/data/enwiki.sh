#!/usr/bin/env bash
# enwiki.sh: English Wikipedia (26,877 articles, ~97M GPT-2 tokens in 7 files) -> data/enwiki/ shards.
# Input: enwiki_0*.jsonl.xz, one {"text": ...} article per line. The directory defaults to
# /work/shared/data/enwiki; the GPU machine sees only the repo, so there carry a few of the .xz files in
# an ignored folder (e.g. .carry/enwiki) and pass it: bash dev/data/enwiki.sh .carry/enwiki
# Output (data/enwiki/ is gitignored): enwiki_val_000000.bin = the first 1,000,000 tokens of the stream
# (the opening articles of the first file), enwiki_train_000000.bin ... = the rest, in shards of
# SHARD_SIZE tokens (default 10M = 20 MB, so the data loader has several shards to shuffle, and a few
# shards fit in one carry to the GPU machine).
# Train with: -i "data/enwiki/enwiki_train_*.bin" -j "data/enwiki/enwiki_val_*.bin"
# The whole corpus does not fit one carry: dev/study/enwiki_part.sh tokenizes it in parts, one per call.
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${1:-${ENWIKI_DIR:-/work/shared/data/enwiki}}
rm -rf data/enwiki/.parts   # prepro.py replaces every shard: dev/study/enwiki_part.sh's part markers no longer hold
python3 dev/data/prepro.py --input "$DIR"/enwiki_0*.jsonl.xz --name enwiki --out_dir data/enwiki \
    --val_tokens "${VAL_TOKENS:-1000000}" --shard_size "${SHARD_SIZE:-10000000}" \
    --tokenizer_out data/gpt2_tokenizer.bin
