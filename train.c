/* train.c: ./train CONFIG [--set section.key=value ...]. Reads top to bottom as the training
 * loop: config -> context -> data -> model -> optimizer -> for each step: batch, forward,
 * backward, step, log. The machinery lives in runtime/, layers/, optim/, data/, models/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt.h"
#include "data/data.h"
#include "runtime/log.h"

typedef struct cli {
    const char *config_path;
    const char *sets[64];
    int nsets;
    bool dry_run;
} cli;

static void usage(FILE *out);
static int parse_cli(int argc, char **argv, cli *args);
static dpt_config *load_config(const cli *args);
static void print_header(const cli *args, const dpt_config *cfg, const dpt_ctx *ctx,
                         const dpt_model *model, const dpt_optim *optim, const dpt_dataset *train,
                         const dpt_dataset *test, const dpt_loader *loader, int64_t batch);
static int fail(const dpt_error *err);

int main(int argc, char **argv)
{
    cli args;
    int rc = parse_cli(argc, argv, &args);
    if (rc >= 0) return rc;

    /* ---- config, context, data, model, optimizer */
    dpt_error err;
    dpt_config *cfg = load_config(&args);
    if (!cfg) return 1;
    dpt_ctx_options ctx_opt = {
        .device = {DPT_DEVICE_CPU, 0},
        .threads = (int)dpt_config_int(cfg, "train", "threads"),
        .seed = (uint64_t)dpt_config_int(cfg, "train", "seed"),
    };
    dpt_ctx *ctx = dpt_ctx_new(&ctx_opt, &err);
    if (!ctx) return fail(&err);
    dpt_dataset *train_set, *test_set;
    if (!dpt_data_open(cfg, &train_set, &test_set, &err)) return fail(&err);
    dpt_model *model = dpt_model_build(ctx, cfg, train_set->c, train_set->h, train_set->w,
                                       train_set->num_classes, &err);
    if (!model) return fail(&err);
    dpt_optim *optim = dpt_optim_build(model, cfg, &err);
    if (!optim) return fail(&err);
    dpt_metrics *metrics = dpt_metrics_open(dpt_config_str(cfg, "log", "metrics"), &err);
    if (!metrics) return fail(&err);

    int64_t batch = dpt_config_int(cfg, "train", "batch");
    dpt_loader_options train_opt = {
        .batch = batch,
        .shuffle = dpt_config_bool(cfg, "data", "shuffle"),
        .drop_last = dpt_config_bool(cfg, "data", "drop_last"),
        .seed = (uint64_t)dpt_config_int(cfg, "train", "seed"),
        .rank = 0,
        .world_size = 1,
        .mean = (float)dpt_config_float(cfg, "data", "mean"),
        .std = (float)dpt_config_float(cfg, "data", "std"),
        .limit = dpt_config_int(cfg, "data", "train_limit"),
    };
    dpt_loader_options test_opt = train_opt;
    test_opt.batch = dpt_config_int(cfg, "train", "eval_batch");
    test_opt.shuffle = false;
    test_opt.drop_last = false; /* every test sample counts exactly once */
    test_opt.limit = dpt_config_int(cfg, "data", "test_limit");
    dpt_loader *train_loader = dpt_loader_new(ctx, train_set, &train_opt);
    dpt_loader *test_loader = dpt_loader_new(ctx, test_set, &test_opt);
    if (dpt_loader_num_batches(train_loader) == 0) {
        dpt_errorf(&err, "the training set has %lld samples, fewer than one batch of %lld with "
                         "drop_last = true\nHINT: lower [train] batch or set [data] drop_last = false",
                   (long long)dpt_loader_num_samples(train_loader), (long long)batch);
        return fail(&err);
    }
    print_header(&args, cfg, ctx, model, optim, train_set, test_set, train_loader, batch);
    if (args.dry_run) {
        dpt_config_print(cfg, stdout);
        return 0;
    }

    /* ---- the training loop */
    int epochs = (int)dpt_config_int(cfg, "train", "epochs");
    int64_t max_steps = dpt_config_int(cfg, "train", "max_steps");
    int64_t interval = dpt_config_int(cfg, "log", "interval");
    float label_smoothing = (float)dpt_config_float(cfg, "train", "label_smoothing");
    int64_t steps_per_epoch = dpt_loader_num_batches(train_loader);
    int64_t step = 0;
    double run_start = dpt_now_s(), best_acc = -1.0;
    int best_epoch = 0, epoch = 0;
    dpt_eval_result test = {0};
    bool stop = false;
    for (epoch = 1; epoch <= epochs && !stop; epoch++) {
        dpt_loader_start_epoch(train_loader, epoch);
        double epoch_start = dpt_now_s(), window_start = epoch_start, epoch_loss = 0.0;
        double window_loss = 0.0;
        int64_t window_correct = 0, window_samples = 0, epoch_correct = 0, epoch_samples = 0;
        dpt_batch b;
        while (!stop && dpt_loader_next(train_loader, &b)) {
            dpt_tensor *logits = dpt_model_forward(model, ctx, b.x);
            dpt_tensor *loss = dpt_cross_entropy(ctx, logits, b.labels, label_smoothing);
            dpt_backward(ctx, loss);
            dpt_optim_step(ctx, optim);
            dpt_model_zero_grad(model);

            float loss_value = dpt_tensor_item(loss);
            int64_t correct = dpt_count_correct(ctx, logits, b.labels);
            dpt_tape_clear(ctx);
            step++;
            window_loss += (double)loss_value * (double)b.size;
            window_correct += correct;
            window_samples += b.size;
            epoch_loss += (double)loss_value * (double)b.size;
            epoch_correct += correct;
            epoch_samples += b.size;
            stop = max_steps > 0 && step >= max_steps;
            int64_t step_in_epoch = (step - 1) % steps_per_epoch + 1;
            if (step % interval == 0 || stop) {
                double now = dpt_now_s();
                double img_s = (double)window_samples / (now - window_start);
                printf("epoch %d | step %6lld/%lld | loss %.4f | acc %5.1f%% | %8.0f img/s\n", epoch,
                       (long long)step_in_epoch, (long long)steps_per_epoch,
                       window_loss / (double)window_samples,
                       100.0 * (double)window_correct / (double)window_samples, img_s);
                fflush(stdout);
                dpt_metrics_write(metrics,
                                  "\"kind\":\"train\",\"epoch\":%d,\"step\":%lld,\"lr\":%g,"
                                  "\"loss\":%.6f,\"acc\":%.6f,\"img_s\":%.1f,\"step_ms\":%.3f",
                                  epoch, (long long)step, (double)dpt_optim_lr(optim),
                                  window_loss / (double)window_samples,
                                  (double)window_correct / (double)window_samples, img_s,
                                  1e3 * (now - window_start) * (double)b.size / (double)window_samples);
                window_start = now;
                window_loss = 0.0;
                window_correct = window_samples = 0;
            }
        }
        double train_time = dpt_now_s() - epoch_start;
        test = dpt_evaluate(ctx, model, test_loader);
        if (test.accuracy > best_acc) best_acc = test.accuracy, best_epoch = epoch;
        printf("epoch %d done | %.1f s | train loss %.4f acc %.1f%% | test loss %.4f acc %.2f%%\n",
               epoch, train_time, epoch_loss / (double)epoch_samples,
               100.0 * (double)epoch_correct / (double)epoch_samples, test.loss, 100.0 * test.accuracy);
        fflush(stdout);
        dpt_metrics_write(metrics,
                          "\"kind\":\"eval\",\"epoch\":%d,\"step\":%lld,\"test_loss\":%.6f,"
                          "\"test_acc\":%.6f,\"train_loss\":%.6f,\"train_acc\":%.6f,\"epoch_s\":%.3f",
                          epoch, (long long)step, test.loss, test.accuracy,
                          epoch_loss / (double)epoch_samples,
                          (double)epoch_correct / (double)epoch_samples, train_time);
    }
    double total = dpt_now_s() - run_start;
    printf("done | %d epochs | %lld steps | %.1f s | best test acc %.2f%% (epoch %d) | final test acc %.2f%%\n",
           epoch - 1, (long long)step, total, 100.0 * best_acc, best_epoch, 100.0 * test.accuracy);

    dpt_metrics_close(metrics);
    dpt_loader_free(test_loader);
    dpt_loader_free(train_loader);
    dpt_optim_free(optim);
    dpt_model_free(model);
    dpt_dataset_free(test_set);
    dpt_dataset_free(train_set);
    dpt_ctx_free(ctx);
    dpt_config_free(cfg);
    return 0;
}

/* ---------------------------------------------------------------- helpers */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ./train CONFIG [--set section.key=value ...] [--dry-run]\n"
            "       ./train --config-reference | --help | --version\n"
            "\n"
            "Trains the model that the INI file CONFIG describes (see docs/config.md).\n"
            "\n"
            "  --set section.key=value  override one config key (repeatable), e.g. --set train.batch=128\n"
            "  --dry-run                load everything, print the resolved config, and exit\n"
            "  --config-reference       print every section and key as Markdown\n"
            "  --version                print the version\n"
            "  --help                   this text\n"
            "\n"
            "example: ./train configs/fmnist_mlp.ini --set train.epochs=1\n");
}

/* Returns an exit code to stop with, or -1 to go on training. */
static int parse_cli(int argc, char **argv, cli *args)
{
    memset(args, 0, sizeof *args);
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
    if (!args->config_path) {
        fprintf(stderr, "error: no config file given\n\n");
        usage(stderr);
        return 2;
    }
    return -1;
}

static dpt_config *load_config(const cli *args)
{
    dpt_error err;
    dpt_config *cfg = dpt_config_load(args->config_path, &err);
    if (!cfg) {
        fail(&err);
        return NULL;
    }
    for (int i = 0; i < args->nsets; i++) {
        if (!dpt_config_set(cfg, args->sets[i], &err)) {
            fail(&err);
            dpt_config_free(cfg);
            return NULL;
        }
    }
    return cfg;
}

static void print_header(const cli *args, const dpt_config *cfg, const dpt_ctx *ctx,
                         const dpt_model *model, const dpt_optim *optim, const dpt_dataset *train,
                         const dpt_dataset *test, const dpt_loader *loader, int64_t batch)
{
    printf("dptrain %s | config %s (hash %016llx)\n", DPT_VERSION, args->config_path,
           (unsigned long long)dpt_config_hash(cfg));
    printf("model %s %s | %lld parameters\n", dpt_model_name(model), dpt_model_summary(model),
           (long long)dpt_model_param_count(model));
    printf("device cpu | %d threads | 1 rank | batch %lld per rank (%lld global)\n",
           dpt_ctx_threads(ctx), (long long)batch, (long long)batch);
    printf("data %s | train %lld of %lld | test %lld | %dx%dx%d | %d classes | %lld steps/epoch\n",
           dpt_config_str(cfg, "data", "dir"), (long long)dpt_loader_num_samples(loader),
           (long long)train->n, (long long)test->n, (int)train->c, (int)train->h, (int)train->w,
           train->num_classes, (long long)dpt_loader_num_batches(loader));
    printf("optim %s | lr %g\n", dpt_optim_name(optim), (double)dpt_optim_lr(optim));
    fflush(stdout);
}

static int fail(const dpt_error *err)
{
    fprintf(stderr, "error: %s\n", err->msg);
    return 1;
}
