#!/usr/bin/env bash
# bench_quant.sh: build (if needed) and run the quantize-kernel benchmark; prints a markdown table of
# kernel, shape, time, effective GB/s and % of the device copy bandwidth measured in the same run.
# Usage (repo root): bash dev/bench/bench_quant.sh [-n iters]
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x build/bench_quant ]; then make -s build/bench_quant; fi
build/bench_quant "$@"
