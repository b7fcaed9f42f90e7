/* comm_nccl.c: the communicator for device buffers: NCCL on the context's communication
 * stream. An AllReduce waits for an event recorded on the compute stream when its bucket
 * became ready, runs while backward continues, and join() makes the compute stream (the
 * optimizer) wait for the last one. The host polls an event instead of blocking in CUDA, so
 * a peer that died or hangs is seen: ncclCommGetAsyncError, or the timeout, after which
 * the communicator is aborted and the job stopped with a report. Part of libdpt_cuda.so: the
 * library's dpt_comm_nccl_new (cuda_plugin.c) loads the plugin and calls
 * dpt_cuda_plugin_nccl_new. */
#include "comm.h"

#include <stdlib.h>

#include "error.h"
#include "log.h"

dpt_comm *dpt_cuda_plugin_nccl_new(dpt_ctx *ctx, dpt_comm *host, dpt_error *err);

#if DPT_CUDA && DPT_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include "cuda_check.h"
#include "cuda_util.h"

typedef struct nccl_impl {
    ncclComm_t nccl;
    dpt_comm *host; /* host-side collectives; not owned */
    dpt_ctx *ctx;
    int device;
    cudaStream_t compute, stream;
    cudaEvent_t ready;        /* compute -> communication: the bucket's gradients are final */
    cudaEvent_t done;         /* communication -> compute: every reduction so far has finished */
    cudaEvent_t *start, *end; /* per reduction since the last join (timing) */
    int nlaunch, cap;
    uint16_t *wire; /* wire16: the largest bucket in 16 bits, on the device (NULL: fp32) */
    bool bf16;
    double timeout_s; /* the host communicator's, kept for the end (it may be gone by then) */
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

/* A call on the communicator: its ncclInProgress waited out, then NCCL's name for the
 * result and its last-error detail for this communicator (cuda_check.h's family). */
#define CHECK_NCCL_COMM(im, call)                                                                            \
    do {                                                                                                     \
        ncclResult_t nccl_rc_ =                                                                              \
            settle((im)->nccl, (call), (im)->host->timeout_s > 0 ? (im)->host->timeout_s : 300);             \
        if (nccl_rc_ != ncclSuccess)                                                                         \
            dpt_library_failed_at(__FILE__, __LINE__, "%s failed: NCCL %s (%s)" DPT_NCCL_HINT, #call,        \
                                  nccl_rc_ == ncclInProgress                                                 \
                                      ? "not done within [distributed] comm_timeout_s"                       \
                                      : ncclGetErrorString(nccl_rc_),                                        \
                                  ncclGetLastError((im)->nccl));                                             \
    } while (0)

/* The bucket's writer is the compute stream: order the communication stream after it. */
static void after_compute(nccl_impl *im)
{
    CHECK_CUDA(cudaSetDevice(im->device));
    CHECK_CUDA(cudaEventRecord(im->ready, im->compute));
    CHECK_CUDA(cudaStreamWaitEvent(im->stream, im->ready, 0));
}

static void before_compute(nccl_impl *im)
{
    CHECK_CUDA(cudaEventRecord(im->done, im->stream));
    CHECK_CUDA(cudaStreamWaitEvent(im->compute, im->done, 0));
}

static void nccl_reduce_avg_async(dpt_comm *comm, float *buf, int64_t n)
{
    nccl_impl *im = impl_of(comm);
    if (im->nlaunch == im->cap) {
        int cap = im->cap ? 2 * im->cap : 16;
        im->start = realloc(im->start, (size_t)cap * sizeof *im->start);
        im->end = realloc(im->end, (size_t)cap * sizeof *im->end);
        if (!im->start || !im->end) dpt_fatal("out of host memory for NCCL events");
        for (int i = im->cap; i < cap; i++) {
            CHECK_CUDA(cudaEventCreate(&im->start[i]));
            CHECK_CUDA(cudaEventCreate(&im->end[i]));
        }
        im->cap = cap;
    }
    after_compute(im);
    CHECK_CUDA(cudaEventRecord(im->start[im->nlaunch], im->stream));
    if (im->wire) { /* one staging buffer: the stream runs the buckets one after another */
        dpt_cuda_f32_to_h16(im->stream, im->wire, buf, n, im->bf16);
        CHECK_NCCL_COMM(im, ncclAllReduce(im->wire, im->wire, (size_t)n, im->bf16 ? ncclBfloat16 : ncclFloat16,
                                          ncclSum, im->nccl, im->stream));
        dpt_cuda_h16_to_f32(im->stream, buf, im->wire, n, im->bf16, 1.0f / (float)comm->size);
    } else {
        CHECK_NCCL_COMM(im, ncclAllReduce(buf, buf, (size_t)n, ncclFloat, ncclAvg, im->nccl, im->stream));
    }
    CHECK_CUDA(cudaEventRecord(im->end[im->nlaunch], im->stream));
    im->nlaunch++;
}

static bool nccl_join(dpt_comm *comm, double timeout_s, double *comm_s)
{
    nccl_impl *im = impl_of(comm);
    CHECK_CUDA(cudaSetDevice(im->device));
    before_compute(im);
    double deadline = dpt_now_s() + timeout_s;
    for (;;) {
        cudaError_t q = cudaEventQuery(im->done);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady)
            dpt_abort_job("rank %d: waiting for NCCL: %s", comm->rank, cudaGetErrorString(q));
        ncclResult_t async = ncclSuccess;
        CHECK_NCCL_COMM(im, ncclCommGetAsyncError(im->nccl, &async));
        if (async != ncclSuccess && async != ncclInProgress) {
            ncclCommAbort(im->nccl);
            dpt_abort_job("rank %d: NCCL reported an asynchronous error: %s\n"
                          "HINT: another rank may have stopped; NCCL_DEBUG=INFO shows more",
                          comm->rank, ncclGetErrorString(async));
        }
        if (dpt_now_s() > deadline) {
            ncclCommAbort(im->nccl); /* frees the GPU from kernels waiting for a peer */
            im->nccl = NULL;
            return false;
        }
        dpt_sleep_ms(0.02);
    }
    double total_ms = 0.0;
    for (int i = 0; i < im->nlaunch; i++) {
        float ms = 0.0f;
        CHECK_CUDA(cudaEventElapsedTime(&ms, im->start[i], im->end[i]));
        total_ms += ms;
    }
    im->nlaunch = 0;
    if (comm_s) *comm_s = total_ms / 1e3;
    return true;
}

/* The blocking calls keep the same stream order: the caller's later kernels see the result. */
static void nccl_allreduce_f32(dpt_comm *comm, float *buf, int64_t n, const char *what)
{
    nccl_impl *im = impl_of(comm);
    after_compute(im);
    CHECK_NCCL_COMM(im, ncclAllReduce(buf, buf, (size_t)n, ncclFloat, ncclSum, im->nccl, im->stream));
    before_compute(im);
}

static void nccl_broadcast(dpt_comm *comm, void *buf, size_t bytes, int root, const char *what)
{
    nccl_impl *im = impl_of(comm);
    after_compute(im);
    CHECK_NCCL_COMM(im, ncclBroadcast(buf, buf, bytes, ncclInt8, root, im->nccl, im->stream));
    before_compute(im);
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
    for (int i = 0; i < im->cap; i++) {
        cudaEventDestroy(im->start[i]);
        cudaEventDestroy(im->end[i]);
    }
    cudaEventDestroy(im->ready);
    cudaEventDestroy(im->done);
    free(im->start);
    free(im->end);
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
    CHECK_CUDA(cudaEventCreateWithFlags(&im->done, cudaEventDisableTiming));
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
