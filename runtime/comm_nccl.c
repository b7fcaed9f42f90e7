/* comm_nccl.c: the communicator for device buffers: NCCL on the context's communication
 * stream. An AllReduce waits for an event recorded on the compute stream when its bucket
 * became ready and runs while backward continues; join() makes the compute stream (the
 * optimizer) wait for the last one and returns at once: the host never waits for the
 * reductions. A watchdog thread (watchdog.c) polls what was enqueued, in order, and ends the
 * job when NCCL reports an asynchronous error (a peer died) or when nothing finishes for the
 * job's timeout (a peer hangs): the communicator is aborted, which frees the GPU from kernels
 * waiting for a peer, and the report names the collective. Part of libdpt_cuda.so: the
 * library's dpt_comm_nccl_new (cuda_plugin.c) loads the plugin and calls
 * dpt_cuda_plugin_nccl_new. */
#include "comm.h"

#include <stdlib.h>

#include "error.h"
#include "log.h"

dpt_comm *dpt_cuda_plugin_nccl_new(dpt_ctx *ctx, dpt_comm *host, dpt_error *err);

#if DPT_CUDA && DPT_NCCL

#include <pthread.h>
#include <stdio.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "cuda_check.h"
#include "cuda_util.h"
#include "watchdog.h"

/* Records the host may have enqueued and the watchdog not yet seen finish: beyond that the
 * host waits for the oldest (the host runs at most a few steps ahead of the device). */
enum { WATCH_RECORDS = 8 };

/* One watched stretch of the communication stream: the collectives enqueued since the record
 * before, ending at `done`. A join's record also holds its AllReduces' timing and the compute
 * stream's wait for them (between waited_from and resumed). */
typedef struct watch_rec {
    cudaEvent_t done;                 /* communication stream: this record's collectives finished */
    cudaEvent_t waited_from, resumed; /* compute stream, a join's: before and after its wait on done */
    cudaEvent_t *start, *end;         /* per AllReduce of a join's record (timing) */
    int nlaunch, cap;
    bool join;
    char what[160]; /* the collective(s), for the report */
    struct watch_rec *next_free;
} watch_rec;

typedef struct nccl_impl {
    ncclComm_t nccl;
    dpt_comm *host; /* host-side collectives; not owned */
    dpt_ctx *ctx;
    int device;
    cudaStream_t compute, stream;
    cudaEvent_t ready; /* compute -> communication: the bucket's gradients are final */
    uint16_t *wire;    /* wire16: the largest bucket in 16 bits, on the device (NULL: fp32) */
    bool bf16;
    double timeout_s; /* the host communicator's, kept for the end (it may be gone by then) */
    /* NCCL calls on this communicator: the host thread's, and the watchdog's error polls
     * (NCCL lets one thread at a time operate a communicator) */
    pthread_mutex_t lock;
    dpt_watchdog *watchdog;
    watch_rec recs[WATCH_RECORDS];
    watch_rec *cur; /* collecting this step's AllReduces (host thread), NULL: none yet */
    /* the free records and the latest finished join's times, shared with the watchdog */
    pthread_mutex_t pool_mu;
    watch_rec *free_recs;
    double last_comm_s, last_exposed_s;
} nccl_impl;

static nccl_impl *impl_of(dpt_comm *comm)
{
    return comm->impl;
}

/* The communicator is non-blocking (so that its start-up can time out): any call may answer
 * ncclInProgress, and the communicator's state must settle before the next one. Poll it, up
 * to timeout_s; ncclInProgress returned means it did not settle in time. */
static ncclResult_t settle(ncclComm_t comm, ncclResult_t rc, double timeout_s)
{
    double deadline = dpt_now_s() + timeout_s;
    while (rc == ncclInProgress && dpt_now_s() < deadline) {
        if (ncclCommGetAsyncError(comm, &rc) != ncclSuccess) break;
        if (rc == ncclInProgress) dpt_sleep_ms(0.05);
    }
    return rc;
}

/* A call on the communicator, under its lock: its ncclInProgress waited out, then NCCL's name
 * for the result and its last-error detail for this communicator (cuda_check.h's family). */
#define CHECK_NCCL_COMM(im, call)                                                                            \
    do {                                                                                                     \
        pthread_mutex_lock(&(im)->lock);                                                                     \
        ncclResult_t nccl_rc_ = settle((im)->nccl, (call), (im)->timeout_s);                                 \
        pthread_mutex_unlock(&(im)->lock);                                                                   \
        if (nccl_rc_ != ncclSuccess)                                                                         \
            dpt_library_failed_at(__FILE__, __LINE__, "%s failed: NCCL %s (%s)" DPT_NCCL_HINT, #call,        \
                                  nccl_rc_ == ncclInProgress                                                 \
                                      ? "not done within [distributed] comm_timeout_s"                       \
                                      : ncclGetErrorString(nccl_rc_),                                        \
                                  ncclGetLastError((im)->nccl));                                             \
    } while (0)

/* ---------------------------------------------------------------- the watchdog's side */

static void watch_start(void *user)
{
    nccl_impl *im = user;
    cudaSetDevice(im->device); /* events are queried on the device they belong to */
}

static dpt_watch_state watch_poll(void *user, void *item, char *why, size_t why_size)
{
    nccl_impl *im = user;
    watch_rec *rec = item;
    /* a join's record is over when the compute stream has passed its wait (its times are then
     * readable), which implies done */
    cudaError_t q = cudaEventQuery(rec->join ? rec->resumed : rec->done);
    if (q == cudaSuccess) return DPT_WATCH_DONE;
    if (q != cudaErrorNotReady) {
        snprintf(why, why_size, "CUDA: %s", cudaGetErrorString(q));
        return DPT_WATCH_FAILED;
    }
    ncclResult_t async = ncclSuccess;
    if (pthread_mutex_trylock(&im->lock) == 0) { /* the host thread is not in an NCCL call */
        if (ncclCommGetAsyncError(im->nccl, &async) != ncclSuccess) async = ncclSuccess;
        pthread_mutex_unlock(&im->lock);
    }
    if (async != ncclSuccess && async != ncclInProgress) {
        snprintf(why, why_size, "NCCL reported an asynchronous error: %s", ncclGetErrorString(async));
        return DPT_WATCH_FAILED;
    }
    return DPT_WATCH_PENDING;
}

static void watch_finished(void *user, void *item)
{
    nccl_impl *im = user;
    watch_rec *rec = item;
    double comm_ms = 0.0;
    float exposed_ms = 0.0f;
    for (int i = 0; i < rec->nlaunch; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, rec->start[i], rec->end[i]) == cudaSuccess) comm_ms += ms;
    }
    if (rec->join && cudaEventElapsedTime(&exposed_ms, rec->waited_from, rec->resumed) != cudaSuccess) exposed_ms = 0;
    pthread_mutex_lock(&im->pool_mu);
    if (rec->join) im->last_comm_s = comm_ms / 1e3, im->last_exposed_s = (double)exposed_ms / 1e3;
    rec->nlaunch = 0;
    rec->join = false;
    rec->next_free = im->free_recs;
    im->free_recs = rec;
    pthread_mutex_unlock(&im->pool_mu);
}

static void watch_stuck(void *user, void *item, const char *why, double waited_s)
{
    nccl_impl *im = user;
    watch_rec *rec = item;
    ncclCommAbort(im->nccl); /* frees the GPU from kernels waiting for a peer */
    if (why)
        dpt_abort_job("rank %d of %d: waiting for %s: %s\nHINT: another rank may have stopped; NCCL_DEBUG=INFO "
                      "shows more",
                      im->host->rank, im->host->size, rec->what, why);
    dpt_abort_job("rank %d of %d: collective timed out after %.0f s: %s ([distributed] comm_timeout_s = %.0f s); "
                  "the NCCL communicator was aborted\nHINT: another rank stopped or is much slower; raise "
                  "[distributed] comm_timeout_s if steps are legitimately this slow; NCCL_DEBUG=INFO shows where "
                  "NCCL waits",
                  im->host->rank, im->host->size, waited_s, rec->what, im->timeout_s);
}

static const dpt_watchdog_ops watch_ops = {
    .start = watch_start, .poll = watch_poll, .finished = watch_finished, .stuck = watch_stuck};

/* ---------------------------------------------------------------- the host's side */

/* A free record; with none free, the host waits for the watchdog to hand one back. */
static watch_rec *take_rec(nccl_impl *im)
{
    for (;;) {
        pthread_mutex_lock(&im->pool_mu);
        watch_rec *rec = im->free_recs;
        if (rec) im->free_recs = rec->next_free;
        pthread_mutex_unlock(&im->pool_mu);
        if (rec) return rec;
        /* every record but the host's own is queued: wait until one comes back */
        int queued = dpt_watchdog_queued(im->watchdog);
        if (queued == 0) dpt_fatal("no NCCL watch record is free and none is queued");
        if (!dpt_watchdog_wait(im->watchdog, queued - 1)) dpt_fatal("the NCCL watchdog stopped");
    }
}

/* After the collectives of rec on the communication stream: rec ends there, and the compute
 * stream's later work waits for it. */
static void end_record(nccl_impl *im, watch_rec *rec, const char *what)
{
    snprintf(rec->what, sizeof rec->what, "%s", what);
    CHECK_CUDA(cudaEventRecord(rec->done, im->stream));
    if (rec->join) CHECK_CUDA(cudaEventRecord(rec->waited_from, im->compute));
    CHECK_CUDA(cudaStreamWaitEvent(im->compute, rec->done, 0));
    if (rec->join) CHECK_CUDA(cudaEventRecord(rec->resumed, im->compute));
    dpt_watchdog_watch(im->watchdog, rec);
}

/* The bucket's writer is the compute stream: order the communication stream after it. */
static void after_compute(nccl_impl *im)
{
    CHECK_CUDA(cudaSetDevice(im->device));
    CHECK_CUDA(cudaEventRecord(im->ready, im->compute));
    CHECK_CUDA(cudaStreamWaitEvent(im->stream, im->ready, 0));
}

static void nccl_reduce_avg_async(dpt_comm *comm, float *buf, int64_t n)
{
    nccl_impl *im = impl_of(comm);
    if (!im->cur) im->cur = take_rec(im);
    watch_rec *rec = im->cur;
    if (rec->nlaunch == rec->cap) {
        int cap = rec->cap ? 2 * rec->cap : 16;
        rec->start = realloc(rec->start, (size_t)cap * sizeof *rec->start);
        rec->end = realloc(rec->end, (size_t)cap * sizeof *rec->end);
        if (!rec->start || !rec->end) dpt_fatal("out of host memory for NCCL events");
        for (int i = rec->cap; i < cap; i++) {
            CHECK_CUDA(cudaEventCreate(&rec->start[i]));
            CHECK_CUDA(cudaEventCreate(&rec->end[i]));
        }
        rec->cap = cap;
    }
    after_compute(im);
    CHECK_CUDA(cudaEventRecord(rec->start[rec->nlaunch], im->stream));
    if (im->wire) { /* one staging buffer: the stream runs the buckets one after another */
        dpt_cuda_f32_to_h16(im->stream, im->wire, buf, n, im->bf16);
        CHECK_NCCL_COMM(im, ncclAllReduce(im->wire, im->wire, (size_t)n, im->bf16 ? ncclBfloat16 : ncclFloat16,
                                          ncclSum, im->nccl, im->stream));
        dpt_cuda_h16_to_f32(im->stream, buf, im->wire, n, im->bf16, 1.0f / (float)comm->size);
    } else {
        CHECK_NCCL_COMM(im, ncclAllReduce(buf, buf, (size_t)n, ncclFloat, ncclAvg, im->nccl, im->stream));
    }
    CHECK_CUDA(cudaEventRecord(rec->end[rec->nlaunch], im->stream));
    rec->nlaunch++;
}

static void nccl_join(dpt_comm *comm, const char *what, double *comm_s, double *exposed_s)
{
    nccl_impl *im = impl_of(comm);
    CHECK_CUDA(cudaSetDevice(im->device));
    watch_rec *rec = im->cur ? im->cur : take_rec(im);
    im->cur = NULL;
    rec->join = true;
    end_record(im, rec, what);
    pthread_mutex_lock(&im->pool_mu);
    if (comm_s) *comm_s = im->last_comm_s;
    if (exposed_s) *exposed_s = im->last_exposed_s;
    pthread_mutex_unlock(&im->pool_mu);
}

/* The blocking calls keep the same stream order: the caller's later kernels see the result. */
static void nccl_allreduce_f32(dpt_comm *comm, float *buf, int64_t n, const char *what)
{
    nccl_impl *im = impl_of(comm);
    after_compute(im);
    CHECK_NCCL_COMM(im, ncclAllReduce(buf, buf, (size_t)n, ncclFloat, ncclSum, im->nccl, im->stream));
    end_record(im, take_rec(im), what ? what : "an AllReduce");
}

static void nccl_broadcast(dpt_comm *comm, void *buf, size_t bytes, int root, const char *what)
{
    nccl_impl *im = impl_of(comm);
    after_compute(im);
    CHECK_NCCL_COMM(im, ncclBroadcast(buf, buf, bytes, ncclInt8, root, im->nccl, im->stream));
    end_record(im, take_rec(im), what ? what : "a broadcast");
    CHECK_CUDA(cudaStreamSynchronize(im->compute));
}

static void nccl_allreduce_f64(dpt_comm *comm, double *buf, int64_t n, const char *what)
{
    dpt_comm_allreduce_f64(impl_of(comm)->host, buf, n, what);
}

static void nccl_allgather(dpt_comm *comm, const void *send, void *recv, size_t bytes, const char *what)
{
    dpt_comm_allgather(impl_of(comm)->host, send, recv, bytes, what);
}

static void nccl_barrier(dpt_comm *comm, const char *what)
{
    dpt_comm_barrier_named(impl_of(comm)->host, what);
}

static bool nccl_wire16(dpt_comm *comm, int64_t most, bool bf16, dpt_error *err)
{
    nccl_impl *im = impl_of(comm);
    CHECK_CUDA(cudaSetDevice(im->device));
    if (im->wire) cudaFree(im->wire), im->wire = NULL;
    cudaError_t rc = cudaMalloc((void **)&im->wire, (size_t)(most > 0 ? most : 1) * sizeof *im->wire);
    if (rc != cudaSuccess)
        return dpt_errorf(err, "no device memory for the 16-bit gradient buffer (%lld values): %s",
                          (long long)most, cudaGetErrorString(rc));
    im->bf16 = bf16;
    return true;
}

static void nccl_free(dpt_comm *comm)
{
    nccl_impl *im = impl_of(comm);
    cudaSetDevice(im->device);
    /* AllReduces enqueued and never joined (a run ending mid-step) are watched like the rest:
     * the watchdog is freed once every record has finished, or ends the job when one does not */
    if (im->cur && im->cur->nlaunch) {
        im->cur->join = true;
        end_record(im, im->cur, "the last step's AllReduces");
        im->cur = NULL;
    }
    dpt_watchdog_free(im->watchdog);
    cudaStreamSynchronize(im->stream);
    if (im->wire) cudaFree(im->wire);
    /* A non-blocking communicator is finalized first (its operations flushed, every rank
     * quiescent: NCCL's order), polled up to the job's timeout; one that does not settle, a
     * peer gone, is aborted rather than waited on. */
    if (im->nccl) {
        ncclResult_t rc = settle(im->nccl, ncclCommFinalize(im->nccl), im->timeout_s);
        if (rc == ncclSuccess)
            ncclCommDestroy(im->nccl);
        else
            ncclCommAbort(im->nccl);
    }
    for (int r = 0; r < WATCH_RECORDS; r++) {
        watch_rec *rec = &im->recs[r];
        for (int i = 0; i < rec->cap; i++) {
            cudaEventDestroy(rec->start[i]);
            cudaEventDestroy(rec->end[i]);
        }
        free(rec->start);
        free(rec->end);
        cudaEventDestroy(rec->done);
        cudaEventDestroy(rec->waited_from);
        cudaEventDestroy(rec->resumed);
    }
    cudaEventDestroy(im->ready);
    pthread_mutex_destroy(&im->lock);
    pthread_mutex_destroy(&im->pool_mu);
    free(im);
    free(comm);
}

static const dpt_comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce_f32 = nccl_allreduce_f32,
    .allreduce_f64 = nccl_allreduce_f64,
    .broadcast = nccl_broadcast,
    .allgather = nccl_allgather,
    .barrier = nccl_barrier,
    .free = nccl_free,
    .reduce_avg_async = nccl_reduce_avg_async,
    .join = nccl_join,
    .wire16 = nccl_wire16,
};

dpt_comm *dpt_cuda_plugin_nccl_new(dpt_ctx *ctx, dpt_comm *host, dpt_error *err)
{
    if (dpt_ctx_device(ctx).kind != DPT_DEVICE_CUDA) {
        dpt_errorf(err, "the NCCL communicator needs a CUDA context");
        return NULL;
    }
    nccl_impl *im = calloc(1, sizeof *im);
    dpt_comm *comm = calloc(1, sizeof *comm);
    if (!im || !comm) dpt_fatal("out of host memory for a communicator");
    im->host = host;
    im->ctx = ctx;
    im->device = dpt_cuda_device_of(ctx);
    im->compute = dpt_cuda_stream(ctx, DPT_STREAM_COMPUTE);
    im->stream = dpt_cuda_stream(ctx, DPT_STREAM_COMM);
    ncclUniqueId id;
    ncclResult_t rc = ncclSuccess;
    if (host->rank == 0) rc = ncclGetUniqueId(&id);
    /* Every rank must take part in the broadcast even when rank 0 failed: send the verdict. */
    double ok = rc == ncclSuccess ? 1.0 : 0.0;
    dpt_comm_allreduce_f64(host, &ok, 1, "NCCL start-up: rank 0's unique id verdict");
    if (ok < host->size) {
        dpt_errorf(err, "rank 0 could not create the NCCL unique id: %s", ncclGetErrorString(rc));
        free(im), free(comm);
        return NULL;
    }
    dpt_comm_broadcast(host, &id, sizeof id, 0, "NCCL start-up: unique id broadcast");
    CHECK_CUDA(cudaSetDevice(im->device));
    /* Non-blocking, polled with the job's timeout: a rank that died before the first step (or
     * never came) ends the job with a message instead of hanging every other rank here. */
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    double timeout_s = host->timeout_s > 0 ? host->timeout_s : 300;
    im->timeout_s = timeout_s;
    rc = ncclCommInitRankConfig(&im->nccl, host->size, id, host->rank, &config);
    if (rc == ncclInProgress) rc = settle(im->nccl, rc, timeout_s);
    if (rc == ncclInProgress) {
        ncclCommAbort(im->nccl);
        dpt_errorf(
            err,
            "rank %d of %d: NCCL did not start on cuda:%d within %.0f s ([distributed] comm_timeout_s)\n"
            "HINT: another rank stopped or never started; NCCL_DEBUG=INFO shows where NCCL waits",
            host->rank, host->size, im->device, timeout_s);
        free(im), free(comm);
        return NULL;
    }
    if (rc != ncclSuccess) {
        dpt_errorf(err,
                   "rank %d of %d: NCCL could not start on cuda:%d: %s (%s)\nHINT: one rank per GPU (two "
                   "ranks may not share a device); NCCL_DEBUG=INFO shows why",
                   host->rank, host->size, im->device, ncclGetErrorString(rc), ncclGetLastError(NULL));
        free(im), free(comm);
        return NULL;
    }
    CHECK_CUDA(cudaEventCreateWithFlags(&im->ready, cudaEventDisableTiming));
    pthread_mutex_init(&im->lock, NULL);
    pthread_mutex_init(&im->pool_mu, NULL);
    for (int r = WATCH_RECORDS - 1; r >= 0; r--) {
        watch_rec *rec = &im->recs[r];
        CHECK_CUDA(cudaEventCreateWithFlags(&rec->done, cudaEventDisableTiming));
        CHECK_CUDA(cudaEventCreate(&rec->waited_from)); /* timed: the compute stream's wait */
        CHECK_CUDA(cudaEventCreate(&rec->resumed));
        rec->next_free = im->free_recs;
        im->free_recs = rec;
    }
    /* polls every 0.2 ms while something is enqueued: a step's collectives take milliseconds,
     * and the thread sleeps on a condition variable between steps' records */
    im->watchdog = dpt_watchdog_new(&watch_ops, im, timeout_s, 0.2);
    comm->ops = &nccl_ops;
    comm->rank = host->rank;
    comm->size = host->size;
    comm->impl = im;
    return comm;
}

#else /* a plugin built without NCCL */

dpt_comm *dpt_cuda_plugin_nccl_new(dpt_ctx *ctx, dpt_comm *host, dpt_error *err)
{
    (void)ctx, (void)host;
    dpt_errorf(err, "this build has no NCCL, which GPU buffers across ranks need\n"
                    "HINT: install NCCL with the CUDA toolkit and rebuild (make prints nccl=yes), or set "
                    "[train] device = cpu");
    return NULL;
}

#endif
