/* comm_mpi.c: the communicator over MPI_COMM_WORLD for host buffers. */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>

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

static void add_delay(const dpt_comm *comm, int64_t bytes)
{
    dpt_sleep_ms(comm->delay_ms_per_mb * (double)bytes / 1048576.0);
}

/* MPI counts are int: split large buffers. */
#define MPI_CHUNK ((int64_t)1 << 30)

/* Non-blocking, tested with short sleeps: a blocking MPI_Allreduce busy-polls shared memory
 * while it waits for the peers, stealing the core from backward, which runs on the other
 * thread of the same rank. Sleeping between tests keeps the communication thread's CPU use
 * small; MPI_Test also drives the collective's progress. */
#ifndef SPIN_TESTS
#define SPIN_TESTS 64
#endif
static void wait_request(MPI_Request *req)
{
    int done = 0;
    for (;;) {
        /* A burst of tests moves fragments at full speed while data flows; the sleep after it
         * only costs time while a peer has not arrived yet. */
        for (int i = 0; i < SPIN_TESTS; i++) {
            CHECK_MPI(MPI_Test(req, &done, MPI_STATUS_IGNORE));
            if (done) return;
        }
        dpt_sleep_ms(0.02);
    }
}

static void mpi_allreduce_f32(dpt_comm *comm, float *buf, int64_t n)
{
    add_delay(comm, n * (int64_t)sizeof(float));
    for (int64_t off = 0; off < n; off += MPI_CHUNK) {
        int count = (int)(n - off < MPI_CHUNK ? n - off : MPI_CHUNK);
        MPI_Request req;
        CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf + off, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req));
        wait_request(&req);
    }
}

static void mpi_allreduce_f64(dpt_comm *comm, double *buf, int64_t n)
{
    (void)comm;
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
}

static void mpi_broadcast(dpt_comm *comm, void *buf, size_t bytes, int root)
{
    (void)comm;
    for (size_t off = 0; off < bytes; off += (size_t)MPI_CHUNK) {
        int count = (int)(bytes - off < (size_t)MPI_CHUNK ? bytes - off : (size_t)MPI_CHUNK);
        CHECK_MPI(MPI_Bcast((char *)buf + off, count, MPI_BYTE, root, MPI_COMM_WORLD));
    }
}

static void mpi_allgather(dpt_comm *comm, const void *send, void *recv, size_t bytes)
{
    (void)comm;
    CHECK_MPI(MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD));
}

static void mpi_barrier(dpt_comm *comm)
{
    (void)comm;
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
}

static void mpi_free(dpt_comm *comm)
{
    free(comm);
}

static const dpt_comm_ops mpi_ops = {
    .name = "mpi",
    .allreduce_f32 = mpi_allreduce_f32,
    .allreduce_f64 = mpi_allreduce_f64,
    .broadcast = mpi_broadcast,
    .allgather = mpi_allgather,
    .barrier = mpi_barrier,
    .free = mpi_free,
};

dpt_comm *dpt_comm_mpi_new(void)
{
    dpt_comm *comm = calloc(1, sizeof *comm);
    if (!comm) dpt_fatal("out of host memory for a communicator");
    comm->ops = &mpi_ops;
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &comm->rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &comm->size));
    return comm;
}
