/* tokenizer.c: llm.c's tokenizer file (gpt2_tokenizer.bin, written by its train_gpt2.py): the
 * bytes of each token id, for --sample --tokenizer to print a GPT-2 model's text. The format: a
 * header of 256 little-endian uint32 (magic 20240328, version 1 or 2, the vocabulary size, and
 * in version 2 the <|endoftext|> id; version 1 is GPT-2's 50257 tokens with 50256 as that id),
 * then per token one byte of length (1-255) and that many bytes. Read whole and checked as
 * hostile input: every count against what the file holds, the file and the offset named. Only
 * decoding: GPT-2's merges, which encoding needs, are not in the file (llm.c decodes only). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"
#include "../runtime/error.h"

#define TOK_MAGIC 20240328u
#define TOK_MAX_VOCAB (1 << 24)
#define TOK_HINT "HINT: llm.c's train_gpt2.py (or its dev/download_starter_pack.sh) writes gpt2_tokenizer.bin"

struct dpt_tokenizer {
    int32_t vocab, eot;
    unsigned char *file; /* the file as read: token i's length at at[i] - 1, its bytes from at[i] */
    size_t *at;
};

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

dpt_tokenizer *dpt_tokenizer_load(const char *path, dpt_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        dpt_errorf(err, "--tokenizer %s: %s\n" TOK_HINT, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    /* the largest a valid file can be: the header and 2^24 tokens of 256 bytes */
    const long long most = 1024LL + (long long)TOK_MAX_VOCAB * 256;
    const char *not_one = fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) ? "not a regular file"
                          : st.st_size < 1024                                ? "shorter than its 1024-byte header"
                          : st.st_size > most                                ? "larger than any vocabulary's"
                                                                             : NULL;
    if (not_one) {
        dpt_errorf(err, "--tokenizer %s: not a tokenizer file (%s)\n" TOK_HINT, path, not_one);
        fclose(f);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    unsigned char *all = malloc(size);
    if (!all) dpt_fatal("out of host memory reading %s (%zu bytes)", path, size);
    size_t got = fread(all, 1, size, f);
    fclose(f);
    dpt_tokenizer *t = NULL;
    if (got != size) {
        dpt_errorf(err, "--tokenizer %s: read %zu of its %zu bytes\n" TOK_HINT, path, got, size);
        goto done;
    }
    uint32_t magic = le32(all), version = le32(all + 4), vocab = le32(all + 8), eot = le32(all + 12);
    if (magic != TOK_MAGIC || (version != 1 && version != 2)) {
        dpt_errorf(err, "--tokenizer %s: magic %u version %u, not llm.c's tokenizer (magic %u, version 1 or 2)\n" TOK_HINT,
                   path, magic, version, TOK_MAGIC);
        goto done;
    }
    if (version == 1) eot = 50256; /* llm.c: version 1 is GPT-2's, without the id in the header */
    if (vocab < 1 || vocab > TOK_MAX_VOCAB || (version == 1 && vocab != 50257) || eot >= vocab) {
        dpt_errorf(err, "--tokenizer %s: a vocabulary of %u tokens with <|endoftext|> = %u (version %u) is not one "
                        "(1 to %d tokens, the id below them; version 1 is GPT-2's 50257)\n" TOK_HINT,
                   path, vocab, eot, version, TOK_MAX_VOCAB);
        goto done;
    }
    t = calloc(1, sizeof *t);
    if (!t) dpt_fatal("out of host memory");
    t->vocab = (int32_t)vocab, t->eot = (int32_t)eot;
    t->at = malloc((size_t)vocab * sizeof *t->at);
    if (!t->at) dpt_fatal("out of host memory for a tokenizer of %u tokens", vocab);
    size_t at = 1024;
    bool whole = true;
    for (uint32_t i = 0; i < vocab && whole; i++) {
        if (at >= size || all[at] == 0 || all[at] > size - at - 1) {
            dpt_errorf(err, "--tokenizer %s: token %u at byte %zu: %s\n" TOK_HINT, path, i, at,
                       at >= size    ? "the file ends before it (truncated?)"
                       : all[at] == 0 ? "a length of 0 (every token has at least one byte)"
                                      : "its bytes run past the end of the file (truncated?)");
            whole = false;
            break;
        }
        t->at[i] = at + 1;
        at += 1 + (size_t)all[at];
    }
    if (whole && at == size) { /* every token read, nothing after them */
        t->file = all, all = NULL;
    } else {
        if (whole)
            dpt_errorf(err, "--tokenizer %s: %zu bytes after its %u tokens (not llm.c's layout, or another file "
                            "appended)\n" TOK_HINT,
                       path, size - at, vocab);
        dpt_tokenizer_free(t);
        t = NULL;
    }
done:
    free(all);
    return t;
}

void dpt_tokenizer_free(dpt_tokenizer *t)
{
    if (!t) return;
    free(t->at), free(t->file), free(t);
}

int32_t dpt_tokenizer_vocab(const dpt_tokenizer *t)
{
    return t->vocab;
}

int32_t dpt_tokenizer_eot(const dpt_tokenizer *t)
{
    return t->eot;
}

const unsigned char *dpt_tokenizer_bytes(const dpt_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->vocab) {
        *len = 0;
        return NULL;
    }
    *len = t->file[t->at[id] - 1];
    return t->file + t->at[id];
}
