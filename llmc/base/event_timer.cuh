// event_timer.cuh: GPU time per bucket from a pool of CUDA event pairs recorded on one stream, with no host
// synchronisation while recording: a pair brackets a piece of work and carries the bucket it counts towards; the
// times are read (harvested) once the stream has been synchronized.
// defines: EventTimer, event_timer_init(), event_timer_free(), event_timer_begin(), event_timer_end(),
//          event_timer_harvest(), event_timer_take()
#pragma once
#include "llmc/base/cuda_common.cuh"

#define EVENT_TIMER_MAX_BUCKETS 256   // a bucket is kept in one byte per pair

typedef struct {
    cudaEvent_t* events;   // pairs: [2i] before, [2i + 1] after
    uint8_t* bucket;       // per pair
    int count, capacity;   // events recorded since the last harvest, events in the pool
    int nbuckets;
    float ms[EVENT_TIMER_MAX_BUCKETS];   // harvested so far, per bucket
    cudaStream_t stream;
} EventTimer;

// A pool of `pairs` event pairs (once full, further work goes untimed until the next harvest).
static void event_timer_init(EventTimer* t, int pairs, int nbuckets, cudaStream_t stream) {
    fail_if(nbuckets > EVENT_TIMER_MAX_BUCKETS, "internal: %d timer buckets", nbuckets);
    memset(t, 0, sizeof(*t));
    t->capacity = 2 * pairs;
    t->nbuckets = nbuckets;
    t->stream = stream;
    t->events = (cudaEvent_t*)xmalloc(t->capacity * sizeof(cudaEvent_t));
    t->bucket = (uint8_t*)xmalloc(pairs);
    for (int i = 0; i < t->capacity; i++) cuda_check(cudaEventCreate(&t->events[i]));
}

static void event_timer_free(EventTimer* t) {
    for (int i = 0; i < t->capacity; i++) cudaEventDestroy(t->events[i]);
    free(t->events);
    free(t->bucket);
    memset(t, 0, sizeof(*t));
}

// Opens a pair; returns whether it did (0 when there is no pool or it is full), to hand to event_timer_end.
static int event_timer_begin(EventTimer* t) {
    if (!t->events || t->count + 2 > t->capacity) return 0;
    cuda_check(cudaEventRecord(t->events[t->count], t->stream));
    return 1;
}

static void event_timer_end(EventTimer* t, int opened, int bucket) {
    if (!opened) return;
    cuda_check(cudaEventRecord(t->events[t->count + 1], t->stream));
    t->bucket[t->count / 2] = (uint8_t)bucket;
    t->count += 2;
}

// Adds every recorded pair's time to its bucket and empties the pool. Call once the stream is synchronized.
static void event_timer_harvest(EventTimer* t) {
    for (int i = 0; i + 1 < t->count; i += 2) {
        float ms = 0.0f;
        cuda_check(cudaEventElapsedTime(&ms, t->events[i], t->events[i + 1]));
        t->ms[t->bucket[i / 2]] += ms;
    }
    t->count = 0;
}

// Milliseconds per bucket since the last take (out may be NULL: drop them). Call once the stream is synchronized.
static void event_timer_take(EventTimer* t, float* out) {
    event_timer_harvest(t);
    for (int b = 0; b < t->nbuckets; b++) {
        if (out) out[b] = t->ms[b];
        t->ms[b] = 0.0f;
    }
}
