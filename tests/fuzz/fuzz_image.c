/* fuzz_image.c: the folder source's decoders and crops (JPEG through libjpeg-turbo with DCT
 * scaling, row skipping and column cropping; PNG through libpng; the resize; a training view's
 * TrivialAugmentWide or RandAugment). Input: one byte of options (training or evaluation view,
 * output side, DCT scaling, policy), then the file. A bad
 * file must come back as false with a message, never a crash, a hang or a read out of bounds;
 * a good one must fill every output byte. */
#include "tests/fuzz/fuzz_common.h"
#include "data/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t o = data[0];
    char path[64];
    int fd = fuzz_file(data + 1, size - 1, path, sizeof path);
    int side = 8 + (o & 31); /* 8 .. 39 */
    dpt_image_view v = {.train = o & 64,
                        .size = side,
                        .resize = side + (o >> 5 & 1) * 5,
                        .scale = {0.08, 1},
                        .ratio = {0.75, 4.0 / 3.0},
                        .hflip = true,
                        .dct_scaling = !(o & 128),
                        .max_pixels = 1 << 22,
                        /* a training view also runs an augmentation policy, drawn from the seed */
                        .auto_augment = (o & 64) ? 1 + (o >> 1 & 1) : 0,
                        .aa_ops = 1 + (o & 3),
                        .aa_magnitude = o % 31};
    static uint8_t out[39 * 39 * 3];
    memset(out, 0xAB, sizeof out);
    dpt_rng rng;
    dpt_rng_seed(&rng, o);
    dpt_image_scratch s = {0};
    char msg[700] = "";
    dpt_image_box box;
    bool ok = dpt_image_sample(path, &v, &rng, out, &s, &box, msg, sizeof msg);
    if (!ok && !msg[0]) abort(); /* a failure always says why */
    if (ok && (box.w <= 0 || box.h <= 0 || box.x < 0 || box.y < 0 || box.x + box.w > box.src_w + 1e-9 ||
               box.y + box.h > box.src_h + 1e-9) && v.train)
        abort(); /* a training crop inside the image */
    dpt_image_scratch_free(&s);
    close(fd);
    return 0;
}
