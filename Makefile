# Makefile for train_gpt_fp4 and its tests.
#   make            build the trainer (train_gpt_fp4) only
#   make test       build the trainer and every test binary, in parallel (one job per core unless -j is
#                   given), then run the tests: CPU tests everywhere, GPU tests where a GPU is present
#   make all        build the trainer and every test binary
#   SANITIZE=1      (with test or all) also the CPU tests built with AddressSanitizer and UBSan, in build-san/
# Overrides: GPU_ARCHS="90 100a", NO_CUDNN=1, NO_MPI=1, NO_NCCL=1, NVCC=..., CUDA_HOME=...,
#            PTXAS_THREADS=N (ptxas threads per nvcc; 0: one per core),
#            NVCC_THREADS=N (architectures of GPU_ARCHS compiled at once per nvcc; 0: all)

NVCC      ?= nvcc
CXX       ?= g++
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))
ifeq ($(CUDA_HOME),)
  CUDA_HOME := /usr/local/cuda
endif

# GPU architecture: the card's own where nvidia-smi sees one, else Hopper plus Blackwell (sm_100a
# carries the native NVFP4 GEMM path).
GPU_CC := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ')
ifneq ($(GPU_CC),)
  ifeq ($(GPU_CC),100)
    GPU_ARCHS ?= 100a
  else
    GPU_ARCHS ?= $(GPU_CC)
  endif
else
  GPU_ARCHS ?= 90 100a
endif
GENCODE := $(foreach a,$(GPU_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))

# Libraries live under the toolkit on some machines and in the system directories on others.
SYS_INC := $(CUDA_HOME)/include /usr/include /usr/include/x86_64-linux-gnu /usr/local/include
SYS_LIB := $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/lib
find_dir = $(firstword $(foreach d,$(2),$(if $(wildcard $(d)/$(1)),$(d))))

# Tells what the build leaves out, once: only the top-level make (make test starts a second one).
say = $(if $(filter 0,$(MAKELEVEL)),$(info build: $(1)))

# ptxas assembles a file's kernels on PTXAS_THREADS threads (0: one per core). Each kernel is assembled alone
# either way, so the machine code is the same byte for byte (every function of train_gpt_fp4's sm_90 cubin,
# compared with cuobjdump -sass); it only takes the trainer's ~60 s of ptxas down to the largest kernel's.
# With two architectures (no GPU seen: sm_90 and sm_100a), nvcc compiles them at once on NVCC_THREADS threads
# (0: all); each is compiled alone either way, so the cubins are the same byte for byte (compared with
# cuobjdump -xelf), and the trainer's build on 2 cores went from 232 to 180 s.
# `make test` builds its binaries in parallel, one thread each.
PTXAS_THREADS ?= 0
NVCC_THREADS ?= 0
NVCC_FLAGS := -O3 -std=c++17 $(GENCODE) -I. -Xcompiler -Wall,-Wno-unused-function -Xptxas --split-compile=$(PTXAS_THREADS) \
              --threads $(NVCC_THREADS)
LDLIBS     := -lcublasLt -lcublas
LIB_DIRS   := $(CUDA_HOME)/lib64

ifeq ($(NO_CUDNN),)
  CUDNN_INC := $(call find_dir,cudnn.h,$(SYS_INC))
  CUDNN_LIB := $(call find_dir,libcudnn.so,$(SYS_LIB))
endif
ifneq ($(and $(CUDNN_INC),$(CUDNN_LIB)),)
  NVCC_FLAGS += -DENABLE_CUDNN -I$(CUDNN_INC)
  LDLIBS += -lcudnn
  LIB_DIRS += $(CUDNN_LIB)
else
  $(call say,cuDNN not found (or NO_CUDNN=1): attention uses the program's own kernel)
endif

ifeq ($(NO_NCCL),)
  NCCL_INC := $(call find_dir,nccl.h,$(SYS_INC))
  NCCL_LIB := $(call find_dir,libnccl.so,$(SYS_LIB))
endif
ifneq ($(and $(NCCL_INC),$(NCCL_LIB)),)
  NVCC_FLAGS += -DENABLE_NCCL -I$(NCCL_INC)
  LDLIBS += -lnccl
  LIB_DIRS += $(NCCL_LIB)
else
  $(call say,NCCL not found (or NO_NCCL=1): single GPU only)
endif

ifeq ($(NO_MPI),)
  MPI_INC := $(call find_dir,mpi.h,/usr/lib/x86_64-linux-gnu/openmpi/include /usr/include/openmpi /usr/lib64/openmpi/include $(SYS_INC))
  MPI_LIB := $(call find_dir,libmpi.so,/usr/lib/x86_64-linux-gnu/openmpi/lib /usr/lib64/openmpi/lib $(SYS_LIB))
endif
ifneq ($(and $(MPI_INC),$(MPI_LIB),$(NCCL_INC)),)
  NVCC_FLAGS += -DENABLE_MPI -I$(MPI_INC)
  LDLIBS += -lmpi
  LIB_DIRS += $(MPI_LIB)
else
  $(call say,Open MPI not found (or NO_MPI=1): no mpirun launch; env-var launch still works with NCCL)
endif

LDFLAGS := $(foreach d,$(sort $(LIB_DIRS)),-L$(d) -Xlinker -rpath=$(d))

CXX_FLAGS := -O2 -std=c++17 -Wall -Wno-unused-function -I. -I$(CUDA_HOME)/include

HEADERS := $(wildcard llmc/*.h llmc/*.cuh llmc/*/*.h llmc/*/*.cuh llmc/*/*/*.h llmc/*/*/*.cuh)
# The FP4 numerics' headers, which several concerns' rules name (here, so that each mk/ file sees them)
FP4_HEADERS := llmc/fp4/formats.h llmc/fp4/quant_cpu.h llmc/fp4/hadamard.h llmc/fp4/stochastic_round.h \
               dev/test/fp4_golden.h

# Each concern adds its tests here: CPU_TESTS build with g++ and run everywhere; GPU_TESTS build with
# nvcc and skip themselves (with a message) when no GPU is present.
CPU_TESTS :=
GPU_TESTS :=
.DEFAULT_GOAL := train_gpt_fp4
include $(sort $(wildcard mk/*.mk))   # (sorted: make before 4.3 does not sort wildcard)

# What `make test` runs, in this order, one per line: test binaries and scripts that end with the line
# "TESTS name: passed=P failed=F skipped=S". `make all` builds every binary named here.
TESTS := $(CPU_TESTS)
TESTS += dev/test/test_fp4_ref.sh
TESTS += $(GPU_TESTS)
TESTS += ./test_gpt_fp4
TESTS += scripts/check_resume.sh

# SANITIZE=1: the CPU tests once more, built with AddressSanitizer and UBSan (any report fails the test).
SAN_TESTS := $(patsubst build/%,build-san/%,$(filter build/%,$(CPU_TESTS)))
ifneq ($(SANITIZE),)
  TESTS += $(SAN_TESTS)
endif
SAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

NPROC := $(shell nproc 2>/dev/null || echo 2)

.PHONY: all test clean benches
all: train_gpt_fp4 $(filter-out %.sh,$(TESTS))

# The benchmark binaries (dev/bench/, each rule in its concern's mk/ file; not tests, so not in `all`).
BENCHES := build/bench_attention build/bench_fp8_gemm build/bench_fp8_fold build/bench_kernels build/bench_quant \
           build/bench_quant_fast build/bench_overlap build/bench_gemm_sm90
benches: $(BENCHES)

train_gpt_fp4: train_gpt_fp4.cu $(HEADERS)
	$(NVCC) $(NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@

test_gpt_fp4: test_gpt_fp4.cu train_gpt_fp4.cu $(HEADERS)
	$(NVCC) $(NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@

build/%: dev/test/%.c $(HEADERS) dev/test/testing.h
	@mkdir -p build
	$(CXX) $(CXX_FLAGS) -x c++ $< -o $@ -lm

build/%: dev/test/%.cu $(HEADERS) dev/test/testing.h
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) $< $(LDFLAGS) $(LDLIBS) -o $@

build-san/%: dev/test/%.c $(HEADERS) $(wildcard dev/test/*.h)
	@mkdir -p build-san
	$(CXX) $(filter-out -O%,$(CXX_FLAGS)) $(SAN_FLAGS) -x c++ $< -o $@ -lm

# The binaries build in parallel (nvcc compiles one file on one core, and there are a dozen): one job
# per core, unless make was given its own -j.
test:
	@$(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j$(NPROC)) all $(if $(filter command line,$(origin PTXAS_THREADS)),,PTXAS_THREADS=1) \
	    $(if $(filter command line,$(origin NVCC_THREADS)),,NVCC_THREADS=1)
	@bash scripts/run_tests.sh $(TESTS)

clean:
	rm -rf train_gpt_fp4 test_gpt_fp4 build build-san
