/* dp.c: DataParallel: one process, one replica per device, each on its own thread with its
 * own communicator over shared memory. The replicas run the same DDP engine as ranks do, so
 * DataParallel and mpirun give the same numbers. */
#include <pthread.h>
#include <stdlib.h>

#include "comm.h"
#include "error.h"

typedef struct replica_arg {
    dpt_replica_fn fn;
    int rank;
    dpt_comm *comm;
    void *user;
} replica_arg;

static void *replica_main(void *p)
{
    replica_arg *a = p;
    a->fn(a->rank, a->comm, a->user);
    return NULL;
}

void dpt_run_replicas(int n, dpt_replica_fn fn, void *user)
{
    DPT_ASSERT(n >= 1, "%d replicas", n);
    dpt_thread_group *group = dpt_thread_group_new(n);
    replica_arg *args = calloc((size_t)n, sizeof *args);
    pthread_t *threads = calloc((size_t)n, sizeof *threads);
    if (!args || !threads) dpt_fatal("out of host memory starting %d replicas", n);
    for (int i = 0; i < n; i++) {
        args[i] = (replica_arg){fn, i, dpt_comm_thread_new(group, i), user};
        if (pthread_create(&threads[i], NULL, replica_main, &args[i]) != 0)
            dpt_fatal("cannot start replica thread %d", i);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(threads[i], NULL);
        args[i].comm->ops->free(args[i].comm);
    }
    free(threads);
    free(args);
    dpt_thread_group_free(group);
}
