/* llama.c: a LLaMA-family decoder ([model] name = llama), as Hugging Face's LlamaForCausalLM
 * computes it, on token data (int32 ids):
 *
 *   h = embed_tokens[ids]
 *   per layer: h += o_proj(attention(rope(q_proj(x)), rope(k_proj(x)), v_proj(x)))  x = RMSNorm(h)
 *              h += down_proj(silu(gate_proj(x)) * up_proj(x))                    x = RMSNorm(h)
 *   logits = RMSNorm(h) lm_head^T            (lm_head: embed_tokens when tie_word_embeddings)
 *
 * RMSNorm is x / sqrt(mean(x^2) + rms_norm_eps) * w; rotary embeddings rotate each head's two
 * halves (transformers' rotate_half, inv_freq = rope_theta^(-2i / head size) in fp32, as it
 * computes them); grouped-query attention repeats each of num_key_value_heads key/value heads
 * for num_attention_heads / num_key_value_heads query heads (repeat_kv); no biases. The keys
 * are config.json's names, and parameters are named as the hub's model.safetensors names them
 * (model.layers.0.self_attn.q_proj.weight, ...), so `[model] init = hf:DIR` reads a LLaMA,
 * TinyLlama or SmolLM folder as it is (config.json checked against the keys) and --export hf
 * writes one (config.json and model.safetensors) for from_pretrained. Weights N(0, 0.02) (initializer_range), norms 1. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpt.h"
#include "../runtime/error.h"
#include "../runtime/json.h"
#include "../runtime/registry.h"

#define LLAMA_MAX_LAYERS 256

typedef struct llama_block {
    dpt_tensor *in_norm, *q, *k, *v, *o, *post_norm, *gate, *up, *down;
} llama_block;

typedef struct llama {
    int64_t layers, heads, kv_heads, channels, head_size, hidden, vocab, positions;
    float eps;
    double eps_key, theta; /* eps as the config gives it (config.json's value) */
    bool tied;
    dpt_tensor *embed, *norm, *lm_head; /* lm_head NULL when tied */
    dpt_tensor *cos, *sin;              /* (positions, head size / 2) buffers */
    llama_block block[LLAMA_MAX_LAYERS];
} llama;

static dpt_tensor *rms_norm(dpt_ctx *ctx, const llama *m, dpt_tensor *x, dpt_tensor *w)
{
    return dpt_rms_norm(ctx, x, w, m->eps);
}

/* x (B, T, heads x head size) at positions [pos, pos + T): x cos + rotate_half(x) sin per head */
static dpt_tensor *rope(dpt_ctx *ctx, const llama *m, dpt_tensor *x, int64_t heads, int64_t pos)
{
    return dpt_rotary(ctx, x, (int)heads, m->cos, m->sin, pos);
}

/* (B, T, kv_heads x head size) -> (B, T, heads x head size): kv head j serves query heads
 * [j rep, (j + 1) rep) (transformers' repeat_kv) */
static dpt_tensor *repeat_kv(dpt_ctx *ctx, const llama *m, dpt_tensor *x)
{
    if (m->kv_heads == m->heads) return x;
    int64_t B = dpt_tensor_dim(x, 0), T = dpt_tensor_dim(x, 1), rep = m->heads / m->kv_heads;
    dpt_tensor *one = dpt_reshape(ctx, x, 5, (int64_t[]){B, T, m->kv_heads, 1, m->head_size});
    dpt_tensor *all = dpt_expand(ctx, one, 5, (int64_t[]){B, T, m->kv_heads, rep, m->head_size});
    return dpt_reshape(ctx, dpt_contiguous(ctx, all), 3, (int64_t[]){B, T, m->channels});
}

static dpt_tensor *block_forward(const llama *m, int64_t l, dpt_ctx *ctx, dpt_tensor *h, int64_t pos,
                                 dpt_kv_cache *cache)
{
    const llama_block *b = &m->block[l];
    dpt_tensor *x = rms_norm(ctx, m, h, b->in_norm);
    dpt_tensor *q = rope(ctx, m, dpt_affine(ctx, x, b->q, NULL), m->heads, pos);
    dpt_tensor *k = rope(ctx, m, dpt_affine(ctx, x, b->k, NULL), m->kv_heads, pos);
    dpt_tensor *v = dpt_affine(ctx, x, b->v, NULL);
    dpt_tensor *qkv = dpt_concat(ctx, 3, (dpt_tensor *[]){q, repeat_kv(ctx, m, k), repeat_kv(ctx, m, v)}, 2);
    dpt_tensor *a = cache ? dpt_attention_cached(ctx, qkv, (int)m->heads, cache, (int)l, pos)
                          : dpt_attention(ctx, qkv, (int)m->heads, true);
    h = dpt_add(ctx, h, dpt_affine(ctx, a, b->o, NULL));
    x = rms_norm(ctx, m, h, b->post_norm);
    dpt_tensor *g = dpt_mul(ctx, dpt_silu(ctx, dpt_affine(ctx, x, b->gate, NULL)), dpt_affine(ctx, x, b->up, NULL));
    return dpt_add(ctx, h, dpt_affine(ctx, g, b->down, NULL));
}

/* ids (B, T) at positions [pos, pos + T) -> the final norm's output (B, T, C) */
static dpt_tensor *trunk(const llama *m, dpt_ctx *ctx, const dpt_tensor *ids, int64_t pos, dpt_kv_cache *cache)
{
    dpt_tensor *h = dpt_embedding(ctx, m->embed, (dpt_tensor *)ids);
    for (int64_t l = 0; l < m->layers; l++) {
        dpt_tape_mark mark = dpt_tape_mark_here(ctx); /* evaluation: the block's intermediates go at its end */
        h = dpt_tape_release(ctx, mark, block_forward(m, l, ctx, h, pos, cache));
    }
    return rms_norm(ctx, m, h, m->norm);
}

static dpt_tensor *logits(const llama *m, dpt_ctx *ctx, dpt_tensor *h)
{
    return dpt_affine(ctx, h, m->lm_head ? m->lm_head : m->embed, NULL);
}

static dpt_tensor *llama_forward(dpt_model *model, dpt_ctx *ctx, dpt_tensor *ids)
{
    const llama *m = dpt_model_state(model);
    return logits(m, ctx, trunk(m, ctx, ids, 0, NULL)); /* (B, T, V) */
}

/* ./train --sample: the logits (1, V) of the last of ids (1, t), positions [pos, pos + t) */
static dpt_tensor *llama_decode(dpt_model *model, dpt_ctx *ctx, const dpt_tensor *ids, int64_t pos, dpt_kv_cache *cache)
{
    const llama *m = dpt_model_state(model);
    dpt_tensor *h = trunk(m, ctx, ids, pos, cache);
    int64_t T = dpt_tensor_dim(h, 1);
    h = dpt_reshape(ctx, dpt_contiguous(ctx, dpt_narrow(ctx, h, 1, T - 1, 1)), 2, (int64_t[]){1, m->channels});
    return logits(m, ctx, h);
}

/* ---------------------------------------------------------------- Hugging Face's files */

/* DIR/config.json against this config's keys: every value that decides the shapes or the
 * arithmetic must agree (a LLaMA read with another rope_theta runs, and is wrong). */
typedef struct hf_config {
    double hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads;
    double rms_norm_eps, rope_theta, vocab_size, head_dim;
    bool tie, bias, has_kv, has_head_dim, has_tie, rope_scaling;
    char model_type[32], act[32];
} hf_config;

static bool read_hf_config(const char *path, hf_config *c, const char *where, dpt_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 20)) {
        int e = errno;
        if (fd >= 0) close(fd);
        return dpt_errorf(err, "%s: %s: %s\nHINT: hf:DIR is a folder of the hub's files (config.json and "
                               "model.safetensors)",
                          where, path, fd < 0 ? strerror(e) : "not a regular file of at most 1 MiB");
    }
    char *text = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    if (!text) dpt_fatal("out of host memory");
    dpt_read_at(fd, text, (size_t)st.st_size, 0, &got);
    close(fd);
    text[got] = '\0';
    char value_of[96]; /* "KEY's value", what a message about a value names */
    dpt_json p = {.s = text, .end = text + got, .start = text, .path = path, .where = "the JSON", .unit = "",
                  .hint = "HINT: transformers writes config.json with save_pretrained", .err = err};
    *c = (hf_config){.rms_norm_eps = 1e-6, .rope_theta = 10000.0, .tie = false};
    bool first = true, ok = dpt_json_expect(&p, '{');
    while (ok && dpt_json_more(&p, '}', &first)) {
        char *key = NULL;
        p.where = "the JSON";
        ok = dpt_json_string(&p, &key, NULL) && dpt_json_expect(&p, ':');
        if (ok) snprintf(value_of, sizeof value_of, "\"%.80s\"", key), p.where = value_of;
        struct {
            const char *name;
            double *v;
        } numbers[] = {{"hidden_size", &c->hidden_size},
                       {"intermediate_size", &c->intermediate_size},
                       {"num_hidden_layers", &c->num_hidden_layers},
                       {"num_attention_heads", &c->num_attention_heads},
                       {"num_key_value_heads", &c->num_key_value_heads},
                       {"rms_norm_eps", &c->rms_norm_eps},
                       {"rope_theta", &c->rope_theta},
                       {"vocab_size", &c->vocab_size},
                       {"head_dim", &c->head_dim}};
        bool done = !ok;
        for (size_t i = 0; !done && i < sizeof numbers / sizeof numbers[0]; i++)
            if (!strcmp(key, numbers[i].name)) {
                ok = dpt_json_null(&p) || dpt_json_number(&p, numbers[i].v), done = true;
                if (numbers[i].v == &c->num_key_value_heads) c->has_kv = true;
                if (numbers[i].v == &c->head_dim) c->has_head_dim = true;
            }
        if (!done && !strcmp(key, "tie_word_embeddings")) ok = dpt_json_bool(&p, &c->tie), c->has_tie = true, done = true;
        if (!done && (!strcmp(key, "attention_bias") || !strcmp(key, "mlp_bias"))) {
            bool b = false;
            ok = dpt_json_bool(&p, &b), c->bias |= b, done = true;
        }
        if (!done && !strcmp(key, "rope_scaling")) c->rope_scaling = !dpt_json_null(&p) && (ok = dpt_json_skip(&p, 1));
        else if (!done && (!strcmp(key, "model_type") || !strcmp(key, "hidden_act"))) {
            char *v = NULL;
            ok = dpt_json_string(&p, &v, NULL);
            if (ok) snprintf(key[0] == 'm' ? c->model_type : c->act, sizeof c->act, "%s", v);
            free(v);
        } else if (!done) {
            ok = dpt_json_skip(&p, 1);
        }
        free(key);
    }
    ok = ok && !p.failed && dpt_json_end(&p);
    free(text);
    if (!ok) return dpt_error_prefix(err, "%s: ", where);
    return true;
}

static bool check_hf_config(const llama *m, const dpt_config *cfg, const char *path, dpt_error *err)
{
    const char *where = dpt_config_where(cfg, "model", "init");
    hf_config c;
    if (!read_hf_config(path, &c, where, err)) return false;
    if (strcmp(c.model_type, "llama")) /* mistral's sliding window, qwen2's biases: computed otherwise */
        return dpt_errorf(err, "%s: %s: model_type \"%s\"; this model is LLaMA's (model_type llama)\nHINT: LLaMA, "
                               "TinyLlama, SmolLM and other LlamaForCausalLM folders are read",
                          where, path, c.model_type);
    const char *why = strcmp(c.act, "silu") ? "hidden_act is not silu"
                      : c.bias              ? "it has biases (attention_bias or mlp_bias)"
                      : c.rope_scaling      ? "it scales its rotary embeddings (rope_scaling: Llama 3.1's, YaRN)"
                                            : NULL;
    if (why)
        return dpt_errorf(err, "%s: %s: %s, which this model does not compute\nHINT: a LLaMA-2-style config (SiLU, "
                               "no biases, plain rotary embeddings)", where, path, why);
    if (!c.has_kv) c.num_key_value_heads = c.num_attention_heads;
    if (c.has_head_dim && c.num_attention_heads > 0 && c.head_dim * c.num_attention_heads != c.hidden_size)
        return dpt_errorf(err, "%s: %s: head_dim %g is not hidden_size / num_attention_heads\nHINT: this model "
                               "takes heads of hidden_size / num_attention_heads channels", where, path, c.head_dim);
    struct {
        const char *key;
        double file, ours;
    } same[] = {{"hidden_size", c.hidden_size, (double)m->channels},
                {"intermediate_size", c.intermediate_size, (double)m->hidden},
                {"num_hidden_layers", c.num_hidden_layers, (double)m->layers},
                {"num_attention_heads", c.num_attention_heads, (double)m->heads},
                {"num_key_value_heads", c.num_key_value_heads, (double)m->kv_heads},
                {"rms_norm_eps", c.rms_norm_eps, (double)dpt_config_float(cfg, "model", "rms_norm_eps")},
                {"rope_theta", c.rope_theta, m->theta},
                {"tie_word_embeddings", c.tie ? 1 : 0, m->tied ? 1 : 0}};
    char fix[640] = ""; /* each difference as the --set that makes it the file's */
    int off = 0;
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        if (same[i].file == same[i].ours || off >= (int)sizeof fix - 80) continue;
        if (!strcmp(same[i].key, "tie_word_embeddings"))
            off += snprintf(fix + off, sizeof fix - (size_t)off, " --set model.%s=%s", same[i].key,
                            same[i].file ? "true" : "false");
        else
            off += snprintf(fix + off, sizeof fix - (size_t)off, " --set model.%s=%.15g", same[i].key, same[i].file);
    }
    if (*fix)
        return dpt_errorf(err, "%s: %s describes another model than this config's [model] keys\nHINT: as the "
                               "file says:%s",
                          where, path, fix);
    if (c.vocab_size != (double)m->vocab)
        return dpt_errorf(err, "%s: %s: vocab_size %.0f; the data's vocabulary is %lld\nHINT: token shards written "
                               "with this model's tokenizer ([data] vocab_size = %.0f)",
                          where, path, c.vocab_size, (long long)m->vocab, c.vocab_size);
    return true;
}

typedef struct hf_load_state {
    dpt_model *model;
    const char *path, *where;
    char *seen; /* per parameter */
} hf_load_state;

static bool hf_tensor(void *user, const char *name, bool buffer, int ndim, const int64_t *dims, const float *data,
                      int64_t numel, dpt_error *err)
{
    (void)buffer, (void)numel;
    hf_load_state *s = user;
    int n = dpt_model_num_params(s->model), at = -1;
    for (int i = 0; i < n && at < 0; i++)
        if (!strcmp(dpt_tensor_name(dpt_model_param_at(s->model, i)), name)) at = i;
    if (at < 0) {
        if (!strcmp(name, "lm_head.weight") || strstr(name, "rotary_emb.inv_freq")) return true; /* tied; derived */
        return dpt_errorf(err, "%s: %s holds %s, which this model has not\nHINT: [model] keys as the folder's "
                               "config.json (num_hidden_layers ...)",
                          s->where, s->path, name);
    }
    dpt_tensor *t = dpt_model_param_at(s->model, at);
    bool same = ndim == dpt_tensor_ndim(t);
    for (int d = 0; same && d < ndim; d++)
        same = dims[d] == dpt_tensor_dim(t, d);
    if (!same)
        return dpt_errorf(err, "%s: %s: %s has %d dimensions [%lld, %lld] in the file; this model's is [%lld, %lld]\n"
                               "HINT: [model] keys as the folder's config.json",
                          s->where, s->path, name, ndim, (long long)dims[0], ndim > 1 ? (long long)dims[1] : 0LL,
                          (long long)dpt_tensor_dim(t, 0), dpt_tensor_ndim(t) > 1 ? (long long)dpt_tensor_dim(t, 1) : 0LL);
    dpt_tensor_copy_from_host(t, data);
    s->seen[at] = 1;
    return true;
}

/* hf:DIR (config.json checked, then model.safetensors) or hf:FILE.safetensors */
static bool hf_load(dpt_model *model, const llama *m, const dpt_config *cfg, const char *path, dpt_error *err)
{
    const char *where = dpt_config_where(cfg, "model", "init");
    char *file = NULL;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        char *config = dpt_strf("%s/config.json", path);
        bool ok = check_hf_config(m, cfg, config, err);
        free(config);
        if (!ok) return false;
        file = dpt_strf("%s/model.safetensors", path);
        if (stat(file, &st) != 0) {
            char *index = dpt_strf("%s/model.safetensors.index.json", path);
            bool sharded = stat(index, &st) == 0;
            free(index);
            dpt_errorf(err, "%s: %s: %s\nHINT: %s", where, file, sharded ? "the weights are split over several files "
                                                                           "(model.safetensors.index.json)" : strerror(errno),
                       sharded ? "merge them into one model.safetensors (safetensors.torch.save_file of the state dict)"
                               : "hf:DIR is a folder of the hub's files (config.json and model.safetensors)");
            free(file);
            return false;
        }
        path = file;
    }
    int n = dpt_model_num_params(model);
    hf_load_state s = {.model = model, .path = path, .where = where, .seen = calloc((size_t)n + 1, 1)};
    if (!s.seen) dpt_fatal("out of host memory");
    bool ok = dpt_safetensors_tensors(path, hf_tensor, &s, NULL, err);
    for (int i = 0; ok && i < n; i++)
        if (!s.seen[i])
            ok = dpt_errorf(err, "%s: %s lacks %s\nHINT: [model] keys as the folder's config.json (num_hidden_layers, "
                                 "tie_word_embeddings ...)",
                            where, path, dpt_tensor_name(dpt_model_param_at(model, i)));
    free(s.seen), free(file);
    return ok;
}

/* ./train CONFIG --export hf CKPT DIR: what hf_load reads and transformers' from_pretrained
 * loads: DIR/model.safetensors (the parameters by their names, without the rotary tables,
 * which transformers derives; lm_head left out when tied, as save_pretrained leaves it) and
 * DIR/config.json (LlamaForCausalLM's, with this model's keys). */
static bool llama_export(dpt_model *model, const char *format, const char *dir, dpt_error *err)
{
    const llama *m = dpt_model_state(model);
    if (strcmp(format, "hf") != 0) return dpt_errorf(err, "llama writes hf, not %s", format);
    struct stat st;
    if (mkdir(dir, 0777) != 0 && !(errno == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)))
        return dpt_errorf(err, "--export hf: %s: %s\nHINT: OUT is a folder for config.json and model.safetensors "
                               "(made if missing; its parent must exist)",
                          dir, errno == EEXIST ? "not a folder" : strerror(errno));
    int n = dpt_model_num_params(model);
    size_t most = 0;
    dpt_safetensors_entry *se = malloc((size_t)(n ? n : 1) * sizeof *se);
    int64_t(*dims)[2] = malloc((size_t)(n ? n : 1) * sizeof *dims);
    if (!se || !dims) dpt_fatal("out of host memory");
    for (int i = 0; i < n; i++) {
        dpt_tensor *t = dpt_model_param_at(model, i);
        dims[i][0] = dpt_tensor_dim(t, 0), dims[i][1] = dpt_tensor_ndim(t) > 1 ? dpt_tensor_dim(t, 1) : 0;
        se[i] = (dpt_safetensors_entry){.name = dpt_tensor_name(t), .ndim = dpt_tensor_ndim(t), .dims = dims[i]};
        if ((size_t)dpt_tensor_numel(t) > most) most = (size_t)dpt_tensor_numel(t);
    }
    char *path = dpt_strf("%s/model.safetensors", dir);
    float *buf = malloc((most ? most : 1) * sizeof *buf);
    if (!buf) dpt_fatal("out of host memory");
    dpt_atomic_file af;
    bool ok = dpt_atomic_file_open(&af, path, err);
    if (ok) {
        ok = dpt_safetensors_write_header(af.f, path, se, n, "dptrain llama", err);
        for (int i = 0; ok && i < n; i++) {
            dpt_tensor *t = dpt_model_param_at(model, i);
            size_t k = (size_t)dpt_tensor_numel(t);
            dpt_tensor_copy_to_host(t, buf);
            if (fwrite(buf, sizeof *buf, k, af.f) != k)
                ok = dpt_errorf(err, "writing %s failed: %s\nHINT: is the disk full?", af.tmp, strerror(errno));
        }
        ok = dpt_atomic_file_close(&af, ok, err);
    }
    free(path), free(buf), free(se), free(dims);
    if (!ok) return false;
    path = dpt_strf("%s/config.json", dir);
    ok = dpt_atomic_file_open(&af, path, err);
    if (ok) {
        fprintf(af.f,
                "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
                "  \"hidden_act\": \"silu\",\n  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
                "  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n  \"num_key_value_heads\": %lld,\n"
                "  \"max_position_embeddings\": %lld,\n  \"rms_norm_eps\": %.17g,\n  \"rope_theta\": %.17g,\n"
                "  \"rope_scaling\": null,\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
                "  \"tie_word_embeddings\": %s,\n  \"vocab_size\": %lld,\n  \"initializer_range\": 0.02,\n"
                "  \"torch_dtype\": \"float32\"\n}\n",
                (long long)m->channels, (long long)m->hidden, (long long)m->layers, (long long)m->heads,
                (long long)m->kv_heads, (long long)m->positions, m->eps_key, m->theta, m->tied ? "true" : "false",
                (long long)m->vocab);
        ok = dpt_atomic_file_close(&af, !ferror(af.f), err);
    }
    free(path);
    return ok;
}

/* ---------------------------------------------------------------- building */

static dpt_tensor *weight(dpt_model *model, dpt_ctx *ctx, int64_t layer, const char *what, int64_t rows, int64_t cols)
{
    char name[128];
    if (layer < 0) snprintf(name, sizeof name, "%s", what);
    else snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)layer, what);
    dpt_tensor *t = cols ? dpt_model_param(model, name, 2, (int64_t[]){rows, cols})
                         : dpt_model_param(model, name, 1, (int64_t[]){rows});
    if (cols) dpt_init_normal(ctx, t, 0.02f);
    else dpt_init_constant(t, 1.0f);
    return t;
}

/* transformers' tables: inv_freq = 1 / theta^(2i / d) and t inv_freq in fp32, then cos, sin */
static void rope_tables(llama *m)
{
    int64_t P = m->positions, half = m->head_size / 2;
    float *cs = malloc((size_t)(2 * P * half) * sizeof *cs), *sn = cs + P * half;
    if (!cs) dpt_fatal("out of host memory");
    for (int64_t i = 0; i < half; i++) {
        float inv = 1.0f / powf((float)m->theta, (float)(2 * i) / (float)m->head_size);
        for (int64_t t = 0; t < P; t++) {
            float angle = (float)t * inv;
            cs[t * half + i] = cosf(angle);
            sn[t * half + i] = sinf(angle);
        }
    }
    dpt_tensor_copy_from_host(m->cos, cs);
    dpt_tensor_copy_from_host(m->sin, sn);
    free(cs);
}

static dpt_model *llama_build(dpt_ctx *ctx, const dpt_config *cfg, const dpt_dataset *data, dpt_error *err)
{
    dpt_field fields[DPT_MAX_FIELDS];
    const dpt_field *input = dpt_field_first(fields, dpt_dataset_fields(data, fields), false);
    if (!input || input->dtype != DPT_I32 || input->ndim != 1 || data->num_classes < 2) {
        dpt_errorf(err, "%s: [model] name = llama takes sequences of token ids; the data set %s has none\n"
                        "HINT: [data] source = tokens reads token shards",
                   dpt_config_where(cfg, "model", "name"), data->name);
        return NULL;
    }
    llama s = {.layers = dpt_config_int(cfg, "model", "num_hidden_layers"),
               .heads = dpt_config_int(cfg, "model", "num_attention_heads"),
               .kv_heads = dpt_config_int(cfg, "model", "num_key_value_heads"),
               .channels = dpt_config_int(cfg, "model", "hidden_size"),
               .hidden = dpt_config_int(cfg, "model", "intermediate_size"),
               .positions = dpt_config_int(cfg, "model", "max_position_embeddings"),
               .eps = (float)dpt_config_float(cfg, "model", "rms_norm_eps"),
               .eps_key = dpt_config_float(cfg, "model", "rms_norm_eps"),
               .theta = dpt_config_float(cfg, "model", "rope_theta"),
               .tied = dpt_config_bool(cfg, "model", "tie_word_embeddings"),
               .vocab = data->num_classes};
    int64_t T = input->shape[0];
    if (s.kv_heads == 0) s.kv_heads = s.heads;
    if (s.positions == 0) s.positions = T;
    if (s.hidden == 0) s.hidden = 256 * ((8 * s.channels / 3 + 255) / 256); /* LLaMA's 2/3 of 4C, rounded up */
    const char *bad = s.channels % s.heads || (s.channels / s.heads) % 2 ? "hidden_size"
                      : s.heads % s.kv_heads                            ? "num_key_value_heads"
                      : T > s.positions                                 ? "max_position_embeddings"
                                                                        : NULL;
    if (bad)
        return dpt_errorf(err, "%s: [model] %s: %s\nHINT: hidden_size / num_attention_heads even (each head's two "
                               "halves rotate), num_attention_heads a multiple of num_key_value_heads, and "
                               "max_position_embeddings (0 = the data's) at least [data] seq_len",
                          dpt_config_where(cfg, "model", bad), bad,
                          !strcmp(bad, "hidden_size")           ? "heads of an even number of channels it cannot give"
                          : !strcmp(bad, "num_key_value_heads") ? "does not divide num_attention_heads"
                                                                : "shorter than the samples"),
               NULL;
    s.head_size = s.channels / s.heads;
    int64_t C = s.channels, kvC = s.kv_heads * s.head_size, L = s.layers;
    dpt_model *model = dpt_model_new(ctx, "llama", llama_forward);
    llama *m = dpt_model_alloc(model, sizeof *m);
    *m = s;
    dpt_model_set_state(model, m);
    m->embed = weight(model, ctx, -1, "model.embed_tokens.weight", s.vocab, C);
    m->cos = dpt_model_buffer(model, "rope.cos", 2, (int64_t[]){s.positions, s.head_size / 2});
    m->sin = dpt_model_buffer(model, "rope.sin", 2, (int64_t[]){s.positions, s.head_size / 2});
    rope_tables(m);
    for (int64_t l = 0; l < L; l++) {
        llama_block *b = &m->block[l];
        b->in_norm = weight(model, ctx, l, "input_layernorm.weight", C, 0);
        b->q = weight(model, ctx, l, "self_attn.q_proj.weight", C, C);
        b->k = weight(model, ctx, l, "self_attn.k_proj.weight", kvC, C);
        b->v = weight(model, ctx, l, "self_attn.v_proj.weight", kvC, C);
        b->o = weight(model, ctx, l, "self_attn.o_proj.weight", C, C);
        b->post_norm = weight(model, ctx, l, "post_attention_layernorm.weight", C, 0);
        b->gate = weight(model, ctx, l, "mlp.gate_proj.weight", s.hidden, C);
        b->up = weight(model, ctx, l, "mlp.up_proj.weight", s.hidden, C);
        b->down = weight(model, ctx, l, "mlp.down_proj.weight", C, s.hidden);
        /* per sample: the GEMMs' multiply-adds a token, and causal attention's T/2 keys a query */
        double macs = (double)(2 * C * C + 2 * C * kvC + 3 * C * s.hidden);
        char name[48];
        snprintf(name, sizeof name, "model.layers.%lld", (long long)l);
        dpt_model_note(model, "block", name, &(dpt_shape3){T, 8 * C + 3 * s.hidden, 1}, (int64_t)macs + 2 * C,
                       2.0 * (double)T * macs + 2.0 * (double)T * (double)T * (double)C);
    }
    m->norm = weight(model, ctx, -1, "model.norm.weight", C, 0);
    if (!s.tied) m->lm_head = weight(model, ctx, -1, "lm_head.weight", s.vocab, C);
    dpt_model_note(model, "embedding", "model.embed_tokens", &(dpt_shape3){T, C, 1}, s.vocab * C, 0.0);
    dpt_model_note(model, "lm_head", s.tied ? "embed_tokens^T" : "lm_head", &(dpt_shape3){T, 2 * s.vocab, 1},
                   s.tied ? 0 : s.vocab * C, 2.0 * (double)T * (double)C * (double)s.vocab);
    dpt_model_set_task(model, &(dpt_task){.loss = "cross_entropy", .metrics = DPT_METRIC_PERPLEXITY, .unit = "tok",
                                          .input = input->name});
    char summary[256];
    snprintf(summary, sizeof summary, "%lld layers, %lld heads (%lld key/value), %lld channels, MLP %lld, vocab %lld, "
             "rope_theta %g%s", (long long)L, (long long)s.heads, (long long)s.kv_heads, (long long)C,
             (long long)s.hidden, (long long)s.vocab, s.theta, s.tied ? ", tied embeddings" : "");
    dpt_model_set_summary(model, summary);
    dpt_model_set_decoder(model, &(dpt_decoder){.decode = llama_decode, .layers = (int)L, .heads = (int)s.heads,
                                                .head_size = s.head_size, .positions = s.positions});
    const char *init = dpt_config_str(cfg, "model", "init");
    if (!strncmp(init, "hf:", 3) && !hf_load(model, m, cfg, init + 3, err)) {
        dpt_model_free(model);
        return NULL;
    }
    return model;
}

static const dpt_config_key llama_keys[] = {
    {NULL, "num_hidden_layers", DPT_KEY_INT, "4", 1, LLAMA_MAX_LAYERS, NULL, "decoder blocks (TinyLlama: 22)", 0},
    {NULL, "hidden_size", DPT_KEY_INT, "256", 2, 65536, NULL, "channels of the residual stream (TinyLlama: 2048)", 0},
    {NULL, "num_attention_heads", DPT_KEY_INT, "4", 1, 1024, NULL, "query heads of hidden_size / heads channels", 0},
    {NULL, "num_key_value_heads", DPT_KEY_INT, "0", 0, 1024, NULL,
     "key/value heads, each serving num_attention_heads / this query heads (grouped-query attention; 0 = as many as "
     "the query heads)", 0},
    {NULL, "intermediate_size", DPT_KEY_INT, "0", 0, 1 << 20, NULL,
     "the MLP's width (0 = LLaMA's 8/3 hidden_size rounded up to 256)", 0},
    {NULL, "max_position_embeddings", DPT_KEY_INT, "0", 0, 1 << 20, NULL,
     "positions the rotary tables cover (0 = the data's sequence length)", 0},
    {NULL, "rms_norm_eps", DPT_KEY_FLOAT, "1e-5", 1e-12, 1, NULL, "RMSNorm's epsilon (LLaMA 2: 1e-5)", 0},
    {NULL, "rope_theta", DPT_KEY_FLOAT, "10000", 1, 1e9, NULL, "the rotary embeddings' base (LLaMA 3: 500000)", 0},
    {NULL, "tie_word_embeddings", DPT_KEY_BOOL, "false", 1, 0, NULL,
     "the output layer is the token embedding (SmolLM: true; LLaMA: false)", 0},
};

static const dpt_model_impl llama_impl = {
    .build = llama_build, .init_formats = "hf", .export_formats = "hf", .export_weights = llama_export};
DPT_BUILTIN(model_llama) = {DPT_KIND_MODEL, "llama",
                            "LLaMA-family decoder on token sequences (RMSNorm, rotary embeddings, SwiGLU, "
                            "grouped-query attention), named as Hugging Face's LlamaForCausalLM",
                            llama_keys, DPT_COUNT(llama_keys), &llama_impl};
