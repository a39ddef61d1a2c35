#!/usr/bin/env bash
# stage_carry.sh: lays out the enwiki .xz files here in the ignored folders the device tool carries, one
# folder per tokenization part (dev/study/enwiki_part.sh), each small enough to travel with the repo:
#   .carry/enwiki_a: enwiki_00, enwiki_01   (the validation split comes from the start of enwiki_00)
#   .carry/enwiki_b: enwiki_02, enwiki_03
#   .carry/enwiki_c: enwiki_04, enwiki_05
#   .carry/enwiki_d: enwiki_06
# Two 16.4 MB files per part: with the ~19 MB repo that stays under the 64 MiB a call may carry (three
# would leave ~2 MB, too little as the repo grows). Files are hard links where the filesystem allows,
# else copies. Idempotent (existing identical files are kept).
# usage: bash dev/study/stage_carry.sh [SRC]      SRC defaults to ../shared/data/enwiki, then
#        /work/shared/data/enwiki. PARTS="a:00,01 b:02,03 c:04,05 d:06" changes the split.
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=${1:-}
if [ -z "$SRC" ]; then
    for d in ../shared/data/enwiki /work/shared/data/enwiki; do
        if [ -e "$d/enwiki_00.jsonl.xz" ]; then SRC=$d; break; fi
    done
fi
[ -n "$SRC" ] && [ -d "$SRC" ] || { echo "stage_carry: no enwiki source folder (give it as the argument)" >&2; exit 1; }
PARTS=${PARTS:-"a:00,01 b:02,03 c:04,05 d:06"}
repo_bytes=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1)
for spec in $PARTS; do
    part=${spec%%:*}
    dest=.carry/enwiki_$part
    mkdir -p "$dest"
    bytes=0
    for n in $(tr ',' ' ' <<<"${spec#*:}"); do
        f=enwiki_$n.jsonl.xz
        [ -e "$SRC/$f" ] || { echo "stage_carry: $SRC/$f is missing" >&2; exit 1; }
        if ! cmp -s "$SRC/$f" "$dest/$f" 2>/dev/null; then
            rm -f "$dest/$f"
            ln "$SRC/$f" "$dest/$f" 2>/dev/null || cp "$SRC/$f" "$dest/$f"
        fi
        bytes=$((bytes + $(stat -c %s "$dest/$f")))
    done
    # anything else in the folder would travel too
    for f in "$dest"/*; do
        case " $(tr ',' ' ' <<<"${spec#*:}") " in *" $(basename "$f" | sed -E 's/^enwiki_([0-9]+)\.jsonl\.xz$/\1/') "*) ;;
            *) echo "stage_carry: removing $f (not part $part's)"; rm -f "$f" ;; esac
    done
    total=$((bytes + repo_bytes))
    awk -v d="$dest" -v f="$(ls "$dest" | tr '\n' ' ')" -v b="$bytes" -v r="$repo_bytes" 'BEGIN {
        printf "%s: %s(%.1f MB; with the repo'"'"'s %.1f MB: %.1f of 67.1 MB)\n", d, f, b / 1e6, r / 1e6, (b + r) / 1e6 }'
    [ "$total" -lt 67108864 ] || echo "stage_carry: WARNING: $dest and the repo exceed 64 MiB: split it further" >&2
done
