/* comm.h: the communicator interface. comm_mpi.c carries CPU buffers over MPI, comm_threads.c
 * carries them between threads of one process (DataParallel), comm_nccl.c (CUDA issue)
 * carries device buffers over NCCL. The reducer sees only this table. */
#ifndef DPT_COMM_H
#define DPT_COMM_H

#include "dpt.h"

typedef struct dpt_comm_ops {
    const char *name;
    /* In-place sum over all ranks; every rank gets the result. */
    void (*allreduce_f32)(dpt_comm *comm, float *buf, int64_t n);
    void (*allreduce_f64)(dpt_comm *comm, double *buf, int64_t n);
    void (*broadcast)(dpt_comm *comm, void *buf, size_t bytes, int root);
    /* recv holds size * bytes: rank r's send lands at recv + r * bytes. */
    void (*allgather)(dpt_comm *comm, const void *send, void *recv, size_t bytes);
    void (*barrier)(dpt_comm *comm);
    void (*free)(dpt_comm *comm);
} dpt_comm_ops;

struct dpt_comm {
    const dpt_comm_ops *ops;
    int rank, size;
    double delay_ms_per_mb; /* benchmarks only: a slow network, latency per MiB AllReduced */
    void *impl;
};

dpt_comm *dpt_comm_mpi_new(void); /* over MPI_COMM_WORLD */

/* A group of `size` thread ranks in one process; each thread takes its own comm by rank. */
typedef struct dpt_thread_group dpt_thread_group;
dpt_thread_group *dpt_thread_group_new(int size);
dpt_comm *dpt_comm_thread_new(dpt_thread_group *group, int rank);
void dpt_thread_group_free(dpt_thread_group *group);

#endif
