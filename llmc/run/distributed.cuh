// distributed.cuh: data parallelism, one process per GPU. Finds out how the processes were started,
// builds the NCCL communicator, and gives the trainer the few collectives it needs: sums of host
// scalars, sum/max all-reduces of device buffers, gradient reductions that overlap the backward
// pass (an all-reduce, or for ZeRO-1 a reduction of each element to the rank whose shard holds it),
// the ZeRO-1 shard layout with the all-gather of updated BF16 shards, and the exposed communication
// time.
// defines: Dist, dist_init, dist_finalize, dist_is_main, dist_printf, dist_print, dist_launch_name,
//          dist_sum_double, dist_allreduce_sum_f32, dist_allreduce_max_f32, dist_allreduce_sum_async,
//          dist_reduce_to_shards_async, dist_wait, dist_take_comm_ms, dist_padded_size, dist_shard_range,
//          dist_allgather_bf16, dist_broadcast_bf16_group, dist_ring_allreduce_bytes, dist_ring_share_bytes,
//          dist_barrier, nccl_check
//
// How a process learns its place, first match wins:
//   mpirun  OMPI_COMM_WORLD_SIZE is set and the build has MPI (-DENABLE_MPI): MPI_Init, rank and
//           world from MPI, local rank from the ranks sharing this node, NCCL id broadcast by MPI.
//   env     WORLD_SIZE + RANK (+ LOCAL_RANK), as torchrun and most cluster scripts set them; else
//           srun's SLURM_PROCID / SLURM_STEP_NUM_TASKS (or SLURM_NTASKS) / SLURM_LOCALID; else an
//           mpirun that this build cannot use (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK). The NCCL id
//           travels through NCCL_COMM_ID (NCCL's own bootstrap: rank 0 listens on host:port) or,
//           failing that, a file on a filesystem every rank sees (dist_init's nccl_id_file).
//   single  none of these: one process, world 1, and not one NCCL call.
// A launcher-started run builds a communicator even at world 1 (mpirun -np 1), so every NCCL path
// here can be exercised on a one-GPU machine. A build without NCCL runs world 1 only.
//
// Ordering: NCCL requires every rank to issue the same collectives in the same order. All functions
// below are collective (every rank must call them, in the same sequence) except dist_is_main,
// dist_printf, dist_print, dist_launch_name, dist_wait, dist_take_comm_ms, dist_padded_size,
// dist_shard_range and dist_ring_*_bytes. Collectives issued on different streams are still
// executed in issue order: NCCL chains every launch on a communicator through one internal stream.
//
// Exposed communication (dist_take_comm_ms) is the time the GPU's compute stream, or the host, sat
// waiting for communication, not the time communication took: a reduction that ran on the comm
// stream while the backward pass kept computing costs nothing and counts nothing. See "exposed-
// communication timing" below for why each measurement equals that waiting.
#pragma once
#include <sys/time.h>
#include "llmc/base/cuda_common.cuh"
#include "llmc/run/dist_host.h"
#ifdef ENABLE_NCCL
#include <nccl.h>
#endif
#ifdef ENABLE_MPI
#ifndef ENABLE_NCCL
#error "ENABLE_MPI needs ENABLE_NCCL: MPI only starts the processes, NCCL moves the data"
#endif
#include <mpi.h>
#endif

enum { DIST_SINGLE = 0, DIST_MPIRUN = 1, DIST_ENV = 2 };

#define DIST_TIMED_SLOTS 256           // ring of timing event pairs between dist_take_comm_ms calls
#define DIST_ID_FILE_TIMEOUT_S 600.0   // how long ranks > 0 wait for rank 0's id file

typedef struct {
    int rank, world, local_rank;
    int launched_by;            // DIST_SINGLE, DIST_MPIRUN or DIST_ENV
    int use_nccl;               // 1 when a communicator exists: any launcher-started run
    int device;                 // the CUDA device this process drives
    const char* env_source;     // where rank/world came from: "mpirun", or the world-size variable ("WORLD_SIZE", "SLURM_NTASKS", ...); "" for single
#ifdef ENABLE_NCCL
    ncclComm_t comm;
#endif
    cudaStream_t comm_stream;   // where the overlapped reductions run (high priority, non-blocking)
    cudaEvent_t compute_ready;  // recorded on the compute stream; the comm stream waits on it
    cudaEvent_t comm_done;      // recorded on the comm stream; dist_wait makes the compute stream wait on it
    int pending;                // async communication issued since the last dist_wait
    // Exposed communication: time a compute stream (or the host) spent waiting on communication,
    // from event pairs on the compute stream (kinds 1 and 2 of "exposed-communication timing"),
    // harvested into comm_ms, which also collects the host-side waits (kind 3).
    cudaEvent_t t_begin[DIST_TIMED_SLOTS], t_end[DIST_TIMED_SLOTS];
    int t_head, n_timed;        // the ring's oldest used pair and how many are in use
    double comm_ms;
    double* scratch;            // device, 1 double: dist_sum_double and dist_barrier
    double* scratch_host;       // pinned, 1 double
} Dist;

#ifdef ENABLE_NCCL
static inline void nccl_check_(ncclResult_t r, const char* file, int line) {
    if (r != ncclSuccess)
        fail("NCCL error at %s:%d: %s: %s (rerun with NCCL_DEBUG=INFO for NCCL's own account)", file, line,
             ncclGetErrorString(r), ncclGetLastError(NULL));
}
#define nccl_check(r) nccl_check_((r), __FILE__, __LINE__)
#endif
#ifdef ENABLE_MPI
static inline void mpi_check_(int r, const char* file, int line) {
    if (r != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(r, msg, &len);
        fail("MPI error at %s:%d: %s", file, line, msg);
    }
}
#define mpi_check(r) mpi_check_((r), __FILE__, __LINE__)
#endif

static inline int dist_is_main(const Dist* d) { return d->rank == 0; }

// printf on rank 0 only
static inline void dist_printf(const Dist* d, const char* fmt, ...) {
    if (!dist_is_main(d)) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

static inline const char* dist_launch_name(const Dist* d) {
    return d->launched_by == DIST_MPIRUN ? "mpirun" : d->launched_by == DIST_ENV ? "env" : "single";
}

// ----------------------------------------------------------------------------------------------
// launch detection

// Fills rank, world, local_rank (-1: not given) and launched_by from the environment (the variables of
// dist_host.h's DIST_ENV_SOURCES, which the trainer also reads before it starts CUDA).
static inline void dist_detect_env_(Dist* d) {
    d->launched_by = DIST_SINGLE;
    d->rank = 0; d->world = 1; d->local_rank = 0;
    d->env_source = "";
#ifdef ENABLE_MPI
    if (getenv("OMPI_COMM_WORLD_SIZE")) { d->launched_by = DIST_MPIRUN; return; }
#endif
    int world, rank, local;
    const int i = dist_host_env_source(0, &world, &rank, &local);
    if (i < 0) return;
    d->launched_by = DIST_ENV;
    d->world = world; d->rank = rank; d->local_rank = local;
    d->env_source = DIST_ENV_SOURCES[i][0];
}

// cudaSetDevice(local_rank), with the one exception of launchers that bind one GPU per process
// (CUDA_VISIBLE_DEVICES naming a single device): then the only visible device is ours.
static inline void dist_select_device_(Dist* d) {
    int ndev = device_count_or_zero();
    fail_if(ndev == 0, "rank %d: no CUDA GPU visible (CUDA_VISIBLE_DEVICES=%s)", d->rank,
            getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset");
    const char* vis = getenv("CUDA_VISIBLE_DEVICES");
    int bound_one = vis && ndev == 1 && !strchr(vis, ',');
    if (d->local_rank < ndev) d->device = d->local_rank;
    else if (bound_one) d->device = 0;
    else fail("rank %d has local rank %d but this node shows only %d GPU(s): start at most %d process(es) per "
              "node (mpirun -np / --npernode, srun --ntasks-per-node)", d->rank, d->local_rank, ndev, ndev);
    cuda_check(cudaSetDevice(d->device));
}

#ifdef ENABLE_NCCL
// Everyone ends with the same ncclUniqueId. Returns 1 when rank 0 wrote it to nccl_id_file.
static inline int dist_share_id_(Dist* d, ncclUniqueId* id, const char* nccl_id_file) {
#ifdef ENABLE_MPI
    if (d->launched_by == DIST_MPIRUN) {
        if (d->rank == 0) nccl_check(ncclGetUniqueId(id));
        mpi_check(MPI_Bcast(id, (int)sizeof(*id), MPI_BYTE, 0, MPI_COMM_WORLD));
        return 0;
    }
#endif
    const char* comm_id = getenv("NCCL_COMM_ID");
    if (comm_id && *comm_id) {
        // With NCCL_COMM_ID set, ncclGetUniqueId returns the same id on every rank (it only encodes
        // that address) and rank 0's ncclCommInitRank listens there.
        nccl_check(ncclGetUniqueId(id));
        return 0;
    }
    if (nccl_id_file && *nccl_id_file) {
        if (d->rank == 0) {
            nccl_check(ncclGetUniqueId(id));
            id_file_write(nccl_id_file, id, sizeof(*id));
            return 1;
        }
        if (!id_file_read(nccl_id_file, id, sizeof(*id), DIST_ID_FILE_TIMEOUT_S))
            fail("rank %d waited %.0f s for rank 0 to write the NCCL id to '%s': is rank 0 running, and is that "
                 "path on a filesystem every node sees?", d->rank, DIST_ID_FILE_TIMEOUT_S, nccl_id_file);
        return 0;
    }
    fail_if(d->world > 1,
            "%d processes from %s, but no way to share the NCCL id between them: pass --nccl-id-file PATH on a "
            "filesystem every rank sees, or set NCCL_COMM_ID=<host of rank 0>:<free port> for every rank%s",
            d->world, d->env_source,
#ifdef ENABLE_MPI
            ", or launch with mpirun"
#else
            " (this build has no MPI, so mpirun cannot hand it over)"
#endif
            );
    nccl_check(ncclGetUniqueId(id));   // world 1: nobody to share with
    return 0;
}
#endif

// ----------------------------------------------------------------------------------------------
// init / finalize

static inline void dist_init(Dist* d, const char* nccl_id_file) {
    memset(d, 0, sizeof(*d));
    dist_detect_env_(d);
#ifdef ENABLE_MPI
    if (d->launched_by == DIST_MPIRUN) {
        int inited = 0;
        mpi_check(MPI_Initialized(&inited));
        if (!inited) mpi_check(MPI_Init(NULL, NULL));
        mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &d->rank));
        mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &d->world));
        MPI_Comm node;   // the ranks on this node, to number the GPUs
        mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node));
        mpi_check(MPI_Comm_rank(node, &d->local_rank));
        mpi_check(MPI_Comm_free(&node));
        d->env_source = "mpirun";
    }
#endif
    if (d->local_rank < 0) {
        fail_if(d->world > 1, "%s=%d is set but no local rank: set LOCAL_RANK to this process's GPU index on "
                "its node", d->env_source, d->world);
        d->local_rank = 0;
    }
#ifndef ENABLE_NCCL
    fail_if(d->world > 1, "started as rank %d of %d (%s), but this build has no NCCL, so it runs as one process "
            "only: rebuild where nccl.h and libnccl.so are found (see the Makefile's build: lines)",
            d->rank, d->world, d->env_source);
    d->launched_by = DIST_SINGLE;   // world 1 from a launcher: nothing to talk to
#endif
    dist_select_device_(d);
    d->use_nccl = d->launched_by != DIST_SINGLE;

    int lo = 0, hi = 0;   // the comm stream gets the highest priority so that gradient traffic is not starved by compute blocks
    cuda_check(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cuda_check(cudaStreamCreateWithPriority(&d->comm_stream, cudaStreamNonBlocking, hi));
    cuda_check(cudaEventCreateWithFlags(&d->compute_ready, cudaEventDisableTiming));
    cuda_check(cudaEventCreateWithFlags(&d->comm_done, cudaEventDisableTiming));
    for (int i = 0; i < DIST_TIMED_SLOTS; i++) {
        cuda_check(cudaEventCreate(&d->t_begin[i]));
        cuda_check(cudaEventCreate(&d->t_end[i]));
    }
    cuda_check(cudaMalloc(&d->scratch, sizeof(double)));
    cuda_check(cudaMallocHost(&d->scratch_host, sizeof(double)));

#ifdef ENABLE_NCCL
    if (d->use_nccl) {
        // NVLink multicast (NVLS) stays off, unconditionally, even over a user's setting: the GPU
        // machines this program runs on do not support it, and NCCL would otherwise try it. Set
        // before the first NCCL call, since NCCL reads its settings once.
        setenv("NCCL_NVLS_ENABLE", "0", 1);
        ncclUniqueId id;
        int wrote_file = dist_share_id_(d, &id, nccl_id_file);
        nccl_check(ncclCommInitRank(&d->comm, d->world, id, d->rank));
        // Every rank has read the id by now (ncclCommInitRank needs them all), so the file can go:
        // a later run on the same path then starts clean.
        if (wrote_file) unlink(nccl_id_file);
    }
#endif
}

// One line on rank 0: how the run was launched and on what.
static inline void dist_print(const Dist* d) {
    if (!d->use_nccl) { dist_printf(d, "distributed: single process, GPU %d\n", d->device); return; }
#ifdef ENABLE_NCCL
    int v = 0;
    ncclGetVersion(&v);
    dist_printf(d, "distributed: %d process(es) launched by %s (%s), rank 0 on GPU %d, NCCL %d.%d.%d\n", d->world,
                dist_launch_name(d), d->env_source, d->device, v / 10000, (v / 100) % 100, v % 100);
#endif
}

static inline void dist_finalize(Dist* d) {
    cuda_check(cudaStreamSynchronize(d->comm_stream));
#ifdef ENABLE_NCCL
    if (d->use_nccl) {
        nccl_check(ncclCommFinalize(d->comm));
        nccl_check(ncclCommDestroy(d->comm));
    }
#endif
    for (int i = 0; i < DIST_TIMED_SLOTS; i++) {
        cuda_check(cudaEventDestroy(d->t_begin[i]));
        cuda_check(cudaEventDestroy(d->t_end[i]));
    }
    cuda_check(cudaEventDestroy(d->compute_ready));
    cuda_check(cudaEventDestroy(d->comm_done));
    cuda_check(cudaStreamDestroy(d->comm_stream));
    cuda_check(cudaFree(d->scratch));
    cuda_check(cudaFreeHost(d->scratch_host));
#ifdef ENABLE_MPI
    if (d->launched_by == DIST_MPIRUN) {
        int done = 0;
        MPI_Finalized(&done);
        if (!done) mpi_check(MPI_Finalize());
    }
#endif
    d->use_nccl = 0;
}

// ----------------------------------------------------------------------------------------------
// exposed-communication timing
//
// comm_ms adds up three kinds of waiting, each measured so that it equals the time by which
// communication delayed the compute stream:
//
// 1. dist_wait (the compute stream waits for the overlapped gradient reduction). Two timing events
//    on the compute stream, t_begin just before its cudaStreamWaitEvent on comm_done and t_end just
//    after. A stream executes its commands in order, and an event's timestamp is taken when the
//    stream reaches it, that is once everything queued before it on that stream has completed. So
//      t_begin = when the compute work queued before the wait finished (or when the host queued the
//                event, if the GPU was already idle waiting for the host: that idling is not ours),
//      t_end   = max(t_begin, when the communication finished): the stream cannot pass the wait
//                before comm_done completes, and nothing else sits between the wait and t_end.
//    t_end - t_begin = max(0, communication end - compute end): zero when the reduction finished
//    behind the backward pass, and otherwise exactly the stretch in which the compute stream had
//    nothing to run but was held back by the reduction. What the comm stream did while compute
//    was still running does not enter.
// 2. Collectives issued on the compute stream itself (dist_allreduce_sum_f32 / _max_f32,
//    dist_allgather_bf16: the ZeRO-1 norm and weight gather). Events around the NCCL call on that
//    stream: the stream runs nothing else until the collective has finished, so all of its length
//    (including waiting for slower ranks to join) is time compute was held back.
// 3. dist_sum_double / dist_barrier, which block the host. These first wait, untimed, until the
//    device is idle, so the clock then starts with nothing left to compute (anything that was still
//    in flight, such as the gradient reduction and the backward it waits for, is either compute or
//    already counted by 1.), and the host-side wall time of the scalar collective itself is time in
//    which the GPU could do nothing. (Timing the host's whole wait, as an earlier version did,
//    counted the entire backward pass still queued ahead of the reduction as communication.)
//
// Not in comm_ms: NCCL's kernels share the GPU with the backward pass and slow its kernels down a
// little (SMs and memory bandwidth); that shows in the compute time. So the N-GPU step time minus
// the 1-GPU step time (same micro-batch) should be comm_ms plus that slowdown, plus a few
// microseconds of host launch latency after each host-blocking sum, minus what ZeRO-1 saves by
// running the optimizer on 1/N of the parameters.

static inline double dist_wall_ms_(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return 1e3 * (double)tv.tv_sec + 1e-3 * (double)tv.tv_usec;
}

// Adds the oldest recorded event pair to comm_ms (waits for its end event, which is normally long
// past: the ring is large, so the host does not stall on work still in flight).
static inline void dist_harvest_one_(Dist* d) {
    float ms = 0.0f;
    cuda_check(cudaEventSynchronize(d->t_end[d->t_head]));
    cuda_check(cudaEventElapsedTime(&ms, d->t_begin[d->t_head], d->t_end[d->t_head]));
    d->comm_ms += ms;
    d->t_head = (d->t_head + 1) % DIST_TIMED_SLOTS;
    d->n_timed--;
}

// The next free event pair of the ring.
static inline int dist_timing_slot_(Dist* d) {
    if (d->n_timed == DIST_TIMED_SLOTS) dist_harvest_one_(d);
    return (d->t_head + d->n_timed++) % DIST_TIMED_SLOTS;
}

// Milliseconds that compute waited for communication since the last call (the three kinds above),
// then resets the count. Waits for the events it reads, so call it once per step, after the step's
// synchronisation; call it also just before a step starts, to drop what validation or checkpoints
// communicated in between.
static inline double dist_take_comm_ms(Dist* d) {
    while (d->n_timed > 0) dist_harvest_one_(d);
    double ms = d->comm_ms;
    d->comm_ms = 0.0;
    return ms;
}

// Per-step traffic, for the start-up summary: bytes one rank sends, and receives, with NCCL's ring
// algorithms (NVLS is off; NCCL may pick a tree across nodes, with other counts) when a buffer of
// `bytes` is
//   all-reduced: reduce-scatter then all-gather, 2 (W-1)/W * bytes each way;
//   reduced so that each rank gets the sum of its 1/W share, or all-gathered from 1/W shares:
//   (W-1)/W * bytes each way. For dist_reduce_to_shards_async (one ring reduction per piece, every
//   rank but the owner sending the piece once) this is the average over ranks; a rank with a
//   smaller shard sends a little more.
static inline double dist_ring_allreduce_bytes(const Dist* d, double bytes) {
    return 2.0 * (d->world - 1) / d->world * bytes;
}
static inline double dist_ring_share_bytes(const Dist* d, double bytes) {
    return (double)(d->world - 1) / d->world * bytes;
}

// ----------------------------------------------------------------------------------------------
// collectives

// Sum of x over all ranks, on every rank. Blocks the host, first (untimed) until the whole device is
// idle, then for the collective itself, which is what goes into comm_ms (kind 3 above).
static inline double dist_sum_double(Dist* d, double x) {
    if (!d->use_nccl) return x;
#ifdef ENABLE_NCCL
    cuda_check(cudaDeviceSynchronize());
    double t0 = dist_wall_ms_();
    *d->scratch_host = x;
    cuda_check(cudaMemcpyAsync(d->scratch, d->scratch_host, sizeof(double), cudaMemcpyHostToDevice, d->comm_stream));
    nccl_check(ncclAllReduce(d->scratch, d->scratch, 1, ncclDouble, ncclSum, d->comm, d->comm_stream));
    cuda_check(cudaMemcpyAsync(d->scratch_host, d->scratch, sizeof(double), cudaMemcpyDeviceToHost, d->comm_stream));
    cuda_check(cudaStreamSynchronize(d->comm_stream));
    d->comm_ms += dist_wall_ms_() - t0;
    x = *d->scratch_host;
#endif
    return x;
}

// Every rank waits until all ranks have got here (and until its own GPU work is done).
static inline void dist_barrier(Dist* d) {
    if (d->use_nccl) (void)dist_sum_double(d, 0.0);
}

#ifdef ENABLE_NCCL
// On the caller's stream, timed whole (kind 2 of "exposed-communication timing").
static inline void dist_allreduce_f32_(Dist* d, float* buf, size_t n, ncclRedOp_t op, cudaStream_t s) {
    int slot = dist_timing_slot_(d);
    cuda_check(cudaEventRecord(d->t_begin[slot], s));
    nccl_check(ncclAllReduce(buf, buf, n, ncclFloat, op, d->comm, s));
    cuda_check(cudaEventRecord(d->t_end[slot], s));
}
#endif

// In place, on stream s: buf = sum over ranks of buf. No-op for a single process.
static inline void dist_allreduce_sum_f32(Dist* d, float* buf, size_t n, cudaStream_t s) {
    if (!d->use_nccl) return;
#ifdef ENABLE_NCCL
    dist_allreduce_f32_(d, buf, n, ncclSum, s);
#endif
}

// In place, on stream s: buf = elementwise max over ranks (shared amax for FP4/FP8 tensor scales,
// so that every rank quantizes with the same scale).
static inline void dist_allreduce_max_f32(Dist* d, float* buf, size_t n, cudaStream_t s) {
    if (!d->use_nccl) return;
#ifdef ENABLE_NCCL
    dist_allreduce_f32_(d, buf, n, ncclMax, s);
#endif
}

#ifdef ENABLE_NCCL
// The comm stream waits for everything queued on compute_stream so far: the kernels that produced the
// buffers about to be reduced.
static inline void dist_comm_after_compute_(Dist* d, cudaStream_t compute_stream) {
    cuda_check(cudaEventRecord(d->compute_ready, compute_stream));
    cuda_check(cudaStreamWaitEvent(d->comm_stream, d->compute_ready, 0));
}
#endif

// Sums bufs[0..nbufs) over ranks in place, as one NCCL group on d->comm_stream, after everything
// already queued on compute_stream (the kernels that produced these gradients). Returns at once; the
// compute stream runs on (the rest of the backward) while the data moves. The buffers must not be
// touched until dist_wait(d, stream) has been called on the stream that reads them next.
static inline void dist_allreduce_sum_async(Dist* d, float* const* bufs, const size_t* counts, int nbufs,
                                            cudaStream_t compute_stream) {
    if (!d->use_nccl || nbufs <= 0) return;
#ifdef ENABLE_NCCL
    dist_comm_after_compute_(d, compute_stream);
    nccl_check(ncclGroupStart());
    for (int i = 0; i < nbufs; i++)
        nccl_check(ncclAllReduce(bufs[i], bufs[i], counts[i], ncclFloat, ncclSum, d->comm, d->comm_stream));
    nccl_check(ncclGroupEnd());
    d->pending = 1;
#endif
}

// ZeRO-1's gradient reduction, used like dist_allreduce_sum_async: bufs[i] (counts[i] elements) are
// pieces of one flat buffer `flat` of n elements that is sharded as dist_shard_range(d, n) says, and
// each element's sum over ranks lands only on the rank whose shard holds it, which is all that rank
// needs (it updates, and takes the norm of, its own shard). Elsewhere the pieces are left with
// unspecified contents. A rank's shard is complete once every piece overlapping it has been passed
// here, in any grouping, followed by dist_wait.
//
// The pieces are a layer's gradient tensors, which do not line up with shard boundaries, so each is
// cut at the boundaries and every cut goes to its owner with ncclReduce (root = owner), all in one
// NCCL group. That keeps the per-layer overlap with the backward pass of the all-reduce it replaces,
// at the same bytes per rank as a reduce-scatter (every rank but the owner sends each element once,
// (W-1)/W of the buffer per rank on average). The simpler alternative, one ncclReduceScatter over
// the whole padded buffer after the backward pass, could not start before the last layer's gradient
// was done, and all of it would be exposed.
static inline void dist_reduce_to_shards_async(Dist* d, float* flat, size_t n, float* const* bufs, const size_t* counts,
                                               int nbufs, cudaStream_t compute_stream) {
    for (int i = 0; i < nbufs; i++)
        fail_if(bufs[i] < flat || (size_t)(bufs[i] - flat) + counts[i] > n, "internal: dist_reduce_to_shards_async: "
                "piece %d [%td, +%zu) is not inside the flat buffer of %zu elements", i, bufs[i] - flat, counts[i], n);
    if (!d->use_nccl || nbufs <= 0) return;
#ifdef ENABLE_NCCL
    size_t my_begin, my_count;
    size_t S = shard_range(n, d->world, d->rank, &my_begin, &my_count);   // the shard size, the same on every rank
    dist_comm_after_compute_(d, compute_stream);
    nccl_check(ncclGroupStart());
    for (int i = 0; i < nbufs; i++) {
        size_t lo = (size_t)(bufs[i] - flat), hi = lo + counts[i];
        while (lo < hi) {
            int owner = (int)(lo / S);
            size_t owner_end = (size_t)(owner + 1) * S;
            size_t cut = hi < owner_end ? hi : owner_end;
            nccl_check(ncclReduce(flat + lo, flat + lo, cut - lo, ncclFloat, ncclSum, owner, d->comm, d->comm_stream));
            lo = cut;
        }
    }
    nccl_check(ncclGroupEnd());
    d->pending = 1;
#endif
}

// Makes compute_stream wait (on the GPU; the host does not block) for all communication issued with
// dist_allreduce_sum_async / dist_reduce_to_shards_async so far, and times that wait with events on
// compute_stream around it (kind 1 of "exposed-communication timing": the stall, not the transfer).
static inline void dist_wait(Dist* d, cudaStream_t compute_stream) {
    if (!d->use_nccl || !d->pending) return;
    cuda_check(cudaEventRecord(d->comm_done, d->comm_stream));
    int slot = dist_timing_slot_(d);
    cuda_check(cudaEventRecord(d->t_begin[slot], compute_stream));
    cuda_check(cudaStreamWaitEvent(compute_stream, d->comm_done, 0));
    cuda_check(cudaEventRecord(d->t_end[slot], compute_stream));
    d->pending = 0;
}

// ----------------------------------------------------------------------------------------------
// ZeRO-1 shards (layout rules in dist_host.h)

// The size to allocate for a flat buffer of n elements that will be sharded: n rounded up to a
// multiple of world * DIST_SHARD_ALIGN. The padding is never read as data.
static inline size_t dist_padded_size(const Dist* d, size_t n) { return shard_padded_size(n, d->world); }

// This rank's shard of a flat buffer of n elements: returns S (the padded shard size, the same on
// every rank); [*begin, *begin + *count) are its real elements, *begin = rank * S, *count <= S and 0
// for ranks whose shard is all padding.
static inline size_t dist_shard_range(const Dist* d, size_t n, size_t* begin, size_t* count) {
    return shard_range(n, d->world, d->rank, begin, count);
}

// In place, on stream s, as one NCCL group: bufs[i] (counts[i] BF16 elements) from rank roots[i] to all ranks
// (--optimizer muon with ZeRO-1: each Muon matrix from the rank that owns and updated it). Timed whole.
static inline void dist_broadcast_bf16_group(Dist* d, floatX* const* bufs, const size_t* counts, const int* roots,
                                             int nbufs, cudaStream_t s) {
    if (!d->use_nccl || nbufs <= 0) return;
#ifdef ENABLE_NCCL
    int slot = dist_timing_slot_(d);
    cuda_check(cudaEventRecord(d->t_begin[slot], s));
    nccl_check(ncclGroupStart());
    for (int i = 0; i < nbufs; i++)
        nccl_check(ncclBroadcast(bufs[i], bufs[i], counts[i], ncclBfloat16, roots[i], d->comm, s));
    nccl_check(ncclGroupEnd());
    cuda_check(cudaEventRecord(d->t_end[slot], s));
#else
    (void)bufs; (void)counts; (void)roots; (void)s;
#endif
}

// In place, on stream s: every rank's shard [r*S, (r+1)*S) of flat_padded (S = n_padded / world)
// is copied to all ranks, so after the optimizer updated its own shard each rank has all weights.
// Timed whole, like the other collectives on the caller's stream.
static inline void dist_allgather_bf16(Dist* d, floatX* flat_padded, size_t n_padded, cudaStream_t s) {
    fail_if(n_padded % (size_t)d->world != 0, "dist_allgather_bf16: %zu elements do not split evenly over %d ranks "
            "(allocate dist_padded_size(n))", n_padded, d->world);
    if (!d->use_nccl) return;
#ifdef ENABLE_NCCL
    size_t S = n_padded / (size_t)d->world;
    int slot = dist_timing_slot_(d);
    cuda_check(cudaEventRecord(d->t_begin[slot], s));
    nccl_check(ncclAllGather(flat_padded + (size_t)d->rank * S, flat_padded, S, ncclBfloat16, d->comm, s));
    cuda_check(cudaEventRecord(d->t_end[slot], s));
#endif
}
