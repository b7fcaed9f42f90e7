/* test_image.c: [data] source = folder. Decoding against the encoder's input, the crop and
 * resize against torchvision's definitions (a float64 re-computation of PIL's filter), the
 * seeded draws, DCT scaling, bad files, the ImageFolder listing and its cache, and the loader:
 * the same batches for any worker count, shards disjoint and covering, resume mid-epoch. */
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "data/folder.h"
#include "data/image.h"

static char root[64];

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/dpt-test-image-XXXXXX");
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    return system(cmd);
}

static const char *pathf(char *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(buf, 1024, "%s/", root);
    vsnprintf(buf + n, (size_t)(1024 - n), fmt, ap);
    va_end(ap);
    return buf;
}

static uint8_t *noise_image(int w, int h, int channels, uint64_t seed)
{
    uint8_t *p = malloc((size_t)w * h * channels);
    dpt_rng rng;
    dpt_rng_seed(&rng, seed);
    for (size_t i = 0; i < (size_t)w * h * channels; i++)
        p[i] = (uint8_t)dpt_rng_below(&rng, 256);
    return p;
}

/* A smooth picture (JPEG codes it almost exactly). */
static uint8_t *smooth_image(int w, int h)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *q = p + ((size_t)y * w + x) * 3;
            q[0] = (uint8_t)(128 + 100 * sin(x * 0.02)), q[1] = (uint8_t)(128 + 100 * cos(y * 0.03)),
            q[2] = (uint8_t)((x + y) * 255 / (w + h));
        }
    return p;
}

static void write_png(const char *path, const uint8_t *pix, int w, int h, int channels)
{
    char msg[256];
    if (!dpt_image_write_png(path, pix, w, h, channels, msg, sizeof msg)) fail_msg("%s", msg);
}

static void write_jpeg(const char *path, const uint8_t *pix, int w, int h, int channels, int quality)
{
    char msg[256];
    if (!dpt_image_write_jpeg(path, pix, w, h, channels, quality, msg, sizeof msg)) fail_msg("%s", msg);
}

static void flat_png(const char *path, int w, int h, int id)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h; i++)
        p[3 * i] = (uint8_t)id, p[3 * i + 1] = (uint8_t)(255 - id), p[3 * i + 2] = (uint8_t)(id * 7);
    write_png(path, p, w, h, 3);
    free(p);
}

static dpt_image_view eval_view(int size, int resize)
{
    return (dpt_image_view){.size = size, .resize = resize, .max_pixels = 89478485, .dct_scaling = true};
}

static dpt_image_view train_view(int size)
{
    return (dpt_image_view){.train = true,
                            .size = size,
                            .scale = {0.08, 1},
                            .ratio = {0.75, 4.0 / 3.0},
                            .hflip = true,
                            .dct_scaling = true,
                            .max_pixels = 89478485};
}

/* ---------------------------------------------------------------- decoding */

static void test_decode_png_exact(void **state)
{
    (void)state;
    char path[1024];
    uint8_t *img = noise_image(37, 23, 3, 1), *out;
    int w, h;
    char msg[256];
    write_png(pathf(path, "a.png"), img, 37, 23, 3);
    assert_true(dpt_image_decode(path, &out, &w, &h, msg, sizeof msg));
    assert_int_equal(w, 37), assert_int_equal(h, 23);
    assert_memory_equal(out, img, 37 * 23 * 3);
    free(out), free(img);
    /* gray PNG: R = G = B = the gray value */
    img = noise_image(9, 5, 1, 2);
    write_png(pathf(path, "g.png"), img, 9, 5, 1);
    assert_true(dpt_image_decode(path, &out, &w, &h, msg, sizeof msg));
    for (int i = 0; i < 45; i++)
        assert_true(out[3 * i] == img[i] && out[3 * i + 1] == img[i] && out[3 * i + 2] == img[i]);
    free(out), free(img);
}

static void test_decode_jpeg_close(void **state)
{
    (void)state;
    char path[1024], msg[256];
    uint8_t *img = smooth_image(64, 48), *out;
    int w, h;
    write_jpeg(pathf(path, "a.jpg"), img, 64, 48, 3, 95);
    assert_true(dpt_image_decode(path, &out, &w, &h, msg, sizeof msg));
    assert_int_equal(w, 64), assert_int_equal(h, 48);
    double sum = 0;
    int worst = 0;
    for (int i = 0; i < 64 * 48 * 3; i++) {
        int d = abs(out[i] - img[i]);
        sum += d, worst = d > worst ? d : worst;
    }
    /* JPEG's tolerance at quality 95 on a smooth picture (chroma subsampled 2x2) */
    assert_true(sum / (64 * 48 * 3) < 2.0);
    assert_true(worst <= 24);
    free(out), free(img);
}

/* Resize(256) + CenterCrop(224) of a 256 x 300 image is a plain crop at (16, 38): PIL's
 * filter at scale 1 is the identity. */
static void test_eval_crop_exact(void **state)
{
    (void)state;
    char path[1024], msg[256];
    uint8_t *img = noise_image(256, 300, 3, 3), out[224 * 224 * 3];
    write_png(pathf(path, "e.png"), img, 256, 300, 3);
    dpt_image_view v = eval_view(224, 256);
    dpt_image_scratch s = {0};
    dpt_image_box box;
    assert_true(dpt_image_sample(path, &v, NULL, out, &s, &box, msg, sizeof msg));
    for (int y = 0; y < 224; y++)
        assert_memory_equal(out + y * 224 * 3, img + ((y + 38) * 256 + 16) * 3, 224 * 3);
    dpt_image_scratch_free(&s);
    free(img);
}

/* PIL's bilinear resize of the whole image in float64 (the reference: resize, then crop). */
static void pil_resize_ref(const uint8_t *src, int W, int H, int ow, int oh, double *dst)
{
    double *tmp = malloc(sizeof(double) * (size_t)ow * H * 3);
    for (int pass = 0; pass < 2; pass++) {
        int in = pass ? H : W, out = pass ? oh : ow;
        double scale = (double)in / out, fs = scale > 1 ? scale : 1, support = fs;
        for (int o = 0; o < out; o++) {
            double center = (o + 0.5) * scale, wsum = 0, w[512];
            int lo = (int)floor(center - support + 0.5), hi = (int)floor(center + support + 0.5);
            lo = lo < 0 ? 0 : lo, hi = hi > in ? in : hi;
            for (int x = lo; x < hi; x++) {
                double t = fabs((x - center + 0.5) / fs);
                w[x - lo] = t < 1 ? 1 - t : 0, wsum += w[x - lo];
            }
            for (int other = 0; other < (pass ? ow : H); other++)
                for (int c = 0; c < 3; c++) {
                    double acc = 0;
                    for (int x = lo; x < hi; x++)
                        acc += w[x - lo] / wsum * (pass ? tmp[((size_t)x * ow + other) * 3 + c]
                                                       : src[((size_t)other * W + x) * 3 + c]);
                    if (pass)
                        dst[((size_t)o * ow + other) * 3 + c] = acc;
                    else
                        tmp[((size_t)other * ow + o) * 3 + c] = acc;
                }
        }
    }
    free(tmp);
}

static void test_resize_matches_reference(void **state)
{
    (void)state;
    char path[1024], msg[256];
    int W = 300, H = 200;
    uint8_t *img = noise_image(W, H, 3, 4), out[96 * 96 * 3];
    write_png(pathf(path, "r.png"), img, W, H, 3);
    dpt_image_view v = eval_view(96, 100); /* 300x200 -> 150x100, crop 96 at (27, 2) */
    dpt_image_scratch s = {0};
    assert_true(dpt_image_sample(path, &v, NULL, out, &s, NULL, msg, sizeof msg));
    double *ref = malloc(sizeof(double) * 150 * 100 * 3);
    pil_resize_ref(img, W, H, 150, 100, ref);
    int worst = 0;
    for (int y = 0; y < 96; y++)
        for (int x = 0; x < 96 * 3; x++) {
            double r = ref[((size_t)(y + 2) * 150) * 3 + 27 * 3 + x];
            int d = abs(out[(y * 96) * 3 + x] - (int)lround(r));
            worst = d > worst ? d : worst;
        }
    assert_true(worst <= 1);
    free(ref), free(img);
    dpt_image_scratch_free(&s);
}

/* ---------------------------------------------------------------- the draws */

static void test_crop_boxes(void **state)
{
    (void)state;
    dpt_image_view v = train_view(224);
    int sizes[][2] = {{500, 375}, {375, 500}, {224, 224}, {1, 1}, {4000, 30}, {640, 480}};
    for (int s = 0; s < 6; s++)
        for (int k = 0; k < 500; k++) {
            int W = sizes[s][0], H = sizes[s][1];
            dpt_rng a, b;
            dpt_rng_seed(&a, (uint64_t)k), dpt_rng_seed(&b, (uint64_t)k);
            dpt_image_box x, y;
            dpt_image_crop_box(W, H, &v, &a, &x);
            dpt_image_crop_box(W, H, &v, &b, &y);
            assert_true(x.x == y.x && x.y == y.y && x.w == y.w && x.h == y.h && x.flip == y.flip); /* same seed */
            assert_true(x.x >= 0 && x.y >= 0 && x.w >= 1 && x.h >= 1);
            assert_true(x.x + x.w <= W && x.y + x.h <= H);
            double area = x.w * x.h / ((double)W * H), ratio = x.w / x.h;
            bool central = x.x == floor((W - x.w) / 2) && x.y == floor((H - x.h) / 2);
            if (!central && W >= 100 && H >= 100) { /* a drawn box: torchvision's ranges, up to rounding */
                assert_true(area > 0.08 * 0.9 && area < 1.0 + 1e-9);
                assert_true(ratio > 0.75 * 0.95 && ratio < 4.0 / 3.0 * 1.05);
            }
        }
}

/* The evaluation crop of images far wider than tall (1,000,000 x 1 resized to 4096 on its
 * short side: a long side of 4e9, past int; UBSan saw the overflow): a box inside the image. */
static void test_extreme_aspect_eval_box(void **state)
{
    (void)state;
    dpt_image_view v = train_view(32);
    v.train = false, v.resize = 4096;
    int sizes[][2] = {{1000000, 1}, {1, 1000000}, {2000000000, 3}};
    for (int s = 0; s < 3; s++) {
        dpt_rng rng;
        dpt_rng_seed(&rng, 1);
        dpt_image_box b;
        dpt_image_crop_box(sizes[s][0], sizes[s][1], &v, &rng, &b);
        assert_true(isfinite(b.x) && isfinite(b.y) && b.w > 0 && b.h > 0);
        assert_true(b.x >= 0 && b.y >= 0 && b.x + b.w <= sizes[s][0] * (1 + 1e-9) && b.y + b.h <= sizes[s][1] * (1 + 1e-9));
    }
}

/* dpt_image_sample's box is the draw dpt_image_crop_box makes from the same seed. */
static void test_sample_box_is_the_draw(void **state)
{
    (void)state;
    char path[1024], msg[256];
    uint8_t *img = smooth_image(500, 375), out[64 * 64 * 3];
    write_jpeg(pathf(path, "s.jpg"), img, 500, 375, 3, 90);
    dpt_image_view v = train_view(64);
    dpt_image_scratch s = {0};
    for (int k = 0; k < 20; k++) {
        dpt_rng a, b;
        dpt_rng_seed(&a, 100 + (uint64_t)k), dpt_rng_seed(&b, 100 + (uint64_t)k);
        dpt_image_box got, want;
        assert_true(dpt_image_sample(path, &v, &a, out, &s, &got, msg, sizeof msg));
        dpt_image_crop_box(500, 375, &v, &b, &want);
        assert_true(got.x == want.x && got.y == want.y && got.w == want.w && got.h == want.h &&
                    got.flip == want.flip);
    }
    dpt_image_scratch_free(&s);
    free(img);
}

/* Large JPEGs decode at 1/2, 1/4, 1/8 when the crop keeps its pixels, and look the same. */
static void test_dct_scaling(void **state)
{
    (void)state;
    char path[1024], msg[256];
    uint8_t *img = smooth_image(1600, 1200), on[224 * 224 * 3], off[224 * 224 * 3];
    write_jpeg(pathf(path, "big.jpg"), img, 1600, 1200, 3, 90);
    dpt_image_view v = eval_view(224, 256);
    dpt_image_scratch s = {0};
    dpt_image_box box;
    assert_true(dpt_image_sample(path, &v, NULL, on, &s, &box, msg, sizeof msg));
    assert_int_equal(box.scale_denom, 4); /* 1200 / 4 = 300 >= 256 > 1200 / 8 */
    v.dct_scaling = false;
    assert_true(dpt_image_sample(path, &v, NULL, off, &s, &box, msg, sizeof msg));
    assert_int_equal(box.scale_denom, 1);
    double sum = 0;
    for (int i = 0; i < 224 * 224 * 3; i++)
        sum += abs(on[i] - off[i]);
    assert_true(sum / (224 * 224 * 3) < 2.0);
    dpt_image_scratch_free(&s);
    free(img);
}

/* ---------------------------------------------------------------- bad files */

static void expect_bad(const char *path, const dpt_image_view *v, const char *words)
{
    char msg[700];
    uint8_t out[64 * 64 * 3];
    dpt_image_scratch s = {0};
    dpt_rng rng;
    dpt_rng_seed(&rng, 1);
    bool ok = dpt_image_sample(path, v, &rng, out, &s, NULL, msg, sizeof msg);
    dpt_image_scratch_free(&s);
    if (ok || !strstr(msg, words)) fail_msg("%s: %s, expected a message with '%s'", path, ok ? "decoded" : msg, words);
}

static void test_bad_files(void **state)
{
    (void)state;
    char path[1024], msg[700];
    uint8_t *img = smooth_image(200, 150), out[64 * 64 * 3];
    dpt_image_view v = train_view(64);
    write_jpeg(pathf(path, "whole.jpg"), img, 200, 150, 3, 90);
    /* truncated: the first half of a JPEG */
    FILE *f = fopen(path, "rb");
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    f = fopen(pathf(path, "cut.jpg"), "wb");
    fwrite(buf, 1, n / 2, f);
    fclose(f);
    expect_bad(path, &v, "truncated");
    f = fopen(pathf(path, "text.jpg"), "w");
    fputs("this is not an image\n", f);
    fclose(f);
    expect_bad(path, &v, "not a JPEG or PNG");
    fclose(fopen(pathf(path, "empty.jpg"), "w"));
    expect_bad(path, &v, "empty");
    expect_bad(pathf(path, "missing.jpg"), &v, "cannot open");
    /* a sparse 1 GB file: refused by its size before a byte is read (an image within the
     * default max_image_pixels is at most 4 bytes a pixel plus 16 MiB) */
    int sparse = open(pathf(path, "sparse.jpg"), O_CREAT | O_WRONLY, 0600);
    assert_true(sparse >= 0 && ftruncate(sparse, 1000000000) == 0);
    close(sparse);
    expect_bad(path, &v, "1000000000 bytes: larger than any image of [data] max_image_pixels");
    assert_int_equal(mkfifo(pathf(path, "pipe.jpg"), 0600), 0); /* refused at once, not waited on */
    expect_bad(path, &v, "not a regular file");
    /* a corrupt header: a JPEG's start marker, then garbage */
    memcpy(buf + 3, "garbage garbage garbage", 23);
    f = fopen(pathf(path, "header.jpg"), "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    expect_bad(path, &v, "JPEG:");
    /* 1 x 1: handled (the crop is the pixel) */
    uint8_t px[3] = {10, 200, 30};
    dpt_image_scratch s = {0};
    dpt_rng rng;
    dpt_rng_seed(&rng, 3);
    write_png(pathf(path, "one.png"), px, 1, 1, 3);
    assert_true(dpt_image_sample(path, &v, &rng, out, &s, NULL, msg, sizeof msg));
    assert_true(out[0] == 10 && out[1] == 200 && out[2] == 30 && out[64 * 64 * 3 - 2] == 200);
    write_jpeg(pathf(path, "one.jpg"), px, 1, 1, 3, 95);
    assert_true(dpt_image_sample(path, &v, &rng, out, &s, NULL, msg, sizeof msg));
    /* 10000 x 10000: a JPEG is handled at 1/8 (1250 x 1250 decoded); without DCT scaling, or
     * as a PNG, it is over max_image_pixels and refused with the key's name */
    uint8_t *huge = calloc((size_t)10000 * 10000, 1);
    for (int i = 0; i < 10000; i++)
        huge[(size_t)i * 10000 + i] = 255;
    write_jpeg(pathf(path, "huge.jpg"), huge, 10000, 10000, 1, 50);
    dpt_image_box box;
    dpt_image_view big = eval_view(64, 73);
    assert_true(dpt_image_sample(path, &big, &rng, out, &s, &box, msg, sizeof msg));
    assert_int_equal(box.scale_denom, 8);
    big.dct_scaling = false;
    expect_bad(path, &big, "max_image_pixels");
    write_png(pathf(path, "huge.png"), huge, 10000, 10000, 1);
    expect_bad(path, &v, "max_image_pixels");
    free(huge), free(img);
    dpt_image_scratch_free(&s);
}

/* ---------------------------------------------------------------- the folder */

static void make_dirs(const char *set, int nclasses)
{
    char path[1024];
    mkdir(pathf(path, "%s", set), 0755);
    for (int c = 0; c < nclasses; c++)
        mkdir(pathf(path, "%s/class%c", set, 'a' + c), 0755);
}

/* A folder of n flat-colour PNGs a class (sample id k: colour (k, 255 - k, 7k)), varied sizes. */
static void make_flat_folder(const char *name, int nclasses, int ntrain, int nval)
{
    char path[1024], sub[1100];
    mkdir(pathf(path, "%s", name), 0755);
    for (int part = 0; part < 2; part++) {
        snprintf(sub, sizeof sub, "%s/%s", name, part ? "val" : "train");
        make_dirs(sub, nclasses);
        for (int c = 0; c < nclasses; c++)
            for (int k = 0; k < (part ? nval : ntrain); k++) {
                int id = c * (part ? nval : ntrain) + k;
                flat_png(pathf(path, "%s/class%c/%03d.png", sub, 'a' + c, k), 40 + 7 * k, 30 + 5 * c, id);
            }
    }
}

static bool open_folder(const char *name, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    char dir[1024];
    dpt_folder_options o = {.dir = pathf(dir, "%s", name), .train = train_view(16), .eval = eval_view(16, 18)};
    return dpt_folder_open(&o, train, test, err);
}

static void test_folder_listing(void **state)
{
    (void)state;
    char path[1024];
    dpt_dataset *tr, *te;
    dpt_error err = {{0}};
    make_flat_folder("f1", 3, 4, 2);
    FILE *f = fopen(pathf(path, "f1/train/classb/readme.txt"), "w");
    fclose(f);
    assert_int_equal(mkfifo(pathf(path, "f1/train/classa/pipe.jpg"), 0600), 0); /* no image: ignored */
    assert_true(open_folder("f1", &tr, &te, &err));
    assert_int_equal(tr->n, 12), assert_int_equal(te->n, 6), assert_int_equal(tr->num_classes, 3);
    assert_int_equal(tr->files->ignored, 2);
    assert_non_null(strstr(tr->files->list_note, "walked"));
    /* sorted: class a's files, then b's, then c's, each in name order */
    char p[8400];
    assert_non_null(strstr(dpt_folder_path(tr->files, 5, p, sizeof p), "/train/classb/001.png"));
    assert_int_equal(tr->labels[5], 1);
    dpt_dataset_free(tr), dpt_dataset_free(te);
    /* the second open reads the cached list */
    assert_true(open_folder("f1", &tr, &te, &err));
    assert_non_null(strstr(tr->files->list_note, "file list from"));
    dpt_dataset_free(tr), dpt_dataset_free(te);
    /* a new file changes its folder's mtime: the tree is walked again and the file counted */
    sleep(0); /* mtimes have nanoseconds */
    flat_png(pathf(path, "f1/train/classc/zzz.png"), 8, 8, 99);
    assert_true(open_folder("f1", &tr, &te, &err));
    assert_non_null(strstr(tr->files->list_note, "walked"));
    assert_int_equal(tr->n, 13);
    assert_int_equal(tr->labels[12], 2);
    dpt_dataset_free(tr), dpt_dataset_free(te);
    /* an empty class folder is named */
    mkdir(pathf(path, "f1/train/classd"), 0755);
    assert_false(open_folder("f1", &tr, &te, &err));
    assert_non_null(strstr(err.msg, "classd: class folder without"));
    rmdir(path);
    /* a validation class the training set lacks */
    mkdir(pathf(path, "f1/val/classz"), 0755);
    flat_png(pathf(path, "f1/val/classz/x.png"), 8, 8, 1);
    assert_false(open_folder("f1", &tr, &te, &err));
    assert_non_null(strstr(err.msg, "classz: a validation class"));
    /* no such folder */
    assert_false(open_folder("nothere", &tr, &te, &err));
    assert_non_null(strstr(err.msg, "nothere/train: no such folder"));
}

/* ---------------------------------------------------------------- the loader */

static dpt_loader_options folder_opts(int workers)
{
    return (dpt_loader_options){.batch = 4,
                                .shuffle = true,
                                .drop_last = true,
                                .seed = 9,
                                .world_size = 1,
                                .mean = 0,
                                .std = 1.0f / 255.0f,
                                .workers = workers,
                                .prefetch = 2};
}

/* Every batch of `epochs` epochs, floats and labels. */
static int64_t run_epochs(dpt_ctx *ctx, dpt_dataset *ds, const dpt_loader_options *o, int epochs, float *x,
                          int32_t *y)
{
    dpt_loader *l = dpt_loader_new(ctx, ds, o);
    int64_t n = 0, chw = ds->c * ds->h * ds->w;
    dpt_batch b;
    for (int e = 0; e < epochs; e++) {
        dpt_loader_start_epoch(l, e);
        while (dpt_loader_next(l, &b)) {
            memcpy(x + n * chw, b.x->data, (size_t)(b.size * chw) * sizeof(float));
            memcpy(y + n, b.labels, (size_t)b.size * sizeof *y);
            n += b.size;
        }
    }
    dpt_loader_free(l);
    return n;
}

static void test_loader_workers_identical(void **state)
{
    (void)state;
    char path[1024];
    dpt_dataset *tr, *te;
    dpt_error err = {{0}};
    make_flat_folder("f2", 2, 10, 3);
    /* a few real pictures among the flat ones: JPEG, cropped, flipped */
    uint8_t *img = smooth_image(120, 90);
    write_jpeg(pathf(path, "f2/train/classa/p1.jpg"), img, 120, 90, 3, 90);
    write_jpeg(pathf(path, "f2/train/classb/p2.jpg"), img, 90, 120, 3, 80);
    free(img);
    assert_true(open_folder("f2", &tr, &te, &err));
    dpt_ctx *ctx = test_ctx(1, 1);
    int64_t chw = 3 * 16 * 16;
    float *x[3];
    int32_t y[3][64];
    int workers[3] = {0, 1, 4};
    int64_t n[3];
    for (int k = 0; k < 3; k++) {
        x[k] = malloc(sizeof(float) * 64 * chw);
        dpt_loader_options o = folder_opts(workers[k]);
        n[k] = run_epochs(ctx, tr, &o, 2, x[k], y[k]);
    }
    assert_int_equal(n[0], 40); /* 22 files, 5 batches of 4, two epochs */
    for (int k = 1; k < 3; k++) {
        assert_int_equal(n[k], n[0]);
        assert_memory_equal(x[k], x[0], (size_t)(n[0] * chw) * sizeof(float));
        assert_memory_equal(y[k], y[0], (size_t)n[0] * sizeof(int32_t));
    }
    /* the two epochs differ (new permutation, new draws) */
    assert_true(memcmp(x[0], x[0] + 20 * chw, (size_t)(20 * chw) * sizeof(float)) != 0);
    /* per-channel normalisation of a flat sample: (byte / 255 - mean[c]) / std[c] */
    dpt_loader_options o = folder_opts(2);
    o.norm_channels = 3;
    float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    memcpy(o.channel_mean, mean, sizeof mean), memcpy(o.channel_std, sd, sizeof sd);
    o.shuffle = false;
    dpt_loader *l = dpt_loader_new(ctx, te, &o);
    dpt_batch b;
    assert_true(dpt_loader_next(l, &b));
    for (int c = 0; c < 3; c++) { /* val sample 0 of class a: id 0, colour (0, 255, 0) */
        float byte = c == 1 ? 255.0f : 0.0f, want = (byte / 255.0f - mean[c]) / sd[c];
        assert_float_equal(b.x->data[c * 256 + 17], want, 1e-5);
    }
    dpt_loader_free(l);
    for (int k = 0; k < 3; k++)
        free(x[k]);
    dpt_dataset_free(tr), dpt_dataset_free(te);
    dpt_ctx_free(ctx);
}

/* The id of a flat sample from its first pixel (mean 0, std 1/255: the floats are bytes). */
static int sample_id(const float *x)
{
    return (int)lrintf(x[0]);
}

static void test_loader_shards_and_resume(void **state)
{
    (void)state;
    dpt_dataset *tr, *te;
    dpt_error err = {{0}};
    make_flat_folder("f3", 2, 12, 2);
    assert_true(open_folder("f3", &tr, &te, &err));
    dpt_ctx *ctx = test_ctx(1, 1);
    int64_t chw = 3 * 16 * 16;
    float *all = malloc(sizeof(float) * 24 * chw), *mine = malloc(sizeof(float) * 24 * chw);
    int32_t y[24], ym[24];
    dpt_loader_options o = folder_opts(2);
    o.batch = 2;
    int64_t n = run_epochs(ctx, tr, &o, 1, all, y);
    assert_int_equal(n, 24);
    /* two ranks: rank r's i-th sample is the single process's (r + 2i)-th, the same pixels
     * (draws are seeded by the sample, not the position), the shards disjoint and covering */
    int hits[24] = {0};
    o.world_size = 2;
    for (int r = 0; r < 2; r++) {
        o.rank = r;
        int64_t m = run_epochs(ctx, tr, &o, 1, mine, ym);
        assert_int_equal(m, 12);
        for (int64_t i = 0; i < m; i++) {
            assert_memory_equal(mine + i * chw, all + (r + 2 * i) * chw, (size_t)chw * sizeof(float));
            assert_int_equal(ym[i], y[r + 2 * i]);
            hits[sample_id(mine + i * chw)]++;
        }
    }
    for (int i = 0; i < 24; i++)
        assert_int_equal(hits[i], 1);
    /* resume mid-epoch: a new loader at epoch 1 that skips 5 batches gives the rest of the
     * uninterrupted epoch 1 */
    o.world_size = 1, o.rank = 0;
    float *two = malloc(sizeof(float) * 48 * chw);
    int32_t y2[48];
    run_epochs(ctx, tr, &o, 2, two, y2);
    dpt_loader *l = dpt_loader_new(ctx, tr, &o);
    dpt_loader_start_epoch(l, 1);
    dpt_loader_skip(l, 5);
    dpt_batch b;
    int64_t at = 24 + 10;
    while (dpt_loader_next(l, &b)) {
        assert_memory_equal(b.x->data, two + at * chw, (size_t)(b.size * chw) * sizeof(float));
        at += b.size;
    }
    assert_int_equal(at, 48);
    dpt_loader_free(l);
    free(all), free(mine), free(two);
    dpt_dataset_free(tr), dpt_dataset_free(te);
    dpt_ctx_free(ctx);
}

/* bad_files = skip: the unreadable file is replaced by the next one of the list, counted. */
static void test_loader_skips_bad_files(void **state)
{
    (void)state;
    char path[1024];
    dpt_dataset *tr, *te;
    dpt_error err = {{0}};
    make_flat_folder("f4", 1, 6, 1);
    FILE *f = fopen(pathf(path, "f4/train/classa/002.png"), "w"); /* sample 2: now text */
    fputs("not a picture", f);
    fclose(f);
    assert_true(open_folder("f4", &tr, &te, &err));
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_loader_options o = folder_opts(2);
    o.shuffle = false, o.batch = 6, o.skip_bad_files = true;
    dpt_loader *l = dpt_loader_new(ctx, tr, &o);
    dpt_batch b;
    assert_true(dpt_loader_next(l, &b));
    int64_t chw = 3 * 16 * 16;
    int want[6] = {0, 1, 3, 3, 4, 5}; /* 2 -> the next file, 3 */
    for (int i = 0; i < 6; i++)
        assert_int_equal(sample_id(b.x->data + i * chw), want[i]);
    assert_int_equal(dpt_loader_bad_files(l), 1);
    dpt_loader_free(l);
    dpt_dataset_free(tr), dpt_dataset_free(te);
    dpt_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_png_exact),
        cmocka_unit_test(test_decode_jpeg_close),
        cmocka_unit_test(test_eval_crop_exact),
        cmocka_unit_test(test_resize_matches_reference),
        cmocka_unit_test(test_crop_boxes),
        cmocka_unit_test(test_extreme_aspect_eval_box),
        cmocka_unit_test(test_sample_box_is_the_draw),
        cmocka_unit_test(test_dct_scaling),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_folder_listing),
        cmocka_unit_test(test_loader_workers_identical),
        cmocka_unit_test(test_loader_shards_and_resume),
        cmocka_unit_test(test_loader_skips_bad_files),
    };
    if (!dpt_image_have_jpeg() || !dpt_image_have_png()) {
        print_message("skipped: this build has no JPEG or PNG decoder\n");
        return 0;
    }
    return cmocka_run_group_tests_name("image files", tests, setup, teardown);
}
