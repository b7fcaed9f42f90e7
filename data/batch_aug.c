/* batch_aug.c: augmentations of a whole training batch on its device, after the loader:
 * random erasing (Zhong et al. 2020, torchvision's RandomErasing), then Mixup (Zhang et al.
 * 2018) and CutMix (Yun et al. 2019) as timm's Mixup does them in its default batch mode: one
 * lambda per batch, each sample paired with the batch reversed, CutMix's lambda corrected to the
 * box actually pasted. Every draw is a pure function of the batch's key (the seed, the epoch
 * and the batch's place in the global order, dpt_batch.key) and a sample's place in the batch,
 * so a resumed run and, in the deterministic mode, any world size draw the same. The pixels
 * change on the batch's device (backend erase_box, mix_pairs). */
#include <math.h>
#include <string.h>

#include "data.h"
#include "../runtime/backend.h"
#include "../runtime/ctx.h"
#include "../runtime/error.h"
#include "../runtime/rng.h"
#include "../runtime/tensor.h"

bool dpt_mix_enabled(const dpt_mix_options *o)
{
    return o->prob > 0 && (o->mixup_alpha > 0 || o->cutmix_alpha > 0);
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

void dpt_mix_draw(const dpt_mix_options *o, uint64_t key, int64_t h, int64_t w, dpt_mix *m)
{
    *m = (dpt_mix){.lambda = 1.0};
    if (!dpt_mix_enabled(o)) return;
    dpt_rng rng;
    dpt_rng_seed(&rng, key ^ 0x6d69787570ULL); /* "mixup": a stream apart from the batch's other draws */
    if (dpt_rng_uniform_f64(&rng) >= o->prob) return;
    bool cut = o->cutmix_alpha > 0 && (o->mixup_alpha <= 0 || dpt_rng_uniform_f64(&rng) < o->switch_prob);
    m->on = true;
    m->cut = cut;
    m->lambda = dpt_rng_beta(&rng, cut ? o->cutmix_alpha : o->mixup_alpha);
    if (!cut) return;
    /* timm's rand_bbox: a box of sides int(side x sqrt(1 - lambda)) centred anywhere in the
     * image, clipped to it; lambda then the share left unpasted */
    double r = sqrt(1.0 - m->lambda);
    int64_t ch = (int64_t)((double)h * r), cw = (int64_t)((double)w * r);
    int64_t cy = (int64_t)dpt_rng_below(&rng, (uint64_t)h), cx = (int64_t)dpt_rng_below(&rng, (uint64_t)w);
    m->y0 = clamp64(cy - ch / 2, 0, h), m->y1 = clamp64(cy + ch / 2, 0, h);
    m->x0 = clamp64(cx - cw / 2, 0, w), m->x1 = clamp64(cx + cw / 2, 0, w);
    m->lambda = 1.0 - (double)((m->y1 - m->y0) * (m->x1 - m->x0)) / (double)(h * w);
}

bool dpt_erase_enabled(const dpt_erase_options *o)
{
    return o->prob > 0;
}

bool dpt_erase_draw(const dpt_erase_options *o, uint64_t key, int64_t i, int64_t h, int64_t w, int64_t box[4])
{
    if (!dpt_erase_enabled(o)) return false;
    dpt_rng rng;
    dpt_rng_seed(&rng, (key ^ 0x6572617365ULL) + (uint64_t)i * 0x9e3779b97f4a7c15ULL); /* "erase", sample i */
    if (dpt_rng_uniform_f64(&rng) >= o->prob) return false;
    /* torchvision's RandomErasing.get_params: 10 tries of an area and a log-uniform aspect
     * ratio; the sides rounded half to even (Python's round); none that fits: no erasing */
    double area = (double)(h * w), lo = log(o->ratio[0]), hi = log(o->ratio[1]);
    for (int tries = 0; tries < 10; tries++) {
        double a = area * (o->scale[0] + (o->scale[1] - o->scale[0]) * dpt_rng_uniform_f64(&rng));
        double r = exp(lo + (hi - lo) * dpt_rng_uniform_f64(&rng));
        int64_t eh = (int64_t)nearbyint(sqrt(a * r)), ew = (int64_t)nearbyint(sqrt(a / r));
        if (!(eh < h && ew < w)) continue;
        int64_t y = (int64_t)dpt_rng_below(&rng, (uint64_t)(h - eh + 1));
        int64_t x = (int64_t)dpt_rng_below(&rng, (uint64_t)(w - ew + 1));
        box[0] = y, box[1] = y + eh, box[2] = x, box[3] = x + ew;
        return true;
    }
    return false;
}

void dpt_erase_apply(dpt_ctx *ctx, dpt_tensor *x, const dpt_erase_options *o, uint64_t key)
{
    DPT_ASSERT(x->ndim == 4 && x->dtype == DPT_F32 && dpt_tensor_is_contiguous(x),
               "random erasing of a %d-D batch", x->ndim);
    bool nhwc = x->layout == DPT_LAYOUT_NHWC;
    DPT_ASSERT(nhwc || x->layout == DPT_LAYOUT_NCHW, "random erasing of a blocked layout");
    int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    for (int64_t i = 0; i < n; i++) {
        int64_t box[4];
        if (dpt_erase_draw(o, key, i, h, w, box))
            ctx->be->erase_box(ctx, x->data + i * c * h * w, c, h, w, nhwc, box);
    }
}

void dpt_mix_apply(dpt_ctx *ctx, dpt_tensor *x, const dpt_mix *m)
{
    if (!m->on) return;
    DPT_ASSERT(x->dtype == DPT_F32 && dpt_tensor_is_contiguous(x), "mixup of a %s tensor",
               x->dtype == DPT_F32 ? "strided" : "non-float");
    dpt_pair_mix p = {.n = x->shape[0], .c = 1, .h = 1, .w = 1, .cut = m->cut};
    if (m->cut) {
        DPT_ASSERT(x->ndim == 4, "cutmix of a %d-D batch", x->ndim);
        p.nhwc = x->layout == DPT_LAYOUT_NHWC;
        DPT_ASSERT(p.nhwc || x->layout == DPT_LAYOUT_NCHW, "cutmix of a blocked layout");
        p.c = x->shape[1], p.h = x->shape[2], p.w = x->shape[3];
        p.y0 = m->y0, p.y1 = m->y1, p.x0 = m->x0, p.x1 = m->x1;
    } else {
        p.c = dpt_tensor_numel(x) / (p.n ? p.n : 1); /* a sample is its values, whatever their shape */
        p.a = (float)m->lambda, p.b = (float)(1.0 - m->lambda);
    }
    if (p.n > 0) ctx->be->mix_pairs(ctx, x->data, &p);
}

dpt_tensor *dpt_mix_partner_labels(dpt_ctx *ctx, const dpt_tensor *labels, dpt_tensor *storage)
{
    int64_t n = labels->shape[0];
    DPT_ASSERT(labels->dtype == DPT_I32 && storage->dtype == DPT_I32 && storage->shape[0] >= n,
               "mixup's labels");
    dpt_tensor *out = dpt_view(ctx, storage, 1, (int64_t[]){n}, (int64_t[]){1}, 0);
    ctx->be->dev->copy_d2d(ctx, out->data, labels->data, (size_t)n * sizeof(int32_t));
    /* the reversal: the whole 1 x 1 "image" of each pair exchanged */
    dpt_pair_mix p = {.n = n, .c = 1, .h = 1, .w = 1, .cut = true, .y1 = 1, .x1 = 1};
    if (n > 1) ctx->be->mix_pairs(ctx, out->data, &p);
    return out;
}

void dpt_mix_image_size(const dpt_tensor *x, int64_t *h, int64_t *w)
{
    bool image = x->ndim == 4;
    *h = image ? x->shape[2] : 1, *w = image ? x->shape[3] : 1;
}

dpt_tensor *dpt_mix_loss(dpt_ctx *ctx, const dpt_loss_impl *loss, const void *settings, dpt_tensor *out,
                         dpt_tensor *target, dpt_tensor *partner, double lambda)
{
    if (!partner || lambda >= 1.0) return loss->forward(ctx, out, target, settings);
    if (lambda <= 0.0) return loss->forward(ctx, out, partner, settings);
    dpt_tensor *own = loss->forward(ctx, out, target, settings),
               *other = loss->forward(ctx, out, partner, settings);
    return dpt_add(ctx, dpt_scale(ctx, own, (float)lambda), dpt_scale(ctx, other, (float)(1.0 - lambda)));
}
