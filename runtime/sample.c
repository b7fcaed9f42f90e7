/* sample.c: ./train CONFIG --sample CKPT: text from a trained language model. The run's config
 * builds the model and the checkpoint's weights are loaded (as --resume does, every mismatch
 * named); then, from the prompt, each next token is drawn from softmax(logits / temperature) over
 * the k most likely (top-k; temperature 0 takes the most likely), with the context cut to the
 * data's sequence length. A byte-level model (vocabulary 256) reads and prints text; others
 * read and print token ids, or with --tokenizer (GPT-2's: Hugging Face's files or llm.c's,
 * data/tokenizer.c) read the prompt as text and print each token's bytes. A
 * model with a decoder (dpt_model_set_decoder: gpt) keeps every layer's keys and values
 * (kv_cache.c), so a new token costs one position's forward; others run the full forward of the
 * context for each token. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpt.h"
#include "../data/data.h"
#include "error.h"
#include "log.h"
#include "rng.h"
#include "sample.h"

/* The prompt as token ids: text through a tokenizer that encodes (its last `cap` tokens), its
 * bytes for a byte-level model, else whitespace-separated ids. */
static int64_t prompt_tokens(const char *prompt, int vocab, const dpt_tokenizer *tok, int32_t *out, int64_t cap,
                             dpt_error *err)
{
    int64_t n = 0;
    if (tok && dpt_tokenizer_can_encode(tok)) {
        size_t count;
        int32_t *ids = dpt_tokenizer_encode(tok, prompt, strlen(prompt), &count);
        size_t from = count > (size_t)cap ? count - (size_t)cap : 0;
        for (size_t i = from; i < count; i++)
            out[n++] = ids[i];
        free(ids);
        return n;
    }
    if (vocab == 256) {
        for (const unsigned char *p = (const unsigned char *)prompt; *p && n < cap; p++)
            out[n++] = *p;
        return n;
    }
    for (const char *p = prompt; *p && n < cap;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            if (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') {
                p++;
                continue;
            }
            dpt_errorf(err, "--prompt '%s': a model of %d tokens takes token ids (numbers) as its prompt; '%c' is not "
                            "one\nHINT: byte-level models (vocabulary 256) take text, and so does a GPT-2 given its tokenizer: "
                            "--tokenizer DIR (Hugging Face's vocab.json and merges.txt, found beside hf:PATH's "
                            "weights) or llm.c's gpt2_tokenizer.bin",
                       prompt, vocab, *p);
            return -1;
        }
        if (v < 0 || v >= vocab) {
            dpt_errorf(err, "--prompt: token %ld is outside the vocabulary [0, %d)", v, vocab);
            return -1;
        }
        out[n++] = (int32_t)v;
        p = end;
    }
    return n;
}

static int by_value_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* Token ids by their chance, the largest first (ties by id, so the order is the same on every
 * platform's qsort). */
static const float *order_chance;
static int by_chance_desc(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = order_chance[i], y = order_chance[j];
    return x != y ? (x < y) - (x > y) : (i > j) - (i < j);
}

int32_t dpt_sample_draw(const float *logits, int vocab, const dpt_sample_options *o, float *scratch, int32_t *order,
                        dpt_rng *rng)
{
    int best = 0;
    for (int v = 1; v < vocab; v++)
        if (logits[v] > logits[best]) best = v;
    if (o->temperature <= 0.0f) return best;
    float cut = -INFINITY; /* the k-th largest logit: below it, no chance */
    if (o->top_k > 0 && o->top_k < vocab) {
        memcpy(scratch, logits, (size_t)vocab * sizeof *scratch);
        qsort(scratch, (size_t)vocab, sizeof *scratch, by_value_desc);
        cut = scratch[o->top_k - 1];
    }
    double total = 0.0;
    for (int v = 0; v < vocab; v++) {
        double p = logits[v] >= cut ? exp((double)(logits[v] - logits[best]) / o->temperature) : 0.0;
        scratch[v] = (float)p;
        total += p;
    }
    if (o->top_p > 0.0f && o->top_p < 1.0f) { /* the nucleus: the most likely tokens until their mass reaches p */
        for (int v = 0; v < vocab; v++)
            order[v] = v;
        order_chance = scratch;
        qsort(order, (size_t)vocab, sizeof *order, by_chance_desc);
        double kept = 0.0; /* the chances of the tokens more likely than the next */
        for (int r = 0; r < vocab; r++) {
            float *p = &scratch[order[r]];
            if (kept >= (double)o->top_p * total) *p = 0.0f; /* those hold top_p already */
            else kept += *p;
        }
        total = kept;
    }
    double coin = dpt_rng_uniform(rng) * total, acc = 0.0;
    for (int v = 0; v < vocab; v++) {
        acc += scratch[v];
        if (coin < acc) return v;
    }
    return best;
}

/* A byte of a sample. On a terminal a control byte other than a newline or a tab is shown as
 * \xNN: a byte-level model early in training draws ESC and friends, which a terminal would take
 * as commands. A file or a pipe gets the bytes as drawn. */
static void emit_byte(unsigned char c, FILE *out, bool tty)
{
    if (tty && (c < 0x20 || c == 0x7f) && c != '\n' && c != '\t')
        fprintf(out, "\\x%02x", (unsigned)c);
    else
        fputc(c, out);
}

/* Print token `next`: its bytes in the tokenizer, else as the model's vocabulary reads (a byte,
 * or an id). */
static void emit(int32_t next, int vocab, const dpt_tokenizer *tok, FILE *out, bool tty)
{
    if (tok) {
        size_t len;
        const unsigned char *b = dpt_tokenizer_bytes(tok, next, &len);
        for (size_t i = 0; i < len; i++)
            emit_byte(b[i], out, tty);
    } else if (vocab != 256) {
        fprintf(out, "%d ", next);
    } else {
        emit_byte((unsigned char)next, out, tty);
    }
    fflush(out);
}

/* The logits (vocab) after ids[0..len) with the full forward (a model without a decoder). */
static bool logits_full(dpt_ctx *ctx, dpt_model *model, const int32_t *ids, int64_t len, int vocab, float *logits,
                        dpt_error *err)
{
    dpt_tensor *x = dpt_tensor_new_dtype(ctx, DPT_I32, 2, (int64_t[]){1, len});
    dpt_tensor_copy_from_host_i32(x, ids);
    dpt_tensor *y = dpt_model_forward(model, ctx, x); /* (1, len, vocab) */
    bool ok = dpt_tensor_numel(y) == len * vocab;
    if (!ok) {
        dpt_errorf(err, "the model's output has %lld values for %lld positions; a language model gives "
                        "vocab_size = %d logits a position", (long long)dpt_tensor_numel(y), (long long)len, vocab);
    } else {
        float *all = malloc((size_t)(len * vocab) * sizeof *all);
        if (!all) dpt_fatal("out of host memory for sampling");
        dpt_tensor_copy_to_host(y, all);
        memcpy(logits, all + (len - 1) * vocab, (size_t)vocab * sizeof *logits);
        free(all);
    }
    dpt_tape_clear(ctx);
    dpt_tensor_free(x);
    return ok;
}

/* The logits (vocab) after ids[0..len), which hold positions [pos, pos + len) of the cached
 * sequence, with the model's decoder. */
static bool logits_cached(dpt_ctx *ctx, dpt_model *model, const dpt_decoder *d, dpt_kv_cache *cache,
                          const int32_t *ids, int64_t len, int64_t pos, int vocab, float *logits, dpt_error *err)
{
    dpt_tensor *x = dpt_tensor_new_dtype(ctx, DPT_I32, 2, (int64_t[]){1, len});
    dpt_tensor_copy_from_host_i32(x, ids);
    dpt_tensor *y = d->decode(model, ctx, x, pos, cache); /* (1, vocab) */
    bool ok = dpt_tensor_numel(y) == vocab;
    if (!ok)
        dpt_errorf(err, "the model's decoder gave %lld values; it gives vocab_size = %d logits",
                   (long long)dpt_tensor_numel(y), vocab);
    else
        dpt_tensor_copy_to_host(y, logits);
    dpt_tape_clear(ctx);
    dpt_tensor_free(x);
    return ok;
}

bool dpt_sample_run(dpt_ctx *ctx, dpt_model *model, int vocab, int64_t context, const dpt_sample_options *o,
                    FILE *out, dpt_error *err)
{
    int64_t cap = 4096 + o->tokens;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    float *logits = malloc((size_t)vocab * sizeof *logits), *scratch = malloc((size_t)vocab * sizeof *scratch);
    int32_t *order = malloc((size_t)vocab * sizeof *order);
    if (!ids || !logits || !scratch || !order) dpt_fatal("out of host memory for sampling");
    dpt_tokenizer *tok = NULL;
    bool ok = true;
    if (o->tokenizer) {
        tok = dpt_tokenizer_load(o->tokenizer, err);
        if (!tok && o->tokenizer_found) { /* e.g. a LLaMA's SentencePiece tokenizer.json beside hf:DIR */
            char *nl = strchr(err->msg, '\n');
            if (nl) *nl = '\0';
            fprintf(stderr, "note: the tokenizer beside the weights is not read (%s): the prompt is token ids and the "
                            "sample is printed as ids\nHINT: --tokenizer PATH names one to read\n",
                    err->msg);
            err->msg[0] = '\0';
        }
        ok = (!tok && o->tokenizer_found) || (tok && (dpt_tokenizer_vocab(tok) == vocab ||dpt_tokenizer_vocab(tok) == vocab ||
                     dpt_errorf(err, "--tokenizer %s holds %d tokens; this model draws from a vocabulary of %d ([data] "
                                     "vocab_size)\nHINT: the tokenizer the model's tokens were made with (GPT-2's: 50257)",
                                o->tokenizer, dpt_tokenizer_vocab(tok), vocab)));
    }
    int64_t n = ok ? prompt_tokens(o->prompt ? o->prompt : "", vocab, tok, ids, 4096, err) : -1;
    ok = n >= 0;
    if (ok && n == 0) /* a line start, or the end of a text (llm.c's start: GPT-2's <|endoftext|>, 50256) */
        ids[n++] = vocab == 256 ? '\n' : tok ? dpt_tokenizer_eot(tok) : vocab - 1;
    bool tty = isatty(fileno(out));
    if (ok && vocab == 256) fwrite(o->prompt ? o->prompt : "", 1, o->prompt ? strlen(o->prompt) : 0, out);
    else if (ok && tok && o->prompt && *o->prompt) /* the prompt's ids as text first */
        for (int64_t i = 0; i < n; i++)
            emit(ids[i], vocab, tok, out, tty);
    dpt_rng rng;
    dpt_rng_seed(&rng, o->seed);
    bool was_enabled = dpt_set_grad_enabled(ctx, false);
    dpt_model_set_training(model, false);
    const dpt_decoder *d = o->no_cache ? NULL : dpt_model_decoder(model);
    if (d && d->positions < context) context = d->positions;
    dpt_kv_cache *cache = d && ok ? dpt_kv_cache_new(ctx, d->layers, d->heads, d->head_size, context) : NULL;
    /* With a cache: the prompt (its last `context` tokens) in one call, then one position a
     * token; when the cache is full, the oldest half goes and the rest is read again at
     * positions from 0 (each token then sees between context / 2 and context tokens, as
     * llama.cpp's context shift; the full forward sees exactly the last `context`). */
    int64_t pos = 0, keep = context / 2 > 0 ? context / 2 : 1, made = 0;
    double start = dpt_now_s();
    for (int64_t i = 0; ok && i < o->tokens; i++) {
        if (!cache) {
            int64_t len = n < context ? n : context;
            ok = logits_full(ctx, model, ids + n - len, len, vocab, logits, err);
        } else if (i == 0 || pos == context) { /* a prompt, or the last `keep` tokens again */
            int64_t want = i == 0 ? context : keep, len = n < want ? n : want;
            ok = logits_cached(ctx, model, d, cache, ids + n - len, len, 0, vocab, logits, err);
            pos = len;
        } else {
            ok = logits_cached(ctx, model, d, cache, ids + n - 1, 1, pos, vocab, logits, err);
            pos++;
        }
        if (!ok) break;
        int32_t next = dpt_sample_draw(logits, vocab, o, scratch, order, &rng);
        ids[n++] = next;
        emit(next, vocab, tok, out, tty);
        made++;
    }
    if (ok) fputc('\n', out), fflush(out); /* before the line on stderr */
    double took = dpt_now_s() - start;
    if (ok)
        fprintf(stderr, "sampled %lld tokens in %.2f s (%.1f tok/s; %s)\n", (long long)made, took,
                took > 0 ? (double)made / took : 0.0,
                cache        ? "KV cache"
                : o->no_cache ? "the full forward a token: --no-kv-cache"
                              : "the full forward a token: the model has no decoder");
    dpt_kv_cache_free(cache);
    dpt_tokenizer_free(tok);
    dpt_set_grad_enabled(ctx, was_enabled);
    free(ids), free(logits), free(scratch), free(order);
    return ok;
}
