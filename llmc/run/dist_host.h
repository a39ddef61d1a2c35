// dist_host.h: the parts of distributed.cuh that need neither CUDA nor NCCL, so the CPU tests can
// check them: which rank of how many processes this one is (from the launcher's environment), how a
// flat buffer is cut into per-rank shards (ZeRO-1), and how rank 0 hands the NCCL unique id to the
// other ranks through a file on a shared filesystem.
// defines: dist_host_place(), dist_host_env_source(), DIST_ENV_SOURCES, DIST_SHARD_ALIGN, shard_padded_size(), shard_range(), id_file_write(),
//          id_file_read()
#pragma once
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include "llmc/base/common.h"

// ----------------------------------------------------------------------------------------------
// Rank and world size from the launcher's environment variables, as distributed.cuh's dist_init finds
// them (same variables, same order), but without touching the GPU or MPI: the trainer does its batch
// arithmetic and opens its data before it starts CUDA, so that a bad command line fails fast, and on
// machines without a GPU. mpi: the build has MPI, so an mpirun launch (OMPI_COMM_WORLD_SIZE) comes
// first. Sets *world = 1, *rank = 0 when no launcher is found. Returns the variable the world size came
// from ("" for none). dist_init later checks that MPI or NCCL agree.

// A launcher's count or index: decimal digits only, 0 to 2^30 (strtol alone would also take " 2", "+2" and "-0").
static inline int dist_host_env_int_(const char* name, int* out) {
    const char* s = getenv(name);
    if (!s || !*s) return 0;
    char* end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    fail_if(!(s[0] >= '0' && s[0] <= '9') || *end != '\0' || errno || v < 0 || v > (1L << 30),
            "environment variable %s='%s' is not a non-negative integer", name, s);
    *out = (int)v;
    return 1;
}

// (world, rank, local rank) variable names, in order of preference; an MPI build takes mpirun's first.
static const char* const DIST_ENV_SOURCES[][3] = {
    {"WORLD_SIZE", "RANK", "LOCAL_RANK"},
    {"SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_LOCALID"},  // set by srun for its job step
    {"SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID"},
    {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID"},                // MPICH / Intel MPI's hydra
};
#define DIST_ENV_MPIRUN 3   // the row of mpirun's variables

// The launcher's row of DIST_ENV_SOURCES (-1: none; then *world = 1, *rank = 0, *local = -1), with the
// values it gives; local: the GPU index on this node (-1: not given; may be NULL).
static inline int dist_host_env_source(int mpi, int* world, int* rank, int* local) {
    const int n = (int)(sizeof(DIST_ENV_SOURCES) / sizeof(DIST_ENV_SOURCES[0]));
    *world = 1;
    *rank = 0;
    if (local) *local = -1;
    for (int k = mpi ? -1 : 0; k < n; k++) {
        const int i = k < 0 ? DIST_ENV_MPIRUN : k;
        const char* const* v = DIST_ENV_SOURCES[i];
        int w, r;
        if (!dist_host_env_int_(v[0], &w)) continue;
        fail_if(w < 1, "%s=%d: the world size must be at least 1", v[0], w);
        fail_if(!dist_host_env_int_(v[1], &r), "%s=%d is set but %s is not: set both (and %s, the GPU index on "
                "this node)", v[0], w, v[1], v[2]);
        fail_if(r >= w, "%s=%d is not below %s=%d", v[1], r, v[0], w);
        *world = w;
        *rank = r;
        if (local) dist_host_env_int_(v[2], local);
        return i;
    }
    return -1;
}

static inline const char* dist_host_place(int mpi, int* world, int* rank) {
    const int i = dist_host_env_source(mpi, world, rank, NULL);
    return i < 0 ? "" : DIST_ENV_SOURCES[i][0];
}

// ----------------------------------------------------------------------------------------------
// Shards. A flat buffer of n elements is padded to n_padded = a multiple of world * DIST_SHARD_ALIGN
// and rank r owns the S = n_padded / world elements [r*S, (r+1)*S). Because S is a multiple of
// DIST_SHARD_ALIGN, every shard starts 256-byte aligned in BF16 (512 in FP32), which NCCL likes, and
// the optimizer's vectorized kernels never straddle two ranks' shards.

#define DIST_SHARD_ALIGN 128

static inline size_t shard_padded_size(size_t n, int world) {
    size_t unit = (size_t)world * DIST_SHARD_ALIGN;
    return (n + unit - 1) / unit * unit;
}

// Returns S, the padded shard size. [*begin, *begin + *count) are the real (index < n) elements of
// rank `rank`'s shard: *begin = rank*S always, and *count = S except near the end, where it shrinks
// and can be 0 for ranks whose shard is all padding.
static inline size_t shard_range(size_t n, int world, int rank, size_t* begin, size_t* count) {
    size_t S = shard_padded_size(n, world) / (size_t)world;
    size_t b = (size_t)rank * S;
    *begin = b;
    *count = b >= n ? 0 : (n - b < S ? n - b : S);
    return S;
}

// ----------------------------------------------------------------------------------------------
// The id file. Rank 0 writes the bytes to PATH.tmp.<pid> and renames it to PATH, so a reader sees
// either no file or the whole id, never half of it. The other ranks poll until PATH appears.

static inline double id_file_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void id_file_write(const char* path, const void* bytes, size_t n) {
    // A file already there is left from a run that died while starting. Its id points at a
    // listener that no longer exists, and the other ranks may already have read it: refuse rather
    // than let them hang or connect to the wrong place.
    fail_if(access(path, F_OK) == 0,
            "NCCL id file '%s' already exists (left by an earlier run that did not finish starting?); "
            "delete it, or pass a fresh --nccl-id-file path (one with the job id in it, for example)", path);
    char tmp[4096];
    fail_if(snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp),
            "NCCL id file path too long: %s", path);
    FILE* f = fopen(tmp, "wb");
    fail_if(!f, "cannot create NCCL id file '%s': %s (the directory must exist and be writable)", tmp, strerror(errno));
    fwrite_check(bytes, 1, n, f, "NCCL id file");
    fail_if(fflush(f) != 0 || fsync(fileno(f)) != 0, "cannot flush NCCL id file '%s': %s", tmp, strerror(errno));
    fclose_check(f, "NCCL id file");
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        fail("cannot rename '%s' to '%s': %s", tmp, path, strerror(e));
    }
}

// Polls for `path` up to timeout_s seconds. Returns 1 with the n bytes read, 0 on timeout.
static inline int id_file_read(const char* path, void* bytes, size_t n, double timeout_s) {
    double deadline = id_file_now_s() + timeout_s;
    for (;;) {
        struct stat st;
        // rename() makes the file appear whole; the size check also guards against a file of the
        // wrong kind (another program's, another NCCL version's id size).
        if (stat(path, &st) == 0) {
            fail_if((size_t)st.st_size != n, "NCCL id file '%s' has %lld bytes, expected %zu: not written by this program?",
                    path, (long long)st.st_size, n);
            FILE* f = fopen(path, "rb");
            if (f) {
                size_t got = fread(bytes, 1, n, f);
                fclose(f);
                if (got == n) return 1;
            }
        }
        if (id_file_now_s() >= deadline) return 0;
        usleep(50 * 1000);
    }
}
