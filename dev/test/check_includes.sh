#!/usr/bin/env bash
# check_includes.sh: the include rules of llmc/'s rooms (docs/ARCHITECTURE.md, "Rooms"), checked on every
# #include "..." line of the repository's C/CUDA files (CPU only):
#   - llmc/ holds the rooms base/, model/, fp4/, run/ and, at its top, only the public headers nvfp4.cuh (the FP4
#     module: recipes, plans, the linear executor, the quantizer's entry points), hadamard.cuh, stochastic_round.cuh
#     adamw.cuh and muon.cuh;
#   - a .h file is plain C(++) that a host compiler reads (the CPU twin, the CPU tests): it includes .h files only;
#     so do the CPU tests (dev/test/*.c, dev/*.c);
#   - base/ includes base/ only; model/ base/ and model/ (the model never reads the FP4 module's insides);
#     run/ base/, run/ and the model's shape (model/gpt_config.h); fp4/ base/ and fp4/;
#   - the trainer and its test (train_gpt_fp4.cu, test_gpt_fp4.cu, train/) reach FP4 only through llmc/nvfp4.cuh;
#   - every included path exists.
set -uo pipefail
cd "$(dirname "$0")/../.."
passed=0; failed=0
bad() { echo "FAIL check_includes: $*"; failed=$((failed + 1)); }

top=$(cd llmc && ls -p | grep -v / | LC_ALL=C sort | tr '\n' ' ')
want="adamw.cuh hadamard.cuh muon.cuh nvfp4.cuh stochastic_round.cuh "
if [ "$top" = "$want" ]; then passed=$((passed + 1)); else bad "llmc/ holds at its top '$top', not the public headers '$want'"; fi

# tracked files and new ones not ignored (a file deleted but not yet committed is left out)
files=$(git ls-files --cached --others --exclude-standard '*.h' '*.cuh' '*.cu' '*.c' 2>/dev/null ||
        find . -name '*.h' -o -name '*.cuh' -o -name '*.cu' -o -name '*.c')
for f in $files; do
    f=${f#./}
    [ -f "$f" ] || continue
    while IFS= read -r inc; do
        [ -n "$inc" ] || continue
        ok=1
        if [ ! -f "$inc" ] && [ ! -f "$(dirname "$f")/$inc" ]; then bad "$f includes '$inc', which does not exist"; continue; fi
        case $f in *.h|*.c) [[ $inc == *.h ]] || { bad "$f (plain C) includes '$inc' (not a .h)"; ok=0; } ;; esac
        case $f in
        llmc/base/*)  [[ $inc == llmc/base/* ]] || { bad "$f (base/) includes '$inc'"; ok=0; } ;;
        llmc/model/*) [[ $inc == llmc/base/* || $inc == llmc/model/* ]] || { bad "$f (model/) includes '$inc'"; ok=0; } ;;
        llmc/run/*)   [[ $inc == llmc/base/* || $inc == llmc/run/* || $inc == llmc/model/gpt_config.h ]] ||
                          { bad "$f (run/) includes '$inc'"; ok=0; } ;;
        llmc/fp4/*)   [[ $inc == llmc/base/* || $inc == llmc/fp4/* ]] || { bad "$f (fp4/) includes '$inc'"; ok=0; } ;;
        train_gpt_fp4.cu|test_gpt_fp4.cu|train/*)
                      [[ $inc == llmc/fp4/* ]] && { bad "$f includes the FP4 module's inside '$inc' (use llmc/nvfp4.cuh)"; ok=0; } ;;
        esac
        [ $ok = 1 ] && passed=$((passed + 1))
    done < <(sed -n 's/^[[:space:]]*#include "\([^"]*\)".*/\1/p' "$f")
done
echo "TESTS check_includes: passed=$passed failed=$failed skipped=0"
[ "$failed" -eq 0 ]
