/* train_report.c: what a run prints and logs: the header, the progress bar or lines, the log
 * window's line and metrics, the evaluation lines, the last line; and the run's results for
 * --expect. Lines go through report_line, which keeps the last ones for the JUnit report. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "train.h"
#include "profile.h"
#include "../data/folder.h"
#include "digest.h"
#include "error.h"
#include "reducer.h"

/* ---------------------------------------------------------------- the last lines */

enum { TAIL_LINES = 40, TAIL_LINE = 512 };
static char tail[TAIL_LINES][TAIL_LINE];
static int tail_next, tail_count;
static pthread_mutex_t tail_lock = PTHREAD_MUTEX_INITIALIZER;

static void keep_line(const char *line)
{
    pthread_mutex_lock(&tail_lock);
    snprintf(tail[tail_next], TAIL_LINE, "%s", line);
    tail_next = (tail_next + 1) % TAIL_LINES;
    if (tail_count < TAIL_LINES) tail_count++;
    pthread_mutex_unlock(&tail_lock);
}

static FILE *report_out; /* NULL: stdout */

void report_to(FILE *out)
{
    report_out = out;
}

static void keep_vline(bool print, const char *fmt, va_list ap)
{
    char line[TAIL_LINE];
    vsnprintf(line, sizeof line, fmt, ap);
    if (print) {
        FILE *out = report_out ? report_out : stdout;
        fputs(line, out);
        fflush(out);
    }
    keep_line(line);
}

void report_line(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    keep_vline(true, fmt, ap);
    va_end(ap);
}

void report_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    keep_vline(false, fmt, ap);
    va_end(ap);
}

const char *report_tail(void)
{
    static char all[TAIL_LINES * TAIL_LINE];
    size_t used = 0;
    pthread_mutex_lock(&tail_lock);
    for (int i = 0; i < tail_count; i++) {
        const char *l = tail[(tail_next - tail_count + i + TAIL_LINES) % TAIL_LINES];
        used += (size_t)snprintf(all + used, sizeof all - used, "%s", l);
    }
    pthread_mutex_unlock(&tail_lock);
    return all;
}

/* ---------------------------------------------------------------- what the task measures */

static bool has_acc(const trainer *t)
{
    return (t->task.metrics & DPT_METRIC_ACCURACY) != 0;
}

/* "images", "tokens", "samples": what the loss counts, by the task's unit */
static const char *unit_noun(const char *unit)
{
    return !strcmp(unit, "img") ? "images" : !strcmp(unit, "tok") ? "tokens" : unit;
}

/* What the lines print beside a loss, after sep: "acc 77.5%" (width for the progress line's
 * columns), "ppl 9.87", or nothing. */
static const char *metric_str(const trainer *t, const char *sep, double loss, double acc, int acc_width,
                              int acc_digits, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (has_acc(t))
        snprintf(buf, cap, "%sacc %*.*f%%", sep, acc_width, acc_digits, 100.0 * acc);
    else if (t->task.metrics & DPT_METRIC_PERPLEXITY)
        snprintf(buf, cap, "%sppl %.2f", sep, exp(loss));
    return buf;
}

/* --eval --per-class: scikit-learn's classification_report from the confusion counts (rows the
 * labels, columns the predictions): each class's precision (right / predicted as it), recall
 * (right / its samples), F1 and support, then their plain mean and their mean weighted by
 * support; a ratio with nothing under it is 0, as scikit-learn's (with its warning). */
void print_per_class(const trainer *t, const double *confusion, int classes)
{
    int width = 12;
    for (int c = 0; c < classes; c++) {
        const char *name = dpt_dataset_class_name(t->test_set, c);
        int len = name ? (int)strlen(name) : 0;
        if (len > width) width = len > 32 ? 32 : len;
    }
    report_line("per class | %-*s %9s %9s %9s %9s\n", width + 6, "class", "precision", "recall", "f1", "support");
    double macro[3] = {0}, weighted[3] = {0}, total = 0;
    for (int c = 0; c < classes; c++) {
        double right = confusion[(int64_t)c * classes + c], support = 0, predicted = 0;
        for (int k = 0; k < classes; k++)
            support += confusion[(int64_t)c * classes + k], predicted += confusion[(int64_t)k * classes + c];
        double p = predicted > 0 ? right / predicted : 0, r = support > 0 ? right / support : 0;
        double f1 = p + r > 0 ? 2 * p * r / (p + r) : 0, v[3] = {p, r, f1};
        for (int m = 0; m < 3; m++)
            macro[m] += v[m] / classes, weighted[m] += v[m] * support;
        total += support;
        char name[33] = "";
        const char *given = dpt_dataset_class_name(t->test_set, c);
        if (given) {
            snprintf(name, sizeof name, "%s", given);
            dpt_printable(name); /* the user's folder names: no control bytes on the terminal */
        }
        report_line("per class | %5d %-*s %9.4f %9.4f %9.4f %9.0f\n", c, width, name, p, r, f1, support);
    }
    for (int m = 0; m < 3; m++)
        weighted[m] = total > 0 ? weighted[m] / total : 0;
    report_line("per class | %-*s %9.4f %9.4f %9.4f %9.0f\n", width + 6, "macro avg", macro[0], macro[1], macro[2],
                total);
    report_line("per class | %-*s %9.4f %9.4f %9.4f %9.0f\n", width + 6, "weighted avg", weighted[0], weighted[1],
                weighted[2], total);
}

/* " top-5 97.12%" after an evaluation's accuracy where the task measures it, else "". */
static const char *top5_str(const dpt_eval_result *e, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (!isnan(e->top5)) snprintf(buf, cap, " top-5 %.2f%%", 100.0 * e->top5);
    return buf;
}

/* --eval: one line, with what the model's loss measures, and the result --expect reads. */
void print_eval(const trainer *t)
{
    char metric[48], top5[32];
    metric_str(t, " | ", t->test.loss, t->test.accuracy, 0, 2, metric, sizeof metric);
    report_line("eval | %s%s | test loss %.4f%s%s | %lld %s\n",
                *t->r->resumed ? t->r->resumed : t->r->args->eval, /* llmc:/hf: files are the model's init */
                t->r->args->ema ? " (weight averages)" : "", t->test.loss, metric, top5_str(&t->test, top5, sizeof top5),
                (long long)t->test.terms, unit_noun(t->task.unit));
}

/* ---------------------------------------------------------------- the header */

void print_header(const trainer *t)
{
    const replica *r = t->r;
    const run_config *run = t->run;
    const char *unit = r->data_parallel ? "replica" : "rank";
    report_line("dptrain %s | config %s (hash %016llx)\n", DPT_VERSION, run->config_path,
                (unsigned long long)run->hash);
    /* FLOPs as traced (what forward ran), else as the builders noted them */
    double flops = t->trace.flops > 0 ? t->trace.flops : dpt_model_flops(t->model);
    const char *summary = dpt_model_summary(t->model); /* a program's own model may have none */
    report_line("model %s%s%s | %lld parameters | %.1f MFLOP/sample forward\n", dpt_model_name(t->model),
                *summary ? " " : "", summary, (long long)dpt_model_param_count(t->model), flops / 1e6);
    char device[32];
    dpt_device_str(dpt_ctx_device(t->ctx), device, sizeof device);
    const char *kernels = dpt_ctx_backend_name(t->ctx);
    int threads = dpt_ctx_threads(t->ctx);
    /* the batch this run uses: training's, an evaluation's (--eval, --predict), or none (--sample,
     * --export read weights only) */
    char batch[96] = "";
    const cli *args = r->args;
    if (args->eval || args->predict)
        snprintf(batch, sizeof batch, " | evaluation batch %lld", (long long)run->eval_batch);
    else if (!args->sample && !args->export_format)
        snprintf(batch, sizeof batch, " | batch %lld per rank x %d accum (%lld global)", (long long)run->batch,
                 run->accum, (long long)(run->batch * r->size * run->accum));
    report_line("device %s%s | %d thread%s%s%s%s | %d %s%s%s\n", device,
                !strcmp(kernels, "cpu-onednn") ? " (oneDNN kernels)"
                : !strcmp(kernels, "cpu")      ? " (native kernels)"
                                               : "",
                threads, threads == 1 ? "" : "s", *t->threads_why ? " (" : "", t->threads_why,
                *t->threads_why ? ")" : "", r->size, unit, r->size > 1 ? "s" : "", batch);
    const char *why;
    dpt_precision prec = dpt_ctx_precision(t->ctx, &why);
    if (prec != DPT_PRECISION_FP32 || *why)
        report_line("precision %s%s%s%s\n",
                    prec == DPT_PRECISION_FP16
                        ? "fp16: convolutions on cuDNN and GEMMs on cuBLAS in fp16 (tensor cores, fp32 accumulation; "
                          "weight gradients come out of cuDNN in fp16), loss scaled; activations, batch norm, loss, "
                          "weights and optimizer fp32"
                    : prec != DPT_PRECISION_BF16 ? "fp32"
                    : dpt_ctx_device(t->ctx).kind == DPT_DEVICE_CUDA
                        ? "bf16: convolutions on cuDNN and GEMMs on cuBLAS in bf16 (tensor cores, fp32 accumulation; "
                          "weight gradients come out of cuDNN in bf16); activations, batch norm, loss, weights and "
                          "optimizer fp32"
                    : dpt_ctx_bf16_activations(t->ctx)
                        ? "bf16: convolutions and GEMMs read bf16 and accumulate in fp32; activations kept in bf16; "
                          "batch-norm statistics, loss, gradients, weights and optimizer fp32"
                        : "bf16: convolutions and GEMMs read bf16, accumulate and write fp32; activations, batch norm, "
                          "loss, weights and optimizer fp32",
                    *why ? " (bf16 asked for: " : "", why, *why ? ")" : "");
    if (dpt_ctx_channels_last(t->ctx))
        report_line("memory format nhwc: activations channels-last between convolutions, batch norm, pooling, relu "
                    "and adds%s\n",
                    dpt_ctx_device(t->ctx).kind == DPT_DEVICE_CUDA ? "; filters handed to cuDNN as (K, R, S, C)"
                                                                   : " (oneDNN's nhwc kernels)");
    if (t->reducer) {
        char how[256];
        t->reducer->ops->describe(t->reducer, how, sizeof how);
        if (!strcmp(t->reducer->ops->name, "ddp"))
            report_line("ddp %s | %s | loss and acc shown: %s\n",
                        r->data_parallel ? "(DataParallel, one process)" : "(one process per rank)", how,
                        run->all_ranks ? "each rank's own shard" : "averages over all ranks");
        else if (*how)
            report_line("%s\n", how);
    }
    char shape[256];
    const dpt_dataset *ds = t->train_set;
    if (!ds->nfields) {
        const dpt_dataset *te = t->test_set;
        char eval_at[48] = ""; /* [data] eval_image_size (FixRes) */
        if (!te->get && (te->h != ds->h || te->w != ds->w))
            snprintf(eval_at, sizeof eval_at, " (test %dx%dx%d)", (int)te->c, (int)te->h, (int)te->w);
        if (!strcmp(t->task.loss, "cross_entropy"))
            snprintf(shape, sizeof shape, "%dx%dx%d%s | %d classes", (int)ds->c, (int)ds->h, (int)ds->w, eval_at,
                     ds->num_classes);
        else /* a model's own task on images (an autoencoder's mse): the labels are not what it learns */
            snprintf(shape, sizeof shape, "%dx%dx%d | loss %s", (int)ds->c, (int)ds->h, (int)ds->w, t->task.loss);
    } else { /* the fields and the task: "x (16) | y (1) target | loss mse" */
        size_t used = 0;
        for (int f = 0; f < ds->nfields && used < sizeof shape; f++) {
            const dpt_field *fd = &ds->fields[f];
            used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%s (", f ? ", " : "", fd->name);
            for (int d = 0; d < fd->ndim && used < sizeof shape; d++)
                used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%lld", d ? "x" : "",
                                         (long long)fd->shape[d]);
            if (used < sizeof shape)
                used += (size_t)snprintf(shape + used, sizeof shape - used, ")%s%s", fd->dtype == DPT_I32 ? " int" : "",
                                         fd->target ? " target" : "");
        }
        if (used < sizeof shape && ds->num_classes)
            used += (size_t)snprintf(shape + used, sizeof shape - used,
                                     !strcmp(t->task.unit, "tok") ? " | vocabulary %d" : " | %d classes", ds->num_classes);
        if (used < sizeof shape) snprintf(shape + used, sizeof shape - used, " | loss %s", t->task.loss);
    }
    char test[64]; /* [data] test_limit: the evaluation reads the first test_limit of the set */
    int64_t tn = t->test_set->n_file ? t->test_set->n_file : t->test_set->n, tl = run->test_data.limit;
    if (tl > 0 && tl < tn)
        snprintf(test, sizeof test, "%lld of %lld", (long long)tl, (long long)tn);
    else
        snprintf(test, sizeof test, "%lld", (long long)tn);
    char steps[48] = ""; /* a run that does not train (--sample, --eval ...) has no training loader */
    if (t->train_loader) snprintf(steps, sizeof steps, " | %lld steps/epoch", (long long)t->steps_per_epoch);
    report_line("data %s | train %lld per rank of %lld | test %s | %s%s\n",
                ds->nfields ? ds->name : ds->origin && !ds->files ? ds->origin : run->data_dir,
                (long long)(t->train_loader ? dpt_loader_num_samples(t->train_loader) : ds->n),
                (long long)(ds->n_file ? ds->n_file : ds->n), test, shape, steps);
    const dpt_mix_options *mix = &run->mix;
    int policy = run->train_data.auto_augment;
    if (t->train_loader && (run->train_data.crop_pad || run->train_data.hflip || policy || t->erase || t->mix_labels ||
                            run->train_data.repeats > 1)) {
        char aug[320] = "";
        size_t used = 0;
        if (run->train_data.crop_pad)
            used += (size_t)snprintf(aug + used, sizeof aug - used, " | random crop (pad %d)", run->train_data.crop_pad);
        if (run->train_data.hflip) used += (size_t)snprintf(aug + used, sizeof aug - used, " | hflip");
        if (policy == 1) used += (size_t)snprintf(aug + used, sizeof aug - used, " | TrivialAugmentWide");
        if (policy == 2)
            used += (size_t)snprintf(aug + used, sizeof aug - used, " | RandAugment (%d ops, magnitude %d of 30)",
                                     run->train_data.aa_ops, run->train_data.aa_magnitude);
        if (run->train_data.repeats > 1)
            used += (size_t)snprintf(aug + used, sizeof aug - used, " | repeated augmentation x%d",
                                     run->train_data.repeats);
        if (t->erase)
            used += (size_t)snprintf(aug + used, sizeof aug - used, " | random erasing %g (area %g-%g, ratio %g-%g)",
                                     run->erase.prob, run->erase.scale[0], run->erase.scale[1], run->erase.ratio[0],
                                     run->erase.ratio[1]);
        if (t->mix_labels && mix->mixup_alpha > 0)
            used += (size_t)snprintf(aug + used, sizeof aug - used, " | mixup alpha %g", mix->mixup_alpha);
        if (t->mix_labels && mix->cutmix_alpha > 0)
            used += (size_t)snprintf(aug + used, sizeof aug - used, " | cutmix alpha %g", mix->cutmix_alpha);
        if (t->mix_labels && used < sizeof aug) {
            bool both = mix->mixup_alpha > 0 && mix->cutmix_alpha > 0;
            char which[64] = "";
            if (both) snprintf(which, sizeof which, ", %g of those by cutmix", mix->switch_prob);
            snprintf(aug + used, sizeof aug - used, " (%g of the batches mixed%s)", mix->prob, which);
        }
        report_line("augment%s\n", aug);
    }
    if (!t->train_set->files && t->task.metrics & DPT_METRIC_ACCURACY) { /* a classifier's classes, counted */
        char text[1024];
        dpt_dataset_describe_classes(t->train_set, text, sizeof text);
        if (*text) report_line("%s\n", text);
    }
    if (t->train_set->files) {
        char text[1024];
        dpt_folder_describe(t->train_set, text, sizeof text);
        report_line("%s\n", text);
        report_line("images | train: %s | val: %s | %d decoding workers per loader | a bad file %s\n",
                    t->train_set->files->list_note, t->test_set->files->list_note, t->workers,
                    run->train_data.skip_bad_files ? "is skipped and counted" : "stops the job");
    }
    if (t->optim) /* none where only the weights are read (--sample, --eval, --predict, --export) */
        report_line("optim %s | lr %g (%s scaling) | schedule %s\n", dpt_optim_name(t->optim), t->schedule.target_lr,
                    run->lr_scaling, run->schedule);
    if (t->optim && (*dpt_config_str(run->ini, "optim", "groups") || *dpt_config_str(run->ini, "optim", "freeze"))) {
        char groups[2048];
        dpt_optim_describe(t->optim, groups, sizeof groups);
        report_line("optim groups | %s\n", groups);
    }
    char total[32], p[32], a[32];
    mib(total, sizeof total, t->need.total);
    mib(p, sizeof p, t->need.params);
    mib(a, sizeof a, t->need.activations);
    report_line("memory ~%s per %s estimated (parameters and optimizer %s, activations %s)\n", total, unit, p, a);
}

/* ---------------------------------------------------------------- windows and progress */

/* The window's loss and correct sums from the device meter (one read). Skipped steps were
 * never added, so they do not poison the averages. */
void meter_read(dpt_tensor *meter, int slot, window *w)
{
    float v[METER_SLOTS];
    dpt_tensor_copy_to_host(meter, v);
    w->loss = v[slot], w->correct = (int64_t)llround(v[slot + 1]);
}

progress progress_new(const replica *r, int64_t total_steps)
{
    const char *mode = r->run->progress;
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

/* The bar after step s of the epoch (at most 10 draws a second; rank 0's own window). */
void progress_step(progress *p, const trainer *t, int64_t s)
{
    const dpt_train_state *st = &t->state;
    if (p->first_step < 0) p->first_step = st->step - 1, p->start = dpt_now_s();
    if (!p->bar) return;
    double now = dpt_now_s();
    if (now - p->last_draw < 0.1 && s < t->steps_per_epoch) return;
    p->last_draw = now;
    window w = t->win; /* the bar reads the device meter at most 10 times a second */
    meter_read(t->meter, METER_WINDOW, &w);
    double per_step = (now - p->start) / (double)(st->step - p->first_step);
    int eta = (int)(per_step * (double)(p->total_steps - st->step));
    char bar[31];
    int fill = (int)(30 * s / t->steps_per_epoch);
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[30] = '\0';
    double loss = w.units ? w.loss / (double)w.units : 0.0;
    char metric[48];
    metric_str(t, " | ", loss, w.units ? (double)w.correct / (double)w.units : 0.0, 5, 1, metric, sizeof metric);
    printf("\repoch %d [%s] %3d%% %lld/%lld | loss %.4f%s | lr %.3g | ETA %d:%02d:%02d \033[K", st->epoch, bar,
           (int)(100 * s / t->steps_per_epoch), (long long)s, (long long)t->steps_per_epoch, loss, metric,
           (double)dpt_optim_lr(t->optim), eta / 3600, eta / 60 % 60, eta % 60);
    fflush(stdout);
}

void progress_end_epoch(progress *p)
{
    if (p->bar) printf("\n");
}

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

/* The bus bandwidth of the window's collectives: what a ring AllReduce sends per rank
 * (2(N-1)/N of the payload) over their time, in Gbit/s; on one link of rate R it is at most R. */
static double comm_gbit_s(const window *w)
{
    return w->comm_s > 0 ? w->bus_bytes * 8.0 / w->comm_s / 1e9 : 0.0;
}

/* ,"bucket_ms":[...]: each bucket's AllReduce, averaged over the window's steps, in bucket order
 * (the first is launched first); "" where the collectives run on a device stream. Past what
 * the buffer holds, the rest are left out rather than cut mid-number. */
static const char *bucket_json(const trainer *t, int64_t steps, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (!t->win_nbuckets) return buf;
    size_t n = (size_t)snprintf(buf, cap, ",\"bucket_ms\":[");
    for (int b = 0; b < t->win_nbuckets; b++) {
        char one[32];
        int k = snprintf(one, sizeof one, "%s%.3f", b ? "," : "", 1e3 * t->win_bucket_s[b] / (double)steps);
        if (n + (size_t)k + 2 >= cap) break;
        memcpy(buf + n, one, (size_t)k + 1);
        n += (size_t)k;
    }
    memcpy(buf + n, "]", 2);
    return buf;
}

/* The kernel ids of the threads that compute the steps: this one and the OpenMP team its ops
 * run on (libgomp keeps a team's threads from one region to the next). The loaders' and the
 * communication thread's waits are not the step's. */
static void find_compute_threads(trainer *t)
{
    int n = dpt_ctx_threads(t->ctx) > 0 ? dpt_ctx_threads(t->ctx) : 1;
    t->compute_tids = calloc((size_t)n, sizeof *t->compute_tids);
    if (!t->compute_tids) dpt_fatal("out of host memory");
    t->ncompute = n;
#ifdef _OPENMP
#pragma omp parallel num_threads(n)
    {
        int k = omp_get_thread_num();
        if (k < n) t->compute_tids[k] = (int)syscall(SYS_gettid);
    }
#else
    t->compute_tids[0] = (int)syscall(SYS_gettid);
#endif
}

/* The time the compute threads have spent runnable but waiting for a core (the kernel's
 * schedstat run delay, summed), seconds; -1 where the kernel does not say. */
static double compute_run_delay_s(const trainer *t)
{
    double total = 0;
    bool any = false;
    for (int i = 0; i < t->ncompute; i++) {
        if (!t->compute_tids[i]) continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", t->compute_tids[i]);
        FILE *f = fopen(path, "r");
        unsigned long long run, wait;
        if (f && fscanf(f, "%llu %llu", &run, &wait) == 2) total += (double)wait * 1e-9, any = true;
        if (f) fclose(f);
    }
    return any ? total : -1;
}

window window_open(trainer *t)
{
    if (!t->compute_tids && dpt_ctx_device(t->ctx).kind == DPT_DEVICE_CPU) find_compute_threads(t);
    return (window){.start = dpt_now_s(), .syncs_at_start = dpt_ctx_host_syncs(t->ctx),
                    .run_delay_s = t->compute_tids ? compute_run_delay_s(t) : -1};
}

/* The share of the window this process's compute threads spent runnable but without a core
 * (another process on them, or more threads than cores), -1 where the kernel does not say. A
 * thread of an OpenMP team that is descheduled holds up every barrier of every op: with 2
 * threads beside one busy process on 2 cores the CNN's step ran 2x slower than with 1
 * (bench/contention.py). */
static double core_wait(const trainer *t, const window *w, double now)
{
    if (w->run_delay_s < 0 || now <= w->start) return -1;
    double delay = compute_run_delay_s(t);
    if (delay < 0) return -1;
    double waited = delay - w->run_delay_s; /* (a thread that ended took its share with it) */
    return (waited > 0 ? waited : 0) / ((now - w->start) * t->ncompute);
}

/* [train] adapt_threads, once a log window (x its units/s, wait its compute threads' share of
 * waiting for a core): a window after a change is its warm-up (new plans), the next one judges
 * it against the window before the change, 3% faster to keep it. Fewer threads are tried when
 * they waited 20% or more of two windows in a row (as many as the cores they had in the last:
 * count x (1 - wait), rounded); with fewer than asked, all of them again every 10 windows (the
 * other process may have ended). */
static void adapt_threads(trainer *t, double x, double wait)
{
    int cur = dpt_ctx_threads(t->ctx), to = cur;
    bool print = t->r->print && !t->bar.bar;
    char who[32] = "";
    if (t->r->rank) snprintf(who, sizeof who, "[rank %d] ", t->r->rank);
    t->adapt.since++;
    t->adapt.high = wait >= 0.2 ? t->adapt.high + 1 : 0;
    if (t->adapt.settle > 0) {
        t->adapt.settle--;
        return;
    }
    if (t->adapt.from) { /* the trial's verdict */
        bool keep = x >= 1.03 * t->adapt.before;
        if (print)
            report_line("%sthreads %d %s: %.0f %s/s against %.0f with %d\n", who, cur, keep ? "kept" : "given up",
                        x, t->task.unit, t->adapt.before, t->adapt.from);
        if (!keep) to = t->adapt.from, t->adapt.hold = 20;
        t->adapt.from = 0, t->adapt.since = 0;
    } else if (t->adapt.hold > 0) {
        t->adapt.hold--;
        return;
    } else if (t->adapt.high >= 2 && cur > 1) { /* two windows in a row: not a passing spike */
        to = (int)floor(cur * (1.0 - wait) + 0.5);
        to = to >= cur ? cur - 1 : to < 1 ? 1 : to;
        if (print)
            report_line("%sthreads %d -> %d: they waited for a core %.0f%% of the last window (another process on "
                        "the cores)\n", who, cur, to, 100.0 * wait);
        t->adapt.from = cur, t->adapt.before = x;
    } else if (cur < t->adapt.base && t->adapt.since >= 10) {
        to = t->adapt.base;
        if (print) report_line("%sthreads %d -> %d: trying all of them again\n", who, cur, to);
        t->adapt.from = cur, t->adapt.before = x;
    }
    if (to == cur) return;
    dpt_ctx_set_threads(t->ctx, to);
    free(t->compute_tids); /* the next window finds the new team's threads */
    t->compute_tids = NULL, t->ncompute = 0;
    t->adapt.settle = 1;
}

/* The log window's line (step s of the epoch) and metrics record; then a new window. Under
 * DDP the loss and accuracy are the averages over all ranks (one small AllReduce per line),
 * unless every rank prints its own ([log] all_ranks). */
void log_window(trainer *t, int64_t s)
{
    const replica *r = t->r;
    window *w = &t->win;
    int64_t window_syncs = dpt_ctx_host_syncs(t->ctx) - w->syncs_at_start; /* before this read */
    meter_read(t->meter, METER_WINDOW, w);
    double sums[3] = {w->loss, (double)w->correct, (double)w->units};
    if (r->comm && r->size > 1 && !t->run->all_ranks) dpt_comm_allreduce_f64(r->comm, sums, 3, "progress line sums");
    double now = dpt_now_s();
    int64_t steps = w->steps > 0 ? w->steps : 1;
    double img_s = (double)w->units * r->size / (now - w->start); /* in the task's unit */
    double cores = core_wait(t, w, now);
    if (cores >= 0.2 && dpt_ctx_threads(t->ctx) > 1 && !t->warned_cores && r->rank == 0 && !t->adapt.base &&
        dpt_ctx_device(t->ctx).kind == DPT_DEVICE_CPU) {
        t->warned_cores = true;
        fprintf(stderr,
                "warning: this run's threads waited for a core %.0f%% of the last %.1f s (another process on its "
                "cores, or more threads than cores): each of the %d threads an op splits into holds the op up "
                "while it is descheduled (beside one busy process on 2 cores, 2 threads ran the CNN 2x slower "
                "than 1)\nHINT: while the cores are shared, set [train] threads to those left free (e.g. --set "
                "train.threads=%d)\n",
                100.0 * cores, now - w->start, dpt_ctx_threads(t->ctx), dpt_ctx_threads(t->ctx) / 2);
    }
    double loss = sums[2] ? sums[0] / sums[2] : NAN;
    double acc = sums[2] ? sums[1] / sums[2] : NAN;
    double lr = (double)dpt_optim_lr(t->optim);
    /* the rank's GPU as nvidia-smi would show it ([log] gpu_stats; NVML loaded at run time) */
    dpt_gpu_stats gs = {0};
    char gpu[112] = "";
    if (dpt_ctx_device(t->ctx).kind == DPT_DEVICE_CUDA && t->run->gpu_stats) {
        char pci[32], text[96];
        dpt_cuda_pci_bus_id(dpt_ctx_device(t->ctx).index, pci, sizeof pci);
        if (dpt_gpu_stats_read(dpt_ctx_device(t->ctx).index, pci, &gs))
            snprintf(gpu, sizeof gpu, " | gpu %s", dpt_gpu_stats_str(&gs, text, sizeof text));
    }
    if (r->print && !t->bar.bar) {
        char who[32] = "", comm[96] = "";
        if (r->rank) snprintf(who, sizeof who, "[rank %d] ", r->rank);
        if (r->comm) /* the payload, its collectives' time, their bus bandwidth (nccl-tests' busbw) */
            snprintf(comm, sizeof comm, " | comm %.1f MiB %.2f ms/step %.2f Gbit/s (%.0f%% hidden)",
                     w->comm_bytes / 1048576.0 / (double)steps, 1e3 * w->comm_s / (double)steps,
                     comm_gbit_s(w), w->comm_s > 0 ? 100.0 * w->hidden_s / w->comm_s : 0.0);
        /* the input pipeline falling behind: the share of the window spent waiting for batches */
        char data[96] = "";
        double wait = w->data_s / (now - w->start);
        if (wait >= 0.05) snprintf(data, sizeof data, " | waiting on data %.0f%%", 100.0 * wait);
        if (cores >= 0.10)
            snprintf(data + strlen(data), sizeof data - strlen(data), " | waiting for cores %.0f%%", 100.0 * cores);
        if (t->run->loss_scale) /* the scale the next step multiplies the loss by */
            snprintf(data + strlen(data), sizeof data - strlen(data), " | scale %g", t->state.loss_scale);
        char metric[48];
        metric_str(t, " | ", loss, acc, 5, 1, metric, sizeof metric);
        report_line("%sepoch %d | step %6lld/%lld | loss %.4f%s | %8.0f %s/s%s%s%s\n", who, t->state.epoch,
                    (long long)s, (long long)t->steps_per_epoch, loss, metric, img_s, t->task.unit, comm, data, gpu);
    }
    dpt_mem_stats mem = dpt_ctx_mem_stats(t->ctx);
    char json[160], scale[256] = "", buckets[1024];
    if (t->run->loss_scale)
        snprintf(scale, sizeof scale, ",\"loss_scale\":%.9g,\"scale_skips\":%lld", t->state.loss_scale,
                 (long long)t->state.scale_skips);
    if (cores >= 0) /* waiting for a core: another process on them; the threads the window ran with */
        snprintf(scale + strlen(scale), sizeof scale - strlen(scale), ",\"core_wait\":%.4f,\"threads\":%d", cores,
                 dpt_ctx_threads(t->ctx));
    if (t->zero) /* the all-gather after the step, which no comm_ms counts: what the rank waited for it
                  * (zero_overlap: the forwards' waits) and its own time (on its thread; 0 when not) */
        snprintf(scale + strlen(scale), sizeof scale - strlen(scale),
                 ",\"zero_gather_ms\":%.3f,\"zero_gather_busy_ms\":%.3f", 1e3 * w->gather_s / (double)steps,
                 1e3 * w->gather_busy_s / (double)steps);
    dpt_metrics_write(t->metrics,
                      "\"kind\":\"train\",\"epoch\":%d,\"step\":%lld,\"lr\":%g,\"loss\":%.6f,\"acc\":%.6f,\"unit\":\"%s\","
                      "\"img_s\":%.1f,\"step_ms\":%.3f,\"comm_ms\":%.3f,\"comm_hidden\":%.4f,"
                      "\"grad_norm\":%.6g,\"mem_peak_mb\":%.1f,\"optim_state_mb\":%.4f,\"grad_mb\":%.4f,\"ranks\":%d,"
                      "\"global_batch\":%lld,"
                      "\"host_syncs_per_step\":%.2f,\"comm_mb_per_step\":%.4f,\"comm_exposed_ms\":%.3f,"
                      "\"comm_gbit_s\":%.4f%s,\"data_wait_ms\":%.3f%s%s",
                      t->state.epoch, (long long)t->state.step, lr, loss, has_acc(t) ? acc : 0.0, t->task.unit, img_s,
                      1e3 * (now - w->start) / (double)steps, 1e3 * w->comm_s / (double)steps,
                      w->comm_s > 0 ? w->hidden_s / w->comm_s : 0.0, t->grad_norm,
                      (double)mem.peak_allocated / 1048576.0, (double)dpt_optim_state_bytes(t->optim) / 1048576.0,
                      (w->grad_bytes > 0 ? w->grad_bytes : (double)dpt_model_param_count(t->model) * sizeof(float)) /
                          1048576.0,
                      r->size,
                      (long long)(t->run->batch * r->size * t->run->accum), (double)window_syncs / (double)steps,
                      w->comm_bytes / 1048576.0 / (double)steps, 1e3 * w->exposed_s / (double)steps,
                      comm_gbit_s(w), bucket_json(t, steps, buckets, sizeof buckets), 1e3 * w->data_s / (double)steps, scale,
                      gpu_json(&gs, json, sizeof json));
    dpt_tensor_fill_slice(t->ctx, t->meter, METER_WINDOW, 2, 0.0f);
    if (t->adapt.base) adapt_threads(t, img_s, cores);
    *w = window_open(t);
    for (int b = 0; b < t->win_nbuckets; b++)
        t->win_bucket_s[b] = 0.0;
}

/* After an evaluation (t->test): the epoch line (epoch_window != NULL, with the epoch's
 * training loss and accuracy over all ranks) or a mid-epoch one. */
void log_eval(trainer *t, const window *epoch_window)
{
    const replica *r = t->r;
    const dpt_eval_result *test = &t->test;
    /* the image files skipped as unreadable so far, every rank's (bad_files = skip) */
    double sums[4] = {0, 0, 0,
                      (double)((t->train_loader ? dpt_loader_bad_files(t->train_loader) : 0) + dpt_loader_bad_files(t->test_loader))};
    if (epoch_window) {
        sums[0] = epoch_window->loss, sums[1] = (double)epoch_window->correct,
        sums[2] = (double)epoch_window->units;
    }
    if (r->comm) dpt_comm_allreduce_f64(r->comm, sums, 4, "epoch training sums");
    char bad[64] = "";
    if (sums[3] > 0) snprintf(bad, sizeof bad, " | %.0f bad file%s skipped", sums[3], sums[3] == 1 ? "" : "s");
    double train_loss = sums[2] ? sums[0] / sums[2] : NAN, train_acc = sums[2] ? sums[1] / sums[2] : NAN;
    if (epoch_window) t->r->result.final_train_loss = train_loss;
    t->r->result.final_test_loss = test->loss, t->r->result.final_test_acc = test->accuracy;
    t->r->result.final_test_top5 = test->top5;
    if (r->rank == 0) {
        char train_metric[48], test_metric[80], top5[32];
        metric_str(t, " ", train_loss, train_acc, 0, 1, train_metric, sizeof train_metric);
        metric_str(t, " ", test->loss, test->accuracy, 0, 2, test_metric, sizeof test_metric);
        strncat(test_metric, top5_str(test, top5, sizeof top5), sizeof test_metric - strlen(test_metric) - 1);
        char ema[128] = ""; /* [train] ema_decay: the weight averages' evaluation */
        if (dpt_model_ema(t->model)) {
            char ema_metric[48];
            metric_str(t, " ", t->test_ema.loss, t->test_ema.accuracy, 0, 2, ema_metric, sizeof ema_metric);
            snprintf(ema, sizeof ema, " | ema test loss %.4f%s%s", t->test_ema.loss, ema_metric,
                     top5_str(&t->test_ema, top5, sizeof top5));
        }
        if (epoch_window)
            report_line("epoch %d done | %.1f s | train loss %.4f%s | test loss %.4f%s (%lld %s)%s%s\n", t->state.epoch,
                        dpt_now_s() - epoch_window->start, train_loss, train_metric, test->loss, test_metric,
                        (long long)test->terms, unit_noun(t->task.unit), ema, bad);
        else
            report_line("eval at step %lld | test loss %.4f%s (%lld %s)%s%s\n", (long long)t->state.step, test->loss,
                        test_metric, (long long)test->terms, unit_noun(t->task.unit), ema, bad);
    }
    char ema_json[160] = "";
    size_t at = 0;
    if (!isnan(test->top5)) at += (size_t)snprintf(ema_json, sizeof ema_json, ",\"test_top5\":%.6f", test->top5);
    if (dpt_model_ema(t->model))
        at += (size_t)snprintf(ema_json + at, sizeof ema_json - at, ",\"ema_test_loss\":%.6f,\"ema_test_acc\":%.6f",
                               t->test_ema.loss, has_acc(t) ? t->test_ema.accuracy : 0.0);
    if (dpt_model_ema(t->model) && !isnan(t->test_ema.top5) && at < sizeof ema_json)
        snprintf(ema_json + at, sizeof ema_json - at, ",\"ema_test_top5\":%.6f", t->test_ema.top5);
    dpt_metrics_write(t->metrics,
                      "\"kind\":\"eval\",\"epoch\":%d,\"step\":%lld,\"test_loss\":%.6f,\"test_acc\":%.6f,"
                      "\"train_loss\":%.6f,\"train_acc\":%.6f,\"bad_files\":%.0f%s",
                      t->state.epoch, (long long)t->state.step, test->loss, has_acc(t) ? test->accuracy : 0.0,
                      train_loss, has_acc(t) ? train_acc : 0.0, sums[3], ema_json);
}

/* The run's last line (or, stopped by a signal, the command that resumes it), and its
 * results for --expect: img/s over the training time, evaluation excluded, all ranks. */
void print_final(trainer *t)
{
    replica *r = t->r;
    const dpt_train_state *st = &t->state;
    double seconds = dpt_now_s() - t->run_start;
    double train_s = seconds - t->eval_s;
    r->result.seconds = seconds;
    r->result.best_test_acc = has_acc(t) && st->best_acc >= 0 ? st->best_acc : NAN;
    r->result.img_s = train_s > 0 && t->units_trained > 0 ? (double)t->units_trained * r->size / train_s : NAN;
    /* every rank of an mpirun job checks its expectations (the exit codes agree); of
     * DataParallel's replicas, the first reports for the process */
    const char *why = NULL;
    bool hashed = (r->rank == 0 || !r->data_parallel) && dpt_model_weights_sha256(t->model, r->result.weights_sha256, &why);
    if (r->rank != 0) return;
    if (t->signal_seen) {
        printf("stopped by signal %d after step %lld; ", t->signal_seen, (long long)st->step);
        print_resume_command(r, r->last_ckpt);
        return;
    }
    /* stopped mid-epoch (max_steps): the epochs done as a fraction */
    char epochs[32];
    if (st->batches_done > 0)
        snprintf(epochs, sizeof epochs, "%.2f", st->epoch - 1 + (double)st->batches_done /
                                                                  (double)(t->steps_per_epoch * t->run->accum));
    else
        snprintf(epochs, sizeof epochs, "%d", st->epoch - 1);
    char peak[32]; /* the allocator's high-water mark on this rank: weights, state, activations, gradients */
    mib(peak, sizeof peak, (double)dpt_ctx_mem_stats(t->ctx).peak_allocated);
    char best[128], top5[32];
    if (has_acc(t))
        snprintf(best, sizeof best, "best test acc %.2f%% (epoch %d) | final test acc %.2f%%%s", 100.0 * st->best_acc,
                 st->best_epoch, 100.0 * t->test.accuracy, top5_str(&t->test, top5, sizeof top5));
    else
        snprintf(best, sizeof best, "best test loss %.4f (epoch %d) | final test loss %.4f", st->best_loss,
                 st->best_epoch, t->test.loss);
    report_line("done | %s epochs | %lld steps%s | %.1f s%s | %s | peak memory %s\n", epochs, (long long)st->step,
                st->skipped ? " (some skipped)" : "", seconds, *r->resumed ? " since the resume" : "", best, peak);
    if (t->profile) {
        fflush(stdout);
        dpt_profile_print(t->profile, stdout, 15, dpt_now_s() - t->profile_start - (t->eval_s - t->profile_eval_s),
                          t->profile_steps);
    }
    if (hashed)
        report_line("weights sha256 %s\n", r->result.weights_sha256);
    else
        report_line("weights sha256 unavailable: %s\n", why);
}

/* ---------------------------------------------------------------- shared by the reports */

void mib(char *buf, size_t cap, double bytes)
{
    if (bytes >= 1073741824.0)
        snprintf(buf, cap, "%.1f GiB", bytes / 1073741824.0);
    else
        snprintf(buf, cap, "%.0f MiB", bytes / 1048576.0);
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
void print_resume_command(const replica *r, const char *path)
{
    if (!*path) {
        printf("no checkpoint was written\n");
        return;
    }
    bool mpi = r->size > 1 && !r->data_parallel;
    const cli *a = r->args;
    /* Under mpirun, rank 0's parent on the launching node is mpirun itself: its command line
     * up to this program gives the launcher's options exactly (--oversubscribe, --hostfile,
     * --bind-to, ...). Elsewhere (an orted parent, MPMD ':' segments) say what is missing. */
    char launcher[4096];
    size_t llen = 0;
    bool exact = false;
    if (mpi) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/%d/cmdline", (int)getppid());
        FILE *f = fopen(proc, "rb");
        if (f) {
            llen = fread(launcher, 1, sizeof launcher - 1, f);
            bool whole = feof(f);
            fclose(f);
            launcher[llen] = '\0';
            const char *base = strrchr(launcher, '/') ? strrchr(launcher, '/') + 1 : launcher;
            bool is_mpirun = !strcmp(base, "mpirun") || !strcmp(base, "mpiexec") || !strcmp(base, "orterun") ||
                             !strcmp(base, "prterun");
            size_t prefix = 0;
            bool colon = false;
            for (size_t at = 0; whole && is_mpirun && at < llen; at += strlen(launcher + at) + 1) {
                if (!strcmp(launcher + at, ":")) colon = true;
                if (!prefix && at && !strcmp(launcher + at, a->argv[0])) prefix = at;
            }
            exact = whole && is_mpirun && prefix && !colon;
            llen = exact ? prefix : 0;
        }
    }
    printf("resume with: ");
    if (exact)
        for (size_t at = 0; at < llen; at += strlen(launcher + at) + 1) {
            shell_word(stdout, launcher + at);
            putchar(' ');
        }
    else if (mpi)
        printf("mpirun -np %d ", r->size);
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
    if (mpi && !exact) printf("(with the other mpirun options this job was started with, e.g. --hostfile)\n");
    fflush(stdout);
}
