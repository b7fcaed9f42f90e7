/* text_tokens: text files -> token shards in llm.c's format, for [data] source = tokens: byte-level
 * (vocab_size = 256, every byte one token, no tokenizer needed), or GPT-2's tokens with
 * --tokenizer (a folder of Hugging Face's vocab.json and merges.txt, or llm.c's
 * gpt2_tokenizer.bin; vocab_size = 50257), each file's text then preceded by <|endoftext|>, the
 * documents' separator in llm.c's and GPT-2's data.
 *
 *   build/tools/text_tokens [--tokenizer PATH] [--val-fraction F] [--shard-tokens N] OUTDIR FILE...
 *
 * Each file's last F of bytes (default 0.05, at a line start where there is one) go to the
 * validation set, the rest to training, so both sets sample every file; the files are read in
 * the order given. Writes OUTDIR/train_NNNNNN.bin and OUTDIR/val_NNNNNN.bin, each at most N
 * tokens (default 100,000,000): a 256 x int32 little-endian header (magic 20240520, version
 * 1, the token count) and the tokens as uint16. Files are written as dptrain writes its own
 * (a temporary name no one can predict or plant a link at, renamed), so a reader never sees half
 * a shard. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dpt.h"

enum { MAGIC = 20240520, VERSION = 1, HEADER_INTS = 256 };

typedef struct writer {
    const char *dir, *kind;
    int64_t max_tokens, count, total;
    int index;
    uint16_t *buf;
} writer;

static void die(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "text_tokens: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    exit(1);
}

static void flush_shard(writer *w)
{
    if (w->count == 0) return;
    /* the path's length computed, never cut; the file made as dptrain makes its own (a temporary
     * random name, O_EXCL: never through a planted link; fsync'ed, renamed, the folder
     * fsync'ed) */
    int len = snprintf(NULL, 0, "%s/%s_%06d.bin", w->dir, w->kind, w->index);
    char *path = malloc((size_t)len + 1);
    if (!path) die("out of memory for %s%s", "a path", "");
    snprintf(path, (size_t)len + 1, "%s/%s_%06d.bin", w->dir, w->kind, w->index++);
    dpt_atomic_file a;
    dpt_error err;
    if (!dpt_atomic_file_open(&a, path, &err)) die("%s%s", err.msg, "");
    int32_t header[HEADER_INTS] = {MAGIC, VERSION, (int32_t)w->count};
    bool ok = fwrite(header, sizeof header, 1, a.f) == 1 && fwrite(w->buf, 2, (size_t)w->count, a.f) == (size_t)w->count;
    if (!dpt_atomic_file_close(&a, ok, &err)) die("%s%s", err.msg, "");
    printf("text_tokens: %s: %lld tokens\n", path, (long long)w->count);
    free(path);
    w->total += w->count;
    w->count = 0;
}

static void put_id(writer *w, int32_t id)
{
    w->buf[w->count++] = (uint16_t)id;
    if (w->count == w->max_tokens) flush_shard(w);
}

/* text's tokens: its bytes, or the tokenizer's ids after <|endoftext|> (first: this file's text
 * starts a document). */
static void put(writer *w, const dpt_tokenizer *tok, const unsigned char *text, size_t n, bool first)
{
    if (!tok) {
        for (size_t i = 0; i < n; i++)
            put_id(w, text[i]);
        return;
    }
    if (n == 0) return;
    if (first) put_id(w, dpt_tokenizer_eot(tok));
    size_t count;
    int32_t *ids = dpt_tokenizer_encode(tok, (const char *)text, n, &count);
    for (size_t i = 0; i < count; i++)
        put_id(w, ids[i]);
    free(ids);
}

int main(int argc, char **argv)
{
    double val_fraction = 0.05;
    int64_t shard_tokens = 100000000;
    int a = 1;
    dpt_tokenizer *tok = NULL;
    for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
        char *end = NULL;
        if (!strcmp(argv[a], "--tokenizer") && a + 1 < argc && !tok) {
            dpt_error err;
            if (!(tok = dpt_tokenizer_load(argv[++a], &err))) die("%s%s", err.msg, "");
            if (!dpt_tokenizer_can_encode(tok))
                die("--tokenizer %s: a byte has no token of its own, so text cannot be encoded with it%s", argv[a], "");
            if (dpt_tokenizer_vocab(tok) > 65536)
                die("--tokenizer %s: more than 65,536 tokens, more than a shard's uint16 holds%s", argv[a], "");
        } else if (!strcmp(argv[a], "--val-fraction") && a + 1 < argc) {
            val_fraction = strtod(argv[++a], &end);
            if (*end || !(val_fraction >= 0 && val_fraction < 1)) die("--val-fraction %s: %s", argv[a], "not in [0, 1)");
        } else if (!strcmp(argv[a], "--shard-tokens") && a + 1 < argc) {
            shard_tokens = strtoll(argv[++a], &end, 10);
            if (*end || shard_tokens < 2 || shard_tokens > INT32_MAX) die("--shard-tokens %s: %s", argv[a], "not in [2, 2^31)");
        } else {
            die("unknown option %s%s", argv[a], "\nusage: text_tokens [--tokenizer PATH] [--val-fraction F] [--shard-tokens N] OUTDIR FILE...");
        }
    }
    if (argc - a < 2) die("usage: %s%s", "text_tokens [--tokenizer PATH] [--val-fraction F] [--shard-tokens N] OUTDIR FILE...", "");
    const char *dir = argv[a++];
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) die("cannot make %s: %s", dir, strerror(errno));
    writer train = {dir, "train", shard_tokens, 0, 0, 0, malloc((size_t)shard_tokens * 2)};
    writer val = {dir, "val", shard_tokens, 0, 0, 0, malloc((size_t)shard_tokens * 2)};
    if (!train.buf || !val.buf) die("out of memory for %s %s", "a shard", "buffer");
    for (; a < argc; a++) {
        FILE *f = fopen(argv[a], "rb");
        if (!f) die("cannot read %s: %s", argv[a], strerror(errno));
        unsigned char *text = NULL;
        size_t n = 0, cap = 0;
        for (;;) {
            if (n == cap && !(text = realloc(text, cap = cap ? 2 * cap : 1 << 16))) die("out of memory reading %s%s", argv[a], "");
            size_t got = fread(text + n, 1, cap - n, f);
            if (got == 0) break;
            n += got;
        }
        if (ferror(f)) die("cannot read %s: %s", argv[a], strerror(errno));
        fclose(f);
        size_t cut = n - (size_t)((double)n * val_fraction);
        size_t line = cut;
        while (line > 0 && line < n && text[line - 1] != '\n')
            line--;
        if (line > 0) cut = line; /* the validation part starts at a line */
        put(&train, tok, text, cut, true);
        put(&val, tok, text + cut, n - cut, true);
        free(text);
    }
    flush_shard(&train);
    flush_shard(&val);
    if (train.total == 0) die("no training text in the files given%s%s", "", "");
    printf("text_tokens: %lld training and %lld validation tokens (%s, [data] vocab_size = %d) in %s\n",
           (long long)train.total, (long long)val.total, tok ? "the tokenizer's" : "bytes", tok ? dpt_tokenizer_vocab(tok) : 256,
           dir);
    free(train.buf), free(val.buf);
    dpt_tokenizer_free(tok);
    return 0;
}
