/* model.c: a model is a named list of parameters and buffers plus a forward function. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ctx.h"
#include "error.h"
#include "registry.h"

struct dpt_model {
    dpt_ctx *ctx;
    char name[64];
    char summary[256];
    dpt_forward_fn forward;
    dpt_batch_forward_fn batch_forward;
    dpt_decoder decoder; /* decode NULL: none */
    void (*destroy)(dpt_model *model, void *state); /* dpt_model_set_destructor; NULL: none */
    dpt_rename_fn rename; /* dpt_model_set_renamer; NULL: none */
    dpt_adapt_fn adapt;   /* dpt_model_set_adapter; NULL: none */
    dpt_task task; /* what the model declared (zero: the data's) */
    void *state;
    bool training;
    char error[1024]; /* first build error, "" when none */
    char *notes;      /* the summary table, one line per layer */
    size_t notes_len, notes_cap;
    double flops;
    double activation_floats; /* per sample: the noted layers' outputs, summed */
    double largest_output;    /* per sample: the largest noted layer output */
    struct noted {
        char kind[24];
        double floats;
    } *noted; /* each note's kind and output floats per sample (the memory estimate's parts) */
    int nnoted, cap_noted;
    dpt_tensor **params;      /* creation order; DDP buckets walk it in reverse */
    int nparams, cap_params;
    dpt_tensor **buffers;
    int nbuffers, cap_buffers;
    void **allocs; /* layer structs and other builder memory, freed with the model */
    int nallocs, cap_allocs;
    dpt_ema *ema; /* dpt_ema_new; NULL: none */
};

/* The averages of the parameters, then the buffers (their order), and where the model's own
 * values wait while the averages stand in for them (dpt_ema_swap). */
struct dpt_ema {
    double decay;
    int n;
    dpt_tensor **avg, **spare, **values; /* n each; values: the model's tensors */
};

static void push(void ***list, int *count, int *cap, void *item)
{
    if (*count == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        *list = realloc(*list, (size_t)*cap * sizeof **list);
        if (!*list) dpt_fatal("out of host memory growing a model");
    }
    (*list)[(*count)++] = item;
}

dpt_model *dpt_model_new(dpt_ctx *ctx, const char *name, dpt_forward_fn forward)
{
    dpt_model *m = calloc(1, sizeof *m);
    if (!m) dpt_fatal("out of host memory for a model");
    m->ctx = ctx;
    snprintf(m->name, sizeof m->name, "%s", name);
    m->forward = forward;
    m->training = true;
    return m;
}

void dpt_model_set_destructor(dpt_model *m, void (*destroy)(dpt_model *model, void *state))
{
    m->destroy = destroy;
}

void dpt_model_set_renamer(dpt_model *m, dpt_rename_fn rename)
{
    m->rename = rename;
}

dpt_rename_fn dpt_model_renamer(const dpt_model *m)
{
    return m->rename;
}

void dpt_model_set_adapter(dpt_model *m, dpt_adapt_fn adapt)
{
    m->adapt = adapt;
}

dpt_adapt_fn dpt_model_adapter(const dpt_model *m)
{
    return m->adapt;
}

void dpt_model_free(dpt_model *m)
{
    if (!m) return;
    if (m->destroy) m->destroy(m, m->state); /* first: its tensors and state are still there */
    if (m->ema) {
        for (int i = 0; i < m->ema->n; i++)
            dpt_tensor_free(m->ema->avg[i]), dpt_tensor_free(m->ema->spare[i]);
        free(m->ema->avg), free(m->ema->spare), free(m->ema->values), free(m->ema);
    }
    for (int i = 0; i < m->nparams; i++)
        dpt_tensor_free(m->params[i]);
    for (int i = 0; i < m->nbuffers; i++)
        dpt_tensor_free(m->buffers[i]);
    for (int i = 0; i < m->nallocs; i++)
        free(m->allocs[i]);
    free(m->params);
    free(m->buffers);
    free(m->allocs);
    free(m->notes);
    free(m->noted);
    free(m);
}

const char *dpt_model_name(const dpt_model *m)
{
    return m->name;
}

bool dpt_model_errorf(dpt_model *m, const char *fmt, ...)
{
    if (m->error[0]) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->error, sizeof m->error, fmt, ap);
    va_end(ap);
    return false;
}

const char *dpt_model_error(const dpt_model *m)
{
    return m->error[0] ? m->error : NULL;
}

void dpt_model_note(dpt_model *m, const char *kind, const char *name, const dpt_shape3 *out, int64_t params,
                    double flops)
{
    char line[256], shape[64];
    snprintf(shape, sizeof shape, "(%lld, %lld, %lld)", (long long)out->c, (long long)out->h,
             (long long)out->w);
    int n = snprintf(line, sizeof line, "%-10s %-24s %-18s %12lld %12.2f\n", kind, name, shape,
                     (long long)params, flops / 1e6);
    if (n < 0) return;
    if (m->notes_len + (size_t)n + 1 > m->notes_cap) {
        m->notes_cap = (m->notes_cap + (size_t)n + 1) * 2;
        m->notes = realloc(m->notes, m->notes_cap);
        if (!m->notes) dpt_fatal("out of host memory for the model summary");
    }
    memcpy(m->notes + m->notes_len, line, (size_t)n + 1);
    m->notes_len += (size_t)n;
    m->flops += flops;
    double out_floats = (double)out->c * (double)out->h * (double)out->w;
    m->activation_floats += out_floats;
    if (out_floats > m->largest_output) m->largest_output = out_floats;
    if (m->nnoted == m->cap_noted) {
        m->cap_noted = m->cap_noted ? 2 * m->cap_noted : 16;
        m->noted = realloc(m->noted, (size_t)m->cap_noted * sizeof *m->noted);
        if (!m->noted) dpt_fatal("out of host memory for the model summary");
    }
    struct noted *e = &m->noted[m->nnoted++];
    snprintf(e->kind, sizeof e->kind, "%s", kind);
    e->floats = out_floats;
}

double dpt_model_noted_floats(const dpt_model *m, const char *kind, double *largest)
{
    double sum = 0, most = 0;
    for (int i = 0; i < m->nnoted; i++)
        if (!strncmp(m->noted[i].kind, kind, sizeof m->noted[i].kind - 1)) {
            sum += m->noted[i].floats;
            if (m->noted[i].floats > most) most = m->noted[i].floats;
        }
    if (largest) *largest = most;
    return sum;
}

double dpt_model_activation_floats(const dpt_model *m, double *largest_output)
{
    if (largest_output) *largest_output = m->largest_output;
    return m->activation_floats;
}

double dpt_model_flops(const dpt_model *m)
{
    return m->flops;
}

void dpt_model_print_summary(const dpt_model *m, FILE *out)
{
    fprintf(out, "%-10s %-24s %-18s %12s %12s\n", "layer", "name", "output (C, H, W)", "params", "MFLOP");
    if (m->notes) fputs(m->notes, out);
    fprintf(out, "total: %lld parameters, %.2f MFLOP forward per sample (%.2f GFLOP forward+backward)\n",
            (long long)dpt_model_param_count(m), m->flops / 1e6, 3.0 * m->flops / 1e9);
}

void *dpt_model_alloc(dpt_model *m, size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) dpt_fatal("out of host memory (%zu bytes) building model %s", bytes, m->name);
    push(&m->allocs, &m->nallocs, &m->cap_allocs, p);
    return p;
}

void dpt_model_set_state(dpt_model *m, void *state)
{
    m->state = state;
}
void *dpt_model_state(const dpt_model *m)
{
    return m->state;
}

/* A new parameter's or buffer's name: whole (at most DPT_NAME_MAX) and not taken. */
static void check_name(const dpt_model *m, const char *name)
{
    if (strlen(name) > DPT_NAME_MAX)
        dpt_fatal("model %s: the tensor name '%s' is %zu characters, more than %d\nHINT: shorter layer names (checkpoints "
                  "and the optimizer state find tensors by their whole name)",
                  m->name, name, strlen(name), DPT_NAME_MAX);
    for (int i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i]->name, name) == 0)
            dpt_fatal("model %s: parameter name '%s' used twice", m->name, name);
    for (int i = 0; i < m->nbuffers; i++)
        if (strcmp(m->buffers[i]->name, name) == 0)
            dpt_fatal("model %s: buffer name '%s' used twice", m->name, name);
}

dpt_tensor *dpt_model_param(dpt_model *m, const char *name, int ndim, const int64_t *shape)
{
    check_name(m, name);
    char what[128]; /* an out-of-memory report names it */
    snprintf(what, sizeof what, "parameter %.96s", name);
    dpt_tensor *t = dpt_tensor_new_for(m->ctx, ndim, shape, what);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->requires_grad = true;
    t->is_param = true;
    t->param_index = m->nparams;
    snprintf(what, sizeof what, "the gradient of %.96s", name);
    t->grad = dpt_tensor_new_for(m->ctx, ndim, shape, what);
    push((void ***)&m->params, &m->nparams, &m->cap_params, t);
    return t;
}

dpt_tensor *dpt_model_buffer(dpt_model *m, const char *name, int ndim, const int64_t *shape)
{
    check_name(m, name);
    dpt_tensor *t = dpt_tensor_new(m->ctx, ndim, shape);
    snprintf(t->name, sizeof t->name, "%s", name);
    push((void ***)&m->buffers, &m->nbuffers, &m->cap_buffers, t);
    return t;
}

int dpt_model_num_params(const dpt_model *m)
{
    return m->nparams;
}
int dpt_model_num_buffers(const dpt_model *m)
{
    return m->nbuffers;
}

dpt_tensor *dpt_model_param_at(const dpt_model *m, int index)
{
    DPT_ASSERT(index >= 0 && index < m->nparams, "parameter index %d of %d", index, m->nparams);
    return m->params[index];
}

dpt_tensor *dpt_model_buffer_at(const dpt_model *m, int index)
{
    DPT_ASSERT(index >= 0 && index < m->nbuffers, "buffer index %d of %d", index, m->nbuffers);
    return m->buffers[index];
}

int64_t dpt_model_param_count(const dpt_model *m)
{
    int64_t total = 0;
    for (int i = 0; i < m->nparams; i++)
        total += m->params[i]->numel;
    return total;
}

dpt_tensor *dpt_model_forward(dpt_model *m, dpt_ctx *ctx, dpt_tensor *x)
{
    DPT_ASSERT(m->forward, "model %s has no forward function", m->name);
    return m->forward(m, ctx, x);
}

void dpt_model_set_decoder(dpt_model *m, const dpt_decoder *decoder)
{
    m->decoder = *decoder;
}

const dpt_decoder *dpt_model_decoder(const dpt_model *m)
{
    return m->decoder.decode ? &m->decoder : NULL;
}

void dpt_model_set_batch_forward(dpt_model *m, dpt_batch_forward_fn forward)
{
    m->batch_forward = forward;
}

dpt_tensor *dpt_model_forward_batch(dpt_model *m, dpt_ctx *ctx, const dpt_batch *batch, const dpt_task *task)
{
    if (m->batch_forward) return m->batch_forward(m, ctx, batch);
    dpt_tensor *x = dpt_batch_get(batch, task->input);
    DPT_ASSERT(x, "the batch has no field %s", task->input);
    return dpt_model_forward(m, ctx, x);
}

void dpt_model_set_task(dpt_model *m, const dpt_task *task)
{
    m->task = *task;
}

/* The first field that is (or is not) a target's name, or NULL. */
static const char *first_field(const dpt_field *fields, int n, bool target)
{
    const dpt_field *f = dpt_field_first(fields, n, target);
    return f ? f->name : NULL;
}

bool dpt_task_resolve(const dpt_model *m, const dpt_dataset *data, dpt_task *out, dpt_error *err)
{
    dpt_field fields[DPT_MAX_FIELDS];
    int n = dpt_dataset_fields(data, fields);
    const dpt_task *mine = &m->task, *data_task = &data->task;
    dpt_task t = {
        .loss = mine->loss ? mine->loss : data_task->loss ? data_task->loss : "cross_entropy",
        .unit = mine->unit ? mine->unit : data_task->unit ? data_task->unit : data->nfields ? "samples" : "img",
        .input = mine->input ? mine->input : data_task->input ? data_task->input : first_field(fields, n, false),
        .target = mine->target ? mine->target : data_task->target ? data_task->target : first_field(fields, n, true),
    };
    const dpt_registration *r = dpt_registry_find(DPT_KIND_LOSS, t.loss);
    if (!r)
        return dpt_errorf(err, "model %s trains with the loss '%s', which is not registered\nHINT: a model's task "
                               "names a registered loss (built in: cross_entropy, mse)",
                          m->name, t.loss);
    const dpt_loss_impl *loss = r->impl;
    for (int f = 0; f < n && t.target; f++)
        if (!strcmp(fields[f].name, t.target) && loss->accepts && !loss->accepts(&fields[f], err)) return false;
    /* metrics: what was declared, else accuracy for a classifier's data, as far as the loss
     * measures them; an accuracy over more than 10 classes comes with its top-5 (where the
     * loss counts it), which says little below that */
    unsigned want = mine->metrics ? mine->metrics : data_task->metrics ? data_task->metrics
                                                  : data->num_classes > 0 ? DPT_METRIC_ACCURACY : 0;
    if ((want & DPT_METRIC_ACCURACY) && data->num_classes > 10) want |= DPT_METRIC_TOP5;
    t.metrics = want & loss->metrics;
    if (!loss->count_top5) t.metrics &= ~(unsigned)DPT_METRIC_TOP5;
    const char *names[2] = {t.input, t.target};
    for (int k = 0; k < 2; k++)
        if (!names[k] || !dpt_field_named(fields, n, names[k]))
            return dpt_errorf(err, "model %s takes the %s field '%s', which the data set %s does not have\nHINT: "
                                   "its fields are %s%s%s%s",
                              m->name, k ? "target" : "input", names[k] ? names[k] : "(none)", data->name,
                              fields[0].name, n > 1 ? ", " : "", n > 1 ? fields[1].name : "", n > 2 ? ", ..." : "");
    *out = t;
    return true;
}

void dpt_model_zero_grad(dpt_model *m)
{
    if (m->ctx->be->scale_multi) { /* a GPU: one launch for every gradient */
        dpt_tensor_list l;
        dpt_tensor_list_init(&l, m->nparams, 1);
        l.count = 0;
        for (int i = 0; i < m->nparams; i++) {
            dpt_tensor *g = m->params[i]->grad;
            if (g->data && g->numel) dpt_tensor_list_set(&l, l.count++, g->numel, &g->data);
        }
        dpt_tensor_list_seal(&l);
        if (l.count) m->ctx->be->scale_multi(m->ctx, &l, 0.0f);
        dpt_tensor_list_free(&l);
        return;
    }
    for (int i = 0; i < m->nparams; i++) {
        dpt_tensor *g = m->params[i]->grad;
        if (!g->data) continue; /* zero = 2: a released bucket's, zeros when backward next needs it */
        m->ctx->be->fill(m->ctx, g->data, g->numel, 0.0f);
    }
}

void dpt_model_set_training(dpt_model *m, bool training)
{
    m->training = training;
}
bool dpt_model_training(const dpt_model *m)
{
    return m->training;
}
void dpt_model_set_summary(dpt_model *m, const char *summary)
{
    snprintf(m->summary, sizeof m->summary, "%s", summary);
}
const char *dpt_model_summary(const dpt_model *m)
{
    return m->summary;
}

/* ---------------------------------------------------------------- initialisation */

/* Values are drawn on the host in element order so that a seed gives the same parameters
 * on every device and every rank. */
static void init_with(dpt_ctx *ctx, dpt_tensor *t, float a, bool normal)
{
    if (ctx->skip_init) return; /* a checkpoint's weights go over it */
    float *host = malloc((size_t)t->numel * sizeof *host);
    if (!host) dpt_fatal("out of host memory initialising %s", t->name);
    if (!normal) {
        for (int64_t i = 0; i < t->numel; i++)
            host[i] = a * (2.0f * dpt_rng_uniform(&ctx->rng) - 1.0f);
    } else { /* the draws in order, their logs and cosines on every thread: the same values as
              * one dpt_rng_normal a value (GPT-2 small's 124M: 5 s of libm on one core) */
        enum { CHUNK = 1 << 18 };
        uint64_t *bits = malloc(2 * CHUNK * sizeof *bits);
        if (!bits) dpt_fatal("out of host memory initialising %s", t->name);
        for (int64_t at = 0; at < t->numel; at += CHUNK) {
            int64_t n = t->numel - at < CHUNK ? t->numel - at : CHUNK;
            for (int64_t i = 0; i < 2 * n; i++)
                bits[i] = dpt_rng_next(&ctx->rng);
#pragma omp parallel for num_threads(ctx->threads) if (n > 8192)
            for (int64_t i = 0; i < n; i++)
                host[at + i] = a * dpt_rng_normal_of(bits[2 * i], bits[2 * i + 1]);
        }
        free(bits);
    }
    dpt_tensor_copy_from_host(t, host);
    free(host);
}

void dpt_ctx_skip_init(dpt_ctx *ctx, bool skip)
{
    ctx->skip_init = skip;
}

void dpt_init_uniform(dpt_ctx *ctx, dpt_tensor *t, float bound)
{
    init_with(ctx, t, bound, false);
}
void dpt_init_normal(dpt_ctx *ctx, dpt_tensor *t, float std)
{
    init_with(ctx, t, std, true);
}
void dpt_init_constant(dpt_tensor *t, float value)
{
    t->ctx->be->fill(t->ctx, t->data, t->numel, value);
}

/* ---------------------------------------------------------------- building by name */

static const dpt_config_key model_keys[] = {
    {"model", "name", DPT_KEY_ENUM, "mlp", 1, 0, "@model",
     "model to build: a registered model (built in: cnn, gpt, llama, mlp, resnet, vit; a program adds its own with dpt_register "
     "or dpt_register_model)", 0},
};
DPT_BUILTIN(settings_model) = {DPT_KIND_SETTINGS, "model", "the model to train", model_keys, DPT_COUNT(model_keys), NULL};

bool dpt_register_model(const char *name, dpt_model_builder build)
{
    if (!build) {
        fprintf(stderr, "error: dpt_register_model(%s): no builder\n", name ? name : "(null)");
        return false;
    }
    /* the registry keeps the impl's address: one lives as long as the process */
    dpt_model_impl *impl = calloc(1, sizeof *impl);
    if (!impl) dpt_fatal("out of host memory registering a model");
    impl->build_image = build;
    dpt_registration r = {DPT_KIND_MODEL, name, "", NULL, 0, impl};
    if (dpt_register(&r)) return true;
    free(impl);
    return false;
}

dpt_model *dpt_model_build_for(dpt_ctx *ctx, const dpt_config *cfg, const dpt_dataset *data, dpt_error *err)
{
    const dpt_registration *r = dpt_config_choice(cfg, "model", "name");
    const dpt_model_impl *impl = r->impl;
    dpt_model *m;
    int64_t c = data->c, h = data->h, w = data->w;
    if (impl->build) {
        m = impl->build(ctx, cfg, data, err);
    } else {
        if (data->nfields > 0) { /* fields: an image classifier takes a float (C, H, W) input and int labels */
            dpt_field fields[DPT_MAX_FIELDS];
            int n = dpt_dataset_fields(data, fields);
            const dpt_field *in = dpt_field_first(fields, n, false);
            const dpt_field *target = dpt_field_first(fields, n, true);
            if (!in || !target || in->dtype != DPT_F32 || in->ndim != 3 || target->dtype != DPT_I32 ||
                target->ndim != 0 || data->num_classes < 1) {
                dpt_errorf(err, "%s: [model] name = %s builds an image classifier; the data set %s has no images (a "
                                "float field of channels x height x width and integer labels)\nHINT: pick a model "
                                "that takes its fields (mlp takes any); a CSV table's rows become images with [data] "
                                "csv_shape",
                           dpt_config_where(cfg, "model", "name"), r->name, data->name);
                return NULL;
            }
            c = in->shape[0], h = in->shape[1], w = in->shape[2];
        }
        m = impl->build_image(ctx, cfg, c, h, w, data->num_classes, err);
    }
    if (m && dpt_model_error(m)) {
        dpt_errorf(err, "model %s: %s\nHINT: check the [model] settings against the input size %lldx%lldx%lld",
                   r->name, dpt_model_error(m), (long long)c, (long long)h, (long long)w);
        dpt_model_free(m);
        return NULL;
    }
    return m;
}

dpt_model *dpt_model_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w, int num_classes,
                           dpt_error *err)
{
    dpt_dataset shape = {.c = c, .h = h, .w = w, .num_classes = num_classes, .name = "(images)"};
    return dpt_model_build_for(ctx, cfg, &shape, err);
}

/* ---------------------------------------------------------------- weight averages */

dpt_ema *dpt_ema_new(dpt_ctx *ctx, dpt_model *m, double decay)
{
    DPT_ASSERT(!m->ema, "model %s has its weight averages already", m->name);
    DPT_ASSERT(decay >= 0 && decay < 1, "ema decay %g outside [0, 1)", decay);
    dpt_ema *e = calloc(1, sizeof *e);
    if (!e) dpt_fatal("out of host memory for weight averages");
    e->decay = decay, e->n = m->nparams + m->nbuffers;
    e->avg = calloc((size_t)e->n + 1, sizeof *e->avg);
    e->spare = calloc((size_t)e->n + 1, sizeof *e->spare);
    e->values = calloc((size_t)e->n + 1, sizeof *e->values);
    if (!e->avg || !e->spare || !e->values) dpt_fatal("out of host memory for weight averages");
    for (int i = 0; i < e->n; i++) {
        dpt_tensor *v = i < m->nparams ? m->params[i] : m->buffers[i - m->nparams];
        e->values[i] = v;
        e->avg[i] = dpt_tensor_new(ctx, v->ndim, v->shape);
        e->spare[i] = dpt_tensor_new(ctx, v->ndim, v->shape);
        snprintf(e->avg[i]->name, sizeof e->avg[i]->name, "%s", v->name);
        snprintf(e->spare[i]->name, sizeof e->spare[i]->name, "%s", v->name);
    }
    m->ema = e;
    dpt_ema_reset(ctx, e);
    return e;
}

dpt_ema *dpt_model_ema(const dpt_model *m)
{
    return m->ema;
}

double dpt_ema_decay(const dpt_ema *e)
{
    return e->decay;
}

int dpt_ema_count(const dpt_ema *e)
{
    return e->n;
}

dpt_tensor *dpt_ema_at(const dpt_ema *e, int index)
{
    DPT_ASSERT(index >= 0 && index < e->n, "weight average %d of %d", index, e->n);
    return e->avg[index];
}

void dpt_ema_reset(dpt_ctx *ctx, dpt_ema *e)
{
    dpt_foreach_axpby(ctx, e->n, e->avg, 1.0f, e->values, 0.0f);
}

/* avg = decay * avg + (1 - decay) * value (torch.optim.swa_utils.get_ema_multi_avg_fn) */
void dpt_ema_update(dpt_ctx *ctx, dpt_ema *e, double decay)
{
    DPT_ASSERT(decay >= 0 && decay < 1, "ema decay %g outside [0, 1)", decay);
    dpt_foreach_axpby(ctx, e->n, e->avg, (float)(1.0 - decay), e->values, (float)decay);
}

/* Copies only (alpha 1, beta 0: bit for bit): the model's values into the spare tensors, the
 * averages into the model; the spare then holds what the averages will be given back. */
void dpt_ema_swap(dpt_ctx *ctx, dpt_ema *e)
{
    dpt_foreach_axpby(ctx, e->n, e->spare, 1.0f, e->values, 0.0f);
    dpt_foreach_axpby(ctx, e->n, e->values, 1.0f, e->avg, 0.0f);
    dpt_tensor **t = e->avg;
    e->avg = e->spare, e->spare = t;
}
