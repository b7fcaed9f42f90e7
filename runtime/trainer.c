/* trainer.c: one replica's training, top to bottom: open (context, data, model, optimizer,
 * resume, the gradient reducer), then for each step train_step (micro-batches, the reducer's
 * finish, clip, optimizer) and after_step (log, evaluate, checkpoint, signals), then close.
 * The reducer (reducer.h) is DDP's buckets, or in [train] deterministic mode the fixed tree
 * over the step's shards; the trainer knows neither. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train.h"
#include "zero.h"
#include "profile.h"
#include "error.h"
#include "reducer.h"
#include "predict.h"
#include "../data/data.h"
#include "sample.h"
#include "schema.h"

/* Whether [data] key (a float list) holds its declared default. */
static bool data_list_default(const dpt_config *cfg, const char *key)
{
    double v[DPT_VALUE_MAX_LIST];
    int n = dpt_config_float_list(cfg, "data", key, v, DPT_VALUE_MAX_LIST);
    return n == 1 && v[0] == strtod(dpt_schema_at(dpt_schema_find("data", key))->decl.def, NULL);
}

static bool trainer_open(trainer *t, replica *r, dpt_error *err);
static void trainer_close(trainer *t);
static void epoch_begin(trainer *t);
static void train_step(trainer *t);
static void after_step(trainer *t, int64_t s);
static bool epoch_end(trainer *t);
static bool early_stop_due(trainer *t);

/* The length of the data's sequences (a language model's context for --sample), 0 if its
 * input is not a sequence of ids. */
static int64_t sequence_length(const trainer *t)
{
    dpt_field f[DPT_MAX_FIELDS];
    int n = dpt_dataset_fields(t->train_set, f);
    for (int i = 0; i < n; i++)
        if (!f[i].target) return f[i].dtype == DPT_I32 && f[i].ndim == 1 ? f[i].shape[0] : 0;
    return 0;
}

/* --export FORMAT: the model's own writer for it, or NULL with err (before the checkpoint is
 * loaded: a config of another model fails on the format, not on the file). */
static const dpt_model_impl *exporter_for(const trainer *t, dpt_error *err)
{
    const char *fmt = t->r->args->export_format, *name = dpt_config_str(t->run->ini, "model", "name");
    const dpt_registration *reg = dpt_registry_find(DPT_KIND_MODEL, name);
    const dpt_model_impl *impl = reg ? reg->impl : NULL;
    const char *have = impl && impl->export_formats ? impl->export_formats : "";
    if (!format_listed(have, fmt) || !impl->export_weights)
        return dpt_errorf(err, "--export %s: not a format of model %s (its own: %s; any checkpoint: safetensors, npz)",
                          fmt, name, *have ? have : "none"), NULL;
    return impl;
}

/* --export FORMAT CKPT OUT in a format of the model's own (the checkpoint is loaded). */
static bool export_model(trainer *t, dpt_error *err)
{
    if (!t->exporter->export_weights(t->model, t->r->args->export_format, t->r->args->export_out, err)) return false;
    printf("exported %s: model %s to %s (%s)\n", t->r->resumed, dpt_config_str(t->run->ini, "model", "name"),
           t->r->args->export_out, t->r->args->export_format);
    return true;
}

/* The test set's evaluation (each rank its shard, the sums combined) and, where the run keeps
 * weight averages, theirs beside it (the averages swapped in and out: copies, bit for bit).
 * With confusion (--eval --per-class) also the confusion counts from the same pass, summed over
 * the ranks; false with err where the model is not a classifier. */
static bool evaluate_counting(trainer *t, double *confusion, int classes, dpt_error *err)
{
    dpt_zero_settle(t->zero); /* zero_overlap: the parameters whole before anything else reads them */
    dpt_eval_result local;
    if (!confusion)
        local = dpt_evaluate(t->ctx, t->model, t->test_loader);
    else if (!dpt_evaluate_confusion(t->ctx, t->model, t->test_loader, confusion, classes, &local, err))
        return false;
    t->test = dpt_eval_allreduce(t->r->comm, local);
    if (confusion && t->r->comm)
        dpt_comm_allreduce_f64(t->r->comm, confusion, (int64_t)classes * classes, "per-class counts");
    dpt_ema *ema = dpt_model_ema(t->model);
    if (ema) {
        dpt_ema_swap(t->ctx, ema);
        t->test_ema = dpt_eval_allreduce(t->r->comm, dpt_evaluate(t->ctx, t->model, t->test_loader));
        dpt_ema_swap(t->ctx, ema);
    }
    t->evaluated = true;
    return true;
}

static void evaluate(trainer *t)
{
    evaluate_counting(t, NULL, 0, NULL);
}

/* The training loop of one replica (a thread under DataParallel). */
void *train_replica(void *arg)
{
    replica *r = arg;
    trainer t;
    dpt_error err;
    r->rc = 1;
    r->result = (dpt_run_result){.final_test_acc = NAN, .best_test_acc = NAN, .final_test_top5 = NAN, .final_test_loss = NAN,
                                 .final_train_loss = NAN, .img_s = NAN};
    if (!trainer_open(&t, r, &err)) {
        r->rc = fail(r, &err);
        return NULL;
    }
    if (r->args->sample) {
        const cli *a = r->args;
        dpt_sample_options o = {.prompt = a->prompt, .tokens = a->sample_tokens, .temperature = a->temperature,
                                .top_k = a->top_k < 0 ? 0 : a->top_k, .top_p = a->top_p, .seed = a->sample_seed,
                                .no_cache = a->sample_no_cache, .tokenizer = a->tokenizer,
                                .tokenizer_found = a->tokenizer_found};
        bool ok = sequence_length(&t) > 0 ||
                  dpt_errorf(&err, "--sample generates from a language model; the data set %s has no sequence of token "
                                   "ids as its input\nHINT: [data] source = tokens, [model] name = gpt", t.train_set->name);
        if (ok && r->rank == 0)
            ok = dpt_sample_run(t.ctx, t.model, t.train_set->num_classes, sequence_length(&t), &o, stdout, &err);
        if (!ok) {
            trainer_close(&t);
            r->rc = fail(r, &err);
            return NULL;
        }
    } else if (r->args->predict) { /* the test set in order, in one process */
        dpt_predict_options o = {.out = r->args->predict_out, .top_k = r->args->top_k < 0 ? 5 : r->args->top_k};
        bool ok = r->size == 1 ||
                  dpt_errorf(&err, "--predict writes one file in the data's order from one process; this run has %d %s\n"
                                   "HINT: run it without mpirun and with one device",
                             r->size, r->data_parallel ? "replicas" : "ranks");
        ok = ok && dpt_predict_run(t.ctx, t.model, t.test_loader, &o, &err);
        if (!ok) {
            trainer_close(&t);
            r->rc = fail(r, &err);
            return NULL;
        }
    } else if (r->args->eval) { /* the checkpoint's weights on the test set, sharded over the ranks */
        /* --per-class: the confusion counts from the same pass (a host read a batch) */
        int classes = r->args->per_class ? t.test_set->num_classes : 0;
        double *confusion = NULL;
        if (r->args->per_class) {
            confusion = calloc((size_t)classes * (size_t)(classes > 0 ? classes : 1), sizeof *confusion);
            if (!confusion) dpt_fatal("out of host memory for --per-class (%d classes)", classes);
        }
        bool ok = !confusion || classes > 0 ||
                  dpt_errorf(&err, "--per-class reports a classifier's classes, and the data set %s has none\nHINT: "
                                   "--eval alone reports its loss",
                             t.test_set->name);
        ok = ok && evaluate_counting(&t, confusion, classes, &err);
        if (!ok) {
            free(confusion);
            trainer_close(&t);
            r->rc = fail(r, &err);
            return NULL;
        }
        r->result.final_test_loss = t.test.loss, r->result.final_test_acc = t.test.accuracy;
        r->result.final_test_top5 = t.test.top5;
        if (r->rank == 0) print_eval(&t);
        if (confusion && r->rank == 0) print_per_class(&t, confusion, classes);
        free(confusion);
    } else if (r->args->export_format) {
        bool ok = r->rank != 0 || export_model(&t, &err);
        if (!ok) {
            trainer_close(&t);
            r->rc = fail(r, &err);
            return NULL;
        }
    } else if (r->args->show_batch) { /* rank 0's first batch, as training would take it */
        if (r->rank == 0 && !show_batch(&t, r->args->show_batch, &err)) {
            trainer_close(&t);
            r->rc = fail(r, &err);
            return NULL;
        }
    } else if (r->args->dry_run || r->args->summary) {
        if (r->rank == 0 && r->args->summary && t.trace.table) /* what the forward runs (issue 28) */
            fputs(t.trace.table, stdout);
        if (r->rank == 0 && r->args->dry_run) dpt_config_print(t.run->ini, stdout);
    } else {
        signals_training();
        /* a run resumed after its early stop trains no further */
        if (t.run->stop_metric && t.state.stop_best_epoch > 0 && t.state.batches_done == 0 &&
            t.state.epoch - 1 - t.state.stop_best_epoch >= t.run->stop_patience)
            t.stop = true;
        for (; t.state.epoch <= t.run->epochs && !t.stop; t.state.epoch++) {
            epoch_begin(&t);
            for (int64_t s = t.state.batches_done / t.run->accum; s < t.steps_per_epoch && !t.stop; s++) {
                train_step(&t);
                after_step(&t, s);
            }
            if (epoch_end(&t)) break;
        }
        /* [checkpoint] final: the last step's weights are not lost to a max_steps mid-epoch or a
         * last epoch between periodic checkpoints (a signal wrote its own) */
        if (t.run->ckpt_final && !t.signal_seen && t.state.step > 0 && t.state.step != r->last_ckpt_step)
            save_checkpoint(&t, &t.state);
        if (!t.evaluated && !t.signal_seen) { /* resumed at its end: nothing to train, the final numbers measured now */
            if (r->rank == 0) printf("nothing left to train: %s is past its last epoch; evaluating its weights\n",
                                     *r->resumed ? r->resumed : "the checkpoint");
            evaluate(&t);
            r->result.final_test_loss = t.test.loss, r->result.final_test_acc = t.test.accuracy;
            r->result.final_test_top5 = t.test.top5;
        }
        print_final(&t);
    }
    trainer_close(&t);
    r->rc = 0;
    return NULL;
}

/* ---------------------------------------------------------------- open and close */

/* Tests: is the [distributed] fault `kind` due on this rank at this step? */
static bool fault_now(const trainer *t, fault_kind kind)
{
    return t->run->fault.kind == kind && t->r->rank == t->run->fault.rank && t->state.step == t->run->fault.step;
}

/* The cores one replica may use: the world's share for this rank (world.c: its binding, or the
 * node's cores over its ranks), split again between DataParallel's replicas. */
static int rank_cores(const replica *r)
{
    int cores = r->world && r->world->cores > 0 ? r->world->cores : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (r->data_parallel) cores /= r->size;
    return cores > 0 ? cores : 1;
}

/* [train] threads = 0: this replica's cores (say how when it is not simply the process's own);
 * any value: a warning when the node's ranks (or replicas) together run more threads than it
 * has cores, the case that made 2 ranks of 2 threads on 2 cores 5.5x slower than 1 each. */
static void resolve_threads(trainer *t, dpt_ctx_options *o)
{
    const replica *r = t->r;
    t->threads_why[0] = '\0';
    if (o->threads == 0) {
        o->threads = rank_cores(r);
        if (r->data_parallel)
            snprintf(t->threads_why, sizeof t->threads_why, "%d cores / %d replicas",
                     r->world ? r->world->cores : o->threads * r->size, r->size);
        else if (r->world && r->world->local_size > 1)
            snprintf(t->threads_why, sizeof t->threads_why, "%s", r->world->cores_why);
    }
    int sharing = r->data_parallel ? r->size : r->world ? r->world->local_size : 1;
    int node = r->world && r->world->node_cores > 0 ? r->world->node_cores : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int fair = node / sharing > 0 ? node / sharing : 1;
    if (r->rank == 0 && o->threads > fair && (long)o->threads * sharing > node)
        fprintf(stderr,
                "warning: %d %s x %d threads on this node exceed its %d core%s: threads wait for each other's "
                "cores and a step can run several times slower\nHINT: leave [train] threads unset (%s), or "
                "set it to %d\n",
                sharing, r->data_parallel ? "replicas" : sharing == 1 ? "rank" : "ranks", o->threads, node,
                node == 1 ? "" : "s",
                r->data_parallel ? "cores / replicas" : "cores / ranks on the node", fair);
}

/* Whether this rank's share of the data makes one optimizer step: said before the model and
 * any batch-sized buffer are made (a batch of 1M took 15 s and 9.8 GB to be refused) and
 * before the memory estimate (a batch larger than the data is the mistake to name). */
static bool one_step(const trainer *t, dpt_error *err)
{
    const run_config *run = t->run;
    dpt_loader_options o = run->train_data;
    o.rank = t->r->rank, o.world_size = t->r->size;
    int64_t samples, batches = dpt_loader_plan_batches(t->train_set, &o, &samples);
    if (batches / run->accum > 0) return true;
    return dpt_errorf(err,
                      "rank %d gets %lld training samples per epoch, fewer than one step of %lld x %d "
                      "accumulation with drop_last = %s\nHINT: lower [train] batch or "
                      "[distributed] accum_steps, or use fewer ranks",
                      t->r->rank, (long long)samples, (long long)run->batch, run->accum, o.drop_last ? "true" : "false");
}

/* The loaders, and the steps they make per epoch (one_step said there is one). */
static bool open_loaders(trainer *t, dpt_error *err)
{
    const run_config *run = t->run;
    dpt_loader_options train_opt = run->train_data, test_opt = run->test_data;
    train_opt.rank = test_opt.rank = t->r->rank;
    train_opt.world_size = test_opt.world_size = t->r->size;
    if (train_opt.workers < 0) { /* cores per rank minus one (the one that steps), at least one */
        int w = rank_cores(t->r) - 1;
        train_opt.workers = test_opt.workers = w > 1 ? w : 1;
    }
    t->workers = train_opt.workers;
    const cli *a = t->r->args;
    if (a->predict_input) test_opt.limit = 0; /* --input: every file given */
    if (cli_weights_only(a)) { /* no training: no training batches */
        t->test_loader = dpt_loader_new(t->ctx, t->test_set, &test_opt);
        return true;
    }
    int64_t samples, batches = dpt_loader_plan_batches(t->train_set, &train_opt, &samples);
    DPT_ASSERT(batches / run->accum > 0, "open_loaders without one step (one_step)");
    t->train_loader = dpt_loader_new(t->ctx, t->train_set, &train_opt);
    const char *hint = dpt_ctx_set_oom_hint(t->ctx, DPT_EVAL_OOM_HINT);
    t->test_loader = dpt_loader_new(t->ctx, t->test_set, &test_opt);
    dpt_ctx_set_oom_hint(t->ctx, hint);
    t->steps_per_epoch = dpt_loader_num_batches(t->train_loader) / run->accum;
    DPT_ASSERT(t->steps_per_epoch == batches / run->accum, "planned %lld batches", (long long)batches);
    return true;
}

/* The model's task on this data, and its loss with the config's settings for it. */
static bool open_loss(trainer *t, dpt_error *err)
{
    if (!dpt_task_resolve(t->model, t->train_set, &t->task, err)) return false;
    if (!dpt_config_check_kind_owners(t->run->ini, DPT_KIND_LOSS, t->task.loss, "loss",
                                      "this run's model and data train with", err))
        return false;
    t->loss = dpt_registry_find(DPT_KIND_LOSS, t->task.loss)->impl;
    t->loss_settings = calloc(1, t->loss->settings_size + 1);
    if (!t->loss_settings) dpt_fatal("out of host memory");
    return !t->loss->configure || t->loss->configure(t->loss_settings, t->run->ini, err);
}

/* [data] random_erase: images of floats. mixup / cutmix: the mixed loss is two of the
 * cross-entropy's terms, so a classifier of float inputs with one label a sample (cutmix: of
 * images). */
static bool open_batch_augmentations(trainer *t, dpt_error *err)
{
    const run_config *run = t->run;
    dpt_field f[DPT_MAX_FIELDS];
    int nf = dpt_dataset_fields(t->train_set, f);
    const dpt_field *in = dpt_field_named(f, nf, t->task.input), *target = dpt_field_named(f, nf, t->task.target);
    if (dpt_erase_enabled(&run->erase)) { /* images of floats */
        if (!in || in->dtype != DPT_F32 || in->ndim != 3)
            return dpt_errorf(err, "%s: [data] random_erase sets a box of an image to 0, and this data's input (%s) is "
                                   "not an image (C, H, W) of floats\nHINT: leave it out here; a CSV's rows become "
                                   "images with csv_shape = C,H,W",
                              dpt_config_where(run->ini, "data", "random_erase"), t->task.input);
        t->erase = true;
    }
    if (!dpt_mix_enabled(&run->mix)) return true;
    bool cut = run->mix.cutmix_alpha > 0;
    const char *key = run->mix.mixup_alpha > 0 ? "mixup" : "cutmix", *where = dpt_config_where(run->ini, "data", key);
    if (strcmp(t->task.loss, "cross_entropy"))
        return dpt_errorf(err, "%s: [data] %s mixes the labels of two samples in a cross-entropy, and this run's model "
                               "and data train with %s\nHINT: leave [data] mixup and cutmix at 0 here",
                          where, key, t->task.loss);
    if (!target || target->dtype != DPT_I32 || target->ndim != 0)
        return dpt_errorf(err, "%s: [data] %s mixes one label a sample, and this data's target (%s) holds %s\nHINT: "
                               "leave [data] mixup and cutmix at 0 here (a language model's tokens are not mixed)",
                          where, key, t->task.target,
                          !target ? "none" : target->dtype != DPT_I32 ? "real values" : "several a sample");
    if (!in || in->dtype != DPT_F32)
        return dpt_errorf(err, "%s: [data] %s blends inputs, and this data's input (%s) is not floats\nHINT: leave "
                               "[data] mixup and cutmix at 0 here",
                          where, key, t->task.input);
    if (cut && in->ndim != 3)
        return dpt_errorf(err, "%s: [data] cutmix pastes a box of one image into another, and this data's input (%s) "
                               "is not an image (C, H, W) but %d-D a sample\nHINT: [data] mixup blends inputs of any "
                               "shape; a CSV's rows become images with csv_shape = C,H,W",
                          dpt_config_where(run->ini, "data", "cutmix"), t->task.input, in->ndim);
    if (!cli_weights_only(t->r->args))
        t->mix_labels = dpt_tensor_new_dtype(t->ctx, DPT_I32, 1, (int64_t[]){run->batch});
    return true;
}

/* [data] eval_image_size: a test set of other image sizes than training's (FixRes) needs a model
 * whose parameters do not depend on the size (convolutions, then a global pooling): a model
 * built on the test set's shape must have every parameter of the same shape. Otherwise the
 * first evaluation would stop the run on a shape mismatch, after an epoch of training. */
static bool same_parameters_at_eval_size(trainer *t, dpt_error *err)
{
    const dpt_dataset *tr = t->train_set, *te = t->test_set;
    if (tr->get || te->get || (tr->h == te->h && tr->w == te->w)) return true;
    dpt_ctx_skip_init(t->ctx, true); /* shapes only (the build resets it to false after, as here) */
    dpt_model *probe = dpt_model_build_for(t->ctx, t->run->ini, te, err);
    dpt_ctx_skip_init(t->ctx, false);
    if (!probe) return false;
    bool same = dpt_model_num_params(probe) == dpt_model_num_params(t->model);
    const dpt_tensor *a = NULL, *b = NULL;
    for (int p = 0; same && p < dpt_model_num_params(probe); p++) {
        a = dpt_model_param_at(t->model, p), b = dpt_model_param_at(probe, p);
        same = dpt_tensor_ndim(a) == dpt_tensor_ndim(b);
        for (int d = 0; same && d < dpt_tensor_ndim(a); d++)
            same = dpt_tensor_dim(a, d) == dpt_tensor_dim(b, d);
    }
    if (!same) {
        char at[256] = "";
        if (a && b)
            snprintf(at, sizeof at, " (%s: %lld values at %lldx%lld, %lld at %lldx%lld)", dpt_tensor_name(a),
                     (long long)dpt_tensor_numel(a), (long long)tr->h, (long long)tr->w, (long long)dpt_tensor_numel(b),
                     (long long)te->h, (long long)te->w);
        dpt_errorf(err, "%s: [data] eval_image_size = %lld, and model %s's parameters depend on the image size%s: it "
                        "cannot evaluate at another size than it trains at\nHINT: leave eval_image_size out (0), or "
                        "use a model with a global pooling before its classifier (resnet)",
                   dpt_config_where(t->run->ini, "data", "eval_image_size"), (long long)te->h,
                   dpt_config_str(t->run->ini, "model", "name"), at);
    }
    dpt_model_free(probe);
    return same;
}

static bool resume(trainer *t, dpt_error *err)
{
    replica *r = t->r;
    const char *which = r->args->resume;
    if (!strcmp(which, "auto")) { /* the newest checkpoint if there is one (scripts/dptrun's restarts) */
        int64_t n;
        free(dpt_checkpoint_steps(t->run->ckpt_dir, &n));
        if (n <= 0) {
            if (r->rank == 0) printf("--resume auto: no checkpoint in %s yet: a new run\n", t->run->ckpt_dir);
            return true;
        }
        which = "latest";
    }
    if (!dpt_checkpoint_resolve(which, t->run->ckpt_dir, r->resumed, sizeof r->resumed, err))
        return dpt_error_prefix(err, "%s ", cli_weights_flag(r->args) ? cli_weights_flag(r->args) : "--resume");
    bool weights_only = cli_weights_only(r->args);
    if (weights_only && dpt_safetensors_is(r->resumed)) { /* weights another program wrote: by name */
        weights_loaded got;
        if (!load_weights_by_name(t, r->resumed, r->args->ema, NULL, &got, err))
            return dpt_error_prefix(err, "%s: ", cli_weights_flag(r->args));
        char ints[480];
        if (r->rank == 0 && r->args->eval)
            printf("evaluating %s: safetensors, %d tensors by name%s%s%s\n", r->resumed, got.loaded,
                   weights_loaded_ints(&got, ints, sizeof ints), *got.adapted ? "; " : "", got.adapted);
        return true;
    }
    if (weights_only && r->args->ema ? !dpt_checkpoint_load_averages(r->resumed, t->model, t->ctx, &t->state, err)
                                     : !dpt_checkpoint_load(r->resumed, t->model, t->optim, t->ctx,
                                                            weights_only ? NULL : t->run->ini, &t->state, r->size, err))
        return false;
    r->resumed_step = r->last_ckpt_step = t->state.step;
    if (weights_only) { /* no data position, no continuation */
        if (r->rank == 0 && r->args->eval)
            printf("evaluating %s%s: epoch %d, step %lld\n", r->args->ema ? "the weight averages of " : "", r->resumed,
                   t->state.epoch, (long long)t->state.step);
        return true;
    }
    t->carry_units = t->state.batches_done > 0 ? t->state.epoch_units : 0;
    snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", r->resumed);
    /* The data position is a global sample of the epoch's stream: this world takes it from
     * there, whatever world wrote it (every rank draws the same permutation, and global step k
     * reads its positions [k G, (k + 1) G) whatever the split). */
    dpt_train_state *st = &t->state;
    int64_t micro = t->run->batch * r->size, step_samples = micro * t->run->accum;
    if (st->samples_done >= 0) {
        if (st->samples_done % step_samples)
            return dpt_errorf(err,
                              "%s stopped after global sample %lld of epoch %d; this run takes %lld samples a "
                              "step (%d %s x %lld x %d accumulation), which does not divide it\nHINT: resume "
                              "with the global batch it was written with ([train] global_batch keeps it on any "
                              "world size), or from a checkpoint written at an epoch end",
                              r->resumed, (long long)st->samples_done, st->epoch, (long long)step_samples, r->size,
                              r->data_parallel ? "replicas" : "ranks", (long long)t->run->batch, t->run->accum);
        st->batches_done = st->samples_done / micro;
    }
    /* the data it was written on: a changed folder resumes (data sets grow), but not silently */
    uint64_t now = t->train_set->content_hash;
    if (st->data_hash && now && st->data_hash != now && r->rank == 0)
        fprintf(stderr,
                "warning: %s was written on other data than %s holds now (hash %016llx, now %016llx: %s): this "
                "epoch's order and the samples it has seen differ from the interrupted run's\n",
                r->resumed, t->train_set->origin ? t->train_set->origin : t->train_set->name, (unsigned long long)st->data_hash,
                (unsigned long long)now, t->train_set->files ? "files added, removed or renamed" : "its content changed");
    st->data_hash = now;
    /* the loss scaler resumes where it was; a checkpoint without one starts from the first scale */
    if (!t->run->loss_scale)
        st->loss_scale = 0, st->scale_good_steps = 0;
    else if (st->loss_scale <= 0)
        st->loss_scale = t->run->loss_scale_init, st->scale_good_steps = 0;
    if (r->rank == 0)
        printf("resumed from %s: epoch %d, step %lld%s\n", r->resumed, t->state.epoch, (long long)t->state.step,
               st->samples_done > 0 ? ", mid-epoch" : "");
    return true;
}

/* Everything a run needs, in order; a failure unwinds what was built (trainer_close takes a
 * partly opened trainer: t starts zeroed and every part frees NULL) and returns false with err. */
static bool trainer_open(trainer *t, replica *r, dpt_error *err)
{
    const run_config *run = r->run;
    memset(t, 0, sizeof *t);
    t->r = r, t->run = run;
    if (r->args->sample) report_to(stderr); /* the generated text alone on stdout */
    t->host_comm = r->comm; /* close puts it back (an NCCL communicator may take its place) */
    t->state = (dpt_train_state){.epoch = 1, .best_acc = -1.0, .best_loss = INFINITY, .stop_best = NAN};
    if (run->loss_scale) t->state.loss_scale = run->loss_scale_init;
    dpt_ctx_options ctx_opt = run->ctx;
    ctx_opt.device = pick_device(r);
    resolve_threads(t, &ctx_opt);
    t->ctx = dpt_ctx_new(&ctx_opt, err);
    if (!t->ctx) return false;
    crash_report_context(t->ctx, r->rank);
    if (run->adapt_threads && dpt_ctx_device(t->ctx).kind == DPT_DEVICE_CPU) {
        t->adapt.base = dpt_ctx_threads(t->ctx);
        size_t n = strlen(t->threads_why);
        snprintf(t->threads_why + n, sizeof t->threads_why - n, "%sadapting to the free cores", n ? "; " : "");
    } else if (run->adapt_threads && r->rank == 0) {
        fprintf(stderr, "warning: [train] adapt_threads is for runs on the CPU; this one runs on %s: ignored\n",
                dpt_ctx_backend_name(t->ctx));
    }
    /* bf16 on a CPU whose bf16 products are no faster than fp32's (an Intel Xeon without AMX):
     * the run would be slower than asked for without knowing why */
    double bf16 = r->rank == 0 ? dpt_ctx_bf16_speedup(t->ctx) : 0.0;
    if (bf16 > 0 && bf16 < 0.9)
        fprintf(stderr,
                "warning: [train] precision = bf16 on this CPU: a bf16 matrix product ran at %.2fx the speed of "
                "an fp32 one (conversions included: its bf16 dot products do no more multiply-adds a cycle "
                "than its fp32 FMAs): bf16 saves memory here, not time\nHINT: [train] precision = fp32 trains "
                "faster on this CPU; bf16 pays on CPUs with AMX or two bf16 units (AMD Zen 4) and on GPUs\n",
                bf16);
    dpt_comm_set_timeout(r->comm, run->ddp.timeout_s); /* NCCL's start too */
    if (r->comm && dpt_ctx_device(t->ctx).kind == DPT_DEVICE_CUDA) {
        t->nccl = dpt_comm_nccl_new(t->ctx, r->comm, err);
        if (!t->nccl) goto fail;
        r->comm = t->nccl;
    }
    /* what trains nothing reads no training corpus: --sample and --export need no data at all,
     * --eval and --predict the test set (where the source can describe its sets without them) */
    const cli *a = r->args;
    dpt_data_need need = !cli_weights_only(a)                  ? DPT_DATA_ALL
                         : a->sample || a->export_format        ? DPT_DATA_NONE
                                                                : DPT_DATA_TEST;
    if (!dpt_data_open_for(run->ini, need, &t->train_set, &t->test_set, err)) goto fail;
    /* the crop and flip work on images (bytes, files), and so do mean and std: a source's fields
     * would pass unaugmented and unnormalised */
    const char *norm = !t->train_set->get ? NULL : !data_list_default(run->ini, "mean") ? "mean"
                                                  : !data_list_default(run->ini, "std") ? "std" : NULL;
    if (norm) {
        dpt_errorf(err, "%s: [data] %s normalises image bytes, and [data] source = %s makes samples of fields, which "
                        "it does not touch\nHINT: leave it out%s",
                   dpt_config_where(run->ini, "data", norm), norm, dpt_config_str(run->ini, "data", "source"),
                   !strcmp(dpt_config_str(run->ini, "data", "source"), "csv") ? "; [data] csv_standardize scales a "
                                                                                  "CSV's features"
                                                                                : "");
        goto fail;
    }
    if (run->train_data.auto_augment && !t->train_set->get && t->train_set->c != 3) {
        dpt_errorf(err, "%s: [data] auto_augment's operations (PIL's, on RGB images) need 3 channels, and this data's "
                        "images have %lld\nHINT: leave it out here; random_crop_pad, hflip, random_erase, mixup and "
                        "cutmix work on any images",
                   dpt_config_where(run->ini, "data", "auto_augment"), (long long)t->train_set->c);
        goto fail;
    }
    if (t->train_set->get && (run->train_data.crop_pad || run->train_data.hflip || run->train_data.auto_augment)) {
        const char *key = run->train_data.crop_pad ? "random_crop_pad" : run->train_data.hflip ? "hflip" : "auto_augment";
        dpt_errorf(err, "%s: [data] %s augments images, and [data] source = %s makes samples of fields, which it "
                        "cannot augment\nHINT: turn it off (--set data.%s=%s), or augment in a model or data source "
                        "of your own",
                   dpt_config_where(run->ini, "data", key), key, dpt_config_str(run->ini, "data", "source"), key,
                   run->train_data.crop_pad ? "0" : run->train_data.hflip ? "false" : "none");
        goto fail;
    }
    if (!cli_weights_only(r->args) && !one_step(t, err)) goto fail;
    guard_memory(t, true); /* the model, its trace and its optimizer before the estimate */
    if (r->args->predict_input) { /* --predict --input: these images, made as the test set's */
        dpt_dataset *input;
        if (!dpt_data_open_input(run->ini, r->args->predict_input, t->test_set, &input, err)) goto fail;
        dpt_dataset_free(t->test_set);
        t->test_set = input;
    }
    t->state.data_hash = t->train_set->content_hash;
    /* --sample, --eval, --predict, --export load every weight over the model's: no random init */
    bool weights_only = cli_weights_only(r->args);
    dpt_ctx_skip_init(t->ctx, weights_only);
    t->model = dpt_model_build_for(t->ctx, run->ini, t->train_set, err);
    dpt_ctx_skip_init(t->ctx, false);
    if (!t->model || !open_loss(t, err) || !open_batch_augmentations(t, err)) goto fail;
    if (!same_parameters_at_eval_size(t, err)) goto fail;
    /* what forward does, read from one forward at batch 1: the header's FLOPs, --summary, and
     * the memory estimate of a model whose builder noted no layers. Not for --sample and
     * --export (they need neither), nor, unless --summary asks, where the builders noted over
     * 20 GFLOP a sample (GPT-2 small at T = 1024: seconds of a CPU's start) */
    bool trace = !r->args->sample && !r->args->export_format && (r->args->summary || dpt_model_flops(t->model) <= 2e10);
    if (trace) dpt_model_trace(t->ctx, t->model, t->train_set, &t->task, r->args->summary, &t->trace);
    if (run->stop_metric == 2 && !(t->task.metrics & DPT_METRIC_ACCURACY)) {
        dpt_errorf(err, "%s: [train] early_stop on test_acc, but this model's loss (%s) measures no accuracy\nHINT: "
                        "early_stop = test_loss:PATIENCE[:MIN_DELTA]",
                   dpt_config_where(run->ini, "train", "early_stop"), t->task.loss);
        goto fail;
    }
    /* fine-tuning's start; a resumed run (or one that only looks) has its weights from CKPT */
    if (!r->args->resume && !init_from_checkpoint(t, err)) goto fail;
    /* no optimizer either where only weights are read (its state would be zero-filled memory,
     * two floats per parameter for AdamW, never read) */
    bool look_only = weights_only || r->args->dry_run || r->args->summary || r->args->show_batch;
    if (!weights_only && !(t->optim = dpt_optim_build(t->model, run->ini, err))) goto fail;
    if (run->ema_decay > 0 && !look_only) dpt_ema_new(t->ctx, t->model, run->ema_decay); /* a resume restores them */
    t->need = estimate_memory(t);
    if (!check_memory(t, err)) goto fail;
    guard_memory(t, false);
    /* --dry-run and --summary look and write nothing ([log] metrics and timeline files included) */
    bool writes = !r->args->dry_run && !r->args->summary && !r->args->show_batch;
    if (!open_loaders(t, err)) goto fail;
    if (r->args->export_format && !(t->exporter = exporter_for(t, err))) goto fail;
    if (r->args->resume && !resume(t, err)) goto fail;
    /* after the files it reads (a metrics path that names one is refused, not truncated) */
    t->metrics = dpt_metrics_open(r->rank == 0 && writes ? run->metrics : "", err);
    if (!t->metrics) goto fail;
    /* Everything that can stop a checkpoint is checked before the first step, not at the
     * first save after hours of training. */
    if (r->rank == 0 && !look_only && !prepare_checkpoint_dir(r, true, err)) goto fail;
    dpt_ctx_set_comm(t->ctx, r->comm); /* SyncBatchNorm layers reduce over these ranks */
    t->timeline = writes ? open_timeline(r) : NULL;
    if (run->deterministic) {
        t->reducer = dpt_reducer_det_new(t->ctx, t->model, t->host_comm, r->rank, r->size, run->det_per_rank,
                                         run->det_shards, run->ctx.seed);
    } else if (r->comm) {
        dpt_ddp_options ddp_opt = run->ddp;
        ddp_opt.dataset_len = t->train_set->n;
        ddp_opt.dataset_hash = t->train_set->content_hash;
        ddp_opt.config = run->ini; /* a config that differs: the first key that does is named */
        ddp_opt.steps_before = t->state.step;
        ddp_opt.reduce_scatter = run->zero == 2 && t->optim; /* [distributed] zero = 2 */
        if (!ddp_opt.reduce_scatter || r->size < 2) ddp_opt.shard_grads = 0; /* [distributed] zero_grads */
        /* zero = 2's buckets hold at most 4 MiB: Open MPI 4.1's non-blocking reduce-scatter of
         * 2 ranks took 1.2 ms for 4 MiB here (its AllReduce 1.8) but 98 ms for 16 MiB (11.5).
         * At 2-4 ranks the reduce-scatter is dptrain's own exchange now (comm_mpi.c, linear in
         * the size: 16 MiB 3.9-4.6 ms), but Open MPI's still serves 5 ranks and more, and the
         * cap bounds the gradient memory zero_grads = ranges keeps in flight: kept. A resumed
         * choice of bucket_mb = auto (a zero = 0 run's may be larger) is capped alike. */
        double most_mb = ddp_opt.reduce_scatter ? 4 : INFINITY;
        ddp_opt.bucket_mb = fmin(ddp_opt.bucket_mb, most_mb);
        dpt_comm_set_delay(r->comm, run->bench_comm_ms_per_mb);
        t->reducer = dpt_reducer_ddp_new(t->ctx, t->model, r->comm, &ddp_opt, t->timeline, err);
        if (!t->reducer) goto fail;
        /* bucket_mb = auto resumed: the size the interrupted run chose, not measured again */
        if (!run->ddp.bucket_auto) t->state.bucket_mb = 0;
        if (!run->ddp.compression_auto) t->state.grad_compression = 0;
        dpt_reducer_plan plan = {.bucket_mb = t->state.bucket_mb, .compression = t->state.grad_compression};
        plan.bucket_mb = fmin(plan.bucket_mb, most_mb);
        if (plan.bucket_mb > 0 || plan.compression) t->reducer->ops->adopt(t->reducer, &plan);
    } else {
        t->state.bucket_mb = 0, t->state.grad_compression = 0;
    }
    if (t->reducer && t->optim && !zero_shard(t, err)) goto fail;
    /* a new run's averages start from the weights every rank holds now (rank 0's, broadcast) */
    if (dpt_model_ema(t->model) && !*r->resumed) dpt_ema_reset(t->ctx, dpt_model_ema(t->model));
    int64_t all = run->epochs * t->steps_per_epoch;
    t->total_steps = run->max_steps > 0 && run->max_steps < all ? run->max_steps : all;
    if (!dpt_lr_schedule_build(run->ini, r->size, t->steps_per_epoch, t->total_steps, &t->schedule, err)) goto fail;
    if (r->rank == 0) print_header(t);
    t->meter = dpt_tensor_new(t->ctx, 1, (int64_t[]){METER_SLOTS});
    dpt_tensor_fill_slice(t->ctx, t->meter, 0, METER_SLOTS, 0.0f);
    t->bar = progress_new(r, t->total_steps);
    t->run_start = dpt_now_s();
    t->stop = t->state.step >= t->total_steps;
    t->win = window_open(t);
    return true;

fail:
    trainer_close(t);
    return false;
}

static void trainer_close(trainer *t)
{
    dpt_tensor_free(t->meter);
    dpt_timeline_close(t->timeline);
    dpt_reducer_free(t->reducer);
    free(t->win_bucket_s);
    free(t->compute_tids);
    dpt_metrics_close(t->metrics);
    dpt_loader_free(t->test_loader);
    dpt_loader_free(t->train_loader);
    dpt_tensor_free(t->mix_labels);
    dpt_optim_free(t->optim);
    free(t->loss_settings);
    dpt_model_free(t->model);
    dpt_zero_free(t->zero); /* after the model: its parameters lived in zero's segments */
    dpt_dataset_free(t->test_set);
    dpt_dataset_free(t->train_set);
    if (t->nccl) t->nccl->ops->free(t->nccl);
    t->r->comm = t->host_comm;
    crash_report_context(NULL, t->r->rank);
    dpt_ctx_free(t->ctx);
    release_checkpoint_dir(t->r);
    dpt_profile_free(t->profile);
    free(t->trace.table);
}

/* ---------------------------------------------------------------- the step */

/* Tests ([distributed] fault), the one call site, before the step: make this rank exit or
 * hang now, or make this step's loss NaN (t->nan_loss, which the micro-batches apply). */
static void inject_fault(trainer *t)
{
    t->nan_loss = fault_now(t, FAULT_NAN);
    /* exit and hang are one-off: scripts/dptrun's restarts (DPTRUN_ATTEMPT > 0) do not meet them */
    const char *attempt = getenv("DPTRUN_ATTEMPT");
    if (attempt && atoi(attempt) > 0) return;
    bool exit_now = fault_now(t, FAULT_EXIT), hang_now = fault_now(t, FAULT_HANG);
    if (!exit_now && !hang_now) return;
    fprintf(stderr, "fault injection: rank %d %s at step %lld\n", t->r->rank, exit_now ? "exit" : "hang",
            (long long)t->state.step);
    fflush(stderr);
    if (exit_now) _exit(70); /* like a crash: not one of dpt_train_main's own exit codes */
    for (;;)
        pause();
}

static void epoch_begin(trainer *t)
{
    dpt_loader_start_epoch(t->train_loader, t->state.epoch);
    dpt_loader_skip(t->train_loader, t->state.batches_done); /* resuming mid-epoch */
    t->whole = (window){.start = dpt_now_s()};
    dpt_tensor_fill_slice(t->ctx, t->meter, METER_EPOCH, 2, 0.0f);
    if (t->carry_units > 0) { /* resumed mid-epoch: the sums so far, on rank 0 (the others' add to them) */
        if (t->r->rank == 0) {
            dpt_tensor_fill_slice(t->ctx, t->meter, METER_EPOCH, 1, (float)t->state.epoch_loss);
            dpt_tensor_fill_slice(t->ctx, t->meter, METER_EPOCH + 1, 1, (float)t->state.epoch_correct);
            t->whole.units = t->carry_units;
        }
        t->carry_units = 0;
    }
}

/* One micro-batch: forward, loss, backward (DDP's AllReduces start as buckets fill), and the
 * loss and correct counts added up on the device. */
static void micro_batch(trainer *t, bool last)
{
    const run_config *run = t->run;
    dpt_batch b;
    double t0 = dpt_now_s();
    dpt_loader_next(t->train_loader, &b);
    double t1 = dpt_now_s();
    t->win.data_s += t1 - t0;
    if (t->reducer) t->reducer->ops->micro_begin(t->reducer, t->state.step, t->micro, last);
    dpt_profile_mark(t->ctx);
    dpt_zero_forward_begin(t->zero, t->ctx, t->state.step); /* zero_overlap: ops wait for their segments */
    dpt_tensor *target = dpt_batch_get(&b, t->task.target);
    dpt_mix mix;
    dpt_tensor *partner = augment_batch(t, &b, target, &mix);
    dpt_tensor *out = dpt_model_forward_batch(t->model, t->ctx, &b, &t->task);
    dpt_tensor *loss = dpt_mix_loss(t->ctx, t->loss, t->loss_settings, out, target, partner, mix.lambda);
    if (t->nan_loss) loss = dpt_scale(t->ctx, loss, NAN);
    dpt_error err;
    if (!dpt_zero_forward_end(t->zero, t->ctx, &err)) dpt_abort_job("%s", err.msg);
    double t2 = dpt_now_s();
    /* Each micro-batch carries 1/accum of the step's mean loss (a deterministic shard its own
     * mean: the tree's sum is divided by the shard count at the end). */
    bool scale = run->accum > 1 && !run->deterministic;
    float factor = (scale ? 1.0f / (float)run->accum : 1.0f) * (run->loss_scale ? (float)t->state.loss_scale : 1.0f);
    dpt_backward(t->ctx, factor != 1.0f ? dpt_scale(t->ctx, loss, factor) : loss);
    if (t->reducer) t->reducer->ops->micro_end(t->reducer);
    double t3 = dpt_now_s();
    int64_t units = t->loss->terms(out, target);
    dpt_tensor_add_slice(t->ctx, t->meter, METER_STEP, loss, 0, 1, (float)units);
    if (t->task.metrics & DPT_METRIC_ACCURACY) /* a mixed batch: the larger share's label */
        t->loss->count_correct(t->ctx, out, partner && mix.lambda < 0.5 ? partner : target, t->meter, METER_STEP + 1);
    t->step_units += units;
    dpt_tape_clear(t->ctx);
    dpt_timeline_span(t->timeline, "data", 0, t0, t1);
    dpt_timeline_span(t->timeline, "forward", 0, t1, t2);
    dpt_timeline_span(t->timeline, "backward", 0, t2, t3);
}

/* After a non-finite gradient norm (the same on every rank): was it this rank's loss? Every
 * rank reads its own step loss, and the ranks agree so that only one whose loss went bad
 * reports it (a rank that only received the NaN through the AllReduce then waits to be
 * stopped); when no loss went bad, it was the gradients. */
static bool nonfinite_loss_is_mine(const trainer *t)
{
    const replica *r = t->r;
    float v[METER_SLOTS];
    dpt_tensor_copy_to_host(t->meter, v);
    bool mine = !isfinite(v[METER_STEP]);
    double bad = mine ? 1.0 : 0.0;
    if (r->comm && r->size > 1) dpt_comm_allreduce_f64(r->comm, &bad, 1, "non-finite loss: which ranks");
    if (bad > 0 && !mine && !t->run->skip_nonfinite)
        for (;;)
            pause(); /* the rank whose loss went bad ends the job with its message */
    return mine || (bad > 0 && r->size == 1);
}

/* [train] nonfinite: skip the step and count it, or stop the job naming the step. */
static void nonfinite_step(trainer *t)
{
    const replica *r = t->r;
    dpt_train_state *st = &t->state;
    bool loss_bad = nonfinite_loss_is_mine(t);
    /* numbered as the progress lines, the loss scaler and checkpoints number steps: this is the
     * (step + 1)-th, the one a checkpoint after it would be named by (it said "step 3" for the
     * 4th, the step after the last progress line printed with that number) */
    long long n = (long long)st->step + 1;
    if (t->run->skip_nonfinite) {
        st->skipped++;
        if (r->rank == 0)
            fprintf(stderr, "warning: step %lld skipped: non-finite %s (%lld skipped so far)\n", n,
                    loss_bad ? "loss" : "gradient", (long long)st->skipped);
    } else if (loss_bad && st->step == 0) { /* no update yet: the forward makes it, not the learning rate */
        dpt_abort_job("rank %d: loss is nan or inf in the first step (epoch %d), before any update\nHINT: the "
                      "model's forward makes it from these weights and this batch: a NaN or inf input, a log or "
                      "sqrt of a negative, a division by zero, an overflow; on a GPU also an embedding id or a "
                      "target outside its range (NaN there; the CPU names them: --set train.device=cpu)",
                      r->rank, st->epoch);
    } else if (loss_bad) {
        dpt_abort_job("rank %d: loss is nan or inf in step %lld (epoch %d)\nHINT: lower [optim] lr, set [optim] "
                      "clip_norm, or [train] nonfinite = skip",
                      r->rank, n, st->epoch);
    } else {
        dpt_abort_job("rank %d: gradient norm is %f in step %lld (epoch %d; the loss was finite)\nHINT: lower [optim] "
                      "lr, set [optim] clip_norm, or [train] nonfinite = skip",
                      r->rank, t->grad_norm, n, st->epoch);
    }
}

/* [train] loss_scale = dynamic, after the step's gradients (the same on every rank after the
 * AllReduce, so every rank takes the same decision): a non-finite one skips the step and
 * halves the scale; a scale below 1 means the gradients are not finite even unscaled, and the
 * job stops. Clean steps double it every loss_scale_growth. */
static void scaler_update(trainer *t, bool finite)
{
    dpt_train_state *st = &t->state;
    if (finite) {
        if (++st->scale_good_steps >= t->run->loss_scale_growth) st->loss_scale *= 2, st->scale_good_steps = 0;
        return;
    }
    st->scale_skips++;
    st->scale_good_steps = 0;
    st->loss_scale *= 0.5;
    if (t->r->rank == 0 && st->scale_skips <= 3)
        fprintf(stderr, "loss scale: inf or nan gradients at step %lld: step skipped, scale %g -> %g%s\n",
                (long long)st->step + 1, st->loss_scale * 2, st->loss_scale,
                st->scale_skips == 3 ? " (further back-offs are counted in the metrics' scale_skips)" : "");
    if (st->loss_scale < 1.0)
        dpt_abort_job("the loss scale fell below 1 at step %lld after %lld skipped steps: the gradients are inf or "
                      "nan even unscaled, the model diverges\nHINT: lower [optim] lr or set [optim] clip_norm; "
                      "with 16-bit numbers, [train] precision = bf16 has fp32's range and needs no loss scaling",
                      (long long)st->step + 1, (long long)st->scale_skips);
}

/* [train] ema_decay after step k = step + 1 (1-based, skipped steps counted, so a resume goes on
 * with the same numbers); ema_warmup: min(decay, (1 + k) / (10 + k)), TensorFlow's
 * ExponentialMovingAverage with num_updates, so early averages are not dominated by the start. */
static void ema_update(trainer *t)
{
    dpt_ema *ema = dpt_model_ema(t->model);
    double decay = dpt_ema_decay(ema), k = (double)(t->state.step + 1);
    if (t->run->ema_warmup && (1 + k) / (10 + k) < decay) decay = (1 + k) / (10 + k);
    dpt_ema_update(t->ctx, ema, decay);
}

/* One optimizer step: accum micro-batches, the gradient AllReduce's end, clipping, the update. */
static void train_step(trainer *t)
{
    double step_start = dpt_now_s();
    crash_report_step(t->state.step + 1);
    inject_fault(t);
    dpt_optim_set_lr(t->optim, (float)dpt_lr_at(&t->schedule, t->state.step));
    t->step_units = 0;
    for (t->micro = 0; t->micro < t->run->accum; t->micro++)
        micro_batch(t, t->micro == t->run->accum - 1);
    double t4 = dpt_now_s();
    if (t->reducer) { /* the gradients now hold the average over ranks */
        dpt_reducer_stats st;
        t->reducer->ops->finish(t->reducer, &st);
        t->win.comm_s += st.comm_s, t->win.hidden_s += st.hidden_s, t->win.exposed_s += st.exposed_s;
        t->win.comm_bytes += (double)st.bytes, t->win.bus_bytes += st.bus_factor * (double)st.bytes;
        if ((double)st.grad_bytes > t->win.grad_bytes) t->win.grad_bytes = (double)st.grad_bytes;
        if (st.bucket_s) {
            if (st.nbuckets != t->win_nbuckets) {
                free(t->win_bucket_s);
                t->win_bucket_s = calloc((size_t)st.nbuckets, sizeof *t->win_bucket_s);
                if (!t->win_bucket_s) dpt_fatal("out of host memory for the buckets' times");
                t->win_nbuckets = st.nbuckets;
            }
            for (int b = 0; b < st.nbuckets; b++)
                t->win_bucket_s[b] += st.bucket_s[b];
        }
    }
    double t5 = dpt_now_s();
    /* After the AllReduce every rank sees the same gradients, so all take the same decision
     * here: a NaN on one rank has become a NaN everywhere. A NaN or Inf loss makes the
     * gradients non-finite too, so this norm (the step's one read of the device) decides for
     * both; the loss itself is read only then, to say which. */
    bool scaled = t->run->loss_scale;
    t->grad_norm = zero_clip(t, scaled ? 1.0 / t->state.loss_scale : 1.0, t->run->clip_norm);
    if (scaled) scaler_update(t, isfinite(t->grad_norm));
    if (isfinite(t->grad_norm)) {
        dpt_optim_step(t->ctx, t->optim);
        zero_overlap_tune(t); /* zero_overlap = auto */
        double g0 = dpt_now_s(), exposed, busy;
        zero_sync_params(t); /* [distributed] zero: every rank's ranges of the parameters */
        if (dpt_model_ema(t->model)) dpt_zero_settle(t->zero), ema_update(t); /* the average reads them all */
        t->win.gather_s += dpt_now_s() - g0;
        dpt_zero_overlap_times(t->zero, &exposed, &busy); /* zero_overlap: what forwards waited, what it took */
        t->win.gather_s += exposed, t->win.gather_busy_s += busy;
        dpt_tensor_add_slice(t->ctx, t->meter, METER_WINDOW, t->meter, METER_STEP, 2, 1.0f);
        dpt_tensor_add_slice(t->ctx, t->meter, METER_EPOCH, t->meter, METER_STEP, 2, 1.0f);
        t->win.units += t->step_units, t->whole.units += t->step_units;
        t->units_trained += t->step_units;
    } else if (!scaled) {
        nonfinite_step(t);
    }
    dpt_tensor_fill_slice(t->ctx, t->meter, METER_STEP, 2, 0.0f);
    dpt_model_zero_grad(t->model);
    dpt_timeline_span(t->timeline, "wait allreduce", 0, t4, t5);
    dpt_timeline_span(t->timeline, "optimizer", 0, t5, dpt_now_s());
    if (t->reducer && t->reducer->ops->step_end) { /* [distributed] bucket_mb = auto */
        char note[1536];
        dpt_reducer_plan plan = {0};
        /* the period from the last step's end: what the ranks' waiting for each other between
         * steps (the signal agreement, the progress line) costs is part of a plan's price */
        double now = dpt_now_s(), period = now - (t->last_step_end > 0 ? t->last_step_end : step_start);
        t->last_step_end = now;
        if (t->reducer->ops->step_end(t->reducer, period, &plan, note, sizeof note)) {
            if (plan.bucket_mb > 0) t->state.bucket_mb = plan.bucket_mb;
            if (plan.compression) t->state.grad_compression = plan.compression;
            if (t->r->rank == 0 && *note) printf("%s\n", note);
            if (plan.bucket_mb > 0 || plan.compression) /* what has been decided so far */
                dpt_metrics_write(t->metrics, "\"kind\":\"bucket_tune\",\"step\":%lld,\"bucket_mb\":%g%s",
                                  (long long)t->state.step + 1, t->state.bucket_mb > 0 ? t->state.bucket_mb : t->run->ddp.bucket_mb,
                                  t->state.grad_compression == 2   ? ",\"grad_compression\":\"bf16\""
                                  : t->state.grad_compression == 1 ? ",\"grad_compression\":\"none\""
                                                                   : "");
        }
    }
}

static void evaluate_mid_epoch(trainer *t)
{
    double start = dpt_now_s();
    evaluate(t);
    log_eval(t, NULL);
    t->eval_s += dpt_now_s() - start;
    t->win.start = dpt_now_s(); /* evaluation time is not training throughput */
}

/* After step s of the epoch: the progress line, a mid-epoch evaluation, a checkpoint, and
 * whether to stop (the last step, or a signal all ranks agreed on). */
static void after_step(trainer *t, int64_t s)
{
    const run_config *run = t->run;
    dpt_train_state *st = &t->state;
    st->step++;
    t->win.steps++;
    if (t->r->args->profile) {
        if (!t->profile) { /* after the first step: its one-time set-up is not the step's cost */
            t->profile = dpt_profile_attach(t->ctx);
            dpt_profile_set_timeline(t->profile, t->timeline); /* a span per op, by layer */
            t->profile_start = dpt_now_s(), t->profile_eval_s = t->eval_s;
        } else
            t->profile_steps++;
    }
    st->batches_done = (s + 1) * run->accum;
    t->stop = st->step >= t->total_steps;
    if (signal_agreed(t->r, &t->signal_seen)) t->stop = true;
    if (t->stop) dpt_zero_settle(t->zero); /* no forward follows: the parameters whole now */
    progress_step(&t->bar, t, s + 1);
    if (st->step % run->interval == 0 || t->stop) log_window(t, s + 1);
    if (run->eval_every && st->step % run->eval_every == 0 && s + 1 < t->steps_per_epoch) evaluate_mid_epoch(t);
    if ((run->ckpt_every_steps && st->step % run->ckpt_every_steps == 0) || t->signal_seen) save_checkpoint(t, st);
}

/* The epoch's evaluation (each rank its shard of the test set, the sums combined) and its
 * checkpoint; true when the loop ends here (a signal, or max_steps mid-epoch). */
static bool epoch_end(trainer *t)
{
    dpt_train_state *st = &t->state;
    dpt_zero_settle(t->zero);
    if (t->signal_seen) return true;
    progress_end_epoch(&t->bar);
    double eval_start = dpt_now_s();
    evaluate(t);
    bool better = (t->task.metrics & DPT_METRIC_ACCURACY) ? t->test.accuracy > st->best_acc
                                                          : t->test.loss < st->best_loss;
    if (better)
        st->best_acc = (t->task.metrics & DPT_METRIC_ACCURACY) ? t->test.accuracy : -1.0,
        st->best_loss = t->test.loss, st->best_epoch = st->epoch;
    meter_read(t->meter, METER_EPOCH, &t->whole);
    log_eval(t, &t->whole);
    t->eval_s += dpt_now_s() - eval_start;
    t->win.start += dpt_now_s() - eval_start;
    if (st->batches_done < t->steps_per_epoch * t->run->accum) return true; /* stopped mid-epoch (max_steps) */
    st->batches_done = 0;
    bool stop_early = early_stop_due(t);
    dpt_train_state next = *st;
    next.epoch++;
    if (better && t->run->ckpt_best) save_best_checkpoint(t, &next);
    if (t->run->ckpt_every_epochs && st->epoch % t->run->ckpt_every_epochs == 0) save_checkpoint(t, &next);
    if (stop_early) st->epoch++; /* past this epoch, as the loop would be: the final checkpoint resumes there */
    return stop_early;
}

/* [train] early_stop after a whole epoch's evaluation: the best value of its metric so far
 * (better by more than min_delta), and whether patience epochs have passed without one. */
static bool early_stop_due(trainer *t)
{
    const run_config *run = t->run;
    dpt_train_state *st = &t->state;
    if (!run->stop_metric) return false;
    bool loss = run->stop_metric == 1;
    double v = loss ? t->test.loss : t->test.accuracy;
    if (isnan(st->stop_best) || (loss ? v < st->stop_best - run->stop_delta : v > st->stop_best + run->stop_delta)) {
        st->stop_best = v, st->stop_best_epoch = st->epoch;
        return false;
    }
    if (st->epoch - st->stop_best_epoch < run->stop_patience) return false;
    if (t->r->rank == 0) {
        char best[32], delta[32];
        snprintf(best, sizeof best, loss ? "%.4f" : "%.2f%%", loss ? st->stop_best : 100.0 * st->stop_best);
        snprintf(delta, sizeof delta, loss ? "%g" : "%g%%", loss ? run->stop_delta : 100.0 * run->stop_delta);
        report_line("early stop: test %s has not %s by more than %s for %d epoch%s (best %s, epoch %d)\n",
                    loss ? "loss" : "acc", loss ? "fallen" : "risen", delta, run->stop_patience,
                    run->stop_patience == 1 ? "" : "s", best, st->stop_best_epoch);
    }
    return true;
}
