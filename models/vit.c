/* vit.c: the Vision Transformer (Dosovitskiy et al. 2021) as torchvision builds it
 * (torchvision.models.VisionTransformer), [model] name = vit:
 *
 *   x = conv_proj(images)              a patch_size x patch_size convolution, stride patch_size:
 *                                      (B, hidden_dim, H/p, W/p), flattened to (B, N, hidden_dim)
 *   h = [class_token, x] + pos_embedding, dropout
 *   per layer: h += dropout(out_proj(attention(in_proj(ln_1(h)))))   non-causal, num_heads
 *              h += dropout(mlp.3(dropout(gelu(mlp.0(ln_2(h))))))     the exact (erf) GELU
 *   logits = heads.head(ln(h)[:, 0])   the class token's row
 *
 * LayerNorm eps 1e-6; the attention's q, k and v are one (3 hidden_dim, hidden_dim) projection
 * (in_proj_weight, as torch.nn.MultiheadAttention packs it). Tensors are named as torchvision
 * names them (conv_proj.weight, encoder.layers.encoder_layer_0.self_attention.in_proj_weight,
 * heads.head.weight ...), so a torchvision ViT's state_dict, saved as safetensors, is this
 * model's [model] init or --eval file as it is; timm's names (DeiT's checkpoints) are mapped
 * onto them (vit_rename). torchvision's initialisation: conv_proj
 * N(0, 1/fan_in) (its truncation at +-2 never binds at these widths), the class token zero,
 * pos_embedding N(0, 0.02), in_proj and the MLP's weights Xavier-uniform, the MLP's biases
 * N(0, 1e-6), out_proj PyTorch's Linear default with a zero bias, the head zero.
 * ViT-B/16: patch 16, hidden 768, 12 layers, 12 heads, MLP 3072 (86.6 M parameters at 224). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dpt.h"
#include "../runtime/registry.h"

#define VIT_MAX_LAYERS 64

typedef struct vit_layer {
    dpt_layernorm *ln_1, *ln_2;
    dpt_tensor *in_w, *in_b, *out_w, *out_b; /* self_attention */
    dpt_linear *mlp0, *mlp3;
} vit_layer;

typedef struct vit {
    int64_t patch, dim, layers, heads, mlp, seq, grid_h, grid_w;
    float dropout;
    dpt_conv2d *conv_proj;
    dpt_tensor *class_token, *pos; /* (1, 1, D), (1, S, D) */
    vit_layer layer[VIT_MAX_LAYERS];
    dpt_layernorm *ln;
    dpt_linear *head;
} vit;

/* images (B, C, H, W) -> logits (B, classes) */
static dpt_tensor *vit_forward(dpt_model *model, dpt_ctx *ctx, dpt_tensor *x)
{
    vit *v = dpt_model_state(model);
    bool training = dpt_model_training(model);
    int64_t B = dpt_tensor_dim(x, 0), D = v->dim;
    dpt_tensor *p = dpt_conv2d_forward(ctx, v->conv_proj, x); /* (B, D, H/p, W/p) */
    p = dpt_permute(ctx, dpt_reshape(ctx, p, 3, (int64_t[]){B, D, v->seq - 1}), (int[]){0, 2, 1});
    dpt_tensor *cls = dpt_expand(ctx, v->class_token, 3, (int64_t[]){B, 1, D});
    dpt_tensor *h = dpt_add(ctx, dpt_concat(ctx, 2, (dpt_tensor *[]){cls, p}, 1), v->pos); /* (B, S, D) */
    h = dpt_dropout(ctx, h, v->dropout, training);
    for (int64_t l = 0; l < v->layers; l++) {
        const vit_layer *e = &v->layer[l];
        dpt_tape_mark mark = dpt_tape_mark_here(ctx); /* evaluation: the layer's intermediates go at its end */
        dpt_tensor *a = dpt_affine(ctx, dpt_layernorm_forward(ctx, e->ln_1, h), e->in_w, e->in_b);
        a = dpt_affine(ctx, dpt_attention(ctx, a, (int)v->heads, false), e->out_w, e->out_b);
        dpt_tensor *y = dpt_add(ctx, h, dpt_dropout(ctx, a, v->dropout, training));
        dpt_tensor *m = dpt_gelu_erf(ctx, dpt_linear_forward(ctx, e->mlp0, dpt_layernorm_forward(ctx, e->ln_2, y)));
        m = dpt_linear_forward(ctx, e->mlp3, dpt_dropout(ctx, m, v->dropout, training));
        h = dpt_tape_release(ctx, mark, dpt_add(ctx, y, dpt_dropout(ctx, m, v->dropout, training)));
    }
    h = dpt_narrow(ctx, dpt_layernorm_forward(ctx, v->ln, h), 1, 0, 1); /* the class token's row */
    return dpt_linear_forward(ctx, v->head, dpt_reshape(ctx, dpt_contiguous(ctx, h), 2, (int64_t[]){B, D}));
}

/* torchvision's name of a block's tensor or layer: encoder.layers.encoder_layer_L.WHAT */
static const char *layer_name(char *buf, size_t cap, int64_t layer, const char *what)
{
    snprintf(buf, cap, "encoder.layers.encoder_layer_%lld.%s", (long long)layer, what);
    return buf;
}

static dpt_tensor *named(dpt_model *model, int64_t layer, const char *what, int ndim, int64_t d0, int64_t d1)
{
    char name[128];
    return dpt_model_param(model, layer_name(name, sizeof name, layer, what), ndim, (int64_t[]){d0, d1});
}

/* timm's names (its VisionTransformer, DeiT's checkpoints, the Hugging Face hub's timm/vit_*
 * files) for torchvision's: the same tensors, the same shapes (timm's qkv packs q, k and v as
 * in_proj does, heads contiguous within each). */
static bool vit_rename(const char *name, char *out, size_t cap)
{
    static const char *const whole[][2] = {{"patch_embed.proj.weight", "conv_proj.weight"},
                                           {"patch_embed.proj.bias", "conv_proj.bias"},
                                           {"cls_token", "class_token"},
                                           {"pos_embed", "encoder.pos_embedding"},
                                           {"norm.weight", "encoder.ln.weight"},
                                           {"norm.bias", "encoder.ln.bias"},
                                           {"head.weight", "heads.head.weight"},
                                           {"head.bias", "heads.head.bias"}};
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
        if (!strcmp(name, whole[i][0])) return snprintf(out, cap, "%s", whole[i][1]) < (int)cap;
    static const char *const part[][2] = {{"norm1.", "ln_1."},
                                          {"norm2.", "ln_2."},
                                          {"attn.qkv.weight", "self_attention.in_proj_weight"},
                                          {"attn.qkv.bias", "self_attention.in_proj_bias"},
                                          {"attn.proj.", "self_attention.out_proj."},
                                          {"mlp.fc1.", "mlp.0."},
                                          {"mlp.fc2.", "mlp.3."}};
    long long layer;
    int at = 0;
    if (sscanf(name, "blocks.%lld.%n", &layer, &at) != 1 || at == 0 || layer < 0) return false;
    const char *rest = name + at;
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
        size_t n = strlen(part[i][0]);
        if (!strncmp(rest, part[i][0], n))
            return snprintf(out, cap, "encoder.layers.encoder_layer_%lld.%s%s", layer, part[i][1], rest + n) < (int)cap;
    }
    return false;
}

/* PyTorch's bicubic convolution (A = -0.75): the weights of the 4 neighbours of a point t past
 * the second of them, as upsample_bicubic2d computes them. */
static void cubic_weights(double t, double w[4])
{
    const double A = -0.75;
    double x = t + 1, y = 1 - t, z = 2 - t;
    w[0] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    w[2] = ((A + 2) * y - (A + 3)) * y * y + 1;
    w[3] = ((A * z - 5 * A) * z + 8 * A) * z - 4 * A;
}

/* A file's position embeddings for another image size (a ViT fine-tuned at 384 from 224's
 * weights, or at 28 from any): torchvision's interpolate_embeddings. The class token's row is
 * kept; the patch rows, a square grid of g x g, are resampled bicubically with the corners
 * aligned (align_corners=True, borders clamped) to this model's grid (gh x gw). */
static bool vit_adapt(const dpt_model *model, const dpt_tensor *into, int ndim, const int64_t *dims, const float *data,
                      float *out, char *how, size_t cap)
{
    const vit *v = dpt_model_state(model);
    if (strcmp(dpt_tensor_name(into), "encoder.pos_embedding") != 0 || ndim != 3 || dims[0] != 1 ||
        dims[2] != v->dim || dims[1] < 2)
        return false;
    int64_t D = v->dim, S0 = dims[1] - 1, g = (int64_t)llround(sqrt((double)S0)), gh = v->grid_h, gw = v->grid_w;
    if (g * g != S0) return false; /* torchvision's files hold square grids */
    memcpy(out, data, (size_t)D * sizeof *out); /* the class token's */
    for (int64_t oy = 0; oy < gh; oy++)
        for (int64_t ox = 0; ox < gw; ox++) {
            double ry = gh > 1 ? (double)oy * (double)(g - 1) / (double)(gh - 1) : 0.0;
            double rx = gw > 1 ? (double)ox * (double)(g - 1) / (double)(gw - 1) : 0.0;
            int64_t iy = (int64_t)floor(ry), ix = (int64_t)floor(rx);
            double wy[4], wx[4];
            cubic_weights(ry - (double)iy, wy);
            cubic_weights(rx - (double)ix, wx);
            float *o = out + (1 + oy * gw + ox) * D;
            for (int64_t c = 0; c < D; c++) {
                double acc = 0;
                for (int a = 0; a < 4; a++) {
                    int64_t y = iy - 1 + a < 0 ? 0 : iy - 1 + a >= g ? g - 1 : iy - 1 + a;
                    double row = 0;
                    for (int b = 0; b < 4; b++) {
                        int64_t x = ix - 1 + b < 0 ? 0 : ix - 1 + b >= g ? g - 1 : ix - 1 + b;
                        row += wx[b] * data[(1 + y * g + x) * D + c];
                    }
                    acc += wy[a] * row;
                }
                o[c] = (float)acc;
            }
        }
    snprintf(how, cap, "resampled from a %lldx%lld patch grid to %lldx%lld (bicubic, torchvision's "
                       "interpolate_embeddings)", (long long)g, (long long)g, (long long)gh, (long long)gw);
    return true;
}

static dpt_model *vit_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w, int num_classes,
                            dpt_error *err)
{
    vit s = {.patch = dpt_config_int(cfg, "model", "patch_size"), .dim = dpt_config_int(cfg, "model", "hidden_dim"),
             .layers = dpt_config_int(cfg, "model", "num_layers"), .heads = dpt_config_int(cfg, "model", "num_heads"),
             .mlp = dpt_config_int(cfg, "model", "mlp_dim"),
             .dropout = (float)dpt_config_float(cfg, "model", "resid_dropout")};
    if (h % s.patch || w % s.patch) {
        dpt_errorf(err, "%s: [model] patch_size = %lld does not divide the %lldx%lld images\nHINT: a patch size that "
                        "divides both sides (%s), or [data] image_size = a multiple of it",
                   dpt_config_where(cfg, "model", "patch_size"), (long long)s.patch, (long long)h, (long long)w,
                   h == w && h % 7 == 0 ? "7 or 14 for 28x28" : "16 for 224x224");
        return NULL;
    }
    if (s.dim % s.heads) {
        dpt_errorf(err, "%s: [model] num_heads = %lld does not divide hidden_dim = %lld\nHINT: each head takes "
                        "hidden_dim / num_heads channels (ViT-B: 768 and 12)",
                   dpt_config_where(cfg, "model", "num_heads"), (long long)s.heads, (long long)s.dim);
        return NULL;
    }
    int64_t D = s.dim, M = s.mlp;
    s.grid_h = h / s.patch, s.grid_w = w / s.patch;
    s.seq = 1 + s.grid_h * s.grid_w;
    dpt_model *model = dpt_model_new(ctx, "vit", vit_forward);
    vit *v = dpt_model_alloc(model, sizeof *v);
    *v = s;
    dpt_model_set_state(model, v);
    dpt_model_set_renamer(model, vit_rename);
    dpt_model_set_adapter(model, vit_adapt);
    dpt_shape3 shape = {c, h, w};
    v->conv_proj = dpt_conv2d_new(model, "conv_proj", &shape, D, s.patch, s.patch, 0, 1, 1, true);
    /* the convolution's own initialisation is ResNet's: torchvision's ViT draws N(0, 1/fan_in), bias 0 */
    int np = dpt_model_num_params(model);
    dpt_init_normal(ctx, dpt_model_param_at(model, np - 2), sqrtf(1.0f / (float)(c * s.patch * s.patch)));
    dpt_init_constant(dpt_model_param_at(model, np - 1), 0.0f);
    v->class_token = dpt_model_param(model, "class_token", 3, (int64_t[]){1, 1, D});
    v->pos = dpt_model_param(model, "encoder.pos_embedding", 3, (int64_t[]){1, s.seq, D});
    dpt_init_constant(v->class_token, 0.0f);
    dpt_init_normal(ctx, v->pos, 0.02f);
    float xavier_in = sqrtf(6.0f / (float)(D + 3 * D)), xavier_mlp = sqrtf(6.0f / (float)(D + M));
    for (int64_t l = 0; l < s.layers; l++) {
        vit_layer *e = &v->layer[l];
        char name[128];
        e->ln_1 = dpt_layernorm_new(model, layer_name(name, sizeof name, l, "ln_1"), D, 1e-6f, true);
        e->in_w = named(model, l, "self_attention.in_proj_weight", 2, 3 * D, D);
        e->in_b = named(model, l, "self_attention.in_proj_bias", 1, 3 * D, 0);
        e->out_w = named(model, l, "self_attention.out_proj.weight", 2, D, D);
        e->out_b = named(model, l, "self_attention.out_proj.bias", 1, D, 0);
        dpt_init_uniform(ctx, e->in_w, xavier_in);
        dpt_init_constant(e->in_b, 0.0f);
        dpt_init_uniform(ctx, e->out_w, 1.0f / sqrtf((float)D));
        dpt_init_constant(e->out_b, 0.0f);
        e->ln_2 = dpt_layernorm_new(model, layer_name(name, sizeof name, l, "ln_2"), D, 1e-6f, true);
        e->mlp0 = dpt_linear_new(model, layer_name(name, sizeof name, l, "mlp.0"), D, M, true);
        e->mlp3 = dpt_linear_new(model, layer_name(name, sizeof name, l, "mlp.3"), M, D, true);
        np = dpt_model_num_params(model); /* mlp.0's weight and bias, then mlp.3's */
        for (int k = 0; k < 4; k += 2) {
            dpt_init_uniform(ctx, dpt_model_param_at(model, np - 4 + k), xavier_mlp);
            dpt_init_normal(ctx, dpt_model_param_at(model, np - 3 + k), 1e-6f);
        }
    }
    v->ln = dpt_layernorm_new(model, "encoder.ln", D, 1e-6f, true);
    v->head = dpt_linear_new(model, "heads.head", D, num_classes, true);
    np = dpt_model_num_params(model);
    dpt_init_constant(dpt_model_param_at(model, np - 2), 0.0f);
    dpt_init_constant(dpt_model_param_at(model, np - 1), 0.0f);
    char summary[200];
    snprintf(summary, sizeof summary, "patch %lld, %lld tokens, hidden %lld, %lld layers, %lld heads, MLP %lld",
             (long long)s.patch, (long long)s.seq, (long long)D, (long long)s.layers, (long long)s.heads, (long long)M);
    dpt_model_set_summary(model, summary);
    return model;
}

/* torchvision's VisionTransformer arguments (ViT-B/16's defaults would not train on 2 cores:
 * these are a small ViT for 28x28 images; the README's table gives the standard sizes) */
static const dpt_config_key vit_keys[] = {
    {NULL, "patch_size", DPT_KEY_INT, "7", 1, 1024, NULL,
     "side of the square patches, each one token (ViT-B/16: 16); it divides the image's sides", 0},
    {NULL, "hidden_dim", DPT_KEY_INT, "64", 1, 65536, NULL, "token width (ViT-Ti 192, S 384, B 768, L 1024, H 1280)", 0},
    {NULL, "num_layers", DPT_KEY_INT, "4", 1, VIT_MAX_LAYERS, NULL, "encoder blocks (ViT-B: 12, L: 24, H: 32)", 0},
    {NULL, "num_heads", DPT_KEY_INT, "4", 1, 1024, NULL,
     "attention heads; hidden_dim / num_heads channels each (ViT-Ti 3, S 6, B 12, L 16, H 16)", 0},
    {NULL, "mlp_dim", DPT_KEY_INT, "128", 1, 1 << 20, NULL, "the MLP's hidden width (ViT: 4 hidden_dim)", 0},
    {NULL, "resid_dropout", DPT_KEY_FLOAT, "0", 0, 0.99, NULL,
     "dropout on the embeddings and on each block's attention and MLP outputs (torchvision's dropout; 0)", 0},
};

static const dpt_model_impl vit_impl = {.build_image = vit_build};
DPT_BUILTIN(model_vit) = {DPT_KIND_MODEL, "vit",
                          "Vision Transformer as torchvision's (patch convolution, class token, pre-LN encoder, "
                          "torchvision's tensor names)",
                          vit_keys, DPT_COUNT(vit_keys), &vit_impl};
