/* test_dp.c: DataParallel in one process: replica threads over the shared-memory
 * communicator give the same parameters as one replica with the whole batch, and the
 * shared-memory collectives themselves match a serial reference. */
#include <pthread.h>

#include "tests/testutil.h"
#include "tests/ddp_common.h"
#include "runtime/comm.h"
#include "runtime/log.h"

static void test_dp_matches_single(void **state)
{
    (void)state;
    dpt_dataset *ds = ddp_dataset();
    for (int n = 2; n <= 3; n++) {
        ddp_run run = {.batch = 8,
                       .accum = 1,
                       .bucket_mb = 1e-3,
                       .overlap = true,
                       .steps = 10,
                       .optim = "sgd",
                       .drop_last = true};
        static ddp_replica_job job;
        job.ds = ds, job.run = run;
        dpt_run_replicas(n, ddp_replica_main, &job);
        ddp_run single = run;
        single.batch = 8 * n;
        ddp_result ref = ddp_train(&single, NULL, ds);
        double rel = ddp_rel_diff(&job.results[0], &ref);
        print_message("DataParallel %d x cpu: max rel diff to one replica x %d: %.2e\n", n, 8 * n, rel);
        assert_true(rel < 1e-5);
        for (int i = 1; i < n; i++) /* replicas stay in sync */
            assert_memory_equal(job.results[0].params, job.results[i].params, (size_t)ref.n * sizeof(float));
        for (int i = 0; i < n; i++)
            free(job.results[i].params);
        free(ref.params);
    }
    dpt_dataset_free(ds);
}

/* SyncBatchNorm across replica threads with one parameter per bucket: each replica's DDP
 * thread reduces buckets while its main thread issues backward's SyncBN sums. Both must
 * match one replica with the whole batch (each pair of collectives on its own group). */
static void test_dp_sync_batchnorm(void **state)
{
    (void)state;
    dpt_dataset *ds = ddp_dataset();
    for (int n = 2; n <= 3; n++) {
        ddp_run run = {.batch = 6,
                       .accum = 1,
                       .bucket_mb = 1e-9,
                       .overlap = true,
                       .steps = 6,
                       .optim = "sgd",
                       .drop_last = true,
                       .model_sets = {"model.name=cnn", "model.channels=4,6", "model.fc=8", "model.dropout=0",
                                      "model.sync_bn=true"}};
        static ddp_replica_job job;
        job.ds = ds, job.run = run;
        dpt_run_replicas(n, ddp_replica_main, &job);
        ddp_run single = run;
        single.batch = 6 * n;
        ddp_result ref = ddp_train(&single, NULL, ds);
        double rel = ddp_rel_diff(&job.results[0], &ref);
        print_message("DataParallel SyncBN %d x 6, one parameter per bucket, vs one replica x %d: %.2e\n", n,
                      6 * n, rel);
        assert_true(rel < 1e-5);
        for (int i = 0; i < n; i++)
            free(job.results[i].params);
        free(ref.params);
    }
    dpt_dataset_free(ds);
}

/* A replica that never reaches a collective: the others end the process after the
 * communicator's timeout with a message naming the collective (run in a child). */
static void late_replica(int rank, dpt_comm *comm, void *user)
{
    (void)user;
    dpt_comm_set_timeout(comm, 0.5);
    if (rank == 1) dpt_sleep_ms(20000); /* stuck */
    double x = 1.0;
    dpt_comm_allreduce_f64(comm, &x, 1, "the stuck-replica test sum");
}

static void run_stuck_replicas(void)
{
    dpt_run_replicas(3, late_replica, NULL);
}

static void test_dp_timeout(void **state)
{
    (void)state;
    char text[2048];
    double t0 = dpt_now_s();
    int status = run_in_child(run_stuck_replicas, text, sizeof text);
    double took = dpt_now_s() - t0;
    print_message("ended after %.1f s: %s", took, text[0] ? text : "(nothing)\n");
    assert_int_equal(status, 1);
    assert_contains(text, "collective timed out after");
    assert_contains(text, "the stuck-replica test sum");
    assert_true(took < 10.0);
}

/* A stand-in for a device communicator on the CPU: reduce_avg_async takes a snapshot of the
 * bucket when it is enqueued (what a stream ordered behind the compute stream at that point
 * would read) and join() reduces the snapshots and writes the averages back. A bucket
 * launched before its gradients were final, or read before join, gives other numbers. */
typedef struct deferred {
    dpt_comm *host;
    float *bufs[64], *snaps[64];
    int64_t lens[64];
    int n, joins, launches;
} deferred;

static void deferred_reduce(dpt_comm *comm, float *buf, int64_t n)
{
    deferred *q = comm->impl;
    assert_true(q->n < 64);
    q->snaps[q->n] = malloc((size_t)n * sizeof(float));
    memcpy(q->snaps[q->n], buf, (size_t)n * sizeof(float));
    memset(buf, 0xff, (size_t)n * sizeof(float)); /* NaN until join: an early read is caught */
    q->bufs[q->n] = buf, q->lens[q->n] = n;
    q->n++, q->launches++;
}

static void deferred_join(dpt_comm *comm, const char *what, double *comm_s, double *exposed_s)
{
    deferred *q = comm->impl;
    for (int i = 0; i < q->n; i++) {
        dpt_comm_allreduce_f32(q->host, q->snaps[i], q->lens[i], "test");
        for (int64_t j = 0; j < q->lens[i]; j++)
            q->bufs[i][j] = q->snaps[i][j] * (1.0f / (float)comm->size);
        free(q->snaps[i]);
    }
    q->n = 0;
    q->joins++;
    if (comm_s) *comm_s = 0.001;
    if (exposed_s) *exposed_s = 0.0;
}

static void deferred_allgather(dpt_comm *comm, const void *send, void *recv, size_t bytes, const char *what)
{
    deferred *q = comm->impl;
    dpt_comm_allgather(q->host, send, recv, bytes, what);
}
static void deferred_broadcast(dpt_comm *comm, void *buf, size_t bytes, int root, const char *what)
{
    deferred *q = comm->impl;
    dpt_comm_broadcast(q->host, buf, bytes, root, what);
}
static void deferred_allreduce_f64(dpt_comm *comm, double *buf, int64_t n, const char *what)
{
    deferred *q = comm->impl;
    dpt_comm_allreduce_f64(q->host, buf, n, what);
}

static const dpt_comm_ops deferred_ops = {.name = "deferred",
                                          .allreduce_f64 = deferred_allreduce_f64,
                                          .broadcast = deferred_broadcast,
                                          .allgather = deferred_allgather,
                                          .reduce_avg_async = deferred_reduce,
                                          .join = deferred_join};

static deferred queues[3];

static void async_replica_main(int rank, dpt_comm *host, void *user)
{
    ddp_replica_job *job = user;
    deferred *q = &queues[rank];
    *q = (deferred){.host = host};
    dpt_comm comm = {.ops = &deferred_ops, .rank = host->rank, .size = host->size, .impl = q};
    job->results[rank] = ddp_train(&job->run, &comm, job->ds);
}

/* The DDP engine's path for device communicators (no thread; enqueue from the hook, join in
 * finish) gives the same bits as its threaded path, for overlap on and off and with
 * accumulation (no_sync micro-batches must not enqueue anything). */
static void test_ddp_async_seam(void **state)
{
    (void)state;
    dpt_dataset *ds = ddp_dataset();
    for (int variant = 0; variant < 3; variant++) {
        ddp_run run = {.batch = 8,
                       .accum = variant == 2 ? 3 : 1,
                       .bucket_mb = 1e-3,
                       .overlap = variant != 1,
                       .steps = 6,
                       .optim = "adamw",
                       .drop_last = true};
        static ddp_replica_job threaded, async;
        threaded.ds = async.ds = ds, threaded.run = async.run = run;
        dpt_run_replicas(2, ddp_replica_main, &threaded);
        dpt_run_replicas(2, async_replica_main, &async);
        int64_t n = threaded.results[0].n;
        for (int r = 0; r < 2; r++) {
            if (memcmp(threaded.results[r].params, async.results[r].params, (size_t)n * sizeof(float)) != 0)
                fail_msg("variant %d rank %d: the async path differs from the threaded one", variant, r);
            assert_int_equal(queues[r].joins, run.steps);
            assert_true(queues[r].launches >= 2 * run.steps); /* several buckets per step */
            free(threaded.results[r].params);
            free(async.results[r].params);
        }
    }
    dpt_dataset_free(ds);
}

/* Each gradient view starts 256 bytes into its bucket, or a multiple of that (cuBLAS and
 * cuDNN pick kernels by alignment), and the views of a bucket do not overlap. */
static void align_replica(int rank, dpt_comm *comm, void *user)
{
    (void)user;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_error err;
    dpt_config *cfg = dpt_config_defaults();
    assert_true(dpt_config_set(cfg, "model.hidden=7,5,3", &err)); /* sizes that are no multiple of 64 */
    dpt_model *m = dpt_model_build(ctx, cfg, 1, 3, 3, 3, &err);
    dpt_ddp_options o = {.bucket_mb = 1, .overlap = true, .timeout_s = 60, .dataset_len = 1};
    dpt_ddp *d = dpt_ddp_new(ctx, m, comm, &o, &err);
    if (!d) fail_msg("%s", err.msg);
    for (int b = 0; b < dpt_ddp_num_buckets(d); b++) {
        int params[64], n = dpt_ddp_bucket_params(d, b, params, 64);
        const float *base = dpt_model_param_at(m, params[0])->grad->data, *end = base;
        for (int k = 0; k < n; k++) {
            const dpt_tensor *g = dpt_model_param_at(m, params[k])->grad;
            if ((g->data - base) % 64 != 0)
                fail_msg("rank %d: %s's gradient is %td floats into its bucket", rank,
                         dpt_model_param_at(m, params[k])->name, g->data - base);
            assert_true(g->data >= end); /* in order, no overlap */
            end = g->data + g->numel;
        }
    }
    dpt_ddp_free(d);
    dpt_model_free(m);
    dpt_config_free(cfg);
    dpt_ctx_free(ctx);
}

static void test_bucket_alignment(void **state)
{
    (void)state;
    dpt_run_replicas(2, align_replica, NULL);
}

typedef struct coll_arg {
    dpt_comm *comm;
    float buf[37];
    double dbuf[5];
    int gathered[4];
    char bcast[16];
} coll_arg;

static void *coll_main(void *p)
{
    coll_arg *a = p;
    int r = a->comm->rank;
    for (int i = 0; i < 37; i++)
        a->buf[i] = (float)(r * 100 + i);
    for (int i = 0; i < 5; i++)
        a->dbuf[i] = r + 0.5 * i;
    dpt_comm_allreduce_f32(a->comm, a->buf, 37, "test");
    dpt_comm_allreduce_f64(a->comm, a->dbuf, 5, "test");
    int mine = r * r + 1;
    dpt_comm_allgather(a->comm, &mine, a->gathered, sizeof mine, "test");
    snprintf(a->bcast, sizeof a->bcast, r == 2 ? "from two" : "nothing");
    dpt_comm_broadcast(a->comm, a->bcast, sizeof a->bcast, 2, "test");
    dpt_comm_barrier_named(a->comm, "test");
    return NULL;
}

static void test_thread_collectives(void **state)
{
    (void)state;
    enum { N = 4 };
    dpt_thread_group *g = dpt_thread_group_new(N);
    coll_arg args[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        args[i].comm = dpt_comm_thread_new(g, i);
        pthread_create(&th[i], NULL, coll_main, &args[i]);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < 37; k++)
            assert_float_equal(args[i].buf[k], 600.0f + 4.0f * k, 0.0);
        for (int k = 0; k < 5; k++)
            assert_float_equal(args[i].dbuf[k], 6.0 + 2.0 * k, 0.0);
        for (int k = 0; k < N; k++)
            assert_int_equal(args[i].gathered[k], k * k + 1);
        assert_string_equal(args[i].bcast, "from two");
        args[i].comm->ops->free(args[i].comm);
    }
    dpt_thread_group_free(g);
}

/* [distributed] grad_compression over DataParallel's thread communicator: the 16-bit
 * AllReduce within the bound (and not exact), for bf16 and fp16, 3 replicas. */
typedef struct h16_arg {
    dpt_comm *comm;
    double ratio[2];
    bool differs[2];
} h16_arg;

static void *h16_main(void *p)
{
    h16_arg *a = p;
    for (int bf16 = 0; bf16 < 2; bf16++)
        a->ratio[bf16] = h16_bound_ratio(a->comm, bf16, 1031, &a->differs[bf16]);
    return NULL;
}

static void test_thread_h16(void **state)
{
    (void)state;
    enum { N = 3 };
    dpt_thread_group *g = dpt_thread_group_new(N);
    h16_arg args[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        args[i].comm = dpt_comm_thread_new(g, i);
        pthread_create(&th[i], NULL, h16_main, &args[i]);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        for (int bf16 = 0; bf16 < 2; bf16++) {
            if (args[i].ratio[bf16] > 1.0)
                fail_msg("replica %d, %s: error %.3f x the bound", i, bf16 ? "bf16" : "fp16", args[i].ratio[bf16]);
            assert_true(args[i].differs[bf16]);
        }
        args[i].comm->ops->free(args[i].comm);
    }
    dpt_thread_group_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_collectives), cmocka_unit_test(test_thread_h16),
        cmocka_unit_test(test_dp_matches_single),
        cmocka_unit_test(test_dp_sync_batchnorm),  cmocka_unit_test(test_dp_timeout),
        cmocka_unit_test(test_ddp_async_seam),     cmocka_unit_test(test_bucket_alignment),
    };
    return cmocka_run_group_tests_name("dataparallel", tests, NULL, NULL);
}
