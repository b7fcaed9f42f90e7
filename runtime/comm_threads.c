/* comm_threads.c: a communicator between threads of one process (DataParallel replicas).
 * Allreduce: every thread publishes its buffer, then thread r sums slice r of all buffers in
 * rank order and writes the sum into every buffer; nobody else touches slice r meanwhile.
 * Every wait for the other threads has the communicator's timeout ([distributed]
 * comm_timeout_s): a replica that never arrives ends the process with a message naming the
 * collective, as a rank does under MPI. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "half.h"
#include "comm.h"
#include "error.h"
#include "log.h"

/* A barrier whose wait can time out (pthread_barrier_wait cannot). */
typedef struct timed_barrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int count, waiting;
    unsigned generation;
} timed_barrier;

struct dpt_thread_group {
    int size;
    timed_barrier barrier;
    void **bufs;               /* published per rank */
    dpt_thread_group *handoff; /* dup: the new group, from rank 0 to the others */
    bool owned_by_comms;       /* a dup's group: freed with the last of its communicators */
    atomic_int comms;
};

dpt_thread_group *dpt_thread_group_new(int size)
{
    dpt_thread_group *g = calloc(1, sizeof *g);
    if (!g) dpt_fatal("out of host memory for a thread group");
    g->size = size;
    g->bufs = calloc((size_t)size, sizeof *g->bufs);
    if (!g->bufs || pthread_mutex_init(&g->barrier.mu, NULL) != 0 ||
        pthread_cond_init(&g->barrier.cv, NULL) != 0)
        dpt_fatal("cannot create a barrier for %d threads", size);
    g->barrier.count = size;
    return g;
}

void dpt_thread_group_free(dpt_thread_group *g)
{
    if (!g) return;
    pthread_mutex_destroy(&g->barrier.mu);
    pthread_cond_destroy(&g->barrier.cv);
    free(g->bufs);
    free(g);
}

static dpt_thread_group *group_of(dpt_comm *comm)
{
    return comm->impl;
}

/* false: the others did not all arrive within timeout_s (0: wait for ever). */
static bool barrier_wait(timed_barrier *b, double timeout_s)
{
    pthread_mutex_lock(&b->mu);
    unsigned gen = b->generation;
    if (++b->waiting == b->count) {
        b->waiting = 0;
        b->generation++;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        return true;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    double whole = (double)(int64_t)timeout_s;
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((timeout_s - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    while (gen == b->generation) {
        int rc = timeout_s > 0 ? pthread_cond_timedwait(&b->cv, &b->mu, &deadline)
                               : pthread_cond_wait(&b->cv, &b->mu);
        if (rc == ETIMEDOUT && gen == b->generation) {
            pthread_mutex_unlock(&b->mu);
            return false;
        }
    }
    pthread_mutex_unlock(&b->mu);
    return true;
}

static void sync_all_named(dpt_comm *comm, const char *what)
{
    if (!barrier_wait(&group_of(comm)->barrier, comm->timeout_s))
        dpt_abort_job("replica %d of %d: collective timed out after %g s: %s\n"
                      "HINT: another DataParallel replica is stuck or much slower; raise [distributed] "
                      "comm_timeout_s if steps are legitimately this slow",
                      comm->rank, comm->size, comm->timeout_s, what ? what : "a collective");
}

#define ALLREDUCE_BODY(type)                                                                                 \
    dpt_thread_group *g = group_of(comm);                                                                    \
    g->bufs[comm->rank] = buf;                                                                               \
    sync_all_named(comm, what);                                                                              \
    int64_t per = (n + g->size - 1) / g->size;                                                               \
    int64_t lo = per * comm->rank, hi = lo + per < n ? lo + per : n;                                         \
    for (int64_t i = lo; i < hi; i++) {                                                                      \
        type sum = 0;                                                                                        \
        for (int r = 0; r < g->size; r++)                                                                    \
            sum += ((type *)g->bufs[r])[i];                                                                  \
        for (int r = 0; r < g->size; r++)                                                                    \
            ((type *)g->bufs[r])[i] = sum;                                                                   \
    }                                                                                                        \
    sync_all_named(comm, what);

static void threads_allreduce_f32(dpt_comm *comm, float *buf, int64_t n, const char *what)
{
    dpt_sleep_ms(comm->delay_ms_per_mb * (double)n * sizeof(float) / 1048576.0);
    ALLREDUCE_BODY(float)
}

static void threads_allreduce_f64(dpt_comm *comm, double *buf, int64_t n, const char *what)
{
    ALLREDUCE_BODY(double)
}

/* Summed in float in rank order, rounded once: at least as close as MPI's pairwise roundings. */
static void threads_allreduce_h16(dpt_comm *comm, uint16_t *buf, int64_t n, bool bf16, const char *what)
{
    dpt_sleep_ms(comm->delay_ms_per_mb * (double)n * sizeof(uint16_t) / 1048576.0);
    dpt_thread_group *g = group_of(comm);
    g->bufs[comm->rank] = buf;
    sync_all_named(comm, what);
    int64_t per = (n + g->size - 1) / g->size;
    int64_t lo = per * comm->rank, hi = lo + per < n ? lo + per : n;
    for (int64_t i = lo; i < hi; i++) {
        float sum = 0;
        for (int r = 0; r < g->size; r++)
            sum += dpt_f32_from_h16(((uint16_t *)g->bufs[r])[i], bf16);
        uint16_t out = dpt_h16_from_f32(sum, bf16);
        for (int r = 0; r < g->size; r++)
            ((uint16_t *)g->bufs[r])[i] = out;
    }
    sync_all_named(comm, what);
}

/* Each replica sums its own range over every replica's buffer, in rank order as the AllReduces
 * do (the same bits: fp32 added in float; 16 bits added in float and rounded once), and writes
 * it to its own buffer only. h16: 0 fp32, else 16-bit (bf16 when h16 == 2). */
static void reduce_scatter(dpt_comm *comm, void *buf, const int64_t *displs, int h16, const char *what)
{
    dpt_thread_group *g = group_of(comm);
    size_t bytes = h16 ? sizeof(uint16_t) : sizeof(float);
    dpt_sleep_ms(comm->delay_ms_per_mb * (double)displs[g->size] * (double)bytes / 1048576.0);
    g->bufs[comm->rank] = buf;
    sync_all_named(comm, what);
    for (int64_t i = displs[comm->rank]; i < displs[comm->rank + 1]; i++) {
        float sum = 0;
        for (int r = 0; r < g->size; r++)
            sum += h16 ? dpt_f32_from_h16(((uint16_t *)g->bufs[r])[i], h16 == 2) : ((float *)g->bufs[r])[i];
        if (h16)
            ((uint16_t *)buf)[i] = dpt_h16_from_f32(sum, h16 == 2);
        else
            ((float *)buf)[i] = sum;
    }
    sync_all_named(comm, what);
}

static void threads_reduce_scatter_f32(dpt_comm *comm, float *buf, const int64_t *displs, const char *what)
{
    reduce_scatter(comm, buf, displs, 0, what);
}

static void threads_reduce_scatter_h16(dpt_comm *comm, uint16_t *buf, const int64_t *displs, bool bf16, const char *what)
{
    reduce_scatter(comm, buf, displs, bf16 ? 2 : 1, what);
}

static void threads_allgatherv_f32(dpt_comm *comm, float *buf, const int64_t *displs, const char *what)
{
    dpt_thread_group *g = group_of(comm);
    g->bufs[comm->rank] = buf;
    sync_all_named(comm, what);
    for (int r = 0; r < g->size; r++)
        if (r != comm->rank && displs[r + 1] > displs[r])
            memcpy(buf + displs[r], (float *)g->bufs[r] + displs[r], (size_t)(displs[r + 1] - displs[r]) * sizeof(float));
    sync_all_named(comm, what);
}

static void threads_gatherv_f32(dpt_comm *comm, float *buf, const int64_t *displs, int root, const char *what)
{
    dpt_thread_group *g = group_of(comm);
    g->bufs[comm->rank] = buf;
    sync_all_named(comm, what);
    for (int r = 0; comm->rank == root && r < g->size; r++)
        if (r != root && displs[r + 1] > displs[r])
            memcpy(buf + displs[r], (float *)g->bufs[r] + displs[r], (size_t)(displs[r + 1] - displs[r]) * sizeof(float));
    sync_all_named(comm, what);
}

static void threads_broadcast(dpt_comm *comm, void *buf, size_t bytes, int root, const char *what)
{
    dpt_thread_group *g = group_of(comm);
    g->bufs[comm->rank] = buf;
    sync_all_named(comm, what);
    if (comm->rank != root) memcpy(buf, g->bufs[root], bytes);
    sync_all_named(comm, what);
}

static void threads_allgather(dpt_comm *comm, const void *send, void *recv, size_t bytes, const char *what)
{
    dpt_thread_group *g = group_of(comm);
    g->bufs[comm->rank] = (void *)send;
    sync_all_named(comm, what);
    for (int r = 0; r < g->size; r++)
        memcpy((char *)recv + (size_t)r * bytes, g->bufs[r], bytes);
    sync_all_named(comm, what);
}

static void threads_sendrecv(dpt_comm *comm, const void *send, void *recv, size_t bytes, int peer, const char *what)
{
    dpt_thread_group *g = group_of(comm);
    g->bufs[comm->rank] = (void *)send;
    sync_all_named(comm, what); /* every replica takes part in the same exchange round */
    memcpy(recv, g->bufs[peer], bytes);
    sync_all_named(comm, what);
}

static void threads_barrier(dpt_comm *comm, const char *what)
{
    sync_all_named(comm, what);
}
static void threads_free(dpt_comm *comm)
{
    dpt_thread_group *g = group_of(comm);
    if (g->owned_by_comms && atomic_fetch_sub(&g->comms, 1) == 1) dpt_thread_group_free(g);
    free(comm);
}

/* A group of its own (its own barrier and buffers) for the same threads. */
static dpt_comm *threads_dup(dpt_comm *comm, const char *purpose)
{
    const char *what = purpose;
    dpt_thread_group *g = group_of(comm);
    sync_all_named(comm, what);
    if (comm->rank == 0) {
        g->handoff = dpt_thread_group_new(g->size);
        g->handoff->owned_by_comms = true;
        atomic_init(&g->handoff->comms, g->size);
    }
    sync_all_named(comm, what);
    dpt_comm *c = dpt_comm_thread_new(g->handoff, comm->rank);
    c->timeout_s = comm->timeout_s, c->delay_ms_per_mb = comm->delay_ms_per_mb;
    sync_all_named(comm, what); /* every rank has it before a later dup replaces the handoff */
    return c;
}

static const dpt_comm_ops thread_ops = {
    .name = "threads",
    .allreduce_f32 = threads_allreduce_f32,
    .allreduce_f64 = threads_allreduce_f64,
    .allreduce_h16 = threads_allreduce_h16,
    .reduce_scatter_f32 = threads_reduce_scatter_f32,
    .reduce_scatter_h16 = threads_reduce_scatter_h16,
    .allgatherv_f32 = threads_allgatherv_f32,
    .gatherv_f32 = threads_gatherv_f32,
    .broadcast = threads_broadcast,
    .allgather = threads_allgather,
    .barrier = threads_barrier,
    .sendrecv = threads_sendrecv,
    .free = threads_free,
    .dup = threads_dup,
};

dpt_comm *dpt_comm_thread_new(dpt_thread_group *group, int rank)
{
    dpt_comm *comm = calloc(1, sizeof *comm);
    if (!comm) dpt_fatal("out of host memory for a communicator");
    comm->ops = &thread_ops;
    comm->rank = rank;
    comm->size = group->size;
    comm->impl = group;
    return comm;
}
