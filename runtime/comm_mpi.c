/* comm_mpi.c: communicators over MPI for host buffers (not in an MPI=0 build): one over
 * MPI_COMM_WORLD for the main thread's collectives, and duplicates of it (MPI_Comm_idup) for
 * a thread that issues its own (the DDP communication thread): MPI pairs collectives by their
 * order on a communicator, and two threads' collectives on one would interleave differently
 * on different ranks (MPI_ERR_TRUNCATE, or sums of the wrong buffers). */
#if DPT_MPI
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "comm.h"
#include "error.h"
#include "log.h"

/* Report file:line, the call and MPI's own error string, then stop the job. */
#define CHECK_MPI(call)                                                                                      \
    do {                                                                                                     \
        int mpi_rc_ = (call);                                                                                \
        if (mpi_rc_ != MPI_SUCCESS) {                                                                        \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                                             \
            int mpi_len_ = 0;                                                                                \
            MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                                                  \
            dpt_fatal("%s failed: %s", #call, mpi_msg_);                                                     \
        }                                                                                                    \
    } while (0)

/* MPI_THREAD_SERIALIZED: one lock around every MPI call of this file (the waits poll with
 * MPI_Test, so a thread never holds it while it waits). */
static bool serialize_calls;
static pthread_mutex_t call_mu = PTHREAD_MUTEX_INITIALIZER;

void dpt_comm_mpi_serialize_calls(bool serialize)
{
    serialize_calls = serialize;
}

#define MPI_CALL(call)                                                                                       \
    do {                                                                                                     \
        if (serialize_calls) pthread_mutex_lock(&call_mu);                                                   \
        int mpi_call_rc_ = (call);                                                                           \
        if (serialize_calls) pthread_mutex_unlock(&call_mu);                                                 \
        CHECK_MPI(mpi_call_rc_);                                                                             \
    } while (0)

static void add_delay(const dpt_comm *comm, int64_t bytes)
{
    dpt_sleep_ms(comm->delay_ms_per_mb * (double)bytes / 1048576.0);
}

/* MPI counts are int: split large buffers. */
#define MPI_CHUNK ((int64_t)1 << 30)

/* The last collectives of this rank, for the timeout report. Two threads of a rank may issue
 * collectives (the DDP communication thread and the main thread), hence the lock. */
#define RECENT 16
typedef struct recent_entry {
    char what[96];
    int64_t bytes;
    double start_s, end_s; /* end_s = 0 while in flight */
} recent_entry;

typedef struct mpi_impl {
    MPI_Comm comm; /* MPI_COMM_WORLD, or a duplicate this communicator owns */
    pthread_mutex_t mu;
    recent_entry recent[RECENT];
    int next;
    void *stage; /* the direct reduce-scatter's receive buffer (grown as needed) */
    size_t stage_bytes;
} mpi_impl;

static MPI_Comm comm_of(dpt_comm *comm)
{
    return ((mpi_impl *)comm->impl)->comm;
}

static int begin(dpt_comm *comm, const char *what, int64_t bytes)
{
    mpi_impl *im = comm->impl;
    pthread_mutex_lock(&im->mu);
    int slot = im->next++ % RECENT;
    recent_entry *e = &im->recent[slot];
    snprintf(e->what, sizeof e->what, "%s", what);
    e->bytes = bytes, e->start_s = dpt_now_s(), e->end_s = 0;
    pthread_mutex_unlock(&im->mu);
    return slot;
}

static void end(dpt_comm *comm, int slot)
{
    mpi_impl *im = comm->impl;
    pthread_mutex_lock(&im->mu);
    im->recent[slot].end_s = dpt_now_s();
    pthread_mutex_unlock(&im->mu);
}

static _Noreturn void report_timeout(dpt_comm *comm, const char *what)
{
    mpi_impl *im = comm->impl;
    char recent[2048] = "";
    size_t used = 0;
    pthread_mutex_lock(&im->mu);
    for (int i = 0; i < RECENT && used < sizeof recent; i++) {
        const recent_entry *e = &im->recent[(im->next + i) % RECENT];
        if (e->start_s == 0) continue;
        used += (size_t)snprintf(recent + used, sizeof recent - used, "\n  %s (%lld bytes): %s", e->what,
                                 (long long)e->bytes, e->end_s ? "done" : "IN FLIGHT");
    }
    pthread_mutex_unlock(&im->mu);
    dpt_abort_job("rank %d of %d: collective timed out after %.0f s: %s\nrecent collectives on this rank:%s\n"
                  "HINT: another rank stopped, died or is much slower (a stopped process, a full disk, a "
                  "debugger); raise [distributed] comm_timeout_s if steps are legitimately this slow",
                  comm->rank, comm->size, comm->timeout_s, what, recent);
}

/* Every collective is non-blocking and waited for here, with the deadline: a rank that never
 * arrives ends the job with a report, whichever collective it was (gradients, evaluation,
 * SyncBN, start-up checks, the per-step signal agreement).
 * Tested with short sleeps: a blocking MPI_Allreduce busy-polls shared memory while it waits
 * for the peers, stealing the core from backward, which runs on the other thread of the same
 * rank. Sleeping between tests keeps the waiting thread's CPU use small; MPI_Test also drives
 * the collective's progress. */
#ifndef SPIN_TESTS
#define SPIN_TESTS 64
#endif
static void wait_request(dpt_comm *comm, MPI_Request *req, const char *what)
{
    int done = 0;
    double deadline = comm->timeout_s > 0 ? dpt_now_s() + comm->timeout_s : 0;
    double nap_ms = 0.02;
    for (;;) {
        /* A burst of tests moves fragments at full speed while data flows; the sleep after it
         * only costs time while a peer has not arrived yet, and it grows (to 0.25 ms) while
         * that lasts: on 2 cores shared by 2 ranks, a waiting thread that keeps polling takes
         * the core from the other rank's backward. */
        for (int i = 0; i < SPIN_TESTS; i++) {
            MPI_CALL(MPI_Test(req, &done, MPI_STATUS_IGNORE));
            if (done) return;
        }
        if (deadline && dpt_now_s() > deadline) report_timeout(comm, what);
        if (__atomic_load_n(&comm->hurry, __ATOMIC_RELAXED)) { /* the rank only waits for this: no nap */
            sched_yield();
            continue;
        }
        dpt_sleep_ms(nap_ms);
        nap_ms = nap_ms * 2 < 0.25 ? nap_ms * 2 : 0.25;
    }
}

static void mpi_allreduce_f32(dpt_comm *comm, float *buf, int64_t n, const char *what)
{
    add_delay(comm, n * (int64_t)sizeof(float));
    int slot = begin(comm, what, n * (int64_t)sizeof(float));
    for (int64_t off = 0; off < n; off += MPI_CHUNK) {
        int count = (int)(n - off < MPI_CHUNK ? n - off : MPI_CHUNK);
        MPI_Request req;
        MPI_CALL(MPI_Iallreduce(MPI_IN_PLACE, buf + off, count, MPI_FLOAT, MPI_SUM, comm_of(comm), &req));
        wait_request(comm, &req, what);
    }
    end(comm, slot);
}

/* MPI's reduction of two 16-bit buffers: each pair added in float and rounded back. (An MPI
 * user function cannot carry the kind: one entry point each.) */
static void h16_sum(const uint16_t *a, uint16_t *b, int len, bool bf16)
{
    for (int i = 0; i < len; i++)
        b[i] = dpt_h16_from_f32(dpt_f32_from_h16(a[i], bf16) + dpt_f32_from_h16(b[i], bf16), bf16);
}

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    h16_sum(in, inout, *len, true);
    (void)type;
}

static void fp16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    h16_sum(in, inout, *len, false);
    (void)type;
}

/* The 16-bit sums as MPI operations, made once. */
static MPI_Op h16_op(bool bf16)
{
    static MPI_Op ops[2] = {MPI_OP_NULL, MPI_OP_NULL};
    static pthread_mutex_t ops_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&ops_mu);
    if (ops[bf16] == MPI_OP_NULL) MPI_CALL(MPI_Op_create(bf16 ? bf16_sum : fp16_sum, 1, &ops[bf16]));
    MPI_Op op = ops[bf16];
    pthread_mutex_unlock(&ops_mu);
    return op;
}

static void mpi_allreduce_h16(dpt_comm *comm, uint16_t *buf, int64_t n, bool bf16, const char *what)
{
    MPI_Op op = h16_op(bf16);
    add_delay(comm, n * (int64_t)sizeof(uint16_t));
    int slot = begin(comm, what, n * (int64_t)sizeof(uint16_t));
    for (int64_t off = 0; off < n; off += MPI_CHUNK) {
        int count = (int)(n - off < MPI_CHUNK ? n - off : MPI_CHUNK);
        MPI_Request req;
        MPI_CALL(MPI_Iallreduce(MPI_IN_PLACE, buf + off, count, MPI_UINT16_T, op, comm_of(comm), &req));
        wait_request(comm, &req, what);
    }
    end(comm, slot);
}

static void mpi_allreduce_f64(dpt_comm *comm, double *buf, int64_t n, const char *what)
{
    int slot = begin(comm, what, n * (int64_t)sizeof(double));
    MPI_Request req;
    MPI_CALL(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, comm_of(comm), &req));
    wait_request(comm, &req, what);
    end(comm, slot);
}

/* MPI's counts are int: the ranges of one call (a bucket, a segment) stay under 2^31 floats
 * (ZeRO's plan checks it). */
static void int_counts(const dpt_comm *comm, const int64_t *displs, int *counts, int *offsets)
{
    DPT_ASSERT(displs[comm->size] <= INT32_MAX, "%lld floats in one MPI call", (long long)displs[comm->size]);
    for (int q = 0; q < comm->size; q++)
        counts[q] = (int)(displs[q + 1] - displs[q]), offsets[q] = (int)displs[q];
}

/* The direct reduce-scatter at 2 to 4 ranks. Open MPI's non-blocking one (libnbc, no algorithm
 * to choose in 4.1) reduces the whole buffer into rank 0 over a binomial tree and then scatters
 * the ranges from it: at 2 ranks rank 1 sends the whole buffer, then rank 0 half of it back, one
 * after the other (1.5 buffers on the wire, one way at a time), and rank 0 does all the adding.
 * Here every rank sends each other rank that rank's range and adds the ranges it receives to its
 * own: (N-1)/N of the buffer each way, all links at once, the adding spread over the ranks. The
 * sums are associated as the tree associates them, (r0 + r1) + r2 and (r0 + r1) + (r2 + r3)
 * (a 16-bit sum rounded after each addition, as the MPI op does), which is also what the
 * AllReduce of zero = 0 does at these sizes (world.c chooses recursive doubling at 3 and 4
 * ranks; 2 ranks add one pair whatever the algorithm): zero = 2's weights stay those of zero = 0
 * bit for bit. DPT_REDUCE_SCATTER=mpi keeps Open MPI's. */
#define DIRECT_TAG 4242

static bool direct_wanted(const dpt_comm *comm)
{
    static int wanted = -1; /* read once */
    if (wanted < 0) {
        const char *v = getenv("DPT_REDUCE_SCATTER");
        wanted = !(v && strcmp(v, "mpi") == 0);
    }
    return wanted && comm->size >= 2 && comm->size <= 4;
}

/* inout += in over len elements: floats, or 16-bit values as the MPI op sums them (h16_sum) */
static void add_range(void *inout, const void *in, int64_t len, bool h16, bool bf16)
{
    if (h16) {
        h16_sum(in, inout, (int)len, bf16);
        return;
    }
    float *o = inout;
    const float *a = in;
    for (int64_t i = 0; i < len; i++)
        o[i] += a[i];
}

static void direct_reduce_scatter(dpt_comm *comm, void *buf, size_t bytes, bool h16, bool bf16,
                                  const int64_t *displs, const char *what)
{
    mpi_impl *im = comm->impl;
    int size = comm->size, me = comm->rank;
    int64_t mine = displs[me + 1] - displs[me];
    DPT_ASSERT(displs[size] <= INT32_MAX, "%lld elements in one MPI call", (long long)displs[size]);
    size_t need = (size_t)(size - 1) * (size_t)mine * bytes;
    if (need > im->stage_bytes) {
        free(im->stage);
        im->stage = malloc(need);
        if (!im->stage) dpt_fatal("out of host memory for %zu bytes of a reduce-scatter", need);
        im->stage_bytes = need;
    }
    MPI_Datatype type = h16 ? MPI_UINT16_T : MPI_FLOAT;
    MPI_Request req[6];
    void *from[4] = {NULL}; /* rank q's contribution to this rank's range */
    int nreq = 0, k = 0;
    for (int q = 0; q < size; q++) {
        if (q == me) {
            from[q] = (char *)buf + (size_t)displs[me] * bytes;
            continue;
        }
        from[q] = (char *)im->stage + (size_t)(k++) * (size_t)mine * bytes;
        if (mine) MPI_CALL(MPI_Irecv(from[q], (int)mine, type, q, DIRECT_TAG, comm_of(comm), &req[nreq++]));
    }
    for (int i = 1; i < size; i++) { /* to me + 1 first, so the ranks do not all send to rank 0 first */
        int q = (me + i) % size;
        int64_t len = displs[q + 1] - displs[q];
        if (len)
            MPI_CALL(MPI_Isend((char *)buf + (size_t)displs[q] * bytes, (int)len, type, q, DIRECT_TAG,
                               comm_of(comm), &req[nreq++]));
    }
    for (int i = 0; i < nreq; i++)
        wait_request(comm, &req[i], what);
    /* (r0 + r1), then + r2 or + (r2 + r3), a pair at a time (IEEE addition commutes, so a pair's
     * sum may land in either member): into this rank's own range whenever it is in the pair, so
     * the last addition leaves the total there */
    int lo = me < 2 ? me : 0, hi = me >= 2 ? me : 2; /* where r0 + r1, and r2 (+ r3), land */
    add_range(from[lo], from[lo ^ 1], mine, h16, bf16);
    if (size == 2) return;
    if (size == 4) add_range(from[hi], from[hi ^ 1], mine, h16, bf16);
    add_range(from[me], from[me < 2 ? hi : lo], mine, h16, bf16);
}

/* In place over buf (elements of `bytes` each, MPI's type and sum op; bf16 or fp16 for a 16-bit
 * type), this rank's range of the sum left at displs[rank]. */
static void reduce_scatter(dpt_comm *comm, void *buf, size_t bytes, MPI_Datatype type, MPI_Op op, bool bf16,
                           const int64_t *displs, const char *what)
{
    int64_t n = displs[comm->size], mine = displs[comm->rank + 1] - displs[comm->rank];
    add_delay(comm, n * (int64_t)bytes / 2); /* half of an AllReduce's traffic */
    int slot = begin(comm, what, n * (int64_t)bytes);
    if (direct_wanted(comm)) {
        direct_reduce_scatter(comm, buf, bytes, type == MPI_UINT16_T, bf16, displs, what);
        end(comm, slot);
        return;
    }
    int *counts = malloc((size_t)comm->size * 2 * sizeof *counts);
    if (!counts) dpt_fatal("out of host memory");
    int_counts(comm, displs, counts, counts + comm->size);
    MPI_Request req;
    MPI_CALL(MPI_Ireduce_scatter(MPI_IN_PLACE, buf, counts, type, op, comm_of(comm), &req));
    wait_request(comm, &req, what);
    /* in place, MPI leaves this rank's sum at the start of buf */
    if (mine && displs[comm->rank])
        memmove((char *)buf + (size_t)displs[comm->rank] * bytes, buf, (size_t)mine * bytes);
    free(counts);
    end(comm, slot);
}

static void mpi_reduce_scatter_f32(dpt_comm *comm, float *buf, const int64_t *displs, const char *what)
{
    reduce_scatter(comm, buf, sizeof *buf, MPI_FLOAT, MPI_SUM, false, displs, what);
}

static void mpi_reduce_scatter_h16(dpt_comm *comm, uint16_t *buf, const int64_t *displs, bool bf16, const char *what)
{
    reduce_scatter(comm, buf, sizeof *buf, MPI_UINT16_T, h16_op(bf16), bf16, displs, what);
}

static void mpi_allgatherv_f32(dpt_comm *comm, float *buf, const int64_t *displs, const char *what)
{
    int64_t n = displs[comm->size];
    add_delay(comm, n * (int64_t)sizeof(float) / 2);
    int slot = begin(comm, what, n * (int64_t)sizeof(float));
    int *counts = malloc((size_t)comm->size * 2 * sizeof *counts);
    if (!counts) dpt_fatal("out of host memory");
    int_counts(comm, displs, counts, counts + comm->size);
    MPI_Request req;
    MPI_CALL(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, counts + comm->size, MPI_FLOAT,
                             comm_of(comm), &req));
    wait_request(comm, &req, what);
    free(counts);
    end(comm, slot);
}

static void mpi_gatherv_f32(dpt_comm *comm, float *buf, const int64_t *displs, int root, const char *what)
{
    int64_t n = displs[comm->size];
    int slot = begin(comm, what, n * (int64_t)sizeof(float));
    int *counts = malloc((size_t)comm->size * 2 * sizeof *counts);
    if (!counts) dpt_fatal("out of host memory");
    int_counts(comm, displs, counts, counts + comm->size);
    MPI_Request req;
    int me = comm->rank;
    if (me == root)
        MPI_CALL(MPI_Igatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, counts + comm->size, MPI_FLOAT, root,
                              comm_of(comm), &req));
    else
        MPI_CALL(MPI_Igatherv(buf + displs[me], counts[me], MPI_FLOAT, NULL, NULL, NULL, MPI_FLOAT, root,
                              comm_of(comm), &req));
    wait_request(comm, &req, what);
    free(counts);
    end(comm, slot);
}

static void mpi_broadcast(dpt_comm *comm, void *buf, size_t bytes, int root, const char *what)
{
    int slot = begin(comm, what, (int64_t)bytes);
    for (size_t off = 0; off < bytes; off += (size_t)MPI_CHUNK) {
        int count = (int)(bytes - off < (size_t)MPI_CHUNK ? bytes - off : (size_t)MPI_CHUNK);
        MPI_Request req;
        MPI_CALL(MPI_Ibcast((char *)buf + off, count, MPI_BYTE, root, comm_of(comm), &req));
        wait_request(comm, &req, what);
    }
    end(comm, slot);
}

static void mpi_allgather(dpt_comm *comm, const void *send, void *recv, size_t bytes, const char *what)
{
    int slot = begin(comm, what, (int64_t)bytes);
    MPI_Request req;
    MPI_CALL(MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm_of(comm), &req));
    wait_request(comm, &req, what);
    end(comm, slot);
}

static void mpi_sendrecv(dpt_comm *comm, const void *send, void *recv, size_t bytes, int peer, const char *what)
{
    int slot = begin(comm, what, (int64_t)bytes);
    for (size_t off = 0; off < bytes; off += (size_t)MPI_CHUNK) {
        int count = (int)(bytes - off < (size_t)MPI_CHUNK ? bytes - off : (size_t)MPI_CHUNK);
        MPI_Request req[2];
        MPI_CALL(MPI_Irecv((char *)recv + off, count, MPI_BYTE, peer, 7, comm_of(comm), &req[0]));
        MPI_CALL(MPI_Isend((const char *)send + off, count, MPI_BYTE, peer, 7, comm_of(comm), &req[1]));
        wait_request(comm, &req[0], what);
        wait_request(comm, &req[1], what);
    }
    end(comm, slot);
}

static void mpi_barrier(dpt_comm *comm, const char *what)
{
    int slot = begin(comm, what, 0);
    MPI_Request req;
    MPI_CALL(MPI_Ibarrier(comm_of(comm), &req));
    wait_request(comm, &req, what);
    end(comm, slot);
}

static void mpi_free(dpt_comm *comm)
{
    mpi_impl *im = comm->impl;
    if (im->comm != MPI_COMM_WORLD) MPI_CALL(MPI_Comm_free(&im->comm));
    free(im->stage);
    pthread_mutex_destroy(&im->mu);
    free(im);
    free(comm);
}

static dpt_comm *mpi_wrap(MPI_Comm mc);

static dpt_comm *mpi_dup(dpt_comm *comm, const char *purpose)
{
    char what[96];
    snprintf(what, sizeof what, "a communicator for %s (MPI_Comm_idup)", purpose);
    int slot = begin(comm, what, 0);
    MPI_Comm mc;
    MPI_Request req;
    MPI_CALL(MPI_Comm_idup(comm_of(comm), &mc, &req));
    wait_request(comm, &req, what);
    end(comm, slot);
    dpt_comm *c = mpi_wrap(mc);
    c->timeout_s = comm->timeout_s, c->delay_ms_per_mb = comm->delay_ms_per_mb;
    return c;
}

static const dpt_comm_ops mpi_ops = {
    .name = "mpi",
    .allreduce_f32 = mpi_allreduce_f32,
    .allreduce_f64 = mpi_allreduce_f64,
    .allreduce_h16 = mpi_allreduce_h16,
    .reduce_scatter_f32 = mpi_reduce_scatter_f32,
    .reduce_scatter_h16 = mpi_reduce_scatter_h16,
    .allgatherv_f32 = mpi_allgatherv_f32,
    .gatherv_f32 = mpi_gatherv_f32,
    .broadcast = mpi_broadcast,
    .allgather = mpi_allgather,
    .barrier = mpi_barrier,
    .sendrecv = mpi_sendrecv,
    .free = mpi_free,
    .dup = mpi_dup,
};

dpt_comm *dpt_comm_mpi_new(void)
{
    return mpi_wrap(MPI_COMM_WORLD);
}

static dpt_comm *mpi_wrap(MPI_Comm mc)
{
    dpt_comm *comm = calloc(1, sizeof *comm);
    if (!comm) dpt_fatal("out of host memory for a communicator");
    comm->ops = &mpi_ops;
    mpi_impl *im = calloc(1, sizeof *im);
    if (!im) dpt_fatal("out of host memory for a communicator");
    pthread_mutex_init(&im->mu, NULL);
    im->comm = mc;
    comm->impl = im;
    comm->timeout_s = 300; /* the schema's default, until the config is read */
    MPI_CALL(MPI_Comm_rank(mc, &comm->rank));
    MPI_CALL(MPI_Comm_size(mc, &comm->size));
    return comm;
}

#endif /* DPT_MPI */
