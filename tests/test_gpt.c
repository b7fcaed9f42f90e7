/* test_gpt.c: the gpt model and the tokens data source.
 *  - GPT-2 small's parameter count is the reference's (124,475,904 with the vocabulary padded to
 *    50,304; 124,439,808 without);
 *  - a small GPT's loss equals a float64 re-implementation of GPT-2's forward written here from
 *    the formulas (pre-LN, causal softmax attention, tanh GELU, tied embeddings, the loss over
 *    the real vocabulary), and every parameter's gradient equals central differences of it; the
 *    padding rows get no gradient;
 *  - token shards: samples are the file's tokens at j * T and their next tokens, across shards in
 *    name order; hostile files (bad magic, an llm.c model file, a wrong version, truncated, a
 *    token beyond the vocabulary, too short for one sample) are refused naming the file;
 *  - generation with a KV cache: each position's logits equal the full forward's;
 *  - ./train learns byte-level text (the loss falls well below uniform's log 256), and the
 *    deterministic mode gives the same weights on 1 and 2 ranks (fp32 and bf16). */
#include <glob.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "data/data.h"
#include "runtime/trace.h"

/* The small gpt of the float64 and llm.c tests (L = 2, H = 2, C = 8, vocabulary padded to
 * VP = 16), with the lines of extra (n of them) after. */
static dpt_config *small_gpt_config(const char *const *extra, int n)
{
    const char *sets[8] = {"model.name=gpt", "model.n_layer=2", "model.n_head=2", "model.n_embd=8",
                           "model.padded_vocab_size=16"};
    assert_true(n <= 3);
    for (int i = 0; i < n; i++)
        sets[5 + i] = extra[i];
    return test_config(sets, 5 + n);
}

/* A data set of the shape a token source gives, without files (for building the model). */
static dpt_dataset token_shape(int64_t T, int vocab)
{
    dpt_dataset ds = {.n = 1, .num_classes = vocab, .name = "tokens (test)", .nfields = 2};
    ds.fields[0] = (dpt_field){.name = "tokens", .dtype = DPT_I32, .ndim = 1, .shape = {T}};
    ds.fields[1] = (dpt_field){.name = "targets", .dtype = DPT_I32, .ndim = 1, .shape = {T}, .target = true};
    ds.task = (dpt_task){.loss = "cross_entropy", .metrics = DPT_METRIC_PERPLEXITY, .unit = "tok"};
    return ds;
}

static void test_gpt2_small_parameters(void **state)
{
    (void)state;
    const char *sets[] = {"model.name=gpt", "model.n_layer=12", "model.n_head=12", "model.n_embd=768",
                          "model.block_size=1024", "model.padded_vocab_size=50304"};
    dpt_config *cfg = test_config(sets, 6);
    dpt_ctx *ctx = test_ctx(2, 1);
    dpt_dataset ds = token_shape(64, 50257);
    dpt_error err;
    dpt_model *m = dpt_model_build_for(ctx, cfg, &ds, &err);
    if (!m) fail_msg("%s", err.msg);
    assert_int_equal(dpt_model_param_count(m), 124475904);
    assert_non_null(strstr(dpt_model_summary(m), "padded to 50304 (124439808 parameters without the padding)"));
    dpt_model_free(m);
    /* n_embd must divide into the heads: refused naming the key */
    dpt_config_free(cfg);
    const char *bad[] = {"model.name=gpt", "model.n_head=5", "model.n_embd=64"};
    cfg = test_config(bad, 3);
    assert_null(dpt_model_build_for(ctx, cfg, &ds, &err));
    assert_non_null(strstr(err.msg, "n_embd = 64 is not a multiple of n_head = 5"));
    dpt_config_free(cfg);
    dpt_ctx_free(ctx);
}

/* ---------------------------------------------------------------- float64 GPT-2 */

enum { L = 2, H = 2, C = 8, T = 5, V = 11, VP = 16, B = 2, NP = 4 + 12 * L };

/* The small gpt of cfg for sequences of `len` tokens of the vocabulary V. */
static dpt_model *build_small_gpt(dpt_ctx *ctx, const dpt_config *cfg, int64_t len)
{
    dpt_dataset ds = token_shape(len, V);
    dpt_error err;
    dpt_model *m = dpt_model_build_for(ctx, cfg, &ds, &err);
    if (!m) fail_msg("%s", err.msg);
    return m;
}

/* A batch of b x t random ids below V and their targets: on the host in ids/tgt, and as the
 * model's I32 tensors in *it and *tt. */
static void token_batch(dpt_ctx *ctx, dpt_rng *rng, int64_t b, int64_t t, int32_t *ids, int32_t *tgt, dpt_tensor **it,
                        dpt_tensor **tt)
{
    for (int64_t i = 0; i < b * t; i++)
        ids[i] = (int32_t)dpt_rng_below(rng, V), tgt[i] = (int32_t)dpt_rng_below(rng, V);
    *it = dpt_tensor_new_dtype(ctx, DPT_I32, 2, (int64_t[]){b, t});
    *tt = dpt_tensor_new_dtype(ctx, DPT_I32, 2, (int64_t[]){b, t});
    dpt_tensor_copy_from_host_i32(*it, ids);
    dpt_tensor_copy_from_host_i32(*tt, tgt);
}

/* The traced forward (runtime/trace.h) counts what the model runs, by hand: per layer the
 * linear layers 2 T C (3C + C + 4C + 4C) and attention's Q K^T and P V 2 x 2 T T C; then the
 * tied output GEMM 2 T C V over the real vocabulary. The builder's notes cannot see the
 * attention inside forward; the trace does, every op of it recorded once. */
static void test_traced_flops(void **state)
{
    (void)state;
    dpt_config *cfg = small_gpt_config(NULL, 0);
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_dataset ds = token_shape(T, V);
    dpt_error err;
    dpt_model *m = build_small_gpt(ctx, cfg, T);
    dpt_task task;
    assert_true(dpt_task_resolve(m, &ds, &task, &err));
    dpt_trace tr;
    dpt_model_trace(ctx, m, &ds, &task, true, &tr);
    double want = L * (2.0 * T * C * (3 * C + C + 4 * C + 4 * C) + 4.0 * T * T * C) + 2.0 * T * C * V;
    assert_float_equal(tr.flops, want, 0.0);
    assert_true(tr.ops > 10 && tr.output_floats > (double)T * V);
    assert_true(dpt_model_training(m)); /* traced in evaluation mode, the mode given back */
    /* --summary's table: a row per op that reads a parameter or does counted FLOPs, the tied
     * embedding's second use adding no parameters, every parameter counted once */
    const char *text = tr.table;
    char row[160];
    snprintf(row, sizeof row, "linear           h.0.attn.c_attn              (1, %d, %d)", T, 3 * C);
    assert_contains(text, row);
    snprintf(row, sizeof row, "%12lld %12.2f\n", (long long)(C * 3 * C + 3 * C), 2.0 * T * C * 3 * C / 1e6);
    assert_contains(strstr(text, "h.0.attn.c_attn"), row); /* its weight and bias, its FLOPs */
    assert_contains(text, "attention        -  ");
    assert_contains(text, "tied");
    snprintf(row, sizeof row, "total: %lld parameters, ", (long long)dpt_model_param_count(m));
    assert_contains(text, row); /* no "read by no op": every parameter is in a row */
    assert_contains(text, "and ops without parameters or counted FLOPs (elementwise, views, reductions): add ");
    free(tr.table);
    dpt_model_free(m);
    dpt_config_free(cfg);
    dpt_ctx_free(ctx);
}

typedef struct ref_model {
    double *p[NP]; /* in the model's parameter order */
    int64_t n[NP];
} ref_model;

static void ln64(const double *x, const double *w, const double *b, double *y, int n)
{
    double mu = 0, var = 0;
    for (int i = 0; i < n; i++)
        mu += x[i];
    mu /= n;
    for (int i = 0; i < n; i++)
        var += (x[i] - mu) * (x[i] - mu);
    var /= n;
    for (int i = 0; i < n; i++)
        y[i] = (x[i] - mu) / sqrt(var + 1e-5) * w[i] + b[i];
}

/* y (out) = W (out, in) x + b */
static void lin64(const double *x, const double *w, const double *b, double *y, int in, int out)
{
    for (int o = 0; o < out; o++) {
        double s = b[o];
        for (int i = 0; i < in; i++)
            s += w[o * in + i] * x[i];
        y[o] = s;
    }
}

static double gelu64(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double ref_loss(const ref_model *r, const int32_t *ids, const int32_t *tgt)
{
    double loss = 0;
    for (int b = 0; b < B; b++) {
        double h[T][C], a[T][C], qkv[T][3 * C], y[T][C], f[T][4 * C], o[T][C];
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                h[t][c] = r->p[0][ids[b * T + t] * C + c] + r->p[1][t * C + c];
        for (int l = 0; l < L; l++) {
            double *const *p = r->p + 2 + 12 * l; /* ln1 w b, qkv w b, proj w b, ln2 w b, fc w b, fcproj w b */
            for (int t = 0; t < T; t++) {
                ln64(h[t], p[0], p[1], a[t], C);
                lin64(a[t], p[2], p[3], qkv[t], C, 3 * C);
            }
            int hs = C / H;
            for (int hh = 0; hh < H; hh++)
                for (int t = 0; t < T; t++) {
                    double s[T], m = -INFINITY, sum = 0;
                    for (int j = 0; j <= t; j++) {
                        double d = 0;
                        for (int e = 0; e < hs; e++)
                            d += qkv[t][hh * hs + e] * qkv[j][C + hh * hs + e];
                        s[j] = d / sqrt(hs);
                        m = fmax(m, s[j]);
                    }
                    for (int j = 0; j <= t; j++)
                        sum += s[j] = exp(s[j] - m);
                    for (int e = 0; e < hs; e++) {
                        double acc = 0;
                        for (int j = 0; j <= t; j++)
                            acc += s[j] / sum * qkv[j][2 * C + hh * hs + e];
                        y[t][hh * hs + e] = acc;
                    }
                }
            for (int t = 0; t < T; t++) {
                lin64(y[t], p[4], p[5], o[t], C, C);
                for (int c = 0; c < C; c++)
                    h[t][c] += o[t][c];
                ln64(h[t], p[6], p[7], a[t], C);
                lin64(a[t], p[8], p[9], f[t], C, 4 * C);
                for (int c = 0; c < 4 * C; c++)
                    f[t][c] = gelu64(f[t][c]);
                lin64(f[t], p[10], p[11], o[t], 4 * C, C);
                for (int c = 0; c < C; c++)
                    h[t][c] += o[t][c];
            }
        }
        for (int t = 0; t < T; t++) {
            ln64(h[t], r->p[NP - 2], r->p[NP - 1], a[t], C);
            double logit[V], m = -INFINITY, sum = 0;
            for (int v = 0; v < V; v++) { /* the real vocabulary only */
                double d = 0;
                for (int c = 0; c < C; c++)
                    d += a[t][c] * r->p[0][v * C + c];
                logit[v] = d;
                m = fmax(m, d);
            }
            for (int v = 0; v < V; v++)
                sum += exp(logit[v] - m);
            loss += m + log(sum) - logit[tgt[b * T + t]];
        }
    }
    return loss / (B * T);
}

static void test_gpt_matches_float64(void **state)
{
    (void)state;
    dpt_config *cfg = small_gpt_config(NULL, 0);
    dpt_ctx *ctx = test_ctx(2, 3);
    dpt_model *m = build_small_gpt(ctx, cfg, T);
    assert_int_equal(dpt_model_num_params(m), NP);
    ref_model r;
    dpt_rng rng;
    dpt_rng_seed(&rng, 77);
    for (int i = 0; i < NP; i++) {
        dpt_tensor *p = dpt_model_param_at(m, i);
        r.n[i] = dpt_tensor_numel(p);
        r.p[i] = malloc((size_t)r.n[i] * sizeof(double));
        float *d = dpt_tensor_data(p);
        for (int64_t k = 0; k < r.n[i]; k++) /* away from GPT-2's init: LN and biases too */
            r.p[i][k] = d[k] = d[k] * (i == 0 ? 10.0f : 1.0f) + 0.1f * (2.0f * dpt_rng_uniform(&rng) - 1.0f);
    }
    int32_t ids[B * T], tgt[B * T];
    dpt_tensor *it, *tt;
    token_batch(ctx, &rng, B, T, ids, tgt, &it, &tt);
    dpt_model_zero_grad(m);
    dpt_tensor *logits = dpt_model_forward(m, ctx, it);
    assert_int_equal(dpt_tensor_dim(logits, -1), V); /* the padding is not an output */
    dpt_tensor *loss = dpt_cross_entropy_targets(ctx, logits, tt, 0.0f, DPT_IGNORE_INDEX);
    double want = ref_loss(&r, ids, tgt), got = dpt_tensor_item(loss);
    if (fabs(got - want) > 1e-5 * fabs(want)) fail_msg("loss %.9g, float64 GPT-2 %.9g", got, want);
    dpt_backward(ctx, loss);
    int checked = 0;
    for (int i = 0; i < NP; i++) {
        dpt_tensor *p = dpt_model_param_at(m, i);
        const float *g = dpt_tensor_data(dpt_tensor_grad(p));
        for (int64_t k = 0; k < r.n[i]; k++) {
            double keep = r.p[i][k], h = 1e-5;
            r.p[i][k] = keep + h;
            double up = ref_loss(&r, ids, tgt);
            r.p[i][k] = keep - h;
            double down = ref_loss(&r, ids, tgt);
            r.p[i][k] = keep;
            double fd = (up - down) / (2 * h);
            if (i == 0 && k >= V * C) assert_true(fd == 0.0 && g[k] == 0.0f); /* padding rows */
            if (fabs(g[k] - fd) > 2e-5 + 2e-3 * fabs(fd))
                fail_msg("d loss / d %s[%lld]: %.7g, central differences of float64 GPT-2 %.7g", dpt_tensor_name(p),
                         (long long)k, g[k], fd);
            checked++;
        }
    }
    assert_true(checked > 1500);
    dpt_tape_clear(ctx);
    for (int i = 0; i < NP; i++)
        free(r.p[i]);
    dpt_tensor_free(it), dpt_tensor_free(tt);
    dpt_model_free(m);
    dpt_config_free(cfg);
    dpt_ctx_free(ctx);
}

/* [model] recompute (dpt_checkpoint per block): the loss and every parameter's gradient are
 * the ones without it bit for bit (the same ops in the same order, the dropout masks drawn
 * again from the generator as it was), in training mode with dropout, and the step's
 * tensors alive after forward are fewer: each block keeps only its input (here 4 layers of
 * T = 64, C = 32: the blocks' intermediates, about 16 C a token each, are most of them). */
static void test_recompute_same_gradients(void **state)
{
    (void)state;
    enum { RT = 64, RB = 3, RL = 4 };
    float *grads[2][4 + 12 * RL];
    float loss[2];
    size_t alive[2];
    int nodes[2];
    for (int r = 0; r < 2; r++) {
        const char *sets[] = {"model.resid_dropout=0.2", r ? "model.recompute=true" : "model.recompute=false"};
        dpt_config *cfg = small_gpt_config(sets, 2);
        assert_true(dpt_config_set(cfg, "model.n_layer=4", &(dpt_error){0}));
        assert_true(dpt_config_set(cfg, "model.n_embd=32", &(dpt_error){0}));
        dpt_ctx *ctx = test_ctx(2, 41); /* the same seed: the same weights and masks */
        dpt_model *m = build_small_gpt(ctx, cfg, RT);
        assert_int_equal(dpt_model_num_params(m), 4 + 12 * RL);
        dpt_rng rng;
        dpt_rng_seed(&rng, 5);
        int32_t ids[RB * RT], tgt[RB * RT];
        dpt_tensor *it, *tt;
        token_batch(ctx, &rng, RB, RT, ids, tgt, &it, &tt);
        dpt_model_set_training(m, true);
        dpt_model_zero_grad(m);
        size_t before = dpt_ctx_mem_stats(ctx).allocated;
        dpt_tensor *l = dpt_cross_entropy_targets(ctx, dpt_model_forward(m, ctx, it), tt, 0.0f, DPT_IGNORE_INDEX);
        alive[r] = dpt_ctx_mem_stats(ctx).allocated - before;
        nodes[r] = dpt_tape_mark_here(ctx).nodes;
        loss[r] = dpt_tensor_item(l);
        dpt_backward(ctx, l);
        for (int i = 0; i < dpt_model_num_params(m); i++) {
            const dpt_tensor *g = dpt_tensor_grad(dpt_model_param_at(m, i));
            grads[r][i] = malloc((size_t)dpt_tensor_numel(g) * sizeof(float));
            dpt_tensor_copy_to_host(g, grads[r][i]);
            if (r == 1) {
                if (memcmp(grads[0][i], grads[1][i], (size_t)dpt_tensor_numel(g) * sizeof(float)) != 0)
                    fail_msg("the gradient of %s differs with recompute", dpt_tensor_name(dpt_model_param_at(m, i)));
                free(grads[0][i]), free(grads[1][i]);
            }
        }
        dpt_tape_clear(ctx);
        dpt_tensor_free(it), dpt_tensor_free(tt);
        dpt_model_free(m);
        dpt_config_free(cfg);
        dpt_ctx_free(ctx);
    }
    assert_memory_equal(&loss[0], &loss[1], sizeof loss[0]);
    /* 4 blocks of about 16 nodes each become one node each */
    if (nodes[1] > nodes[0] - 4 * 10) fail_msg("recompute left %d nodes on the tape; %d without", nodes[1], nodes[0]);
    if (alive[1] * 2 > alive[0])
        fail_msg("recompute kept %zu bytes of tensors after forward, %zu without: not half", alive[1], alive[0]);
}

/* Generation with a KV cache: the decoder's logits for each position, fed a prompt at once and
 * then one token a call, equal the full forward's row for that position over the whole
 * sequence (fp32 both, summed in other orders: a few ulps of logits of order 1-10), with the
 * model's width (block 12 positions) filled to its end; a new sequence at position 0 reuses
 * the cache. */
static void test_kv_cache_matches_forward(void **state)
{
    (void)state;
    enum { N = 12, PROMPT = 4 };
    const char *block[] = {"model.block_size=12"};
    dpt_config *cfg = small_gpt_config(block, 1);
    dpt_ctx *ctx = test_ctx(2, 3);
    dpt_model *m = build_small_gpt(ctx, cfg, N);
    const dpt_decoder *d = dpt_model_decoder(m);
    assert_non_null(d);
    assert_int_equal(d->positions, N);
    dpt_rng rng;
    dpt_rng_seed(&rng, 5);
    for (int i = 0; i < dpt_model_num_params(m); i++) { /* away from the init: every value matters */
        dpt_tensor *p = dpt_model_param_at(m, i);
        float *v = dpt_tensor_data(p);
        for (int64_t k = 0; k < dpt_tensor_numel(p); k++)
            v[k] += 0.3f * (2.0f * dpt_rng_uniform(&rng) - 1.0f);
    }
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)dpt_rng_below(&rng, V);
    dpt_set_grad_enabled(ctx, false);
    dpt_model_set_training(m, false);
    dpt_tensor *all = dpt_tensor_new_dtype(ctx, DPT_I32, 2, (int64_t[]){1, N});
    dpt_tensor_copy_from_host_i32(all, ids);
    float want[N * V], got[V];
    dpt_tensor_copy_to_host(dpt_model_forward(m, ctx, all), want);
    dpt_tape_clear(ctx);
    dpt_kv_cache *cache = dpt_kv_cache_new(ctx, d->layers, d->heads, d->head_size, d->positions);
    for (int round = 0; round < 2; round++) { /* the second starts over in the same cache */
        int prompt = round == 0 ? PROMPT : 1;
        for (int pos = 0; pos < N;) {
            int len = pos == 0 ? prompt : 1;
            dpt_tensor *x = dpt_tensor_new_dtype(ctx, DPT_I32, 2, (int64_t[]){1, len});
            dpt_tensor_copy_from_host_i32(x, ids + pos);
            dpt_tensor *y = d->decode(m, ctx, x, pos, cache);
            assert_int_equal(dpt_tensor_numel(y), V);
            dpt_tensor_copy_to_host(y, got);
            pos += len;
            for (int v = 0; v < V; v++) {
                float ref = want[(pos - 1) * V + v];
                if (!(fabsf(got[v] - ref) <= 2e-5f * (1.0f + fabsf(ref))))
                    fail_msg("round %d, position %d, logit %d: with the cache %.8g, the full forward %.8g", round,
                             pos - 1, v, got[v], ref);
            }
            dpt_tape_clear(ctx);
            dpt_tensor_free(x);
        }
    }
    dpt_kv_cache_free(cache);
    dpt_tensor_free(all);
    dpt_model_free(m);
    dpt_config_free(cfg);
    dpt_ctx_free(ctx);
}

/* ---------------------------------------------------------------- token shards */

static void write_shard(const char *path, int32_t magic, int32_t version, int32_t count, const uint16_t *tokens,
                        int64_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int32_t header[256] = {magic, version, count};
    assert_int_equal(fwrite(header, sizeof header, 1, f), 1);
    if (n) assert_int_equal(fwrite(tokens, 2, (size_t)n, f), (size_t)n);
    fclose(f);
}

static const char *open_error(const char *dir, const char *train, int64_t seq_len, int64_t vocab, char *msg, size_t cap)
{
    char a[512], b[512], c[64], d[64];
    snprintf(a, sizeof a, "data.train=%s/%s", dir, train);
    snprintf(b, sizeof b, "data.val=%s/val_*.bin", dir);
    snprintf(c, sizeof c, "data.seq_len=%lld", (long long)seq_len);
    snprintf(d, sizeof d, "data.vocab_size=%lld", (long long)vocab);
    const char *sets[] = {"data.source=tokens", a, b, c, d};
    dpt_config *cfg = test_config(sets, 5);
    dpt_dataset *tr = NULL, *te = NULL;
    dpt_error err;
    bool ok = dpt_data_open(cfg, &tr, &te, &err);
    snprintf(msg, cap, "%s", ok ? "" : err.msg);
    if (ok) dpt_dataset_free(tr), dpt_dataset_free(te);
    dpt_config_free(cfg);
    return msg;
}

static void test_token_shards(void **state)
{
    (void)state;
    char dir[] = "/tmp/dpt_tokens_XXXXXX", path[600], msg[2048];
    assert_non_null(mkdtemp(dir));
    uint16_t tok[300];
    for (int i = 0; i < 300; i++)
        tok[i] = (uint16_t)((i * 7 + 3) % 256);
    snprintf(path, sizeof path, "%s/train_000000.bin", dir);
    write_shard(path, 20240520, 1, 100, tok, 100);
    snprintf(path, sizeof path, "%s/train_000001.bin", dir);
    write_shard(path, 20240520, 1, 200, tok + 100, 200);
    snprintf(path, sizeof path, "%s/val_000000.bin", dir);
    write_shard(path, 20240520, 1, 50, tok, 50);

    /* samples: shard 0 gives (100 - 1) / 8 = 12, shard 1 (200 - 1) / 8 = 24 */
    char a[512], b[512];
    snprintf(a, sizeof a, "data.train=%s/train_*.bin", dir);
    snprintf(b, sizeof b, "data.val=%s/val_*.bin", dir);
    const char *sets[] = {"data.source=tokens", a, b, "data.seq_len=8", "data.vocab_size=256"};
    dpt_config *cfg = test_config(sets, 5);
    dpt_dataset *tr, *te;
    dpt_error err;
    if (!dpt_data_open(cfg, &tr, &te, &err)) fail_msg("%s", err.msg);
    assert_int_equal(tr->n, 36);
    assert_int_equal(te->n, 6);
    assert_int_equal(tr->num_classes, 256);
    for (int64_t j = 0; j < tr->n; j++) {
        int32_t x[8], y[8];
        tr->get(tr, j, (void *[]){x, y});
        int64_t base = j < 12 ? j * 8 : 100 + (j - 12) * 8;
        for (int i = 0; i < 8; i++) {
            assert_int_equal(x[i], tok[base + i]);
            assert_int_equal(y[i], tok[base + i + 1]);
        }
    }
    dpt_dataset_free(tr), dpt_dataset_free(te);
    dpt_config_free(cfg);

    /* hostile files, each refused naming it */
    struct {
        int32_t magic, version, count;
        int64_t written, seq_len, vocab;
        const char *says;
    } bad[] = {
        {12345, 1, 100, 100, 8, 256, "magic 12345, expected 20240520"},
        {20240326, 3, 100, 100, 8, 256, "an llm.c model checkpoint, not tokens"},
        {20240520, 2, 100, 100, 8, 256, "version 2"},
        {20240520, 1, 100, 60, 8, 256, "the header says 100 tokens"},
        {20240520, 1, -5, 0, 8, 256, "the header says -5 tokens"},
        {20240520, 1, 100, 100, 8, 200, "token 29 is 206, not below [data] vocab_size = 200"},
        {20240520, 1, 100, 100, 100, 256, "holds 100 tokens, fewer than one sample of [data] seq_len = 100"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/bad.bin", dir);
        write_shard(path, bad[i].magic, bad[i].version, bad[i].count, tok, bad[i].written);
        open_error(dir, "bad.bin", bad[i].seq_len, bad[i].vocab, msg, sizeof msg);
        if (!strstr(msg, bad[i].says) || !strstr(msg, path))
            fail_msg("case %zu: expected an error naming %s with '%s', got: %s", i, path, bad[i].says, msg);
    }
    FILE *f = fopen(path, "wb"); /* shorter than the header */
    fputs("hello", f);
    fclose(f);
    open_error(dir, "bad.bin", 8, 256, msg, sizeof msg);
    assert_non_null(strstr(msg, "shorter than its 1024-byte header"));
    open_error(dir, "nothing_*.bin", 8, 256, msg, sizeof msg);
    assert_non_null(strstr(msg, "no file matches"));
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---------------------------------------------------------------- llm.c's checkpoint files */

/* llm.c's order: kind by kind, each kind for every layer (our parameters go layer by layer) */
static void write_llmc(const char *path, dpt_model *m, int layers, const int32_t hdr[8], int64_t drop_bytes,
                       bool plant_nan)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int32_t h[256] = {0};
    memcpy(h, hdr, 8 * sizeof *h);
    fwrite(h, sizeof h, 1, f);
    int per = 12, np = dpt_model_num_params(m);
    int64_t written = 0, limit = -1;
    if (drop_bytes) { /* the whole size minus drop_bytes */
        limit = -drop_bytes;
        for (int i = 0; i < np; i++)
            limit += 4 * dpt_tensor_numel(dpt_model_param_at(m, i));
    }
    for (int k = 0; k < 16; k++)
        for (int l = 0; l < (k < 2 || k >= 14 ? 1 : layers); l++) {
            int index = k < 2 ? k : k >= 14 ? np - 2 + (k - 14) : 2 + l * per + (k - 2);
            dpt_tensor *t = dpt_model_param_at(m, index);
            float *d = dpt_tensor_data(t);
            for (int64_t i = 0; i < dpt_tensor_numel(t); i++, written += 4) {
                float v = plant_nan && k == 8 && i == 3 ? NAN : d[i];
                if (limit < 0 || written < limit) fwrite(&v, 4, 1, f);
            }
        }
    fclose(f);
}

static void test_llmc_checkpoint_in(void **state)
{
    (void)state;
    dpt_config *cfg = small_gpt_config(NULL, 0);
    dpt_ctx *ctx = test_ctx(1, 5);
    dpt_dataset ds = token_shape(T, V);
    dpt_error err;
    dpt_model *a = build_small_gpt(ctx, cfg, T);
    const char *path = "/tmp/dpt_test_llmc.bin";
    const int32_t good[8] = {20240326, 3, T, V, L, H, C, VP};
    write_llmc(path, a, L, good, 0, false);
    dpt_config_free(cfg);
    const char *with[] = {"model.init=llmc:/tmp/dpt_test_llmc.bin", "train.seed=99"};
    cfg = small_gpt_config(with, 2);
    dpt_ctx *ctx2 = test_ctx(1, 99); /* another seed: only the file can make the weights equal */
    dpt_model *b = dpt_model_build_for(ctx2, cfg, &ds, &err);
    if (!b) fail_msg("%s", err.msg);
    for (int i = 0; i < dpt_model_num_params(a); i++) {
        dpt_tensor *pa = dpt_model_param_at(a, i), *pb = dpt_model_param_at(b, i);
        assert_string_equal(dpt_tensor_name(pa), dpt_tensor_name(pb));
        assert_memory_equal(dpt_tensor_data(pa), dpt_tensor_data(pb), (size_t)dpt_tensor_numel(pa) * sizeof(float));
    }
    dpt_model_free(b);
    /* hostile or mismatched files, refused naming the file and what differs */
    struct {
        int32_t hdr[8];
        int64_t drop;
        bool nan;
        const char *says;
    } bad[] = {
        {{20240520, 1, T, V, L, H, C, VP}, 0, false, "it is a token shard"},
        {{1234, 3, T, V, L, H, C, VP}, 0, false, "wrong magic number"},
        {{20240326, 5, T, V, L, H, C, VP}, 0, false, "holds bf16 weights"},
        {{20240326, 3, T, V, 3, H, C, VP}, 0, false, "n_layer 3; this config's has 2"},
        {{20240326, 3, T, V, L, H, C, 32}, 0, false, "padded_vocab_size 32; this config's has 16"},
        {{20240326, 3, T, V, L, H, C, VP}, 8, false, "truncated or not written by llm.c"},
        {{20240326, 3, T, V, L, H, C, VP}, 0, true, "h.0.ln_2.weight holds a non-finite value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_llmc(path, a, L, bad[i].hdr, bad[i].drop, bad[i].nan);
        b = dpt_model_build_for(ctx2, cfg, &ds, &err);
        if (b || !strstr(err.msg, bad[i].says) || !strstr(err.msg, path))
            fail_msg("case %zu: expected an error naming %s with '%s', got: %s", i, path, bad[i].says, b ? "(built)" : err.msg);
    }
    unlink(path);
    dpt_model_free(a);
    dpt_config_free(cfg);
    dpt_ctx_free(ctx2);
    dpt_ctx_free(ctx);
}

/* ---------------------------------------------------------------- ./train on text */

static void make_text_shards(const char *dir)
{
    char cmd[1024], out[4096];
    /* byte-level shards of the project's own docs: real text, always there */
    snprintf(cmd, sizeof cmd, "rm -rf %s && build/tools/text_tokens --val-fraction 0.1 %s README.md docs/*.md 2>&1", dir,
             dir);
    int rc = run_capture(out, sizeof out, "%s", cmd);
    if (rc != 0) fail_msg("%s: exit %d\n%s", cmd, rc, out);
}

static void test_trains_on_text(void **state)
{
    (void)state;
    const char *dir = "/tmp/dpt_gpt_text";
    make_text_shards(dir);
    char out[1 << 15];
    /* log(256) = 5.55 is a uniform guess; this run measured 2.87 here after 150 steps (3.3 after 60) */
    int rc = run_capture(out, sizeof out, "%s",
                         "./train configs/gpt_fortunes.ini --set data.train=/tmp/dpt_gpt_text/train_*.bin "
                         "--set data.val=/tmp/dpt_gpt_text/val_*.bin --set train.max_steps=150 --set train.epochs=7 "
                         "--set optim.warmup_epochs=0.5 --set model.n_layer=2 --set log.interval=50 "
                         "--set checkpoint.dir=/tmp/dpt_gpt_ck --set checkpoint.every_steps=150 "
                         "--set checkpoint.existing=archive --expect 'final_test_loss <= 3.1' 2>&1");
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "tok/s"));
    assert_non_null(strstr(out, "ppl"));
    assert_non_null(strstr(out, "pass  final_test_loss <= 3.1"));

    /* --sample: text after the prompt; the same seed gives the same text, temperature 0 the
     * most likely bytes; bad values and a model that is not a language model are refused */
    const char *base = "./train configs/gpt_fortunes.ini --set data.train=/tmp/dpt_gpt_text/train_*.bin "
                       "--set data.val=/tmp/dpt_gpt_text/val_*.bin --set model.n_layer=2 "
                       "--set checkpoint.dir=/tmp/dpt_gpt_ck --sample /tmp/dpt_gpt_ck/ckpt-step00000150.dpt";
    char a[1 << 14], b[1 << 14], c[1 << 14];
    rc = run_capture(a, sizeof a, "{ %s --prompt 'The model ' --tokens 60 --seed 7 2>/dev/null; }", base);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, a);
    rc = run_capture(b, sizeof b, "{ %s --prompt 'The model ' --tokens 60 --seed 7 2>/dev/null; }", base);
    assert_int_equal(rc, 0);
    assert_string_equal(a, b);
    const char *text = strstr(a, "The model ");
    assert_non_null(text);
    assert_true(strlen(text) >= 10 + 60); /* the prompt, 60 bytes (a newline may be one), and a newline */
    rc = run_capture(c, sizeof c, "{ %s --prompt 'The model ' --tokens 60 --seed 8 2>/dev/null; }", base);
    assert_int_equal(rc, 0);
    assert_true(strcmp(a, c) != 0);
    /* the sampler's loop with the KV cache (the default) and with the full forward a token: the
     * same most likely bytes while the context (128) holds them all (10 + 110); stderr, which
     * says how fast each was, left out (run_capture adds 2>&1 after the braces) */
    rc = run_capture(b, sizeof b, "{ %s --prompt 'The model ' --tokens 110 --temperature 0 2>/dev/null; }", base);
    assert_int_equal(rc, 0);
    rc = run_capture(c, sizeof c, "{ %s --prompt 'The model ' --tokens 110 --temperature 0 --no-kv-cache 2>/dev/null; }", base);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(b, "The model "));
    assert_true(strlen(strstr(b, "The model ")) >= 10 + 110);
    assert_string_equal(b, c);
    /* the nucleus: a tiny top-p keeps only the most likely byte, so any seed and temperature
     * give temperature 0's text */
    rc = run_capture(c, sizeof c, "{ %s --prompt 'The model ' --tokens 110 --top-p 1e-6 --temperature 1.5 --seed 3 "
                     "2>/dev/null; }", base);
    assert_int_equal(rc, 0);
    assert_string_equal(b, c);
    rc = run_capture(c, sizeof c, "%s --tokens 0 2>&1", base);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(c, "--tokens 0: not a valid value"));
    /* numbers C's parsers would bend: -1 as 2^64 - 1, an overflow clamped, 2^32 + 5 cut to 5 */
    const char *bent[] = {"--seed -1", "--seed 99999999999999999999999", "--top-k 4294967301", "--top-p 0",
                          "--top-p 1.5", "--top-p nan"};
    for (int i = 0; i < 6; i++) {
        rc = run_capture(c, sizeof c, "%s %s 2>&1", base, bent[i]);
        if (rc != 2 || !strstr(c, "not a valid value")) fail_msg("%s: exit %d: %s", bent[i], rc, c);
    }
    rc = run_capture(c, sizeof c, "./train configs/fmnist_mlp.ini --sample /tmp/dpt_gpt_ck/ckpt-step00000150.dpt 2>&1");
    assert_int_equal(rc, 1);
}

/* The deterministic mode: the same weights on 1 and 2 ranks, in fp32 and in bf16 (attention's
 * bf16 products batch a shard's heads: the same shards, the same bits; fp32 where the CPU has
 * no AVX512-BF16). */
static void test_deterministic_ranks(void **state)
{
    (void)state;
    if (system("command -v mpirun > /dev/null 2>&1") != 0) skip();
    const char *dir = "/tmp/dpt_gpt_text";
    make_text_shards(dir);
    const char *args = "configs/gpt_fortunes.ini --set data.train=/tmp/dpt_gpt_text/train_*.bin "
                       "--set data.val=/tmp/dpt_gpt_text/val_*.bin --set train.max_steps=6 --set train.epochs=1 "
                       "--set model.n_layer=2 --set train.global_batch=16 --set train.deterministic=true --set train.deterministic_shard=4 "
                       "--set train.threads=1 "
                       "--set log.interval=3 --set checkpoint.dir=/tmp/dpt_gpt_det --set checkpoint.final=false";
    const char *precisions[] = {"fp32", "bf16"};
    for (int p = 0; p < 2; p++) {
        char cmd[2048], out1[1 << 15], out2[1 << 15];
        snprintf(cmd, sizeof cmd, "./train %s --set train.precision=%s 2>&1", args, precisions[p]);
        int rc = run_capture(out1, sizeof out1, "%s", cmd);
        if (rc != 0) fail_msg("%s, 1 rank: exit %d\n%s", precisions[p], rc, out1);
        snprintf(cmd, sizeof cmd, "mpirun --oversubscribe --allow-run-as-root -np 2 ./train %s --set train.precision=%s 2>&1",
                 args, precisions[p]);
        rc = run_capture(out2, sizeof out2, "%s", cmd);
        if (rc != 0) fail_msg("%s, 2 ranks: exit %d\n%s", precisions[p], rc, out2);
        const char *h1 = strstr(out1, "weights sha256 "), *h2 = strstr(out2, "weights sha256 ");
        assert_non_null(h1);
        assert_non_null(h2);
        if (strncmp(h1, h2, 15 + 64) != 0) fail_msg("%s: 1 rank %.79s\n2 ranks %.79s", precisions[p], h1, h2);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_small_parameters),
        cmocka_unit_test(test_traced_flops),
        cmocka_unit_test(test_gpt_matches_float64),
        cmocka_unit_test(test_kv_cache_matches_forward),
        cmocka_unit_test(test_recompute_same_gradients),
        cmocka_unit_test(test_token_shards),
        cmocka_unit_test(test_llmc_checkpoint_in),
        cmocka_unit_test(test_trains_on_text),
        cmocka_unit_test(test_deterministic_ranks),
    };
    return cmocka_run_group_tests_name("gpt", tests, NULL, NULL);
}
