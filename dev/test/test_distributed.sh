#!/usr/bin/env bash
# test_distributed.sh: build/test_distributed (llmc/run/distributed.cuh's collectives, ZeRO-1's reduction into shards,
# the exposed communication time) in the launches `make test` can make on this machine, so that the collectives run
# through NCCL and not only as the one-process no-ops:
#   one process without NCCL;
#   one process with NCCL (WORLD_SIZE=1, the unique id through --nccl-id-file), where every check runs;
#   with 2 or more GPUs, a binary built with MPI and mpirun on PATH: one rank per GPU under mpirun.
# Sums the runs' summary lines into "TESTS test_distributed: ..."; skips without a GPU (scripts/gpu_or_skip.sh).
# make check-distributed (mk/distributed.mk) also runs the NCCL_COMM_ID launch, and mpirun on one GPU.
set -u
cd "$(dirname "$0")/../.."
source scripts/gpu_or_skip.sh
gpu_or_skip test_distributed
bin=build/test_distributed
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source scripts/summary_lib.sh
run() {   # run LABEL CMD...: one launch, its summary added to the totals
    local label=$1; shift
    echo "=== $label: $*"
    local out rc
    out=$("$@" 2>&1); rc=$?
    printf '%s\n' "$out"
    add_summary "test_distributed: $label" "$out" "$rc"
}
run "one process, no NCCL" "$bin"
if ldd "$bin" 2>/dev/null | grep -q libnccl; then
    run "one process, NCCL" env WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 "$bin" --nccl-id-file "$tmp/nccl_id"
else
    echo "SKIP test_distributed: one process, NCCL: the binary was built without NCCL"; skipped=$((skipped + 1))
fi
if [ "$ngpu" -ge 2 ] && ldd "$bin" 2>/dev/null | grep -q libmpi && command -v mpirun > /dev/null; then
    run "$ngpu ranks under mpirun" mpirun --allow-run-as-root --bind-to none -np "$ngpu" "$bin"
else
    echo "SKIP test_distributed: mpirun over every GPU: needs 2 or more GPUs ($ngpu here), MPI and mpirun"
    skipped=$((skipped + 1))
fi
echo "TESTS test_distributed: passed=$passed failed=$failed skipped=$skipped"
[ "$failed" -eq 0 ]
