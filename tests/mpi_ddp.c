/* mpi_ddp.c: DistributedDataParallel under mpirun (-np 2 and 3). Every rank runs the same
 * checks; a failure prints the rank and aborts the job, so nothing hangs. The reference is
 * a single-process run computed on each rank. Prints "N passed, 0 failed" on rank 0.
 * `mpi_ddp --unused` instead trains a model with an unused parameter (expected to stop). */
#include <mpi.h>
#include <math.h>

#include "tests/ddp_common.h"
#include "runtime/zero.h"

static int rank, size, checks;

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        checks++;                                                                                            \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "FAIL rank %d %s:%d: ", rank, __FILE__, __LINE__);                               \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fputc('\n', stderr);                                                                             \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                                    \
        }                                                                                                    \
    } while (0)

static void free_result(ddp_result *r)
{
    free(r->params);
}

/* Every rank holds bit-identical parameters after a DDP run. */
static void check_same_on_all_ranks(const ddp_result *res, const char *what)
{
    float *all = malloc((size_t)(res->n * size) * sizeof(float));
    MPI_Allgather(res->params, (int)res->n, MPI_FLOAT, all, (int)res->n, MPI_FLOAT, MPI_COMM_WORLD);
    for (int r = 1; r < size; r++)
        CHECK(memcmp(all, all + r * res->n, (size_t)res->n * sizeof(float)) == 0,
              "%s: rank %d's parameters differ from rank 0's", what, r);
    free(all);
}

/* N ranks x batch B == 1 process x batch N*B (same samples per step, same update). */
static void test_equivalence(dpt_comm *comm, const dpt_dataset *ds, const char *optim)
{
    ddp_run run = {.batch = 8,
                   .accum = 1,
                   .bucket_mb = 25,
                   .overlap = true,
                   .steps = 12,
                   .optim = optim,
                   .drop_last = true};
    ddp_result multi = ddp_train(&run, comm, ds);
    ddp_run single = run;
    single.batch = run.batch * size;
    ddp_result ref = ddp_train(&single, NULL, ds);
    double rel = ddp_rel_diff(&multi, &ref);
    if (rank == 0)
        printf("equivalence %s: %d ranks x 8 vs 1 x %d: max rel diff %.2e\n", optim, size, 8 * size, rel);
    CHECK(rel < 1e-5, "%s: %d ranks differ from one process by %.3e (relative)", optim, size, rel);
    check_same_on_all_ranks(&multi, optim);
    free_result(&multi);
    free_result(&ref);
}

/* SyncBatchNorm: a CNN with BN over N ranks x B matches one process x N*B, running
 * statistics included; plain BN (local statistics) does not. With one parameter per bucket,
 * the gradient AllReduces (communication thread) run while backward's SyncBN AllReduces
 * (main thread) are issued: on one shared communicator the two streams of collectives could
 * pair up differently on different ranks. */
static void test_sync_batchnorm(dpt_comm *comm, const dpt_dataset *ds)
{
    const double buckets[] = {25, 1e-9};
    for (int k = 0; k < 2; k++) {
        ddp_run run = {.batch = 6,
                       .accum = 1,
                       .bucket_mb = buckets[k],
                       .overlap = true,
                       .steps = 8,
                       .optim = "sgd",
                       .drop_last = true,
                       .model_sets = {"model.name=cnn", "model.channels=4,6", "model.fc=8", "model.dropout=0",
                                      "model.sync_bn=true"}};
        ddp_result multi = ddp_train(&run, comm, ds);
        ddp_run single = run;
        single.batch = run.batch * size;
        ddp_result ref = ddp_train(&single, NULL, ds);
        double rel = ddp_rel_diff(&multi, &ref), rel_buf = 0.0, den = 0.0;
        for (int64_t i = 0; i < multi.nbuffers_scalars && i < 256; i++) {
            double d = fabs(multi.buffers[i] - ref.buffers[i]);
            rel_buf = d > rel_buf ? d : rel_buf;
            den = fabs(ref.buffers[i]) > den ? fabs(ref.buffers[i]) : den;
        }
        rel_buf /= den;
        run.model_sets[4] = "model.sync_bn=false";
        ddp_result local = ddp_train(&run, comm, ds);
        double rel_local = ddp_rel_diff(&local, &ref);
        if (rank == 0)
            printf("SyncBN %d ranks x 6 vs 1 x %d (%s): params %.2e, running stats %.2e (plain BN: %.2e)\n",
                   size, 6 * size, k ? "one parameter per bucket" : "one bucket", rel, rel_buf, rel_local);
        CHECK(rel < 1e-5 && rel_buf < 1e-5, "SyncBN differs from one process: %.3e / %.3e", rel, rel_buf);
        CHECK(rel_local > 1e-4, "plain BN unexpectedly matched the global batch (%.3e)", rel_local);
        free_result(&multi), free_result(&ref), free_result(&local);
    }
}

/* Overlap on/off and bucket sizes from one parameter per bucket to one bucket: same bits. */
static void test_overlap_and_buckets(dpt_comm *comm, const dpt_dataset *ds)
{
    ddp_run base = {.batch = 8,
                    .accum = 1,
                    .bucket_mb = 25,
                    .overlap = true,
                    .steps = 8,
                    .optim = "adamw",
                    .drop_last = true};
    ddp_result a = ddp_train(&base, comm, ds);
    ddp_run v = base;
    v.overlap = false;
    ddp_result b = ddp_train(&v, comm, ds);
    CHECK(memcmp(a.params, b.params, (size_t)a.n * sizeof(float)) == 0, "overlap on and off differ");
    v = base;
    v.bucket_mb = 1e-9; /* every parameter in its own bucket */
    ddp_result tiny = ddp_train(&v, comm, ds);
    CHECK(tiny.nbuckets == tiny.nparams, "tiny buckets: %d buckets for %d params", tiny.nbuckets,
          tiny.nparams);
    v.bucket_mb = 1e-3; /* a few parameters per bucket */
    ddp_result mid = ddp_train(&v, comm, ds);
    CHECK(mid.nbuckets > 1 && mid.nbuckets < mid.nparams, "mid buckets: %d", mid.nbuckets);
    CHECK(a.nbuckets == 1, "25 MiB: %d buckets", a.nbuckets);
    CHECK(memcmp(a.params, tiny.params, (size_t)a.n * sizeof(float)) == 0,
          "one bucket vs one per parameter differ");
    CHECK(memcmp(a.params, mid.params, (size_t)a.n * sizeof(float)) == 0, "bucket sizes change the result");
    for (int i = 0; i < tiny.nparams; i++)
        CHECK(tiny.reduce_counts[i] == base.steps && a.reduce_counts[i] == base.steps,
              "parameter %d reduced %lld times in %d steps", i, (long long)tiny.reduce_counts[i], base.steps);
    if (rank == 0)
        printf("overlap on/off, 1/%d/%d buckets: identical parameters\n", mid.nbuckets, tiny.nbuckets);
    free_result(&a), free_result(&b), free_result(&tiny), free_result(&mid);
}

/* Accumulating k micro-batches of B == one step of k*B; communication only on the last. */
static void test_accumulation(dpt_comm *comm, const dpt_dataset *ds)
{
    ddp_run acc = {.batch = 4,
                   .accum = 3,
                   .bucket_mb = 1e-9,
                   .overlap = true,
                   .steps = 6,
                   .optim = "sgd",
                   .drop_last = true};
    ddp_result a = ddp_train(&acc, comm, ds);
    ddp_run big = acc;
    big.batch = 12, big.accum = 1;
    ddp_result b = ddp_train(&big, comm, ds);
    double rel = ddp_rel_diff(&a, &b);
    if (rank == 0) printf("accumulation 3 x 4 vs 1 x 12: max rel diff %.2e\n", rel);
    CHECK(rel < 1e-5, "accumulation differs by %.3e", rel);
    for (int i = 0; i < a.nparams; i++)
        CHECK(a.reduce_counts[i] == acc.steps,
              "with accumulation parameter %d reduced %lld times in %d steps", i,
              (long long)a.reduce_counts[i], acc.steps);
    free_result(&a), free_result(&b);
}

/* 600 samples over ranks x batch 7: not divisible; both drop_last settings run to the end. */
static void test_uneven(dpt_comm *comm, const dpt_dataset *ds)
{
    for (int drop = 0; drop < 2; drop++) {
        ddp_run run = {.batch = 7,
                       .accum = 1,
                       .bucket_mb = 25,
                       .overlap = true,
                       .steps = (int)(DDP_N / size / 7) + 3,
                       .optim = "sgd",
                       .drop_last = drop};
        ddp_result r = ddp_train(&run, comm, ds);
        CHECK(isfinite(r.last_loss), "uneven data: loss %f", r.last_loss);
        free_result(&r);
    }
    if (rank == 0) printf("uneven data (600 over %d x 7), drop_last both ways: completed\n", size);
}

/* Distributed evaluation: each sample counted once over all ranks. */
/* [distributed] grad_compression: the 16-bit AllReduce within its documented bound (and not
 * exact: it did compress), the same bits on every rank; training with bf16 gradients stays
 * within 2% of fp32 DDP and every rank holds the same parameters. */
static void test_compression(dpt_comm *comm, const dpt_dataset *ds)
{
    for (int bf16 = 0; bf16 < 2; bf16++) {
        bool differs;
        double ratio = h16_bound_ratio(comm, bf16, 4099, &differs);
        if (rank == 0) printf("%s allreduce over %d ranks: worst error %.2f of the bound\n", bf16 ? "bf16" : "fp16", size, ratio);
        CHECK(ratio <= 1.0, "%s allreduce: error %.3f x the bound", bf16 ? "bf16" : "fp16", ratio);
        CHECK(differs, "%s allreduce equals the fp32 average exactly: nothing was compressed", bf16 ? "bf16" : "fp16");
    }
    ddp_run run = {.batch = 8, .accum = 1, .bucket_mb = 25, .overlap = true, .steps = 12, .optim = "sgd",
                   .drop_last = true};
    ddp_result plain = ddp_train(&run, comm, ds);
    run.compression = DPT_GRAD_COMPRESSION_BF16;
    ddp_result comp = ddp_train(&run, comm, ds);
    double rel = ddp_rel_diff(&comp, &plain);
    if (rank == 0) printf("bf16 gradients vs fp32 DDP, %d ranks, 12 SGD steps: max rel diff %.2e\n", size, rel);
    CHECK(rel < 2e-2 && rel > 0, "bf16-compressed DDP differs from fp32 DDP by %.3e", rel);
    check_same_on_all_ranks(&comp, "bf16 gradients");
    free_result(&plain);
    free_result(&comp);
}

/* [distributed] zero's collectives: dpt_zero_range cuts [0, n) into one contiguous range per
 * rank at 64-float boundaries; the reduce-scatter leaves this rank's range of the sum (float64
 * reference, within the rounding of size - 1 additions) and, bit for bit, what the AllReduce
 * gives there (the bit-identity of zero = 2 with zero = 0 rests on it: Open MPI's non-blocking
 * reduce-scatter and AllReduce add in the same order); the all-gather copies every range, the
 * gather (a checkpoint's state) every range to the root only. */
static void test_reduce_scatter(dpt_comm *comm)
{
    const int64_t sizes[] = {1, 63, 64, 65, 1000, 4099, 100003};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int64_t n = sizes[k], *displs = malloc((size_t)(size + 1) * sizeof *displs), lo, hi, prev_hi = 0;
        for (int q = 0; q < size; q++) {
            dpt_zero_range(n, size, q, &lo, &hi);
            CHECK(lo == prev_hi && hi >= lo && hi <= n && (lo % 64 == 0 || lo == n),
                  "n %lld: rank %d's range [%lld, %lld) after %lld", (long long)n, q, (long long)lo, (long long)hi,
                  (long long)prev_hi);
            displs[q] = lo, prev_hi = hi;
        }
        CHECK(prev_hi == n, "n %lld: the ranges end at %lld", (long long)n, (long long)prev_hi);
        displs[size] = n;
        float *mine = malloc((size_t)n * sizeof *mine), *rs = malloc((size_t)n * sizeof *rs),
              *ar = malloc((size_t)n * sizeof *ar), *all = malloc((size_t)n * (size_t)size * sizeof *all);
        for (int64_t i = 0; i < n; i++) /* the same numbers every rank can make for every rank */
            for (int q = 0; q < size; q++)
                all[(size_t)q * (size_t)n + (size_t)i] = sinf(0.37f * (float)i + 1.3f * (float)q) * (1.0f + (float)q);
        memcpy(mine, all + (size_t)rank * (size_t)n, (size_t)n * sizeof *mine);
        memcpy(rs, mine, (size_t)n * sizeof *rs);
        memcpy(ar, mine, (size_t)n * sizeof *ar);
        dpt_comm_reduce_scatter_f32(comm, rs, displs, "test reduce-scatter");
        dpt_comm_allreduce_f32(comm, ar, n, "test allreduce");
        for (int64_t i = displs[rank]; i < displs[rank + 1]; i++) {
            double sum = 0, mag = 0;
            for (int q = 0; q < size; q++)
                sum += all[(size_t)q * (size_t)n + (size_t)i], mag += fabs(all[(size_t)q * (size_t)n + (size_t)i]);
            CHECK(fabs(rs[i] - sum) <= (size - 1) * mag * 0x1p-24 + 1e-30, "n %lld [%lld]: %.9g vs %.9g", (long long)n,
                  (long long)i, rs[i], sum);
            CHECK(memcmp(&rs[i], &ar[i], sizeof rs[i]) == 0, "n %lld [%lld]: reduce-scatter %.9g, AllReduce %.9g",
                  (long long)n, (long long)i, rs[i], ar[i]);
        }
        for (int64_t i = 0; i < n; i++) /* every rank's own range: its numbers, the rest poisoned */
            rs[i] = i >= displs[rank] && i < displs[rank + 1] ? mine[i] : NAN;
        dpt_comm_allgatherv_f32(comm, rs, displs, "test allgatherv");
        for (int q = 0; q < size; q++)
            for (int64_t i = displs[q]; i < displs[q + 1]; i++)
                CHECK(rs[i] == all[(size_t)q * (size_t)n + (size_t)i], "allgatherv n %lld [%lld] from rank %d",
                      (long long)n, (long long)i, q);
        for (int bf16 = 0; bf16 < 2; bf16++) { /* 16 bits: the same bits as the 16-bit AllReduce */
            uint16_t *hs = malloc((size_t)n * sizeof *hs), *ha = malloc((size_t)n * sizeof *ha);
            dpt_h16_from_f32_n(hs, mine, n, bf16);
            memcpy(ha, hs, (size_t)n * sizeof *ha);
            dpt_comm_reduce_scatter_h16(comm, hs, displs, bf16, "test reduce-scatter h16");
            dpt_comm_allreduce_h16(comm, ha, n, bf16, "test allreduce h16");
            CHECK(memcmp(hs + displs[rank], ha + displs[rank], (size_t)(displs[rank + 1] - displs[rank]) * sizeof *hs) == 0,
                  "n %lld: the %s reduce-scatter differs from the AllReduce", (long long)n, bf16 ? "bf16" : "fp16");
            free(hs), free(ha);
        }
        int root = size - 1; /* the gather: root gets every range, the others keep theirs */
        for (int64_t i = 0; i < n; i++)
            rs[i] = i >= displs[rank] && i < displs[rank + 1] ? mine[i] : -1.0f;
        dpt_comm_gatherv_f32(comm, rs, displs, root, "test gatherv");
        for (int q = 0; q < size; q++)
            for (int64_t i = displs[q]; i < displs[q + 1]; i++)
                CHECK(rs[i] == (rank == root || q == rank ? all[(size_t)q * (size_t)n + (size_t)i] : -1.0f),
                      "gatherv to %d: n %lld [%lld] from rank %d on rank %d", root, (long long)n, (long long)i, q, rank);
        free(mine), free(rs), free(ar), free(all), free(displs);
    }
}

/* shard_grads (zero = 2's gradient memory): one parameter per bucket (more than the 4 alive at
 * once, so backward waits for the wire), with and without accumulation. After finish every
 * parameter's .grad has no storage, and this rank's ranges, where dpt_ddp_grad_shards says, are
 * bit for bit the AllReduced average's (the same batches through plain DDP beside it).
 * Re-planned (bucket_mb = auto under zero = 2): buckets of several parameters at the start,
 * then one per parameter, then a size between, then the first again: the ranges are the first
 * plan's segments' whatever the buckets (dpt_ddp_param_segment, fixed), every shard pointer
 * stays where it was (the optimizer holds them), and they keep holding the AllReduced average;
 * with the gradients kept whole (shard_grads 0) the same ranges of .grad do. */
static void check_ranges(dpt_ddp *const ddp[2], dpt_model *const m[2], int step, const char *how,
                         float *const *first_at)
{
    float *const *at = dpt_ddp_grad_shards(ddp[0]);
    int n = dpt_model_num_params(m[0]);
    for (int p = 0; p < n; p++) {
        const dpt_tensor *g = dpt_model_param_at(m[1], p)->grad, *mine = dpt_model_param_at(m[0], p)->grad;
        int seg;
        int64_t off, numel, lo, hi;
        dpt_ddp_param_segment(ddp[0], p, &seg, &off, &numel);
        dpt_zero_range(numel, size, rank, &lo, &hi);
        lo = lo < off ? 0 : lo - off > g->numel ? g->numel : lo - off;
        hi = hi < off ? 0 : hi - off > g->numel ? g->numel : hi - off;
        const float *got = at ? at[p] : mine->data + lo;
        if (at) {
            CHECK(!mine->data, "%s, step %d: %s's gradient kept its storage", how, step, dpt_model_param_at(m[0], p)->name);
            CHECK((hi > lo) == (at[p] != NULL) && at[p] == first_at[p], "%s, step %d: %s: range [%lld, %lld), shard %p (first %p)",
                  how, step, dpt_model_param_at(m[0], p)->name, (long long)lo, (long long)hi, (void *)at[p],
                  (void *)first_at[p]);
        }
        if (hi > lo)
            CHECK(!memcmp(got, g->data + lo, (size_t)(hi - lo) * sizeof(float)),
                  "%s, step %d: %s's range [%lld, %lld) differs from the AllReduced average", how, step,
                  dpt_model_param_at(m[0], p)->name, (long long)lo, (long long)hi);
    }
}

static void test_shard_grads(dpt_comm *comm, const dpt_dataset *ds)
{
    /* {accumulation, shard_grads, re-planned} */
    static const int cases[][3] = {{1, 2, 0}, {2, 2, 0}, {1, 2, 1}, {2, 2, 1}, {1, 0, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int accum = cases[c][0], shard = cases[c][1], replan = cases[c][2];
        char how[64];
        snprintf(how, sizeof how, "accum %d, shard_grads %d%s", accum, shard, replan ? ", re-planned" : "");
        dpt_error err;
        dpt_config *cfg = dpt_config_defaults();
        dpt_config_set(cfg, "model.hidden=40,24", &err);
        dpt_ctx_options co = {.device = {DPT_DEVICE_CPU, 0}, .threads = 1, .seed = 99};
        dpt_ctx *ctx[2];
        dpt_model *m[2];
        dpt_ddp *ddp[2];
        dpt_loader *l[2];
        /* 2 KiB: fc3's and fc2's tensors (fc2's 3.75 KiB weight closes it), then fc1's: 2 segments */
        double sizes[] = {replan ? 2.0 / 1024 : 1e-6, 1e-6, 0.5 / 1024, 2.0 / 1024};
        for (int k = 0; k < 2; k++) { /* 0: reduce-scatter keeping ranges, 1: plain DDP */
            ctx[k] = dpt_ctx_new(&co, &err);
            m[k] = dpt_model_build(ctx[k], cfg, 1, 4, 5, DDP_CLASSES, &err);
            dpt_ddp_options o = {.bucket_mb = k == 0 ? sizes[0] : 25, .overlap = true, .timeout_s = 60,
                                 .dataset_len = ds->n, .reduce_scatter = k == 0, .shard_grads = k == 0 ? shard : 0};
            ddp[k] = dpt_ddp_new(ctx[k], m[k], comm, &o, &err);
            CHECK(ddp[k], "rank %d: %s", rank, err.msg);
            dpt_loader_options lo = {.batch = 8, .shuffle = true, .seed = 3, .rank = rank, .world_size = size,
                                     .mean = 0.5f, .std = 0.25f};
            l[k] = dpt_loader_new(ctx[k], ds, &lo);
            dpt_loader_start_epoch(l[k], 0);
        }
        int n = dpt_model_num_params(m[0]), first_buckets = dpt_ddp_num_buckets(ddp[0]);
        if (replan)
            CHECK(first_buckets == 2, "%s: %d buckets at %g MiB, not 2", how, first_buckets, sizes[0]);
        else
            CHECK(first_buckets == n && n > 4, "%d buckets for %d parameters", first_buckets, n);
        float *const *at = dpt_ddp_grad_shards(ddp[0]);
        CHECK((at != NULL) == (shard == 2) && !dpt_ddp_grad_shards(ddp[1]), "grad shards %p / %p", (void *)at,
              (void *)dpt_ddp_grad_shards(ddp[1]));
        float *first_at[16] = {0};
        for (int p = 0; at && p < n && p < 16; p++)
            first_at[p] = at[p];
        for (int step = 0; step < 4; step++) {
            if (replan && step > 0) {
                dpt_ddp_replan(ddp[0], sizes[step]);
                /* 0.5 KiB: fc3's two tensors, fc2's, fc1's (a bucket ends where a segment does) */
                int want = step == 1 ? n : step == 2 ? 3 : 2;
                CHECK(dpt_ddp_num_buckets(ddp[0]) == want,
                      "%s, step %d: %d buckets at %g MiB", how, step, dpt_ddp_num_buckets(ddp[0]), sizes[step]);
            }
            for (int k = 0; k < 2; k++) {
                for (int micro = 0; micro < accum; micro++) {
                    dpt_batch b;
                    dpt_loader_next_cycle(l[k], &b);
                    dpt_ddp_set_sync(ddp[k], micro == accum - 1);
                    dpt_backward(ctx[k], dpt_cross_entropy(ctx[k], dpt_model_forward(m[k], ctx[k], b.x), b.labels, 0.0f));
                    dpt_tape_clear(ctx[k]);
                }
                dpt_ddp_finish(ddp[k]);
            }
            check_ranges(ddp, m, step, how, first_at);
            for (int k = 0; k < 2; k++) /* no optimizer: the same weights, new batches */
                dpt_model_zero_grad(m[k]);
        }
        for (int k = 0; k < 2; k++) {
            dpt_ddp_free(ddp[k]);
            dpt_loader_free(l[k]);
            dpt_model_free(m[k]);
            dpt_ctx_free(ctx[k]);
        }
        dpt_config_free(cfg);
    }
}

static void test_eval_exactly_once(dpt_comm *comm, const dpt_dataset *ds)
{
    dpt_error err;
    dpt_ctx_options co = {.device = {DPT_DEVICE_CPU, 0}, .threads = 1, .seed = 1};
    dpt_ctx *ctx = dpt_ctx_new(&co, &err);
    dpt_loader_options lo = {
        .batch = 64, .exact_shards = true, .rank = rank, .world_size = size, .mean = 0.5f, .std = 0.25f};
    dpt_loader *l = dpt_loader_new(ctx, ds, &lo);
    double local = (double)dpt_loader_num_samples(l), total = 0;
    MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    CHECK(total == DDP_N, "evaluation shards cover %g samples, not %d", total, DDP_N);
    dpt_loader_free(l);
    dpt_ctx_free(ctx);
}

/* zero_overlap: the all-gather after a step runs on its own thread while the next forward reads
 * the parameters; each op waits for the pieces it reads. Four parameters of 300 floats (the
 * ranks' ranges cut inside each), each its own segment, on a communicator slowed to
 * about 3 ms a piece, so the forward always finds gathers in flight. Each "step" every rank
 * writes step * 1000 + i into its own range of each parameter, posts the gathers, and runs a
 * forward that copies the parameters out in the order of the first forward: every element read
 * must be the new value (a missing wait reads the old one). A forward in another order is
 * reported by forward_end, naming the parameter read too early. */
static const int *read_order;
static dpt_tensor *order_forward(dpt_model *m, dpt_ctx *ctx, dpt_tensor *x)
{
    dpt_tensor *out = NULL;
    for (int i = 0; i < 4; i++) {
        dpt_tensor *y = dpt_mul(ctx, x, dpt_model_param_at(m, read_order[i]));
        out = out ? dpt_concat(ctx, 2, (dpt_tensor *[]){out, y}, 0) : y;
    }
    return out;
}

static void test_zero_overlap(dpt_comm *comm)
{
    enum { N = 300 };
    dpt_error err;
    dpt_ctx_options co = {.device = {DPT_DEVICE_CPU, 0}, .threads = 1, .seed = 5};
    dpt_ctx *ctx = dpt_ctx_new(&co, &err);
    dpt_model *m = dpt_model_new(ctx, "order", order_forward);
    for (int p = 0; p < 4; p++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", p);
        dpt_model_param(m, name, 1, (int64_t[]){N});
    }
    int segment_of[4] = {0, 1, 2, 3};
    int64_t offset_of[4] = {0}, numel[4] = {N, N, N, N};
    dpt_zero_layout layout = {.nsegments = 4, .segment_of = segment_of, .offset_of = offset_of, .segment_numel = numel};
    dpt_zero *z = dpt_zero_new(m, comm, &layout);
    dpt_comm_set_delay(comm, 5000.0); /* ms per MiB: 600 bytes a piece -> ~3 ms; the dup takes it */
    CHECK(dpt_zero_overlap(z), "no overlap on an MPI communicator");
    dpt_comm_set_delay(comm, 0.0);
    dpt_tensor *ones = dpt_tensor_new(ctx, 1, (int64_t[]){N});
    for (int i = 0; i < N; i++)
        ones->data[i] = 1.0f;
    static const int forward_order[4] = {2, 0, 3, 1}, other_order[4] = {1, 3, 0, 2};
    const int64_t *lo = dpt_zero_lo(z), *hi = dpt_zero_hi(z);
    for (int step = 0; step < 5; step++) {
        if (step > 0) { /* the "optimizer": this rank's ranges, then the gathers posted */
            for (int p = 0; p < 4; p++)
                for (int64_t i = lo[p]; i < hi[p]; i++)
                    dpt_model_param_at(m, p)->data[i] = (float)(step * 1000 + i);
            CHECK(dpt_zero_sync_params_async(z), "step %d: gathers not posted", step);
        }
        read_order = step == 4 ? other_order : forward_order;
        dpt_zero_forward_begin(z, ctx, step);
        dpt_tensor *y = dpt_model_forward(m, ctx, ones);
        bool ok = dpt_zero_forward_end(z, ctx, &err);
        if (step < 4) {
            CHECK(ok, "step %d: %s", step, err.msg);
            for (int k = 0; k < 4 && step > 0; k++)
                for (int i = 0; i < N; i++)
                    CHECK(y->data[k * N + i] == (float)(step * 1000 + i),
                          "step %d: %s[%d] read %g before its gather (want %d)", step,
                          dpt_model_param_at(m, forward_order[k])->name, i, (double)y->data[k * N + i], step * 1000 + i);
        } else {
            CHECK(!ok && strstr(err.msg, "read p") && strstr(err.msg, "HINT: [distributed] zero_overlap = false"),
                  "a forward in another order: %s", ok ? "not reported" : err.msg);
        }
        dpt_tape_clear(ctx);
    }
    dpt_zero_free(z);
    dpt_tensor_free(ones);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
}

/* A model whose second layer is never used: DDP stops with its name (run by tests/mpi_failures.sh). */
static dpt_linear *used_layer, *unused_layer;
static dpt_tensor *unused_forward(dpt_model *m, dpt_ctx *ctx, dpt_tensor *x)
{
    (void)m;
    return dpt_linear_forward(ctx, used_layer, dpt_flatten(ctx, x));
}

static int run_unused(dpt_comm *comm, const dpt_dataset *ds, bool find_unused)
{
    dpt_error err;
    dpt_ctx_options co = {.device = {DPT_DEVICE_CPU, 0}, .threads = 1, .seed = 1};
    dpt_ctx *ctx = dpt_ctx_new(&co, &err);
    dpt_model *m = dpt_model_new(ctx, "unused", unused_forward);
    used_layer = dpt_linear_new(m, "used", 20, DDP_CLASSES, true);
    unused_layer = dpt_linear_new(m, "spare", 20, 3, true);
    dpt_ddp_options o = {
        .bucket_mb = 25, .overlap = true, .find_unused = find_unused, .timeout_s = 30, .dataset_len = ds->n};
    dpt_ddp *ddp = dpt_ddp_new(ctx, m, comm, &o, &err);
    dpt_loader_options lo = {.batch = 8, .rank = rank, .world_size = size, .mean = 0.5f, .std = 0.25f};
    dpt_loader *l = dpt_loader_new(ctx, ds, &lo);
    dpt_batch b;
    dpt_loader_next(l, &b);
    dpt_backward(ctx, dpt_cross_entropy(ctx, dpt_model_forward(m, ctx, b.x), b.labels, 0.0f));
    dpt_ddp_finish(ddp);
    dpt_tape_clear(ctx);
    /* find_unused: the spare layer's gradient is zero on every rank */
    dpt_tensor *g = dpt_tensor_grad(dpt_model_param_at(m, 2));
    for (int64_t i = 0; i < dpt_tensor_numel(g); i++)
        CHECK(g->data[i] == 0.0f, "unused gradient not zero");
    dpt_loader_free(l);
    dpt_ddp_free(ddp);
    dpt_model_free(m);
    dpt_ctx_free(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    dpt_world world;
    dpt_error err;
    if (!dpt_world_init(&world, &argc, &argv, &err) || !world.mpi) {
        fprintf(stderr, "mpi_ddp must run under mpirun (%s)\n", world.mpi ? err.msg : "not launched by MPI");
        return 1;
    }
    rank = world.rank, size = world.size;
    dpt_comm *comm = dpt_world_comm(&world);
    dpt_dataset *ds = ddp_dataset();
    if (argc > 1 && !strcmp(argv[1], "--unused")) {
        run_unused(comm, ds, false);
        fprintf(stderr, "rank %d: an unused parameter was not reported\n", rank);
        return 1;
    }
    test_equivalence(comm, ds, "sgd");
    test_equivalence(comm, ds, "adamw");
    test_overlap_and_buckets(comm, ds);
    test_sync_batchnorm(comm, ds);
    test_accumulation(comm, ds);
    test_uneven(comm, ds);
    test_eval_exactly_once(comm, ds);
    test_compression(comm, ds);
    test_reduce_scatter(comm);
    test_shard_grads(comm, ds);
    test_zero_overlap(comm);
    run_unused(comm, ds, true);
    int total = 0;
    MPI_Reduce(&checks, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("mpi_ddp (%d ranks): %d checks passed, 0 failed\n", size, total);
    dpt_dataset_free(ds);
    dpt_world_finalize(&world);
    return 0;
}
