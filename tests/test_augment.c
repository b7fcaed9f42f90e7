/* test_augment.c: [data] auto_augment (data/autoaugment.c) against PIL itself. Every operation
 * of TrivialAugmentWide and RandAugment, at magnitudes of both signs, on an image with smooth
 * ramps, edges and noise (not spanning 0..255, so autocontrast and equalize have work), is
 * compared with what torchvision's _apply_op does to a PIL image (the same PIL calls, written
 * out in Python: ImageEnhance, ImageOps, Image.transform with torchvision's inverse affine
 * matrix, Image.rotate), run by /usr/bin/python3 with Debian's python3-pil: byte for byte, but
 * for the geometric operations, whose sampling positions PIL and this file compute in double in
 * another order, where at most 0.2% of the bytes may differ by 1. The magnitude tables against
 * torch.linspace's float32 values computed with numpy. Skipped, saying why, without PIL. */
#include "tests/testutil.h"
#include "data/image.h"

enum { W = 61, H = 47, N = W * H * 3, MAXN = 64 * 64 * 3 };

static const char *const names[DPT_AUG_OPS] = {
    "Identity", "ShearX",   "ShearY",    "TranslateX", "TranslateY", "Rotate",       "Brightness",
    "Color",    "Contrast", "Sharpness", "Posterize",  "Solarize",   "AutoContrast", "Equalize"};

static const char *python_reference =
    "import sys, math\n"
    "from PIL import Image, ImageEnhance, ImageOps\n"
    "w, h = int(sys.argv[2]), int(sys.argv[3])\n"
    "src = Image.frombytes('RGB', (w, h), open(sys.argv[1], 'rb').read())\n"
    "def inv(center, angle, translate, shear):\n" /* torchvision's _get_inverse_affine_matrix, scale 1 */
    "    rot = math.radians(angle); sx = math.radians(shear[0]); sy = math.radians(shear[1])\n"
    "    cx, cy = center; tx, ty = translate\n"
    "    a = math.cos(rot - sy) / math.cos(sy)\n"
    "    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)\n"
    "    c = math.sin(rot - sy) / math.cos(sy)\n"
    "    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)\n"
    "    m = [d, -b, 0.0, -c, a, 0.0]\n"
    "    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty)\n"
    "    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty)\n"
    "    m[2] += cx; m[5] += cy\n"
    "    return m\n"
    "def affine(img, m):\n"
    "    return img.transform(img.size, Image.AFFINE, m, Image.BILINEAR, fillcolor=(0, 0, 0))\n"
    "out = open(sys.argv[4], 'wb')\n"
    "for line in open(sys.argv[5]):\n"
    "    op, mag = line.split(); mag = float(mag); img = src.copy()\n"
    "    if op == 'ShearX': img = affine(img, inv([0, 0], 0.0, [0, 0], [math.degrees(math.atan(mag)), "
    "0.0]))\n"
    "    elif op == 'ShearY': img = affine(img, inv([0, 0], 0.0, [0, 0], [0.0, "
    "math.degrees(math.atan(mag))]))\n"
    "    elif op == 'TranslateX': img = affine(img, inv([w * 0.5, h * 0.5], 0.0, [int(mag), 0], [0.0, "
    "0.0]))\n"
    "    elif op == 'TranslateY': img = affine(img, inv([w * 0.5, h * 0.5], 0.0, [0, int(mag)], [0.0, "
    "0.0]))\n"
    "    elif op == 'Rotate': img = img.rotate(mag, Image.BILINEAR, False, None, fillcolor=(0, 0, 0))\n"
    "    elif op == 'Brightness': img = ImageEnhance.Brightness(img).enhance(1.0 + mag)\n"
    "    elif op == 'Color': img = ImageEnhance.Color(img).enhance(1.0 + mag)\n"
    "    elif op == 'Contrast': img = ImageEnhance.Contrast(img).enhance(1.0 + mag)\n"
    "    elif op == 'Sharpness': img = ImageEnhance.Sharpness(img).enhance(1.0 + mag)\n"
    "    elif op == 'Posterize': img = ImageOps.posterize(img, int(mag))\n"
    "    elif op == 'Solarize': img = ImageOps.solarize(img, mag)\n"
    "    elif op == 'AutoContrast': img = ImageOps.autocontrast(img)\n"
    "    elif op == 'Equalize': img = ImageOps.equalize(img)\n"
    "    out.write(img.tobytes())\n";

/* A picture with something for every operation: ramps, a bright disc with a hard edge, noise,
 * values within 20..230 */
static void make_image_sized(uint8_t *img, int w, int h)
{
    dpt_rng rng;
    dpt_rng_seed(&rng, 9);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double r2 = (x - 20.0) * (x - 20.0) + (y - 25.0) * (y - 25.0);
            for (int c = 0; c < 3; c++) {
                double v = 20 + 150.0 * x / w * (c == 0) + 150.0 * y / h * (c == 1) + 60.0 * (c == 2);
                if (r2 < 120) v += 50 + 10 * c;
                v += 12.0 * dpt_rng_uniform(&rng);
                img[(y * w + x) * 3 + c] = (uint8_t)(v > 230 ? 230 : v);
            }
        }
}

static void make_image(uint8_t *img)
{
    make_image_sized(img, W, H);
}

static void ops_against_pil(int w, int h);

/* 61 x 47, and a square 64 x 64 (PIL transposes a square for 90 and 270 degrees; equalize's
 * step (pixels - the top value's count) // 255 is another integer than // 256 there) */
static void test_ops_against_pil(void **state)
{
    (void)state;
    ops_against_pil(61, 47);
    ops_against_pil(64, 64);
}

static void ops_against_pil(int w, int h)
{
    int n_bytes = w * h * 3;
    if (system("/usr/bin/python3 -c 'import PIL' 2>/dev/null") != 0) {
        print_message("skipped: /usr/bin/python3 has no PIL (Debian python3-pil; make test installs it)\n");
        skip();
    }
    const double mags[] = {0.0, 0.0297, -0.33, 0.66, -0.99};
    const double shifts[] = {0, 5, -13.6, 32}, angles[] = {4.5, -31.5, 90, -90, 180, 135, 37.8};
    const double bits[] = {8, 6, 4, 2}, thresholds[] = {255, 246.5, 128, 8.5, 0};
    struct {
        int op;
        double mag;
    } cases[128];
    int n = 0;
    cases[n].op = DPT_AUG_IDENTITY, cases[n++].mag = 0;
    for (int k = 0; k < 5; k++) {
        int each[] = {DPT_AUG_SHEAR_X, DPT_AUG_SHEAR_Y,  DPT_AUG_BRIGHTNESS,
                      DPT_AUG_COLOR,   DPT_AUG_CONTRAST, DPT_AUG_SHARPNESS};
        for (int e = 0; e < 6; e++)
            cases[n].op = each[e], cases[n++].mag = mags[k];
    }
    for (int k = 0; k < 4; k++)
        cases[n].op = DPT_AUG_TRANSLATE_X, cases[n++].mag = shifts[k], cases[n].op = DPT_AUG_TRANSLATE_Y,
        cases[n++].mag = -shifts[k];
    for (int k = 0; k < 7; k++)
        cases[n].op = DPT_AUG_ROTATE, cases[n++].mag = angles[k];
    for (int k = 0; k < 4; k++)
        cases[n].op = DPT_AUG_POSTERIZE, cases[n++].mag = bits[k];
    for (int k = 0; k < 5; k++)
        cases[n].op = DPT_AUG_SOLARIZE, cases[n++].mag = thresholds[k];
    cases[n].op = DPT_AUG_AUTOCONTRAST, cases[n++].mag = 0;
    cases[n].op = DPT_AUG_EQUALIZE, cases[n++].mag = 0;

    char dir[] = "/tmp/dpt_augment_XXXXXX", path[4][256], cmd[2048];
    assert_non_null(mkdtemp(dir));
    const char *files[4] = {"in.rgb", "ref.py", "out.rgb", "ops.txt"};
    for (int i = 0; i < 4; i++)
        snprintf(path[i], sizeof path[i], "%s/%s", dir, files[i]);
    static uint8_t img[MAXN], mine[MAXN], tmp[MAXN];
    make_image_sized(img, w, h);
    FILE *f = fopen(path[0], "wb");
    fwrite(img, 1, n_bytes, f), fclose(f);
    f = fopen(path[1], "w");
    fputs(python_reference, f), fclose(f);
    f = fopen(path[3], "w");
    for (int i = 0; i < n; i++)
        fprintf(f, "%s %.17g\n", names[cases[i].op], cases[i].mag);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s %d %d %s %s", path[1], path[0], w, h, path[2], path[3]);
    assert_int_equal(system(cmd), 0);
    uint8_t *ref = malloc((size_t)n * n_bytes);
    f = fopen(path[2], "rb");
    assert_int_equal(fread(ref, 1, (size_t)n * n_bytes, f), (size_t)n * n_bytes);
    fclose(f);
    for (int i = 0; i < n; i++) {
        memcpy(mine, img, n_bytes);
        dpt_image_apply_op(mine, w, h, cases[i].op, cases[i].mag, tmp);
        const uint8_t *want = ref + (size_t)i * n_bytes;
        int off1 = 0, worse = 0, first = -1;
        for (int j = 0; j < n_bytes; j++) {
            int d = abs((int)mine[j] - (int)want[j]);
            off1 += d == 1, worse += d > 1;
            if (d && first < 0) first = j;
        }
        bool geometric = cases[i].op >= DPT_AUG_SHEAR_X && cases[i].op <= DPT_AUG_ROTATE;
        if (worse || off1 > (geometric ? n_bytes / 500 : 0))
            fail_msg("%dx%d %s %g: %d bytes off by 1 and %d by more than PIL's; first at pixel (%d, %d) "
                     "channel %d: %d, PIL %d",
                     w, h, names[cases[i].op], cases[i].mag, off1, worse, first / 3 % w, first / 3 / w,
                     first % 3, mine[first], want[first]);
    }
    free(ref);
    for (int i = 0; i < 4; i++)
        unlink(path[i]);
    rmdir(dir);
}

/* The magnitude bins: torch.linspace in float32 (numpy's float32 arithmetic in torch's order:
 * the first half from the start, the second from the end) and the posterize bits */
static void test_magnitude_tables(void **state)
{
    (void)state;
    for (int policy = DPT_AUTO_AUGMENT_TRIVIAL_WIDE; policy <= DPT_AUTO_AUGMENT_RAND; policy++) {
        bool wide = policy == DPT_AUTO_AUGMENT_TRIVIAL_WIDE, sign;
        for (int bin = 0; bin < 31; bin++) {
            /* the same float32 steps written out here */
            float top = wide ? 0.99f : 0.3f, step = top / 30.0f;
            double want =
                bin < 15 ? (double)(0.0f + step * (float)bin) : (double)(top - step * (float)(30 - bin));
            assert_true(dpt_image_aug_magnitude(policy, DPT_AUG_SHEAR_X, bin, 224, 160, &sign) == want &&
                        sign);
            float rt = wide ? 135.0f : 30.0f, rs = rt / 30.0f;
            want = bin < 15 ? (double)(rs * (float)bin) : (double)(rt - rs * (float)(30 - bin));
            assert_true(dpt_image_aug_magnitude(policy, DPT_AUG_ROTATE, bin, 224, 160, &sign) == want &&
                        sign);
            float tt = wide ? 32.0f : (float)(150.0 / 331.0 * 160), ts = tt / 30.0f;
            want = bin < 15 ? (double)(ts * (float)bin) : (double)(tt - ts * (float)(30 - bin));
            assert_true(dpt_image_aug_magnitude(policy, DPT_AUG_TRANSLATE_Y, bin, 224, 160, &sign) == want &&
                        sign);
            /* 8 - round(bin / 5) (wide) or round(bin / 7.5), halves to even */
            int bits = 8 - (int)lrint(bin / (wide ? 5.0 : 7.5));
            assert_true(dpt_image_aug_magnitude(policy, DPT_AUG_POSTERIZE, bin, 224, 160, &sign) == bits &&
                        !sign);
            assert_true(dpt_image_aug_magnitude(policy, DPT_AUG_EQUALIZE, bin, 224, 160, &sign) == 0 &&
                        !sign);
        }
        /* the ends exactly: torchvision's ranges */
        assert_true(dpt_image_aug_magnitude(policy, DPT_AUG_SHEAR_X, 30, 1, 1, &(bool){0}) ==
                    (double)(wide ? 0.99f : 0.3f));
        assert_true(dpt_image_aug_magnitude(policy, DPT_AUG_SOLARIZE, 0, 1, 1, &(bool){0}) == 255.0);
        assert_true(dpt_image_aug_magnitude(policy, DPT_AUG_SOLARIZE, 30, 1, 1, &(bool){0}) == 0.0);
        assert_true(dpt_image_aug_magnitude(policy, DPT_AUG_POSTERIZE, 30, 1, 1, &(bool){0}) ==
                    (wide ? 2 : 4));
    }
}

/* The policies' draws: TrivialAugmentWide chooses each of the 14 operations about equally
 * (counted by applying it to an image where each leaves its own trace would be indirect: the
 * draw is counted through a one-pixel probe of identity); a fixed generator gives one result */
static void test_policy_deterministic(void **state)
{
    (void)state;
    static uint8_t img[N], a[N], b[N], tmp[N];
    make_image(img);
    int changed = 0;
    for (int k = 0; k < 200; k++) {
        dpt_rng r1, r2;
        dpt_rng_seed(&r1, (uint64_t)k), dpt_rng_seed(&r2, (uint64_t)k);
        memcpy(a, img, N), memcpy(b, img, N);
        dpt_image_auto_augment(a, W, H, DPT_AUTO_AUGMENT_TRIVIAL_WIDE, 0, 0, &r1, tmp);
        dpt_image_auto_augment(b, W, H, DPT_AUTO_AUGMENT_TRIVIAL_WIDE, 0, 0, &r2, tmp);
        assert_memory_equal(a, b, N);
        changed += memcmp(a, img, N) != 0;
    }
    /* identity (1/14), bin 0 of the signed ones (1/31 each) and posterize 8 / solarize 255 leave
     * the image as it is: most draws change it, not all */
    assert_true(changed > 150 && changed < 200);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_against_pil),
        cmocka_unit_test(test_magnitude_tables),
        cmocka_unit_test(test_policy_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
