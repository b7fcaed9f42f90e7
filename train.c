/* train.c: ./train CONFIG [--set section.key=value ...]. Reads top to bottom as the training
 * loop: config -> world -> context -> data -> model -> DDP -> for each step: batch, forward,
 * backward (+ bucketed AllReduce), optimizer step, log. The machinery lives below it, in
 * runtime/, layers/, optim/, data/ and models/. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpt.h"
#include "data/data.h"
#include "runtime/comm.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/rng.h"
#include "optim/optim.h"

typedef struct cli {
    const char *config_path;
    const char *sets[64];
    int nsets;
    bool dry_run;
    bool summary;
    bool env;
    const char *resume; /* checkpoint path, "latest", or NULL */
    int argc;           /* the command line as given, for the command that resumes this run */
    char **argv;
} cli;

/* One replica's view of the job: a process under mpirun, or a thread under DataParallel. */
typedef struct replica {
    const cli *args;
    const dpt_config *cfg;
    dpt_comm *comm; /* NULL when training alone */
    int rank, size;
    int local_rank;      /* on this node (mpirun): the GPU it takes */
    int local_size;      /* ranks on this node (they share its memory) */
    const char *devices; /* DataParallel device list, or "" */
    bool print;          /* this replica prints progress lines */
    int rc;
    /* rank 0's checkpoint folder: checked (and locked) before the first write */
    bool ckpt_dir_ready;
    int ckpt_lock_fd;
    char last_ckpt[1100]; /* the newest checkpoint this run wrote, or resumed from */
    char resumed[1100];   /* the checkpoint this run resumed ("" for a new run) ... */
    int64_t resumed_step; /* ... and its step */
} replica;

static void usage(FILE *out);
static int parse_cli(int argc, char **argv, cli *args);
static dpt_config *load_config(const cli *args, dpt_error *err);
static bool report_config_errors(const dpt_world *world, bool ok, const dpt_error *err);
static int run_data_parallel(const cli *args, const dpt_config *cfg, const char *devices);
static void print_header(const replica *r, const dpt_ctx *ctx, const dpt_model *model, const dpt_optim *optim,
                         const dpt_dataset *train, const dpt_dataset *test, const dpt_loader *loader,
                         const dpt_ddp *ddp);
/* Loss and accuracy sums over a window of steps (a log interval, or the whole epoch). The
 * sums live on the device (the meter) and are read into loss/correct only when shown, so a
 * GPU step waits for the host once (the gradient norm), not at every micro-batch. */
typedef struct window {
    double start, loss, comm_s, hidden_s;
    int64_t correct, samples, steps;
    int64_t syncs_at_start; /* the context's host reads when the window opened */
} window;
/* The device meter's slots: this step's sums, then the log window's, then the epoch's. */
enum { METER_STEP = 0, METER_WINDOW = 2, METER_EPOCH = 4, METER_SLOTS = 6 };

/* A progress bar with ETA on a terminal; plain lines otherwise. */
typedef struct progress {
    bool bar;
    double start, last_draw;
    int64_t first_step, total_steps;
} progress;

static void inject_fault(const replica *r, int64_t step);
static bool fault_now(const replica *r, const char *kind, int64_t step);
static void meter_read(dpt_tensor *meter, int slot, window *w);
static bool nonfinite_loss_is_mine(const replica *r, dpt_tensor *meter);
static progress progress_new(const replica *r, int64_t total_steps);
static void progress_step(progress *p, const replica *r, const dpt_train_state *st, int64_t s,
                          int64_t steps_per_epoch, const window *w, dpt_tensor *meter, double lr);
static void progress_end_epoch(progress *p);
/* The GPU's stats as JSON fields (",\"gpu_util\":87,..."), or "" when there are none. */
static const char *gpu_json(const dpt_gpu_stats *s, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (s->valid)
        snprintf(buf, cap,
                 ",\"gpu_util\":%d,\"gpu_mem_used_mb\":%.0f,\"gpu_mem_total_mb\":%.0f,\"gpu_temp_c\":%d,"
                 "\"gpu_power_w\":%.1f",
                 s->util_pct, s->mem_used_mb, s->mem_total_mb, s->temp_c, s->power_w);
    return buf;
}

static void log_window(const replica *r, dpt_metrics *m, progress *p, const dpt_train_state *st, int64_t s,
                       int64_t steps_per_epoch, const window *w, double grad_norm, double lr,
                       const dpt_ctx *ctx, int64_t window_syncs);
static void log_eval(const replica *r, dpt_metrics *m, const dpt_train_state *st, dpt_eval_result test,
                     const window *epoch_window);
static bool prepare_checkpoint_dir(replica *r, bool at_start, dpt_error *err);
static void save_checkpoint(replica *r, const dpt_model *model, const dpt_optim *optim, const dpt_ctx *ctx,
                            const dpt_train_state *st);
static void print_resume_command(const replica *r, const char *path);
static bool signal_agreed(const replica *r, int *signal_seen);
static void install_signal_handlers(void);
static dpt_device pick_device(const replica *r);
static dpt_timeline *open_timeline(const replica *r);
static int fail(const replica *r, const dpt_error *err);
/* What a run will allocate from here on, in bytes, by part (the memory check before step 1). */
typedef struct memory_estimate {
    double params, activations, evaluation, loader, total;
} memory_estimate;
static memory_estimate estimate_memory(const replica *r, const dpt_model *model, const dpt_optim *optim,
                                       const dpt_dataset *train, const dpt_dataset *test);
static bool check_memory(const replica *r, const dpt_ctx *ctx, const memory_estimate *need, dpt_error *err);
static void mib(char *buf, size_t cap, double bytes);
static void *train_replica(void *arg);

int main(int argc, char **argv)
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
    dpt_config *cfg = load_config(&args, &err);
    if (!report_config_errors(&world, cfg != NULL, &err)) {
        dpt_config_free(cfg);
        dpt_world_finalize(&world);
        return 1;
    }
    dpt_comm_set_timeout(dpt_world_comm(&world), dpt_config_float(cfg, "distributed", "comm_timeout_s"));
    if (args.env) {
        char mpi[160];
        dpt_mpi_version(mpi, sizeof mpi);
        printf("dptrain %s | world: %d rank%s, this is rank %d (local rank %d of %d) on %s\n", DPT_VERSION,
               world.size, world.size > 1 ? "s" : "", world.rank, world.local_rank, world.local_size,
               world.host);
        printf("mpi: %s | %s\n", mpi, world.mpi ? "initialised" : "not used (run alone)");
        dpt_print_env(stdout);
        replica probe = {.cfg = cfg, .rank = world.rank, .local_rank = world.local_rank, .devices = ""};
        dpt_device dev = pick_device(&probe);
        int gpus = dpt_device_count(DPT_DEVICE_CUDA);
        if (dev.kind == DPT_DEVICE_CUDA)
            printf("device for this rank: cuda:%d%s\n", dev.index,
                   dev.index < gpus ? "" : " (NOT VISIBLE: more ranks on this node than GPUs)");
        else
            printf("device for this rank: cpu ([train] device = %s)\n",
                   dpt_config_str(cfg, "train", "device"));
        dpt_config_free(cfg);
        dpt_world_finalize(&world);
        return 0;
    }
    const char *devices = dpt_config_str(cfg, "distributed", "devices");
    if (*devices && world.size == 1) {
        rc = run_data_parallel(&args, cfg, devices);
    } else {
        replica r = {.args = &args,
                     .cfg = cfg,
                     .comm = dpt_world_comm(&world),
                     .rank = world.rank,
                     .size = world.size,
                     .local_rank = world.local_rank,
                     .local_size = world.local_size,
                     .devices = "",
                     .print = world.rank == 0 || dpt_config_bool(cfg, "log", "all_ranks"),
                     .ckpt_lock_fd = -1};
        if (*devices) {
            dpt_errorf(&err,
                       "[distributed] devices = %s: DataParallel runs in one process; under "
                       "mpirun each rank takes one device\nHINT: leave devices empty with mpirun",
                       devices);
            return fail(&r, &err);
        }
        train_replica(&r);
        rc = r.rc;
    }
    dpt_config_free(cfg);
    dpt_world_finalize(&world);
    return rc;
}

/* The training loop of one replica. */
static void *train_replica(void *arg)
{
    replica *r = arg;
    const dpt_config *cfg = r->cfg;
    dpt_error err;
    r->rc = 1;

    /* ---- context, data, model, optimizer, checkpoint, DDP */
    dpt_ctx_options ctx_opt = {
        .device = pick_device(r),
        .threads = (int)dpt_config_int(cfg, "train", "threads"),
        .seed = (uint64_t)dpt_config_int(cfg, "train", "seed"),
        .tf32 = dpt_config_bool(cfg, "train", "tf32"),
        .cudnn_benchmark = dpt_config_bool(cfg, "train", "cudnn_benchmark"),
        .cpu_kernels = strcmp(dpt_config_str(cfg, "train", "cpu_kernels"), "native") ? DPT_CPU_KERNELS_ONEDNN
                                                                                     : DPT_CPU_KERNELS_NATIVE,
        .memory_limit = (size_t)(dpt_config_float(cfg, "train", "memory_limit_mb") * 1048576.0),
    };
    if (*r->devices && ctx_opt.threads == 0) /* split the cores between replicas */
        ctx_opt.threads =
            (int)(sysconf(_SC_NPROCESSORS_ONLN) / r->size > 0 ? sysconf(_SC_NPROCESSORS_ONLN) / r->size : 1);
    dpt_ctx *ctx = dpt_ctx_new(&ctx_opt, &err);
    if (!ctx) return r->rc = fail(r, &err), NULL;
    /* GPU buffers travel over NCCL; host-side collectives stay on the MPI or thread one. */
    dpt_comm *host_comm = r->comm, *nccl = NULL;
    dpt_comm_set_timeout(r->comm,
                         dpt_config_float(cfg, "distributed", "comm_timeout_s")); /* NCCL's start too */
    if (r->comm && dpt_ctx_device(ctx).kind == DPT_DEVICE_CUDA) {
        nccl = dpt_comm_nccl_new(ctx, r->comm, &err);
        if (!nccl) return r->rc = fail(r, &err), NULL;
        r->comm = nccl;
    }
    dpt_dataset *train_set, *test_set;
    if (!dpt_data_open(cfg, &train_set, &test_set, &err)) return r->rc = fail(r, &err), NULL;
    dpt_model *model =
        dpt_model_build(ctx, cfg, train_set->c, train_set->h, train_set->w, train_set->num_classes, &err);
    if (!model) return r->rc = fail(r, &err), NULL;
    dpt_optim *optim = dpt_optim_build(model, cfg, &err);
    if (!optim) return r->rc = fail(r, &err), NULL;
    memory_estimate need = estimate_memory(r, model, optim, train_set, test_set);
    if (!check_memory(r, ctx, &need, &err)) return r->rc = fail(r, &err), NULL;
    dpt_metrics *metrics = dpt_metrics_open(r->rank == 0 ? dpt_config_str(cfg, "log", "metrics") : "", &err);
    if (!metrics) return r->rc = fail(r, &err), NULL;

    int64_t batch = dpt_config_int(cfg, "train", "batch");
    int accum = (int)dpt_config_int(cfg, "distributed", "accum_steps");
    dpt_loader_options train_opt = {
        .batch = batch,
        .shuffle = dpt_config_bool(cfg, "data", "shuffle"),
        .drop_last = dpt_config_bool(cfg, "data", "drop_last"),
        .seed = (uint64_t)dpt_config_int(cfg, "train", "seed"),
        .rank = r->rank,
        .world_size = r->size,
        .mean = (float)dpt_config_float(cfg, "data", "mean"),
        .std = (float)dpt_config_float(cfg, "data", "std"),
        .limit = dpt_config_int(cfg, "data", "train_limit"),
        .crop_pad = (int)dpt_config_int(cfg, "data", "random_crop_pad"),
        .hflip = dpt_config_bool(cfg, "data", "hflip"),
        .prefetch = (int)dpt_config_int(cfg, "data", "prefetch"),
    };
    dpt_loader_options test_opt = train_opt;
    test_opt.crop_pad = 0, test_opt.hflip = false;
    test_opt.batch = dpt_config_int(cfg, "train", "eval_batch");
    test_opt.shuffle = false;
    test_opt.exact_shards = true; /* every test sample counts exactly once over all ranks */
    test_opt.limit = dpt_config_int(cfg, "data", "test_limit");
    dpt_loader *train_loader = dpt_loader_new(ctx, train_set, &train_opt);
    const char *hint = dpt_ctx_set_oom_hint(ctx, DPT_EVAL_OOM_HINT);
    dpt_loader *test_loader = dpt_loader_new(ctx, test_set, &test_opt);
    dpt_ctx_set_oom_hint(ctx, hint);
    int64_t steps_per_epoch = dpt_loader_num_batches(train_loader) / accum;
    if (steps_per_epoch == 0) {
        dpt_errorf(&err,
                   "rank %d gets %lld training samples per epoch, fewer than one step of %lld x %d "
                   "accumulation with drop_last = %s\nHINT: lower [train] batch or "
                   "[distributed] accum_steps, or use fewer ranks",
                   r->rank, (long long)dpt_loader_num_samples(train_loader), (long long)batch, accum,
                   train_opt.drop_last ? "true" : "false");
        return r->rc = fail(r, &err), NULL;
    }
    dpt_train_state state = {.epoch = 1, .best_acc = -1.0};
    if (r->args->resume) {
        const char *dir = dpt_config_str(cfg, "checkpoint", "dir");
        if (!dpt_checkpoint_resolve(r->args->resume, dir, r->resumed, sizeof r->resumed, &err))
            return r->rc = fail(r, &err), NULL;
        if (!dpt_checkpoint_load(r->resumed, model, optim, ctx, cfg, &state, r->size, &err))
            return r->rc = fail(r, &err), NULL;
        r->resumed_step = state.step;
        snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", r->resumed);
        if (r->rank == 0)
            printf("resumed from %s: epoch %d, step %lld\n", r->resumed, state.epoch, (long long)state.step);
    }
    /* Everything that can stop a checkpoint is checked before the first step, not at the first
     * save after hours of training. */
    bool look_only = r->args->dry_run || r->args->summary;
    if (r->rank == 0 && !look_only && !prepare_checkpoint_dir(r, true, &err))
        return r->rc = fail(r, &err), NULL;
    dpt_ctx_set_comm(ctx, r->comm); /* SyncBatchNorm layers reduce over these ranks */
    dpt_ddp *ddp = NULL;
    if (r->comm) {
        dpt_ddp_options ddp_opt = {
            .bucket_mb = dpt_config_float(cfg, "distributed", "bucket_mb"),
            .overlap = dpt_config_bool(cfg, "distributed", "overlap"),
            .find_unused = dpt_config_bool(cfg, "distributed", "find_unused"),
            .timeout_s = dpt_config_float(cfg, "distributed", "comm_timeout_s"),
            .dataset_len = train_set->n,
            .config_hash = dpt_config_hash(cfg),
        };
        dpt_comm_set_delay(r->comm, dpt_config_float(cfg, "distributed", "bench_comm_ms_per_mb"));
        ddp = dpt_ddp_new(ctx, model, r->comm, &ddp_opt, &err);
        if (!ddp) return r->rc = fail(r, &err), NULL;
    }
    dpt_timeline *timeline = open_timeline(r);
    if (ddp) dpt_ddp_set_timeline(ddp, timeline);
    int epochs = (int)dpt_config_int(cfg, "train", "epochs");
    int64_t max_steps = dpt_config_int(cfg, "train", "max_steps");
    int64_t total_steps =
        max_steps > 0 && max_steps < epochs * steps_per_epoch ? max_steps : epochs * steps_per_epoch;
    dpt_lr_schedule schedule = dpt_lr_schedule_build(cfg, r->size, steps_per_epoch, total_steps);
    if (r->rank == 0) {
        print_header(r, ctx, model, optim, train_set, test_set, train_loader, ddp);
        char total[32], p[32], a[32];
        mib(total, sizeof total, need.total);
        mib(p, sizeof p, need.params);
        mib(a, sizeof a, need.activations);
        printf("memory ~%s per %s estimated (parameters and optimizer %s, activations %s)\n", total,
               *r->devices ? "replica" : "rank", p, a);
    }
    if (r->args->dry_run || r->args->summary) {
        if (r->rank == 0 && r->args->summary) dpt_model_print_summary(model, stdout);
        if (r->rank == 0 && r->args->dry_run) dpt_config_print(cfg, stdout);
        goto cleanup;
    }

    /* ---- the training loop */
    int64_t interval = dpt_config_int(cfg, "log", "interval");
    int64_t eval_every = dpt_config_int(cfg, "train", "eval_every_steps");
    int64_t ckpt_every = dpt_config_int(cfg, "checkpoint", "every_steps");
    int ckpt_every_epochs = (int)dpt_config_int(cfg, "checkpoint", "every_epochs");
    float label_smoothing = (float)dpt_config_float(cfg, "train", "label_smoothing");
    double clip_norm = dpt_config_float(cfg, "optim", "clip_norm");
    bool skip_nonfinite = strcmp(dpt_config_str(cfg, "train", "nonfinite"), "skip") == 0;
    progress bar = progress_new(r, total_steps);
    double run_start = dpt_now_s();
    dpt_eval_result test = {0};
    bool stop = state.step >= total_steps;
    int signal_seen = 0;
    dpt_tensor *meter = dpt_tensor_new(ctx, 1, (int64_t[]){METER_SLOTS});
    dpt_tensor_fill_slice(ctx, meter, 0, METER_SLOTS, 0.0f);
    /* the current log interval, across epoch ends */
    window win = {.start = dpt_now_s(), .syncs_at_start = dpt_ctx_host_syncs(ctx)};
    for (; state.epoch <= epochs && !stop; state.epoch++) {
        int epoch = state.epoch;
        dpt_loader_start_epoch(train_loader, epoch);
        dpt_loader_skip(train_loader, state.batches_done); /* resuming mid-epoch */
        window whole = {.start = dpt_now_s()};
        dpt_tensor_fill_slice(ctx, meter, METER_EPOCH, 2, 0.0f);
        for (int64_t s = state.batches_done / accum; s < steps_per_epoch && !stop; s++) {
            inject_fault(r, state.step);
            dpt_optim_set_lr(optim, (float)dpt_lr_at(&schedule, state.step));
            int64_t step_samples = 0;
            for (int micro = 0; micro < accum; micro++) {
                dpt_batch b;
                double t0 = dpt_now_s();
                dpt_loader_next(train_loader, &b);
                double t1 = dpt_now_s();
                if (ddp) dpt_ddp_set_sync(ddp, micro == accum - 1); /* no_sync while accumulating */
                dpt_tensor *logits = dpt_model_forward(model, ctx, b.x);
                dpt_tensor *loss = dpt_cross_entropy_dev(ctx, logits, b.device_labels, label_smoothing);
                if (fault_now(r, "nan", state.step)) loss = dpt_scale(ctx, loss, NAN);
                double t2 = dpt_now_s();
                /* Each micro-batch carries 1/accum of the step's mean loss. */
                dpt_backward(ctx, accum > 1 ? dpt_scale(ctx, loss, 1.0f / (float)accum) : loss);
                double t3 = dpt_now_s();
                /* the step's loss and correct counts add up on the device */
                dpt_tensor_add_slice(ctx, meter, METER_STEP, loss, 0, 1, (float)b.size);
                dpt_count_correct_into(ctx, logits, b.device_labels, meter, METER_STEP + 1);
                step_samples += b.size;
                dpt_tape_clear(ctx);
                dpt_timeline_span(timeline, "data", 0, t0, t1);
                dpt_timeline_span(timeline, "forward", 0, t1, t2);
                dpt_timeline_span(timeline, "backward", 0, t2, t3);
            }
            double t4 = dpt_now_s();
            if (ddp) {
                dpt_ddp_finish(ddp); /* gradients now hold the average over ranks */
                dpt_ddp_stats st = dpt_ddp_last_stats(ddp);
                win.comm_s += st.comm_s, win.hidden_s += st.hidden_s;
            }
            double t5 = dpt_now_s();
            /* After the AllReduce every rank sees the same gradients, so all take the same
             * decision here: a NaN on one rank has become a NaN everywhere. A NaN or Inf loss
             * makes the gradients non-finite too, so this norm (the step's one read of the
             * device) decides for both; the loss itself is read only then, to say which. */
            double grad_norm = dpt_clip_grad_norm(ctx, model, clip_norm);
            bool finite = isfinite(grad_norm);
            if (finite) {
                dpt_optim_step(ctx, optim);
                dpt_tensor_add_slice(ctx, meter, METER_WINDOW, meter, METER_STEP, 2, 1.0f);
                dpt_tensor_add_slice(ctx, meter, METER_EPOCH, meter, METER_STEP, 2, 1.0f);
                win.samples += step_samples, whole.samples += step_samples;
            } else {
                bool loss_bad = nonfinite_loss_is_mine(r, meter);
                if (skip_nonfinite) {
                    state.skipped++;
                    if (r->rank == 0)
                        fprintf(stderr, "warning: step %lld skipped: non-finite %s (%lld skipped so far)\n",
                                (long long)state.step, loss_bad ? "loss" : "gradient",
                                (long long)state.skipped);
                } else if (loss_bad) {
                    dpt_abort_job(
                        "rank %d: loss is nan or inf at step %lld (epoch %d)\nHINT: lower [optim] lr, "
                        "set [optim] clip_norm, or [train] nonfinite = skip",
                        r->rank, (long long)state.step, epoch);
                } else {
                    dpt_abort_job("rank %d: gradient norm is %f at step %lld (epoch %d)\nHINT: lower [optim] "
                                  "lr, set [optim] clip_norm, or [train] nonfinite = skip",
                                  r->rank, grad_norm, (long long)state.step, epoch);
                }
            }
            dpt_tensor_fill_slice(ctx, meter, METER_STEP, 2, 0.0f);
            dpt_model_zero_grad(model);
            dpt_timeline_span(timeline, "wait allreduce", 0, t4, t5);
            dpt_timeline_span(timeline, "optimizer", 0, t5, dpt_now_s());
            state.step++;
            win.steps++;
            state.batches_done = (s + 1) * accum;
            stop = state.step >= total_steps;
            if (signal_agreed(r, &signal_seen)) stop = true;
            progress_step(&bar, r, &state, s + 1, steps_per_epoch, &win, meter, (double)dpt_optim_lr(optim));
            if (state.step % interval == 0 || stop) {
                int64_t window_syncs = dpt_ctx_host_syncs(ctx) - win.syncs_at_start; /* before this read */
                meter_read(meter, METER_WINDOW, &win);
                log_window(r, metrics, &bar, &state, s + 1, steps_per_epoch, &win, grad_norm,
                           (double)dpt_optim_lr(optim), ctx, window_syncs);
                dpt_tensor_fill_slice(ctx, meter, METER_WINDOW, 2, 0.0f);
                win = (window){.start = dpt_now_s(), .syncs_at_start = dpt_ctx_host_syncs(ctx)};
            }
            if (eval_every && state.step % eval_every == 0 && s + 1 < steps_per_epoch) {
                log_eval(r, metrics, &state,
                         dpt_eval_allreduce(r->comm, dpt_evaluate(ctx, model, test_loader)), NULL);
                win.start = dpt_now_s(); /* evaluation time is not training throughput */
            }
            if ((ckpt_every && state.step % ckpt_every == 0) || signal_seen)
                save_checkpoint(r, model, optim, ctx, &state);
        }
        if (signal_seen) break;
        /* Each rank evaluates its own shard; the sums are combined over ranks. */
        progress_end_epoch(&bar);
        double eval_start = dpt_now_s();
        test = dpt_eval_allreduce(r->comm, dpt_evaluate(ctx, model, test_loader));
        if (test.accuracy > state.best_acc) state.best_acc = test.accuracy, state.best_epoch = epoch;
        meter_read(meter, METER_EPOCH, &whole);
        log_eval(r, metrics, &state, test, &whole);
        win.start += dpt_now_s() - eval_start;
        if (state.batches_done < steps_per_epoch * accum) break; /* stopped mid-epoch (max_steps) */
        state.batches_done = 0;
        if (ckpt_every_epochs && epoch % ckpt_every_epochs == 0) {
            dpt_train_state next = state;
            next.epoch++;
            save_checkpoint(r, model, optim, ctx, &next);
        }
    }
    if (signal_seen) {
        if (r->rank == 0) {
            printf("stopped by signal %d after step %lld; ", signal_seen, (long long)state.step);
            print_resume_command(r, r->last_ckpt);
        }
    } else if (r->rank == 0) {
        printf("done | %d epochs | %lld steps%s | %.1f s | best test acc %.2f%% (epoch %d) | final test acc "
               "%.2f%%\n",
               state.epoch - 1, (long long)state.step, state.skipped ? " (some skipped)" : "",
               dpt_now_s() - run_start, 100.0 * state.best_acc, state.best_epoch, 100.0 * test.accuracy);
    }

    dpt_tensor_free(meter);
cleanup:
    dpt_timeline_close(timeline);
    dpt_ddp_free(ddp);
    dpt_metrics_close(metrics);
    dpt_loader_free(test_loader);
    dpt_loader_free(train_loader);
    dpt_optim_free(optim);
    dpt_model_free(model);
    dpt_dataset_free(test_set);
    dpt_dataset_free(train_set);
    if (nccl) nccl->ops->free(nccl);
    r->comm = host_comm;
    dpt_ctx_free(ctx);
    if (r->ckpt_lock_fd >= 0) close(r->ckpt_lock_fd); /* the folder is free for the next run */
    r->rc = 0;
    return NULL;
}

/* ---------------------------------------------------------------- helpers */

typedef struct dp_job {
    const cli *args;
    const dpt_config *cfg;
    const char *devices;
    int n;
    int *rc; /* per replica */
} dp_job;

static void replica_entry(int rank, dpt_comm *comm, void *user)
{
    dp_job *job = user;
    replica r = {.args = job->args,
                 .cfg = job->cfg,
                 .comm = comm,
                 .rank = rank,
                 .size = job->n,
                 .devices = job->devices,
                 .print = rank == 0,
                 .ckpt_lock_fd = -1};
    train_replica(&r);
    job->rc[rank] = r.rc;
}

/* A DataParallel device list is all CPUs in order (cpu:0,cpu:1,...) or distinct visible GPUs
 * (cuda:0,cuda:1 or any other order); false with err naming the entry otherwise. */
static bool check_device_list(const dpt_config *cfg, const char *devices, int n, dpt_error *err)
{
    const char *where = dpt_config_where(cfg, "distributed", "devices");
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
    if (cuda && !strcmp(dpt_config_str(cfg, "train", "device"), "cpu"))
        return dpt_errorf(err,
                          "%s: [distributed] devices = %s, but [train] device = cpu\nHINT: set [train] "
                          "device = cuda (or auto), or list cpu devices",
                          where, devices);
    return true;
}

/* DataParallel: one process, one replica thread per listed device; gradients averaged
 * through a shared-memory communicator (CPU) or NCCL (GPUs); every replica applies the same
 * update. */
static int run_data_parallel(const cli *args, const dpt_config *cfg, const char *devices)
{
    int n = 1;
    for (const char *c = devices; *c; c++)
        n += *c == ',';
    dpt_error err;
    if (!check_device_list(cfg, devices, n, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    dp_job job = {args, cfg, devices, n, calloc((size_t)n, sizeof(int))};
    dpt_run_replicas(n, replica_entry, &job);
    int rc = 0;
    for (int i = 0; i < n; i++)
        rc |= job.rc[i];
    free(job.rc);
    return rc;
}

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: ./train CONFIG [--set section.key=value ...] [--resume [PATH|latest]] [--dry-run]\n"
        "       mpirun -np N ./train CONFIG ...      (data-parallel over N ranks)\n"
        "       ./train --config-reference | --help | --version\n"
        "\n"
        "Trains the model that the INI file CONFIG describes (see docs/config.md).\n"
        "\n"
        "  --set section.key=value  override one config key (repeatable), e.g. --set train.batch=128\n"
        "  --resume [PATH|latest]   continue exactly from a checkpoint (default: the newest in\n"
        "                           [checkpoint] dir); SIGINT/SIGTERM write one and stop cleanly\n"
        "  --dry-run                load everything, print the resolved config, and exit\n"
        "  --summary                print the model's layers, output shapes, parameters and FLOPs, and exit\n"
        "  --config-reference       print every section and key as Markdown\n"
        "  --env                    print CUDA/cuDNN/NCCL/MPI versions, the GPUs and the world, and exit\n"
        "  --version                print the version\n"
        "  --help                   this text\n"
        "\n"
        "examples:\n"
        "  ./train configs/fmnist_mlp.ini --set train.epochs=1\n"
        "  mpirun -np 2 ./train configs/fmnist_mlp.ini --set optim.lr_scaling=linear\n"
        "  ./train configs/fmnist_mlp.ini --set distributed.devices=cpu:0,cpu:1\n");
}

/* Returns an exit code to stop with, or -1 to go on training. */
static int parse_cli(int argc, char **argv, cli *args)
{
    memset(args, 0, sizeof *args);
    args->argc = argc, args->argv = argv;
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
        } else if (!strcmp(a, "--dry-run")) {
            args->dry_run = true;
        } else if (!strcmp(a, "--summary")) {
            args->summary = true;
        } else if (!strcmp(a, "--env")) {
            args->env = true;
        } else if (!strcmp(a, "--resume")) {
            args->resume =
                i + 1 < argc && argv[i + 1][0] != '-' && !strstr(argv[i + 1], ".ini") ? argv[++i] : "latest";
        } else if (!strcmp(a, "--set") || !strncmp(a, "--set=", 6)) {
            const char *v = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v) {
                fprintf(stderr, "error: --set needs section.key=value\n");
                return 2;
            }
            if (args->nsets == (int)(sizeof args->sets / sizeof args->sets[0])) {
                fprintf(stderr, "error: more than %d --set flags\n", args->nsets);
                return 2;
            }
            args->sets[args->nsets++] = v;
        } else if (a[0] == '-') {
            fprintf(stderr, "error: unknown flag %s\n\n", a);
            usage(stderr);
            return 2;
        } else if (args->config_path) {
            fprintf(stderr, "error: two config files given (%s and %s)\n", args->config_path, a);
            return 2;
        } else {
            args->config_path = a;
        }
    }
    if (!args->config_path && args->env) args->config_path = NULL;
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

static void print_header(const replica *r, const dpt_ctx *ctx, const dpt_model *model, const dpt_optim *optim,
                         const dpt_dataset *train, const dpt_dataset *test, const dpt_loader *loader,
                         const dpt_ddp *ddp)
{
    const dpt_config *cfg = r->cfg;
    int64_t batch = dpt_config_int(cfg, "train", "batch");
    int accum = (int)dpt_config_int(cfg, "distributed", "accum_steps");
    printf("dptrain %s | config %s (hash %016llx)\n", DPT_VERSION, r->args->config_path,
           (unsigned long long)dpt_config_hash(cfg));
    printf("model %s %s | %lld parameters | %.1f MFLOP/sample forward\n", dpt_model_name(model),
           dpt_model_summary(model), (long long)dpt_model_param_count(model), dpt_model_flops(model) / 1e6);
    char device[32];
    dpt_device_str(dpt_ctx_device(ctx), device, sizeof device);
    const char *kernels = dpt_ctx_backend_name(ctx);
    printf("device %s%s | %d threads | %d %s%s | batch %lld per rank x %d accum (%lld global)\n", device,
           !strcmp(kernels, "cpu-onednn") ? " (oneDNN convolutions)"
           : !strcmp(kernels, "cpu")      ? " (native kernels)"
                                          : "",
           dpt_ctx_threads(ctx), r->size, *r->devices ? "replica" : "rank", r->size > 1 ? "s" : "",
           (long long)batch, accum, (long long)(batch * r->size * accum));
    if (ddp)
        printf("ddp %s | %d buckets of <= %g MiB | overlap %s | comm %s\n",
               *r->devices ? "(DataParallel, one process)" : "(one process per rank)",
               dpt_ddp_num_buckets(ddp), dpt_config_float(cfg, "distributed", "bucket_mb"),
               dpt_config_bool(cfg, "distributed", "overlap") ? "on" : "off", r->comm->ops->name);
    printf("data %s | train %lld per rank of %lld | test %lld | %dx%dx%d | %d classes | %lld steps/epoch\n",
           dpt_config_str(cfg, "data", "dir"), (long long)dpt_loader_num_samples(loader), (long long)train->n,
           (long long)test->n, (int)train->c, (int)train->h, (int)train->w, train->num_classes,
           (long long)(dpt_loader_num_batches(loader) / accum));
    printf("optim %s | lr %g (%s scaling) | schedule %s\n", dpt_optim_name(optim),
           dpt_lr_schedule_build(cfg, r->size, 1, 1).target_lr, dpt_config_str(cfg, "optim", "lr_scaling"),
           dpt_config_str(cfg, "optim", "schedule"));
    fflush(stdout);
}

/* Tests: is the [distributed] fault `kind` due on this rank at this step? */
static bool fault_now(const replica *r, const char *kind, int64_t step)
{
    return !strcmp(dpt_config_str(r->cfg, "distributed", "fault"), kind) &&
           r->rank == dpt_config_int(r->cfg, "distributed", "fault_rank") &&
           step == dpt_config_int(r->cfg, "distributed", "fault_step");
}

/* Tests: make this rank exit or hang at a chosen step (NaN is injected into the loss). */
static void inject_fault(const replica *r, int64_t step)
{
    bool exit_now = fault_now(r, "exit", step), hang_now = fault_now(r, "hang", step);
    if (!exit_now && !hang_now) return;
    fprintf(stderr, "fault injection: rank %d %s at step %lld\n", r->rank, exit_now ? "exit" : "hang",
            (long long)step);
    fflush(stderr);
    if (exit_now) _exit(3);
    for (;;)
        pause();
}

/* The window's loss and correct sums from the device meter (one read). Skipped steps were
 * never added, so they do not poison the averages. */
static void meter_read(dpt_tensor *meter, int slot, window *w)
{
    float v[METER_SLOTS];
    dpt_tensor_copy_to_host(meter, v);
    w->loss = v[slot], w->correct = (int64_t)llround(v[slot + 1]);
}

/* After a non-finite gradient norm (the same on every rank): was it this rank's loss? Every
 * rank reads its own step loss, and the ranks agree so that only one whose loss went bad
 * reports it (a rank that only received the NaN through the AllReduce then waits to be
 * stopped); when no loss went bad, it was the gradients. */
static bool nonfinite_loss_is_mine(const replica *r, dpt_tensor *meter)
{
    float v[METER_SLOTS];
    dpt_tensor_copy_to_host(meter, v);
    bool mine = !isfinite(v[METER_STEP]);
    double bad = mine ? 1.0 : 0.0;
    if (r->comm && r->size > 1) dpt_comm_allreduce_f64(r->comm, &bad, 1, "non-finite loss: which ranks");
    if (bad > 0 && !mine && !strcmp(dpt_config_str(r->cfg, "train", "nonfinite"), "stop"))
        for (;;)
            pause(); /* the rank whose loss went bad ends the job with its message */
    return mine || (bad > 0 && r->size == 1);
}

static progress progress_new(const replica *r, int64_t total_steps)
{
    const char *mode = dpt_config_str(r->cfg, "log", "progress");
    /* Under mpirun stdout is often a pty of the launcher even when the job's output goes to a
     * file, so "auto" means lines for multi-process runs. */
    bool bar = !strcmp(mode, "bar") ||
               (!strcmp(mode, "auto") && isatty(STDOUT_FILENO) && !getenv("OMPI_COMM_WORLD_SIZE") &&
                !getenv("PMIX_RANK") && !getenv("PMI_RANK"));
    return (progress){.bar = bar && r->print && r->rank == 0,
                      .start = dpt_now_s(),
                      .first_step = -1,
                      .total_steps = total_steps};
}

static void progress_step(progress *p, const replica *r, const dpt_train_state *st, int64_t s,
                          int64_t steps_per_epoch, const window *win, dpt_tensor *meter, double lr)
{
    if (p->first_step < 0) p->first_step = st->step - 1, p->start = dpt_now_s();
    if (!p->bar) return;
    double now = dpt_now_s();
    if (now - p->last_draw < 0.1 && s < steps_per_epoch) return;
    p->last_draw = now;
    window shown = *win; /* the bar reads the device meter at most 10 times a second */
    meter_read(meter, METER_WINDOW, &shown);
    const window *w = &shown;
    double per_step = (now - p->start) / (double)(st->step - p->first_step);
    int eta = (int)(per_step * (double)(p->total_steps - st->step));
    char bar[31];
    int fill = (int)(30 * s / steps_per_epoch);
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[30] = '\0';
    printf("\repoch %d [%s] %3d%% %lld/%lld | loss %.4f | acc %5.1f%% | lr %.3g | ETA %d:%02d:%02d \033[K",
           st->epoch, bar, (int)(100 * s / steps_per_epoch), (long long)s, (long long)steps_per_epoch,
           w->samples ? w->loss / (double)w->samples : 0.0,
           w->samples ? 100.0 * (double)w->correct / (double)w->samples : 0.0, lr, eta / 3600, eta / 60 % 60,
           eta % 60);
    fflush(stdout);
    (void)r;
}

static void progress_end_epoch(progress *p)
{
    if (p->bar) printf("\n");
}

static void log_window(const replica *r, dpt_metrics *m, progress *p, const dpt_train_state *st, int64_t s,
                       int64_t steps_per_epoch, const window *w, double grad_norm, double lr,
                       const dpt_ctx *ctx, int64_t window_syncs)
{
    double now = dpt_now_s();
    int64_t steps = w->steps > 0 ? w->steps : 1;
    double img_s = (double)w->samples * r->size / (now - w->start);
    double loss = w->samples ? w->loss / (double)w->samples : NAN;
    double acc = w->samples ? (double)w->correct / (double)w->samples : NAN;
    /* the rank's GPU as nvidia-smi would show it ([log] gpu_stats; NVML loaded at run time) */
    dpt_gpu_stats gs = {0};
    char gpu[112] = "";
    if (dpt_ctx_device(ctx).kind == DPT_DEVICE_CUDA &&
        strcmp(dpt_config_str(r->cfg, "log", "gpu_stats"), "off")) {
        char pci[32], text[96];
        dpt_cuda_pci_bus_id(dpt_ctx_device(ctx).index, pci, sizeof pci);
        if (dpt_gpu_stats_read(dpt_ctx_device(ctx).index, pci, &gs))
            snprintf(gpu, sizeof gpu, " | gpu %s", dpt_gpu_stats_str(&gs, text, sizeof text));
    }
    if (r->print && !p->bar) {
        char who[32] = "", comm[96] = "";
        if (r->rank) snprintf(who, sizeof who, "[rank %d] ", r->rank);
        if (r->comm)
            snprintf(comm, sizeof comm, " | comm %.2f ms/step (%.0f%% hidden)",
                     1e3 * w->comm_s / (double)steps, w->comm_s > 0 ? 100.0 * w->hidden_s / w->comm_s : 0.0);
        printf("%sepoch %d | step %6lld/%lld | loss %.4f | acc %5.1f%% | %8.0f img/s%s%s\n", who, st->epoch,
               (long long)s, (long long)steps_per_epoch, loss, 100.0 * acc, img_s, comm, gpu);
        fflush(stdout);
    }
    dpt_mem_stats mem = dpt_ctx_mem_stats(ctx);
    char json[160];
    dpt_metrics_write(m,
                      "\"kind\":\"train\",\"epoch\":%d,\"step\":%lld,\"lr\":%g,\"loss\":%.6f,\"acc\":%.6f,"
                      "\"img_s\":%.1f,\"step_ms\":%.3f,\"comm_ms\":%.3f,\"comm_hidden\":%.4f,"
                      "\"grad_norm\":%.6g,\"mem_peak_mb\":%.1f,\"ranks\":%d,\"global_batch\":%lld,"
                      "\"host_syncs_per_step\":%.2f%s",
                      st->epoch, (long long)st->step, lr, loss, acc, img_s,
                      1e3 * (now - w->start) / (double)steps, 1e3 * w->comm_s / (double)steps,
                      w->comm_s > 0 ? w->hidden_s / w->comm_s : 0.0, grad_norm,
                      (double)mem.peak_allocated / 1048576.0, r->size,
                      (long long)(dpt_config_int(r->cfg, "train", "batch") * r->size *
                                  dpt_config_int(r->cfg, "distributed", "accum_steps")),
                      (double)window_syncs / (double)steps, gpu_json(&gs, json, sizeof json));
}

/* After an evaluation: the epoch line (epoch_window != NULL) or a mid-epoch one. */
static void log_eval(const replica *r, dpt_metrics *m, const dpt_train_state *st, dpt_eval_result test,
                     const window *epoch_window)
{
    double sums[3] = {0, 0, 0};
    if (epoch_window) {
        sums[0] = epoch_window->loss, sums[1] = (double)epoch_window->correct,
        sums[2] = (double)epoch_window->samples;
        if (r->comm) dpt_comm_allreduce_f64(r->comm, sums, 3, "epoch training sums");
    }
    double train_loss = sums[2] ? sums[0] / sums[2] : NAN, train_acc = sums[2] ? sums[1] / sums[2] : NAN;
    if (r->rank == 0) {
        if (epoch_window)
            printf("epoch %d done | %.1f s | train loss %.4f acc %.1f%% | test loss %.4f acc %.2f%% (%lld "
                   "images)\n",
                   st->epoch, dpt_now_s() - epoch_window->start, train_loss, 100.0 * train_acc, test.loss,
                   100.0 * test.accuracy, (long long)test.samples);
        else
            printf("eval at step %lld | test loss %.4f acc %.2f%% (%lld images)\n", (long long)st->step,
                   test.loss, 100.0 * test.accuracy, (long long)test.samples);
        fflush(stdout);
    }
    dpt_metrics_write(m,
                      "\"kind\":\"eval\",\"epoch\":%d,\"step\":%lld,\"test_loss\":%.6f,\"test_acc\":%.6f,"
                      "\"train_loss\":%.6f,\"train_acc\":%.6f",
                      st->epoch, (long long)st->step, test.loss, test.accuracy, train_loss, train_acc);
}

/* The device of token `index` of a DataParallel list ("cpu:0,cpu:1" or "cuda:0,cuda:1"). */
static dpt_device list_device(const char *devices, int index)
{
    const char *tok = devices;
    for (int i = 0; i < index; i++)
        tok = strchr(tok, ',') + 1;
    if (!strncmp(tok, "cuda:", 5)) return (dpt_device){DPT_DEVICE_CUDA, atoi(tok + 5)};
    return (dpt_device){DPT_DEVICE_CPU, atoi(tok + 4)};
}

/* [train] device: CUDA device = local rank (mpirun), or the replica's entry of the
 * DataParallel list. */
static dpt_device pick_device(const replica *r)
{
    if (*r->devices) return list_device(r->devices, r->rank);
    const char *want = dpt_config_str(r->cfg, "train", "device");
    bool cuda = !strcmp(want, "cuda") || (!strcmp(want, "auto") && dpt_device_count(DPT_DEVICE_CUDA) > 0);
    if (!cuda) return (dpt_device){DPT_DEVICE_CPU, r->rank};
    return (dpt_device){DPT_DEVICE_CUDA, r->local_rank};
}

/* Activations kept for backward, per float of the layer outputs the builders note: the
 * noted outputs (conv, batch norm, linear, pool) plus the unnoted ones beside them (ReLU,
 * residual sums, dropout masks, softmax) and the gradients alive during backward. Measured
 * against the allocator's peak (make test checks it stays above; see test_memory_estimate). */
#define ACTIVATION_FACTOR 3.5
#define EVALUATION_FACTOR 2.0 /* the noted outputs and the unnoted ones beside them */

static memory_estimate estimate_memory(const replica *r, const dpt_model *model, const dpt_optim *optim,
                                       const dpt_dataset *train, const dpt_dataset *test)
{
    const dpt_config *cfg = r->cfg;
    double per_sample = dpt_model_activation_floats(model, NULL);
    double batch = (double)dpt_config_int(cfg, "train", "batch");
    /* an evaluation batch is never larger than the test set (or its limit) */
    int64_t test_n =
        dpt_config_int(cfg, "data", "test_limit") > 0 && dpt_config_int(cfg, "data", "test_limit") < test->n
            ? dpt_config_int(cfg, "data", "test_limit")
            : test->n;
    double eval_batch = (double)(dpt_config_int(cfg, "train", "eval_batch") < test_n
                                     ? dpt_config_int(cfg, "train", "eval_batch")
                                     : test_n);
    double sample = (double)(train->c * train->h * train->w) * sizeof(float);
    double slots = (double)dpt_config_int(cfg, "data", "prefetch") + 1;
    memory_estimate m = {
        /* parameters, their gradients (DDP buckets), the optimizer's state */
        .params = (double)dpt_model_param_count(model) * sizeof(float) * (2.0 + optim->nstate),
        .activations = batch * (per_sample * sizeof(float) * ACTIVATION_FACTOR + sample),
        /* no backward, but a forward pass's outputs live until the tape is cleared */
        .evaluation = eval_batch * (per_sample * sizeof(float) * EVALUATION_FACTOR + sample),
        .loader = slots * (batch + eval_batch) * sample,
    };
    /* training's tape is cleared before an evaluation starts: they do not add up */
    m.total = m.params + (m.activations > m.evaluation ? m.activations : m.evaluation) + m.loader;
    return m;
}

/* The memory this process can still take: MemAvailable, lowered by a cgroup limit. */
static double available_host_memory(void)
{
    double avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &avail) == 1) avail *= 1024.0;
    if (f) fclose(f);
    const char *limits[][2] = {
        {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
    for (int i = 0; i < 2; i++) {
        double limit = 0, used = 0;
        FILE *lf = fopen(limits[i][0], "r"), *uf = fopen(limits[i][1], "r");
        if (lf && uf && fscanf(lf, "%lf", &limit) == 1 && fscanf(uf, "%lf", &used) == 1 && limit > used &&
            limit - used < avail)
            avail = limit - used;
        if (lf) fclose(lf);
        if (uf) fclose(uf);
    }
    return avail;
}

static void mib(char *buf, size_t cap, double bytes)
{
    if (bytes >= 1073741824.0)
        snprintf(buf, cap, "%.1f GiB", bytes / 1073741824.0);
    else
        snprintf(buf, cap, "%.0f MiB", bytes / 1048576.0);
}

/* Refuse a run that cannot fit before it starts (the kernel's OOM killer gives no message),
 * naming the estimate's parts and the key to change. The replicas of a node share it. */
static bool check_memory(const replica *r, const dpt_ctx *ctx, const memory_estimate *need, dpt_error *err)
{
    if (!dpt_config_bool(r->cfg, "train", "memory_check")) return true;
    bool device = dpt_ctx_device(ctx).kind != DPT_DEVICE_CPU;
    double have = 0, sharing = 1;
    if (device) {
        dpt_mem_stats st = dpt_ctx_mem_stats(ctx);
        size_t free_b = 0, total_b = 0;
        dpt_ctx_device_memory(ctx, &free_b, &total_b);
        have = (double)free_b;
        if (st.limit && (double)st.limit < have) have = (double)st.limit;
    } else {
        have = available_host_memory();
        sharing = *r->devices ? r->size : (r->size > 1 ? r->local_size : 1);
        dpt_mem_stats st = dpt_ctx_mem_stats(ctx);
        if (st.limit && (double)st.limit < have / sharing) have = (double)st.limit * sharing;
    }
    if (have <= 0 || need->total * sharing <= have) return true;
    char total[32], avail[32], p[32], a[32], e[32], l[32], per[32];
    mib(total, sizeof total, need->total * sharing);
    mib(avail, sizeof avail, have);
    mib(p, sizeof p, need->params);
    mib(a, sizeof a, need->activations);
    mib(e, sizeof e, need->evaluation);
    mib(l, sizeof l, need->loader);
    mib(per, sizeof per, need->activations / (double)dpt_config_int(r->cfg, "train", "batch"));
    bool evaluation_big = need->evaluation > need->activations;
    return dpt_errorf(
        err,
        "this run needs about %s%s but %s has %s available: per %s, parameters and optimizer state "
        "%s, activations at [train] batch = %lld %s (%s per sample), evaluation at [train] "
        "eval_batch = %lld %s, loader buffers %s\nHINT: %s; or set [train] memory_check = false if "
        "the estimate is wrong",
        total, sharing > 1 ? " (all replicas of this node)" : "", device ? "the device" : "this machine",
        avail, *r->devices ? "replica" : "rank", p, (long long)dpt_config_int(r->cfg, "train", "batch"), a,
        per, (long long)dpt_config_int(r->cfg, "train", "eval_batch"), e, l,
        evaluation_big ? "lower [train] eval_batch"
                       : "lower [train] batch and keep the global batch with [distributed] accum_steps, "
                         "or spread it over more ranks");
}

/* Whether this run writes checkpoints on its own (not only when a signal stops it). */
static bool periodic_checkpoints(const dpt_config *cfg)
{
    return dpt_config_int(cfg, "checkpoint", "every_steps") > 0 ||
           dpt_config_int(cfg, "checkpoint", "every_epochs") > 0;
}

/* The same folder, whatever the spelling (checkpoints, ./checkpoints/, an absolute path). */
static bool same_folder(const char *file, const char *dir)
{
    char parent[1100], a[4096], b[4096];
    snprintf(parent, sizeof parent, "%s", file);
    char *slash = strrchr(parent, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(parent, sizeof parent, ".");
    return realpath(parent, a) && realpath(dir, b) && !strcmp(a, b);
}

/* Rank 0, at start-up and before the first write. A run that checkpoints periodically
 * creates the folder now and meets [checkpoint] existing there; one that writes only when a
 * signal stops it checks the folder can be made, and at that first write (no one to ask
 * then) moves another run's checkpoints aside rather than mix with them. */
static bool prepare_checkpoint_dir(replica *r, bool at_start, dpt_error *err)
{
    const char *dir = dpt_config_str(r->cfg, "checkpoint", "dir");
    bool periodic = periodic_checkpoints(r->cfg);
    dpt_ckpt_dir_options opt = {
        .create = periodic || !at_start,
        .resumed_here = *r->resumed && same_folder(r->resumed, dir),
        .resumed_step = r->resumed_step,
        .archive = !strcmp(dpt_config_str(r->cfg, "checkpoint", "existing"), "archive") || !at_start,
    };
    opt.check_only = at_start && !periodic; /* the lock and the look inside wait for the first write */
    if (!dpt_checkpoint_prepare_dir(dir, &opt, &r->ckpt_lock_fd, err)) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return dpt_errorf(err, "%s: %s", dpt_config_where(r->cfg, "checkpoint", "dir"), msg);
    }
    r->ckpt_dir_ready = !opt.check_only;
    return true;
}

/* Rank 0 writes; every rank holds the same state. */
static void save_checkpoint(replica *r, const dpt_model *model, const dpt_optim *optim, const dpt_ctx *ctx,
                            const dpt_train_state *st)
{
    if (r->rank != 0) return;
    const char *dir = dpt_config_str(r->cfg, "checkpoint", "dir");
    dpt_error err;
    if (!r->ckpt_dir_ready && !prepare_checkpoint_dir(r, false, &err)) dpt_abort_job("%s", err.msg);
    char path[1100];
    snprintf(path, sizeof path, "%s/ckpt-step%08lld.dpt", dir, (long long)st->step);
    if (!dpt_checkpoint_save(path, model, optim, ctx, r->cfg, st, r->size, &err))
        dpt_abort_job("%s", err.msg);
    dpt_checkpoint_prune(dir, (int)dpt_config_int(r->cfg, "checkpoint", "keep_last"), st->step);
    snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", path);
    printf("checkpoint %s (epoch %d, step %lld)\n", path, st->epoch, (long long)st->step);
    fflush(stdout);
}

/* Quote a word for a POSIX shell when it needs it. */
static void shell_word(FILE *out, const char *w)
{
    if (*w &&
        strspn(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=./:,@%") == strlen(w)) {
        fputs(w, out);
        return;
    }
    fputc('\'', out);
    for (const char *c = w; *c; c++)
        if (*c == '\'')
            fputs("'\\''", out);
        else
            fputc(*c, out);
    fputc('\'', out);
}

/* The command that continues this run: the original command line (under mpirun, with the
 * same number of ranks), its --resume replaced by the checkpoint just written. */
static void print_resume_command(const replica *r, const char *path)
{
    if (!*path) {
        printf("no checkpoint was written\n");
        return;
    }
    bool mpi = r->size > 1 && !*r->devices;
    printf("resume with: ");
    if (mpi) printf("mpirun -np %d ", r->size);
    const cli *a = r->args;
    for (int i = 0; i < a->argc; i++) {
        if (!strcmp(a->argv[i], "--resume")) { /* and its argument, if it took one */
            if (i + 1 < a->argc && a->resume == a->argv[i + 1]) i++;
            continue;
        }
        if (i) putchar(' ');
        shell_word(stdout, a->argv[i]);
    }
    printf(" --resume ");
    shell_word(stdout, path);
    printf("\n");
    if (mpi) printf("(with the other mpirun options this job was started with, e.g. --hostfile)\n");
    fflush(stdout);
}

static volatile sig_atomic_t pending_signal;

static void on_signal(int sig)
{
    pending_signal = sig;
}

static void install_signal_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* A signal may reach the ranks at different steps: they agree (one tiny AllReduce per step)
 * so that all stop after the same step and the checkpoint is consistent. */
static bool signal_agreed(const replica *r, int *signal_seen)
{
    double sig = (double)pending_signal;
    if (r->comm && r->size > 1) {
        dpt_comm_allreduce_f64(r->comm, &sig, 1, "signal agreement (once per step)");
        if (sig > 0) sig = SIGTERM;
    }
    if (sig > 0 && r->rank == 0) {
        fprintf(stderr, "\nreceived %s: finishing this step and writing a checkpoint\n",
                (int)sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    *signal_seen = (int)sig;
    return sig > 0;
}

static dpt_timeline *open_timeline(const replica *r)
{
    const char *pattern = dpt_config_str(r->cfg, "log", "timeline");
    if (!*pattern) return NULL;
    char path[1024];
    const char *mark = strstr(pattern, "{rank}");
    if (mark)
        snprintf(path, sizeof path, "%.*s%d%s", (int)(mark - pattern), pattern, r->rank, mark + 6);
    else if (r->size > 1)
        snprintf(path, sizeof path, "%s.rank%d", pattern, r->rank);
    else
        snprintf(path, sizeof path, "%s", pattern);
    dpt_error err;
    dpt_timeline *tl = dpt_timeline_open(path, r->rank, &err);
    if (!tl) dpt_abort_job("%s", err.msg);
    return tl;
}

/* A user-facing error. With other ranks or replica threads running, stop them too (they may
 * wait in a collective for this one): the job ends once, with this rank's message (MPI_Abort
 * under mpirun; the whole process under DataParallel). */
static int fail(const replica *r, const dpt_error *err)
{
    if (r->size > 1 && !*r->devices) dpt_abort_job("rank %d of %d: %s", r->rank, r->size, err->msg);
    if (*r->devices) dpt_abort_job("%s", err->msg);
    fprintf(stderr, "error: %s\n", err->msg);
    return 1;
}
