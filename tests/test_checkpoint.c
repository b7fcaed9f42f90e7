/* test_checkpoint.c: checkpoints round-trip every tensor and state bit; every kind of damage
 * (truncation at any length, any flipped byte, another version, another model or optimizer)
 * is a clear error that changes nothing; a crash mid-write leaves the previous file intact. */
#include <dirent.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/testutil.h"
#include "tests/ckpt_bytes.h"
#include "runtime/ctx.h"
#include "runtime/error.h"

static char dir[256];

static int setup(void **state)
{
    (void)state;
    return test_mkdtemp(dir, sizeof dir, "dpt_test_ckpt");
}

static int teardown(void **state)
{
    (void)state;
    return test_rmrf(dir);
}

typedef struct run {
    dpt_config *cfg;
    dpt_ctx *ctx;
    dpt_model *model;
    dpt_optim *optim;
} run;

static run make_run(const char *hidden, const char *optim, uint64_t seed)
{
    run r;
    dpt_error err;
    char set[64];
    r.cfg = dpt_config_defaults();
    snprintf(set, sizeof set, "model.hidden=%s", hidden);
    assert_true(dpt_config_set(r.cfg, set, &err));
    snprintf(set, sizeof set, "optim.name=%s", optim);
    assert_true(dpt_config_set(r.cfg, set, &err));
    r.ctx = test_ctx(1, seed);
    r.model = dpt_model_build(r.ctx, r.cfg, 1, 4, 4, 3, &err);
    r.optim = dpt_optim_build(r.model, r.cfg, &err);
    return r;
}

/* A few optimizer steps on random data so that every state tensor is non-trivial. */
static void train_a_little(run *r)
{
    dpt_rng rng;
    dpt_rng_seed(&rng, 5);
    dpt_tensor *x = test_input(r->ctx, &rng, 4, (int64_t[]){6, 1, 4, 4}, -1, 1);
    x->requires_grad = false;
    int32_t labels[6] = {0, 1, 2, 2, 1, 0};
    for (int s = 0; s < 3; s++) {
        dpt_backward(r->ctx, dpt_cross_entropy(r->ctx, dpt_model_forward(r->model, r->ctx, x), labels, 0.0f));
        dpt_optim_step(r->ctx, r->optim);
        dpt_model_zero_grad(r->model);
        dpt_tape_clear(r->ctx);
    }
    dpt_rng_next(&r->ctx->rng);
    dpt_tensor_free(x);
}

static void free_run(run *r)
{
    dpt_optim_free(r->optim);
    dpt_model_free(r->model);
    dpt_ctx_free(r->ctx);
    dpt_config_free(r->cfg);
}

static const dpt_train_state some_state = {
    .epoch = 3, .batches_done = 17, .step = 1234, .skipped = 2, .best_acc = 0.875, .best_epoch = 2};

static void save(run *r, const char *path)
{
    dpt_error err;
    if (!dpt_checkpoint_save(path, r->model, r->optim, r->ctx, r->cfg, &some_state, 1, &err))
        fail_msg("%s", err.msg);
}

/* The small AdamW MLP trained a little and saved as dir/name (path gets the file's path). */
static run saved_run(const char *name, char *path, size_t cap)
{
    run a = make_run("8,5", "adamw", 1);
    train_a_little(&a);
    snprintf(path, cap, "%s/%s", dir, name);
    save(&a, path);
    return a;
}

static void assert_same_state(run *a, run *b)
{
    for (int i = 0; i < dpt_model_num_params(a->model); i++) {
        dpt_tensor *pa = dpt_model_param_at(a->model, i), *pb = dpt_model_param_at(b->model, i);
        assert_memory_equal(pa->data, pb->data, (size_t)pa->numel * sizeof(float));
    }
    assert_int_equal(dpt_optim_num_state(a->optim), dpt_optim_num_state(b->optim));
    for (int i = 0; i < dpt_optim_num_state(a->optim); i++)
        assert_memory_equal(dpt_optim_state_at(a->optim, i)->data, dpt_optim_state_at(b->optim, i)->data,
                            (size_t)dpt_optim_state_at(a->optim, i)->numel * sizeof(float));
    assert_int_equal(dpt_optim_steps(a->optim), dpt_optim_steps(b->optim));
    assert_memory_equal(a->ctx->rng.s, b->ctx->rng.s, sizeof a->ctx->rng.s);
}

static void test_round_trip(void **state)
{
    (void)state;
    for (int o = 0; o < 2; o++) {
        const char *optim = o ? "sgd" : "adamw";
        run a = make_run("8,5", optim, 1), b = make_run("8,5", optim, 2);
        train_a_little(&a);
        char path[300];
        snprintf(path, sizeof path, "%s/rt-%s.dpt", dir, optim);
        save(&a, path);
        dpt_train_state st = {0};
        dpt_error err;
        if (!dpt_checkpoint_load(path, b.model, b.optim, b.ctx, b.cfg, &st, 1, &err)) fail_msg("%s", err.msg);
        assert_same_state(&a, &b);
        assert_int_equal(st.epoch, 3);
        assert_int_equal(st.batches_done, 17);
        assert_int_equal(st.step, 1234);
        assert_int_equal(st.skipped, 2);
        assert_true(st.best_acc == 0.875);
        assert_int_equal(st.best_epoch, 2);
        free_run(&a);
        free_run(&b);
    }
}

static uint8_t *read_all(const char *path, size_t *len);
static void write_all(const char *path, const uint8_t *buf, size_t len);
/* Weight averages (dpt_ema): an update is decay * avg + (1 - decay) * w in float (recomputed
 * here in double, within float's rounding); a swap there and back leaves every bit where it was;
 * a checkpoint carries them to a resume, --eval --ema's load puts them in the weights' place, a
 * run without averages reads the file as before, and a file without them is refused for --ema. */
static void test_weight_averages(void **state)
{
    (void)state;
    run a = make_run("8,5", "adamw", 1), b = make_run("8,5", "adamw", 2), c = make_run("8,5", "adamw", 3);
    const double decay = 0.75;
    dpt_ema *ema = dpt_ema_new(a.ctx, a.model, decay);
    int n = dpt_ema_count(ema), np = dpt_model_num_params(a.model);
    assert_int_equal(n, np + dpt_model_num_buffers(a.model));
    float *before = NULL;
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (size_t)dpt_ema_at(ema, i)->numel;
    before = malloc(total * sizeof *before);
    assert_non_null(before);
    for (int i = 0, at = 0; i < np; i++) { /* the start: the weights */
        dpt_tensor *p = dpt_model_param_at(a.model, i);
        assert_memory_equal(dpt_ema_at(ema, i)->data, p->data, (size_t)p->numel * sizeof(float));
        memcpy(before + at, p->data, (size_t)p->numel * sizeof(float)), at += (int)p->numel;
    }
    train_a_little(&a); /* moves the weights, not the averages */
    dpt_ema_update(a.ctx, ema, dpt_ema_decay(ema));
    for (int i = 0, at = 0; i < np; i++) {
        const float *w = dpt_model_param_at(a.model, i)->data, *avg = dpt_ema_at(ema, i)->data;
        for (int64_t k = 0; k < dpt_ema_at(ema, i)->numel; k++, at++) {
            double want = decay * (double)before[at] + (1 - decay) * (double)w[k];
            assert_true(fabs((double)avg[k] - want) <= 4 * FLT_EPSILON * (fabs(before[at]) + fabs(w[k])));
        }
    }
    /* a swap there and back: bit for bit */
    float *weights = malloc(total * sizeof *weights), *averages = malloc(total * sizeof *averages);
    assert_true(weights && averages);
    for (int i = 0, at = 0; i < np; i++) {
        memcpy(weights + at, dpt_model_param_at(a.model, i)->data, (size_t)dpt_ema_at(ema, i)->numel * sizeof(float));
        memcpy(averages + at, dpt_ema_at(ema, i)->data, (size_t)dpt_ema_at(ema, i)->numel * sizeof(float));
        at += (int)dpt_ema_at(ema, i)->numel;
    }
    dpt_ema_swap(a.ctx, ema);
    for (int i = 0, at = 0; i < np; i++) {
        assert_memory_equal(dpt_model_param_at(a.model, i)->data, averages + at,
                            (size_t)dpt_ema_at(ema, i)->numel * sizeof(float));
        at += (int)dpt_ema_at(ema, i)->numel;
    }
    dpt_ema_swap(a.ctx, ema);
    for (int i = 0, at = 0; i < np; i++) {
        assert_memory_equal(dpt_model_param_at(a.model, i)->data, weights + at,
                            (size_t)dpt_ema_at(ema, i)->numel * sizeof(float));
        assert_memory_equal(dpt_ema_at(ema, i)->data, averages + at, (size_t)dpt_ema_at(ema, i)->numel * sizeof(float));
        at += (int)dpt_ema_at(ema, i)->numel;
    }
    /* a resume into a run keeping averages gets them; one without reads the same file */
    char path[300], plain[300];
    snprintf(path, sizeof path, "%s/ema.dpt", dir);
    save(&a, path);
    dpt_ema *emb = dpt_ema_new(b.ctx, b.model, decay);
    dpt_train_state st = {0};
    dpt_error err;
    if (!dpt_checkpoint_load(path, b.model, b.optim, b.ctx, b.cfg, &st, 1, &err)) fail_msg("%s", err.msg);
    assert_same_state(&a, &b);
    for (int i = 0; i < n; i++)
        assert_memory_equal(dpt_ema_at(emb, i)->data, dpt_ema_at(ema, i)->data,
                            (size_t)dpt_ema_at(ema, i)->numel * sizeof(float));
    if (!dpt_checkpoint_load(path, c.model, c.optim, c.ctx, c.cfg, &st, 1, &err)) fail_msg("%s", err.msg);
    assert_same_state(&a, &c);
    /* --eval --ema: the averages in the weights' place */
    if (!dpt_checkpoint_load_averages(path, c.model, c.ctx, &st, &err)) fail_msg("%s", err.msg);
    for (int i = 0, at = 0; i < np; i++) {
        assert_memory_equal(dpt_model_param_at(c.model, i)->data, averages + at,
                            (size_t)dpt_ema_at(ema, i)->numel * sizeof(float));
        at += (int)dpt_ema_at(ema, i)->numel;
    }
    /* a file without averages: refused for --ema, its weights for a resume keeping them */
    snprintf(plain, sizeof plain, "%s/plain.dpt", dir);
    save(&c, plain);
    assert_false(dpt_checkpoint_load_averages(plain, c.model, c.ctx, &st, &err));
    assert_non_null(strstr(err.msg, "holds no weight averages"));
    free(before), free(weights), free(averages);
    free_run(&a);
    free_run(&b);
    free_run(&c);
}


/* Weights only (cfg NULL: --sample, --eval, --export): the parameters and buffers arrive bit for
 * bit whatever the optimizer (an AdamW checkpoint into an SGD run), which keeps its own state;
 * a resume (cfg given) into that run is still refused for the optimizer, and a weights-only
 * read of a file whose optimizer record is damaged still fails its CRC. */
static void test_weights_only(void **state)
{
    (void)state;
    char path[300];
    run a = saved_run("weights.dpt", path, sizeof path), b = make_run("8,5", "sgd", 2);
    train_a_little(&b);
    dpt_train_state st = {0};
    dpt_error err;
    int64_t sgd_steps = dpt_optim_steps(b.optim);
    dpt_tensor *mom = dpt_optim_state_at(b.optim, 0);
    float *before = malloc((size_t)mom->numel * sizeof *before);
    memcpy(before, mom->data, (size_t)mom->numel * sizeof *before);
    assert_false(dpt_checkpoint_load(path, b.model, b.optim, b.ctx, b.cfg, &st, 1, &err));
    assert_contains(err.msg, "holds adamw optimizer state");
    if (!dpt_checkpoint_load(path, b.model, b.optim, b.ctx, NULL, &st, 1, &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < dpt_model_num_params(a.model); i++) {
        dpt_tensor *pa = dpt_model_param_at(a.model, i), *pb = dpt_model_param_at(b.model, i);
        assert_memory_equal(pa->data, pb->data, (size_t)pa->numel * sizeof(float));
    }
    assert_memory_equal(before, mom->data, (size_t)mom->numel * sizeof *before);
    assert_int_equal(dpt_optim_steps(b.optim), sgd_steps);
    assert_int_equal(st.step, 1234);
    /* the last optimizer record's payload, one byte flipped: its CRC fails even unread */
    size_t len;
    uint8_t *buf = read_all(path, &len);
    buf[len - 8 - 4 - 10] ^= 0x40;
    write_all(path, buf, len);
    free(buf);
    assert_false(dpt_checkpoint_load(path, b.model, b.optim, b.ctx, NULL, &st, 1, &err));
    assert_contains(err.msg, "CRC mismatch in record");
    assert_contains(err.msg, "optim/");
    free(before);
    free_run(&a);
    free_run(&b);
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(*len);
    assert_int_equal(fread(buf, 1, *len, f), *len);
    fclose(f);
    return buf;
}

static void write_all(const char *path, const uint8_t *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
}

/* Loading `path` into a fresh run must fail with `needle` and leave the run untouched. */
static void expect_load_error(const char *path, const char *hidden, const char *optim, const char *needle)
{
    run b = make_run(hidden, optim, 2), pristine = make_run(hidden, optim, 2);
    dpt_train_state st = {0};
    dpt_error err;
    bool ok = dpt_checkpoint_load(path, b.model, b.optim, b.ctx, b.cfg, &st, 1, &err);
    if (ok) fail_msg("loading %s succeeded, expected an error containing \"%s\"", path, needle);
    if (needle) assert_contains(err.msg, needle);
    assert_same_state(&b, &pristine);
    free_run(&b);
    free_run(&pristine);
}

static void test_damage(void **state)
{
    (void)state;
    char good[300], bad[300];
    run a = saved_run("good.dpt", good, sizeof good);
    snprintf(bad, sizeof bad, "%s/bad.dpt", dir);
    size_t len;
    uint8_t *buf = read_all(good, &len);
    /* truncated at every length from 0 to len-1 in steps */
    for (size_t cut = 0; cut < len; cut += len / 23 + 1) {
        write_all(bad, buf, cut);
        expect_load_error(bad, "8,5", "adamw", NULL);
    }
    write_all(bad, buf, len - 1);
    expect_load_error(bad, "8,5", "adamw", "end marker");
    /* every byte flipped somewhere */
    int flips = 0;
    for (size_t pos = 0; pos < len; pos += 7, flips++) {
        buf[pos] ^= 0x10;
        write_all(bad, buf, len);
        buf[pos] ^= 0x10;
        expect_load_error(bad, "8,5", "adamw", NULL);
    }
    print_message("%d truncations and %d byte flips of a %zu-byte checkpoint: all rejected\n",
                  (int)(len / (len / 23 + 1)) + 1, flips, len);
    /* another format version (with a valid header CRC) */
    uint32_t version = 99;
    memcpy(buf + 8, &version, 4);
    uint32_t crc = (uint32_t)crc32(0L, buf, 16);
    memcpy(buf + 16, &crc, 4);
    write_all(bad, buf, len);
    expect_load_error(bad, "8,5", "adamw", "format version 99");
    /* not a checkpoint at all */
    write_all(bad, (const uint8_t *)"hello world, this is text", 25);
    expect_load_error(bad, "8,5", "adamw", "not a dptrain checkpoint");
    /* another model, another optimizer */
    expect_load_error(good, "16,5", "adamw",
                      "param/fc1.weight has shape (8, 16) in the checkpoint but (16, 16)");
    expect_load_error(good, "8", "adamw", "in the checkpoint but");
    expect_load_error(good, "8,5,4", "adamw",
                      "param/fc3.weight has shape (3, 5) in the checkpoint but (4, 5)");
    expect_load_error(good, "8,5", "sgd", "holds adamw optimizer state; the config asks for sgd");
    free(buf);
    free_run(&a);
}

/* The records of a valid file, decompressed where zlib'd (names and data point into *store). */
static int split_records(const uint8_t *buf, size_t len, ckpt_rec *recs, int max, uint8_t ***store)
{
    uint32_t n = (uint32_t)ckpt_le(buf + 12, 4);
    assert_true((int)n <= max);
    *store = calloc(2 * n, sizeof **store);
    size_t pos = 20;
    for (uint32_t i = 0; i < n; i++) {
        ckpt_rec *r = &recs[i];
        memset(r, 0, sizeof *r);
        r->kind = (uint32_t)ckpt_le(buf + pos, 4);
        uint32_t name_len = (uint32_t)ckpt_le(buf + pos + 4, 4);
        char *name = calloc(name_len + 1, 1);
        memcpy(name, buf + pos + 8, name_len);
        (*store)[2 * i] = (uint8_t *)name;
        r->name = name;
        pos += 8 + name_len;
        r->ndim = (int)ckpt_le(buf + pos, 4);
        pos += 4;
        for (int d = 0; d < r->ndim; d++, pos += 8)
            r->dims[d] = (int64_t)ckpt_le(buf + pos, 8);
        r->raw_bytes = ckpt_le(buf + pos, 8);
        uLongf comp = (uLongf)ckpt_le(buf + pos + 8, 8), got = (uLongf)r->raw_bytes;
        pos += 16;
        uint8_t *raw = malloc(r->raw_bytes + 1);
        if (r->kind == 3) /* stored as it is */
            memcpy(raw, buf + pos, r->raw_bytes);
        else
            assert_int_equal(uncompress(raw, &got, buf + pos, comp), Z_OK);
        raw[r->raw_bytes] = '\0'; /* blobs are text */
        (*store)[2 * i + 1] = raw;
        r->raw = raw;
        pos += comp + 4;
    }
    return (int)n;
}

static void free_store(uint8_t **store, int n)
{
    for (int i = 0; i < 2 * n; i++)
        free(store[i]);
    free(store);
}

/* Rebuild `good` with one meta line replaced by `line` (key=value) and expect `needle`. */
/* good's records written to bad with the meta line of line's key replaced by line. */
static void write_meta_line(const uint8_t *good, size_t len, const char *bad, const char *line)
{
    ckpt_rec recs[64];
    uint8_t **store;
    int n = split_records(good, len, recs, 64, &store);
    assert_string_equal(recs[0].name, "meta");
    char meta[2048] = "";
    size_t klen = strcspn(line, "=");
    for (const char *l = recs[0].raw; *l;) {
        const char *nl = strchr(l, '\n');
        size_t ll = nl ? (size_t)(nl - l) + 1 : strlen(l);
        if (!strncmp(l, line, klen + 1))
            snprintf(meta + strlen(meta), sizeof meta - strlen(meta), "%s\n", line);
        else
            snprintf(meta + strlen(meta), sizeof meta - strlen(meta), "%.*s", (int)ll, l);
        l += ll;
    }
    recs[0].raw = meta, recs[0].raw_bytes = strlen(meta);
    uint8_t *out;
    size_t out_len = ckpt_build(recs, n, &out);
    write_all(bad, out, out_len);
    free(out);
    free_store(store, n);
}

static void expect_meta_error(const uint8_t *good, size_t len, const char *bad, const char *line,
                              const char *needle)
{
    write_meta_line(good, len, bad, line);
    expect_load_error(bad, "8,5", "adamw", needle);
}

/* Files of the earlier format (tensors zlib-compressed, kind 1) load to the same state as the
 * stored ones this build writes; a stored tensor whose stored size is not its raw size is
 * refused naming it. */
static void test_compressed_tensors(void **state)
{
    (void)state;
    char path[300], old[300];
    run a = saved_run("stored.dpt", path, sizeof path);
    snprintf(old, sizeof old, "%s/compressed.dpt", dir);
    size_t len;
    uint8_t *buf = read_all(path, &len);
    ckpt_rec recs[64];
    uint8_t **store;
    int n = split_records(buf, len, recs, 64, &store), tensors = 0;
    for (int i = 0; i < n; i++)
        if (recs[i].kind == 3) recs[i].kind = 1, tensors++;
    assert_int_equal(tensors, n - 3);
    uint8_t *out;
    size_t out_len = ckpt_build(recs, n, &out);
    write_all(old, out, out_len);
    free(out);
    run b = make_run("8,5", "adamw", 2);
    dpt_train_state st = {0};
    dpt_error err;
    if (!dpt_checkpoint_load(old, b.model, b.optim, b.ctx, b.cfg, &st, 1, &err)) fail_msg("%s", err.msg);
    assert_same_state(&a, &b);
    /* a stored record claiming one byte more than it holds */
    for (int i = 0; i < n; i++)
        recs[i].kind = recs[i].kind == 1 ? 3 : recs[i].kind;
    recs[4].comp = recs[4].raw, recs[4].comp_bytes = recs[4].raw_bytes;
    recs[4].raw_bytes += 1;
    out_len = ckpt_build(recs, n, &out);
    write_all(old, out, out_len);
    free(out);
    char needle[200];
    snprintf(needle, sizeof needle, "stored record %s claims %zu bytes in %zu", recs[4].name, recs[4].raw_bytes,
             recs[4].comp_bytes);
    expect_load_error(old, "8,5", "adamw", needle);
    free_store(store, n);
    free(buf);
    free_run(&a);
    free_run(&b);
}

/* Files crafted as an attacker would: every CRC valid, the content wrong. */
static void test_hostile(void **state)
{
    (void)state;
    char bad[300], good[300];
    snprintf(bad, sizeof bad, "%s/hostile.dpt", dir);
    snprintf(good, sizeof good, "%s/good2.dpt", dir);
    /* A record whose zlib data is garbage: the error names the record (this read freed
     * memory once: ASan and valgrind runs of this test catch a return of that). */
    ckpt_rec junk = {
        .kind = 2, .name = "meta", .raw_bytes = 100, .comp = "not zlib at all", .comp_bytes = 15};
    uint8_t *buf;
    size_t len = ckpt_build(&junk, 1, &buf);
    write_all(bad, buf, len);
    expect_load_error(bad, "8,5", "adamw", "record meta does not decompress");
    free(buf);
    /* A decompression bomb claim: far more raw bytes than zlib can produce. */
    junk.raw_bytes = (size_t)1 << 38;
    len = ckpt_build(&junk, 1, &buf);
    write_all(bad, buf, len);
    expect_load_error(bad, "8,5", "adamw", "claims 274877906944 bytes from 15 compressed");
    free(buf);
    /* A record count the file cannot hold. */
    uint8_t header[28] = "DPTCKPT";
    uint32_t version = 1, count = 900000;
    memcpy(header + 8, &version, 4), memcpy(header + 12, &count, 4);
    memcpy(header + 20, "DPTEND\0", 8);
    ckpt_fix_crcs(header, sizeof header);
    write_all(bad, header, sizeof header);
    expect_load_error(bad, "8,5", "adamw", "900000 records cannot fit in 28 bytes");
    /* A folder and a FIFO named as the checkpoint. */
    expect_load_error(dir, "8,5", "adamw", "is not a regular file");
    char fifo[300];
    snprintf(fifo, sizeof fifo, "%s/fifo.dpt", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    expect_load_error(fifo, "8,5", "adamw", "is not a regular file");

    /* Meta values out of range, each named. */
    run a = make_run("8,5", "adamw", 1);
    train_a_little(&a);
    save(&a, good);
    uint8_t *g = read_all(good, &len);
    expect_meta_error(g, len, bad, "epoch=-3", "meta epoch = -3 is not an integer in [1, ");
    expect_meta_error(g, len, bad, "step=-5", "meta step = -5 is not an integer in [0, ");
    expect_meta_error(g, len, bad, "optim_steps=-1", "meta optim_steps = -1 is not an integer in [0, 1234]");
    expect_meta_error(g, len, bad, "optim_steps=5000",
                      "meta optim_steps = 5000 is not an integer in [0, 1234]");
    expect_meta_error(g, len, bad, "batches_done=12x", "meta batches_done = 12x is not an integer");
    expect_meta_error(g, len, bad, "world_size=0", "meta world_size = 0 is not an integer in [1, ");
    expect_meta_error(g, len, bad, "best_acc=nan", "meta best_acc = nan is not an accuracy");
    expect_meta_error(g, len, bad, "best_epoch=9", "meta best_epoch = 9 is not an integer in [0, 3]");

    /* The helpers themselves: the records taken apart and rebuilt unchanged load. */
    ckpt_rec recs[64];
    uint8_t **store;
    int n = split_records(g, len, recs, 64, &store);
    uint8_t *same;
    size_t same_len = ckpt_build(recs, n, &same);
    write_all(bad, same, same_len);
    run b = make_run("8,5", "adamw", 2);
    dpt_train_state st;
    dpt_error err;
    if (!dpt_checkpoint_load(bad, b.model, b.optim, b.ctx, b.cfg, &st, 1, &err)) fail_msg("%s", err.msg);
    assert_same_state(&a, &b);
    free_run(&b);
    free(same);
    /* A NaN weight: refused by name. */
    int victim = -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(recs[i].name, "param/fc2.weight")) victim = i;
    assert_true(victim >= 0);
    ((float *)store[2 * victim + 1])[7] = NAN;
    uint8_t *out;
    size_t out_len = ckpt_build(recs, n, &out);
    write_all(bad, out, out_len);
    expect_load_error(bad, "8,5", "adamw", "param/fc2.weight[7] is nan");
    free(out);
    /* What a hostile file names reaches no terminal raw: a record name with an escape byte is
     * damage (refused, the name not printed); a meta value's control bytes print as '?'. */
    ((float *)store[2 * victim + 1])[7] = 0.5f;
    recs[victim].name = "param/fc2\x1b[2J.weight";
    out_len = ckpt_build(recs, n, &out);
    write_all(bad, out, out_len);
    expect_load_error(bad, "8,5", "adamw", "has a name with control bytes");
    free(out);
    write_meta_line(g, len, bad, "summary=\x1b]0;owned\x07 8,5");
    char *shown = NULL;
    size_t shown_len = 0;
    FILE *mem = open_memstream(&shown, &shown_len);
    dpt_error ierr;
    bool inspected = dpt_checkpoint_inspect(bad, mem, &ierr);
    fclose(mem);
    assert_true(inspected);
    assert_non_null(strstr(shown, "summary        ?]0;owned? 8,5\n"));
    assert_null(memchr(shown, 0x1b, shown_len));
    assert_null(memchr(shown, 0x07, shown_len));
    free(shown);
    free_store(store, n);
    free(g);
    free_run(&a);
}

static void test_world_size(void **state)
{
    (void)state;
    run a = make_run("8,5", "adamw", 1), b = make_run("8,5", "adamw", 2);
    char path[300];
    snprintf(path, sizeof path, "%s/ws.dpt", dir);
    dpt_train_state st;
    dpt_error err;
    /* mid-epoch (batches_done = 17), world size 1, the position in global samples unknown (as
     * in a checkpoint from before epoch_samples): refused on another world size */
    dpt_train_state unknown = some_state;
    unknown.samples_done = -1;
    assert_true(dpt_checkpoint_save(path, a.model, a.optim, a.ctx, a.cfg, &unknown, 1, &err));
    assert_false(dpt_checkpoint_load(path, b.model, b.optim, b.ctx, b.cfg, &st, 2, &err));
    assert_contains(err.msg, "written mid-epoch by 1 ranks; this run has 2");
    /* with the position in global samples, another world size loads it (the trainer turns
     * the samples into its own batches, or refuses a position its step cannot continue from) */
    dpt_train_state known = some_state;
    known.samples_done = 17 * 64;
    assert_true(dpt_checkpoint_save(path, a.model, a.optim, a.ctx, a.cfg, &known, 1, &err));
    assert_true(dpt_checkpoint_load(path, b.model, b.optim, b.ctx, b.cfg, &st, 2, &err));
    assert_int_equal(st.samples_done, 17 * 64);
    dpt_train_state at_epoch_end = some_state;
    at_epoch_end.batches_done = 0;
    assert_true(dpt_checkpoint_save(path, a.model, a.optim, a.ctx, a.cfg, &at_epoch_end, 1, &err));
    assert_true(dpt_checkpoint_load(path, b.model, b.optim, b.ctx, b.cfg, &st, 2, &err));
    free_run(&a);
    free_run(&b);
}

static void test_latest_prune_and_crash(void **state)
{
    (void)state;
    char sub[300], path[400];
    snprintf(sub, sizeof sub, "%s/series", dir);
    mkdir(sub, 0755);
    run a = make_run("8,5", "adamw", 1);
    for (int step = 1; step <= 5; step++) {
        snprintf(path, sizeof path, "%s/ckpt-step%08d.dpt", sub, step * 10);
        save(&a, path);
    }
    dpt_checkpoint_prune(sub, 2, 50);
    char latest[400];
    dpt_error err;
    assert_true(dpt_checkpoint_latest(sub, latest, sizeof latest, &err));
    assert_contains(latest, "ckpt-step00000050.dpt");
    snprintf(path, sizeof path, "%s/ckpt-step00000030.dpt", sub);
    assert_int_equal(access(path, F_OK), -1); /* pruned */
    snprintf(path, sizeof path, "%s/ckpt-step00000040.dpt", sub);
    assert_int_equal(access(path, F_OK), 0);

    /* A process killed while writing step 60 leaves a .tmp; step 50 stays the newest. */
    train_a_little(&a);
    snprintf(path, sizeof path, "%s/ckpt-step00000060.dpt", sub);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("DPT_TEST_CKPT_CRASH_AFTER", "1500", 1);
        dpt_checkpoint_save(path, a.model, a.optim, a.ctx, a.cfg, &some_state, 1, &err);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    assert_int_equal(WEXITSTATUS(status), 7); /* died mid-write */
    assert_int_equal(access(path, F_OK), -1);
    char cmd[600], leftover[256];
    snprintf(cmd, sizeof cmd, "ls -a %s | grep -c '^\\.ckpt-step00000060\\.dpt\\.'", sub);
    FILE *ls = popen(cmd, "r");
    assert_non_null(ls);
    assert_non_null(fgets(leftover, sizeof leftover, ls));
    pclose(ls);
    assert_int_equal(atoi(leftover), 1); /* the unfinished temporary (an unpredictable name) */
    assert_true(dpt_checkpoint_latest(sub, latest, sizeof latest, &err));
    assert_contains(latest, "ckpt-step00000050.dpt");
    run b = make_run("8,5", "adamw", 2);
    dpt_train_state st;
    if (!dpt_checkpoint_load(latest, b.model, b.optim, b.ctx, b.cfg, &st, 1, &err)) fail_msg("%s", err.msg);
    free_run(&a);
    free_run(&b);
    /* keep_step survives whatever keep_last says */
    dpt_checkpoint_prune(sub, 1, 40);
    snprintf(path, sizeof path, "%s/ckpt-step00000040.dpt", sub);
    assert_int_equal(access(path, F_OK), 0);
    int64_t nsteps;
    int64_t *steps = dpt_checkpoint_steps(sub, &nsteps);
    assert_int_equal(nsteps, 2);
    assert_int_equal(steps[0], 40);
    assert_int_equal(steps[1], 50);
    free(steps);
    /* the folder's lock: a second holder is refused while the first holds it; taking it
     * removes the crashed write's temporary (nothing else: a link with such a name stays) */
    char planted[700];
    snprintf(planted, sizeof planted, "%s/.ckpt-step00000070.dpt.abcdef", sub);
    assert_int_equal(symlink("/etc/passwd", planted), 0);
    dpt_ckpt_dir_options opt = {.create = true, .resumed_here = true, .resumed_step = 50};
    int fd1, fd2;
    if (!dpt_checkpoint_prepare_dir(sub, &opt, &fd1, &err)) fail_msg("%s", err.msg);
    ls = popen(cmd, "r");
    assert_non_null(ls);
    assert_non_null(fgets(leftover, sizeof leftover, ls));
    pclose(ls);
    assert_int_equal(atoi(leftover), 0); /* the step-60 temporary: gone */
    struct stat lst;
    assert_int_equal(lstat(planted, &lst), 0); /* the link: left alone */
    unlink(planted);
    pid_t child = fork();
    if (child == 0) _exit(dpt_checkpoint_prepare_dir(sub, &opt, &fd2, &err) ? 0 : 9);
    waitpid(child, &status, 0);
    assert_int_equal(WEXITSTATUS(status), 9);
    close(fd1);
    if (!dpt_checkpoint_prepare_dir(sub, &opt, &fd2, &err)) fail_msg("%s", err.msg);
    close(fd2);
    snprintf(path, sizeof path, "%s/empty", dir);
    mkdir(path, 0755);
    assert_false(dpt_checkpoint_latest(path, latest, sizeof latest, &err));
    assert_contains(err.msg, "no checkpoint");
}


/* The names in a folder other than . and .., all of them or only the hidden ones (a safe
 * file's temporary is .NAME.XXXXXX). */
static int names_in(const char *path, bool only_hidden)
{
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n += !only_hidden || e->d_name[0] == '.';
    closedir(d);
    return n;
}

/* The safe file works on its folder's descriptor: a folder swapped for another and a link to a
 * third while the file is being written (a hostile shared folder) does not redirect it: it
 * lands whole in the folder it was opened in, nothing appears through the link, and no
 * temporary is left. A link, a folder, a FIFO or another user's file at the destination is
 * refused naming it, never written through; this user's own file is replaced. */
static void test_atomic_file_folder_swapped(void **state)
{
    (void)state;
    char *d = dpt_strf("%s/swap", dir), *moved = dpt_strf("%s/swap.moved", dir), *other = dpt_strf("%s/other", dir);
    char *out = dpt_strf("%s/x.dat", d), *victim = dpt_strf("%s/x.dat", other);
    assert_int_equal(mkdir(d, 0755), 0);
    assert_int_equal(mkdir(other, 0755), 0);
    dpt_atomic_file af;
    dpt_error err;
    assert_true(dpt_atomic_file_open(&af, out, &err));
    fputs("payload", af.f);
    assert_int_equal(rename(d, moved), 0); /* the folder moves away, a link to another takes its name */
    assert_int_equal(symlink(other, d), 0);
    assert_true(dpt_atomic_file_close(&af, true, &err));
    char *landed = dpt_strf("%s/x.dat", moved);
    assert_first_line(landed, "payload");
    struct stat st;
    assert_int_not_equal(lstat(victim, &st), 0); /* nothing through the link */
    assert_int_equal(names_in(moved, false), 1); /* x.dat, no .x.dat.XXXXXX */
    /* a link planted at the destination: refused naming it, before writing (open) and when it
     * appears while the file is written (close); the link and its target untouched, no
     * temporary left */
    char *target = dpt_strf("%s/target", other), *dest = dpt_strf("%s/y.dat", moved);
    FILE *f = fopen(target, "w");
    fputs("keep", f);
    fclose(f);
    assert_int_equal(symlink(target, dest), 0);
    assert_false(dpt_atomic_file_open(&af, dest, &err));
    assert_contains(err.msg, dest);
    assert_contains(err.msg, "a symbolic link stands at its name");
    assert_int_equal(unlink(dest), 0);
    assert_true(dpt_atomic_file_open(&af, dest, &err));
    fputs("new", af.f);
    assert_int_equal(symlink(target, dest), 0); /* planted mid-write */
    assert_false(dpt_atomic_file_close(&af, true, &err));
    assert_contains(err.msg, "a symbolic link stands at its name");
    assert_int_equal(lstat(dest, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_first_line(target, "keep");
    /* a folder and a FIFO at the name are refused as well; this user's own file is replaced */
    assert_int_equal(unlink(dest), 0);
    assert_int_equal(mkdir(dest, 0755), 0);
    assert_false(dpt_atomic_file_open(&af, dest, &err));
    assert_contains(err.msg, "a folder stands at its name");
    assert_int_equal(rmdir(dest), 0);
    assert_int_equal(mkfifo(dest, 0644), 0);
    assert_false(dpt_atomic_file_open(&af, dest, &err));
    assert_contains(err.msg, "not a regular file");
    assert_int_equal(unlink(dest), 0);
    for (int i = 0; i < 2; i++) { /* created, then replaced */
        assert_true(dpt_atomic_file_open(&af, dest, &err));
        fputs(i ? "second" : "first", af.f);
        assert_true(dpt_atomic_file_close(&af, true, &err));
    }
    assert_first_line(dest, "second");
    if (chown(dest, 65534, 65534) == 0) { /* another user's file (chown needs root: skipped otherwise) */
        assert_false(dpt_atomic_file_open(&af, dest, &err));
        assert_contains(err.msg, "belongs to another user (uid 65534)");
        assert_first_line(dest, "second");
    }
    assert_int_equal(names_in(moved, true), 0); /* no .y.dat.XXXXXX left */
    free(d), free(moved), free(other), free(out), free(victim), free(landed), free(target), free(dest);
}

/* Issue 27 items 2-4: no cap on the listing (the newest by step among 20,000 names, which
 * readdir returns in hash order, not sorted), a folder path the system cannot hold refused
 * before anything is written, and a claim (a run that checkpoints only if stopped) that makes
 * the folder, locks it against a second run, and removes what it made when unused. */
static void test_many_long_and_claimed(void **state)
{
    (void)state;
    char sub[600], path[700];
    snprintf(sub, sizeof sub, "%s/many", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    const int count = 20000;
    for (int i = 0; i < count; i++) { /* empty files: only the names matter to the listing */
        snprintf(path, sizeof path, "%s/ckpt-step%08d.dpt", sub, (i * 7919) % count);
        int fd = open(path, O_CREAT | O_WRONLY, 0644);
        assert_true(fd >= 0);
        close(fd);
    }
    int64_t n;
    int64_t *steps = dpt_checkpoint_steps(sub, &n);
    assert_int_equal(n, count);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(steps[i], i); /* all of them, ascending */
    free(steps);
    char latest[PATH_MAX];
    dpt_error err;
    assert_true(dpt_checkpoint_latest(sub, latest, sizeof latest, &err));
    snprintf(path, sizeof path, "ckpt-step%08d.dpt", count - 1);
    assert_contains(latest, path);
    /* sharded optimizer state beside a pruned and a kept checkpoint, and a file of the user's */
    const char *extra[] = {"ckpt-step00000005.dpt.00000000000000ab.optim1-of-2",
                           "ckpt-step00019999.dpt.00000000000000cd.optim0-of-2", "ckpt-step00000005.dpt.notes"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", sub, extra[i]);
        close(open(path, O_CREAT | O_WRONLY, 0644));
    }
    dpt_checkpoint_prune(sub, 3, -1);
    steps = dpt_checkpoint_steps(sub, &n);
    assert_int_equal(n, 3);
    assert_int_equal(steps[0], count - 3);
    free(steps);
    for (int i = 0; i < 3; i++) { /* the pruned one's part gone, the others kept */
        snprintf(path, sizeof path, "%s/%s", sub, extra[i]);
        assert_int_equal(access(path, F_OK), i == 0 ? -1 : 0);
    }

    /* a folder whose files' names would pass PATH_MAX, and one folder name past NAME_MAX */
    size_t len = PATH_MAX - 40;
    char *longdir = malloc(len + 1);
    memset(longdir, 'a', len);
    for (size_t i = 200; i < len; i += 200)
        longdir[i] = '/';
    longdir[0] = '/', longdir[len] = '\0';
    dpt_ckpt_dir_options opt = {.create = true};
    int fd;
    assert_false(dpt_checkpoint_prepare_dir(longdir, &opt, &fd, &err));
    assert_contains(err.msg, "too long for a checkpoint folder");
    assert_int_equal(access("/aaaaaaaaaa", F_OK), -1); /* nothing made */
    char *wide = dpt_strf("%s/%0300d", dir, 7);
    assert_false(dpt_checkpoint_prepare_dir(wide, &opt, &fd, &err));
    assert_contains(err.msg, "folder name of 300 bytes");
    free(wide), free(longdir);

    /* claim: made now, a second claimant refused (another process), removed unused */
    char *claimed = dpt_strf("%s/made/here", dir), *made = NULL;
    dpt_ckpt_dir_options claim = {.claim = true, .created = &made};
    int fd1;
    if (!dpt_checkpoint_prepare_dir(claimed, &claim, &fd1, &err)) fail_msg("%s", err.msg);
    assert_non_null(made);
    assert_contains(made, "/made");
    assert_int_equal(access(claimed, F_OK), 0);
    pid_t child = fork();
    if (child == 0) {
        char *other = NULL;
        dpt_ckpt_dir_options c2 = {.claim = true, .created = &other};
        int fd2;
        _exit(dpt_checkpoint_prepare_dir(claimed, &c2, &fd2, &err) ? 0 : strstr(err.msg, "another dptrain run") ? 9 : 8);
    }
    int status;
    waitpid(child, &status, 0);
    assert_int_equal(WEXITSTATUS(status), 9);
    dpt_checkpoint_unclaim(claimed, made, fd1);
    snprintf(path, sizeof path, "%s/made", dir);
    assert_int_equal(access(path, F_OK), -1); /* both levels it made, gone */
    assert_int_equal(access(dir, F_OK), 0);   /* the level that was there stays */
    free(made), free(claimed);
}

/* Parameters whose names share their first 48 characters (a layer named
 * "encoder.layers.10.self_attention.query_key_value", 48, has .weight and .bias): each keeps
 * its own optimizer state through a checkpoint. The state's name was cut to the parameter's
 * first 48 characters, so both were "....query_key_value.adamw0": one record name twice, and
 * a resume gave the second parameter the first one's state or refused its shape. Names up to
 * DPT_NAME_MAX (127) characters. */
static void test_long_names(void **state)
{
    (void)state;
    const char *layer = "encoder.layers.10.self_attention.query_key_value";
    char w[DPT_NAME_MAX + 1], b[DPT_NAME_MAX + 1], longest[DPT_NAME_MAX + 1];
    snprintf(w, sizeof w, "%s.weight", layer);
    snprintf(b, sizeof b, "%s.bias", layer);
    memset(longest, 'n', DPT_NAME_MAX), longest[DPT_NAME_MAX] = '\0';
    dpt_model *m[2];
    dpt_optim *o[2];
    dpt_ctx *ctx = test_ctx(1, 3);
    char path[512];
    snprintf(path, sizeof path, "%s/long.dpt", dir);
    dpt_error err;
    for (int k = 0; k < 2; k++) {
        m[k] = dpt_model_new(ctx, "long_names", NULL);
        dpt_tensor *p[3] = {dpt_model_param(m[k], w, 2, (int64_t[]){3, 4}), dpt_model_param(m[k], b, 1, (int64_t[]){3}),
                            dpt_model_param(m[k], longest, 1, (int64_t[]){5})};
        o[k] = dpt_optim_new(m[k], "adamw", NULL, 0.1f, 0.0f);
        if (k == 1) break;
        for (int s = 0; s < 2; s++) { /* two steps with different gradients: moments that differ */
            for (int i = 0; i < 3; i++)
                for (int64_t e = 0; e < p[i]->numel; e++)
                    p[i]->grad->data[e] = (float)(i + 1) * (0.5f + (float)e) * (s ? -1.0f : 1.0f);
            dpt_optim_step(ctx, o[k]);
        }
    }
    dpt_config *cfg = dpt_config_defaults();
    if (!dpt_checkpoint_save(path, m[0], o[0], ctx, cfg, &some_state, 1, &err)) fail_msg("%s", err.msg);
    dpt_train_state st;
    if (!dpt_checkpoint_load(path, m[1], o[1], ctx, cfg, &st, 1, &err)) fail_msg("%s", err.msg);
    dpt_config_free(cfg);
    assert_int_equal(dpt_optim_num_state(o[0]), 6);
    for (int i = 0; i < 6; i++) {
        const dpt_tensor *a = dpt_optim_state_at(o[0], i), *c = dpt_optim_state_at(o[1], i);
        assert_int_equal(a->numel, c->numel);
        if (memcmp(a->data, c->data, (size_t)a->numel * sizeof(float)) != 0)
            fail_msg("optimizer state %d (%s) differs after the round trip", i, a->name);
        for (int j = 0; j < i; j++)
            if (!strcmp(dpt_optim_state_at(o[0], j)->name, a->name)) fail_msg("two states named %s", a->name);
    }
    for (int k = 0; k < 2; k++)
        dpt_optim_free(o[k]), dpt_model_free(m[k]);
    dpt_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_long_names),
        cmocka_unit_test(test_weights_only),
        cmocka_unit_test(test_weight_averages),
        cmocka_unit_test(test_compressed_tensors),
        cmocka_unit_test(test_damage),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_world_size),
        cmocka_unit_test(test_latest_prune_and_crash),
        cmocka_unit_test(test_many_long_and_claimed),
        cmocka_unit_test(test_atomic_file_folder_swapped),
    };
    return cmocka_run_group_tests_name("checkpoint", tests, setup, teardown);
}
