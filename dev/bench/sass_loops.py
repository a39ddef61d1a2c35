#!/usr/bin/env python3
"""sass_loops.py: where a kernel's instructions go, from its SASS, without a GPU.

For each function of a `cuobjdump -sass` listing whose name matches PATTERN: its loops (backward branches,
with their length in instructions) and, for the longest loops, the opcode histogram of the loop body. With
--skip-slow, the body leaves out the blocks that the quantizer's fast path branches over
(`@!Pa BRA Pb, X`, forward: the rare inf/NaN reference path), which approximates what a fast-path iteration executes.

How the #12 analysis made its listing (no cuobjdump in this machine's CUDA toolkit; PyPI has it):
    pip download --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm -d /tmp/whl   (unzip both; PATH to nvdisasm)
    printf '#include "llmc/fp4/quant.cuh"\\ntemplate __global__ void qf_apply_kernel<0, -1, QF_OUT_FAKE>(const __grid_constant__ QFArgs);\\n' > /tmp/k.cu
    nvcc -O3 -std=c++17 -arch=sm_90 -I. -cubin -o /tmp/k.cubin /tmp/k.cu && cuobjdump -sass /tmp/k.cubin > /tmp/k.sass
    python3 dev/bench/sass_loops.py /tmp/k.sass 'qf_apply_kernelILi0ELin1ELi0E' --skip-slow
"""
import argparse
import collections
import re


def functions(path):
    name, body = None, []
    for line in open(path):
        h = re.search(r"Function : (\S+)", line)
        if h:
            if name:
                yield name, body
            name, body = h.group(1), []
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(2)))
    if name:
        yield name, body


def opcode(text):
    f = text.split()
    op = f[1] if f[0].startswith("@") else f[0]
    return op.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass", help="output of cuobjdump -sass")
    ap.add_argument("pattern", help="regular expression on the mangled function name")
    ap.add_argument("--top", type=int, default=2, help="histograms of the N longest loops [2]")
    ap.add_argument("--skip-slow", action="store_true", help="leave out the blocks the fast path branches over")
    a = ap.parse_args()
    for name, body in functions(a.sass):
        if not re.search(a.pattern, name):
            continue
        print(f"{name}: {len(body)} instructions")
        loops = []
        for addr, t in body:
            m = re.search(r"BRA (?:!?P\d, )?0x([0-9a-f]+)", t)
            if m and int(m.group(1), 16) < addr:
                loops.append((int(m.group(1), 16), addr))
        for lo, hi in loops:
            print(f"  loop {lo:#x}-{hi:#x}: {(hi - lo) // 16 + 1} instructions")
        for lo, hi in sorted(loops, key=lambda x: x[0] - x[1])[:a.top]:
            skip = []
            if a.skip_slow:
                for addr, t in body:
                    m = re.match(r"@!P\d BRA !?P\d, 0x([0-9a-f]+)", t)
                    if m and lo <= addr <= hi and int(m.group(1), 16) > addr:
                        skip.append((addr + 16, int(m.group(1), 16)))
            ops = collections.Counter(opcode(t) for addr, t in body
                                      if lo <= addr <= hi and not any(s <= addr < e for s, e in skip))
            n = sum(ops.values())
            print(f"  loop {lo:#x}-{hi:#x}{' without ' + str(len(skip)) + ' slow blocks' if skip else ''}: {n} "
                  "instructions: " + ", ".join(f"{k} {v}" for k, v in ops.most_common(16)))


if __name__ == "__main__":
    main()
