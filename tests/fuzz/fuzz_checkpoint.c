/* fuzz_checkpoint.c: the checkpoint loader into a small MLP with AdamW state (a resume, and a
 * weights-only read), into the same keeping weight averages (a resume), the averages' read
 * (--eval --ema), and --inspect's
 * reader (dpt_checkpoint_inspect) on the same bytes. The harness
 * recomputes every CRC of the mutated input (tests/ckpt_bytes.h), so mutations reach the
 * checks behind them. DPT_FUZZ_WRITE_SEED=DIR writes a valid checkpoint of this model there.
 * An input holding the marker "\nDPTPART" is a sharded checkpoint and its one part (ZeRO's
 * [checkpoint] sharded: the optimizer state beside the file): both written as files (the part
 * under the name the file's meta gives for nonce 1, part 0 of 1) and read as a resume and by
 * --inspect, so mutations reach the parts' reader too; the seed writer writes one such pair. */
#include "tests/fuzz/fuzz_common.h"
#include "dpt.h"
#include "tests/ckpt_bytes.h"

static dpt_ctx *ctx;
static dpt_config *cfg;
static dpt_model *model;
static dpt_optim *optim;
static dpt_model *ema_model; /* the same MLP keeping weight averages ([train] ema_decay) */
static char pair_dir[64];    /* a sharded checkpoint and its part, as files */
#define PART_MARK "\nDPTPART"
static dpt_optim *ema_optim;

static void remove_pair_dir(void)
{
    char path[128], *part;
    snprintf(path, sizeof path, "%s/c.dpt", pair_dir);
    part = dpt_checkpoint_part_path(path, 1, 0, 1);
    unlink(part), unlink(path);
    free(part);
    rmdir(pair_dir);
}

/* The bytes of the file at path, onto out. */
static void append_file(FILE *out, const char *path)
{
    FILE *in = fopen(path, "rb");
    if (!in) abort();
    for (int c; (c = fgetc(in)) != EOF;)
        fputc(c, out);
    fclose(in);
}

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
        /* a sharded pair: the file, the marker, its part (one rank owning every element) */
        dpt_optim *sharded = dpt_optim_build(model, cfg, &err);
        int n = dpt_model_num_params(model);
        int64_t lo[64] = {0}, hi[64];
        for (int p = 0; p < n && p < 64; p++)
            hi[p] = dpt_tensor_numel(dpt_model_param_at(model, p));
        dpt_optim_shard(sharded, lo, hi);
        char main_path[1024];
        snprintf(main_path, sizeof main_path, "%s/mlp-adamw-sharded.tmp", seed_dir);
        char *part = dpt_checkpoint_part_path(main_path, 1, 0, 1);
        if (!dpt_checkpoint_save_part(main_path, sharded, 0, 1, 1, &err) ||
            !dpt_checkpoint_save_sharded(main_path, model, sharded, ctx, cfg, &st, 1, 1, 1, &err))
            abort();
        snprintf(path, sizeof path, "%s/mlp-adamw-sharded.dpt", seed_dir);
        FILE *out = fopen(path, "wb");
        if (!out) abort();
        append_file(out, main_path);
        fputs(PART_MARK, out);
        append_file(out, part);
        fclose(out);
        unlink(main_path), unlink(part);
        free(part);
        dpt_optim_free(sharded);
    }
    snprintf(pair_dir, sizeof pair_dir, "/tmp/dpt_fuzz_pair_XXXXXX");
    if (!mkdtemp(pair_dir)) abort();
    atexit(remove_pair_dir);
    return 0;
}

static void write_file(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
}

/* A sharded checkpoint and its part: read as a resume and by --inspect. */
static void read_pair(uint8_t *data, size_t size, size_t mark)
{
    char path[128], *part;
    snprintf(path, sizeof path, "%s/c.dpt", pair_dir);
    part = dpt_checkpoint_part_path(path, 1, 0, 1);
    size_t rest = mark + strlen(PART_MARK);
    ckpt_fix_crcs(data, mark);
    ckpt_fix_crcs(data + rest, size - rest);
    write_file(path, data, mark);
    write_file(part, data + rest, size - rest);
    dpt_error err;
    dpt_train_state st;
    err.msg[0] = '\0';
    if (dpt_checkpoint_load(path, model, optim, ctx, cfg, &st, 1, &err)) {
        if (st.epoch < 1 || st.step < 0 || st.batches_done < 0) abort();
    } else if (!err.msg[0]) {
        abort();
    }
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    err.msg[0] = '\0';
    if (!dpt_checkpoint_inspect(path, devnull, &err) && !err.msg[0]) abort();
    unlink(part), unlink(path);
    free(part);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size + 1);
    memcpy(copy, data, size);
    const uint8_t *mark = memmem(copy, size, PART_MARK, strlen(PART_MARK));
    if (mark) {
        read_pair(copy, size, (size_t)(mark - copy));
        free(copy);
        return 0;
    }
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
