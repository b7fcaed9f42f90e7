/* comm.h: the communicator interface. comm_mpi.c carries CPU buffers over MPI, comm_threads.c
 * carries them between threads of one process (DataParallel), comm_nccl.c carries device
 * buffers over NCCL and hands host-side collectives to the host communicator it wraps. The
 * reducer sees only this table. */
#ifndef DPT_COMM_H
#define DPT_COMM_H

#include "dpt.h"

typedef struct dpt_comm_ops {
    const char *name;
    /* In-place sum over all ranks; every rank gets the result. `what` names the collective for
     * the timeout report (e.g. "evaluation sums"); backends keep it only while it runs. */
    void (*allreduce_f32)(dpt_comm *comm, float *buf, int64_t n, const char *what);
    void (*allreduce_f64)(dpt_comm *comm, double *buf, int64_t n, const char *what);
    /* The same over 16-bit floats (bf16 or IEEE fp16, runtime/half.h), summed in float and
     * rounded to nearest even after each addition. NULL: not offered. */
    void (*allreduce_h16)(dpt_comm *comm, uint16_t *buf, int64_t n, bool bf16, const char *what);
    /* Device communicators: from now on reduce_avg_async carries its buckets (up to `most`
     * floats) in 16 bits: converted on the communication stream (nearest even), summed by the
     * library in that type, fp32 again before the average. NULL: not offered. */
    bool (*wire16)(dpt_comm *comm, int64_t most, bool bf16, dpt_error *err);
    /* ZeRO's halves of an AllReduce, in place over buf, rank q's range being [displs[q],
     * displs[q + 1]) (displs: size + 1 ascending offsets, 0 first, n last): reduce_scatter
     * leaves the sum over ranks of this rank's range there (the rest of buf is then undefined);
     * allgatherv copies every rank's range of its buf into everyone's. NULL: not offered (the
     * dpt_comm_ wrappers fall back on an AllReduce, on broadcasts, on the all-gather). */
    void (*reduce_scatter_f32)(dpt_comm *comm, float *buf, const int64_t *displs, const char *what);
    /* The same over 16-bit floats, summed as allreduce_h16 sums (the same bits where the library
     * adds in the AllReduce's order). NULL: not offered. */
    void (*reduce_scatter_h16)(dpt_comm *comm, uint16_t *buf, const int64_t *displs, bool bf16, const char *what);
    void (*allgatherv_f32)(dpt_comm *comm, float *buf, const int64_t *displs, const char *what);
    /* The same into root's buf only (the others' buf is left as it was). */
    void (*gatherv_f32)(dpt_comm *comm, float *buf, const int64_t *displs, int root, const char *what);
    void (*broadcast)(dpt_comm *comm, void *buf, size_t bytes, int root, const char *what);
    /* recv holds size * bytes: rank r's send lands at recv + r * bytes. */
    void (*allgather)(dpt_comm *comm, const void *send, void *recv, size_t bytes, const char *what);
    void (*barrier)(dpt_comm *comm, const char *what);
    /* Send `bytes` to rank peer and receive as many from it (both call it, with each other as
     * peer, at the same point; send and recv do not overlap). NULL: not offered. */
    void (*sendrecv)(dpt_comm *comm, const void *send, void *recv, size_t bytes, int peer, const char *what);
    void (*free)(dpt_comm *comm);
    /* A new communicator over the same ranks whose collectives never pair with this one's:
     * for a second thread of each rank that issues collectives of its own (the DDP
     * communication thread, while the main thread runs SyncBN, evaluation and control
     * collectives). Collective: every rank calls it at the same point, from one thread. It
     * takes this one's timeout and delay. NULL: not offered. */
    dpt_comm *(*dup)(dpt_comm *comm, const char *purpose);
    /* Device communicators (NCCL) enqueue instead of blocking; host ones leave these NULL
     * and the DDP engine drives them from its communication thread.
     * reduce_avg_async: average buf over ranks on the communication stream, ordered after
     * the compute stream's work so far (the gradients in buf are final).
     * join: the compute stream's later work waits for every reduction enqueued since the
     * last join; the host does not wait. The communicator watches them on a thread of its own
     * and ends the job, naming `what`, on an asynchronous error or when nothing finishes for
     * its timeout. *comm_s and *exposed_s (either may be NULL) get the reductions' time on the
     * communication stream and the compute stream's wait for them, of the latest join whose
     * work has finished (a step or more late; 0 before the first). */
    void (*reduce_avg_async)(dpt_comm *comm, float *buf, int64_t n);
    void (*join)(dpt_comm *comm, const char *what, double *comm_s, double *exposed_s);
} dpt_comm_ops;

struct dpt_comm {
    const dpt_comm_ops *ops;
    int rank, size;
    double delay_ms_per_mb; /* benchmarks only: a slow network, latency per MiB AllReduced */
    /* A host collective not finished in this time ends the job with a report naming it and
     * this rank's recent collectives (0 = wait forever). [distributed] comm_timeout_s. */
    double timeout_s;
    /* Set while this rank's compute thread has nothing to do but wait for this communicator's
     * collectives (DDP after backward): a waiting thread then yields its core instead of
     * napping, since nothing of its own rank needs it (other ranks' threads on the same core
     * still get it: a yield, not a spin). Read and written with __atomic builtins. */
    int hurry;
    void *impl;
};

/* The collectives, called through these (never through ops at call sites). */
void dpt_comm_allreduce_f32(dpt_comm *comm, float *buf, int64_t n, const char *what);
void dpt_comm_allreduce_f64(dpt_comm *comm, double *buf, int64_t n, const char *what);
void dpt_comm_allreduce_h16(dpt_comm *comm, uint16_t *buf, int64_t n, bool bf16, const char *what);
void dpt_comm_reduce_scatter_f32(dpt_comm *comm, float *buf, const int64_t *displs, const char *what);
void dpt_comm_reduce_scatter_h16(dpt_comm *comm, uint16_t *buf, const int64_t *displs, bool bf16, const char *what);
void dpt_comm_allgatherv_f32(dpt_comm *comm, float *buf, const int64_t *displs, const char *what);
void dpt_comm_gatherv_f32(dpt_comm *comm, float *buf, const int64_t *displs, int root, const char *what);
void dpt_comm_broadcast(dpt_comm *comm, void *buf, size_t bytes, int root, const char *what);
void dpt_comm_allgather(dpt_comm *comm, const void *send, void *recv, size_t bytes, const char *what);
void dpt_comm_barrier_named(dpt_comm *comm, const char *what);
void dpt_comm_sendrecv(dpt_comm *comm, const void *send, void *recv, size_t bytes, int peer, const char *what);

dpt_comm *dpt_comm_mpi_new(void); /* over MPI_COMM_WORLD */
/* The MPI library gives MPI_THREAD_SERIALIZED only: every MPI call of the communicators is
 * made under one process-wide lock (two threads of a rank call MPI). */
void dpt_comm_mpi_serialize_calls(bool serialize);

/* NCCL over the same ranks as `host` (MPI or a thread group), for buffers on ctx's CUDA
 * device: rank 0 creates the unique id and `host` broadcasts it. Host-side collectives
 * (allreduce_f64, allgather, barrier) go to `host`, which the caller keeps and frees after
 * this one. NULL with err filled when NCCL cannot start (or the build has none). */
dpt_comm *dpt_comm_nccl_new(dpt_ctx *ctx, dpt_comm *host, dpt_error *err);

/* A group of `size` thread ranks in one process; each thread takes its own comm by rank. */
typedef struct dpt_thread_group dpt_thread_group;
dpt_thread_group *dpt_thread_group_new(int size);
dpt_comm *dpt_comm_thread_new(dpt_thread_group *group, int rank);
void dpt_thread_group_free(dpt_thread_group *group);

#endif
