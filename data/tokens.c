/* tokens.c: [data] source = tokens, token shards in llm.c's format: a header of 256 little-endian
 * int32 (magic 20240520, version 1, the token count, the rest zero), then that many uint16
 * tokens. [data] train and val are glob patterns; their files, in name order, are mapped
 * read-only and checked as hostile input (header, exact size, every token below the
 * vocabulary) before the first step.
 *
 * Sample j of a shard is the seq_len tokens from offset j * seq_len and, as its targets, the
 * same span one token later: unshuffled, a batch of B samples is exactly llm.c's batch (the
 * B * T + 1 tokens from offset i * B * T cut into B rows), and under DDP a global batch covers
 * the same tokens as llm.c's (each rank takes its own rows of it). A shard contributes
 * (tokens - 1) / seq_len samples; samples never cross shards. The loader's position in the
 * checkpoint makes a resume continue on the exact next sample. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpt.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"

enum { TOKENS_MAGIC = 20240520, TOKENS_VERSION = 1, TOKENS_HEADER_INTS = 256, LLMC_MODEL_MAGIC = 20240326 };

#define TOKENS_HINT                                                                                          \
    "HINT: token shards are llm.c's format (its data scripts write them); tools/text_tokens turns any text " \
    "into byte-level shards (GPT-2's tokens with --tokenizer), and 'make fortunes' writes build/fortunes/ "    \
    "from Debian's fortunes"

typedef struct shard {
    const uint16_t *tokens;
    int64_t ntok;
    int64_t first; /* index of its first sample in the set */
    void *map;
    size_t map_len;
} shard;

typedef struct token_set {
    int nshards;
    shard *shards;
    int64_t seq_len;
} token_set;

static void token_set_free(void *source)
{
    token_set *s = source;
    if (!s) return;
    for (int i = 0; i < s->nshards; i++)
        if (s->shards[i].map) munmap(s->shards[i].map, s->shards[i].map_len);
    free(s->shards);
    free(s);
}

static void tokens_get(const dpt_dataset *ds, int64_t index, void *const *dst)
{
    const token_set *s = ds->source;
    int lo = 0, hi = s->nshards - 1; /* the last shard whose first sample is <= index */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->shards[mid].first <= index)
            lo = mid;
        else
            hi = mid - 1;
    }
    const uint16_t *t = s->shards[lo].tokens + (index - s->shards[lo].first) * s->seq_len;
    int32_t *x = dst[0], *y = dst[1];
    for (int64_t i = 0; i < s->seq_len; i++)
        x[i] = t[i], y[i] = t[i + 1];
}

/* Map one shard and check it; false with err naming the file. */
static bool map_shard(const char *path, int64_t seq_len, int64_t vocab, shard *out, dpt_error *err)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dpt_errorf(err, "token shard %s: %s\n" TOKENS_HINT, path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return dpt_errorf(err, "token shard %s is not a regular file\n" TOKENS_HINT, path);
    }
    int32_t header[TOKENS_HEADER_INTS];
    if (st.st_size < (off_t)sizeof header || pread(fd, header, sizeof header, 0) != (ssize_t)sizeof header) {
        close(fd);
        return dpt_errorf(err, "token shard %s: %lld bytes, shorter than its 1024-byte header\n" TOKENS_HINT, path,
                          (long long)st.st_size);
    }
    if (header[0] != TOKENS_MAGIC) {
        close(fd);
        return dpt_errorf(err, "token shard %s: magic %d, expected %d (llm.c's token files)%s\n" TOKENS_HINT, path,
                          header[0], TOKENS_MAGIC,
                          header[0] == LLMC_MODEL_MAGIC ? "; this is an llm.c model checkpoint, not tokens" : "");
    }
    if (header[1] != TOKENS_VERSION) {
        close(fd);
        return dpt_errorf(err, "token shard %s: version %d; only version 1 (uint16 tokens) is supported\n" TOKENS_HINT,
                          path, header[1]);
    }
    int64_t ntok = header[2];
    if (ntok < 0 || (int64_t)st.st_size != (int64_t)sizeof header + 2 * ntok) {
        close(fd);
        return dpt_errorf(err, "token shard %s: the header says %lld tokens (%lld bytes with the header) but the file "
                               "has %lld bytes (truncated or not a token file)\n" TOKENS_HINT,
                          path, (long long)ntok, (long long)(sizeof header + 2 * (uint64_t)(ntok < 0 ? 0 : ntok)),
                          (long long)st.st_size);
    }
    if (ntok < seq_len + 1) {
        close(fd);
        return dpt_errorf(err, "token shard %s holds %lld tokens, fewer than one sample of [data] seq_len = %lld plus "
                               "its next token\nHINT: use a smaller seq_len or a longer text",
                          path, (long long)ntok, (long long)seq_len);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return dpt_errorf(err, "token shard %s: cannot map it: %s", path, strerror(errno));
    const uint16_t *t = (const uint16_t *)((const char *)map + sizeof header);
    for (int64_t i = 0; i < ntok; i++)
        if (t[i] >= vocab) {
            unsigned bad = t[i];
            munmap(map, (size_t)st.st_size);
            return dpt_errorf(err, "token shard %s: token %lld is %u, not below [data] vocab_size = %lld\n"
                                   "HINT: GPT-2's tokenizer has 50257 tokens, byte-level text 256; set vocab_size "
                                   "to the tokenizer's",
                              path, (long long)i, bad, (long long)vocab);
        }
    *out = (shard){.tokens = t, .ntok = ntok, .map = map, .map_len = (size_t)st.st_size};
    dpt_input_note(path, "the token shard", false); /* mapped: truncating it would fault the reader */
    return true;
}

/* The folder glob could not read, and why (glob's error callback; opening data is one thread's). */
static char *glob_failed_at;
static int glob_failed_errno;

static int glob_failed(const char *path, int errnum)
{
    free(glob_failed_at);
    glob_failed_at = dpt_strf("%s", path);
    glob_failed_errno = errnum;
    return 1; /* stop: GLOB_ERR */
}

/* A set's fields and task, from [data] seq_len and vocab_size. */
static dpt_dataset *new_set(const dpt_config *cfg)
{
    int64_t seq_len = dpt_config_int(cfg, "data", "seq_len"), vocab = dpt_config_int(cfg, "data", "vocab_size");
    dpt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) dpt_fatal("out of host memory");
    ds->num_classes = (int)vocab;
    ds->nfields = 2;
    ds->fields[0] = (dpt_field){.name = "tokens", .dtype = DPT_I32, .ndim = 1, .shape = {seq_len}};
    ds->fields[1] = (dpt_field){.name = "targets", .dtype = DPT_I32, .ndim = 1, .shape = {seq_len}, .target = true};
    ds->task = (dpt_task){.loss = "cross_entropy", .metrics = DPT_METRIC_PERPLEXITY, .unit = "tok"};
    return ds;
}

/* --sample and --export need no tokens, --eval and --predict only val's: the set as the config
 * describes it, no shard read (a corpus of billions of tokens is not mapped and scanned). */
static void no_samples(const dpt_dataset *ds, int64_t index, void *const *dst)
{
    (void)dst;
    dpt_fatal("internal error: sample %lld of %s, which holds none", (long long)index, ds->name);
}

static dpt_dataset *tokens_describe(const dpt_config *cfg, dpt_error *err)
{
    (void)err;
    dpt_dataset *ds = new_set(cfg);
    ds->get = no_samples; /* a set of fields (get NULL would be an image set's bytes) */
    snprintf(ds->name, sizeof ds->name, "tokens, not read (this command trains nothing)");
    return ds;
}

static dpt_dataset *open_set(const dpt_config *cfg, const char *key, const char *name, dpt_error *err)
{
    const char *pattern = dpt_config_str(cfg, "data", key);
    int64_t seq_len = dpt_config_int(cfg, "data", "seq_len"), vocab = dpt_config_int(cfg, "data", "vocab_size");
    if (!*pattern) {
        dpt_errorf(err, "%s: [data] source = tokens needs [data] %s, a glob of token shards\n" TOKENS_HINT,
                   dpt_config_where(cfg, "data", key), key);
        return NULL;
    }
    glob_t g;
    int rc = glob(pattern, GLOB_ERR, glob_failed, &g);
    if (rc != 0) {
        char *why = rc == GLOB_NOMATCH ? dpt_strf("no file matches")
                    : glob_failed_at
                        ? dpt_strf("cannot read the folder %s (%s)", glob_failed_at, strerror(glob_failed_errno))
                        : dpt_strf("cannot read a folder of the pattern");
        dpt_errorf(err, "%s: [data] %s = %s: %s\n" TOKENS_HINT, dpt_config_where(cfg, "data", key), key, pattern, why);
        free(why), free(glob_failed_at);
        glob_failed_at = NULL;
        if (rc != GLOB_NOMATCH) globfree(&g);
        return NULL;
    }
    token_set *s = calloc(1, sizeof *s);
    dpt_dataset *ds = new_set(cfg);
    if (!s || !(s->shards = calloc(g.gl_pathc, sizeof *s->shards))) dpt_fatal("out of host memory");
    s->seq_len = seq_len;
    int64_t n = 0, ntok = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        if (!map_shard(g.gl_pathv[i], seq_len, vocab, &s->shards[i], err)) {
            globfree(&g);
            token_set_free(s);
            free(ds);
            return NULL;
        }
        s->nshards++;
        s->shards[i].first = n;
        n += (s->shards[i].ntok - 1) / seq_len;
        ntok += s->shards[i].ntok;
    }
    ds->n = n;
    snprintf(ds->name, sizeof ds->name, "tokens %s (%zu shard%s, %lld tokens)", name, g.gl_pathc,
             g.gl_pathc == 1 ? "" : "s", (long long)ntok);
    globfree(&g);
    ds->get = tokens_get;
    ds->source = s;
    ds->free_source = token_set_free;
    return ds;
}

static bool tokens_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    *train = open_set(cfg, "train", "train", err);
    if (!*train) return false;
    *test = open_set(cfg, "val", "val", err);
    if (!*test) {
        dpt_dataset_free(*train);
        *train = NULL;
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- --predict --input */

typedef struct input_tokens {
    const uint16_t *toks; /* a token shard's */
    const uint8_t *bytes; /* or a text's bytes (a byte-level model) */
    int64_t n, seq_len;
    void *map;
    size_t map_len;
} input_tokens;

static void input_free(void *source)
{
    input_tokens *s = source;
    if (s && s->map) munmap(s->map, s->map_len);
    free(s);
}

/* Row j: the seq_len tokens from j * seq_len; the last row the input's last seq_len tokens, so
 * it predicts the token after the input's end. No targets (unlabelled). */
static void input_get(const dpt_dataset *ds, int64_t index, void *const *dst)
{
    const input_tokens *s = ds->source;
    int64_t at = index * s->seq_len;
    if (at + s->seq_len > s->n) at = s->n - s->seq_len;
    int32_t *x = dst[0], *y = dst[1];
    for (int64_t i = 0; i < s->seq_len; i++)
        x[i] = s->toks ? s->toks[at + i] : s->bytes[at + i], y[i] = 0;
}

bool dpt_tokens_open_input(const char *path, const dpt_dataset *like, dpt_dataset **out, dpt_error *err)
{
    *out = NULL;
    const token_set *ts = like->source;
    int64_t seq_len = ts->seq_len, vocab = like->num_classes;
    const char *hint = "HINT: --input takes a token shard in llm.c's format, or for a byte-level model "
                       "([data] vocab_size = 256) any file, read as bytes";
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0) return dpt_errorf(err, "--input %s: %s\n%s", path, strerror(errno), hint);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        close(fd);
        return dpt_errorf(err, "--input %s: %s\n%s", path, st.st_size == 0 && S_ISREG(st.st_mode) ? "empty"
                                                                                                  : "not a regular file",
                          hint);
    }
    int32_t header[TOKENS_HEADER_INTS] = {0};
    bool is_shard = st.st_size >= (off_t)sizeof header && pread(fd, header, sizeof header, 0) == (ssize_t)sizeof header &&
                 header[0] == TOKENS_MAGIC;
    /* a text for a byte-level model: its bytes mapped from this descriptor (a shard is mapped and
     * checked by map_shard) */
    void *bytes = is_shard || vocab != 256 ? MAP_FAILED : mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (!is_shard && vocab != 256)
        return dpt_errorf(err, "--input %s: not a token shard (its first int32 is not %d), and the model's vocabulary "
                               "has %lld tokens, not the 256 bytes of a byte-level model\n"
                               "HINT: write the input as an llm.c token shard with the model's tokenizer",
                          path, TOKENS_MAGIC, (long long)vocab);
    input_tokens *s = calloc(1, sizeof *s);
    if (!s) dpt_fatal("out of host memory");
    s->seq_len = seq_len;
    if (is_shard) { /* checked as a training shard is, down to one sample */
        shard one;
        if (!map_shard(path, 0, vocab, &one, err)) {
            free(s);
            return dpt_error_prefix(err, "--input: ");
        }
        s->toks = one.tokens, s->n = one.ntok, s->map = one.map, s->map_len = one.map_len;
    } else {
        if (bytes == MAP_FAILED) {
            free(s);
            return dpt_errorf(err, "--input %s: cannot map it: %s", path, strerror(map_errno));
        }
        s->bytes = bytes, s->n = (int64_t)st.st_size, s->map = bytes, s->map_len = (size_t)st.st_size;
    }
    if (s->n < seq_len) {
        int64_t n = s->n;
        input_free(s);
        return dpt_errorf(err, "--input %s: %lld tokens, fewer than one sample of [data] seq_len = %lld\n"
                               "HINT: --set data.seq_len=%lld (a GPT takes any length up to its block_size)",
                          path, (long long)n, (long long)seq_len, (long long)n);
    }
    dpt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) dpt_fatal("out of host memory for a dataset");
    ds->n = (s->n + seq_len - 1) / seq_len;
    snprintf(ds->name, sizeof ds->name, "%s (%lld tokens)", is_shard ? "tokens" : "bytes", (long long)s->n);
    ds->num_classes = like->num_classes, ds->task = like->task, ds->unlabelled = true;
    ds->nfields = like->nfields;
    memcpy(ds->fields, like->fields, sizeof ds->fields);
    ds->get = input_get;
    ds->source = s;
    ds->free_source = input_free;
    *out = ds;
    dpt_input_note(path, "the --input file", false);
    return true;
}

static bool tokens_open_test(const dpt_config *cfg, dpt_dataset **test, dpt_error *err)
{
    return (*test = open_set(cfg, "val", "val", err)) != NULL;
}

static const dpt_data_impl tokens_impl = {.open = tokens_open, .describe = tokens_describe, .open_test = tokens_open_test};

static const dpt_config_key tokens_keys[] = {
    {NULL, "train", DPT_KEY_STRING, "", 0, 0, NULL, "glob of the training token shards (llm.c's format), e.g. data/*_train_*.bin", 0},
    {NULL, "val", DPT_KEY_STRING, "", 0, 0, NULL, "glob of the validation token shards", 0},
    {NULL, "seq_len", DPT_KEY_INT, "64", 1, 1 << 20, NULL, "tokens per sample (T); each sample's targets are the next tokens", 0},
    {NULL, "vocab_size", DPT_KEY_INT, "50257", 2, 65536, NULL,
     "tokens are ids below it (GPT-2's tokenizer 50257, byte-level text 256); the model's vocabulary", 0},
};
DPT_BUILTIN(data_tokens) = {DPT_KIND_DATA, "tokens", "token shards in llm.c's format (uint16 tokens), for language models",
                            tokens_keys, DPT_COUNT(tokens_keys), &tokens_impl};
