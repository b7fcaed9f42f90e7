/* kv_cache.c: incremental decoding. A language model generating text with the whole context as
 * its input each time recomputes every earlier position's keys and values for every new token
 * (O(N^2) work for N tokens); with their keys and values kept per layer, a new token costs one
 * position's forward and one attention row per layer (O(N)). The cache is one persistent tensor
 * per layer and kind, (heads, positions, head size), written in place by dpt_attention_cached;
 * the attention row reads its first pos + 1 positions through strided views (no copy). Built from
 * the backend's strided copy and the public ops (batched GEMM, softmax), so every backend runs
 * it; outside autograd (generation needs no gradient). */
#include <math.h>
#include <stdlib.h>

#include "backend.h"
#include "ctx.h"
#include "error.h"

struct dpt_kv_cache {
    int layers, heads;
    int64_t head_size, positions;
    dpt_tensor **k, **v; /* per layer (heads, positions, head_size) */
};

dpt_kv_cache *dpt_kv_cache_new(dpt_ctx *ctx, int layers, int heads, int64_t head_size, int64_t positions)
{
    DPT_ASSERT(layers >= 1 && heads >= 1 && head_size >= 1 && positions >= 1,
               "a KV cache of %d layers, %d heads of %lld, %lld positions", layers, heads, (long long)head_size,
               (long long)positions);
    dpt_kv_cache *c = calloc(1, sizeof *c);
    if (!c) dpt_fatal("out of host memory for a KV cache");
    *c = (dpt_kv_cache){.layers = layers, .heads = heads, .head_size = head_size, .positions = positions};
    c->k = calloc((size_t)layers, sizeof *c->k), c->v = calloc((size_t)layers, sizeof *c->v);
    if (!c->k || !c->v) dpt_fatal("out of host memory for a KV cache");
    const char *hint = dpt_ctx_set_oom_hint(ctx, "sample with a shorter context ([data] seq_len) or on the CPU");
    for (int l = 0; l < layers; l++) {
        c->k[l] = dpt_tensor_new(ctx, 3, (int64_t[]){heads, positions, head_size});
        c->v[l] = dpt_tensor_new(ctx, 3, (int64_t[]){heads, positions, head_size});
    }
    dpt_ctx_set_oom_hint(ctx, hint);
    return c;
}

void dpt_kv_cache_free(dpt_kv_cache *c)
{
    if (!c) return;
    for (int l = 0; l < c->layers; l++)
        dpt_tensor_free(c->k[l]), dpt_tensor_free(c->v[l]);
    free(c->k), free(c->v);
    free(c);
}

int64_t dpt_kv_cache_positions(const dpt_kv_cache *c)
{
    return c->positions;
}

/* Part `which` (1: k, 2: v) of qkv's t rows, head by head, into dst's positions [pos, pos + t). */
static void store(dpt_ctx *ctx, const dpt_tensor *qkv, int which, const dpt_kv_cache *c, dpt_tensor *dst, int64_t pos)
{
    int64_t t = qkv->shape[1], C = qkv->shape[2] / 3, D = c->head_size;
    const int64_t shape[3] = {c->heads, t, D};
    const int64_t src_strides[3] = {D, 3 * C, 1}, dst_strides[3] = {c->positions * D, D, 1};
    ctx->be->strided_copy(ctx, 3, shape, qkv->data + which * C, src_strides, dst->data + pos * D, dst_strides, false);
}

dpt_tensor *dpt_attention_cached(dpt_ctx *ctx, dpt_tensor *qkv, int heads, dpt_kv_cache *cache, int layer,
                                 int64_t pos)
{
    char a[96];
    DPT_ASSERT(!dpt_grad_enabled(ctx), "attention with a KV cache is for generation: turn gradients off first");
    qkv = dpt_contiguous(ctx, dpt_widen(ctx, dpt_plain(ctx, qkv)));
    int64_t t = qkv->ndim == 3 ? qkv->shape[1] : 0, D = cache->head_size;
    if (qkv->ndim != 3 || qkv->shape[0] != 1 || heads != cache->heads || qkv->shape[2] != 3 * heads * D || t < 1)
        dpt_fatal("attention with a KV cache: qkv %s with %d heads; the cache holds %d heads of %lld (one sequence: "
                  "(1, T, 3 C))",
                  dpt_shape_str(qkv, a, sizeof a), heads, cache->heads, (long long)D);
    DPT_ASSERT(layer >= 0 && layer < cache->layers, "layer %d of a %d-layer cache", layer, cache->layers);
    DPT_ASSERT(pos >= 0 && pos + t <= cache->positions && (t == 1 || pos == 0),
               "attention with a KV cache: %lld new positions at %lld in a cache of %lld (more than one only at 0)",
               (long long)t, (long long)pos, (long long)cache->positions);
    store(ctx, qkv, 1, cache, cache->k[layer], pos);
    store(ctx, qkv, 2, cache, cache->v[layer], pos);
    if (pos == 0) return dpt_attention(ctx, qkv, heads, true); /* a prompt: every position, causal */
    /* one new position: its query against the first pos + 1 keys, head by head */
    int64_t H = heads, n = pos + 1, P = cache->positions;
    dpt_tensor *q = dpt_view(ctx, qkv, 3, (int64_t[]){H, 1, D}, (int64_t[]){D, 3 * H * D, 1}, 0);
    dpt_tensor *kt = dpt_view(ctx, cache->k[layer], 3, (int64_t[]){H, D, n}, (int64_t[]){P * D, 1, D}, 0);
    dpt_tensor *v = dpt_view(ctx, cache->v[layer], 3, (int64_t[]){H, n, D}, (int64_t[]){P * D, D, 1}, 0);
    dpt_tensor *p = dpt_softmax(ctx, dpt_scale(ctx, dpt_bmm(ctx, q, kt), 1.0f / sqrtf((float)D))); /* (H, 1, n) */
    return dpt_reshape(ctx, dpt_bmm(ctx, p, v), 3, (int64_t[]){1, 1, H * D}); /* (H, 1, D) is (1, 1, C) */
}
