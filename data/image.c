/* image.c: JPEG (libjpeg-turbo) and PNG (libpng) files to training samples.
 *
 * A training sample is torchvision's RandomResizedCrop(size, scale, ratio) and, with hflip,
 * RandomHorizontalFlip; an evaluation sample is Resize(resize) + CenterCrop(size). The crop
 * is chosen from the header alone, then only what it needs is decoded: libjpeg-turbo's DCT
 * scaling (1/2, 1/4, 1/8 when the crop keeps at least `size` pixels a side), its horizontal
 * crop (jpeg_crop_scanline) and row skipping (jpeg_skip_scanlines), and no row below the
 * crop. The resize is PIL's antialiased bilinear filter (a triangle widened by the
 * downscale factor, clamped to the crop as torchvision's crop-then-resize is), computed in
 * float and rounded once. */
#include "image.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/error.h"

#if DPT_JPEG
#include <jerror.h>
#include <jpeglib.h>
#endif
#if DPT_PNG
#include <png.h>
#endif

#define MAX_FILE_BYTES ((size_t)1 << 30)

bool dpt_image_have_jpeg(void)
{
    return DPT_JPEG;
}
bool dpt_image_have_png(void)
{
    return DPT_PNG;
}

void dpt_image_scratch_free(dpt_image_scratch *s)
{
    free(s->file), free(s->pix), free(s->tmp), free(s->aug);
    free(s->coef[0]), free(s->coef[1]), free(s->bounds[0]), free(s->bounds[1]);
    memset(s, 0, sizeof *s);
}

static void *grow(void *p, size_t *cap, size_t need)
{
    if (need <= *cap) return p;
    size_t n = need + need / 4;
    void *q = realloc(p, n);
    if (!q) dpt_fatal("out of host memory decoding an image (%zu bytes)", n);
    *cap = n;
    return q;
}

/* ---------------------------------------------------------------- the crop */

/* Python's round(): halves to even (CenterCrop's offsets). */
static int round_even(double x)
{
    return (int)nearbyint(x);
}

void dpt_image_crop_box(int W, int H, const dpt_image_view *v, dpt_rng *rng, dpt_image_box *box)
{
    box->src_w = W, box->src_h = H, box->flip = false, box->scale_denom = 1;
    if (!v->train) { /* Resize(resize): the shorter side to `resize`; CenterCrop(size) */
        /* in double: a 1,000,000 x 1 image resized to 4096 on its short side is 4e9 wide,
         * past int (torchvision truncates the long side the same way) */
        double rw = W <= H ? v->resize : floor((double)v->resize * W / H);
        double rh = W <= H ? floor((double)v->resize * H / W) : v->resize;
        double fx = (double)W / rw, fy = (double)H / rh; /* image pixels per resized pixel */
        box->x = nearbyint((rw - v->size) / 2.0) * fx, box->w = v->size * fx;
        box->y = nearbyint((rh - v->size) / 2.0) * fy, box->h = v->size * fy;
        return;
    }
    double area = (double)W * H, lr0 = log(v->ratio[0]), lr1 = log(v->ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (v->scale[0] + (v->scale[1] - v->scale[0]) * dpt_rng_uniform(rng));
        double aspect = exp(lr0 + (lr1 - lr0) * dpt_rng_uniform(rng));
        int w = round_even(sqrt(target * aspect)), h = round_even(sqrt(target / aspect));
        if (w > 0 && w <= W && h > 0 && h <= H) {
            box->y = (double)dpt_rng_below(rng, (uint64_t)(H - h + 1));
            box->x = (double)dpt_rng_below(rng, (uint64_t)(W - w + 1));
            box->w = w, box->h = h;
            goto flip;
        }
    }
    /* torchvision's fallback: the central crop of the nearest allowed ratio */
    double in_ratio = (double)W / H;
    int w = W, h = H;
    if (in_ratio < v->ratio[0])
        h = round_even(W / v->ratio[0]);
    else if (in_ratio > v->ratio[1])
        w = round_even(H * v->ratio[1]);
    box->w = w, box->h = h, box->x = (W - w) / 2, box->y = (H - h) / 2;
flip:
    box->flip = v->hflip && (dpt_rng_next(rng) >> 63);
}

/* ---------------------------------------------------------------- resampling */

/* PIL's precompute_coeffs for the bilinear filter: output i of n samples the source around
 * in0 + (i + 0.5) * scale, over [lo, hi), with a triangle of half-width max(scale, 1). Writes
 * first/count pairs to bounds and each output's normalised weights (ksize apart) to coef;
 * returns ksize. */
static int coefficients(double in0, double scale, int lo, int hi, int n, dpt_image_scratch *s, int which)
{
    double filterscale = scale < 1 ? 1 : scale, support = filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    s->coef[which] = grow(s->coef[which], &s->coef_cap[which], (size_t)n * ksize * sizeof(float));
    s->bounds[which] = grow(s->bounds[which], &s->bounds_cap[which], (size_t)2 * n * sizeof(int));
    float *k0 = s->coef[which];
    int *b0 = s->bounds[which];
    for (int i = 0; i < n; i++) {
        double center = in0 + (i + 0.5) * scale, ss = 1.0 / filterscale;
        int xmin = (int)floor(center - support + 0.5), xmax = (int)floor(center + support + 0.5);
        if (xmin < lo) xmin = lo;
        if (xmax > hi) xmax = hi;
        if (xmax <= xmin) { /* a window outside [lo, hi): its nearest pixel */
            xmin = xmin >= hi ? hi - 1 : xmin;
            xmax = xmin + 1;
        }
        float *k = k0 + (size_t)i * ksize;
        int cnt = xmax - xmin < ksize ? xmax - xmin : ksize;
        double sum = 0;
        for (int j = 0; j < cnt; j++) {
            double t = fabs((j + xmin - center + 0.5) * ss);
            sum += t < 1 ? 1 - t : 0;
        }
        for (int j = 0; j < ksize; j++) {
            double t = fabs((j + xmin - center + 0.5) * ss);
            k[j] = j >= cnt ? 0.0f : sum > 0 ? (float)((t < 1 ? 1 - t : 0) / sum) : (float)(j == 0);
        }
        b0[2 * i] = xmin, b0[2 * i + 1] = cnt;
    }
    return ksize;
}

static inline uint8_t to_byte(float v)
{
    v += 0.5f; /* round half up, clamped without branches (minss/maxss) */
    v = v > 0.0f ? v : 0.0f;
    v = v < 255.0f ? v : 255.0f;
    return (uint8_t)(int)v;
}

/* Resample the decoded region pix (rows [y0, y0 + rows) and columns [x0, x0 + cols) of the
 * decoded image, 3 bytes a pixel) to size x size, one output row at a time: the vertical
 * pass over the bytes of the columns [xa, xb) the row needs (contiguous, vectorised) into a
 * float row, then the horizontal pass, writing (flipped if asked) bytes. The tables are in
 * decoded coordinates. */
static void resample(const uint8_t *pix, int x0, int y0, int cols, int xa, int xb, int size, int kx, int ky,
                     bool flip, dpt_image_scratch *s, uint8_t *out)
{
    const float *cx = s->coef[0], *cy = s->coef[1];
    const int *bx = s->bounds[0], *by = s->bounds[1];
    int w3 = (xb - xa) * 3;
    s->tmp = grow(s->tmp, &s->tmp_cap, (size_t)w3 * sizeof(float));
    float *restrict acc = s->tmp;
    for (int i = 0; i < size; i++) {
        const float *k = cy + (size_t)i * ky;
        const uint8_t *base = pix + ((size_t)(by[2 * i] - y0) * cols + (size_t)(xa - x0)) * 3;
        float w = k[0];
        for (int x = 0; x < w3; x++)
            acc[x] = w * (float)base[x];
        for (int j = 1; j < by[2 * i + 1]; j++) {
            const uint8_t *restrict t = base + (size_t)j * cols * 3;
            w = k[j];
            for (int x = 0; x < w3; x++)
                acc[x] += w * (float)t[x];
        }
        uint8_t *o = out + (size_t)i * size * 3;
        for (int xx = 0; xx < size; xx++) {
            const float *kk = cx + (size_t)xx * kx;
            const float *p = acc + (size_t)(bx[2 * xx] - xa) * 3;
            float a = 0, b = 0, c = 0;
            for (int j = 0; j < bx[2 * xx + 1]; j++, p += 3)
                a += kk[j] * p[0], b += kk[j] * p[1], c += kk[j] * p[2];
            uint8_t *q = o + 3 * (flip ? size - 1 - xx : xx);
            q[0] = to_byte(a), q[1] = to_byte(b), q[2] = to_byte(c);
        }
    }
}

/* The source window each axis needs, in decoded pixels, for a decoded image dw x dh that is
 * the W x H image scaled by dw / W. Fills the tables; returns the window. */
typedef struct window {
    int x0, x1, y0, y1, kx, ky;
} window;

static window plan(const dpt_image_box *box, int size, int dw, int dh, bool clamp_to_crop, dpt_image_scratch *s)
{
    double fx = (double)dw / box->src_w, fy = (double)dh / box->src_h;
    int lox = 0, hix = dw, loy = 0, hiy = dh;
    if (clamp_to_crop) { /* crop first, then resize: the filter sees only the crop */
        lox = (int)floor(box->x * fx), hix = (int)ceil((box->x + box->w) * fx);
        loy = (int)floor(box->y * fy), hiy = (int)ceil((box->y + box->h) * fy);
        if (hix > dw) hix = dw;
        if (hiy > dh) hiy = dh;
        if (hix <= lox) hix = lox + 1;
        if (hiy <= loy) hiy = loy + 1;
    }
    window w;
    w.kx = coefficients(box->x * fx, box->w * fx / size, lox, hix, size, s, 0);
    w.ky = coefficients(box->y * fy, box->h * fy / size, loy, hiy, size, s, 1);
    const int *bx = s->bounds[0], *by = s->bounds[1];
    w.x0 = w.y0 = 1 << 30, w.x1 = w.y1 = 0;
    for (int i = 0; i < size; i++) {
        if (bx[2 * i] < w.x0) w.x0 = bx[2 * i];
        if (bx[2 * i] + bx[2 * i + 1] > w.x1) w.x1 = bx[2 * i] + bx[2 * i + 1];
        if (by[2 * i] < w.y0) w.y0 = by[2 * i];
        if (by[2 * i] + by[2 * i + 1] > w.y1) w.y1 = by[2 * i] + by[2 * i + 1];
    }
    return w;
}

/* ---------------------------------------------------------------- files */

/* The whole file into s->file. Opened without blocking, so that something other than a
 * regular file under an image's name (a FIFO with no writer) is refused, not waited on. */
/* The largest file an image within max_pixels can be: 4 bytes a pixel (PNG's RGBA without any
 * compression) and 16 MiB of metadata, at most 1 GiB; anything larger is refused by its size,
 * before a byte is read (a sparse 1 GB file named .jpg was read whole). */
static size_t max_file_bytes(int64_t max_pixels)
{
    double most = 4.0 * (double)(max_pixels > 0 ? max_pixels : 0) + 16.0 * 1048576.0;
    return most < (double)MAX_FILE_BYTES ? (size_t)most : MAX_FILE_BYTES;
}

static bool read_file(const char *path, int64_t max_pixels, dpt_image_scratch *s, size_t *len, char *msg,
                      size_t msg_size)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return snprintf(msg, msg_size, "cannot open: %s", strerror(errno)), false;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return snprintf(msg, msg_size, "not a regular file"), false;
    }
    size_t most = max_file_bytes(max_pixels);
    if (st.st_size == 0 || (size_t)st.st_size > most) {
        close(fd);
        if (!st.st_size) return snprintf(msg, msg_size, "empty file"), false;
        return snprintf(msg, msg_size,
                        "%lld bytes: larger than any image of [data] max_image_pixels = %lld can be (%zu bytes)",
                        (long long)st.st_size, (long long)max_pixels, most),
               false;
    }
    s->file = grow(s->file, &s->file_cap, (size_t)st.st_size);
    dpt_read_at(fd, s->file, (size_t)st.st_size, 0, len);
    bool ok = *len == (size_t)st.st_size;
    if (!ok) snprintf(msg, msg_size, "read %zu of %lld bytes: %s", *len, (long long)st.st_size, strerror(errno));
    close(fd);
    return ok;
}

static bool is_jpeg(const uint8_t *b, size_t n)
{
    return n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF;
}
static bool is_png(const uint8_t *b, size_t n)
{
    return n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8);
}

static bool not_an_image(const uint8_t *b, size_t n, char *msg, size_t msg_size)
{
    char head[40] = "";
    for (size_t i = 0; i < n && i < 8; i++)
        snprintf(head + strlen(head), sizeof head - strlen(head), "%s%02x", i ? " " : "", b[i]);
    return snprintf(msg, msg_size, "not a JPEG or PNG file (it starts with %s)", head), false;
}

static bool too_big(int w, int h, int denom, const dpt_image_view *v, char *msg, size_t msg_size)
{
    if ((int64_t)w * h <= v->max_pixels) return false;
    char scale[64] = "";
    if (denom > 1) snprintf(scale, sizeof scale, " (decoded at 1/%d, as small as the crop allows)", denom);
    snprintf(msg, msg_size,
             "%d x %d pixels%s: more than [data] max_image_pixels = %lld (a decompression bomb, or an image "
             "far larger than training needs)",
             w, h, scale, (long long)v->max_pixels);
    return true;
}

#if DPT_JPEG
typedef struct jpeg_fail {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_fail;

static void jpeg_on_error(j_common_ptr c)
{
    jpeg_fail *f = (jpeg_fail *)c->err;
    c->err->format_message(c, f->msg);
    longjmp(f->jump, 1);
}

/* Warnings (recoverable corrupt data, which libjpeg would paint grey) are ignored as PIL
 * ignores them, except the one for data that ends early: a truncated file is an error. */
static void jpeg_on_message(j_common_ptr c, int level)
{
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) jpeg_on_error(c);
}

/* Decode the rows and columns of the crop at the largest DCT scale that keeps `size` pixels
 * (denom 1 = no scaling). `full` decodes the whole image at 1/1 (dpt_image_decode). */
static bool decode_jpeg(const uint8_t *buf, size_t len, const dpt_image_view *v, dpt_rng *rng, uint8_t *out,
                        dpt_image_scratch *s, dpt_image_box *box, char *msg, size_t msg_size, bool full,
                        int *full_w, int *full_h)
{
    /* A JPEG ends with an end-of-image marker; without one the file was cut short, and the
     * rows we skip would not tell us (somewhere near the end: some writers append data). */
    bool eoi = false;
    for (size_t i = len >= 2 ? len - 2 : 0, stop = len > 4096 ? len - 4096 : 0; i + 1 < len && !eoi; i--) {
        eoi = buf[i] == 0xFF && buf[i + 1] == 0xD9;
        if (i == stop) break;
    }
    if (!eoi) return snprintf(msg, msg_size, "truncated JPEG (no end-of-image marker)"), false;
    struct jpeg_decompress_struct cinfo;
    jpeg_fail fail;
    cinfo.err = jpeg_std_error(&fail.pub);
    fail.pub.error_exit = jpeg_on_error;
    fail.pub.emit_message = jpeg_on_message;
    fail.msg[0] = '\0';
    if (setjmp(fail.jump)) {
        jpeg_destroy_decompress(&cinfo);
        return snprintf(msg, msg_size, "JPEG: %s", fail.msg), false;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, buf, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    int W = (int)cinfo.image_width, H = (int)cinfo.image_height;
    bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    int denom = 1;
    window win = {0, W, 0, H, 0, 0};
    if (!full) {
        dpt_image_crop_box(W, H, v, rng, box);
        /* the crop must keep `size` pixels a side (evaluation: the shorter side, `resize`) */
        double need = v->train ? v->size : v->resize;
        double side_w = v->train ? box->w : (W < H ? W : H), side_h = v->train ? box->h : side_w;
        for (int d = 8; v->dct_scaling && d > 1 && denom == 1; d /= 2)
            if (side_w / d >= need && side_h / d >= need) denom = d;
        box->scale_denom = denom;
    }
    cinfo.scale_num = 1, cinfo.scale_denom = (unsigned)denom;
    jpeg_calc_output_dimensions(&cinfo);
    int dw = (int)cinfo.output_width, dh = (int)cinfo.output_height;
    if (too_big(dw, dh, denom, v, msg, msg_size)) {
        jpeg_destroy_decompress(&cinfo);
        return false;
    }
    if (!full) win = plan(box, v->size, dw, dh, v->train, s);
    jpeg_start_decompress(&cinfo);
    JDIMENSION xoff = (JDIMENSION)win.x0, cw = (JDIMENSION)(win.x1 - win.x0);
    if (!full && (xoff > 0 || (int)cw < dw)) jpeg_crop_scanline(&cinfo, &xoff, &cw); /* xoff moves left to an iMCU */
    int comps = cmyk ? 4 : 3, rows = win.y1 - win.y0;
    s->pix = grow(s->pix, &s->pix_cap, (size_t)rows * cw * comps);
    if (win.y0 > 0) jpeg_skip_scanlines(&cinfo, (JDIMENSION)win.y0);
    for (int r = 0; r < rows;) {
        JSAMPROW row = s->pix + (size_t)r * cw * comps;
        r += (int)jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_abort_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    if (cmyk) /* Adobe's inverted CMYK, as PIL converts it: R = C * K / 255 */
        for (size_t i = 0, n = (size_t)rows * cw; i < n; i++) {
            const uint8_t *p = s->pix + 4 * i;
            uint8_t *q = s->pix + 3 * i;
            uint8_t k = p[3], c = p[0], m = p[1], y = p[2];
            q[0] = (uint8_t)((c * k + 127) / 255), q[1] = (uint8_t)((m * k + 127) / 255),
            q[2] = (uint8_t)((y * k + 127) / 255);
        }
    if (full) {
        *full_w = W, *full_h = H;
        return true;
    }
    resample(s->pix, (int)xoff, win.y0, (int)cw, win.x0, win.x1, v->size, win.kx, win.ky, box->flip, s, out);
    return true;
}
#endif

#if DPT_PNG
static bool decode_png(const uint8_t *buf, size_t len, const dpt_image_view *v, dpt_rng *rng, uint8_t *out,
                       dpt_image_scratch *s, dpt_image_box *box, char *msg, size_t msg_size, bool full, int *full_w,
                       int *full_h)
{
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&img, buf, len))
        return snprintf(msg, msg_size, "PNG: %s", img.message), false;
    int W = (int)img.width, H = (int)img.height;
    if (too_big(W, H, 1, v, msg, msg_size)) {
        png_image_free(&img);
        return false;
    }
    /* 16 bits a sample: read them as they are (libpng's 8-bit output would take them for
     * linear light and gamma-encode them) and scale to 8 bits, v * 255 / 65535 */
    bool wide = (img.format & PNG_FORMAT_FLAG_LINEAR) != 0;
    img.format = wide ? PNG_FORMAT_LINEAR_RGB : PNG_FORMAT_RGB;
    s->pix = grow(s->pix, &s->pix_cap, PNG_IMAGE_SIZE(img));
    if (!png_image_finish_read(&img, NULL, s->pix, 0, NULL)) {
        snprintf(msg, msg_size, "PNG: %s", img.message);
        png_image_free(&img);
        return false;
    }
    if (wide) {
        const uint16_t *w16 = (const uint16_t *)s->pix;
        for (size_t i = 0, n = (size_t)W * H * 3; i < n; i++)
            s->pix[i] = (uint8_t)((w16[i] * 255u + 32767u) / 65535u);
    }
    if (full) {
        *full_w = W, *full_h = H;
        return true;
    }
    dpt_image_crop_box(W, H, v, rng, box);
    window win = plan(box, v->size, W, H, v->train, s);
    const uint8_t *first = s->pix + ((size_t)win.y0 * W) * 3;
    /* rows of the whole width: resample reads columns from bounds relative to x0 = 0 */
    resample(first, 0, win.y0, W, win.x0, win.x1, v->size, win.kx, win.ky, box->flip, s, out);
    return true;
}
#endif

static bool decode(const char *path, const dpt_image_view *v, dpt_rng *rng, uint8_t *out, dpt_image_scratch *s,
                   dpt_image_box *box, char *msg, size_t msg_size, bool full, int *fw, int *fh)
{
    size_t len;
    if (!read_file(path, v->max_pixels, s, &len, msg, msg_size)) return false;
    if (is_jpeg(s->file, len)) {
#if DPT_JPEG
        return decode_jpeg(s->file, len, v, rng, out, s, box, msg, msg_size, full, fw, fh);
#else
        return snprintf(msg, msg_size, "a JPEG, and this build has no JPEG decoder (libjpeg62-turbo-dev)"), false;
#endif
    }
    if (is_png(s->file, len)) {
#if DPT_PNG
        return decode_png(s->file, len, v, rng, out, s, box, msg, msg_size, full, fw, fh);
#else
        return snprintf(msg, msg_size, "a PNG, and this build has no PNG decoder (libpng-dev)"), false;
#endif
    }
    return not_an_image(s->file, len, msg, msg_size);
}

bool dpt_image_sample(const char *path, const dpt_image_view *v, dpt_rng *rng, uint8_t *out, dpt_image_scratch *s,
                      dpt_image_box *box, char *msg, size_t msg_size)
{
    dpt_image_box local;
    if (!decode(path, v, rng, out, s, box ? box : &local, msg, msg_size, false, NULL, NULL)) return false;
    if (v->train && v->auto_augment) { /* on the crop, drawing after it from the sample's generator */
        s->aug = grow(s->aug, &s->aug_cap, (size_t)v->size * v->size * 3);
        dpt_image_auto_augment(out, v->size, v->size, v->auto_augment, v->aa_ops, v->aa_magnitude, rng, s->aug);
    }
    return true;
}

bool dpt_image_decode(const char *path, uint8_t **pix, int *w, int *h, char *msg, size_t msg_size)
{
    dpt_image_scratch s = {0};
    dpt_image_view v = {.max_pixels = (int64_t)1 << 40};
    dpt_image_box box;
    bool ok = decode(path, &v, NULL, NULL, &s, &box, msg, msg_size, true, w, h);
    if (ok) {
        *pix = s.pix; /* the decoded rows are the whole image, 3 bytes a pixel */
        s.pix = NULL;
    }
    dpt_image_scratch_free(&s);
    return ok;
}

/* ---------------------------------------------------------------- encoders */

/* An image file made through no link (a symbolic link at the name is refused, not followed), a
 * plain file of one name, truncated: dpt_stream_file_open's rules. */
static FILE *create(const char *path, char *msg, size_t msg_size)
{
    dpt_error err;
    FILE *f = dpt_stream_file_open(path, "image", "a new OUT folder", &err);
    if (!f) snprintf(msg, msg_size, "%s", err.msg);
    return f;
}

bool dpt_image_write_jpeg(const char *path, const uint8_t *pix, int w, int h, int channels, int quality, char *msg,
                          size_t msg_size)
{
#if DPT_JPEG
    FILE *f = create(path, msg, msg_size);
    if (!f) return false;
    struct jpeg_compress_struct cinfo;
    jpeg_fail fail;
    cinfo.err = jpeg_std_error(&fail.pub);
    fail.pub.error_exit = jpeg_on_error;
    if (setjmp(fail.jump)) {
        jpeg_destroy_compress(&cinfo);
        fclose(f);
        return snprintf(msg, msg_size, "%s: JPEG: %s", path, fail.msg), false;
    }
    jpeg_create_compress(&cinfo);
    jpeg_stdio_dest(&cinfo, f);
    cinfo.image_width = (JDIMENSION)w, cinfo.image_height = (JDIMENSION)h;
    cinfo.input_components = channels;
    cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, quality, TRUE);
    jpeg_start_compress(&cinfo, TRUE);
    while (cinfo.next_scanline < cinfo.image_height) {
        JSAMPROW row = (JSAMPROW)(pix + (size_t)cinfo.next_scanline * w * channels);
        jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    bool ok = fclose(f) == 0;
    if (!ok) snprintf(msg, msg_size, "%s: %s", path, strerror(errno));
    return ok;
#else
    return snprintf(msg, msg_size, "this build has no JPEG encoder (libjpeg62-turbo-dev)"), false;
#endif
}

bool dpt_image_write_png(const char *path, const uint8_t *pix, int w, int h, int channels, char *msg,
                         size_t msg_size)
{
#if DPT_PNG
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w, img.height = (png_uint_32)h;
    img.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    FILE *f = create(path, msg, msg_size);
    if (!f) return false;
    bool ok = png_image_write_to_stdio(&img, f, 0, pix, 0, NULL);
    if (!ok) snprintf(msg, msg_size, "%s: PNG: %s", path, img.message);
    if (fclose(f) != 0 && ok) ok = false, snprintf(msg, msg_size, "%s: %s", path, strerror(errno));
    return ok;
#else
    return snprintf(msg, msg_size, "this build has no PNG encoder (libpng-dev)"), false;
#endif
}
