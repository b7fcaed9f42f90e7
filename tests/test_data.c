/* test_data.c: the IDX reader on the real Fashion-MNIST files and on broken ones it writes,
 * and the loader's shuffling and distributed sharding. */
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/testutil.h"
#include "data/data.h"
#include "data/image.h"

static char tmpdir[256];

static int make_tmpdir(void **state)
{
    (void)state;
    return test_mkdtemp(tmpdir, sizeof tmpdir, "dpt_test_data");
}

static int remove_tmpdir(void **state)
{
    (void)state;
    return test_rmrf(tmpdir);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* Write an IDX file: magic (00 00 08 ndim), dims, then `data_bytes` bytes of pattern. */
static const char *write_idx(const char *name, bool gz, int ndim, const uint32_t *dims, int64_t data_bytes,
                             uint8_t magic_type)
{
    static char path[4][512];
    static int slot;
    char *out = path[slot++ % 4];
    snprintf(out, 512, "%s/%s", tmpdir, name);
    uint8_t header[4 + 16] = {0, 0, magic_type, (uint8_t)ndim};
    for (int d = 0; d < ndim; d++)
        put_u32(header + 4 + 4 * d, dims[d]);
    uint8_t *data = malloc((size_t)data_bytes + 1);
    for (int64_t i = 0; i < data_bytes; i++)
        data[i] = (uint8_t)(i % 10);
    if (gz) {
        gzFile f = gzopen(out, "wb");
        gzwrite(f, header, (unsigned)(4 + 4 * ndim));
        if (data_bytes) gzwrite(f, data, (unsigned)data_bytes);
        gzclose(f);
    } else {
        FILE *f = fopen(out, "wb");
        fwrite(header, 1, (size_t)(4 + 4 * ndim), f);
        fwrite(data, 1, (size_t)data_bytes, f);
        fclose(f);
    }
    free(data);
    return out;
}

static void expect_error(const char *images, const char *labels, const char *needle)
{
    dpt_error err;
    dpt_dataset *ds = dpt_idx_load(images, labels, &err);
    if (ds) fail_msg("expected an error containing \"%s\", got a data set", needle);
    assert_contains(err.msg, needle);
}

static void test_real_fashion_mnist(void **state)
{
    (void)state;
    dpt_error err;
    dpt_dataset *train = dpt_idx_load(FMNIST_DIR "/train-images-idx3-ubyte.gz",
                                      FMNIST_DIR "/train-labels-idx1-ubyte.gz", &err);
    if (!train) fail_msg("%s", err.msg);
    assert_int_equal(train->n, 60000);
    assert_int_equal(train->h, 28);
    assert_int_equal(train->w, 28);
    assert_int_equal(train->num_classes, 10);
    int counts[10] = {0};
    for (int64_t i = 0; i < train->n; i++)
        counts[train->labels[i]]++;
    for (int c = 0; c < 10; c++)
        assert_int_equal(counts[c], 6000); /* balanced classes */
    assert_int_equal(train->labels[0], 9); /* ankle boot */
    long pixel_sum = 0;
    for (int i = 0; i < 784; i++)
        pixel_sum += train->images[i];
    assert_int_equal(pixel_sum, 76247); /* first image, checked with Python's gzip module */
    dpt_dataset_free(train);
    dpt_dataset *test =
        dpt_idx_load(FMNIST_DIR "/t10k-images-idx3-ubyte.gz", FMNIST_DIR "/t10k-labels-idx1-ubyte.gz", &err);
    if (!test) fail_msg("%s", err.msg);
    assert_int_equal(test->n, 10000);
    assert_int_equal(test->labels[0], 9);
    assert_int_equal(test->labels[1], 2);
    dpt_dataset_free(test);
}

/* [data] train_limit's read: the first N images only, equal to the whole read's first N; every
 * label read (a label of 12 past the prefix still makes 13 classes); a file damaged past the
 * prefix is read (the rest is never decompressed), one damaged inside it refused; a limit past
 * the end reads the whole file, checked to its end. */
static void test_first_images(void **state)
{
    (void)state;
    dpt_error err;
    dpt_dataset *all = dpt_idx_load(FMNIST_DIR "/train-images-idx3-ubyte.gz",
                                    FMNIST_DIR "/train-labels-idx1-ubyte.gz", &err);
    dpt_dataset *first = dpt_idx_load_first(FMNIST_DIR "/train-images-idx3-ubyte.gz",
                                            FMNIST_DIR "/train-labels-idx1-ubyte.gz", 300, &err);
    if (!all || !first) fail_msg("%s", err.msg);
    assert_int_equal(first->n, 300);
    assert_int_equal(first->n_file, 60000);
    assert_int_equal(all->n_file, 0);
    assert_memory_equal(first->images, all->images, 300 * 784);
    assert_memory_equal(first->labels, all->labels, 60000 * sizeof *all->labels);
    assert_int_equal(first->num_classes, all->num_classes);
    dpt_dataset_free(all), dpt_dataset_free(first);

    uint8_t lab[6] = {0, 1, 2, 3, 4, 12};
    char labels[512];
    snprintf(labels, sizeof labels, "%s/l13", tmpdir);
    FILE *f = fopen(labels, "wb");
    fwrite((uint8_t[]){0, 0, 8, 1, 0, 0, 0, 6}, 1, 8, f), fwrite(lab, 1, 6, f), fclose(f);
    const char *short_gz = write_idx("short6.gz", true, 3, (uint32_t[]){6, 2, 2}, 14, 8); /* 4 of 6 images */
    dpt_dataset *ds = dpt_idx_load_first(short_gz, labels, 3, &err);
    if (!ds) fail_msg("%s", err.msg);
    assert_int_equal(ds->n, 3);
    assert_int_equal(ds->num_classes, 13);
    assert_int_equal(ds->labels[5], 12);
    assert_int_equal(ds->images[11], 1); /* the pattern's byte 11 */
    dpt_dataset_free(ds);
    assert_null(dpt_idx_load_first(short_gz, labels, 4, &err)); /* 16 bytes wanted, 14 there */
    assert_contains(err.msg, "the file holds 14");
    assert_null(dpt_idx_load_first(short_gz, labels, 7, &err)); /* past the end: the whole file */
    assert_contains(err.msg, "the header promises 24 bytes of data but the file holds 14");
}

static void test_raw_and_gz_agree(void **state)
{
    (void)state;
    const char *img_gz = write_idx("a-images.gz", true, 3, (uint32_t[]){5, 4, 3}, 60, 8);
    const char *img_raw = write_idx("a-images", false, 3, (uint32_t[]){5, 4, 3}, 60, 8);
    const char *lab = write_idx("a-labels", false, 1, (uint32_t[]){5}, 5, 8);
    dpt_error err;
    dpt_dataset *a = dpt_idx_load(img_gz, lab, &err), *b = dpt_idx_load(img_raw, lab, &err);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(a->n, 5);
    assert_int_equal(a->h, 4);
    assert_int_equal(a->w, 3);
    assert_memory_equal(a->images, b->images, 60);
    assert_int_equal(a->labels[3], 3);
    dpt_dataset_free(a);
    dpt_dataset_free(b);
}

static void test_broken_files(void **state)
{
    (void)state;
    const char *lab5 = write_idx("l5", false, 1, (uint32_t[]){5}, 5, 8);
    expect_error("/nonexistent/images.gz", lab5, "cannot open data file /nonexistent/images.gz");
    expect_error("/nonexistent/images.gz", lab5, "dataset-fashion-mnist");
    /* wrong magic: a label file given as images, and a non-ubyte type */
    expect_error(lab5, lab5, "wrong IDX magic");
    expect_error(write_idx("float", false, 3, (uint32_t[]){5, 4, 3}, 240, 0x0d), lab5, "wrong IDX magic");
    /* a header promising more than the file holds, raw and gzip */
    expect_error(write_idx("short", false, 3, (uint32_t[]){5, 4, 3}, 59, 8), lab5,
                 "the header promises 60 bytes of data but the file holds 59");
    expect_error(write_idx("short.gz", true, 3, (uint32_t[]){5, 4, 3}, 50, 8), lab5,
                 "the header promises 60 bytes of data but the file holds 50");
    expect_error(write_idx("long", false, 3, (uint32_t[]){5, 4, 3}, 61, 8), lab5,
                 "more than the 60 data bytes");
    /* images and labels disagree */
    expect_error(write_idx("ok", false, 3, (uint32_t[]){5, 4, 3}, 60, 8),
                 write_idx("l6", false, 1, (uint32_t[]){6}, 6, 8), "holds 5 images but");
    /* an empty file */
    char empty[512];
    snprintf(empty, sizeof empty, "%s/empty", tmpdir);
    fclose(fopen(empty, "wb"));
    expect_error(empty, lab5, "too short for an IDX header");
}

/* Headers crafted to overflow or to lie, and paths that are not files: each a clear error,
 * none a crash, a hang or a huge allocation. */
static void test_hostile_idx(void **state)
{
    (void)state;
    const char *lab5 = write_idx("l5", false, 1, (uint32_t[]){5}, 5, 8);
    /* 2^28 x 2^28 x 2^28 passes each dimension's check; the product overflows int64 */
    expect_error(write_idx("huge", false, 3, (uint32_t[]){1u << 28, 1u << 28, 1u << 28}, 20, 8), lab5,
                 "more than 68719476736 bytes");
    expect_error(write_idx("huge.gz", true, 3, (uint32_t[]){1u << 28, 1u << 28, 1u << 28}, 20, 8), lab5,
                 "more than 68719476736 bytes");
    /* a plausible-looking 2^31-byte claim over 20 bytes: refused after reading 20 */
    expect_error(write_idx("liar", false, 3, (uint32_t[]){1u << 15, 256, 256}, 20, 8), lab5,
                 "promises 2147483648 bytes of data but the file holds 20");
    expect_error(tmpdir, lab5, "is not a regular file");
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s/fifo", tmpdir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    expect_error(fifo, lab5, "is not a regular file"); /* would block in open() if it were tried */
}

/* [data] classes: a label far out of range is an error naming the file and sample, whether
 * the number of classes is stated or inferred. */
static void test_label_range(void **state)
{
    (void)state;
    uint32_t dims[3] = {12, 2, 2};
    write_idx("lr-images", false, 3, dims, 48, 8);
    /* labels 0..9 twice, with sample 7 = 200 */
    char path[512];
    snprintf(path, sizeof path, "%s/lr-labels", tmpdir);
    uint8_t lab[8 + 12] = {0, 0, 8, 1};
    put_u32(lab + 4, 12);
    for (int i = 0; i < 12; i++)
        lab[8 + i] = (uint8_t)(i % 10);
    lab[8 + 7] = 200;
    FILE *f = fopen(path, "wb");
    fwrite(lab, 1, sizeof lab, f);
    fclose(f);
    char set[6][600];
    snprintf(set[0], sizeof set[0], "data.dir=%s", tmpdir);
    snprintf(set[1], sizeof set[1], "data.train_images=lr-images");
    snprintf(set[2], sizeof set[2], "data.train_labels=lr-labels");
    snprintf(set[3], sizeof set[3], "data.test_images=lr-images");
    snprintf(set[4], sizeof set[4], "data.test_labels=lr-labels");
    dpt_config *cfg = dpt_config_defaults();
    dpt_error err;
    for (int i = 0; i < 5; i++)
        assert_true(dpt_config_set(cfg, set[i], &err));
    dpt_dataset *train, *test;
    assert_false(dpt_data_open(cfg, &train, &test, &err));
    assert_contains(err.msg,
                    "lr-labels: sample 7 has label 200, which would make 201 classes, but 190 of them");
    assert_contains(err.msg, "[data] classes = 201");
    assert_true(dpt_config_set(cfg, "data.classes=10", &err));
    assert_false(dpt_data_open(cfg, &train, &test, &err));
    assert_contains(err.msg,
                    "lr-labels: sample 7 has label 200, but --set data.classes=10 says [data] classes = 10");
    /* stated large enough: accepted, and the model gets exactly that many classes */
    assert_true(dpt_config_set(cfg, "data.classes=256", &err));
    if (!dpt_data_open(cfg, &train, &test, &err)) fail_msg("%s", err.msg);
    assert_int_equal(train->num_classes, 256);
    dpt_dataset_free(train);
    dpt_dataset_free(test);
    /* the label fixed: inferred as 10 */
    lab[8 + 7] = 7;
    f = fopen(path, "wb");
    fwrite(lab, 1, sizeof lab, f);
    fclose(f);
    assert_true(dpt_config_set(cfg, "data.classes=0", &err));
    if (!dpt_data_open(cfg, &train, &test, &err)) fail_msg("%s", err.msg);
    assert_int_equal(train->num_classes, 10);
    assert_int_equal(test->num_classes, 10);
    dpt_dataset_free(train);
    dpt_dataset_free(test);
    dpt_config_free(cfg);
}

/* Cut a real .gz file short, and flip a byte inside its compressed stream. */
static void test_truncated_and_corrupt_gz(void **state)
{
    (void)state;
    FILE *src = fopen(FMNIST_DIR "/t10k-labels-idx1-ubyte.gz", "rb");
    assert_non_null(src);
    uint8_t buf[8192];
    size_t n = fread(buf, 1, sizeof buf, src);
    fclose(src);
    assert_true(n > 1000);
    const char *images = FMNIST_DIR "/t10k-images-idx3-ubyte.gz";
    char path[512];
    snprintf(path, sizeof path, "%s/trunc.gz", tmpdir);
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n / 2, f);
    fclose(f);
    expect_error(images, path, "trunc.gz");
    expect_error(images, path, "truncated");

    for (size_t offset = 40; offset < n - 8; offset += n / 7) {
        buf[offset] ^= 0x5a;
        snprintf(path, sizeof path, "%s/corrupt.gz", tmpdir);
        f = fopen(path, "wb");
        fwrite(buf, 1, n, f);
        fclose(f);
        buf[offset] ^= 0x5a;
        dpt_error err;
        dpt_dataset *ds = dpt_idx_load(images, path, &err);
        if (ds) fail_msg("a flipped byte at offset %zu was not detected", offset);
        assert_contains(err.msg, "corrupt.gz");
    }
}

/* ---------------------------------------------------------------- loader */

static dpt_dataset *tiny_dataset(int64_t n)
{
    dpt_dataset *ds = calloc(1, sizeof *ds);
    ds->n = n, ds->c = 1, ds->h = 1, ds->w = 2, ds->num_classes = 10;
    ds->images = malloc((size_t)n * 2);
    ds->labels = malloc((size_t)n * sizeof *ds->labels);
    for (int64_t i = 0; i < n; i++) {
        ds->images[2 * i] = (uint8_t)(i % 256);
        ds->images[2 * i + 1] = (uint8_t)(i / 256);
        ds->labels[i] = (int32_t)(i % 10);
    }
    return ds;
}

/* Read back which samples a loader produced in an epoch (the identity survives the
 * normalisation with mean 0, std 1/255). */
static int64_t epoch_samples(dpt_loader *l, int epoch, int64_t *out)
{
    int64_t count = 0;
    dpt_batch b;
    dpt_loader_start_epoch(l, epoch);
    while (dpt_loader_next(l, &b)) {
        const float *x = dpt_tensor_data(b.x);
        for (int64_t i = 0; i < b.size; i++)
            out[count++] = lroundf(x[2 * i]) + 256 * lroundf(x[2 * i + 1]);
    }
    return count;
}

static void test_loader_sharding(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_dataset *ds = tiny_dataset(103);
    dpt_loader_options opt = {.batch = 8,
                              .shuffle = true,
                              .drop_last = true,
                              .seed = 5,
                              .world_size = 3,
                              .mean = 0.0f,
                              .std = 1.0f / 255.0f};
    int64_t seen[3][200], counts[3];
    int hits[103] = {0};
    for (int r = 0; r < 3; r++) {
        opt.rank = r;
        dpt_loader *l = dpt_loader_new(ctx, ds, &opt);
        assert_int_equal(dpt_loader_num_samples(l), 34); /* floor(103 / 3) */
        assert_int_equal(dpt_loader_num_batches(l), 4);  /* floor(34 / 8) */
        counts[r] = epoch_samples(l, 1, seen[r]);
        assert_int_equal(counts[r], 32);
        for (int64_t i = 0; i < counts[r]; i++)
            hits[seen[r][i]]++;
        dpt_loader_free(l);
    }
    for (int i = 0; i < 103; i++)
        assert_true(hits[i] <= 1); /* shards are disjoint */

    /* drop_last = false: every sample at least once, shards padded to equal length */
    opt.drop_last = false;
    memset(hits, 0, sizeof hits);
    for (int r = 0; r < 3; r++) {
        opt.rank = r;
        dpt_loader *l = dpt_loader_new(ctx, ds, &opt);
        assert_int_equal(dpt_loader_num_samples(l), 35);
        assert_int_equal(dpt_loader_num_batches(l), 5);
        counts[r] = epoch_samples(l, 1, seen[r]);
        assert_int_equal(counts[r], 35);
        for (int64_t i = 0; i < counts[r]; i++)
            hits[seen[r][i]]++;
        dpt_loader_free(l);
    }
    int total = 0;
    for (int i = 0; i < 103; i++) {
        assert_true(hits[i] >= 1);
        total += hits[i];
    }
    assert_int_equal(total, 105); /* two samples repeated as padding */
    dpt_dataset_free(ds);
    dpt_ctx_free(ctx);
}

static void test_loader_shuffle(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_dataset *ds = tiny_dataset(50);
    dpt_loader_options opt = {.batch = 10,
                              .shuffle = true,
                              .drop_last = true,
                              .seed = 9,
                              .world_size = 1,
                              .mean = 0.0f,
                              .std = 1.0f / 255.0f};
    dpt_loader *a = dpt_loader_new(ctx, ds, &opt), *b = dpt_loader_new(ctx, ds, &opt);
    int64_t ea1[50], eb1[50], ea2[50];
    assert_int_equal(epoch_samples(a, 1, ea1), 50);
    assert_int_equal(epoch_samples(b, 1, eb1), 50);
    assert_memory_equal(ea1, eb1, sizeof ea1); /* same seed, same epoch -> same order */
    epoch_samples(a, 2, ea2);
    assert_true(memcmp(ea1, ea2, sizeof ea1) != 0); /* a new order each epoch */
    int seen[50] = {0};
    for (int i = 0; i < 50; i++)
        seen[ea2[i]]++;
    for (int i = 0; i < 50; i++)
        assert_int_equal(seen[i], 1); /* a permutation */
    dpt_loader_free(a);
    dpt_loader_free(b);
    opt.shuffle = false;
    a = dpt_loader_new(ctx, ds, &opt);
    epoch_samples(a, 3, ea1);
    for (int i = 0; i < 50; i++)
        assert_int_equal(ea1[i], i);
    dpt_loader_free(a);
    dpt_dataset_free(ds);
    dpt_ctx_free(ctx);
}

/* auto_augment on RGB images in memory (CIFAR's path): each sample is the crop and flip the
 * loader draws from (seed, epoch, sample), as HWC bytes, through dpt_image_auto_augment with
 * the same generator continuing, then normalised per channel: recomputed here from those parts
 * (the operations themselves are checked against PIL in test_augment). A loader without the
 * policy gives other images; 1-channel images are refused by the trainer, not here. */
static void test_loader_auto_augment(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    int64_t n = 24, c = 3, h = 12, w = 16, chw = c * h * w;
    dpt_dataset *ds = dpt_synthetic_new(n, c, h, w, 4, 5);
    for (int policy = 1; policy <= 2; policy++) {
        dpt_loader_options opt = {.batch = 8,
                                  .shuffle = true,
                                  .drop_last = true,
                                  .seed = 11,
                                  .world_size = 1,
                                  .mean = 0.5f,
                                  .std = 0.25f,
                                  .crop_pad = 2,
                                  .hflip = true,
                                  .auto_augment = policy,
                                  .aa_ops = 2,
                                  .aa_magnitude = 12};
        dpt_loader *l = dpt_loader_new(ctx, ds, &opt);
        opt.auto_augment = 0;
        dpt_loader *plain = dpt_loader_new(ctx, ds, &opt);
        int64_t order[24]; /* the loader's permutation of epoch 2 (one rank: its whole order) */
        dpt_rng perm;
        dpt_rng_seed(&perm, 11 * 0x9e3779b97f4a7c15ULL + 2 + 1);
        dpt_rng_permutation(&perm, order, 24);
        dpt_loader_start_epoch(l, 2);
        dpt_loader_start_epoch(plain, 2);
        uint8_t img[3 * 12 * 16], tmp[3 * 12 * 16];
        int changed = 0;
        dpt_batch b, p;
        for (int64_t k = 0; dpt_loader_next(l, &b); k++) {
            assert_true(dpt_loader_next(plain, &p));
            const float *x = dpt_tensor_data(b.x), *px = dpt_tensor_data(p.x);
            for (int64_t i = 0; i < b.size; i++) {
                int64_t idx = order[k * 8 + i];
                dpt_rng rng; /* the loader's draw for (seed, epoch, sample): crop, flip, then the policy */
                dpt_rng_seed(&rng, (11 * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)2 << 40) ^ (uint64_t)idx);
                int64_t dy = (int64_t)dpt_rng_below(&rng, 5) - 2, dx = (int64_t)dpt_rng_below(&rng, 5) - 2;
                bool flip = dpt_rng_next(&rng) >> 63;
                const uint8_t *src = ds->images + idx * chw;
                for (int64_t y = 0; y < h; y++)
                    for (int64_t xx = 0; xx < w; xx++)
                        for (int64_t ch = 0; ch < 3; ch++) {
                            int64_t sy = y + dy, sx = (flip ? w - 1 - xx : xx) + dx;
                            img[(y * w + xx) * 3 + ch] =
                                sy >= 0 && sy < h && sx >= 0 && sx < w ? src[(ch * h + sy) * w + sx] : 0;
                        }
                dpt_image_auto_augment(img, (int)w, (int)h, policy, 2, 12, &rng, tmp);
                for (int64_t ch = 0; ch < 3; ch++)
                    for (int64_t q = 0; q < h * w; q++) {
                        float want = ((float)img[q * 3 + ch] / 255.0f - 0.5f) / 0.25f;
                        if (x[i * chw + ch * h * w + q] != want)
                            fail_msg("policy %d sample %lld value %lld: %g, expected %g", policy,
                                     (long long)idx, (long long)(ch * h * w + q), x[i * chw + ch * h * w + q],
                                     want);
                    }
                changed += memcmp(x + i * chw, px + i * chw, (size_t)chw * sizeof *x) != 0;
            }
        }
        assert_true(changed > 12); /* most samples: other bytes than the crop and flip alone */
        dpt_loader_free(l), dpt_loader_free(plain);
    }
    dpt_dataset_free(ds);
    dpt_ctx_free(ctx);
}

/* [data] repeated_augment (DeiT's RASampler): the global order is the epoch's permutation with
 * each sample R times in a row, rank r taking every W-th from r; a rank keeps n / W samples.
 * Copy 0 of a sample draws the augmentation a run without repeats draws; the other copies draw
 * their own. */
static void test_loader_repeated_augment(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_dataset *ds = tiny_dataset(60);
    enum { W = 2, R = 3 };
    int64_t got[W][30], perm[60];
    for (int r = 0; r < W; r++) {
        dpt_loader_options opt = {.batch = 10,
                                  .shuffle = true,
                                  .drop_last = true,
                                  .seed = 4,
                                  .rank = r,
                                  .world_size = W,
                                  .repeats = R,
                                  .mean = 0.0f,
                                  .std = 1.0f / 255.0f};
        dpt_loader *l = dpt_loader_new(ctx, ds, &opt);
        assert_int_equal(dpt_loader_num_samples(l), 30);
        assert_int_equal(epoch_samples(l, 1, got[r]), 30);
        dpt_loader_free(l);
    }
    dpt_rng rng; /* the loader's permutation of epoch 1 */
    dpt_rng_seed(&rng, 4 * 0x9e3779b97f4a7c15ULL + 1 + 1);
    dpt_rng_permutation(&rng, perm, 60);
    for (int64_t g = 0; g < 60; g++) /* global position g = r + i W holds perm[g / R] */
        if (got[g % W][g / W] != perm[g / R])
            fail_msg("global position %lld: sample %lld, expected %lld", (long long)g,
                     (long long)got[g % W][g / W], (long long)perm[g / R]);
    dpt_dataset_free(ds);
    /* the copies' augmentations: images in memory with crops and flips, one rank */
    ds = dpt_synthetic_new(12, 3, 8, 8, 4, 2);
    dpt_loader_options opt = {.batch = 12,
                              .shuffle = true,
                              .drop_last = true,
                              .seed = 5,
                              .world_size = 1,
                              .mean = 0.5f,
                              .std = 0.25f,
                              .crop_pad = 2,
                              .hflip = true};
    dpt_loader *plain = dpt_loader_new(ctx, ds, &opt);
    opt.repeats = R;
    dpt_loader *rep = dpt_loader_new(ctx, ds, &opt);
    dpt_loader_start_epoch(plain, 1), dpt_loader_start_epoch(rep, 1);
    dpt_batch a, b;
    assert_true(dpt_loader_next(plain, &a) && dpt_loader_next(rep, &b));
    const float *pa = dpt_tensor_data(a.x), *pb = dpt_tensor_data(b.x);
    int64_t chw = 3 * 8 * 8;
    int differ = 0;
    for (int64_t k = 0; k < 4; k++) { /* rep's 3k..3k+2 are plain's k-th sample, copies 0, 1, 2 */
        assert_memory_equal(pb + 3 * k * chw, pa + k * chw,
                            (size_t)chw * sizeof *pa); /* copy 0: the same draw */
        assert_int_equal(b.labels[3 * k + 1], a.labels[k]);
        differ += memcmp(pb + (3 * k + 1) * chw, pb + 3 * k * chw, (size_t)chw * sizeof *pb) != 0;
        differ += memcmp(pb + (3 * k + 2) * chw, pb + 3 * k * chw, (size_t)chw * sizeof *pb) != 0;
    }
    assert_true(differ >= 6); /* 25 crops x 2 flips: copies nearly always differ */
    dpt_loader_free(plain), dpt_loader_free(rep);
    dpt_dataset_free(ds);
    dpt_ctx_free(ctx);
}

/* Everything a loader hands out along one path through epochs, skips and a partial last
 * batch, flattened: with prefetch the same stream must come out, bit for bit. */
static size_t loader_trace(dpt_ctx *ctx, const dpt_dataset *ds, int prefetch, float *out)
{
    dpt_loader_options opt = {.batch = 5,
                              .shuffle = true,
                              .drop_last = false, /* 37 samples: 7 full batches and one of 2 */
                              .seed = 3,
                              .world_size = 1,
                              .mean = 0.5f,
                              .std = 0.25f,
                              .crop_pad = 2,
                              .hflip = true,
                              .prefetch = prefetch};
    dpt_loader *l = dpt_loader_new(ctx, ds, &opt);
    size_t n = 0;
    dpt_batch b;
    int64_t chw = ds->c * ds->h * ds->w;
    for (int epoch = 1; epoch <= 4; epoch++) {
        dpt_loader_start_epoch(l, epoch);
        if (epoch == 2) dpt_loader_skip(l, 3); /* resuming mid-epoch */
        int k = 0;
        while (dpt_loader_next(l, &b)) {
            out[n++] = (float)b.size;
            memcpy(out + n, dpt_tensor_data(b.x), (size_t)(b.size * chw) * sizeof(float));
            n += (size_t)(b.size * chw);
            for (int64_t i = 0; i < b.size; i++)
                out[n++] = (float)b.labels[i];
            if (epoch == 3 && ++k == 2) break; /* an epoch left early: the next one must not see it */
        }
    }
    dpt_batch extra;
    dpt_loader_next_cycle(l, &extra); /* epoch 4 is over: the first batch of epoch 5 */
    out[n++] = (float)extra.size + 1000.0f * (float)extra.labels[0];
    dpt_loader_free(l);
    return n;
}

static void test_loader_prefetch_same_stream(void **state)
{
    (void)state;
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_dataset *ds = calloc(1, sizeof *ds);
    ds->n = 37, ds->c = 2, ds->h = 6, ds->w = 5, ds->num_classes = 10;
    int64_t chw = ds->c * ds->h * ds->w;
    ds->images = malloc((size_t)(ds->n * chw));
    ds->labels = malloc((size_t)ds->n * sizeof *ds->labels);
    for (int64_t i = 0; i < ds->n * chw; i++)
        ds->images[i] = (uint8_t)((i * 2654435761u) >> 7);
    for (int64_t i = 0; i < ds->n; i++)
        ds->labels[i] = (int32_t)(i * 7 % 10);
    size_t cap = (size_t)(5 * ds->n * (chw + 2) + 16);
    float *ref = malloc(cap * sizeof *ref), *got = malloc(cap * sizeof *got);
    size_t n_ref = loader_trace(ctx, ds, 0, ref);
    assert_int_equal(
        n_ref, (size_t)((37 + 22 + 10 + 37) * (chw + 1) + 8 + 5 + 2 + 8 + 1)); /* samples, sizes, the extra */
    for (int prefetch = 1; prefetch <= 4; prefetch += 3)
        for (int rep = 0; rep < 20; rep++) { /* thread timing differs run to run */
            size_t n_got = loader_trace(ctx, ds, prefetch, got);
            assert_int_equal(n_got, n_ref);
            if (memcmp(ref, got, n_ref * sizeof *ref) != 0)
                fail_msg("prefetch %d (repetition %d) changed the batch stream", prefetch, rep);
        }
    free(ref);
    free(got);
    dpt_dataset_free(ds);
    dpt_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_fashion_mnist),
        cmocka_unit_test(test_raw_and_gz_agree),
        cmocka_unit_test(test_broken_files),
        cmocka_unit_test(test_hostile_idx),
        cmocka_unit_test(test_label_range),
        cmocka_unit_test(test_truncated_and_corrupt_gz),
        cmocka_unit_test(test_first_images),
        cmocka_unit_test(test_loader_sharding),
        cmocka_unit_test(test_loader_shuffle),
        cmocka_unit_test(test_loader_auto_augment),
        cmocka_unit_test(test_loader_repeated_augment),
        cmocka_unit_test(test_loader_prefetch_same_stream),
    };
    return cmocka_run_group_tests_name("data", tests, make_tmpdir, remove_tmpdir);
}
