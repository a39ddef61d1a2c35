#!/usr/bin/env bash
# profile_quant.sh: Nsight Compute over the quantizer kernels that nvfp4's step spends its ~34 ms in (issue
# #12 part 2), at d12's largest activation shape, to say what bounds each one (DRAM bandwidth, issue slots,
# latency) before it is rewritten. Each row of build/bench_quant_fast named here is run alone (-f, -s, -n 1)
# under ncu, which records the first amax and apply launches of its fast path (qf_* and qg_* kernels).
# usage: bash dev/bench/profile_quant.sh [bench_quant_fast row name ...]
#        (default: the nvfp4 rows of a d12 step: row, row SR, col H16, col H16 SR, the dual dY and dual X
#        passes, and MS-EDEN's row pass)
# env: OUT [/tmp/profile_quant] (one ncu report per row there, ncu_N.txt), SHAPE [65536x3072], GPU_ARCHS [90]
# Prints, per kernel: duration, DRAM and SM throughput, issue slots busy, occupancy, registers; then (a second
# ncu run, ncu_N_stalls.txt) the instructions executed per element of the view, the six largest stall
# reasons (warps per issued instruction) and the busiest pipes: what a rewrite has to remove.
# ncu runs with --clock-control none (the device notes: leave the clocks alone).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/profile_quant}
SHAPE=${SHAPE:-65536x3072}
mkdir -p "$OUT"
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=("nvfp4 row (fprop X)" "nvfp4 row SR" "nvfp4 col H16 (wgrad X)" "nvfp4 col H16 SR"
                               "DUAL dY rowSR+colH16SR" "DUAL X row+colH16" "eden row (dgrad dY)")
command -v ncu > /dev/null || { echo "profile_quant: no ncu on this machine"; exit 1; }
make build/bench_quant_fast GPU_ARCHS="${GPU_ARCHS:-90}" > "$OUT/build.txt" 2>&1 ||
    { grep -E "error" "$OUT/build.txt" | head -n 20; echo "profile_quant: the build FAILED"; exit 1; }
rc=0
k=0
for name in "${rows[@]}"; do
    k=$((k + 1))
    rep="$OUT/ncu_$k.txt"
    echo "== $name ($SHAPE)"
    if ! ncu --clock-control none --kernel-name regex:'^q[fg]_' --launch-count 2 \
            --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
            --section WarpStateStats --section Occupancy --section LaunchStats \
            build/bench_quant_fast -n 1 -f "$name" -s "$SHAPE" > "$rep" 2>&1; then
        echo "   ncu failed:"; tail -n 5 "$rep" | sed 's/^/   /'; rc=1; continue
    fi
    # the kernel header lines, then the metrics that say what bounds each kernel
    grep -E "^  (void )?q[fg]_[a-z0-9_]+|^ +(Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Achieved Occupancy|Registers Per Thread|Warp Cycles Per Issued Instruction|Dynamic Shared Memory Per Block|Static Shared Memory Per Block) " "$rep" |
        sed -E 's/\(int, int, .*$//; s/ +/ /g; s/^ //' | sed 's/^/   /'
    srep="$OUT/ncu_${k}_stalls.txt"
    if ncu --clock-control none --kernel-name regex:'^q[fg]_' --launch-count 2 \
            --metrics 'smsp__inst_executed.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_[a-z0-9_]+\.avg\.pct_of_peak_sustained_active' \
            build/bench_quant_fast -n 1 -f "$name" -s "$SHAPE" > "$srep" 2>&1; then
        python3 - "$srep" "$SHAPE" <<'PY'
import re, sys
rows, cols = (int(x) for x in sys.argv[2].split("x"))
kern, m = None, {}
def flush():
    if not kern: return
    inst = m.get("smsp__inst_executed.sum")
    st = sorted(((v, k[len("smsp__average_warps_issue_stalled_"):-len("_per_issue_active.ratio")]) for k, v in m.items()
                 if k.startswith("smsp__average_warps_issue_stalled_")), reverse=True)[:6]
    pipes = sorted(((v, k[len("sm__inst_executed_pipe_"):-len(".avg.pct_of_peak_sustained_active")]) for k, v in m.items()
                    if k.startswith("sm__inst_executed_pipe_")), reverse=True)[:4]
    print(f"   {kern}: " + (f"{inst * 32 / (rows * cols):.1f} thread instructions per element" if inst else "no count"))
    print("      stalls: " + ", ".join(f"{n} {v:.2f}" for v, n in st))
    print("      pipes (% of peak): " + ", ".join(f"{n} {v:.0f}" for v, n in pipes))
for line in open(sys.argv[1]):
    h = re.match(r"^  (?:void )?(q[fg]_[a-z0-9_]+(?:<[^>]*>)?)", line)
    if h:
        flush(); kern, m = h.group(1), {}
        continue
    f = line.split()
    if kern and len(f) >= 2 and re.match(r"^(smsp|sm)__", f[0]):
        try: m[f[0]] = float(f[-1].replace(",", ""))
        except ValueError: pass
flush()
PY
    else
        echo "   ncu (stall metrics) failed:"; tail -n 3 "$srep" | sed 's/^/   /'
    fi
done
echo "profile_quant: reports in $OUT (ncu_1.txt ... ncu_$k.txt)"
exit $rc
