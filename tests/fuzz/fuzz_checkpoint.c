/* fuzz_checkpoint.c: the checkpoint loader into a small MLP with AdamW state (a resume, and a
 * weights-only read), into the same keeping weight averages (a resume), the averages' read
 * (--eval --ema), and --inspect's
 * reader (dpt_checkpoint_inspect) on the same bytes. The harness
 * recomputes every CRC of the mutated input (tests/ckpt_bytes.h), so mutations reach the
 * checks behind them. DPT_FUZZ_WRITE_SEED=DIR writes a valid checkpoint of this model there. */
#include "tests/fuzz/fuzz_common.h"
#include "dpt.h"
#include "tests/ckpt_bytes.h"

static dpt_ctx *ctx;
static dpt_config *cfg;
static dpt_model *model;
static dpt_optim *optim;
static dpt_model *ema_model; /* the same MLP keeping weight averages ([train] ema_decay) */
static dpt_optim *ema_optim;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    dpt_error err;
    dpt_ctx_options opt = {.device = {DPT_DEVICE_CPU, 0}, .threads = 1, .seed = 1};
    ctx = dpt_ctx_new(&opt, &err);
    cfg = dpt_config_defaults();
    if (!ctx || !dpt_config_set(cfg, "model.hidden=8,5", &err)) abort();
    model = dpt_model_build(ctx, cfg, 1, 4, 4, 3, &err);
    optim = model ? dpt_optim_build(model, cfg, &err) : NULL;
    ema_model = dpt_model_build(ctx, cfg, 1, 4, 4, 3, &err);
    ema_optim = ema_model ? dpt_optim_build(ema_model, cfg, &err) : NULL;
    if (!optim || !ema_optim) abort();
    dpt_ema_new(ctx, ema_model, 0.9);
    const char *seed_dir = getenv("DPT_FUZZ_WRITE_SEED");
    if (seed_dir) {
        char path[1024];
        snprintf(path, sizeof path, "%s/mlp-adamw.dpt", seed_dir);
        dpt_train_state st = {
            .epoch = 2, .batches_done = 3, .step = 40, .skipped = 1, .best_acc = 0.5, .best_epoch = 1};
        if (!dpt_checkpoint_save(path, model, optim, ctx, cfg, &st, 1, &err)) abort();
        snprintf(path, sizeof path, "%s/mlp-adamw-ema.dpt", seed_dir);
        if (!dpt_checkpoint_save(path, ema_model, ema_optim, ctx, cfg, &st, 1, &err)) abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size + 1);
    memcpy(copy, data, size);
    ckpt_fix_crcs(copy, size);
    char path[64];
    int fd = fuzz_file(copy, size, path, sizeof path);
    dpt_error err;
    dpt_train_state st;
    if (dpt_checkpoint_load(path, model, optim, ctx, cfg, &st, 1, &err)) {
        if (st.epoch < 1 || st.step < 0 || st.batches_done < 0) abort(); /* accepted: sane */
    } else if (!err.msg[0]) {
        abort();
    }
    err.msg[0] = '\0'; /* weights only (--sample, --eval): the optimizer's records left compressed */
    if (dpt_checkpoint_load(path, model, optim, ctx, NULL, &st, 1, &err)) {
        if (st.epoch < 1 || st.step < 0) abort();
    } else if (!err.msg[0]) {
        abort();
    }
    err.msg[0] = '\0'; /* a resume keeping averages; the averages in the weights' place */
    if (!dpt_checkpoint_load(path, ema_model, ema_optim, ctx, cfg, &st, 1, &err) && !err.msg[0]) abort();
    err.msg[0] = '\0';
    if (!dpt_checkpoint_load_averages(path, model, ctx, &st, &err) && !err.msg[0]) abort();
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    err.msg[0] = '\0';
    if (!dpt_checkpoint_inspect(path, devnull, &err) && !err.msg[0]) abort();
    close(fd);
    free(copy);
    return 0;
}
