/* train_support.c: what the loop leans on: the device a replica takes, the memory check
 * before step 1, the checkpoint folder and writes, the command that resumes a run, signals
 * (agreed by all ranks), the timeline, and how an error ends the job. */
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "autograd.h"
#include "ctx.h"
#include "train.h"
#include "../data/data.h"
#include "zero.h"
#include "reducer.h"
#include "error.h"
#include "expect.h"
#include "tensor.h"

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
dpt_device pick_device(const replica *r)
{
    if (r->data_parallel) return list_device(r->run->devices, r->rank);
    const char *want = r->run->device;
    bool cuda = !strcmp(want, "cuda") || (!strcmp(want, "auto") && dpt_device_count(DPT_DEVICE_CUDA) > 0);
    if (!cuda) return (dpt_device){DPT_DEVICE_CPU, r->rank};
    return (dpt_device){DPT_DEVICE_CUDA, r->local_rank};
}

/* Activations kept for backward, per float of the layer outputs the builders note: the
 * noted outputs (conv, batch norm, linear, pool; the models' relus run in place on them) plus
 * the unnoted ones beside them (residual sums, dropout masks, softmax) and the gradients alive
 * during backward (a few layers' since backward frees each once used). Measured against the
 * allocator's peak (test_cli's test_memory keeps the estimate within [0.8, 1.6] of it;
 * ResNet-50 batch 8: estimate 1.4 GiB, peak 1.3 GiB in fp32; 982 MiB and 913 MiB with bf16
 * activations). A model of out-of-place relus needs more than this says. */
#define ACTIVATION_FACTOR 1.6
#define ACTIVATION_BF16 0.6   /* the share left with bf16 activations (the gradients stay fp32) */
#define EVALUATION_FACTOR 1.4 /* the noted outputs and the unnoted ones beside them */
/* Evaluation keeps a forward pass's outputs until the tape is cleared, unless the model hands
 * a block's back at its end (dpt_tape_release: the built-in CNN and ResNets): then about a
 * block's worth is alive at once, bounded here by this many of the largest layer output. */
#define EVALUATION_BLOCK 8.0
/* The traced forward's outputs with memory of their own (dpt_trace.owned_floats: what the tape
 * keeps) per float the builders noted: 1.0-1.74 for the built-in models (CNN 1.55, MLP 1.0, GPT
 * 1.12, ResNet-20 1.71, ResNet-50 1.74, less with bf16; the notes leave out residual sums,
 * softmax, the copies an op makes, and ACTIVATION_FACTOR covers them). A forward that keeps more
 * than twice its notes runs what they miss: a transformer of a researcher's own whose linear
 * layers note one row each but run on every token (docs/writing-a-model.md's ViT, 17 tokens:
 * 28x its notes, estimated at 2 MiB of activations beside a 34 MiB peak at batch 128). Its
 * trace is then the base, whole: that ViT's estimate is 1.08-1.18x the allocator's peak at
 * batch 32, 128 and 512. */
#define TRACE_PER_NOTED 2.0

memory_estimate estimate_memory(const trainer *t)
{
    const run_config *run = t->run;
    const dpt_dataset *train = t->train_set, *test = t->test_set;
    double largest = 0, per_sample = dpt_model_activation_floats(t->model, &largest);
    /* a model whose builder noted no layers, or fewer than its forward keeps: what its traced
     * forward kept */
    if (per_sample == 0 && t->trace.output_floats > 0)
        per_sample = t->trace.output_floats / ACTIVATION_FACTOR, largest = per_sample;
    else if (t->trace.owned_floats > TRACE_PER_NOTED * per_sample) {
        per_sample = t->trace.owned_floats;
        if (largest < t->trace.largest_owned) largest = t->trace.largest_owned;
    }
    double eval_sample = per_sample < EVALUATION_BLOCK * largest ? per_sample : EVALUATION_BLOCK * largest;
    /* a model that notes whole blocks releases each at its end in evaluation: one at a time,
     * beside what it noted outside them (the GPT: its embedding, its logits; estimated 4x its
     * measured evaluation when blocks counted as layers) */
    double largest_block, blocks = dpt_model_noted_floats(t->model, "block", &largest_block);
    if (blocks > 0) eval_sample = per_sample - blocks + largest_block;
    /* bf16 activations are what convolutions, batch norm and pooling keep (and the relus
     * beside them); linear layers, layer norm, attention and the logits keep fp32 (GPT-2 small
     * with 2 blocks in bf16: estimated 1.7 GiB against a 2.7 GiB peak when all counted 16-bit) */
    double act16 = 1.0;
    if (dpt_ctx_bf16_activations(t->ctx) && per_sample > 0) {
        const char *kinds16[] = {"conv2d", "batchnorm", "syncbn", "pool", "avgpool"};
        double in16 = 0;
        for (size_t k = 0; k < sizeof kinds16 / sizeof *kinds16; k++)
            in16 += dpt_model_noted_floats(t->model, kinds16[k], NULL);
        act16 = 1.0 - (1.0 - ACTIVATION_BF16) * (in16 < per_sample ? in16 : per_sample) / per_sample;
    }
    double batch = (double)run->batch;
    /* an evaluation batch is never larger than the test set (or its limit) */
    int64_t limit = run->test_data.limit;
    int64_t test_n = limit > 0 && limit < test->n ? limit : test->n;
    double eval_batch = (double)(run->eval_batch < test_n ? run->eval_batch : test_n);
    double sample = (double)(train->c * train->h * train->w) * sizeof(float);
    /* [data] eval_image_size: a test set of other images (FixRes) scales what evaluation keeps */
    double test_sample = (double)(test->c * test->h * test->w) * sizeof(float);
    if (!train->get && !test->get && test_sample != sample) eval_sample *= test_sample / sample;
    double slots = (double)run->train_data.prefetch + 1;
    int nparams = dpt_model_num_params(t->model);
    double nstate = t->optim && nparams ? (double)dpt_optim_num_state(t->optim) / nparams : 0;
    /* [distributed] zero: a rank keeps 1/N of it (plus up to 64 floats a segment) */
    if (run->zero && t->r->size > 1) nstate /= t->r->size;
    /* the gradients: whole (DDP's buckets), or under zero = 2 with zero_grads = ranges a rank's
     * ranges and 4 buckets in flight: 3 of about 4 MiB and one holding the largest parameter
     * beside up to 4 MiB (a bucket closes with the parameter that fills it; GPT-2's token
     * embedding alone is 154 MiB). auto decides with the bucket plan, later: counted whole, the
     * bound. */
    double count = (double)dpt_model_param_count(t->model), grads = 1.0;
    if (run->zero == 2 && t->r->size > 1 && !run->deterministic && run->ddp.shard_grads == 2 && count > 0) {
        int64_t biggest = 0;
        for (int p = 0; p < nparams; p++)
            if (dpt_model_param_at(t->model, p)->numel > biggest) biggest = dpt_model_param_at(t->model, p)->numel;
        grads = 1.0 / t->r->size + (4.0 * 4.0 * 1048576.0 + (double)biggest * sizeof(float)) / (count * sizeof(float));
        if (grads > 1.0) grads = 1.0;
    }
    memory_estimate m = {
        /* parameters, their gradients (DDP buckets), the optimizer's state */
        .params = count * sizeof(float) * (1.0 + grads + nstate),
        /* backward starts with the largest output's gradient beside all of them (the logits'
         * for a language model: GPT-2's vocabulary at batch 16, T 128 had a 1.9 GiB peak against
         * 0.9 estimated without it) */
        .activations = batch * ((per_sample * ACTIVATION_FACTOR * act16 + largest) * sizeof(float) + sample),
        /* no backward, but a forward pass's outputs live until the tape is cleared */
        .evaluation = eval_batch * (eval_sample * sizeof(float) * EVALUATION_FACTOR * act16 + test_sample),
        .loader = slots * (batch * sample + eval_batch * test_sample),
    };
    /* what a run that does not train holds: --eval and --predict an evaluation, --sample and
     * --export neither (--sample's cache: 2 x layers x block x channels floats, left out) */
    const cli *a = t->r->args;
    if (a->eval || a->predict) m.activations = 0, m.loader = slots * eval_batch * test_sample;
    if (a->sample || a->export_format) m.activations = m.evaluation = m.loader = 0;
    /* [train] ema_decay: the averages and their spare (dpt_ema_swap), of every parameter and buffer */
    const dpt_ema *ema = dpt_model_ema(t->model);
    for (int i = 0; ema && i < dpt_ema_count(ema); i++)
        m.params += 2.0 * (double)dpt_tensor_numel(dpt_ema_at(ema, i)) * sizeof(float);
    /* training's tape is cleared before an evaluation starts: they do not add up */
    m.total = m.params + (m.activations > m.evaluation ? m.activations : m.evaluation) + m.loader;
    return m;
}

/* What a resource limit (ulimit -d or -v, as a job scheduler may set) leaves this process:
 * the limit less the /proc/self/status field that counts against it; 0 where none is set. */
static double rlimit_left(int resource, const char *field)
{
    struct rlimit rl;
    if (getrlimit(resource, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
    double used = 0;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256], want[32];
    snprintf(want, sizeof want, "%s %%lf kB", field);
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, want, &used) == 1) used *= 1024.0;
    if (f) fclose(f);
    double left = (double)rl.rlim_cur - used;
    return left > 1.0 ? left : 1.0;
}

/* The memory this process can still take: MemAvailable, lowered by a cgroup limit and by the
 * process's data and address-space limits. */
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
    double data = rlimit_left(RLIMIT_DATA, "VmData:"), as = rlimit_left(RLIMIT_AS, "VmSize:");
    if (data > 0 && data < avail) avail = data;
    if (as > 0 && as < avail) avail = as;
    return avail;
}

/* Until check_memory has had its say: the allocator of a CPU run may not take more than this
 * machine has available, so that a model whose parameters, gradients or optimizer state alone
 * exceed it (built, traced and given its optimizer before the estimate can be made) stops with
 * a message naming the allocation instead of meeting the kernel's OOM killer, which gives none.
 * Off (on = false) after the check: the estimate decides from then on, and [train]
 * memory_check = false or memory_limit_mb leave the allocator as asked. */
void guard_memory(trainer *t, bool on)
{
    if (!t->run->memory_check || t->run->ctx.memory_limit || dpt_ctx_device(t->ctx).kind != DPT_DEVICE_CPU) return;
    if (!on) {
        dpt_ctx_guard_memory(t->ctx, 0, NULL);
        dpt_ctx_set_oom_hint(t->ctx, NULL);
        return;
    }
    /* Not divided among the ranks of the node: each reads what is available as it starts, after
     * the faster ones took theirs; a rank that alone outgrows it is the case to catch (its share
     * is check_memory's to judge). */
    double have = available_host_memory();
    if (have < 1048576.0) return; /* unknown */
    dpt_ctx_guard_memory(t->ctx, (size_t)have, "the memory available when the run started");
    dpt_ctx_set_oom_hint(t->ctx, "the model's parameters, their gradients and the optimizer's state alone exceed "
                                 "this machine's memory: a smaller model ([model] keys), more ranks with [distributed] "
                                 "zero = 1 or 2, or [train] memory_check = false to let the system decide");
}

/* Refuse a run that cannot fit before it starts (the kernel's OOM killer gives no message),
 * naming the estimate's parts and the key to change. The replicas of a node share it. */
bool check_memory(const trainer *t, dpt_error *err)
{
    const replica *r = t->r;
    const dpt_ctx *ctx = t->ctx;
    const memory_estimate *need = &t->need;
    if (!t->run->memory_check) return true;
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
        sharing = r->data_parallel ? r->size : (r->size > 1 ? r->local_size : 1);
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
    mib(per, sizeof per, need->activations / (double)t->run->batch);
    bool evaluation_big = need->evaluation > need->activations;
    return dpt_errorf(
        err,
        "this run needs about %s%s but %s has %s available: per %s, parameters and optimizer state "
        "%s, activations at [train] batch = %lld %s (%s per sample), evaluation at [train] "
        "eval_batch = %lld %s, loader buffers %s\nHINT: %s; or set [train] memory_check = false if "
        "the estimate is wrong",
        total, sharing > 1 ? " (all replicas of this node)" : "", device ? "the device" : "this machine",
        avail, r->data_parallel ? "replica" : "rank", p, (long long)t->run->batch, a, per,
        (long long)t->run->eval_batch, e, l,
        evaluation_big ? "lower [train] eval_batch"
                       : "lower [train] batch and keep the global batch with [distributed] accum_steps, "
                         "or spread it over more ranks");
}

/* Whether this run writes checkpoints on its own (not only when a signal stops it). */
static bool periodic_checkpoints(const run_config *run)
{
    return run->ckpt_every_steps > 0 || run->ckpt_every_epochs > 0 || run->ckpt_final;
}

/* The same folder, whatever the spelling (checkpoints, ./checkpoints/, an absolute path). */
static bool same_folder(const char *file, const char *dir)
{
    char *parent = dpt_strf("%s", file), a[PATH_MAX], b[PATH_MAX];
    char *slash = strrchr(parent, '/');
    if (slash) *slash = '\0';
    bool same = realpath(slash ? parent : ".", a) && realpath(dir, b) && !strcmp(a, b);
    free(parent);
    return same;
}

/* Rank 0. At start-up, a run that checkpoints periodically creates the folder, locks it and
 * meets [checkpoint] existing there; one that writes only if a signal stops it claims the
 * folder (made if missing, locked: another live run there is refused now, not at the signal)
 * and, at that first write (no one to ask then), moves another run's checkpoints aside rather
 * than mix with them. */
bool prepare_checkpoint_dir(replica *r, bool at_start, dpt_error *err)
{
    const char *dir = r->run->ckpt_dir;
    bool resumed_here = *r->resumed && same_folder(r->resumed, dir);
    bool ok;
    if (!at_start && r->ckpt_lock_fd >= 0) /* claimed at start: only another run's files to move */
        ok = dpt_checkpoint_archive_foreign(dir, resumed_here, r->resumed_step, err);
    else {
        bool periodic = periodic_checkpoints(r->run);
        dpt_ckpt_dir_options opt = {
            .create = periodic || !at_start,
            .resumed_here = resumed_here,
            .resumed_step = r->resumed_step,
            .archive = r->run->ckpt_archive || !at_start,
            .claim = at_start && !periodic,
            .created = &r->ckpt_made,
        };
        ok = dpt_checkpoint_prepare_dir(dir, &opt, &r->ckpt_lock_fd, err);
        if (ok && opt.claim) return true; /* ready at the first write */
    }
    if (!ok) return dpt_error_prefix(err, "%s: ", dpt_config_where(r->run->ini, "checkpoint", "dir"));
    r->ckpt_dir_ready = true;
    return true;
}

/* The end of the run: a folder claimed and never written is let go as it was found. */
void release_checkpoint_dir(replica *r)
{
    if (r->ckpt_lock_fd >= 0) {
        if (r->ckpt_written)
            close(r->ckpt_lock_fd); /* the folder is free for the next run */
        else
            dpt_checkpoint_unclaim(r->run->ckpt_dir, r->ckpt_made, r->ckpt_lock_fd);
    }
    r->ckpt_lock_fd = -1;
    free(r->ckpt_made);
    r->ckpt_made = NULL;
}

/* A checkpoint at path: rank 0 writes the file; under [distributed] zero every rank first writes
 * its part of the optimizer state beside it ([checkpoint] sharded) or sends it to rank 0 as the
 * file is written. A rank that cannot write ends the job with its message. True on the rank that
 * wrote the file (rank 0). */
static bool write_checkpoint(trainer *t, const char *path, const dpt_train_state *st)
{
    replica *r = t->r;
    dpt_error err;
    dpt_zero_settle(t->zero); /* zero_overlap: the parameters whole */
    bool parts = t->zero && t->run->ckpt_sharded && r->size > 1;
    if (r->rank == 0 && !r->ckpt_dir_ready && !prepare_checkpoint_dir(r, false, &err)) dpt_abort_job("%s", err.msg);
    uint64_t nonce = 0;
    if (parts) {
        /* one id for this checkpoint's parts, new each time: a part never passes for another
         * checkpoint's of the same name (best.dpt) */
        if (r->rank == 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            nonce = ((uint64_t)ts.tv_sec * 1000000007u) ^ ((uint64_t)ts.tv_nsec << 20) ^ ((uint64_t)getpid() << 40) ^
                    (uint64_t)st->step;
            if (!nonce) nonce = 1;
        }
        dpt_comm_broadcast(t->host_comm, &nonce, sizeof nonce, 0, "checkpoint: the parts' id");
        if (!dpt_checkpoint_save_part(path, t->optim, r->rank, r->size, nonce, &err)) dpt_abort_job("%s", err.msg);
        dpt_comm_barrier_named(t->host_comm, "checkpoint: every rank's part written");
    }
    if (r->rank != 0) {
        if (!parts) zero_send_state(t);
        return false;
    }
    bool ok = parts ? dpt_checkpoint_save_sharded(path, t->model, t->optim, t->ctx, t->run->ini, st, r->size, r->size,
                                                  nonce, &err)
                    : dpt_checkpoint_save(path, t->model, t->optim, t->ctx, t->run->ini, st, r->size, &err);
    if (!ok) dpt_abort_job("%s", err.msg);
    r->ckpt_written = true;
    return true;
}

/* Rank 0 writes; every rank holds the same state. */
void save_checkpoint(trainer *t, const dpt_train_state *state)
{
    replica *r = t->r;
    /* mid-epoch: the epoch's training sums over every rank (all ranks are here), so that the
     * resumed run's epoch line is the uninterrupted run's */
    double sums[3] = {0, 0, 0};
    if (state->batches_done > 0) {
        window w;
        meter_read(t->meter, METER_EPOCH, &w);
        sums[0] = w.loss, sums[1] = (double)w.correct, sums[2] = (double)t->whole.units;
        if (r->comm && r->size > 1) dpt_comm_allreduce_f64(r->comm, sums, 3, "the epoch's sums for a checkpoint");
    }
    r->last_ckpt_step = state->step; /* on every rank: the end-of-run decision must agree */
    dpt_train_state at = *state; /* with the data position in global samples */
    at.samples_done = at.batches_done * t->run->batch * r->size;
    at.epoch_loss = sums[0], at.epoch_correct = (int64_t)sums[1], at.epoch_units = (int64_t)sums[2];
    const dpt_train_state *st = &at;
    const char *dir = t->run->ckpt_dir;
    char *path = dpt_strf("%s/ckpt-step%08lld.dpt", dir, (long long)st->step);
    bool mine = write_checkpoint(t, path, st);
    if (!mine) {
        free(path);
        return;
    }
    dpt_checkpoint_prune(dir, t->run->keep_last, st->step);
    DPT_ASSERT(strlen(path) < sizeof r->last_ckpt, "checked at start: %s", path);
    snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", path);
    report_line("checkpoint %s (epoch %d, step %lld)\n", path, st->epoch, (long long)st->step);
    free(path);
}

/* ---------------------------------------------------------------- batch augmentations */

/* [data] mixup / cutmix: mix this batch's input in place as its draw says; returns each
 * sample's partner's labels, or NULL when the draw leaves the batch as it is. */
static dpt_tensor *mix_batch(trainer *t, dpt_batch *b, dpt_tensor *target, dpt_mix *mix)
{
    dpt_tensor *x = dpt_batch_get(b, t->task.input);
    int64_t h, w;
    dpt_mix_image_size(x, &h, &w);
    dpt_mix_draw(&t->run->mix, b->key, h, w, mix);
    if (!mix->on) return NULL;
    dpt_mix_apply(t->ctx, x, mix);
    return dpt_mix_partner_labels(t->ctx, target, t->mix_labels);
}

dpt_tensor *augment_batch(trainer *t, dpt_batch *b, dpt_tensor *target, dpt_mix *mix)
{
    *mix = (dpt_mix){.lambda = 1.0};
    if (t->erase) dpt_erase_apply(t->ctx, dpt_batch_get(b, t->task.input), &t->run->erase, b->key);
    return t->mix_labels ? mix_batch(t, b, target, mix) : NULL;
}

/* ---------------------------------------------------------------- [model] init (fine-tuning) */

typedef struct init_load {
    dpt_model *model;
    const char *exclude; /* GLOBs, comma separated */
    char *seen;          /* per parameter, then per buffer: loaded or excluded */
    int loaded, kept, skipped;
    char missing[600];   /* the checkpoint's tensors this model lacks, not excluded */
    const char *source;  /* "checkpoint", "file" (safetensors) */
    char adapted[400];   /* the model's adapt: what it made of which tensors */
    bool whole;          /* every tensor, none excluded (--eval, --predict, --sample of a safetensors file) */
} init_load;

static bool excluded(const char *globs, const char *name)
{
    if (!*globs) return false;
    char *copy = dpt_strf("%s", globs);
    bool hit = false;
    for (char *save = NULL, *g = strtok_r(copy, ", ", &save); g && !hit; g = strtok_r(NULL, ", ", &save))
        hit = fnmatch(g, name, 0) == 0;
    free(copy);
    return hit;
}

static void dims_text(char *buf, size_t cap, int ndim, const int64_t *dims)
{
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? ", " : "", (long long)dims[d]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* The file's tensor `name` is the model's tensor t (index i over parameters, then buffers). With
 * exclude's globs matching the model's name, it stays at the model's initialisation. */
static bool init_one(init_load *l, dpt_tensor *t, int i, const char *name, int ndim, const int64_t *dims,
                     const float *data, dpt_error *err)
{
    l->seen[i] = 1;
    if (excluded(l->exclude, t->name)) {
        l->kept++;
        return true;
    }
    bool same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = t->shape[d] == dims[d];
    dpt_adapt_fn adapt = dpt_model_adapter(l->model);
    if (!same && adapt) { /* the model may make its tensor from the file's (a ViT's positions at another size) */
        float *out = malloc((size_t)dpt_tensor_numel(t) * sizeof *out);
        if (!out) dpt_fatal("out of host memory adapting %s", t->name);
        size_t at = strlen(l->adapted);
        char how[200] = "";
        if (adapt(l->model, t, ndim, dims, data, out, how, sizeof how)) {
            dpt_tensor_copy_from_host(t, out);
            free(out);
            if (at + 1 < sizeof l->adapted)
                snprintf(l->adapted + at, sizeof l->adapted - at, "%s%s %s", at ? "; " : "", t->name, how);
            l->loaded++;
            return true;
        }
        free(out);
    }
    if (!same) {
        char a[96], b[96], as[sizeof t->name + 16] = "";
        dims_text(a, sizeof a, ndim, dims), dims_text(b, sizeof b, t->ndim, t->shape);
        if (strcmp(name, t->name) != 0) snprintf(as, sizeof as, " (this model's %s)", t->name);
        if (l->whole)
            return dpt_errorf(err, "%s%s is %s in the %s and %s in this model\nHINT: the config's [model] keys "
                                   "must build the model whose weights these are (./train CONFIG --summary, "
                                   "./train --inspect FILE)",
                              name, as, a, l->source, b);
        return dpt_errorf(err, "%s%s is %s in the %s and %s in this model\nHINT: [model] init_exclude = %s "
                               "starts it from the model's initialisation (a new head)",
                          name, as, a, l->source, b, t->name);
    }
    dpt_tensor_copy_from_host(t, data);
    l->loaded++;
    return true;
}

static bool init_tensor(void *user, const char *name, bool buffer, int ndim, const int64_t *dims, const float *data,
                        int64_t numel, dpt_error *err)
{
    init_load *l = user;
    (void)buffer; /* names are unique over both (a safetensors file does not say which it is) */
    int np = dpt_model_num_params(l->model), n = np + dpt_model_num_buffers(l->model);
    char renamed[DPT_NAME_MAX + 1];
    dpt_rename_fn rename = dpt_model_renamer(l->model);
    for (int pass = 0; pass < 2; pass++) { /* the model's own name, else its name for the file's */
        if (pass == 1 && !(rename && l->source[0] == 'f' && rename(name, renamed, sizeof renamed))) break;
        const char *want = pass ? renamed : name;
        for (int i = 0; i < n; i++) {
            dpt_tensor *t = i < np ? dpt_model_param_at(l->model, i) : dpt_model_buffer_at(l->model, i - np);
            if (!strcmp(t->name, want)) return init_one(l, t, i, name, ndim, dims, data, err);
        }
    }
    (void)numel;
    if (excluded(l->exclude, name)) {
        l->skipped++;
        return true;
    }
    size_t at = strlen(l->missing);
    if (at + 1 < sizeof l->missing)
        snprintf(l->missing + at, sizeof l->missing - at, "%s%s", at ? ", " : "", name);
    return true;
}

/* "; N integer tensors passed over (names)" for a file that had some, else "". */
const char *weights_loaded_ints(const weights_loaded *got, char *buf, size_t cap)
{
    if (!got->ints.count) return "";
    snprintf(buf, cap, "; %d integer tensor%s passed over (%s)", got->ints.count, got->ints.count > 1 ? "s" : "",
             got->ints.names);
    return buf;
}

/* The parameters and buffers of a checkpoint (its weight averages with averages) or of a
 * safetensors file, by name, into the model: every tensor of the file must be the model's and
 * of its shape, and every tensor of the model must be in the file, but for exclude's globs. */
bool load_weights_by_name(trainer *t, const char *path, bool averages, const char *exclude, weights_loaded *got,
                          dpt_error *err)
{
    memset(got, 0, sizeof *got);
    int total = dpt_model_num_params(t->model) + dpt_model_num_buffers(t->model);
    init_load l = {.model = t->model, .exclude = exclude ? exclude : "", .whole = !exclude};
    l.seen = calloc((size_t)total + 1, 1);
    if (!l.seen) dpt_fatal("out of host memory");
    got->safetensors = dpt_safetensors_is(path);
    l.source = got->safetensors ? "file" : "checkpoint";
    /* a checkpoint, or a safetensors file's averages (refused there, saying why) */
    bool ok = got->safetensors && !averages ? dpt_safetensors_tensors(path, init_tensor, &l, &got->ints, err)
                                            : dpt_checkpoint_tensors_of(path, averages, init_tensor, &l, err);
    if (ok && *l.missing)
        ok = dpt_errorf(err, "%s holds tensors this model (%s) does not have: %s\nHINT: %s%s", path,
                        dpt_model_name(t->model), l.missing,
                        !got->safetensors ? "[model] init_exclude = GLOB skips them (and starts this model's own new "
                                            "tensors from its initialisation)"
                                          : "the names must be this model's (./train CONFIG --summary lists them, "
                                            "./train --inspect FILE the file's)",
                        got->safetensors && exclude ? "; [model] init_exclude = GLOB skips the file's extra ones" : "");
    char absent[600] = "";
    for (int i = 0; ok && i < total; i++) {
        if (l.seen[i]) continue;
        int np = dpt_model_num_params(t->model);
        const dpt_tensor *x = i < np ? dpt_model_param_at(t->model, i) : dpt_model_buffer_at(t->model, i - np);
        if (excluded(l.exclude, x->name)) {
            l.kept++;
            continue;
        }
        size_t at = strlen(absent);
        if (at + 1 < sizeof absent) snprintf(absent + at, sizeof absent - at, "%s%s", at ? ", " : "", x->name);
    }
    if (ok && *absent)
        ok = dpt_errorf(err, "%s lacks tensors of this model (%s): %s\nHINT: %s", path, dpt_model_name(t->model),
                        absent,
                        exclude ? "[model] init_exclude = GLOB starts them from the model's initialisation"
                                : "the file must hold every weight of this model (a file it was exported to, or "
                                  "[model] init = FILE with init_exclude = GLOB to start the rest from the "
                                  "model's initialisation, then train)");
    free(l.seen);
    got->loaded = l.loaded, got->kept = l.kept, got->skipped = l.skipped;
    snprintf(got->adapted, sizeof got->adapted, "%s", l.adapted);
    return ok;
}

/* [model] init = CKPT: the parameters and buffers of another run's checkpoint, by name, into
 * the model just built (every rank reads it: no broadcast needed before DDP's own). Names and
 * shapes must agree but for init_exclude's globs. */
bool format_listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        while (*p == ' ')
            p++;
        if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == '\0' || p[n] == ' ')) return true;
    }
    return false;
}

bool init_from_checkpoint(trainer *t, dpt_error *err)
{
    const dpt_config *cfg = t->run->ini;
    const char *init = dpt_config_str(cfg, "model", "init"), *where = dpt_config_where(cfg, "model", "init");
    const char *exclude_where = dpt_config_where(cfg, "model", "init_exclude");
    if (!*init && strcmp(exclude_where, "default") != 0 && *dpt_config_str(cfg, "model", "init_exclude"))
        return dpt_errorf(err, "%s: [model] init_exclude = %s names tensors left out of [model] init, and this run has "
                               "no init: nothing would read it\nHINT: set [model] init = CKPT (another run's "
                               "checkpoint), or remove it",
                          exclude_where, dpt_config_str(cfg, "model", "init_exclude"));
    if (!*init) return true;
    bool hf = !strncmp(init, "hf:", 3);
    const cli *a = t->r->args; /* --sample, --eval, --predict llmc:/hf:PATH set init themselves */
    if ((hf || !strncmp(init, "llmc:", 5)) && !a->resume && cli_weights_flag(a)) where = cli_weights_flag(a);
    if (hf || !strncmp(init, "llmc:", 5)) { /* llm.c's or Hugging Face's files: models that read them did when built */
        const dpt_registration *reg = dpt_registry_find(DPT_KIND_MODEL, dpt_model_name(t->model));
        const dpt_model_impl *impl = reg ? reg->impl : NULL;
        const char *own = impl && impl->init_formats ? impl->init_formats : "", *prefix = hf ? "hf" : "llmc";
        if (format_listed(own, prefix)) {
            if (t->r->rank == 0)
                report_line("init from %s (%s's files, read by model %s)\n", init, hf ? "Hugging Face" : "llm.c",
                            dpt_model_name(t->model));
            return true;
        }
        return dpt_errorf(err, "%s: [model] init = %s: model %s does not read %s files (it would start from its own "
                               "initialisation)\nHINT: [model] name = gpt (GPT-2)%s with the file's shape, or init = "
                               "CKPT, a checkpoint of this model%s",
                          where, init, dpt_model_name(t->model), hf ? "Hugging Face's" : "llm.c's",
                          hf ? " or llama (LLaMA)" : "",
                          hf ? ", or init = FILE.safetensors (without hf:) for weights named as this model's" : "");
    }
    bool averages = !strncmp(init, "ema:", 4); /* the checkpoint's weight averages ([train] ema_decay) */
    if (averages) init += 4;
    char path[PATH_MAX];
    if (!dpt_checkpoint_resolve(init, NULL, path, sizeof path, err))
        return dpt_error_prefix(err, "%s: [model] init = ", where);
    weights_loaded got;
    if (!load_weights_by_name(t, path, averages, dpt_config_str(cfg, "model", "init_exclude"), &got, err))
        return dpt_error_prefix(err, "%s: [model] init: ", where);
    char ints[480];
    if (t->r->rank == 0)
        report_line("init from %s%s: %d tensors loaded, %d at the model's initialisation, %d of the %s skipped "
                    "([model] init_exclude)%s\n",
                    averages ? "the weight averages of " : "", path, got.loaded, got.kept, got.skipped,
                    got.safetensors ? "file's" : "checkpoint's", weights_loaded_ints(&got, ints, sizeof ints));
    if (t->r->rank == 0 && *got.adapted) report_line("init: %s\n", got.adapted);
    return true;
}

/* ---------------------------------------------------------------- [distributed] zero */

/* A checkpoint's optimizer state, one tensor at a time on rank 0 (the writer): the whole
 * state never has to fit on any rank, and the file is the one unsharded training writes (a
 * resume on any world size, sharded or not, reads it). */
static void gather_state(int param, float *whole, const float *mine, void *user)
{
    trainer *t = user;
    dpt_zero_gather_one(t->zero, param, whole, mine, 0, "zero: optimizer state for a checkpoint");
}

/* zero = 2: where the reducer keeps this rank's ranges of the gradients (NULL: in .grad). */
static float *const *zero_grad_shards(const trainer *t)
{
    return t->reducer && t->reducer->ops->grad_shards ? t->reducer->ops->grad_shards(t->reducer) : NULL;
}

/* The plan: zero = 2 cuts DDP's buckets (the reduce-scatter's ranges are the optimizer's), zero
 * = 1 and the deterministic mode's tree (every rank holds the whole sum) segments of its own. */
bool zero_shard(trainer *t, dpt_error *err)
{
    replica *r = t->r;
    const char *where = dpt_config_where(t->run->ini, "distributed", "zero");
    if (!t->run->zero || r->size < 2 || !t->host_comm) return true;
    char dev[32];
    if (dpt_ctx_device(t->ctx).kind != DPT_DEVICE_CPU)
        return dpt_errorf(err, "%s: [distributed] zero = %d runs on host communicators (CPU ranks, DataParallel on "
                               "CPUs); on %s the parameters would have to travel over NCCL, which is not built yet\n"
                               "HINT: zero = 0 on GPUs",
                          where, t->run->zero, dpt_device_str(dpt_ctx_device(t->ctx), dev, sizeof dev));
    if (dpt_optim_whole_tensors(t->optim))
        return dpt_errorf(err, "%s: [distributed] zero = %d steps ranges of elements, and optimizer %s reads whole "
                               "tensors (its registration's whole_tensors)\nHINT: zero = 0 for this optimizer",
                          where, t->run->zero, dpt_optim_name(t->optim));
    int n = dpt_model_num_params(t->model);
    dpt_zero_layout layout = {0}, *use = NULL;
    int *segment_of = NULL;
    int64_t *offset_of = NULL, *numel = NULL;
    if (t->run->zero == 2 && t->reducer->ops->place) {
        segment_of = malloc((size_t)(n + 1) * sizeof *segment_of);
        offset_of = malloc((size_t)(n + 1) * sizeof *offset_of);
        numel = calloc((size_t)n + 1, sizeof *numel);
        if (!segment_of || !offset_of || !numel) dpt_fatal("out of host memory");
        for (int p = 0; p < n; p++) {
            int64_t len;
            t->reducer->ops->place(t->reducer, p, &segment_of[p], &offset_of[p], &len);
            numel[segment_of[p]] = len;
            if (segment_of[p] + 1 > layout.nsegments) layout.nsegments = segment_of[p] + 1;
        }
        layout.segment_of = segment_of, layout.offset_of = offset_of, layout.segment_numel = numel;
        use = &layout;
    }
    t->zero = dpt_zero_new(t->model, t->host_comm, use);
    free(segment_of), free(offset_of), free(numel);
    dpt_optim_shard(t->optim, dpt_zero_lo(t->zero), dpt_zero_hi(t->zero));
    dpt_optim_set_gather(t->optim, gather_state, t);
    dpt_optim_set_grad_slices(t->optim, zero_grad_shards(t)); /* zero = 2: only this rank's ranges are kept */
    bool overlapped = t->run->zero_overlap != 2 && dpt_zero_overlap(t->zero);
    if (r->rank == 0) {
        int64_t most = dpt_zero_most(t->zero), total = dpt_model_param_count(t->model);
        report_line("zero %d | optimizer state sharded over %d %s: the largest share %.1f%% of %lld parameters (1/%d "
                    "= %.1f%%)%s%s\n",
                    t->run->zero, r->size, r->data_parallel ? "replicas" : "ranks",
                    100.0 * (double)most / (double)(total ? total : 1), (long long)total, r->size, 100.0 / r->size,
                    t->run->zero == 2 && use && zero_grad_shards(t)
                        ? "; gradients reduce-scattered by the same ranges, a rank keeping only its ranges"
                    : t->run->zero == 2 && use && !t->run->ddp.shard_grads
                        ? "; gradients reduce-scattered by the same ranges, kept whole between steps (zero_grads = whole)"
                    : t->run->zero == 2 && use
                        ? "; gradients reduce-scattered by the same ranges, kept whole between steps (its "
                          "largest bucket would cost more than the ranges save)"
                    : t->run->zero == 2 ? "; gradients whole on every rank (the deterministic tree)"
                                        : "",
                    !overlapped                  ? ""
                    : t->run->zero_overlap == 1 ? "; the parameters' all-gather overlapped with the next forward"
                                                : "; the parameters' all-gather overlapped with the next forward or "
                                                  "after the step, as measured over 24 steps (zero_overlap "
                                                  "= auto)");
    }
    return true;
}

/* After the optimizer stepped this rank's ranges: every rank's, gathered. */
void zero_sync_params(trainer *t)
{
    if (t->zero && !dpt_zero_sync_params_async(t->zero)) /* zero_overlap: on its thread, with the next forward */
        dpt_zero_sync_params(t->zero, "zero: the parameters after the step");
}

/* zero_overlap = auto: TUNE_STEPS steps alternating TUNE_VISIT at a time between the all-gather
 * overlapped with the next forward and after the step, then the faster for the rest of the run;
 * it starts once the reducer's automatic plans (bucket_mb, grad_compression = auto) are decided,
 * which measure with the all-gather overlapped (both switch every 3 steps: side by side, each
 * would measure the other's candidates as its own).
 * A period runs from one call to the next (this step's all-gather, then the next step's data,
 * forward, backward and update): all of it under the mode set at its start. The ranks add their
 * medians, so every rank takes the same decision at the same step. */
#define TUNE_VISIT 3
#define TUNE_STEPS 24

static bool tune_on(int call)
{
    return (call / TUNE_VISIT) % 2 == 0;
}

void zero_overlap_tune(trainer *t)
{
    if (!t->zero || t->run->zero_overlap != 0 || t->ztune.done) return;
    if (t->reducer->ops->measuring && t->reducer->ops->measuring(t->reducer)) return;
    double now = dpt_now_s();
    int c = t->ztune.calls++;
    if (c > 0) {
        double period = now - t->ztune.last;
        if (tune_on(c - 1)) t->ztune.on[t->ztune.non++] = period;
        else t->ztune.off[t->ztune.noff++] = period;
    }
    t->ztune.last = now;
    if (c < TUNE_STEPS) {
        dpt_zero_set_overlap(t->zero, tune_on(c));
        return;
    }
    t->ztune.done = true;
    double v[2] = {dpt_median(t->ztune.on, t->ztune.non), dpt_median(t->ztune.off, t->ztune.noff)};
    dpt_comm_allreduce_f64(t->host_comm, v, 2, "zero_overlap = auto: the measurements");
    bool on = v[0] < 0.99 * v[1];
    dpt_zero_set_overlap(t->zero, on);
    double n = (double)t->r->size;
    if (t->r->rank == 0)
        report_line("zero_overlap = auto: %.2f ms a step with the all-gather overlapped with the next forward, %.2f "
                    "after the step (medians of %d steps each, averaged over the ranks): %s from step %lld on\n",
                    1e3 * v[0] / n, 1e3 * v[1] / n, t->ztune.non, on ? "overlapped" : "after the step",
                    (long long)t->state.step + 1);
    dpt_metrics_write(t->metrics, "\"kind\":\"zero_tune\",\"step\":%lld,\"overlap\":%s,\"overlap_ms\":%.3f,"
                      "\"after_ms\":%.3f", (long long)t->state.step + 1, on ? "true" : "false", 1e3 * v[0] / n,
                      1e3 * v[1] / n);
}

/* The ranks that do not write a checkpoint: their parts of the state, in the writer's order. */
void zero_send_state(trainer *t)
{
    if (!t->zero) return;
    for (int i = 0; i < dpt_optim_num_state(t->optim); i++)
        dpt_optim_state_whole(t->optim, i, false);
}

static void sum_over_ranks(double *total, void *comm)
{
    dpt_comm_allreduce_f64(comm, total, 1, "zero: the gradients' squares");
}

double zero_clip(trainer *t, double inv_scale, double max_norm)
{
    if (!t->zero || t->run->zero != 2 || t->run->deterministic) /* every rank holds the whole sum */
        return dpt_unscale_clip_grad_norm(t->ctx, t->model, inv_scale, max_norm);
    return dpt_unscale_clip_grad_norm_ranges(t->ctx, t->model, dpt_zero_lo(t->zero), dpt_zero_hi(t->zero),
                                             zero_grad_shards(t), inv_scale, max_norm, sum_over_ranks, t->host_comm);
}

/* [checkpoint] best: dir/best.dpt, an epoch-end state (nothing mid-epoch to sum), rewritten
 * when an evaluation beats it; never pruned, never "latest" (not a ckpt-step name). */
void save_best_checkpoint(trainer *t, const dpt_train_state *state)
{
    replica *r = t->r;
    dpt_train_state at = *state;
    at.samples_done = at.batches_done * t->run->batch * r->size;
    char *path = dpt_strf("%s/best.dpt", t->run->ckpt_dir);
    if (!write_checkpoint(t, path, &at)) {
        free(path);
        return;
    }
    report_line("best so far: %s (epoch %d)\n", path, state->epoch - 1);
    free(path);
}

/* Written by the signal thread (or a handler), read by the ranks' and replicas' threads: atomics
 * (volatile sig_atomic_t orders nothing between threads; ThreadSanitizer, DataParallel's replicas
 * each setting the phase). */
static sig_atomic_t pending_signal;
static sigset_t stop_signals;

static void on_signal(int sig)
{
    __atomic_store_n(&pending_signal, sig, __ATOMIC_RELAXED);
}

static sig_atomic_t signal_phase; /* 0: start-up, 1: training */

void signals_training(void)
{
    __atomic_store_n(&signal_phase, 1, __ATOMIC_RELAXED);
}

static const char *signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
}

/* A thread, not a handler: it may print and exit. During start-up (a folder walk, loading,
 * building) there is nothing to save: the process ends at once, as a scheduler's SIGTERM
 * expects. In training the first signal stops the run after its step, with a checkpoint; a
 * second one (not the echo of the first: a Ctrl-C reaches both mpirun, which forwards it, and
 * the ranks in its process group) ends it at once without one, exit 128 + the signal. */
static void *signal_thread(void *arg)
{
    (void)arg;
    double first = 0;
    for (;;) {
        int sig;
        if (sigwait(&stop_signals, &sig) != 0) continue;
        char msg[160];
        if (!__atomic_load_n(&signal_phase, __ATOMIC_RELAXED)) {
            int n = snprintf(msg, sizeof msg, "\nreceived %s during start-up: stopping now (nothing to save yet)\n",
                             signal_name(sig));
            if (write(2, msg, (size_t)n) < 0) {}
            _exit(128 + sig);
        }
        if (!__atomic_load_n(&pending_signal, __ATOMIC_RELAXED)) {
            first = dpt_now_s();
            __atomic_store_n(&pending_signal, sig, __ATOMIC_RELAXED);
        } else if (dpt_now_s() - first > 0.25) {
            int n = snprintf(msg, sizeof msg, "\nreceived %s again: stopping now, without a checkpoint (exit %d)\n",
                             signal_name(sig), 128 + sig);
            if (write(2, msg, (size_t)n) < 0) {}
            _exit(128 + sig);
        }
    }
    return NULL;
}

/* SIGINT, SIGTERM and SIGUSR1 ask for a clean stop. They are taken by one thread of their own
 * and blocked in every other: this one, and the threads it starts from here on (the loaders',
 * OpenMP's, oneDNN's, the DDP reducer's, MPI's, CUDA's) inherit the mask. A handler must never
 * run on a compute thread: oneDNN's JIT f32 GEMM kernels (Debian's 2.6 and every release before 3.11.1;
 * oneDNN issue 4845) point rsp into a heap workspace, so a signal frame pushed there while one
 * runs corrupts the heap (seen here as 'corrupted size vs. prev_size' a few steps after a
 * SIGTERM, about one run in fifteen). The handler stays installed for a thread that existed
 * before this call and did not block them. */
void install_signal_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* SIGUSR1: the same stop. mpirun forwards it to every rank and lets the job end by itself
     * (exit 0), where Ctrl-C or SIGTERM to mpirun makes mpirun report the job as killed (exit 1
     * whatever the ranks return); a batch system can send it before a time limit (Slurm:
     * --signal=USR1@120). */
    sigaction(SIGUSR1, &sa, NULL);
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGUSR1);
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_sigmask(SIG_BLOCK, &stop_signals, NULL) != 0 ||
        pthread_create(&thread, &attr, signal_thread, NULL) != 0) {
        /* without the thread, leave them unblocked: the handler still stops the run */
        pthread_sigmask(SIG_UNBLOCK, &stop_signals, NULL);
    }
    pthread_attr_destroy(&attr);
}

/* A crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL) in a program's own model, mostly a NULL or freed
 * tensor, said as a report instead of a bare "Segmentation fault": the signal and address, the
 * rank and step, the last op the crashing thread's context recorded (its layer), a hint, the
 * call stack; then the signal again with its default action (the exit status, a core file and
 * mpirun's report stay what they were). Only async-signal-safe calls, no allocation
 * (backtrace() is called once at install so that its library is loaded then); a second fault
 * while reading the tape ends the process with the default action (SA_RESETHAND): never a
 * hang. Installed after MPI_Init, which would replace it with Open MPI's own. */
static __thread dpt_ctx *crash_ctx; /* the context this thread computes with */
static int crash_rank = -1;     /* atomics: DataParallel's replicas set them too */
static int64_t crash_step;

void crash_report_context(dpt_ctx *ctx, int rank)
{
    crash_ctx = ctx;
    if (ctx) __atomic_store_n(&crash_rank, rank, __ATOMIC_RELAXED);
}

void crash_report_step(int64_t step)
{
    __atomic_store_n(&crash_step, step, __ATOMIC_RELAXED);
}

static void say(const char *s)
{
    if (write(2, s, strlen(s)) < 0) {}
}

/* --junit: the report a crash leaves, rendered now (a handler may not allocate or use stdio),
 * written by the handler to a temporary of an unpredictable name beside it (O_EXCL|O_NOFOLLOW:
 * never through a planted link) and renamed into place. */
static char crash_junit_xml[4096], crash_junit_path[PATH_MAX], crash_junit_tmp[PATH_MAX];
static size_t crash_junit_len;

void crash_report_junit(const char *path, const char *suite)
{
    crash_junit_len = 0;
    size_t n = dpt_junit_crash_text(suite, crash_junit_xml, sizeof crash_junit_xml);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long salt = ((unsigned long long)getpid() << 32) ^ (unsigned long long)ts.tv_nsec ^
                              ((unsigned long long)ts.tv_sec << 20);
    int a = snprintf(crash_junit_path, sizeof crash_junit_path, "%s", path);
    int b = snprintf(crash_junit_tmp, sizeof crash_junit_tmp, "%s.crash-%016llx", path, salt);
    if (n && a > 0 && (size_t)a < sizeof crash_junit_path && b > 0 && (size_t)b < sizeof crash_junit_tmp)
        crash_junit_len = n;
}

static void crash_junit(void)
{
    if (!crash_junit_len) return;
    int fd = open(crash_junit_tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return;
    bool ok = write(fd, crash_junit_xml, crash_junit_len) == (ssize_t)crash_junit_len;
    ok = fsync(fd) == 0 && ok;
    close(fd);
    if (!ok || rename(crash_junit_tmp, crash_junit_path) != 0) unlink(crash_junit_tmp);
}

static void on_crash(int sig, siginfo_t *info, void *uc)
{
    (void)uc;
    const char *what = sig == SIGSEGV ? "SIGSEGV: a read or write of memory it may not touch"
                       : sig == SIGBUS ? "SIGBUS: a read or write of memory that is not there (a truncated "
                                         "mapped file?)"
                       : sig == SIGFPE ? "SIGFPE: an integer division by zero"
                                       : "SIGILL: an instruction this CPU lacks (a build for another CPU?)";
    char line[768];
    int rank = __atomic_load_n(&crash_rank, __ATOMIC_RELAXED);
    int64_t step = __atomic_load_n(&crash_step, __ATOMIC_RELAXED);
    int n = snprintf(line, sizeof line, "\ndptrain: crashed: %s, address %p", what, info ? info->si_addr : NULL);
    if (rank >= 0) n += snprintf(line + n, sizeof line - (size_t)n, ", rank %d", rank);
    if (step > 0)
        n += snprintf(line + n, sizeof line - (size_t)n, ", step %lld", (long long)step);
    else if (rank >= 0) /* the model's build, or its forward traced at batch 1 */
        n += snprintf(line + n, sizeof line - (size_t)n, ", before step 1");
    snprintf(line + n, sizeof line - (size_t)n, "\n");
    say(line);
    dpt_ctx *ctx = crash_ctx;
    if (ctx) {
        const dpt_tape *tape = &ctx->tape;
        const dpt_node *running = tape->running,
                       *last = tape->nnodes > 0 && tape->nodes ? &tape->nodes[tape->nnodes - 1] : NULL;
        const dpt_node *node = running ? running : last;
        char name[DPT_NAME_MAX + 1];
        const char *layer = node ? dpt_node_layer(node, name, sizeof name) : NULL;
        if (running)
            snprintf(line, sizeof line, "in the backward of op %s%s%s%s\n", node->op ? node->op : "?",
                     layer ? " (layer " : "", layer ? layer : "", layer ? ")" : "");
        else if (node)
            snprintf(line, sizeof line, "the tape holds %d op%s of this forward; the last recorded: %s%s%s%s\n",
                     tape->nnodes, tape->nnodes == 1 ? "" : "s", node->op ? node->op : "?", layer ? " (layer " : "",
                     layer ? layer : "", layer ? ")" : "");
        else
            snprintf(line, sizeof line, "no op recorded yet in this forward\n");
        say(line);
    }
    say("HINT: in a program's own model, a NULL or freed tensor is the usual cause: dpt_batch_get returns NULL "
        "for a field the data does not have, temporaries end at dpt_tape_clear, dpt_tensor_free'd tensors are "
        "gone. The calls below name the functions (a program linked with -rdynamic, as make print-libs says; "
        "addr2line -f -e PROGRAM +OFFSET gives a line); a build with SAN=-fsanitize=address names the line and "
        "the tensor's history\ncall stack:\n");
    void *frames[64];
    int depth = backtrace(frames, 64);
    backtrace_symbols_fd(frames, depth, 2);
    crash_junit();
    signal(sig, SIG_DFL);
    raise(sig);
}

void install_crash_report(void)
{
    static char alt[1 << 16]; /* the main thread's alternate stack: a stack overflow still reports */
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
    sigaltstack(&ss, NULL);
    void *warm[2];
    backtrace(warm, 2);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_crash;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}

/* A signal may reach the ranks at different steps: they agree (one tiny AllReduce per step)
 * so that all stop after the same step and the checkpoint is consistent. What they agree on
 * is how many ranks have each of the three, so every rank names the same one: the one most
 * ranks got (a tie: SIGINT, then SIGTERM, then SIGUSR1), even on a rank it has not reached
 * yet (rank 0, which says it, is often one of those when mpirun forwards it). */
bool signal_agreed(const replica *r, int *signal_seen)
{
    static const int kinds[3] = {SIGINT, SIGTERM, SIGUSR1};
    int mine = __atomic_load_n(&pending_signal, __ATOMIC_RELAXED), sig = mine;
    if (r->comm && r->size > 1) {
        double got[3];
        for (int k = 0; k < 3; k++)
            got[k] = mine == kinds[k];
        dpt_comm_allreduce_f64(r->comm, got, 3, "signal agreement (once per step)");
        sig = 0;
        for (int k = 0, most = 0; k < 3; k++)
            if (got[k] > most) most = (int)got[k], sig = kinds[k];
    }
    if (sig > 0 && r->rank == 0) {
        fprintf(stderr, "\nreceived %s: finishing this step and writing a checkpoint (a second one stops at once, "
                        "without it)\n",
                signal_name(sig));
    }
    *signal_seen = sig;
    return sig > 0;
}

dpt_timeline *open_timeline(const replica *r)
{
    const char *pattern = r->run->timeline;
    if (!*pattern) return NULL;
    char *path;
    const char *mark = strstr(pattern, "{rank}");
    if (mark)
        path = dpt_strf("%.*s%d%s", (int)(mark - pattern), pattern, r->rank, mark + 6);
    else if (r->size > 1) { /* before the extension, so a viewer still sees .json: trace.rank0.json */
        const char *slash = strrchr(pattern, '/'), *dot = strrchr(pattern, '.');
        if (dot && (!slash || dot > slash + 1))
            path = dpt_strf("%.*s.rank%d%s", (int)(dot - pattern), pattern, r->rank, dot);
        else
            path = dpt_strf("%s.rank%d", pattern, r->rank);
    } else
        path = dpt_strf("%s", pattern);
    dpt_error err;
    dpt_timeline *tl = dpt_timeline_open(path, r->rank, &err);
    free(path);
    if (!tl) dpt_abort_job("%s", err.msg);
    return tl;
}

/* A user-facing error. With other ranks or replica threads running, stop them too (they may
 * wait in a collective for this one): the job ends once, with this rank's message (MPI_Abort
 * under mpirun; the whole process under DataParallel). */
int fail(const replica *r, const dpt_error *err)
{
    if (r->size > 1 && !r->data_parallel) dpt_abort_job("rank %d of %d: %s", r->rank, r->size, err->msg);
    if (r->data_parallel) dpt_abort_job("%s", err->msg);
    fprintf(stderr, "error: %s\n", err->msg);
    report_note("error: %s\n", err->msg); /* for the JUnit report's system-out */
    return 1;
}
