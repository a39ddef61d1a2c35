# distributed.mk: data parallelism (llmc/run/distributed.cuh, llmc/run/dist_host.h).
#   build/test_dist_host     shard layout and NCCL id file handoff (CPU)
#   build/test_distributed   collectives under whatever launch started it (skips without a GPU)
#   dev/test/test_distributed.sh  what `make test` runs: test_distributed without NCCL, with NCCL in one process,
#                            and under mpirun over every GPU where there are 2 or more
#   make check-distributed   runs test_distributed in every launch mode this machine can do:
#                            plain, env vars + id file, env vars + NCCL_COMM_ID, and mpirun over
#                            all visible GPUs (mpirun -np 1 on a one-GPU machine)

CPU_TESTS += build/test_dist_host
build/test_dist_host: dev/test/check_coverage.h
GPU_TESTS += dev/test/test_distributed.sh
all: build/test_distributed

DIST_NGPU := $(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU')
MPIRUN    := $(shell command -v mpirun 2>/dev/null)

.PHONY: check-distributed
check-distributed: build/test_distributed
	build/test_distributed
	rm -f build/nccl_id.check
	WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 build/test_distributed --nccl-id-file build/nccl_id.check
	WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 NCCL_COMM_ID=127.0.0.1:29517 build/test_distributed
ifneq ($(and $(findstring -DENABLE_MPI,$(NVCC_FLAGS)),$(MPIRUN)),)
	$(MPIRUN) --allow-run-as-root --bind-to none -np $(if $(filter-out 0,$(DIST_NGPU)),$(DIST_NGPU),1) build/test_distributed
else
	@echo "check-distributed: no mpirun launch (built without MPI, or mpirun not on PATH)"
endif
