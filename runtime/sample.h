/* sample.h: generating tokens from a trained language model (./train CONFIG --sample CKPT). */
#ifndef DPT_SAMPLE_H
#define DPT_SAMPLE_H

#include <stdio.h>

#include "dpt.h"
#include "rng.h"

typedef struct dpt_sample_options {
    const char *prompt; /* text (byte-level models) or token ids; NULL: a line start / end of text */
    int64_t tokens;     /* how many to generate */
    float temperature;  /* 0: always the most likely */
    int top_k;          /* 0: every token */
    float top_p;        /* the nucleus: only the most likely tokens whose chances add up to top_p (HF's
                         * top_p: a token goes when those more likely hold top_p already); 1: every token */
    uint64_t seed;
    bool no_cache;      /* the full forward of the context for every token, even with a decoder */
    const char *tokenizer; /* GPT-2's tokenizer (dpt_tokenizer_load): the prompt read as text and the tokens
                              printed as their bytes (NULL: as the model's vocabulary reads, bytes or ids) */
    bool tokenizer_found; /* the tokenizer was found beside the weights, not asked for: one that cannot be
                             read (another kind than GPT-2's) is passed over with a note, not an error */
} dpt_sample_options;

/* Generate o->tokens tokens after the prompt from a language model's forward ((1, T) ids ->
 * (1, T, vocab) logits), the context cut to `context` positions, printing them to out. */
bool dpt_sample_run(dpt_ctx *ctx, dpt_model *model, int vocab, int64_t context, const dpt_sample_options *o,
                    FILE *out, dpt_error *err);

/* The next token from one position's logits: softmax(logits / temperature) over the top_k most
 * likely (ties at the k-th kept), then over the nucleus of top_p (Holtzman et al. 2020; the
 * order of Hugging Face's warpers), drawn with rng; temperature 0 takes the first most likely.
 * scratch and order: vocab floats and ints of the caller's. */
int32_t dpt_sample_draw(const float *logits, int vocab, const dpt_sample_options *o, float *scratch, int32_t *order,
                        dpt_rng *rng);

#endif
