/* gpt.c: a GPT-2-class decoder-only transformer ([model] name = gpt), on token data (int32 ids).
 *
 *   h = wte[ids] + wpe[0..T)                         token and position embeddings
 *   per layer: h += proj(attention(qkv(LN1(h))))     causal multi-head self-attention
 *              h += fc2(gelu_tanh(fc(LN2(h))))       MLP, 4x wide
 *   logits = LN_f(h) wte[0..V)^T                     tied with the token embedding
 *
 * GPT-2's choices (and llm.c's): pre-LN blocks, LayerNorm eps 1e-5, the tanh GELU, biases on
 * every linear layer (bias = false drops them), weights N(0, 0.02) with the residual
 * projections' divided by sqrt(2 layers), LayerNorm weights 1 and biases 0. The token
 * embedding has padded_vocab_size rows (llm.c pads 50257 to 50304, a multiple of 128, for
 * faster GEMMs); only the first vocab_size are read, so the padding changes no result.
 * Parameters are named as in GPT-2 (wte, wpe, h.L.ln_1, h.L.attn.c_attn, ...), in llm.c's
 * order within each kind. GPT-2 small (12 layers, 12 heads, 768 channels, 1024 positions,
 * vocab 50257 padded to 50304) has 124,475,904 parameters. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpt.h"
#include "../runtime/registry.h"

#define GPT_MAX_LAYERS 256

typedef struct gpt_block {
    dpt_tensor *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    dpt_tensor *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
} gpt_block;

typedef struct gpt gpt;

/* One block's forward, as dpt_checkpoint calls it (recompute = true: again in backward). */
typedef struct block_call {
    const gpt *g;
    int64_t layer;
    bool training;
} block_call;

struct gpt {
    int64_t layers, heads, channels, block_size, vocab, padded_vocab;
    float dropout;
    bool recompute; /* [model] recompute: each block's activations made again in backward */
    dpt_tensor *wte, *wpe, *lnf_w, *lnf_b;
    gpt_block block[GPT_MAX_LAYERS];
    block_call call[GPT_MAX_LAYERS];
};

/* h + attention(LN1(h)), then + MLP(LN2(.)): one block on the whole sequence, or (cache) on
 * this call's positions after the cached ones. */
static dpt_tensor *block_forward(const gpt *g, int64_t l, dpt_ctx *ctx, dpt_tensor *h, int64_t pos,
                                 dpt_kv_cache *cache, bool training)
{
    const gpt_block *b = &g->block[l];
    dpt_tensor *a = dpt_affine(ctx, dpt_layer_norm(ctx, h, b->ln1_w, b->ln1_b, 1e-5f), b->qkv_w, b->qkv_b);
    a = cache ? dpt_attention_cached(ctx, a, (int)g->heads, cache, (int)l, pos) : dpt_attention(ctx, a, (int)g->heads, true);
    h = dpt_add(ctx, h, dpt_dropout(ctx, dpt_affine(ctx, a, b->proj_w, b->proj_b), g->dropout, training));
    dpt_tensor *m = dpt_layer_norm(ctx, h, b->ln2_w, b->ln2_b, 1e-5f);
    m = dpt_affine(ctx, dpt_gelu(ctx, dpt_affine(ctx, m, b->fc_w, b->fc_b)), b->fcproj_w, b->fcproj_b);
    return dpt_add(ctx, h, dpt_dropout(ctx, m, g->dropout, training));
}

static dpt_tensor *block_checkpointed(dpt_ctx *ctx, dpt_tensor *h, void *user)
{
    const block_call *c = user;
    return block_forward(c->g, c->layer, ctx, h, 0, NULL, c->training);
}

/* The embeddings of ids (B, T) at positions [pos, pos + T), the blocks and the final LN: the
 * residual stream (B, T, C). Attention reads the whole sequence (training, evaluation) or, with
 * a cache, this call's positions after the cached ones (generation). */
static dpt_tensor *gpt_trunk(gpt *g, dpt_ctx *ctx, const dpt_tensor *ids, int64_t pos, dpt_kv_cache *cache,
                             bool training)
{
    int64_t T = dpt_tensor_dim(ids, 1); /* pos + T at most block_size: the builder or the sampler checked */
    dpt_tensor *h = dpt_add(ctx, dpt_embedding(ctx, g->wte, (dpt_tensor *)ids), dpt_narrow(ctx, g->wpe, 0, pos, T));
    h = dpt_dropout(ctx, h, g->dropout, training); /* (B, T, C) */
    for (int64_t l = 0; l < g->layers; l++) {
        if (g->recompute && !cache && dpt_grad_enabled(ctx)) { /* only the block's input is kept for backward */
            g->call[l] = (block_call){.g = g, .layer = l, .training = training};
            h = dpt_checkpoint(ctx, block_checkpointed, h, &g->call[l]);
            continue;
        }
        dpt_tape_mark mark = dpt_tape_mark_here(ctx); /* evaluation: the block's intermediates go at its end */
        h = dpt_tape_release(ctx, mark, block_forward(g, l, ctx, h, pos, cache, training));
    }
    return dpt_layer_norm(ctx, h, g->lnf_w, g->lnf_b, 1e-5f);
}

/* The tied output layer: one GEMM of every position with the vocabulary's rows. */
static dpt_tensor *gpt_logits(gpt *g, dpt_ctx *ctx, dpt_tensor *h)
{
    return dpt_bmm(ctx, h, dpt_transpose(ctx, dpt_narrow(ctx, g->wte, 0, 0, g->vocab)));
}

static dpt_tensor *gpt_forward(dpt_model *model, dpt_ctx *ctx, dpt_tensor *ids)
{
    gpt *g = dpt_model_state(model);
    return gpt_logits(g, ctx, gpt_trunk(g, ctx, ids, 0, NULL, dpt_model_training(model))); /* (B, T, V) */
}

/* Generation: the logits (1, V) of the last of this call's positions only (a prompt's others
 * are never needed: their GEMM with the vocabulary is skipped). */
static dpt_tensor *gpt_decode(dpt_model *model, dpt_ctx *ctx, const dpt_tensor *ids, int64_t pos, dpt_kv_cache *cache)
{
    gpt *g = dpt_model_state(model);
    dpt_tensor *h = gpt_trunk(g, ctx, ids, pos, cache, false);
    int64_t T = dpt_tensor_dim(h, 1);
    h = dpt_reshape(ctx, dpt_contiguous(ctx, dpt_narrow(ctx, h, 1, T - 1, 1)), 2, (int64_t[]){1, g->channels});
    return gpt_logits(g, ctx, h);
}

static dpt_tensor *param(dpt_model *model, const char *fmt, int64_t layer, const char *what, int ndim, int64_t d0,
                         int64_t d1)
{
    char name[96];
    snprintf(name, sizeof name, fmt, (long long)layer, what);
    return dpt_model_param(model, name, ndim, (int64_t[]){d0, d1});
}

/* ---------------------------------------------------------------- llm.c's checkpoint files */

/* llm.c's GPT-2 file (train_gpt2.c): 256 little-endian int32 (magic 20240326, version 3 = fp32,
 * max_seq_len, vocab_size, num_layers, num_heads, channels, padded_vocab_size), then the fp32
 * tensors kind by kind, each kind for every layer: wte (Vp, C), wpe (maxT, C), ln1w, ln1b,
 * qkvw (3C, C), qkvb, attprojw (C, C), attprojb, ln2w, ln2b, fcw (4C, C), fcb, fcprojw (C, 4C),
 * fcprojb, lnfw, lnfb. Our parameters are the same matrices (Linear's (out, in) layout). */
enum { LLMC_MAGIC = 20240326, LLMC_FP32 = 3, LLMC_BF16 = 5, LLMC_TOKENS_MAGIC = 20240520 };

/* The model's tensors in the file's order (kinds 0..15, each for every layer; wte, wpe and the
 * final LN once): a new list of 4 + 12 layers entries (*count), with the values in all and the
 * largest tensor's in most; NULL when out of memory. */
static dpt_tensor **llmc_order(gpt *g, int *count, int64_t *all, size_t *most)
{
    dpt_tensor **list = malloc((size_t)(4 + 12 * g->layers) * sizeof *list);
    if (!list) return NULL;
    int n = 0;
    *all = 0, *most = 0;
    for (int k = 0; k < 16; k++)
        for (int64_t l = 0; l < (k < 2 || k >= 14 ? 1 : g->layers); l++) {
            gpt_block *b = &g->block[l];
            dpt_tensor *per_layer[12] = {b->ln1_w, b->ln1_b, b->qkv_w, b->qkv_b, b->proj_w, b->proj_b,
                                         b->ln2_w, b->ln2_b, b->fc_w, b->fc_b, b->fcproj_w, b->fcproj_b};
            dpt_tensor *t = k == 0 ? g->wte : k == 1 ? g->wpe : k == 14 ? g->lnf_w : k == 15 ? g->lnf_b : per_layer[k - 2];
            size_t numel = (size_t)dpt_tensor_numel(t);
            list[n++] = t, *all += (int64_t)numel;
            if (numel > *most) *most = numel;
        }
    *count = n;
    return list;
}

static bool llmc_load(gpt *g, const char *path, const char *where, dpt_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO is refused, not waited on */
    struct stat st;
    if (fd < 0) return dpt_errorf(err, "%s: [model] init = llmc:%s: %s", where, path, strerror(errno));
    FILE *f = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? fdopen(fd, "rb") : NULL;
    if (!f) {
        close(fd);
        return dpt_errorf(err, "%s: [model] init = llmc:%s: not a regular file (a folder, FIFO or device)\nHINT: "
                               "give llm.c's checkpoint file (gpt2_124M.bin)", where, path);
    }
    int32_t h[256];
    bool ok = fread(h, sizeof h, 1, f) == 1;
    if (!ok || h[0] != LLMC_MAGIC || (h[1] != LLMC_FP32 && h[1] != LLMC_BF16)) {
        fclose(f);
        return dpt_errorf(err, "%s: %s is not an llm.c GPT-2 checkpoint (%s)\nHINT: llm.c writes them with "
                               "train_gpt2.py (gpt2_124M.bin) or ./train --export llmc",
                          where, path, !ok ? "shorter than its 1024-byte header"
                                       : h[0] == LLMC_TOKENS_MAGIC ? "it is a token shard"
                                       : h[0] != LLMC_MAGIC ? "wrong magic number" : "unknown version");
    }
    if (h[1] == LLMC_BF16) {
        fclose(f);
        return dpt_errorf(err, "%s: %s holds bf16 weights (llm.c's version 5)\nHINT: use the fp32 file (version 3, "
                               "gpt2_124M.bin rather than gpt2_124M_bf16.bin)", where, path);
    }
    const char *names[6] = {"block_size (max_seq_len)", "vocab size", "n_layer", "n_head", "n_embd",
                            "padded_vocab_size"};
    int64_t ours[6] = {g->block_size, g->vocab, g->layers, g->heads, g->channels, g->padded_vocab};
    for (int i = 0; i < 6; i++)
        if (h[2 + i] != ours[i]) {
            fclose(f);
            return dpt_errorf(err, "%s: %s is a model with %s %d; this config's has %lld\nHINT: set [model] n_layer, "
                                   "n_head, n_embd, block_size and padded_vocab_size (and [data] vocab_size) to the "
                                   "file's: %d, %d, %d, %d, %d (%d)",
                              where, path, names[i], h[2 + i], (long long)ours[i], h[4], h[5], h[6], h[2], h[7], h[3]);
        }
    if (!g->block[0].qkv_b && g->layers > 0) {
        fclose(f);
        return dpt_errorf(err, "%s: llm.c's GPT-2 has biases; this config sets [model] bias = false", where);
    }
    int64_t total;
    size_t most;
    int count;
    dpt_tensor **list = llmc_order(g, &count, &total, &most);
    float *buf = list ? malloc(most * sizeof *buf) : NULL;
    if (!buf) {
        free(list);
        fclose(f);
        return dpt_errorf(err, "out of host memory reading %s", path);
    }
    if ((int64_t)st.st_size != 1024 + 4 * total) {
        free(buf), free(list);
        fclose(f);
        return dpt_errorf(err, "%s: %s has %lld bytes; its header describes %lld parameters (%lld bytes with the "
                               "header): truncated or not written by llm.c",
                          where, path, (long long)st.st_size, (long long)total, (long long)(1024 + 4 * total));
    }
    for (int i = 0; i < count && ok; i++) {
        dpt_tensor *t = list[i];
        size_t n = (size_t)dpt_tensor_numel(t);
        ok = fread(buf, sizeof *buf, n, f) == n;
        for (size_t j = 0; ok && j < n; j++)
            if (!isfinite(buf[j])) {
                dpt_errorf(err, "%s: %s: %s holds a non-finite value (%g at %zu)", where, path, dpt_tensor_name(t),
                           (double)buf[j], j);
                free(buf), free(list);
                fclose(f);
                return false;
            }
        if (ok) dpt_tensor_copy_from_host(t, buf);
    }
    free(buf), free(list);
    fclose(f);
    if (!ok) return dpt_errorf(err, "%s: cannot read %s to its end", where, path);
    return true;
}

static bool gpt_export_hf(gpt *g, const char *dir, dpt_error *err);

/* ./train CONFIG --export llmc CKPT OUT: the file llmc_load reads and llm.c's train_gpt2.c
 * loads (gpt2_build_from_checkpoint): the header, then every tensor in the same order. */
static bool gpt_export(dpt_model *model, const char *format, const char *path, dpt_error *err)
{
    gpt *g = dpt_model_state(model);
    if (!strcmp(format, "hf")) return gpt_export_hf(g, path, err);
    if (strcmp(format, "llmc") != 0) return dpt_errorf(err, "gpt writes llmc and hf, not %s", format);
    if (!g->block[0].qkv_b && g->layers > 0)
        return dpt_errorf(err, "--export llmc: llm.c's GPT-2 has biases; this model has [model] bias = false");
    int32_t h[256] = {LLMC_MAGIC, LLMC_FP32, (int32_t)g->block_size, (int32_t)g->vocab, (int32_t)g->layers,
                      (int32_t)g->heads, (int32_t)g->channels, (int32_t)g->padded_vocab};
    dpt_atomic_file af;
    if (!dpt_atomic_file_open(&af, path, err)) return false;
    FILE *f = af.f;
    int64_t total;
    size_t most;
    int count;
    dpt_tensor **list = llmc_order(g, &count, &total, &most);
    float *buf = list ? malloc(most * sizeof *buf) : NULL;
    bool ok = buf && fwrite(h, sizeof h, 1, f) == 1;
    for (int i = 0; i < count && ok; i++) {
        size_t n = (size_t)dpt_tensor_numel(list[i]);
        dpt_tensor_copy_to_host(list[i], buf);
        ok = fwrite(buf, sizeof *buf, n, f) == n;
    }
    free(buf), free(list);
    if (!ok) dpt_errorf(err, "writing %s failed: %s\nHINT: is the disk full?", af.tmp, strerror(errno));
    return dpt_atomic_file_close(&af, ok, err);
}

/* ---------------------------------------------------------------- Hugging Face's GPT-2 files */

/* [model] init = hf:PATH (and --sample hf:PATH): the model.safetensors (PATH, or PATH/model.safetensors
 * when PATH is a folder) of Hugging Face's
 * transformers GPT-2 (GPT2LMHeadModel or GPT2Model, names with or without "transformer."). Its
 * tensors are ours by name (wte.weight and wpe.weight our wte and wpe), but for the four linear layers of a block, which are OpenAI's
 * Conv1D, weights (in, out) where ours are (out, in) (transposed here, as nanoGPT's and llm.c's
 * converters do), and wte, which has vocab_size rows (ours padded_vocab_size: the padding
 * rows are zero, as in llm.c's file). The causal masks (attn.bias, attn.masked_bias) are not
 * weights; lm_head.weight must be wte's (GPT-2 ties them). --export hf writes the same file. */
static const char *const HF_CONV1D[] = {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight",
                                        ".mlp.c_proj.weight"};

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

/* dst (cols, rows) = src (rows, cols) transposed: a Conv1D weight to a linear layer's and back */
static void transpose(const float *src, int64_t rows, int64_t cols, float *dst)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[c * rows + r] = src[r * cols + c];
}

static bool hf_conv1d(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (ends_with(name, HF_CONV1D[i])) return true;
    return false;
}

typedef struct hf_load_state {
    gpt *g;
    const char *path, *where;
    dpt_tensor **list; /* the model's tensors (llmc_order) */
    char *seen;
    int count, masks;
    float *buf, *lm_head; /* a tensor's values in our layout; lm_head's, compared with wte at the end */
    int64_t lm_rows;
} hf_load_state;

static bool hf_tensor(void *user, const char *name, bool buffer, int ndim, const int64_t *dims, const float *data,
                      int64_t numel, dpt_error *err)
{
    (void)buffer;
    hf_load_state *s = user;
    gpt *g = s->g;
    const char *file_name = name; /* as the file names it, for messages */
    if (!strncmp(name, "transformer.", 12)) name += 12;
    if (!strcmp(name, "wte.weight") || !strcmp(name, "wpe.weight")) name = name[1] == 't' ? "wte" : "wpe"; /* nn.Embedding's */
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) { /* causal masks */
        s->masks++;
        return true;
    }
    if (!strcmp(name, "lm_head.weight")) { /* tied: checked against wte once both are read */
        if (ndim != 2 || dims[0] != g->vocab || dims[1] != g->channels)
            return dpt_errorf(err, "%s: %s: lm_head.weight is not [%lld, %lld], wte's shape\nHINT: GPT-2's output "
                                   "layer is its token embedding; a model with another head is not GPT-2",
                              s->where, s->path, (long long)g->vocab, (long long)g->channels);
        free(s->lm_head);
        s->lm_head = malloc((size_t)numel * sizeof *s->lm_head);
        if (!s->lm_head) return dpt_errorf(err, "out of host memory reading %s", s->path);
        memcpy(s->lm_head, data, (size_t)numel * sizeof *data);
        s->lm_rows = dims[0];
        return true;
    }
    int at = -1;
    for (int i = 0; i < s->count && at < 0; i++)
        if (!strcmp(dpt_tensor_name(s->list[i]), name)) at = i;
    if (at < 0)
        return dpt_errorf(err, "%s: %s holds %s, which this GPT-2 (%lld layers) has not\nHINT: a GPT-2 of Hugging "
                               "Face's transformers (GPT2LMHeadModel, GPT2Model) with [model] n_layer, n_head, n_embd "
                               "and block_size as its config.json's n_layer, n_head, n_embd and n_positions",
                          s->where, s->path, file_name, (long long)g->layers);
    dpt_tensor *t = s->list[at];
    bool conv1d = hf_conv1d(name), wte = t == g->wte;
    int64_t want[2] = {dpt_tensor_dim(t, 0), dpt_tensor_ndim(t) > 1 ? dpt_tensor_dim(t, 1) : 0};
    if (conv1d) want[0] = dpt_tensor_dim(t, 1), want[1] = dpt_tensor_dim(t, 0);
    if (wte) want[0] = g->vocab;
    if (ndim != dpt_tensor_ndim(t) || dims[0] != want[0] || (ndim > 1 && dims[1] != want[1]))
        return dpt_errorf(err, "%s: %s: %s is [%lld%s%lld] in the file; this config's GPT-2 needs [%lld%s%lld]%s\n"
                               "HINT: [model] n_layer, n_head, n_embd and block_size as the file's config.json's "
                               "n_layer, n_head, n_embd and n_positions, and the data's vocabulary its vocab_size "
                               "(50257)",
                          s->where, s->path, file_name, (long long)dims[0], ndim > 1 ? ", " : "",
                          ndim > 1 ? (long long)dims[1] : 0LL, (long long)want[0], ndim > 1 ? ", " : "",
                          ndim > 1 ? (long long)want[1] : 0LL, conv1d ? " (Conv1D's (in, out) layout)" : "");
    if (ndim < 2) {
        dpt_tensor_copy_from_host(t, data);
    } else if (conv1d) { /* (in, out) -> (out, in) */
        transpose(data, dims[0], dims[1], s->buf);
        dpt_tensor_copy_from_host(t, s->buf);
    } else if (wte) { /* vocab_size rows, then padded_vocab_size's zero rows */
        memcpy(s->buf, data, (size_t)numel * sizeof *data);
        memset(s->buf + numel, 0, (size_t)(dpt_tensor_numel(t) - numel) * sizeof *s->buf);
        dpt_tensor_copy_from_host(t, s->buf);
    } else {
        dpt_tensor_copy_from_host(t, data);
    }
    s->seen[at] = 1;
    return true;
}

static bool hf_load(dpt_model *model, gpt *g, const char *path, const char *where, dpt_error *err)
{
    (void)model;
    if (!g->block[0].qkv_b && g->layers > 0)
        return dpt_errorf(err, "%s: GPT-2 has biases; this config sets [model] bias = false\nHINT: leave bias at "
                               "true to load %s", where, path);
    char *file = NULL; /* hf:DIR: the folder a GPT-2 of the hub downloads to */
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t n = strlen(path) + sizeof "/model.safetensors";
        file = malloc(n);
        if (!file) return dpt_errorf(err, "out of host memory");
        snprintf(file, n, "%s/model.safetensors", path);
        path = file;
    }
    hf_load_state s = {.g = g, .path = path, .where = where};
    int64_t total;
    size_t most;
    s.list = llmc_order(g, &s.count, &total, &most);
    s.seen = calloc((size_t)s.count + 1, 1);
    s.buf = malloc(most * sizeof *s.buf);
    if (!s.list || !s.seen || !s.buf) {
        free(s.list), free(s.seen), free(s.buf), free(file);
        return dpt_errorf(err, "out of host memory reading %s", path);
    }
    dpt_safetensors_skips ints;
    bool ok = dpt_safetensors_tensors(path, hf_tensor, &s, &ints, err);
    char missing[400] = "";
    for (int i = 0; ok && i < s.count; i++)
        if (!s.seen[i]) {
            size_t at = strlen(missing);
            if (at + 1 < sizeof missing)
                snprintf(missing + at, sizeof missing - at, "%s%s", at ? ", " : "", dpt_tensor_name(s.list[i]));
        }
    if (ok && *missing)
        ok = dpt_errorf(err, "%s: %s lacks GPT-2's %s\nHINT: a GPT-2 of Hugging Face's transformers with this "
                             "config's n_layer (%lld)",
                        where, path, missing, (long long)g->layers);
    if (ok && s.lm_head) { /* tied: the output layer must be the embedding */
        dpt_tensor_copy_to_host(g->wte, s.buf);
        for (int64_t i = 0; ok && i < s.lm_rows * g->channels; i++)
            if (s.lm_head[i] != s.buf[i])
                ok = dpt_errorf(err, "%s: %s: lm_head.weight differs from wte.weight (element %lld: %g against %g): "
                                     "an output layer of its own, which GPT-2 (and this model) ties to the token "
                                     "embedding\nHINT: a GPT-2 whose lm_head is its wte (transformers' "
                                     "tie_word_embeddings, the default)",
                                where, path, (long long)i, (double)s.lm_head[i], (double)s.buf[i]);
    }
    free(s.list), free(s.seen), free(s.buf), free(s.lm_head), free(file);
    return ok;
}

/* ./train CONFIG --export hf CKPT OUT: what hf_load reads, as transformers' GPT2LMHeadModel
 * state_dict names it (transformer.h.0.attn.c_attn.weight ... and lm_head.weight, tied, which
 * safetensors files leave out: from_pretrained ties it), with wte's vocab_size rows. */
static bool gpt_export_hf(gpt *g, const char *dir, dpt_error *err)
{
    if (!g->block[0].qkv_b && g->layers > 0)
        return dpt_errorf(err, "--export hf: GPT-2 has biases; this model has [model] bias = false");
    struct stat st;
    if (mkdir(dir, 0777) != 0 && !(errno == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)))
        return dpt_errorf(err, "--export hf: %s: %s\nHINT: OUT is a folder for config.json and model.safetensors "
                               "(made if missing; its parent must exist)",
                          dir, errno == EEXIST ? "not a folder" : strerror(errno));
    int count;
    int64_t total;
    size_t most;
    dpt_tensor **list = llmc_order(g, &count, &total, &most);
    float *buf = list ? malloc(most * sizeof *buf) : NULL, *out = buf ? malloc(most * sizeof *out) : NULL;
    char *path = out ? malloc(strlen(dir) + 32) : NULL, (*names)[160] = path ? malloc((size_t)count * sizeof *names) : NULL;
    int64_t (*dims)[2] = names ? malloc((size_t)count * sizeof *dims) : NULL;
    dpt_safetensors_entry *se = dims ? malloc((size_t)count * sizeof *se) : NULL;
    if (!se) {
        free(list), free(buf), free(out), free(path), free(names), free(dims);
        return dpt_errorf(err, "out of host memory writing %s", dir);
    }
    for (int i = 0; i < count; i++) { /* transformers' GPT2LMHeadModel names; Conv1D's (in, out) */
        dpt_tensor *t = list[i];
        int nd = dpt_tensor_ndim(t);
        dims[i][0] = t == g->wte ? g->vocab : dpt_tensor_dim(t, 0), dims[i][1] = nd > 1 ? dpt_tensor_dim(t, 1) : 0;
        if (hf_conv1d(dpt_tensor_name(t))) dims[i][0] = dpt_tensor_dim(t, 1), dims[i][1] = dpt_tensor_dim(t, 0);
        snprintf(names[i], sizeof names[i], "transformer.%s%s", dpt_tensor_name(t),
                 t == g->wte || t == g->wpe ? ".weight" : ""); /* nn.Embedding's wte.weight */
        se[i] = (dpt_safetensors_entry){.name = names[i], .ndim = nd, .dims = dims[i]};
    }
    sprintf(path, "%s/model.safetensors", dir); /* strlen(dir) + 32 bytes */
    dpt_atomic_file af;
    bool ok = dpt_atomic_file_open(&af, path, err);
    if (ok) {
        ok = dpt_safetensors_write_header(af.f, af.tmp, se, count, NULL, err);
        for (int i = 0; ok && i < count; i++) {
            dpt_tensor *t = list[i];
            size_t n = (size_t)dpt_tensor_numel(t);
            dpt_tensor_copy_to_host(t, buf);
            const float *w = buf;
            if (t == g->wte) {
                n = (size_t)(g->vocab * g->channels); /* the padding rows stay ours */
            } else if (hf_conv1d(dpt_tensor_name(t))) { /* (out, in) -> (in, out) */
                transpose(buf, dpt_tensor_dim(t, 0), dpt_tensor_dim(t, 1), out);
                w = out;
            }
            ok = fwrite(w, sizeof *w, n, af.f) == n ||
                 dpt_errorf(err, "writing %s failed: %s\nHINT: is the disk full?", af.tmp, strerror(errno));
        }
        ok = dpt_atomic_file_close(&af, ok, err);
    }
    free(buf), free(out), free(list), free(names), free(dims), free(se);
    /* transformers' GPT2Config: GPT2LMHeadModel.from_pretrained(dir) reads both */
    sprintf(path, "%s/config.json", dir);
    ok = ok && dpt_atomic_file_open(&af, path, err);
    if (ok) {
        bool gpt2_vocab = g->vocab == 50257; /* <|endoftext|> is GPT-2's token 50256 */
        fprintf(af.f,
                "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_ctx\": %lld,\n  \"n_embd\": %lld,\n"
                "  \"n_layer\": %lld,\n  \"n_head\": %lld,\n  \"n_inner\": null,\n"
                "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                "  \"resid_pdrop\": %g,\n  \"embd_pdrop\": %g,\n  \"attn_pdrop\": 0.0,\n"
                "  \"initializer_range\": 0.02,\n  \"scale_attn_weights\": true,\n  \"tie_word_embeddings\": true,\n"
                "%s  \"torch_dtype\": \"float32\"\n}\n",
                (long long)g->vocab, (long long)g->block_size, (long long)g->block_size, (long long)g->channels,
                (long long)g->layers, (long long)g->heads, (double)g->dropout, (double)g->dropout,
                gpt2_vocab ? "  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n" : "");
        ok = dpt_atomic_file_close(&af, !ferror(af.f), err);
    }
    free(path);
    return ok;
}

static dpt_model *gpt_build(dpt_ctx *ctx, const dpt_config *cfg, const dpt_dataset *data, dpt_error *err)
{
    dpt_field fields[DPT_MAX_FIELDS];
    int nfields = dpt_dataset_fields(data, fields);
    const dpt_field *input = dpt_field_first(fields, nfields, false);
    if (!input || input->dtype != DPT_I32 || input->ndim != 1 || data->num_classes < 2) {
        dpt_errorf(err, "%s: [model] name = gpt takes sequences of token ids; the data set %s has %s\n"
                        "HINT: [data] source = tokens reads token shards",
                   dpt_config_where(cfg, "model", "name"), data->name,
                   !input ? "no input field" : input->dtype != DPT_I32 ? "float inputs" : "no sequences of ids");
        return NULL;
    }
    int64_t L = dpt_config_int(cfg, "model", "n_layer"), H = dpt_config_int(cfg, "model", "n_head");
    int64_t C = dpt_config_int(cfg, "model", "n_embd"), block = dpt_config_int(cfg, "model", "block_size");
    int64_t V = data->num_classes, Vp = dpt_config_int(cfg, "model", "padded_vocab_size"), T = input->shape[0];
    if (block == 0) block = T;
    if (Vp == 0) Vp = (V + 127) / 128 * 128;
    if (L > GPT_MAX_LAYERS)
        return dpt_errorf(err, "%s: [model] n_layer = %lld; gpt supports at most %d", dpt_config_where(cfg, "model", "n_layer"),
                          (long long)L, GPT_MAX_LAYERS), NULL;
    if (C % H != 0)
        return dpt_errorf(err, "%s: [model] n_embd = %lld is not a multiple of n_head = %lld\nHINT: each head takes "
                               "n_embd / n_head channels (GPT-2 small: 768 and 12)",
                          dpt_config_where(cfg, "model", "n_embd"), (long long)C, (long long)H), NULL;
    if (Vp < V)
        return dpt_errorf(err, "%s: [model] padded_vocab_size = %lld is below the vocabulary's %lld\nHINT: 0 rounds "
                               "it up to a multiple of 128",
                          dpt_config_where(cfg, "model", "padded_vocab_size"), (long long)Vp, (long long)V), NULL;
    if (T > block)
        return dpt_errorf(err, "%s: [model] block_size = %lld is shorter than the samples' %lld tokens\nHINT: raise "
                               "block_size or lower [data] seq_len",
                          dpt_config_where(cfg, "model", "block_size"), (long long)block, (long long)T), NULL;
    bool bias = dpt_config_bool(cfg, "model", "bias");

    dpt_model *model = dpt_model_new(ctx, "gpt", gpt_forward);
    gpt *g = dpt_model_alloc(model, sizeof *g);
    dpt_model_set_state(model, g);
    *g = (gpt){.layers = L, .heads = H, .channels = C, .block_size = block, .vocab = V, .padded_vocab = Vp,
               .dropout = (float)dpt_config_float(cfg, "model", "resid_dropout"),
               .recompute = dpt_config_bool(cfg, "model", "recompute")};
    const float std = 0.02f, resid_std = 0.02f / sqrtf(2.0f * (float)L);
    g->wte = dpt_model_param(model, "wte", 2, (int64_t[]){Vp, C});
    g->wpe = dpt_model_param(model, "wpe", 2, (int64_t[]){block, C});
    dpt_init_normal(ctx, g->wte, std);
    dpt_init_normal(ctx, g->wpe, std);
    const char *f = "h.%lld.%s";
    for (int64_t l = 0; l < L; l++) {
        gpt_block *b = &g->block[l];
        b->ln1_w = param(model, f, l, "ln_1.weight", 1, C, 0);
        b->ln1_b = param(model, f, l, "ln_1.bias", 1, C, 0);
        b->qkv_w = param(model, f, l, "attn.c_attn.weight", 2, 3 * C, C);
        if (bias) b->qkv_b = param(model, f, l, "attn.c_attn.bias", 1, 3 * C, 0);
        b->proj_w = param(model, f, l, "attn.c_proj.weight", 2, C, C);
        if (bias) b->proj_b = param(model, f, l, "attn.c_proj.bias", 1, C, 0);
        b->ln2_w = param(model, f, l, "ln_2.weight", 1, C, 0);
        b->ln2_b = param(model, f, l, "ln_2.bias", 1, C, 0);
        b->fc_w = param(model, f, l, "mlp.c_fc.weight", 2, 4 * C, C);
        if (bias) b->fc_b = param(model, f, l, "mlp.c_fc.bias", 1, 4 * C, 0);
        b->fcproj_w = param(model, f, l, "mlp.c_proj.weight", 2, C, 4 * C);
        if (bias) b->fcproj_b = param(model, f, l, "mlp.c_proj.bias", 1, C, 0);
        dpt_init_constant(b->ln1_w, 1.0f);
        dpt_init_constant(b->ln2_w, 1.0f);
        dpt_init_normal(ctx, b->qkv_w, std);
        dpt_init_normal(ctx, b->proj_w, resid_std);
        dpt_init_normal(ctx, b->fc_w, std);
        dpt_init_normal(ctx, b->fcproj_w, resid_std);
        /* per sample (a sequence of T): the GEMMs' 12 C^2 multiply-adds a token, the causal
         * attention's T/2 keys a query for q.k and p v; the activations a block keeps, per
         * token: about 16 C (LN outputs, qkv, attention output, the MLP's two 4C) */
        double flops = 2.0 * (double)T * 12.0 * (double)C * (double)C + 2.0 * (double)T * (double)T * (double)C;
        char name[32];
        snprintf(name, sizeof name, "h.%lld", (long long)l);
        dpt_model_note(model, "block", name, &(dpt_shape3){T, (g->recompute ? 1 : 16) * C, 1}, /* recompute: its input */
                       12 * C * C + (bias ? 9 * C : 0) + 4 * C, flops);
    }
    if (g->recompute) /* the one block whose activations backward makes again at a time */
        dpt_model_note(model, "recompute", "one block", &(dpt_shape3){T, 16 * C, 1}, 0, 0.0);
    g->lnf_w = dpt_model_param(model, "ln_f.weight", 1, (int64_t[]){C});
    g->lnf_b = dpt_model_param(model, "ln_f.bias", 1, (int64_t[]){C});
    dpt_init_constant(g->lnf_w, 1.0f);
    dpt_model_note(model, "embedding", "wte+wpe", &(dpt_shape3){T, C, 1}, (Vp + block) * C, 0.0);
    /* the logits and the loss's probabilities: 2 V a token */
    dpt_model_note(model, "lm_head", "wte^T", &(dpt_shape3){T, 2 * V, 1}, 2 * C,
                   2.0 * (double)T * (double)C * (double)V);
    dpt_model_set_task(model, &(dpt_task){.loss = "cross_entropy", .metrics = DPT_METRIC_PERPLEXITY, .unit = "tok",
                                          .input = input->name});
    char summary[256], padded[96] = "";
    if (Vp > V)
        snprintf(padded, sizeof padded, " padded to %lld (%lld parameters without the padding)", (long long)Vp,
                 (long long)(dpt_model_param_count(model) - (Vp - V) * C));
    snprintf(summary, sizeof summary, "%lld layers, %lld heads, %lld channels, block %lld, vocab %lld%s%s", (long long)L,
             (long long)H, (long long)C, (long long)block, (long long)V, padded,
             g->recompute ? ", blocks recomputed in backward" : "");
    dpt_model_set_summary(model, summary);
    dpt_model_set_decoder(model, &(dpt_decoder){.decode = gpt_decode, .layers = (int)L, .heads = (int)H,
                                                .head_size = C / H, .positions = block});
    const char *init = dpt_config_str(cfg, "model", "init"); /* a dptrain checkpoint is the runtime's to load */
    if (!strncmp(init, "llmc:", 5) || !strncmp(init, "hf:", 3)) {
        const char *where = dpt_config_where(cfg, "model", "init");
        if (init[0] == 'l' ? !llmc_load(g, init + 5, where, err) : !hf_load(model, g, init + 3, where, err)) {
            dpt_model_free(model);
            return NULL;
        }
    }
    return model;
}

static const dpt_config_key gpt_keys[] = {
    {NULL, "n_layer", DPT_KEY_INT, "4", 1, GPT_MAX_LAYERS, NULL, "transformer blocks (GPT-2 small: 12)", 0},
    {NULL, "n_head", DPT_KEY_INT, "4", 1, 1024, NULL, "attention heads; n_embd / n_head channels each (GPT-2 small: 12)", 0},
    {NULL, "n_embd", DPT_KEY_INT, "256", 1, 65536, NULL, "channels of the residual stream (GPT-2 small: 768)", 0},
    {NULL, "block_size", DPT_KEY_INT, "0", 0, 1 << 20, NULL,
     "positions the model has embeddings for (GPT-2: 1024; 0 = the data's sequence length)", 0},
    {NULL, "padded_vocab_size", DPT_KEY_INT, "0", 0, 1 << 20, NULL,
     "rows of the token embedding, at least the data's vocabulary (llm.c: 50304 for 50257; 0 = a multiple of 128)", 0},
    {NULL, "resid_dropout", DPT_KEY_FLOAT, "0", 0, 0.99, NULL,
     "dropout on the embeddings and on each block's attention and MLP outputs (GPT-2 pretraining: 0)", 0},
    {NULL, "bias", DPT_KEY_BOOL, "true", 1, 0, NULL, "biases in the linear layers (GPT-2: true)", 0},
    {NULL, "recompute", DPT_KEY_BOOL, "false", 1, 0, NULL,
     "activation checkpointing: a block keeps only its input for backward, which runs the block's forward again "
     "(dpt_checkpoint): the blocks' activation memory about 1/16 for about a third more compute, the same weights "
     "bit for bit (llm.c's recompute, PyTorch's checkpoint)",
     DPT_KEY_NOT_HASHED},
};

static const dpt_model_impl gpt_impl = {
    .build = gpt_build, .export_formats = "llmc,hf", .export_weights = gpt_export, .init_formats = "llmc,hf"};
DPT_BUILTIN(model_gpt) = {DPT_KIND_MODEL, "gpt",
                          "GPT-2-class decoder-only transformer on token sequences (pre-LN, causal attention, tied embeddings)",
                          gpt_keys, DPT_COUNT(gpt_keys), &gpt_impl};
