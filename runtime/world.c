/* world.c: rank, size and local rank from MPI when an MPI launcher started us; a singleton
 * otherwise. Installs MPI_Abort as the fatal path so one failing rank stops the job. A build
 * without MPI (make MPI=0) is always a singleton, and says so if mpirun starts it. */
#if DPT_MPI
#include <mpi.h>
#endif
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"
#include "log.h"

static dpt_comm *world_comm; /* the one MPI communicator of the process (MPI is per process) */

static bool launched_by_mpi(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return true;
    return false;
}

/* This process's affinity mask (all online cores when it cannot be read). */
static int affinity_cores(cpu_set_t *set)
{
    CPU_ZERO(set);
    if (sched_getaffinity(0, sizeof *set, set) == 0 && CPU_COUNT(set) > 0) return CPU_COUNT(set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < n && i < CPU_SETSIZE; i++)
        CPU_SET((int)i, set);
    return CPU_COUNT(set);
}

static void alone_cores(dpt_world *w)
{
    cpu_set_t own;
    w->cores = w->node_cores = affinity_cores(&own);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online > w->cores)
        snprintf(w->cores_why, sizeof w->cores_why, "the %d cores of this process's affinity mask", w->cores);
    else
        snprintf(w->cores_why, sizeof w->cores_why, "the %d cores", w->cores);
}

#if DPT_MPI
void dpt_mpi_version(char *buf, size_t cap)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) snprintf(v, sizeof v, "unknown");
    v[strcspn(v, "\n,")] = '\0'; /* the first clause: "Open MPI v4.1.4" */
    int major = 0, minor = 0;
    MPI_Get_version(&major, &minor);
    snprintf(buf, cap, "%s (MPI %d.%d)", v, major, minor);
}

/* MPI_Abort asks the launcher to end every rank; Open MPI's returns only when its daemon has
 * answered, and a rank whose network is down (scripts/netlab.sh --down) waited in it until
 * the link came back, holding its memory and its GPU. Its message is out by then: the process
 * ends by itself ABORT_GRACE_S later whatever the launcher does. */
#define ABORT_GRACE_S 5
static void *abort_watchdog(void *arg)
{
    dpt_sleep_ms(1e3 * ABORT_GRACE_S);
    _exit((int)(intptr_t)arg);
}

static void mpi_abort(int code)
{
    pthread_t th;
    if (pthread_create(&th, NULL, abort_watchdog, (void *)(intptr_t)code) == 0) pthread_detach(th);
    MPI_Abort(MPI_COMM_WORLD, code);
}

/* Open MPI's non-blocking AllReduce (libnbc) takes its binomial tree whenever the buffer is
 * MPI_IN_PLACE (ours always is) or there are fewer than 4 ranks: a reduce into rank 0, then a
 * broadcast from it, so the payload crosses each link twice one way after the other and rank
 * 0 does all the adding. Recursive doubling exchanges the buffers both ways at once (one
 * round at 2 ranks): on the network lab's 1 Gbit link the CNN's 1.6 MiB of gradients took
 * 29-31 ms a step instead of 36-43, hidden 87-96% by backward instead of 58-73%. At 2, 3 and
 * 4 ranks both add in the same association ((r0 + r1) + r2, (r0 + r1) + (r2 + r3); IEEE
 * addition is commutative), so the sums are the tree's bit for bit; from 5 ranks on they are
 * not, and the default stays. At 2 ranks every algorithm adds the one pair, so the fastest
 * is taken: Rabenseifner's (each rank sums half and the halves are exchanged: half the copying
 * and adding of recursive doubling's whole-buffer exchange), over shared memory 1.5 ms for
 * 8 MiB instead of 2.7 and 5.6 for 24 MiB instead of 10.8; on the 1 Gbit lab the same.
 * A value the user gave (the variable, or mpirun --mca, which sets it) wins. Read by
 * MPI_Init, so set before it. */
static void choose_iallreduce(dpt_world *w)
{
#ifdef OPEN_MPI
    const char *key = "OMPI_MCA_coll_libnbc_iallreduce_algorithm", *given = getenv(key);
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    int n = size ? atoi(size) : 0;
    if (given) {
        snprintf(w->allreduce_how, sizeof w->allreduce_how, "non-blocking AllReduce: libnbc algorithm %s (%s, yours)",
                 given, key + 9);
        dpt_printable(w->allreduce_how); /* the user's value, printed by --env */
    }
    else if (n == 2 && setenv(key, "3", 0) == 0)
        snprintf(w->allreduce_how, sizeof w->allreduce_how,
                 "non-blocking AllReduce: Rabenseifner's (%s = 3, set by dptrain at 2 ranks)", key + 9);
    else if (n >= 3 && n <= 4 && setenv(key, "4", 0) == 0)
        snprintf(w->allreduce_how, sizeof w->allreduce_how,
                 "non-blocking AllReduce: recursive doubling (%s = 4, set by dptrain at %d ranks)", key + 9, n);
    else
        snprintf(w->allreduce_how, sizeof w->allreduce_how, "non-blocking AllReduce: libnbc's default");
#else
    snprintf(w->allreduce_how, sizeof w->allreduce_how, "non-blocking AllReduce: the library's default");
#endif
}

bool dpt_world_init(dpt_world *w, int *argc, char ***argv, dpt_error *err)
{
    memset(w, 0, sizeof *w);
    w->size = w->local_size = 1;
    gethostname(w->host, sizeof w->host - 1);
    alone_cores(w);
    if (!launched_by_mpi()) return true;
    choose_iallreduce(w);
    /* The reducer's communication thread calls MPI on its own communicator (a duplicate)
     * while the main thread may call MPI too (SyncBN in backward, evaluation, the signal
     * agreement): MULTIPLE is what that needs. With SERIALIZED only, every MPI call of ours
     * goes through one lock (comm_mpi.c). */
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return dpt_errorf(err, "MPI_Init_thread failed\nHINT: check the MPI installation with "
                               "'mpirun -np 2 hostname'");
    if (provided < MPI_THREAD_SERIALIZED) {
        MPI_Finalize();
        return dpt_errorf(err,
                          "this MPI provides thread level %d; dptrain needs at least "
                          "MPI_THREAD_SERIALIZED\nHINT: use an MPI built with thread support "
                          "(Debian's openmpi-bin is)",
                          provided);
    }
    w->mpi = true;
    /* DPT_MPI_SERIALIZE=1 takes the lock with MULTIPLE too: for an MPI whose MULTIPLE misbehaves,
     * and for ThreadSanitizer (scripts/tsan.sh), which sees the order of our buffers' accesses
     * through the lock where another thread's MPI_Test moved them */
    const char *serialize = getenv("DPT_MPI_SERIALIZE");
    dpt_comm_mpi_serialize_calls(provided < MPI_THREAD_MULTIPLE || (serialize && !strcmp(serialize, "1")));
    MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w->size);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &w->local_rank);
    MPI_Comm_size(local, &w->local_size);
    /* The node's cores among its ranks: bound to disjoint sets (Open MPI binds to cores up to
     * 2 ranks), each its own; unbound or overlapping (--oversubscribe, bind to socket), the
     * union divided by the ranks. Every rank ran all of them before: 2 ranks x 2 threads on
     * 2 cores trained 5.5x slower than 1 thread each. */
    cpu_set_t own;
    int mine = affinity_cores(&own), sum = 0;
    unsigned char bits[CPU_SETSIZE / 8] = {0}, all[CPU_SETSIZE / 8];
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &own)) bits[i / 8] |= (unsigned char)(1u << (i % 8));
    MPI_Allreduce(bits, all, (int)sizeof bits, MPI_UNSIGNED_CHAR, MPI_BOR, local);
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, local);
    MPI_Comm_free(&local);
    int node = 0;
    for (size_t i = 0; i < sizeof all; i++)
        node += __builtin_popcount(all[i]);
    w->node_cores = node;
    if (w->local_size == 1) {
        /* alone on the node: alone_cores' values (set before MPI started) stand */
    } else if (sum <= node) {
        w->cores = mine;
        snprintf(w->cores_why, sizeof w->cores_why, "the %d core%s mpirun bound this rank to", mine,
                 mine == 1 ? "" : "s");
    } else {
        w->cores = node / w->local_size > 0 ? node / w->local_size : 1;
        snprintf(w->cores_why, sizeof w->cores_why, "%d cores / %d ranks on this node", node, w->local_size);
    }
    /* A fatal error or a failed MPI call on any rank ends every rank, with that rank's message. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    dpt_set_abort_handler(mpi_abort);
    world_comm = dpt_comm_mpi_new();
    return true;
}

void dpt_world_finalize(dpt_world *w)
{
    if (!w->mpi) return;
    if (world_comm) world_comm->ops->free(world_comm);
    world_comm = NULL;
    dpt_set_abort_handler(NULL);
    MPI_Finalize();
    w->mpi = false;
}

dpt_comm *dpt_world_comm(const dpt_world *w)
{
    return w->mpi ? world_comm : NULL;
}

#else /* built without MPI */

void dpt_mpi_version(char *buf, size_t cap)
{
    snprintf(buf, cap, "not in this build (make MPI=0)");
}

bool dpt_world_init(dpt_world *w, int *argc, char ***argv, dpt_error *err)
{
    (void)argc, (void)argv;
    memset(w, 0, sizeof *w);
    w->size = w->local_size = 1;
    gethostname(w->host, sizeof w->host - 1);
    alone_cores(w);
    if (launched_by_mpi())
        return dpt_errorf(
            err, "mpirun started this process, but this dptrain was built without MPI (make MPI=0)\n"
                 "HINT: rebuild with MPI (Debian libopenmpi-dev, then make), or train in one process: "
                 "[distributed] devices = cuda:0,cuda:1 (or cpu:0,cpu:1) for DataParallel");
    return true;
}

void dpt_world_finalize(dpt_world *w)
{
    (void)w;
}

dpt_comm *dpt_world_comm(const dpt_world *w)
{
    (void)w;
    (void)world_comm;
    return NULL;
}

#endif

int dpt_comm_rank(const dpt_comm *comm)
{
    return comm ? comm->rank : 0;
}
int dpt_comm_size(const dpt_comm *comm)
{
    return comm ? comm->size : 1;
}
void dpt_comm_barrier(dpt_comm *comm)
{
    if (comm) comm->ops->barrier(comm, "barrier");
}
void dpt_comm_barrier_named(dpt_comm *comm, const char *what)
{
    if (comm) comm->ops->barrier(comm, what);
}
void dpt_comm_allreduce_f32(dpt_comm *comm, float *buf, int64_t n, const char *what)
{
    comm->ops->allreduce_f32(comm, buf, n, what);
}
void dpt_comm_sendrecv(dpt_comm *comm, const void *send, void *recv, size_t bytes, int peer, const char *what)
{
    DPT_ASSERT(comm->ops->sendrecv, "the %s communicator has no point-to-point exchange", comm->ops->name);
    DPT_ASSERT(peer >= 0 && peer < comm->size && peer != comm->rank, "sendrecv with rank %d of %d (this is %d)", peer,
               comm->size, comm->rank);
    comm->ops->sendrecv(comm, send, recv, bytes, peer, what);
}
void dpt_comm_allreduce_h16(dpt_comm *comm, uint16_t *buf, int64_t n, bool bf16, const char *what)
{
    DPT_ASSERT(comm->ops->allreduce_h16, "the %s communicator has no 16-bit AllReduce", comm->ops->name);
    comm->ops->allreduce_h16(comm, buf, n, bf16, what);
}
void dpt_comm_allreduce_f64(dpt_comm *comm, double *buf, int64_t n, const char *what)
{
    comm->ops->allreduce_f64(comm, buf, n, what);
}
void dpt_comm_reduce_scatter_f32(dpt_comm *comm, float *buf, const int64_t *displs, const char *what)
{
    if (comm->ops->reduce_scatter_f32)
        comm->ops->reduce_scatter_f32(comm, buf, displs, what);
    else /* the whole sum: this rank's range among it */
        comm->ops->allreduce_f32(comm, buf, displs[comm->size], what);
}
void dpt_comm_reduce_scatter_h16(dpt_comm *comm, uint16_t *buf, const int64_t *displs, bool bf16, const char *what)
{
    if (comm->ops->reduce_scatter_h16)
        comm->ops->reduce_scatter_h16(comm, buf, displs, bf16, what);
    else
        dpt_comm_allreduce_h16(comm, buf, displs[comm->size], bf16, what);
}
void dpt_comm_allgatherv_f32(dpt_comm *comm, float *buf, const int64_t *displs, const char *what)
{
    if (comm->ops->allgatherv_f32) {
        comm->ops->allgatherv_f32(comm, buf, displs, what);
        return;
    }
    for (int q = 0; q < comm->size; q++)
        if (displs[q + 1] > displs[q])
            comm->ops->broadcast(comm, buf + displs[q], (size_t)(displs[q + 1] - displs[q]) * sizeof(float), q, what);
}
void dpt_comm_gatherv_f32(dpt_comm *comm, float *buf, const int64_t *displs, int root, const char *what)
{
    if (comm->ops->gatherv_f32)
        comm->ops->gatherv_f32(comm, buf, displs, root, what);
    else
        dpt_comm_allgatherv_f32(comm, buf, displs, what);
}
void dpt_comm_broadcast(dpt_comm *comm, void *buf, size_t bytes, int root, const char *what)
{
    comm->ops->broadcast(comm, buf, bytes, root, what);
}
void dpt_comm_allgather(dpt_comm *comm, const void *send, void *recv, size_t bytes, const char *what)
{
    comm->ops->allgather(comm, send, recv, bytes, what);
}
void dpt_comm_set_timeout(dpt_comm *comm, double timeout_s)
{
    if (comm) comm->timeout_s = timeout_s;
}
void dpt_comm_set_delay(dpt_comm *comm, double ms_per_mb)
{
    if (comm) comm->delay_ms_per_mb = ms_per_mb;
}

dpt_eval_result dpt_eval_allreduce(dpt_comm *comm, dpt_eval_result local)
{
    if (!comm || comm->size == 1) return local;
    /* sums over the ranks' terms (each rank's mean times its count); NaN metrics stay NaN */
    bool acc = !isnan(local.accuracy), ppl = !isnan(local.perplexity), top5 = !isnan(local.top5);
    double sums[5] = {local.loss * (double)local.terms, acc ? local.accuracy * (double)local.terms : 0.0,
                      (double)local.terms, (double)local.samples, top5 ? local.top5 * (double)local.terms : 0.0};
    dpt_comm_allreduce_f64(comm, sums, 5, "evaluation sums");
    dpt_eval_result r = {.terms = (int64_t)sums[2], .samples = (int64_t)sums[3]};
    r.loss = r.terms ? sums[0] / sums[2] : 0.0;
    r.accuracy = acc ? (r.terms ? sums[1] / sums[2] : 0.0) : NAN;
    r.top5 = top5 ? (r.terms ? sums[4] / sums[2] : 0.0) : NAN;
    r.perplexity = ppl ? exp(r.loss) : NAN;
    return r;
}
