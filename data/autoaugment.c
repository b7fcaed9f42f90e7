/* autoaugment.c: TrivialAugmentWide (Mueller and Hutter 2021) and RandAugment (Cubuk et al.
 * 2020) on a training sample's RGB bytes, as torchvision applies them to a PIL image: the same
 * operations with PIL's arithmetic (its blend truncating in float, its luma, its 3x3 smoothing
 * rounding, its affine transform sampling pixel centres bilinearly), the same magnitude bins
 * (float32 linspace as torch computes it), the interpolation its ResNet recipe passes
 * (bilinear) and a fill of 0. The random choices come from the sample's own generator (the seed,
 * the epoch and the sample), after its crop and flip. tests/test_augment.c compares every
 * operation with PIL's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

/* torch.linspace(start, end, n)[i] in float32 (the halves from each end, as torch's kernel) */
static double linspace_f32(float start, float end, int n, int i)
{
    float step = (end - start) / (float)(n - 1);
    return i < n / 2 ? (double)(start + step * (float)i) : (double)(end - step * (float)(n - 1 - i));
}

/* ---------------------------------------------------------------- PIL's operations */

/* Image.blend(degenerate, img, factor): in float, truncated, clipped (PIL's Blend.c) */
static void blend(uint8_t *img, const uint8_t *degenerate, size_t n, float factor)
{
    for (size_t i = 0; i < n; i++) {
        float t = (float)degenerate[i] + factor * (float)((int)img[i] - (int)degenerate[i]);
        img[i] = t <= 0.0f ? 0 : t >= 255.0f ? 255 : (uint8_t)t;
    }
}

/* convert("L"): ITU-R 601-2 luma in 16-bit fixed point, rounded (PIL's Convert.c) */
static uint8_t luma(const uint8_t *p)
{
    return (uint8_t)(((uint32_t)p[0] * 19595 + (uint32_t)p[1] * 38470 + (uint32_t)p[2] * 7471 + 0x8000) >>
                     16);
}

static void apply_lut(uint8_t *img, size_t pixels, const uint8_t lut[3][256])
{
    for (size_t p = 0; p < pixels; p++)
        for (int c = 0; c < 3; c++)
            img[p * 3 + c] = lut[c][img[p * 3 + c]];
}

/* ImageFilter.SMOOTH (1 1 1 / 1 5 1 / 1 1 1, / 13) in float, rounded; the border pixels kept
 * (PIL's ImagingFilter3x3) */
static void smooth(const uint8_t *in, uint8_t *out, int w, int h)
{
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    memcpy(out, in, (size_t)w * h * 3);
    for (int y = 1; y < h - 1; y++)
        for (int x = 1; x < w - 1; x++)
            for (int c = 0; c < 3; c++) {
                const uint8_t *up = in + ((size_t)(y - 1) * w + x) * 3 + c, *mid = up + (size_t)w * 3,
                              *down = mid + (size_t)w * 3;
                float ss = 0.0f; /* PIL's order: the row below, the row, the row above */
                ss += (float)down[-3] * k1 + (float)down[0] * k1 + (float)down[3] * k1;
                ss += (float)mid[-3] * k1 + (float)mid[0] * k5 + (float)mid[3] * k1;
                ss += (float)up[-3] * k1 + (float)up[0] * k1 + (float)up[3] * k1;
                out[((size_t)y * w + x) * 3 + c] = ss <= 0.0f ? 0 : ss >= 255.0f ? 255 : (uint8_t)(ss + 0.5f);
            }
}

/* v within [0, n) (PIL's XCLIP and YCLIP) */
static int clampi(int v, int n)
{
    return v < 0 ? 0 : v >= n ? n - 1 : v;
}

/* Image.transform(AFFINE, a, BILINEAR) with fill 0: output pixel centre (x + .5, y + .5) maps to
 * (a0 x + a1 y + a2, a3 x + a4 y + a5) in the input; outside the input: 0; else bilinear over
 * the four pixels whose centres surround it, the edges clamped, truncated (PIL's Geometry.c) */
static void affine(const uint8_t *in, uint8_t *out, int w, int h, const double a[6])
{
    if (a[0] == 1.0 && a[1] == 0.0 && a[3] == 0.0 && a[4] == 1.0 && a[2] == floor(a[2]) &&
        a[5] == floor(a[5]) && fabs(a[2]) < w &&
        fabs(a[5]) < h) { /* a whole-pixel shift: the samples fall on pixel centres, copies */
        int dx = (int)a[2], dy = (int)a[5];
        memset(out, 0, (size_t)w * h * 3);
        for (int y = 0; y < h; y++) {
            int sy = y + dy, x0 = dx < 0 ? -dx : 0, x1 = dx > 0 ? w - dx : w;
            if (sy >= 0 && sy < h && x1 > x0)
                memcpy(out + ((size_t)y * w + x0) * 3, in + ((size_t)sy * w + x0 + dx) * 3,
                       (size_t)(x1 - x0) * 3);
        }
        return;
    }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *o = out + ((size_t)y * w + x) * 3;
            double xin = a[0] * (x + 0.5) + a[1] * (y + 0.5) + a[2],
                   yin = a[3] * (x + 0.5) + a[4] * (y + 0.5) + a[5];
            if (xin < 0.0 || xin >= w || yin < 0.0 || yin >= h) {
                o[0] = o[1] = o[2] = 0;
                continue;
            }
            xin -= 0.5, yin -= 0.5;
            int x0 = (int)floor(xin), y0 = (int)floor(yin);
            double dx = xin - x0, dy = yin - y0;
            int xa = clampi(x0, w), xb = clampi(x0 + 1, w), ya = clampi(y0, h);
            const uint8_t *r0 = in + (size_t)ya * w * 3,
                          *r1 = y0 + 1 >= 0 && y0 + 1 < h ? in + (size_t)(y0 + 1) * w * 3 : NULL;
            for (int c = 0; c < 3; c++) {
                double v1 = r0[xa * 3 + c] + (r0[xb * 3 + c] - r0[xa * 3 + c]) * dx;
                double v2 = r1 ? r1[xa * 3 + c] + (r1[xb * 3 + c] - r1[xa * 3 + c]) * dx : v1;
                double v = v1 + (v2 - v1) * dy;
                o[c] = v <= 0.0 ? 0 : v >= 255.0 ? 255 : (uint8_t)v;
            }
        }
}

/* Python's math.radians and math.degrees: one product by the rounded constant */
static double radians(double deg)
{
    return deg * (M_PI / 180.0);
}

static double degrees(double rad)
{
    return rad * (180.0 / M_PI);
}

/* torchvision's _get_inverse_affine_matrix (angle and shears in degrees, scale 1) */
static void inverse_affine(double cx, double cy, double angle, double tx, double ty, double shx, double shy,
                           double m[6])
{
    double rot = radians(angle), sx = radians(shx), sy = radians(shy);
    double a = cos(rot - sy) / cos(sy), b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy), d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d, m[1] = -b, m[2] = 0.0, m[3] = -c, m[4] = a, m[5] = 0.0;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx, m[5] += cy;
}

static double round15(double v) /* Python's round(v, 15), near enough for cos and sin */
{
    return nearbyint(v * 1e15) / 1e15;
}

/* Image.rotate(angle, BILINEAR, fillcolor=0) about the centre, counter-clockwise */
static void rotate(uint8_t *img, uint8_t *tmp, int w, int h, double angle)
{
    angle = fmod(angle, 360.0);
    if (angle < 0) angle += 360.0;
    size_t n = (size_t)w * h * 3;
    if (angle == 0.0) return;
    if (angle == 180.0 || ((angle == 90.0 || angle == 270.0) && w == h)) { /* PIL transposes these */
        memcpy(tmp, img, n);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int sx = angle == 180.0 ? w - 1 - x : angle == 90.0 ? w - 1 - y : y;
                int sy = angle == 180.0 ? h - 1 - y : angle == 90.0 ? x : h - 1 - x;
                memcpy(img + ((size_t)y * w + x) * 3, tmp + ((size_t)sy * w + sx) * 3, 3);
            }
        return;
    }
    double r = -radians(angle), cx = w / 2.0, cy = h / 2.0;
    double m[6] = {round15(cos(r)), round15(sin(r)), 0.0, round15(-sin(r)), round15(cos(r)), 0.0};
    m[2] = m[0] * -cx + m[1] * -cy + cx;
    m[5] = m[3] * -cx + m[4] * -cy + cy;
    memcpy(tmp, img, n);
    affine(tmp, img, w, h, m);
}

void dpt_image_apply_op(uint8_t *img, int w, int h, int op, double magnitude, uint8_t *tmp)
{
    size_t pixels = (size_t)w * h, n = pixels * 3;
    uint8_t lut[3][256];
    switch (op) {
    case DPT_AUG_SHEAR_X:
    case DPT_AUG_SHEAR_Y:
    case DPT_AUG_TRANSLATE_X:
    case DPT_AUG_TRANSLATE_Y: {
        double m[6], deg = degrees(atan(magnitude));
        if (op == DPT_AUG_SHEAR_X)
            inverse_affine(0, 0, 0, 0, 0, deg, 0, m);
        else if (op == DPT_AUG_SHEAR_Y)
            inverse_affine(0, 0, 0, 0, 0, 0, deg, m);
        else /* int(magnitude) pixels, about the centre (w / 2, h / 2) */
            inverse_affine(w * 0.5, h * 0.5, 0, op == DPT_AUG_TRANSLATE_X ? (double)(int)magnitude : 0,
                           op == DPT_AUG_TRANSLATE_Y ? (double)(int)magnitude : 0, 0, 0, m);
        memcpy(tmp, img, n);
        affine(tmp, img, w, h, m);
        break;
    }
    case DPT_AUG_ROTATE:
        rotate(img, tmp, w, h, magnitude);
        break;
    case DPT_AUG_BRIGHTNESS: /* blend with black */
        memset(tmp, 0, n);
        blend(img, tmp, n, (float)(1.0 + magnitude));
        break;
    case DPT_AUG_COLOR: /* blend with the gray image */
        for (size_t p = 0; p < pixels; p++)
            tmp[p * 3] = tmp[p * 3 + 1] = tmp[p * 3 + 2] = luma(img + p * 3);
        blend(img, tmp, n, (float)(1.0 + magnitude));
        break;
    case DPT_AUG_CONTRAST: { /* blend with the gray image's mean, rounded */
        double sum = 0;
        for (size_t p = 0; p < pixels; p++)
            sum += luma(img + p * 3);
        memset(tmp, (int)(sum / (double)pixels + 0.5), n);
        blend(img, tmp, n, (float)(1.0 + magnitude));
        break;
    }
    case DPT_AUG_SHARPNESS:
        smooth(img, tmp, w, h);
        blend(img, tmp, n, (float)(1.0 + magnitude));
        break;
    case DPT_AUG_POSTERIZE: { /* keep the high int(magnitude) bits */
        int bits = (int)magnitude;
        uint8_t mask = (uint8_t) ~((1u << (8 - bits)) - 1);
        for (int v = 0; v < 256; v++)
            lut[0][v] = lut[1][v] = lut[2][v] = (uint8_t)(v & mask);
        apply_lut(img, pixels, (const uint8_t(*)[256])lut);
        break;
    }
    case DPT_AUG_SOLARIZE: /* invert what is at or above the threshold */
        for (int v = 0; v < 256; v++)
            lut[0][v] = lut[1][v] = lut[2][v] = (double)v < magnitude ? (uint8_t)v : (uint8_t)(255 - v);
        apply_lut(img, pixels, (const uint8_t(*)[256])lut);
        break;
    case DPT_AUG_AUTOCONTRAST: /* each channel's range stretched to 0..255 (ImageOps.autocontrast) */
    case DPT_AUG_EQUALIZE: {   /* each channel's histogram flattened (ImageOps.equalize) */
        for (int c = 0; c < 3; c++) {
            int64_t hist[256] = {0};
            for (size_t p = 0; p < pixels; p++)
                hist[img[p * 3 + c]]++;
            for (int v = 0; v < 256; v++)
                lut[c][v] = (uint8_t)v;
            if (op == DPT_AUG_AUTOCONTRAST) {
                int lo = 0, hi = 255;
                while (lo < 256 && !hist[lo])
                    lo++;
                while (hi >= 0 && !hist[hi])
                    hi--;
                if (hi <= lo) continue;
                double scale = 255.0 / (hi - lo), offset = -lo * scale;
                for (int v = 0; v < 256; v++) {
                    int u = (int)(v * scale + offset);
                    lut[c][v] = (uint8_t)(u < 0 ? 0 : u > 255 ? 255 : u);
                }
            } else {
                int64_t total = 0, last = 0, used = 0;
                for (int v = 0; v < 256; v++)
                    if (hist[v]) total += hist[v], last = hist[v], used++;
                int64_t step = used > 1 ? (total - last) / 255 : 0; /* Pillow 9: // 255 */
                if (!step) continue;
                for (int64_t v = 0, acc = step / 2; v < 256; v++) {
                    int64_t u = acc / step;
                    lut[c][v] = (uint8_t)(u > 255 ? 255 : u);
                    acc += hist[v];
                }
            }
        }
        apply_lut(img, pixels, (const uint8_t(*)[256])lut);
        break;
    }
    default: /* identity */
        break;
    }
}

/* ---------------------------------------------------------------- the policies */

/* Op k's magnitude in bin `bin` of 31 and whether it takes a random sign (torchvision's
 * _augmentation_space: TrivialAugmentWide's wide ranges, or RandAugment's for an image of side w) */
double dpt_image_aug_magnitude(int policy, int op, int bin, int w, int h, bool *signed_op)
{
    bool wide = policy == DPT_AUTO_AUGMENT_TRIVIAL_WIDE;
    *signed_op = op >= DPT_AUG_SHEAR_X && op <= DPT_AUG_SHARPNESS;
    switch (op) {
    case DPT_AUG_SHEAR_X:
    case DPT_AUG_SHEAR_Y:
        return linspace_f32(0.0f, wide ? 0.99f : 0.3f, 31, bin);
    case DPT_AUG_TRANSLATE_X:
    case DPT_AUG_TRANSLATE_Y:
        return linspace_f32(0.0f, wide ? 32.0f : (float)(150.0 / 331.0 * (op == DPT_AUG_TRANSLATE_X ? w : h)),
                            31, bin);
    case DPT_AUG_ROTATE:
        return linspace_f32(0.0f, wide ? 135.0f : 30.0f, 31, bin);
    case DPT_AUG_BRIGHTNESS:
    case DPT_AUG_COLOR:
    case DPT_AUG_CONTRAST:
    case DPT_AUG_SHARPNESS:
        return linspace_f32(0.0f, wide ? 0.99f : 0.9f, 31, bin);
    case DPT_AUG_POSTERIZE: /* 8 - round(bin / (30 / 6)), or / (30 / 4) */
        return 8 - (int)nearbyintf((float)bin / (wide ? 5.0f : 7.5f));
    case DPT_AUG_SOLARIZE:
        return linspace_f32(255.0f, 0.0f, 31, bin);
    default:
        return 0.0;
    }
}

void dpt_image_auto_augment(uint8_t *img, int w, int h, int policy, int ops, int magnitude, dpt_rng *rng,
                            uint8_t *tmp)
{
    if (policy == DPT_AUTO_AUGMENT_NONE) return;
    int rounds = policy == DPT_AUTO_AUGMENT_TRIVIAL_WIDE ? 1 : ops;
    for (int r = 0; r < rounds; r++) {
        int op = (int)dpt_rng_below(rng, DPT_AUG_OPS);
        int bin = policy == DPT_AUTO_AUGMENT_TRIVIAL_WIDE ? (int)dpt_rng_below(rng, 31) : magnitude;
        bool sign;
        double m = dpt_image_aug_magnitude(policy, op, bin, w, h, &sign);
        if (sign && dpt_rng_next(rng) >> 63) m = -m;
        dpt_image_apply_op(img, w, h, op, m, tmp);
    }
}
