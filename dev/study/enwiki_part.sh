#!/usr/bin/env bash
# enwiki_part.sh: tokenizes one part of the enwiki corpus into data/enwiki/, next to the parts already
# there, so that the whole corpus (7 .xz files, 111 MB, too big for one device call's 64 MiB carry;
# 88.5M GPT-2 tokens, measured) is built over several calls of the device tool.
#
# usage: bash dev/study/enwiki_part.sh PART DIR
#   PART  one lower-case letter a..z. Part a holds the validation split: the first VAL_TOKENS tokens of
#         its stream (the opening articles of its first file); every other part is all training data.
#   DIR   a folder with the part's enwiki_0*.jsonl.xz (all of them are tokenized, in name order)
# env: VAL_TOKENS (default 2,097,153 = exactly 32 validation batches of 64 x 1024 tokens plus the one
#      target token the last batch needs; the older dev/data/enwiki.sh split was 1M, the first half of
#      this one), SHARD_SIZE (default 10,000,000 tokens), VAL (1/0: override which part holds the
#      validation split), PREPRO (default "python3 dev/data/prepro.py"; needs numpy and tiktoken, which
#      the GPU machine has), FORCE=1 (remove shards in data/enwiki that no part wrote, e.g. from
#      dev/data/enwiki.sh, instead of refusing), ENWIKI_OUT (default data/enwiki: the output folder).
#
# Output: part P's training shards are enwiki_train_NNNNNN.bin with NNNNNN = 100 * (P - 'a') + i, so
# parts never collide and may run in any order; part a also writes enwiki_val_000000.bin. A marker
# data/enwiki/.parts/P.done records the inputs (names and sizes), the settings and the shards written.
# Idempotent: a part whose marker matches the same inputs and settings, with every shard it lists
# present, is left alone ("already done"); a part that was interrupted, or asked for again with other
# inputs or settings, has its own shards removed and is redone. Every part's last shard is partial; the
# data loader drops less than one batch (65,536 tokens) per shard: of the 86,397,044 training tokens in
# 11 shards (parts a-d: 23.98M, 26.11M, 26.12M, 10.19M; validation 2,097,153), one epoch of 64 x 1024
# batches uses 85,983,232 (1312 steps), 0.5% left out.
# Train with: -i "data/enwiki/enwiki_train_*.bin" -j "data/enwiki/enwiki_val_*.bin"
#
# The device calls (the device tool copies the repo plus the carried ignored folders, at most 64 MiB;
# data/enwiki/ survives to the next call only while the machine is warm, i.e. the next call comes
# within ~30 s, so make the calls back to back). Here, once: bash dev/study/stage_carry.sh, then
#   call 1, carry [".carry/enwiki_a"]:  bash dev/study/device_call.sh a    (00, 01 + validation; builds the trainer)
#   call 2, carry [".carry/enwiki_b"]:  bash dev/study/device_call.sh b    (02, 03)
#   call 3, carry [".carry/enwiki_c"]:  bash dev/study/device_call.sh c    (04, 05)
#   call 4, carry [".carry/enwiki_d"]:  bash dev/study/device_call.sh d    (06, then the grid until the call's limit)
# or by hand, e.g.: bash dev/study/enwiki_part.sh a .carry/enwiki_a (dev/study/device_call.sh says what
# else each call does). Tokenizing a part takes 5-9 s on 2 CPU cores (measured here: enwiki_00+01,
# 26.1M tokens, 5.8 s), so the calls' cost is their start and transfer, not the tokenizer.
set -euo pipefail
cd "$(dirname "$0")/../.."
PART=${1:-}
DIR=${2:-}
[[ "$PART" =~ ^[abcdefghijklmnopqrstuvwxyz]$ ]] || { echo "usage: bash dev/study/enwiki_part.sh PART(a..z) DIR" >&2; exit 2; }
[ -n "$DIR" ] && [ -d "$DIR" ] || { echo "enwiki_part: no folder '$DIR'" >&2; exit 2; }
VAL_TOKENS=${VAL_TOKENS:-2097153}
SHARD_SIZE=${SHARD_SIZE:-10000000}
if [ "$PART" = a ]; then VAL=${VAL:-1}; else VAL=${VAL:-0}; fi
PREPRO=${PREPRO:-"python3 dev/data/prepro.py"}
OUTD=${ENWIKI_OUT:-data/enwiki}
MARKS=$OUTD/.parts
idx=$(( $(printf '%d' "'$PART") - 97 ))
first=$((100 * idx))

shopt -s nullglob
inputs=("$DIR"/enwiki_0*.jsonl.xz)
shopt -u nullglob
[ ${#inputs[@]} -gt 0 ] || { echo "enwiki_part: no enwiki_0*.jsonl.xz in '$DIR'" >&2; exit 2; }
mkdir -p "$MARKS"

# what this part is made of: the marker's first lines; the shards follow them
want=$( {
    echo "part $PART"
    for f in "${inputs[@]}"; do echo "input $(basename "$f") $(stat -c %s "$f")"; done
    echo "shard_size $SHARD_SIZE"
    if [ "$VAL" = 1 ]; then echo "val_tokens $VAL_TOKENS"; else echo "val_tokens 0"; fi
} )
mark=$MARKS/$PART.done
done_already=0
if [ -f "$mark" ] && [ "$(grep -v '^shard ' "$mark")" = "$want" ]; then
    done_already=1
    for s in $(sed -n 's/^shard //p' "$mark"); do [ -f "$OUTD/$s" ] || done_already=0; done
    [ $done_already = 1 ] || echo "enwiki_part $PART: a shard of the earlier run is missing: redoing the part"
fi
[ $done_already = 1 ] || rm -f "$mark"

# shards the parts wrote (their markers), this part's own range (an interrupted run of it leaves names
# there: removed before it is redone), and shards nobody wrote (refused: they would join the glob)
mine() {   # is shard file name $1 in this part's range?
    local n=$1
    if [[ "$n" =~ ^enwiki_train_([0-9]{6})\.bin$ ]]; then
        local k=$((10#${BASH_REMATCH[1]}))
        [ $k -ge $first ] && [ $k -lt $((first + 100)) ]
    elif [[ "$n" =~ ^enwiki_val_[0-9]{6}\.bin$ ]]; then
        [ "$VAL" = 1 ]
    else
        return 1
    fi
}
known=" "
for m in "$MARKS"/*.done; do
    [ -e "$m" ] || continue
    known+="$(sed -n 's/^shard //p' "$m" | tr '\n' ' ')"
done
foreign=()
for f in "$OUTD"/enwiki_train_*.bin "$OUTD"/enwiki_val_*.bin "$OUTD"/enwiki_train.bin "$OUTD"/enwiki_val.bin; do
    [ -e "$f" ] || continue
    n=$(basename "$f")
    if [ $done_already = 0 ] && mine "$n"; then
        rm -f "$f"
    elif [[ "$known" != *" $n "* ]]; then
        foreign+=("$n")
    fi
done
if [ ${#foreign[@]} -gt 0 ]; then
    if [ "${FORCE:-0}" = 1 ]; then
        echo "enwiki_part $PART: FORCE=1: removing ${#foreign[@]} shard(s) no part wrote: ${foreign[*]}"
        for n in "${foreign[@]}"; do rm -f "$OUTD/$n"; done
    else
        echo "enwiki_part $PART: $OUTD holds shards no part wrote (${foreign[*]}), e.g. from dev/data/enwiki.sh;" \
             "they would mix into the trainer's glob: remove $OUTD (or run with FORCE=1)" >&2
        exit 1
    fi
fi
if [ $done_already = 1 ]; then
    echo "enwiki_part $PART: already done ($(grep -c '^shard ' "$mark") shards: $(sed -n 's/^shard //p' "$mark" | tr '\n' ' '))"
    exit 0
fi

tmp=$OUTD/.tmp_$PART
rm -rf "$tmp"
mkdir -p "$tmp"
t0=$SECONDS
if [ "$VAL" = 1 ]; then valarg=(--val_tokens "$VAL_TOKENS"); else valarg=(--val_tokens 0); fi
# the tokenizer file is in the repo (data/gpt2_tokenizer.bin): not written again
$PREPRO --input "${inputs[@]}" --name enwiki --out_dir "$tmp" "${valarg[@]}" --shard_size "$SHARD_SIZE" \
    --tokenizer_out '' > "$tmp/prepro.log" 2>&1 || { cat "$tmp/prepro.log" >&2; echo "enwiki_part $PART: prepro failed" >&2; exit 1; }
summary=$(tail -n 1 "$tmp/prepro.log")
shards=()
i=0
for f in "$tmp"/enwiki_train_*.bin; do
    [ -e "$f" ] || continue
    [ $i -lt 100 ] || { echo "enwiki_part $PART: more than 100 shards: raise SHARD_SIZE" >&2; exit 1; }
    n=$(printf 'enwiki_train_%06d.bin' $((first + i)))
    mv "$f" "$OUTD/$n"
    shards+=("$n")
    i=$((i + 1))
done
for f in "$tmp"/enwiki_val_*.bin; do
    [ -e "$f" ] || continue
    n=$(basename "$f")
    mv "$f" "$OUTD/$n"
    shards+=("$n")
done
rm -rf "$tmp"
{ echo "$want"; for n in "${shards[@]}"; do echo "shard $n"; done; } > "$mark.tmp"
mv "$mark.tmp" "$mark"
echo "enwiki_part $PART: $summary ($((SECONDS - t0)) s): ${shards[*]}"
