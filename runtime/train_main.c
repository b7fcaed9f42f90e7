/* train_main.c: dpt_train_main, the program ./train is: the command line, the config (read
 * and typed once), the world (mpirun) or DataParallel's replica threads, and after the run
 * the expectations a CI smoke test states (--expect, [expect], --junit). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train.h"
#include "schema.h"
#include "export.h"
#include "error.h"
#include "rng.h"

static void usage(FILE *out);
static int parse_cli(int argc, char **argv, cli *args);
static char *found_tokenizer; /* --sample hf:'s folder as the tokenizer (parse_cli), freed at the end */
static dpt_config *load_config(const cli *args, dpt_error *err);
static bool report_config_errors(const dpt_world *world, bool ok, const dpt_error *err);
static int print_env(const dpt_world *world, const run_config *run);
static int run_data_parallel(const dpt_world *world, const cli *args, const run_config *run,
                             dpt_run_result *result);
static int check_expectations(const dpt_world *world, const cli *args, const run_config *run, int rc,
                              const dpt_run_result *result);

/* --junit when the job ends on an error after start-up (a NaN loss, an unreadable file mid-run,
 * a timeout): the report is written from the last words, with the run's log tail, so a CI
 * reporter sees the failure instead of a missing file. Rank 0's (or the one process's). */
static const char *junit_path, *junit_suite;

static void junit_last_words(const char *message)
{
    report_note("%s\n", message);
    dpt_run_result none;
    memset(&none, 0, sizeof none);
    char msg[4400];
    if (!dpt_junit_write(junit_path, junit_suite, NULL, 0, &none, 1, report_tail(), msg, sizeof msg))
        fprintf(stderr, "error: --junit: %s\n", msg);
}

int dpt_train_main(int argc, char **argv)
{
    cli args;
    int rc = parse_cli(argc, argv, &args);
    if (rc >= 0) return rc;
    dpt_world world;
    dpt_error err;
    install_signal_handlers();
    if (!dpt_world_init(&world, &argc, &argv, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    install_crash_report(); /* after MPI_Init, whose own handler it replaces */
    dpt_config *cfg = load_config(&args, &err);
    run_config *run = calloc(1, sizeof *run);
    if (!run) dpt_fatal("out of host memory");
    bool ok = cfg && run_config_build(run, cfg, &args, world.size, &err);
    if (!report_config_errors(&world, ok, &err)) {
        if (args.junit && world.rank == 0) { /* a CI job's reporter still gets its failure */
            report_note("error: %s\n", err.msg);
            dpt_run_result none;
            memset(&none, 0, sizeof none);
            char msg[4400];
            if (!dpt_junit_write(args.junit, args.config_path ? args.config_path : "(defaults)", NULL, 0, &none, 1,
                                 report_tail(), msg, sizeof msg))
                fprintf(stderr, "error: --junit: %s\n", msg);
        }
        dpt_config_free(cfg);
        free(run);
        dpt_world_finalize(&world);
        return 1;
    }
    dpt_comm_set_timeout(dpt_world_comm(&world), run->ddp.timeout_s);
    if (args.junit && world.rank == 0) {
        junit_path = args.junit, junit_suite = run->config_path;
        dpt_set_last_words_hook(junit_last_words);
        crash_report_junit(args.junit, run->config_path); /* a crash's, written by its handler */
    }
    dpt_run_result result = {0};
    if (args.env) {
        rc = print_env(&world, run);
    } else if (*run->devices && world.size == 1) {
        rc = run_data_parallel(&world, &args, run, &result);
    } else {
        replica r = {.args = &args,
                     .run = run,
                     .comm = dpt_world_comm(&world),
                     .rank = world.rank,
                     .size = world.size,
                     .local_rank = world.local_rank,
                     .local_size = world.local_size,
                     .world = &world,
                     .print = world.rank == 0 || run->all_ranks,
                     .ckpt_lock_fd = -1,
                     .last_ckpt_step = -1};
        if (*run->devices) {
            dpt_errorf(&err,
                       "[distributed] devices = %s: DataParallel runs in one process; under "
                       "mpirun each rank takes one device\nHINT: leave devices empty with mpirun",
                       run->devices);
            return fail(&r, &err);
        }
        train_replica(&r);
        rc = r.rc;
        result = r.result;
    }
    if (!args.env && !args.dry_run && !args.summary && !args.sample && !args.export_format && !args.predict &&
        !args.show_batch) /* --eval: yes */
        rc = check_expectations(&world, &args, run, rc, &result);
    dpt_config_free(cfg);
    free(run);
    free(found_tokenizer);
    dpt_world_finalize(&world);
    return rc;
}

/* ---------------------------------------------------------------- the typed run config */

/* The [expect] section's keys, then the --expect flags (a flag naming a metric the file also
 * names adds a second expectation). */
static bool collect_expectations(run_config *rc, const dpt_config *ini, const cli *args, dpt_error *err)
{
    char msg[200];
    for (int i = 0; dpt_expect_metric(i); i++) {
        const char *key = dpt_expect_metric(i), *v = dpt_config_str(ini, "expect", key);
        if (!*v) continue;
        if (!dpt_expectation_parse(key, v, &rc->expect[rc->nexpect], msg, sizeof msg))
            return dpt_errorf(err, "%s: [expect] %s = %s: %s", dpt_config_where(ini, "expect", key), key, v,
                              msg); /* the parser checked it already; kept for safety */
        rc->nexpect++;
    }
    for (int i = 0; i < args->nexpects; i++) {
        if (rc->nexpect == MAX_EXPECT) return dpt_errorf(err, "more than %d expectations", MAX_EXPECT);
        if (!dpt_expectation_parse_flag(args->expects[i], &rc->expect[rc->nexpect], msg, sizeof msg))
            return dpt_errorf(err, "--expect %s: %s\nHINT: e.g. --expect 'final_test_acc >= 85%%'", args->expects[i],
                              msg);
        rc->nexpect++;
    }
    return true;
}

/* [train] global_batch split over the world: each rank's batch, or an error naming the world
 * sizes that would divide it. */
static bool split_global_batch(run_config *rc, const dpt_config *c, dpt_error *err)
{
    int64_t g = dpt_config_int(c, "train", "global_batch");
    int64_t parts = (int64_t)rc->world_size * rc->accum;
    if (g == 0) {
        rc->global_batch = rc->batch * parts;
        return true;
    }
    if (g % parts) {
        char sizes[256] = "";
        size_t used = 0;
        for (int64_t w = 1; w <= g && used < sizeof sizes - 16; w++)
            if (g % (w * rc->accum) == 0) used += (size_t)snprintf(sizes + used, sizeof sizes - used, "%s%lld", used ? ", " : "", (long long)w);
        return dpt_errorf(err,
                          "%s: [train] global_batch = %lld cannot be split over %d %s x %d accumulation step%s "
                          "(%lld is not a multiple of %lld)\nHINT: world sizes that divide it: %s",
                          dpt_config_where(c, "train", "global_batch"), (long long)g, rc->world_size,
                          *rc->devices ? "replicas" : "ranks", rc->accum, rc->accum > 1 ? "s" : "", (long long)g,
                          (long long)parts, sizes);
    }
    if (!strcmp(rc->lr_scaling, "linear"))
        return dpt_errorf(err,
                          "%s: [optim] lr_scaling = linear with [train] global_batch = %lld: the global batch no "
                          "longer changes with the world size, so there is nothing to scale\nHINT: set [optim] lr "
                          "for the global batch and lr_scaling = none",
                          dpt_config_where(c, "optim", "lr_scaling"), (long long)g);
    rc->global_batch = g;
    rc->batch = g / parts;
    return true;
}

/* [train] early_stop = METRIC:PATIENCE[:MIN_DELTA] */
static bool parse_early_stop(run_config *rc, const dpt_config *c, dpt_error *err)
{
    const char *v = dpt_config_str(c, "train", "early_stop");
    rc->stop_metric = 0;
    if (!*v) return true;
    char metric[32];
    int at = 0;
    long long patience = 0;
    double delta = 0;
    const char *hint = "HINT: METRIC:PATIENCE[:MIN_DELTA] with METRIC test_loss or test_acc, e.g. test_loss:3:0.001 "
                       "or test_acc:5:0.1%";
    int got = sscanf(v, "%31[a-z_]:%lld%n", metric, &patience, &at);
    bool ok = got == 2 && (!strcmp(metric, "test_loss") || !strcmp(metric, "test_acc")) && patience >= 1 &&
              patience <= 1000000;
    if (ok && v[at] == ':') {
        char *end;
        delta = strtod(v + at + 1, &end);
        if (*end == '%' && !strcmp(metric, "test_acc")) delta /= 100.0, end++;
        ok = end != v + at + 1 && !*end && isfinite(delta) && delta >= 0;
    } else
        ok = ok && !v[at];
    if (!ok) return dpt_errorf(err, "%s: [train] early_stop = %s: not METRIC:PATIENCE[:MIN_DELTA]\n%s",
                               dpt_config_where(c, "train", "early_stop"), v, hint);
    rc->stop_metric = !strcmp(metric, "test_loss") ? 1 : 2;
    rc->stop_patience = (int)patience, rc->stop_delta = delta;
    return true;
}

static bool is_pow2(int64_t v)
{
    return v > 0 && (v & (v - 1)) == 0;
}

/* [train] deterministic: the global batch cut into a power-of-two number of shards, an equal
 * power-of-two share on each rank; errors name the numbers and what would work. */
static bool deterministic_split(run_config *rc, const dpt_config *c, dpt_error *err)
{
    const char *where = dpt_config_where(c, "train", "deterministic");
    int64_t g = rc->global_batch, s = dpt_config_int(c, "train", "deterministic_shard");
    int w = rc->world_size;
    if (rc->accum != 1)
        return dpt_errorf(err,
                          "%s: [train] deterministic cuts each step into shards itself; [distributed] "
                          "accum_steps = %d\nHINT: set accum_steps = 1 (the shards are the accumulation)",
                          where, rc->accum);
    if (rc->train_data.repeats > 1)
        return dpt_errorf(err, "%s: [train] deterministic lays each step's samples out in shards of its own, and "
                               "[data] repeated_augment = %d would lay them out by rank\nHINT: set repeated_augment "
                               "= 1, or deterministic = false",
                          where, rc->train_data.repeats);
    if (!rc->train_data.drop_last)
        return dpt_errorf(err, "%s: [train] deterministic needs [data] drop_last = true (a partial last step "
                               "would be cut differently on each world size)", where);
    if (rc->adapt_threads)
        return dpt_errorf(err,
                          "%s: [train] deterministic with [train] adapt_threads = true: a change of the thread "
                          "count changes the last bits of the sums a kernel splits by thread\nHINT: set "
                          "adapt_threads = false",
                          where);
    if (rc->ctx.threads == 0)
        return dpt_errorf(err,
                          "%s: [train] deterministic needs [train] threads set (the same on every world size): "
                          "a GEMM or convolution may split its sums by thread\nHINT: e.g. threads = 1",
                          where);
    if (rc->ctx.cudnn_benchmark)
        return dpt_errorf(err,
                          "%s: [train] deterministic with [train] cudnn_benchmark = true: cuDNN's measured "
                          "algorithm choice can differ between runs, and each algorithm sums in its own order\n"
                          "HINT: set cudnn_benchmark = false (the mode takes deterministic algorithms by heuristics)",
                          where);
    if (rc->ddp.compression != DPT_GRAD_COMPRESSION_NONE || rc->ddp.compression_auto)
        return dpt_errorf(err,
                          "%s: [distributed] grad_compression = %s with [train] deterministic: the mode sums every "
                          "gradient in one fixed fp32 tree (%s), so 16 bits on the wire would not be applied\n"
                          "HINT: set grad_compression = none",
                          dpt_config_where(c, "distributed", "grad_compression"),
                          dpt_config_str(c, "distributed", "grad_compression"), where);
    if (g % s || !is_pow2(g / s))
        return dpt_errorf(err,
                          "%s: [train] deterministic: the global batch %lld is not a power-of-two number of "
                          "shards of %lld samples\nHINT: set [train] deterministic_shard to %lld / 2^k, e.g. %lld",
                          where, (long long)g, (long long)s, (long long)g, (long long)(g & -g));
    int64_t shards = g / s;
    if (!is_pow2(w) || shards % w)
        return dpt_errorf(err,
                          "%s: [train] deterministic: %d %s cannot share %lld shards of %lld samples alike; the "
                          "mode needs a power-of-two world size of at most %lld\nHINT: run on 1, 2, 4, ... %lld "
                          "ranks, or lower [train] deterministic_shard",
                          where, w, *rc->devices ? "replicas" : "ranks", (long long)shards, (long long)s,
                          (long long)shards, (long long)shards);
    rc->deterministic = true;
    rc->ctx.deterministic = true;
    rc->det_shard = s;
    rc->det_shards = shards;
    rc->det_per_rank = (int)(shards / w);
    rc->batch = s;              /* the loader's batch: one shard */
    rc->accum = rc->det_per_rank; /* micro-batches per step */
    rc->train_data.shards_per_rank = rc->det_per_rank;
    return true;
}

bool run_config_build(run_config *rc, const dpt_config *ini, const cli *args, int world_size, dpt_error *err)
{
    const dpt_config *c = ini;
    memset(rc, 0, sizeof *rc);
    rc->ini = ini;
    rc->config_path = args->config_path ? args->config_path : "(defaults)";
    if (!dpt_config_check_owners(ini, err) || !dpt_config_check_dependents(ini, err)) return false;
    rc->hash = dpt_config_hash(ini);
    rc->epochs = (int)dpt_config_int(c, "train", "epochs");
    rc->max_steps = dpt_config_int(c, "train", "max_steps");
    rc->batch = dpt_config_int(c, "train", "batch");
    rc->eval_batch = dpt_config_int(c, "train", "eval_batch");
    rc->eval_every = dpt_config_int(c, "train", "eval_every_steps");
    rc->device = dpt_config_str(c, "train", "device");
    rc->ctx = (dpt_ctx_options){
        .threads = (int)dpt_config_int(c, "train", "threads"),
        .seed = (uint64_t)dpt_config_int(c, "train", "seed"),
        .tf32 = dpt_config_bool(c, "train", "tf32"),
        .cudnn_benchmark = dpt_config_bool(c, "train", "cudnn_benchmark"),
        /* the enums' choices are declared in the enums' order (runtime/train_keys.c) */
        .cpu_kernels = (dpt_cpu_kernels)(DPT_CPU_KERNELS_ONEDNN + dpt_config_enum(c, "train", "cpu_kernels")),
        .memory_limit = (size_t)(dpt_config_float(c, "train", "memory_limit_mb") * 1048576.0),
        .precision = (dpt_precision)dpt_config_enum(c, "train", "precision"),
        .fp32_activations = !dpt_config_bool(c, "train", "bf16_activations"),
        .channels_last = dpt_config_enum(c, "train", "memory_format") == 1,
    };
    rc->memory_check = dpt_config_bool(c, "train", "memory_check");
    rc->adapt_threads = dpt_config_bool(c, "train", "adapt_threads");
    rc->skip_nonfinite = dpt_config_enum(c, "train", "nonfinite") == 1;
    rc->loss_scale = dpt_config_enum(c, "train", "loss_scale") == 1;
    rc->loss_scale_init = dpt_config_float(c, "train", "loss_scale_init");
    rc->loss_scale_growth = dpt_config_int(c, "train", "loss_scale_growth");
    if (rc->ctx.precision == DPT_PRECISION_FP16 && !rc->loss_scale)
        return dpt_errorf(err,
                          "%s: [train] precision = fp16 needs [train] loss_scale = dynamic: without it the gradients "
                          "below fp16's smallest number (6e-8) vanish\nHINT: add --set train.loss_scale=dynamic, or use "
                          "precision = bf16 (fp32's range, no loss scaling needed)",
                          dpt_config_where(c, "train", "precision"));
    rc->train_data = (dpt_loader_options){
        .batch = rc->batch,
        .shuffle = dpt_config_bool(c, "data", "shuffle"),
        .drop_last = dpt_config_bool(c, "data", "drop_last"),
        .seed = rc->ctx.seed,
        .limit = dpt_config_int(c, "data", "train_limit"),
        .crop_pad = (int)dpt_config_int(c, "data", "random_crop_pad"),
        .hflip = dpt_config_bool(c, "data", "hflip"),
        .auto_augment = (int)dpt_config_enum(c, "data", "auto_augment"),
        .aa_ops = (int)dpt_config_int(c, "data", "rand_augment_ops"),
        .aa_magnitude = (int)dpt_config_int(c, "data", "rand_augment_magnitude"),
        .repeats = (int)dpt_config_int(c, "data", "repeated_augment"),
        .prefetch = (int)dpt_config_int(c, "data", "prefetch"),
        .workers = (int)dpt_config_int(c, "data", "workers"),
        .skip_bad_files = dpt_config_enum(c, "data", "bad_files") == 1,
    };
    double mean[4], std[4]; /* one value, or one per channel (checked against the data when it opens) */
    int nm = dpt_config_float_list(c, "data", "mean", mean, 4), ns = dpt_config_float_list(c, "data", "std", std, 4);
    rc->train_data.mean = (float)mean[0], rc->train_data.std = (float)std[0];
    rc->train_data.norm_channels = nm > ns ? nm : ns;
    for (int ch = 0; ch < 4; ch++)
        rc->train_data.channel_mean[ch] = (float)mean[nm > 1 && ch < nm ? ch : 0],
        rc->train_data.channel_std[ch] = (float)std[ns > 1 && ch < ns ? ch : 0];
    rc->mix = (dpt_mix_options){
        .mixup_alpha = dpt_config_float(c, "data", "mixup"),
        .cutmix_alpha = dpt_config_float(c, "data", "cutmix"),
        .prob = dpt_config_float(c, "data", "mixup_prob"),
        .switch_prob = dpt_config_float(c, "data", "mixup_switch_prob"),
    };
    double range[2][2]; /* random_erase_scale, random_erase_ratio: min,max */
    for (int k = 0; k < 2; k++) {
        const char *key = k ? "random_erase_ratio" : "random_erase_scale";
        if (dpt_config_float_list(c, "data", key, range[k], 2) != 2 || range[k][0] > range[k][1])
            return dpt_errorf(err, "%s: [data] %s needs two numbers, min,max (e.g. %s: torchvision's)",
                              dpt_config_where(c, "data", key), key, k ? "0.3,3.3" : "0.02,0.33");
    }
    rc->erase = (dpt_erase_options){.prob = dpt_config_float(c, "data", "random_erase"),
                                    .scale = {range[0][0], range[0][1]},
                                    .ratio = {range[1][0], range[1][1]}};
    rc->test_data = rc->train_data;
    rc->test_data.crop_pad = 0, rc->test_data.hflip = false, rc->test_data.shuffle = false;
    rc->test_data.auto_augment = 0, rc->test_data.repeats = 1;
    rc->test_data.batch = rc->eval_batch;
    rc->test_data.exact_shards = true; /* every test sample counts exactly once over all ranks */
    rc->test_data.limit = dpt_config_int(c, "data", "test_limit");
    rc->data_dir = dpt_config_str(c, "data", "dir");
    rc->clip_norm = dpt_config_float(c, "optim", "clip_norm");
    rc->ema_decay = dpt_config_float(c, "train", "ema_decay");
    rc->ema_warmup = dpt_config_bool(c, "train", "ema_warmup");
    rc->lr_scaling = dpt_config_str(c, "optim", "lr_scaling");
    rc->schedule = dpt_config_str(c, "optim", "schedule");
    rc->accum = (int)dpt_config_int(c, "distributed", "accum_steps");
    rc->devices = dpt_config_str(c, "distributed", "devices");
    rc->ddp = (dpt_ddp_options){
        .bucket_mb = dpt_config_float(c, "distributed", "bucket_mb"),
        .overlap = dpt_config_bool(c, "distributed", "overlap"),
        .find_unused = dpt_config_bool(c, "distributed", "find_unused"),
        .timeout_s = dpt_config_float(c, "distributed", "comm_timeout_s"),
        .config_hash = rc->hash,
    };
    int compression = dpt_config_enum(c, "distributed", "grad_compression");
    rc->ddp.compression_auto = compression == 3; /* none|bf16|fp16|auto: fp32 on the wire until it decides */
    rc->ddp.compression = rc->ddp.compression_auto ? DPT_GRAD_COMPRESSION_NONE : (dpt_grad_compression)compression;
    if (isnan(rc->ddp.bucket_mb)) /* auto: the first step runs with PyTorch's 25, then the reducer measures */
        rc->ddp.bucket_mb = 25, rc->ddp.bucket_auto = true;
    rc->zero = (int)dpt_config_int(c, "distributed", "zero");
    rc->zero_overlap = dpt_config_enum(c, "distributed", "zero_overlap"); /* auto|true|false */
    int zero_grads = dpt_config_enum(c, "distributed", "zero_grads"); /* auto|ranges|whole */
    rc->ddp.shard_grads = zero_grads == 0 ? 1 : zero_grads == 1 ? 2 : 0;
    rc->bench_comm_ms_per_mb = dpt_config_float(c, "distributed", "bench_comm_ms_per_mb");
    rc->world_size = world_size;
    if (*rc->devices && world_size == 1)
        for (const char *d = rc->devices; *d; d++)
            rc->world_size += *d == ',';
    if (!split_global_batch(rc, c, err)) return false;
    if (dpt_config_bool(c, "train", "deterministic") && !deterministic_split(rc, c, err)) return false;
    rc->train_data.batch = rc->batch;
    rc->fault.kind = (fault_kind)dpt_config_enum(c, "distributed", "fault");
    rc->fault.rank = (int)dpt_config_int(c, "distributed", "fault_rank");
    rc->fault.step = dpt_config_int(c, "distributed", "fault_step");
    rc->ckpt_dir = dpt_config_str(c, "checkpoint", "dir");
    rc->ckpt_every_steps = dpt_config_int(c, "checkpoint", "every_steps");
    rc->ckpt_every_epochs = (int)dpt_config_int(c, "checkpoint", "every_epochs");
    rc->keep_last = (int)dpt_config_int(c, "checkpoint", "keep_last");
    rc->ckpt_archive = dpt_config_enum(c, "checkpoint", "existing") == 1;
    int final = dpt_config_enum(c, "checkpoint", "final"); /* auto | true | false */
    rc->ckpt_final = final == 1 || (final == 0 && (rc->ckpt_every_steps > 0 || rc->ckpt_every_epochs > 0));
    int best = dpt_config_enum(c, "checkpoint", "best"); /* auto | true | false */
    rc->ckpt_best = best == 1 || (best == 0 && (rc->ckpt_every_steps > 0 || rc->ckpt_every_epochs > 0));
    rc->ckpt_sharded = dpt_config_bool(c, "checkpoint", "sharded");
    if (!parse_early_stop(rc, c, err)) return false;
    rc->interval = dpt_config_int(c, "log", "interval");
    rc->all_ranks = dpt_config_bool(c, "log", "all_ranks");
    rc->gpu_stats = dpt_config_enum(c, "log", "gpu_stats") == 0;
    rc->progress = dpt_config_str(c, "log", "progress");
    rc->timeline = dpt_config_str(c, "log", "timeline");
    rc->metrics = dpt_config_str(c, "log", "metrics");
    return collect_expectations(rc, ini, args, err);
}

/* ---------------------------------------------------------------- DataParallel */

typedef struct dp_job {
    const dpt_world *world;
    const cli *args;
    const run_config *run;
    int n;
    int *rc; /* per replica */
    dpt_run_result result; /* replica 0's */
} dp_job;

static void replica_entry(int rank, dpt_comm *comm, void *user)
{
    dp_job *job = user;
    replica r = {.args = job->args,
                 .run = job->run,
                 .comm = comm,
                 .rank = rank,
                 .size = job->n,
                 .world = job->world,
                 .data_parallel = true,
                 .print = rank == 0,
                 .ckpt_lock_fd = -1,
                 .last_ckpt_step = -1};
    train_replica(&r);
    job->rc[rank] = r.rc;
    if (rank == 0) job->result = r.result;
}

/* A DataParallel device list is all CPUs in order (cpu:0,cpu:1,...) or distinct visible GPUs
 * (cuda:0,cuda:1 or any other order); false with err naming the entry otherwise. */
static bool check_device_list(const run_config *run, int n, dpt_error *err)
{
    const char *devices = run->devices;
    const char *where = dpt_config_where(run->ini, "distributed", "devices");
    bool cuda = !strncmp(devices, "cuda:", 5);
    int gpus = cuda ? dpt_device_count(DPT_DEVICE_CUDA) : 0;
    bool seen[256] = {false};
    const char *tok = devices;
    for (int i = 0; i < n; i++, tok = strchr(tok, ',') + 1) {
        int len = (int)(strchr(tok, ',') ? strchr(tok, ',') - tok : (ptrdiff_t)strlen(tok));
        char expect[32];
        snprintf(expect, sizeof expect, "cpu:%d", i);
        char *end = NULL;
        long idx = cuda && !strncmp(tok, "cuda:", 5) ? strtol(tok + 5, &end, 10) : -1;
        bool ok = cuda ? idx >= 0 && idx < 256 && end == tok + len && end != tok + 5
                       : len == (int)strlen(expect) && !strncmp(tok, expect, (size_t)len);
        if (!ok)
            return dpt_errorf(err,
                              "%s: [distributed] devices = %s: entry %d is '%.*s'\nHINT: list CPU devices in "
                              "order (cpu:0,cpu:1) or GPUs (cuda:0,cuda:1), not both",
                              where, devices, i, len, tok);
        if (cuda && seen[idx])
            return dpt_errorf(err,
                              "%s: [distributed] devices = %s: cuda:%ld is listed twice\nHINT: one "
                              "replica per GPU (NCCL cannot put two ranks on one device)",
                              where, devices, idx);
        if (cuda) seen[idx] = true;
    }
    for (int idx = gpus; idx < 256; idx++)
        if (seen[idx])
            return dpt_errorf(err,
                              "%s: [distributed] devices = %s: cuda:%d is not visible (%d GPU%s)\nHINT: "
                              "./train --env lists the GPUs; CUDA_VISIBLE_DEVICES renumbers them",
                              where, devices, idx, gpus, gpus == 1 ? "" : "s");
    if (cuda && !strcmp(run->device, "cpu"))
        return dpt_errorf(err,
                          "%s: [distributed] devices = %s, but [train] device = cpu\nHINT: set [train] "
                          "device = cuda (or auto), or list cpu devices",
                          where, devices);
    return true;
}

/* DataParallel: one process, one replica thread per listed device; gradients averaged
 * through a shared-memory communicator (CPU) or NCCL (GPUs); every replica applies the same
 * update. */
static int run_data_parallel(const dpt_world *world, const cli *args, const run_config *run,
                             dpt_run_result *result)
{
    int n = 1;
    for (const char *c = run->devices; *c; c++)
        n += *c == ',';
    dpt_error err;
    if (!check_device_list(run, n, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    dp_job job = {.world = world, .args = args, .run = run, .n = n, .rc = calloc((size_t)n, sizeof(int))};
    if (!job.rc) dpt_fatal("out of host memory");
    dpt_run_replicas(n, replica_entry, &job);
    int rc = 0;
    for (int i = 0; i < n; i++)
        rc |= job.rc[i];
    free(job.rc);
    *result = job.result;
    return rc;
}

/* ---------------------------------------------------------------- --env */

static int print_env(const dpt_world *world, const run_config *run)
{
    char mpi[160];
    dpt_mpi_version(mpi, sizeof mpi);
    printf("dptrain %s | world: %d rank%s, this is rank %d (local rank %d of %d) on %s\n", DPT_VERSION,
           world->size, world->size > 1 ? "s" : "", world->rank, world->local_rank, world->local_size,
           world->host);
    printf("mpi: %s | %s%s%s\n", mpi, world->mpi ? "initialised" : "not used (run alone)",
           world->mpi ? " | " : "", world->mpi ? world->allreduce_how : "");
    dpt_print_env(stdout);
    char dnnl[160]; /* the CPU's library (not device.c's: the oneDNN backend stands above it) */
    dpt_onednn_version(dnnl, sizeof dnnl);
    printf("onednn: %s\n", dnnl);
    replica probe = {.run = run, .rank = world->rank, .local_rank = world->local_rank};
    dpt_device dev = pick_device(&probe);
    int gpus = dpt_device_count(DPT_DEVICE_CUDA);
    if (dev.kind == DPT_DEVICE_CUDA)
        printf("device for this rank: cuda:%d%s\n", dev.index,
               dev.index < gpus ? "" : " (NOT VISIBLE: more ranks on this node than GPUs)");
    else
        printf("device for this rank: cpu ([train] device = %s)\n", run->device);
    return 0;
}

/* ---------------------------------------------------------------- expectations */

/* After the run: each expectation printed with what was measured (rank 0), the JUnit report
 * written; exit code 3 when one fails (every rank measured the same values, so all agree). */
static int check_expectations(const dpt_world *world, const cli *args, const run_config *run, int rc,
                              const dpt_run_result *result)
{
    int failed = 0;
    bool show = world->rank == 0;
    if (rc == 0 && run->nexpect) {
        if (show) report_line("expectations (%d):\n", run->nexpect);
        for (int i = 0; i < run->nexpect; i++) {
            double v;
            bool ok = dpt_expectation_holds(&run->expect[i], result, &v);
            char shown[80];
            dpt_expectation_format(&run->expect[i], result, v, shown, sizeof shown);
            failed += !ok;
            if (show) /* "(measured 91.20%)", or "(not measured)" */
                report_line("  %s  %s (%s%s)\n", ok ? "pass" : "FAIL", run->expect[i].text, isnan(v) ? "" : "measured ",
                            shown);
        }
        if (show && failed) report_line("%d of %d expectations failed: exit code 3\n", failed, run->nexpect);
        fflush(stdout);
    }
    if (failed) rc = 3;
    if (args->junit && show) {
        char msg[4400];
        dpt_run_result r = *result;
        if (!dpt_junit_write(args->junit, run->config_path, run->expect, run->nexpect, &r, rc, report_tail(), msg,
                             sizeof msg)) {
            fprintf(stderr, "error: --junit: %s\n", msg);
            if (rc == 0) rc = 1;
        }
    }
    return rc;
}

/* ---------------------------------------------------------------- the command line */

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: ./train CONFIG [--set section.key=value ...] [--resume [PATH|latest]] [--dry-run]\n"
        "                      [--expect 'METRIC OP VALUE' ...] [--junit PATH]\n"
        "       mpirun -np N ./train CONFIG ...      (data-parallel over N ranks)\n"
        "       ./train --inspect CKPT | --export FORMAT CKPT OUT | --config-reference | --help | --version\n"
        "\n"
        "Trains the model that the INI file CONFIG describes (see docs/config.md).\n"
        "\n"
        "  --set section.key=value  override one config key (repeatable), e.g. --set train.batch=128\n"
        "  --resume [PATH|latest|auto]  continue exactly from a checkpoint (default: the newest in\n"
        "                           [checkpoint] dir; auto: the newest if there is one, else a new\n"
        "                           run); SIGINT/SIGTERM write one and stop cleanly\n"
        "  --expect 'METRIC OP VALUE'  after the run, check a result (repeatable; also the [expect]\n"
        "                           section): METRIC final_test_acc, best_test_acc, final_test_top5,\n"
        "                           final_test_loss, final_train_loss, img_s or weights_sha256;\n"
        "                           OP >= <= == !=; accuracies as 0.85 or 85%%. Prints pass/FAIL\n"
        "                           for each; exit code 3 if one fails\n"
        "  --junit PATH             write a JUnit XML report of the run and its expectations\n"
        "  --inspect CKPT           print what a checkpoint holds (step, epoch, world size, config hash,\n"
        "                           tensors) and its weights' SHA-256, and exit; CKPT as --resume takes it\n"
        "                           (a file, a folder for its newest, FOLDER/latest, FOLDER/ckpt-step200.dpt)\n"
        "  --profile                time each op's forward and backward from step 2 on and print the top\n"
        "                           op kinds and layers at the end, and a span per op in [log] timeline\n"
        "                           (on a GPU each op then waits for its kernels)\n"
        "  --eval CKPT              evaluate a checkpoint on the test set ([data] as configured, or --set\n"
        "                           data.* for another set) instead of training; --expect and --junit apply.\n"
        "                           CKPT may also be a .safetensors file of the model's weights (PyTorch's\n"
        "                           state_dict names), for --predict, --sample, --inspect and --export too,\n"
        "                           or for gpt llmc:PATH or hf:PATH (llm.c's, Hugging Face's GPT-2 files),\n"
        "                           for llama hf:DIR (a Hugging Face LLaMA's folder)\n"
        "  --per-class              with --eval: each class's precision, recall, F1 and support, and their\n"
        "                           macro and weighted averages (scikit-learn's classification_report)\n"
        "  --ema                    with --eval, --predict, --sample or --export: the checkpoint's weight averages\n"
        "                           ([train] ema_decay) in place of its weights\n"
        "  --export FORMAT CKPT OUT write a checkpoint's weights for other programs and exit: safetensors\n"
        "                           or npz (no CONFIG needed; after one, `latest` is its [checkpoint] dir's),\n"
        "                           or a model's own, after CONFIG: for gpt llmc (llm.c's file) or hf,\n"
        "                           for llama hf (OUT a folder: Hugging Face's model.safetensors and\n"
        "                           config.json)\n"
        "  --dry-run                load everything, print the resolved config, and exit\n"
        "  --summary                print the ops one forward runs (layers, output shapes, parameters, FLOPs), and exit\n"
        "  --show-batch FILE.png    write this rank's first training batch as the model would get it\n"
        "                           (crops, flips, auto_augment, random erasing, mixup or cutmix done) as\n"
        "                           a PNG grid of up to 64 images, print their labels, and exit\n"
        "  --sample CKPT            generate from a language model's checkpoint (or llmc:PATH, llm.c's\n"
        "                           GPT-2 file, hf:PATH, a Hugging Face GPT-2's or LLaMA's model.safetensors\n"
        "                           or its folder; text\n"
        "                           for byte-level models, token ids otherwise) and\n"
        "                           exit; with --prompt TEXT, --tokens N (200), --temperature T (1; 0 =\n"
        "                           the most likely), --top-k K (0 = all), --top-p P (1 = all; the\n"
        "                           nucleus: the most likely tokens holding P of the chance), --seed S,\n"
        "                           --no-kv-cache (the whole context's forward for every token instead\n"
        "                           of one position's),\n"
        "                           --tokenizer PATH (GPT-2's: a folder of Hugging Face's vocab.json and\n"
        "                           merges.txt or tokenizer.json, found beside hf:PATH's weights, or\n"
        "                           llm.c's gpt2_tokenizer.bin: the prompt read and the tokens printed as text)\n"
        "  --predict CKPT           write the checkpoint's predictions over the test set (--set data.*\n"
        "                           for another) as CSV and exit: per sample its index, name, label and\n"
        "                           the --top-k K (5; 0 = all) most likely classes with their\n"
        "                           probabilities (a language model: the next token); --out FILE\n"
        "                           (predictions.csv);\n"
        "                           --input PATH: samples without labels instead (a folder, its\n"
        "                           subfolders too, or one .jpg/.png for [data] source = folder; an\n"
        "                           IDX image file for idx; for tokens a token shard, or any file's\n"
        "                           bytes for a byte-level model, in rows of seq_len)\n"
        "  --config-reference       print every section and key as Markdown\n"
        "  --env                    print CUDA/cuDNN/NCCL/MPI versions, the GPUs and the world, and exit\n"
        "  --version                print the version\n"
        "  --help                   this text\n"
        "\n"
        "exit codes: 0 done, 1 error, 2 usage, 3 an expectation failed\n"
        "\n"
        "examples:\n"
        "  ./train configs/fmnist_mlp.ini --set train.epochs=1\n"
        "  mpirun -np 2 ./train configs/fmnist_mlp.ini --set optim.lr_scaling=linear\n"
        "  ./train configs/fmnist_mlp.ini --set distributed.devices=cpu:0,cpu:1\n"
        "  ./train configs/fmnist_mlp.ini --set train.epochs=1 --expect 'final_test_acc >= 80%%' --junit run.xml\n");
}

/* The value of a flag that takes one: "--flag VALUE" or "--flag=VALUE"; NULL when missing. */
static const char *flag_value(int argc, char **argv, int *i, const char *flag)
{
    size_t n = strlen(flag);
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    return *i + 1 < argc ? argv[++*i] : NULL;
}

/* llm.c's (llmc:PATH) or Hugging Face's (hf:PATH) GPT-2 file: the gpt model's [model] init, not
 * a checkpoint of ours to resume from */
static bool foreign_weights(const char *v)
{
    return !strncmp(v, "llmc:", 5) || !strncmp(v, "hf:", 3);
}

/* What --sample, --eval or --predict was given (the flag cli_weights_flag names), or NULL */
static const char *weights_arg(const cli *args)
{
    return args->sample ? args->sample : args->eval ? args->eval : args->predict;
}

static bool is_flag(const char *a, const char *flag)
{
    size_t n = strlen(flag);
    return !strncmp(a, flag, n) && (a[n] == '\0' || a[n] == '=');
}

/* Returns an exit code to stop with, or -1 to go on training. */
/* The flag nearest to an unknown one (--output: --out; --resum: --resume), or NULL. test_cli
 * checks that every flag --help lists is here. */
static const char *nearest_flag(const char *given)
{
    static const char *const flags[] = {
        "--config-reference", "--dry-run", "--ema", "--env", "--eval", "--expect", "--export", "--help",
        "--input", "--inspect", "--junit", "--no-kv-cache", "--out", "--per-class", "--predict", "--profile", "--prompt",
        "--resume", "--sample", "--seed", "--set", "--show-batch", "--summary", "--temperature", "--tokenizer", "--tokens", "--top-k",
        "--top-p", "--version",
    };
    const char *best = NULL;
    int best_d = 3; /* at most 2 edits, or one flag the other's start (--output, --top) */
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        size_t n = strlen(flags[i]), m = strlen(given);
        int d = dpt_edit_distance(given, flags[i]);
        if (m > 3 && n > 3 && !strncmp(given, flags[i], m < n ? m : n) && d > 2) d = 2;
        if (d < best_d) best_d = d, best = flags[i];
    }
    return best;
}

static int parse_cli(int argc, char **argv, cli *args)
{
    memset(args, 0, sizeof *args);
    args->argc = argc, args->argv = argv;
    args->sample_tokens = 200, args->temperature = 1.0f, args->top_k = -1, args->top_p = 1.0f, args->sample_seed = 1337;
    args->predict_out = "predictions.csv";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--version")) {
            printf("dptrain %s\n", DPT_VERSION);
            return 0;
        } else if (!strcmp(a, "--config-reference")) {
            dpt_config_print_reference(stdout);
            return 0;
        } else if (is_flag(a, "--inspect")) {
            const char *v = flag_value(argc, argv, &i, "--inspect");
            if (!v || !*v) {
                fprintf(stderr, "error: --inspect needs a checkpoint file\n");
                return 2;
            }
            dpt_error err;
            char path[PATH_MAX];
            if (!dpt_checkpoint_resolve(v, NULL, path, sizeof path, &err)) { /* --resume's resolver */
                fprintf(stderr, "error: --inspect %s\n", err.msg);
                return 1;
            }
            if (!dpt_checkpoint_inspect(path, stdout, &err)) {
                fprintf(stderr, "error: %s\n", err.msg);
                return 1;
            }
            return 0;
        } else if (is_flag(a, "--show-batch")) {
            const char *v = flag_value(argc, argv, &i, "--show-batch");
            if (!v || !*v) {
                fprintf(stderr, "error: --show-batch needs the PNG file to write\nHINT: ./train CONFIG --show-batch "
                                "batch.png\n");
                return 2;
            }
            args->show_batch = v;
        } else if (is_flag(a, "--eval")) {
            const char *v = flag_value(argc, argv, &i, "--eval");
            if (!v || !*v) {
                fprintf(stderr, "error: --eval needs a checkpoint\nHINT: ./train CONFIG --eval CKPT (a file, a "
                                "folder's newest, a step number, or latest)\n");
                return 2;
            }
            args->eval = v, args->resume = foreign_weights(v) ? NULL : v; /* llmc:/hf: a gpt's init, below */
        } else if (is_flag(a, "--predict") || is_flag(a, "--out") || is_flag(a, "--input")) {
            const char *flag = is_flag(a, "--predict") ? "--predict" : is_flag(a, "--out") ? "--out" : "--input";
            const char *v = flag_value(argc, argv, &i, flag);
            if (!v || !*v) {
                fprintf(stderr, "error: %s needs a value\nHINT: ./train CONFIG --predict CKPT [--out FILE.csv] "
                                "[--top-k K] [--input PATH]\n", flag);
                return 2;
            }
            if (flag[2] == 'p')
                args->predict = v, args->resume = foreign_weights(v) ? NULL : v;
            else if (flag[2] == 'o')
                args->predict_out = v, args->out_given = true;
            else
                args->predict_input = v;
        } else if (!strcmp(a, "--export")) {
            if (i + 3 >= argc || argv[i + 1][0] == '-' || argv[i + 2][0] == '-' || argv[i + 3][0] == '-') {
                fprintf(stderr, "error: --export needs FORMAT CKPT OUT\nHINT: ./train --export safetensors "
                                "checkpoints/NAME model.safetensors (or npz; llmc with the run's CONFIG first)\n");
                return 2;
            }
            args->export_format = argv[i + 1], args->resume = argv[i + 2], args->export_out = argv[i + 3];
            i += 3;
        } else if (is_flag(a, "--sample") || is_flag(a, "--prompt") || is_flag(a, "--tokens") ||
                   is_flag(a, "--temperature") || is_flag(a, "--top-k") || is_flag(a, "--top-p") ||
                   is_flag(a, "--seed") || is_flag(a, "--tokenizer")) {
            char flag[16];
            snprintf(flag, sizeof flag, "%.*s", (int)strcspn(a, "="), a);
            const char *v = flag_value(argc, argv, &i, flag);
            char *end = NULL;
            if (!v || (!*v && strcmp(flag, "--prompt") != 0)) {
                fprintf(stderr, "error: %s needs a value\nHINT: ./train CONFIG --sample CKPT [--prompt TEXT] [--tokens N] "
                                "[--temperature T] [--top-k K] [--top-p P] [--seed S]\n", flag);
                return 2;
            }
            bool bad = false;
            static const char *const sample_only[] = {"--prompt", "--tokens", "--temperature", "--top-p", "--seed",
                                                      "--tokenizer"};
            for (size_t f = 0; f < sizeof sample_only / sizeof sample_only[0] && !args->sample_flag; f++)
                if (!strcmp(flag, sample_only[f])) args->sample_flag = sample_only[f]; /* the first given */
            if (!strcmp(flag, "--top-k")) args->top_k_given = true;
            if (!strcmp(flag, "--sample")) {
                /* llm.c's or Hugging Face's GPT-2 file: the model starts from it ([model] init), no checkpoint of ours */
                args->sample = v, args->resume = foreign_weights(v) ? NULL : v;
            } else if (!strcmp(flag, "--tokenizer")) {
                args->tokenizer = v;
            } else if (!strcmp(flag, "--prompt")) {
                args->prompt = v;
            } else if (!strcmp(flag, "--tokens")) {
                args->sample_tokens = strtoll(v, &end, 10);
                bad = *end || args->sample_tokens < 1 || args->sample_tokens > 1000000;
            } else if (!strcmp(flag, "--temperature")) {
                args->temperature = strtof(v, &end);
                bad = *end || !(args->temperature >= 0.0f && args->temperature <= 100.0f);
            } else if (!strcmp(flag, "--top-p")) {
                args->top_p = strtof(v, &end);
                bad = *end || !(args->top_p > 0.0f && args->top_p <= 1.0f);
            } else if (!strcmp(flag, "--top-k")) {
                long k = strtol(v, &end, 10); /* 4294967301 is no 5 */
                bad = *end || k < 0 || k > INT_MAX;
                args->top_k = bad ? 0 : (int)k;
            } else {
                errno = 0; /* strtoull takes "-1" as 2^64 - 1 and clamps what overflows */
                args->sample_seed = strtoull(v, &end, 10);
                bad = *end != '\0' || errno == ERANGE || strchr(v, '-');
            }
            if (bad) {
                fprintf(stderr, "error: %s %s: not a valid value\nHINT: --tokens 1..1000000, --temperature 0..100, "
                                "--top-k 0 or more, --top-p above 0 up to 1, --seed an integer from 0 to 2^64 - 1\n", flag, v);
                return 2;
            }
        } else if (!strcmp(a, "--no-kv-cache")) {
            args->sample_no_cache = true;
            if (!args->sample_flag) args->sample_flag = "--no-kv-cache";
        } else if (!strcmp(a, "--ema")) {
            args->ema = true;
        } else if (!strcmp(a, "--per-class")) {
            args->per_class = true;
        } else if (!strcmp(a, "--dry-run")) {
            args->dry_run = true;
        } else if (!strcmp(a, "--profile")) {
            args->profile = true;
        } else if (!strcmp(a, "--summary")) {
            args->summary = true;
        } else if (!strcmp(a, "--env")) {
            args->env = true;
        } else if (!strcmp(a, "--resume")) {
            args->resume =
                i + 1 < argc && argv[i + 1][0] != '-' && !strstr(argv[i + 1], ".ini") ? argv[++i] : "latest";
        } else if (is_flag(a, "--set") || is_flag(a, "--expect") || is_flag(a, "--junit")) {
            const char *flag = is_flag(a, "--set") ? "--set" : is_flag(a, "--expect") ? "--expect" : "--junit";
            const char *v = flag_value(argc, argv, &i, flag);
            if (!v || !*v) {
                fprintf(stderr, "error: %s needs %s\n", flag,
                        flag[2] == 's' ? "section.key=value" : flag[2] == 'e' ? "'METRIC OP VALUE'" : "a file path");
                return 2;
            }
            if (flag[2] == 'j') {
                args->junit = v;
            } else if (flag[2] == 's') {
                if (args->nsets == MAX_SETS) {
                    fprintf(stderr, "error: more than %d --set flags\n", MAX_SETS);
                    return 2;
                }
                args->sets[args->nsets++] = v;
            } else {
                if (args->nexpects == MAX_EXPECT) {
                    fprintf(stderr, "error: more than %d --expect flags\n", MAX_EXPECT);
                    return 2;
                }
                dpt_expectation e;
                char msg[200];
                if (!dpt_expectation_parse_flag(v, &e, msg, sizeof msg)) {
                    fprintf(stderr, "error: --expect %s: %s\nHINT: e.g. --expect 'final_test_acc >= 85%%'\n", v, msg);
                    return 2;
                }
                args->expects[args->nexpects++] = v;
            }
        } else if (a[0] == '-') {
            const char *near = nearest_flag(a);
            fprintf(stderr, "error: unknown flag %s%s%s%s\n\n", a, near ? "; did you mean " : "", near ? near : "",
                    near ? "?" : "");
            usage(stderr);
            return 2;
        } else if (args->config_path) {
            fprintf(stderr, "error: two config files given (%s and %s)\n", args->config_path, a);
            return 2;
        } else {
            args->config_path = a;
        }
    }
    const char *foreign = weights_arg(args);
    if (args->ema && foreign && foreign_weights(foreign)) {
        const char *flag = cli_weights_flag(args);
        fprintf(stderr, "error: --ema reads a checkpoint's weight averages; %s %s reads %s GPT-2 file, which has "
                        "none\nHINT: %s CKPT --ema with a checkpoint of a run that kept them\n",
                flag, foreign, foreign[0] == 'h' ? "a Hugging Face" : "llm.c's", flag);
        return 2;
    }
    /* a flag of a mode the command line does not ask for would change nothing: a training run
     * given --seed 5 is not another seed's run ([train] seed is), nor does --out write predictions */
    if (args->sample_flag && !args->sample) {
        fprintf(stderr, "error: %s goes with --sample (generating from a language model); this command %s\nHINT: "
                        "./train CONFIG --sample CKPT %s ...%s\n",
                args->sample_flag, args->predict ? "predicts" : args->eval ? "evaluates" : "trains", args->sample_flag,
                !strcmp(args->sample_flag, "--seed") ? "; a training run's seed is [train] seed: --set train.seed=N" : "");
        return 2;
    }
    if (args->top_k_given && !args->sample && !args->predict) {
        fprintf(stderr, "error: --top-k goes with --sample (the tokens drawn from) or --predict (the classes written)\n"
                        "HINT: ./train CONFIG --predict CKPT --top-k 3\n");
        return 2;
    }
    if (args->out_given && !args->predict) {
        fprintf(stderr, "error: --out names the CSV --predict writes: it goes with --predict\nHINT: ./train CONFIG "
                        "--predict CKPT --out FILE.csv\n");
        return 2;
    }
    if (args->predict_input && !args->predict) {
        fprintf(stderr, "error: --input names the samples --predict reads instead of the test set: it goes with "
                        "--predict\nHINT: ./train CONFIG --predict CKPT --input PATH [--out FILE.csv]\n");
        return 2;
    }
    if (args->per_class && !args->eval) {
        fprintf(stderr, "error: --per-class reports each class of --eval's evaluation: it goes with --eval\nHINT: "
                        "./train CONFIG --eval CKPT --per-class\n");
        return 2;
    }
    if (args->ema && !args->eval && !args->predict && !args->sample && !args->export_format) {
        fprintf(stderr, "error: --ema chooses the weight averages a checkpoint holds: it goes with --eval, --predict, "
                        "--sample or --export\nHINT: ./train CONFIG --eval CKPT --ema; to keep averages while "
                        "training, set [train] ema_decay\n");
        return 2;
    }
    /* the commands that train nothing: --profile beside one would say nothing, and --show-batch
     * (which looks at training's first batch of a new run) beside one or a resume would show nothing */
    const char *untrained = args->dry_run ? "--dry-run" : args->summary ? "--summary" : args->env ? "--env"
                            : args->inspect ? "--inspect" : args->export_format ? "--export" : args->sample ? "--sample"
                            : args->predict ? "--predict" : args->eval ? "--eval" : NULL;
    const char *other = untrained ? untrained : args->resume ? "--resume" : args->profile ? "--profile" : NULL;
    if (args->show_batch && other) {
        fprintf(stderr, "error: --show-batch shows the first training batch of a new run and exits; %s is another "
                        "command\nHINT: ./train CONFIG --show-batch batch.png [--set ...]\n",
                other);
        return 2;
    }
    if (args->profile && untrained) {
        fprintf(stderr, "error: --profile times each op of the training steps; %s trains none\nHINT: ./train CONFIG "
                        "--profile [--set train.max_steps=N] (a short run: the table comes at its end)\n",
                untrained);
        return 2;
    }
    /* a report written at the end: a path it cannot have is said now, not after the run */
    if (args->junit) {
        const char *slash = strrchr(args->junit, '/');
        size_t base = strlen(slash ? slash + 1 : args->junit);
        if (strlen(args->junit) + 8 >= PATH_MAX || base + 8 > NAME_MAX) {
            fprintf(stderr, "error: --junit %.200s...: a path of %zu bytes (a name of %zu) is past this system's "
                            "limits (%d, %d with the temporary's 8 more)\nHINT: a shorter path\n",
                    args->junit, strlen(args->junit), base, PATH_MAX - 1, NAME_MAX);
            return 2;
        }
        char *dir = slash ? dpt_strf("%.*s", (int)(slash - args->junit), args->junit) : dpt_strf(".");
        struct stat st;
        bool folder = stat(*dir ? dir : "/", &st) == 0 && S_ISDIR(st.st_mode);
        if (!folder) fprintf(stderr, "error: --junit %s: the folder %s does not exist\nHINT: create it first\n", args->junit, dir);
        free(dir);
        if (!folder) return 2;
    }
    /* --sample hf:DIR (or hf:DIR/model.safetensors): the tokenizer beside the weights, when there is
     * one and no --tokenizer names another (Hugging Face's GPT-2 folders hold vocab.json,
     * merges.txt and tokenizer.json), so the prompt is read and the sample printed as text */
    if (args->sample && !args->tokenizer && !strncmp(args->sample, "hf:", 3)) {
        const char *w = args->sample + 3, *slash = strrchr(w, '/');
        struct stat st;
        char *dir = stat(w, &st) == 0 && S_ISDIR(st.st_mode) ? dpt_strf("%s", w)
                    : slash                                   ? dpt_strf("%.*s", (int)(slash - w), w)
                                                              : dpt_strf(".");
        if (dpt_tokenizer_in(dir)) args->tokenizer = found_tokenizer = dir, args->tokenizer_found = true;
        else free(dir);
    }
    if (args->export_format && dpt_export_is_file_format(args->export_format)) { /* the checkpoint alone */
        dpt_error err;
        char path[PATH_MAX];
        int count = 0;
        /* after a CONFIG, `latest` and short names are the run's [checkpoint] dir's, as --eval's are */
        dpt_config *cfg = args->config_path ? load_config(args, &err) : NULL;
        if (args->config_path && !cfg) {
            fprintf(stderr, "error: %s\n", err.msg);
            return 1;
        }
        bool ok = dpt_checkpoint_resolve(args->resume, cfg ? dpt_config_str(cfg, "checkpoint", "dir") : NULL, path,
                                         sizeof path, &err) &&
                  dpt_export_checkpoint(args->export_format, path, args->export_out, args->ema, &count, &err);
        dpt_config_free(cfg);
        if (!ok) {
            fprintf(stderr, "error: --export %s %s\n", args->export_format, err.msg);
            return 1;
        }
        printf("exported %s: %d tensors (%s) to %s (%s)\n", path, count,
               dpt_safetensors_is(path) ? "the file's floating-point ones, in its order"
               : args->ema              ? "the weight averages of the parameters, then buffers"
                                        : "parameters, then buffers",
               args->export_out, args->export_format);
        return 0;
    }
    if (args->export_format && !args->config_path) {
        fprintf(stderr, "error: --export %s is a model's own format: it needs the run's CONFIG to build the model\n"
                        "HINT: ./train CONFIG --export %s CKPT OUT; safetensors and npz need no config\n",
                args->export_format, args->export_format);
        return 2;
    }
    if (!args->config_path && !args->env) {
        fprintf(stderr, "error: no config file given\n\n");
        usage(stderr);
        return 2;
    }
    return -1;
}

static dpt_config *load_config(const cli *args, dpt_error *err)
{
    if (!args->config_path) return dpt_config_defaults(); /* --env alone */
    dpt_config *cfg = dpt_config_load(args->config_path, err);
    for (int i = 0; cfg && i < args->nsets; i++) {
        if (!dpt_config_set(cfg, args->sets[i], err)) {
            dpt_config_free(cfg);
            cfg = NULL;
        }
    }
    /* --sample, --eval or --predict llmc:PATH or hf:PATH: the model starts from the file */
    const char *flag = cli_weights_flag(args), *foreign = weights_arg(args);
    if (cfg && foreign && foreign_weights(foreign)) {
        bool hf = foreign[0] == 'h';
        if (access(foreign + (hf ? 3 : 5), R_OK) != 0) {
            dpt_errorf(err, "%s %s: %s\nHINT: %s", flag, foreign, strerror(errno),
                       hf ? "the model.safetensors of a GPT-2 of Hugging Face's transformers; ./train CONFIG --export "
                            "hf CKPT DIR writes DIR/model.safetensors from a checkpoint"
                          : "llm.c's train_gpt2.py writes gpt2_124M.bin; ./train CONFIG --export llmc CKPT FILE "
                            "writes one from a checkpoint");
            dpt_config_free(cfg);
            return NULL;
        }
        char *set = dpt_strf("model.init=%s", foreign);
        bool ok = dpt_config_set(cfg, set, err);
        free(set);
        if (!ok) dpt_config_free(cfg), cfg = NULL;
    }
    return cfg;
}

/* Every rank loads the config itself (a file on a node-local disk can differ or be missing on
 * one node), so every rank's error must reach the user: the ranks compare verdicts, and the
 * same error everywhere is printed once, different ones each with its rank. Then all stop
 * together, cleanly. false when any rank failed. */
static bool report_config_errors(const dpt_world *world, bool ok, const dpt_error *err)
{
    dpt_comm *comm = dpt_world_comm(world);
    if (!comm || world->size == 1) {
        if (!ok) fprintf(stderr, "error: %s\n", err->msg);
        return ok;
    }
    typedef struct verdict {
        int32_t failed, pad;
        uint64_t msg_hash;
    } verdict;
    verdict mine = {.failed = !ok,
                    .msg_hash = ok ? 0 : dpt_hash_bytes(DPT_HASH_SEED, err->msg, strlen(err->msg))};
    verdict *all = calloc((size_t)world->size, sizeof *all);
    if (!all) dpt_fatal("out of host memory");
    dpt_comm_allgather(comm, &mine, all, sizeof mine, "start-up: config verdicts");
    int failed = 0;
    bool same = true;
    for (int r = 0; r < world->size; r++) {
        failed += all[r].failed;
        same &= all[r].failed && all[r].msg_hash == all[0].msg_hash;
    }
    free(all);
    if (!failed) return true;
    if (same && world->rank == 0)
        fprintf(stderr, "error: %s\n", err->msg);
    else if (!same && !ok)
        fprintf(stderr, "error: rank %d of %d: %s\n", world->rank, world->size, err->msg);
    fflush(stderr);
    dpt_comm_barrier_named(comm, "start-up: config errors printed"); /* messages out before any rank ends */
    return false;
}
