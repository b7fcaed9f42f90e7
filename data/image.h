/* image.h: one JPEG or PNG file to one training or evaluation sample, as torchvision's
 * RandomResizedCrop + RandomHorizontalFlip (training) or Resize + CenterCrop (evaluation)
 * would make it, decoding no more of the file than the crop needs. */
#ifndef DPT_IMAGE_H
#define DPT_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../runtime/rng.h"

typedef struct dpt_image_view {
    bool train;        /* RandomResizedCrop (+ flip); else resize the shorter side + center crop */
    int size;          /* output side, pixels */
    int resize;        /* evaluation: the shorter side before the center crop */
    double scale[2];   /* training: crop area as a fraction of the image's */
    double ratio[2];   /* training: crop aspect ratio (width / height) */
    bool hflip;        /* training: flip with probability 1/2 */
    bool dct_scaling;  /* JPEG: decode at 1/2, 1/4 or 1/8 when the crop keeps >= size pixels */
    int64_t max_pixels; /* decoded pixels allowed for one image (after DCT scaling) */
    /* training: DPT_AUTO_AUGMENT_* after the crop and flip (RandAugment: aa_ops operations at
     * magnitude bin aa_magnitude) */
    int auto_augment, aa_ops, aa_magnitude;
} dpt_image_view;

/* Where a sample came from: the crop in the file's pixels, the flip, the DCT scale. */
typedef struct dpt_image_box {
    int src_w, src_h;   /* the image's size */
    double x, y, w, h;  /* the crop before resizing, in the image's pixels */
    bool flip;
    int scale_denom;    /* decoded at 1/scale_denom (1, 2, 4, 8) */
} dpt_image_box;

/* Buffers a worker thread reuses from image to image. */
typedef struct dpt_image_scratch {
    uint8_t *file, *pix;
    float *tmp, *coef[2]; /* the resize's weights, x and y */
    int *bounds[2];
    uint8_t *aug; /* auto_augment's copy of the sample */
    size_t file_cap, pix_cap, tmp_cap, coef_cap[2], bounds_cap[2], aug_cap;
} dpt_image_scratch;
void dpt_image_scratch_free(dpt_image_scratch *s);

/* The crop a view takes from a W x H image; training draws from rng (torchvision's ten tries
 * of area and log-ratio, then the central fallback). */
void dpt_image_crop_box(int W, int H, const dpt_image_view *v, dpt_rng *rng, dpt_image_box *box);

/* Decode `path` and write its view as size x size x 3 bytes (HWC, RGB) to out. False with msg
 * ("not a JPEG or PNG file", the decoder's message, a size over the limit) for a bad file. */
bool dpt_image_sample(const char *path, const dpt_image_view *v, dpt_rng *rng, uint8_t *out,
                      dpt_image_scratch *s, dpt_image_box *box, char *msg, size_t msg_size);

/* [data] auto_augment (autoaugment.c): PIL's operations as torchvision's TrivialAugmentWide and
 * RandAugment apply them, in their order (Identity first). */
enum {
    DPT_AUG_IDENTITY,
    DPT_AUG_SHEAR_X,
    DPT_AUG_SHEAR_Y,
    DPT_AUG_TRANSLATE_X,
    DPT_AUG_TRANSLATE_Y,
    DPT_AUG_ROTATE,
    DPT_AUG_BRIGHTNESS,
    DPT_AUG_COLOR,
    DPT_AUG_CONTRAST,
    DPT_AUG_SHARPNESS,
    DPT_AUG_POSTERIZE,
    DPT_AUG_SOLARIZE,
    DPT_AUG_AUTOCONTRAST,
    DPT_AUG_EQUALIZE,
    DPT_AUG_OPS
};
enum { DPT_AUTO_AUGMENT_NONE, DPT_AUTO_AUGMENT_TRIVIAL_WIDE, DPT_AUTO_AUGMENT_RAND };
/* One operation on w x h RGB bytes in place with torchvision's magnitude (shear: the tangent;
 * translate: pixels; rotate: degrees counter-clockwise; enhancements: factor - 1; posterize:
 * bits kept; solarize: the threshold); bilinear, fill 0. tmp: w x h x 3 bytes of scratch. */
void dpt_image_apply_op(uint8_t *img, int w, int h, int op, double magnitude, uint8_t *tmp);
/* The magnitude of bin `bin` (0..30) of an operation under a policy, and whether it takes a
 * random sign (torchvision's _augmentation_space; RandAugment's translations scale with w, h). */
double dpt_image_aug_magnitude(int policy, int op, int bin, int w, int h, bool *signed_op);
/* A policy's draw and operations on a training sample: TrivialAugmentWide (one operation, one
 * of 31 magnitude bins, each uniform) or RandAugment (`ops` operations at bin `magnitude`). */
void dpt_image_auto_augment(uint8_t *img, int w, int h, int policy, int ops, int magnitude, dpt_rng *rng,
                            uint8_t *tmp);

/* The whole image as RGB bytes (tests, tools): *pix is malloc'd, w x h x 3. */
bool dpt_image_decode(const char *path, uint8_t **pix, int *w, int *h, char *msg, size_t msg_size);

/* Encoders for tools and tests: RGB (channels 3) or gray (1) rows, top to bottom. */
bool dpt_image_write_jpeg(const char *path, const uint8_t *pix, int w, int h, int channels, int quality,
                          char *msg, size_t msg_size);
bool dpt_image_write_png(const char *path, const uint8_t *pix, int w, int h, int channels, char *msg,
                         size_t msg_size);

/* Whether this build decodes JPEG (libjpeg-turbo) and PNG (libpng). */
bool dpt_image_have_jpeg(void);
bool dpt_image_have_png(void);

#endif
