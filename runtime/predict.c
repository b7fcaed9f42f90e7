/* predict.c: ./train CONFIG --predict CKPT [--out FILE] [--top-k K] [--input PATH]: the checkpoint's
 * model over the config's test set (--set data.* names another; --input samples without
 * labels, a folder's or an IDX file's images or a language model's tokens, the label column then
 * empty), in order, one CSV row a sample. A
 * classifier's row has the sample's index, its name where the data has one (a folder's
 * relative path), its label, and the K most likely classes with their softmax probabilities,
 * most likely first (a language model: the next token after the sequence, against the
 * sequence's last target); any other task's row has the target and the model's values (a
 * bce_with_logits task's as probabilities, p0..: each logit's sigmoid), named after the data's
 * target columns where it names them (a CSV's "price" and "predicted_price", "p_comedy"); the
 * targets' cells are empty for --input's samples. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt.h"
#include "error.h"
#include "predict.h"

/* A CSV field: the text as it is, or quoted (quotes doubled) when it holds a comma, a quote or
 * a line break. */
static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void class_field(FILE *f, const dpt_dataset *ds, int c)
{
    const char *name = dpt_dataset_class_name(ds, c);
    if (name)
        csv_field(f, name);
    else
        fprintf(f, "%d", c);
}

/* A header cell: prefix + the data's name for the value, or fallback + its index ("target0"). */
static void named_field(FILE *f, const char *prefix, const char *name, const char *fallback, int j)
{
    if (!name) {
        fprintf(f, "%s%d", fallback, j);
        return;
    }
    char *s = dpt_strf("%s%s", prefix, name);
    csv_field(f, s);
    free(s);
}

/* The k largest of p[0..n) (ties: the lower index first), into idx. */
static void top_k(const float *p, int n, int k, int *idx)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int c = 0; c < n; c++) {
            bool taken = false;
            for (int m = 0; m < j && !taken; m++)
                taken = idx[m] == c;
            if (!taken && (best < 0 || p[c] > p[best])) best = c;
        }
        idx[j] = best;
    }
}

bool dpt_predict_run(dpt_ctx *ctx, dpt_model *model, dpt_loader *loader, const dpt_predict_options *o, dpt_error *err)
{
    const dpt_dataset *ds = dpt_loader_dataset(loader);
    dpt_task task;
    if (!dpt_task_resolve(model, ds, &task, err)) return false;
    bool classifier = !strcmp(task.loss, "cross_entropy");
    bool probabilities = !strcmp(task.loss, "bce_with_logits"); /* each value's sigmoid, as the loss reads it */
    bool unlabelled = ds->unlabelled; /* --input */
    dpt_atomic_file af;
    if (!dpt_atomic_file_open(&af, o->out, err)) return false;
    FILE *f = af.f;
    bool was_recording = dpt_set_grad_enabled(ctx, false);
    dpt_model_set_training(model, false);
    int64_t index = 0, rows = 0;
    int k = 0, width = 0;
    float *host = NULL, *target = NULL;
    int32_t *labels = NULL;
    int *idx = NULL;
    bool ok = true;
    dpt_batch batch;
    dpt_loader_start_epoch(loader, 0);
    while (ok && dpt_loader_next(loader, &batch)) {
        dpt_tensor *out = dpt_model_forward_batch(model, ctx, &batch, &task);
        dpt_tensor *tgt = dpt_batch_get(&batch, task.target);
        int64_t B = batch.size, T = dpt_tensor_ndim(out) == 3 ? dpt_tensor_dim(out, 1) : 1;
        if (T > 1) /* a sequence model: its last position */
            out = dpt_reshape(ctx, dpt_contiguous(ctx, dpt_narrow(ctx, out, 1, T - 1, 1)), 2,
                              (int64_t[]){B, dpt_tensor_dim(out, -1)});
        int n = (int)(dpt_tensor_numel(out) / B);
        if (!host) { /* the first batch fixes the row's width and the header */
            width = n, k = classifier ? (o->top_k > 0 && o->top_k < n ? o->top_k : n) : 0;
            host = malloc((size_t)(dpt_tensor_numel(out) + 1) * sizeof *host);
            target = malloc((size_t)(dpt_tensor_numel(tgt) + 1) * sizeof *target);
            labels = malloc((size_t)(dpt_tensor_numel(tgt) + 1) * sizeof *labels);
            idx = malloc((size_t)(k + 1) * sizeof *idx);
            if (!host || !target || !labels || !idx) dpt_fatal("out of host memory for predictions");
            fputs(dpt_dataset_sample_name(ds, 0) ? "index,name" : "index", f);
            if (classifier) {
                fputs(",label", f);
                for (int j = 1; j <= k; j++)
                    fprintf(f, ",top%d,p%d", j, j);
            } else { /* named after the data's target columns where it names them (a CSV's) */
                int per = (int)(dpt_tensor_numel(tgt) / B);
                const char *const *names = per == n ? ds->target_names : NULL;
                for (int j = 0; j < per; j++) {
                    fputc(',', f);
                    named_field(f, "", names ? names[j] : NULL, "target", j);
                }
                for (int j = 0; j < n; j++) {
                    fputc(',', f);
                    named_field(f, probabilities ? "p_" : "predicted_", names ? names[j] : NULL,
                                probabilities ? "p" : "value", j);
                }
            }
            fputc('\n', f);
        }
        if (n != width) { /* a model whose output width changes between batches: not a row format */
            ok = dpt_errorf(err, "--predict: the model gave %d values a sample, then %d", width, n);
            break;
        }
        int64_t per = dpt_tensor_numel(tgt) / B; /* targets a sample (a sequence: T) */
        if (classifier) {
            dpt_tensor_copy_to_host(dpt_softmax(ctx, out), host);
            dpt_tensor_copy_to_host_i32(tgt, labels);
        } else {
            dpt_tensor_copy_to_host(probabilities ? dpt_unary(ctx, DPT_UNARY_SIGMOID, out) : out, host);
            dpt_tensor_copy_to_host(tgt, target);
        }
        for (int64_t b = 0; b < B; b++, index++) {
            fprintf(f, "%lld", (long long)index);
            const char *name = dpt_dataset_sample_name(ds, index);
            if (name) fputc(',', f), csv_field(f, name);
            if (classifier) {
                fputc(',', f);
                if (!unlabelled) class_field(f, ds, labels[b * per + per - 1]); /* --input: empty */
                top_k(host + b * n, n, k, idx);
                for (int j = 0; j < k; j++) {
                    fputc(',', f);
                    class_field(f, ds, idx[j]);
                    fprintf(f, ",%.6g", (double)host[b * n + idx[j]]);
                }
            } else {
                for (int64_t j = 0; j < per; j++) { /* --input: no targets, empty cells */
                    fputc(',', f);
                    if (!unlabelled) fprintf(f, "%.9g", (double)target[b * per + j]);
                }
                for (int j = 0; j < n; j++)
                    fprintf(f, ",%.9g", (double)host[b * n + j]);
            }
            fputc('\n', f);
            rows++;
        }
        dpt_tape_clear(ctx);
    }
    dpt_set_grad_enabled(ctx, was_recording);
    free(host), free(target), free(labels), free(idx);
    if (ok && ferror(f)) ok = dpt_errorf(err, "writing %s failed\nHINT: is the disk full?", af.tmp);
    if (!dpt_atomic_file_close(&af, ok, err)) return false;
    if (ok) printf("predicted %lld sample%s of %s into %s\n", (long long)rows, rows == 1 ? "" : "s", ds->name, o->out);
    return ok;
}
