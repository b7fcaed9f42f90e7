/* text_tokens: text files -> token shards in llm.c's format, for [data] source = tokens: byte-level
 * (vocab_size = 256, every byte one token, no tokenizer needed), or GPT-2's tokens with
 * --tokenizer (a folder of Hugging Face's vocab.json and merges.txt or tokenizer.json, or llm.c's
 * gpt2_tokenizer.bin; vocab_size = 50257), each file's text then preceded by <|endoftext|>, the
 * documents' separator in llm.c's and GPT-2's data.
 *
 *   build/tools/text_tokens [--tokenizer PATH] [--val-fraction F] [--shard-tokens N] [--chunk-bytes N]
 *                           OUTDIR FILE...
 *
 * Each file's last F of bytes (default 0.05, at a line start where there is one) go to the
 * validation set, the rest to training, so both sets sample every file; the files are read in
 * the order given, --chunk-bytes at a time (default 16 MiB: a corpus larger than memory is
 * fine). Writes OUTDIR/train_NNNNNN.bin and OUTDIR/val_NNNNNN.bin, each at most N
 * tokens (default 100,000,000): a 256 x int32 little-endian header (magic 20240520, version
 * 1, the token count) and the tokens as uint16. Files are written as dptrain writes its own
 * (a temporary name no one can predict or plant a link at, renamed), so a reader never sees half
 * a shard. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Where a file's bytes come from: the file itself (read in parts, at any offset), or, for a pipe,
 * all of it read first. */
typedef struct text_source {
    const char *path;
    int fd;
    unsigned char *mem; /* a pipe's bytes (NULL: read fd at the offset) */
    size_t size;
} text_source;

static void read_at(const text_source *s, unsigned char *dst, size_t n, size_t at)
{
    if (s->mem) {
        memcpy(dst, s->mem + at, n);
        return;
    }
    size_t got;
    bool read = dpt_read_at(s->fd, dst, n, at, &got);
    if (got < n) die("cannot read %s: %s", s->path, read ? "it got shorter while being read" : strerror(errno));
}

static text_source open_source(const char *path)
{
    text_source s = {.path = path, .fd = open(path, O_RDONLY | O_CLOEXEC)};
    struct stat st;
    if (s.fd < 0 || fstat(s.fd, &st) != 0) die("cannot read %s: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode)) {
        s.size = (size_t)st.st_size;
        return s;
    }
    size_t cap = 0; /* a pipe (<(command), /dev/stdin): its size is known once it is read */
    for (;;) {
        if (s.size == cap && !(s.mem = realloc(s.mem, cap = cap ? 2 * cap : 1 << 16))) die("out of memory reading %s%s", path, "");
        ssize_t r = read(s.fd, s.mem + s.size, cap - s.size);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die("cannot read %s: %s", path, strerror(errno));
        if (r == 0) break;
        s.size += (size_t)r;
    }
    return s;
}

/* The validation part starts at the line start at or before size - size * fraction (none
 * before it: there). */
static size_t val_start(const text_source *s, double fraction)
{
    size_t cut = s->size - (size_t)((double)s->size * fraction), line = cut;
    if (cut == 0 || cut >= s->size) return cut;
    unsigned char block[65536];
    while (line > 0) {
        size_t n = line < sizeof block ? line : sizeof block;
        read_at(s, block, n, line - n);
        for (size_t i = n; i > 0; i--)
            if (block[i - 1] == '\n') return line - n + i;
        line -= n;
    }
    return cut;
}

/* Bytes [from, to) of the source as tokens: each byte, or the tokenizer's ids after
 * <|endoftext|> (the part starts a document), read and encoded `chunk` bytes at a time so that
 * a file larger than memory is written in memory of its largest piece; the ids are those of the
 * whole part (dpt_tokenizer_encode_some). */
static void put(writer *w, const dpt_tokenizer *tok, const text_source *s, size_t from, size_t to, size_t chunk)
{
    if (from == to) return;
    if (tok) put_id(w, dpt_tokenizer_eot(tok));
    unsigned char *buf = NULL;
    size_t have = 0, cap = 0;
    while (from < to || have) {
        /* at least as much again as is held: a piece longer than a part (a megabyte without a
         * space) is scanned again only as often as its length doubles */
        size_t want = chunk > have ? chunk : have, n = to - from < want ? to - from : want;
        if (have + n > cap && !(buf = realloc(buf, cap = have + n + 1))) die("out of memory reading %s%s", s->path, "");
        read_at(s, buf + have, n, from);
        from += n, have += n;
        if (!tok) {
            for (size_t i = 0; i < have; i++)
                put_id(w, buf[i]);
            have = 0;
            continue;
        }
        size_t used, count;
        int32_t *ids = dpt_tokenizer_encode_some(tok, (const char *)buf, have, from == to, &used, &count);
        for (size_t i = 0; i < count; i++)
            put_id(w, ids[i]);
        free(ids);
        memmove(buf, buf + used, have - used);
        have -= used;
        if (from == to && have) die("internal error: %s: bytes left after the last part%s", s->path, "");
    }
    free(buf);
}

int main(int argc, char **argv)
{
    double val_fraction = 0.05;
    int64_t shard_tokens = 100000000;
    size_t chunk = (size_t)1 << 24;
    int a = 1;
    dpt_tokenizer *tok = NULL;
    for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
        char *end = NULL;
        if (!strcmp(argv[a], "--tokenizer") && a + 1 < argc) {
            if (tok) die("--tokenizer %s: given twice (the shards hold one tokenizer's ids)%s", argv[a + 1], "");
            dpt_error err;
            if (!(tok = dpt_tokenizer_load(argv[++a], &err))) die("%s%s", err.msg, "");
            if (!dpt_tokenizer_can_encode(tok))
                die("--tokenizer %s: a byte has no token of its own, so text cannot be encoded with it%s", argv[a], "");
            if (dpt_tokenizer_vocab(tok) > 65536)
                die("--tokenizer %s: more than 65,536 tokens, more than a shard's uint16 holds%s", argv[a], "");
        } else if (!strcmp(argv[a], "--val-fraction") && a + 1 < argc) {
            val_fraction = strtod(argv[++a], &end);
            if (*end || !(val_fraction >= 0 && val_fraction < 1)) die("--val-fraction %s: %s", argv[a], "not in [0, 1)");
        } else if (!strcmp(argv[a], "--chunk-bytes") && a + 1 < argc) { /* read at once (tests: small) */
            long long c = strtoll(argv[++a], &end, 10);
            if (*end || c < 1 || c > (1LL << 34)) die("--chunk-bytes %s: %s", argv[a], "not in [1, 2^34]");
            chunk = (size_t)c;
        } else if (!strcmp(argv[a], "--shard-tokens") && a + 1 < argc) {
            shard_tokens = strtoll(argv[++a], &end, 10);
            if (*end || shard_tokens < 2 || shard_tokens > INT32_MAX) die("--shard-tokens %s: %s", argv[a], "not in [2, 2^31)");
        } else {
            die("unknown option %s%s", argv[a], "\nusage: text_tokens [--tokenizer PATH] [--val-fraction F] [--shard-tokens N] [--chunk-bytes N] OUTDIR FILE...");
        }
    }
    if (argc - a < 2) die("usage: %s%s", "text_tokens [--tokenizer PATH] [--val-fraction F] [--shard-tokens N] [--chunk-bytes N] OUTDIR FILE...", "");
    const char *dir = argv[a++];
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) die("cannot make %s: %s", dir, strerror(errno));
    writer train = {dir, "train", shard_tokens, 0, 0, 0, malloc((size_t)shard_tokens * 2)};
    writer val = {dir, "val", shard_tokens, 0, 0, 0, malloc((size_t)shard_tokens * 2)};
    if (!train.buf || !val.buf) die("out of memory for %s %s", "a shard", "buffer");
    for (; a < argc; a++) {
        text_source src = open_source(argv[a]);
        size_t cut = val_start(&src, val_fraction);
        put(&train, tok, &src, 0, cut, chunk);
        put(&val, tok, &src, cut, src.size, chunk);
        close(src.fd);
        free(src.mem);
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
