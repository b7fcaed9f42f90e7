/* make_image_folder: write an ImageNet-shaped folder of JPEGs (and PNGs) for [data] source =
 * folder: OUT/train/<class>/NNNNN.jpg and OUT/val/<class>/NNNNN.jpg, 10 classes. The pictures are
 * Fashion-MNIST's, so a model can learn them: each 28x28 image scaled up to about
 * --width x --height (sizes varied by --vary), tinted by a per-image colour and given
 * photo-like fine grain so the files code like photographs (about 0.5 bytes a pixel at
 * quality 90, where a flat upscale would be a few KB). Without the data set (--source
 * synthetic) the classes are shapes. scripts/make_image_folder.sh builds and runs this. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dpt.h"
#include "data/image.h"
#include "runtime/error.h"
#include "runtime/rng.h"

static const char *const fmnist_names[10] = {"00_tshirt", "01_trouser", "02_pullover", "03_dress", "04_coat",
                                             "05_sandal", "06_shirt",   "07_sneaker",  "08_bag",   "09_ankle_boot"};

static void usage(void)
{
    fprintf(stderr,
            "usage: make_image_folder OUT [--train N] [--val N] [--width W] [--height H] [--vary F] [--quality Q]\n"
            "                         [--png-every K] [--source fmnist|synthetic] [--fmnist DIR] [--seed S]\n"
            "  --train N     training images per class (default 100)\n"
            "  --val N       validation images per class (default 20)\n"
            "  --width W, --height H   the typical size (default 500 x 375, ImageNet's median)\n"
            "  --vary F      each side drawn in [1-F, 1+F] x the typical one (default 0.3)\n"
            "  --quality Q   JPEG quality (default 90)\n"
            "  --png-every K every K-th image a PNG instead (default 0: none)\n"
            "  --source S    fmnist (default when the data set is installed) or synthetic\n");
    exit(2);
}

/* flag's value as a whole number in [lo, hi], or usage (atoi took "12x" as 12, "x" as 0 and
 * overflowed on 99999999999) */
static long long number(const char *flag, const char *v, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (end == v || *end || errno == ERANGE || n < lo || n > hi) {
        fprintf(stderr, "make_image_folder: %s %s: expected a whole number from %lld to %lld\n", flag, v, lo, hi);
        usage();
    }
    return n;
}

static void mkdir_or_die(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "make_image_folder: %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

/* One picture: the 28x28 source (or a shape) bilinearly scaled to w x h, tinted, grained. */
static void paint(const uint8_t *src, int cls, int w, int h, dpt_rng *rng, uint8_t *out)
{
    float tint[3], bg[3];
    for (int c = 0; c < 3; c++)
        tint[c] = 0.45f + 0.55f * dpt_rng_uniform(rng), bg[c] = 40.0f * dpt_rng_uniform(rng);
    float cx = 0.3f + 0.4f * dpt_rng_uniform(rng), cy = 0.3f + 0.4f * dpt_rng_uniform(rng);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            float v;
            if (src) {
                float sx = (x + 0.5f) * 28.0f / w - 0.5f, sy = (y + 0.5f) * 28.0f / h - 0.5f;
                int x0 = (int)floorf(sx), y0 = (int)floorf(sy);
                float fx = sx - x0, fy = sy - y0, acc = 0;
                for (int dy = 0; dy < 2; dy++)
                    for (int dx = 0; dx < 2; dx++) {
                        int xx = x0 + dx < 0 ? 0 : x0 + dx > 27 ? 27 : x0 + dx;
                        int yy = y0 + dy < 0 ? 0 : y0 + dy > 27 ? 27 : y0 + dy;
                        acc += (dx ? fx : 1 - fx) * (dy ? fy : 1 - fy) * src[yy * 28 + xx];
                    }
                v = acc;
            } else { /* synthetic: class c is a ring of radius 0.1 + 0.035 c around a drawn centre */
                float dx = (float)x / w - cx, dy = (float)y / h - cy, r = sqrtf(dx * dx + dy * dy);
                v = fabsf(r - (0.1f + 0.035f * cls)) < 0.03f ? 230.0f : 0.0f;
            }
            float grain = 56.0f * (dpt_rng_uniform(rng) - 0.5f);
            for (int c = 0; c < 3; c++) {
                float p = bg[c] + v * tint[c] + grain;
                out[((size_t)y * w + x) * 3 + c] = (uint8_t)(p < 0 ? 0 : p > 255 ? 255 : p + 0.5f);
            }
        }
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') usage();
    const char *out = argv[1], *source = NULL, *fmnist = "/usr/share/datasets/fashion-mnist";
    int ntrain = 100, nval = 20, W = 500, H = 375, quality = 90, png_every = 0;
    double vary = 0.3;
    uint64_t seed = 1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage();
        if (!strcmp(a, "--train")) ntrain = (int)number(a, v, 1, 1000000);
        else if (!strcmp(a, "--val")) nval = (int)number(a, v, 1, 1000000);
        else if (!strcmp(a, "--width")) W = (int)number(a, v, 1, 16384);
        else if (!strcmp(a, "--height")) H = (int)number(a, v, 1, 16384);
        else if (!strcmp(a, "--vary")) {
            char *end;
            vary = strtod(v, &end);
            if (end == v || *end) vary = -1; /* refused below */
        } else if (!strcmp(a, "--quality")) quality = (int)number(a, v, 1, 100);
        else if (!strcmp(a, "--png-every")) png_every = (int)number(a, v, 0, 1000000000);
        else if (!strcmp(a, "--source")) source = v;
        else if (!strcmp(a, "--fmnist")) fmnist = v;
        else if (!strcmp(a, "--seed")) seed = (uint64_t)number(a, v, 0, INT64_MAX);
        else usage();
        i++;
    }
    if (!(vary >= 0 && vary < 1)) {
        fprintf(stderr, "make_image_folder: --vary takes a number in [0, 1)\n");
        usage();
    }
    dpt_dataset *sets[2] = {NULL, NULL};
    dpt_error err = {{0}};
    if (!source || !strcmp(source, "fmnist")) { /* paths measured (dpt_strf), never cut */
        char *a = dpt_strf("%s/train-images-idx3-ubyte.gz", fmnist), *b = dpt_strf("%s/train-labels-idx1-ubyte.gz", fmnist);
        sets[0] = dpt_idx_load(a, b, &err);
        free(a), free(b);
        a = dpt_strf("%s/t10k-images-idx3-ubyte.gz", fmnist), b = dpt_strf("%s/t10k-labels-idx1-ubyte.gz", fmnist);
        if (sets[0]) sets[1] = dpt_idx_load(a, b, &err);
        free(a), free(b);
        if (!sets[1] && source) {
            fprintf(stderr, "make_image_folder: %s\n", err.msg);
            return 1;
        }
        if (!sets[1]) dpt_dataset_free(sets[0]), sets[0] = NULL;
    }
    bool synthetic = !sets[0];
    mkdir_or_die(out);
    dpt_rng rng;
    dpt_rng_seed(&rng, seed);
    long long files = 0, bytes = 0;
    for (int part = 0; part < 2; part++) {
        char *a = dpt_strf("%s/%s", out, part ? "val" : "train");
        mkdir_or_die(a);
        int per = part ? nval : ntrain;
        int64_t next = 0; /* walk the source set for each class's next image */
        for (int cls = 0; cls < 10; cls++) {
            char *b = synthetic ? dpt_strf("%s/%02d_ring%d", a, cls, cls) : dpt_strf("%s/%s", a, fmnist_names[cls]);
            mkdir_or_die(b);
            next = 0;
            for (int k = 0; k < per; k++) {
                const uint8_t *src = NULL;
                if (!synthetic) {
                    const dpt_dataset *ds = sets[part];
                    while (next < ds->n && ds->labels[next] != cls)
                        next++;
                    if (next == ds->n) next = 0; /* more asked than the set has: round again */
                    while (ds->labels[next] != cls)
                        next++;
                    src = ds->images + next++ * 784;
                }
                int w = (int)lround(W * (1 + vary * (2 * dpt_rng_uniform(&rng) - 1)));
                int h = (int)lround(H * (1 + vary * (2 * dpt_rng_uniform(&rng) - 1)));
                w = w < 1 ? 1 : w, h = h < 1 ? 1 : h;
                uint8_t *pix = malloc((size_t)w * h * 3);
                if (!pix) return fprintf(stderr, "make_image_folder: out of memory\n"), 1;
                paint(src, cls, w, h, &rng, pix);
                bool png = png_every > 0 && files % png_every == png_every - 1;
                char msg[512], *path = dpt_strf("%s/%05d.%s", b, k, png ? "png" : "jpg");
                bool ok = png ? dpt_image_write_png(path, pix, w, h, 3, msg, sizeof msg)
                              : dpt_image_write_jpeg(path, pix, w, h, 3, quality, msg, sizeof msg);
                free(pix);
                if (!ok) return fprintf(stderr, "make_image_folder: %s\n", msg), 1;
                struct stat st;
                if (stat(path, &st) == 0) bytes += st.st_size;
                free(path);
                files++;
            }
            free(b);
        }
        free(a);
    }
    printf("make_image_folder: %s: 10 classes (%s), %d train + %d val images per class, about %dx%d, %lld files, "
           "%.1f MB (%.0f KB a file)\n",
           out, synthetic ? "synthetic rings" : "Fashion-MNIST", ntrain, nval, W, H, files, bytes / 1e6,
           files ? bytes / 1e3 / files : 0.0);
    dpt_dataset_free(sets[0]);
    dpt_dataset_free(sets[1]);
    return 0;
}
