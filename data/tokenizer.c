/* tokenizer.c: GPT-2's tokenizer from the files people have it in, for --sample (prompts as
 * text, samples printed as text), tools/text_tokens (GPT-2 token shards from any text) and
 * programs of their own (dpt.h):
 *
 * - llm.c's tokenizer file (gpt2_tokenizer.bin, written by its train_gpt2.py): a header of 256
 *   little-endian uint32 (magic 20240328, version 1 or 2, the vocabulary size, and in version 2
 *   the <|endoftext|> id; version 1 is GPT-2's 50257 tokens with 50256 as that id), then per
 *   token one byte of length (1-255) and that many bytes. It holds no merges: a token's merge
 *   rank is its id, as in tiktoken's GPT-2 encoding (whose ranks are GPT-2's ids), so the
 *   pairs of tokens whose bytes join into a token are that token's merges.
 * - Hugging Face's (and OpenAI's) GPT-2 files: vocab.json (encoder.json), {"token": id}, and
 *   merges.txt (vocab.bpe), a "#version" line then "left right" per merge, lowest rank first;
 *   tokens written in GPT-2's byte-to-character alphabet (bytes_to_unicode in encoder.py:
 *   printable bytes as themselves, the other 68 as U+0100 on).
 * - Hugging Face's tokenizer.json, when it is that kind of tokenizer (a BPE model, a ByteLevel
 *   pre-tokenizer with GPT-2's pattern, no normalizer): its model's vocab and merges (as "a b"
 *   strings or ["a", "b"] pairs) and its added tokens. Another kind (SentencePiece, another
 *   pattern) is refused naming what differs, not encoded differently from its own library.
 *
 * Every file is read whole and checked as hostile input (counts against what it holds, ids
 * dense and in range, every merge's tokens in the vocabulary), refused naming the file and the
 * token, line or byte. Encoding itself is bpe.c's. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bpe.h"
#include "data.h"
#include "../runtime/error.h"
#include "../runtime/json.h"

#define TOK_MAGIC 20240328u
#define TOK_MAX_VOCAB (1 << 24)
#define TOK_HINT                                                                                                  \
    "HINT: llm.c's train_gpt2.py (or its dev/download_starter_pack.sh) writes gpt2_tokenizer.bin; a folder with "  \
    "Hugging Face's vocab.json and merges.txt is read too"

struct dpt_tokenizer {
    int32_t vocab, eot;
    unsigned char *file; /* token i's length (1-255) at file[at[i] - 1], its bytes from at[i] */
    size_t *at;
    dpt_bpe *bpe; /* NULL: the file cannot encode (a byte has no token of its own) */
};

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void merges_from_ids(dpt_tokenizer *t);

static dpt_tokenizer *load_llmc(const char *path, dpt_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO is refused, not waited on */
    if (fd < 0) {
        dpt_errorf(err, "--tokenizer %s: %s\n" TOK_HINT, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    /* the largest a valid file can be: the header and 2^24 tokens of 256 bytes */
    const long long most = 1024LL + (long long)TOK_MAX_VOCAB * 256;
    const char *not_one = fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ? "not a regular file"
                          : st.st_size < 1024                        ? "shorter than its 1024-byte header"
                          : st.st_size > most                        ? "larger than any vocabulary's"
                                                                     : NULL;
    if (not_one) {
        dpt_errorf(err, "--tokenizer %s: not a tokenizer file (%s)\n" TOK_HINT, path, not_one);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    unsigned char *all = malloc(size);
    if (!all) dpt_fatal("out of host memory reading %s (%zu bytes)", path, size);
    size_t got;
    dpt_read_at(fd, all, size, 0, &got);
    close(fd);
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
        merges_from_ids(t);
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

/* ---------------------------------------------------------------- tokens by their bytes */

typedef struct by_bytes {
    int32_t *slot; /* token ids, -1 empty */
    uint64_t mask;
} by_bytes;

static uint64_t bytes_hash(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h ^ (h >> 31);
}

static int32_t *slot_of(const dpt_tokenizer *t, const by_bytes *ix, const unsigned char *p, size_t n)
{
    for (uint64_t i = bytes_hash(p, n) & ix->mask;; i = (i + 1) & ix->mask) {
        int32_t id = ix->slot[i];
        if (id < 0) return &ix->slot[i];
        size_t len;
        const unsigned char *b = dpt_tokenizer_bytes(t, id, &len);
        if (len == n && !memcmp(b, p, n)) return &ix->slot[i];
    }
}

/* Every token by its bytes (of two with the same bytes, the lower id). */
static void index_tokens(const dpt_tokenizer *t, by_bytes *ix)
{
    uint64_t n = 1;
    while (n < 2 * (uint64_t)t->vocab)
        n *= 2;
    ix->mask = n - 1;
    ix->slot = malloc(n * sizeof *ix->slot);
    if (!ix->slot) dpt_fatal("out of host memory indexing a tokenizer of %d tokens", t->vocab);
    memset(ix->slot, 0xff, n * sizeof *ix->slot);
    for (int32_t id = 0; id < t->vocab; id++) {
        size_t len;
        const unsigned char *b = dpt_tokenizer_bytes(t, id, &len);
        int32_t *s = slot_of(t, ix, b, len);
        if (*s < 0) *s = id;
    }
}

static int32_t find_bytes(const dpt_tokenizer *t, const by_bytes *ix, const unsigned char *p, size_t n)
{
    return *slot_of(t, ix, p, n);
}

/* The encoder over the single bytes' tokens; false (t->bpe stays NULL) when a byte has none. */
static bool start_bpe(dpt_tokenizer *t, const by_bytes *ix)
{
    int32_t byte_id[256];
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        if ((byte_id[b] = find_bytes(t, ix, &c, 1)) < 0) return false;
    }
    t->bpe = dpt_bpe_new(byte_id);
    return true;
}

/* llm.c's file: token id's merges are the splits of its bytes into two tokens, of rank id (the
 * end-of-text token is no merge: text that spells it is encoded as ordinary text, as
 * tiktoken's encode_ordinary does). */
static void merges_from_ids(dpt_tokenizer *t)
{
    by_bytes ix;
    index_tokens(t, &ix);
    if (start_bpe(t, &ix))
        for (int32_t id = 0; id < t->vocab; id++) {
            size_t len;
            const unsigned char *b = dpt_tokenizer_bytes(t, id, &len);
            for (size_t cut = 1; cut < len && id != t->eot; cut++) {
                int32_t l = find_bytes(t, &ix, b, cut), r = l < 0 ? -1 : find_bytes(t, &ix, b + cut, len - cut);
                if (r >= 0) dpt_bpe_add(t->bpe, l, r, id, id);
            }
        }
    free(ix.slot);
}

/* ---------------------------------------------------------------- Hugging Face's files */

#define HF_HINT                                                                                                   \
    "HINT: GPT-2's tokenizer files are vocab.json and merges.txt (or tokenizer.json) of a Hugging Face GPT-2 "    \
    "(huggingface-cli download gpt2 vocab.json merges.txt; make gpt2-tokenizer fetches GPT-2's own), OpenAI's "   \
    "encoder.json and vocab.bpe, or llm.c's gpt2_tokenizer.bin"
#define HF_MAX_FILE ((off_t)1 << 28)

/* GPT-2's alphabet: byte b is written as the character byte_char[b]. */
static void byte_chars(uint32_t byte_char[256])
{
    uint32_t next = 256;
    for (int b = 0; b < 256; b++)
        byte_char[b] = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae ? (uint32_t)b : next++;
}

/* A token as written in the files -> its bytes (out holds len; returns the count), or -1 when a
 * character is outside the alphabet (added tokens such as "<|endoftext|>" are inside it). */
static int from_alphabet(const char *s, size_t len, const int16_t *char_byte, unsigned char *out)
{
    int n = 0;
    for (size_t i = 0; i < len;) {
        unsigned c = (unsigned char)s[i];
        uint32_t cp;
        size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : 0;
        if (k == 0 || len - i < k) return -1; /* the alphabet stops at U+0143: one or two bytes */
        cp = k == 1 ? c : ((c & 0x1f) << 6) | ((unsigned char)s[i + 1] & 0x3f);
        if (k == 2 && ((unsigned char)s[i + 1] & 0xc0) != 0x80) return -1;
        if (cp >= 512 || char_byte[cp] < 0) return -1;
        out[n++] = (unsigned char)char_byte[cp];
        i += k;
    }
    return n;
}

static char *read_whole(const char *path, size_t *size, dpt_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO is refused, not waited on */
    struct stat st;
    const char *why = fd < 0                                   ? strerror(errno)
                      : fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ? "not a regular file"
                      : st.st_size > HF_MAX_FILE                    ? "larger than 256 MiB, more than any tokenizer's"
                                                                    : NULL;
    if (why) {
        if (fd >= 0) close(fd);
        dpt_errorf(err, "%s: %s\n" HF_HINT, path, why);
        return NULL;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) dpt_fatal("out of host memory reading %s", path);
    size_t got;
    dpt_read_at(fd, buf, (size_t)st.st_size, 0, &got);
    close(fd);
    if (got != (size_t)st.st_size) {
        free(buf);
        dpt_errorf(err, "%s: read %zu of its %lld bytes\n" HF_HINT, path, got, (long long)st.st_size);
        return NULL;
    }
    buf[got] = '\0';
    *size = got;
    return buf;
}

typedef struct vocab_entry {
    char *text;
    size_t len;
    uint64_t id;
} vocab_entry;

typedef struct vocab_list {
    vocab_entry *es;
    size_t n, cap;
} vocab_list;

static void vocab_add(vocab_list *v, char *text, size_t len, uint64_t id)
{
    if (v->n == v->cap) {
        v->es = realloc(v->es, (v->cap = v->cap ? 2 * v->cap : 1024) * sizeof *v->es);
        if (!v->es) dpt_fatal("out of host memory reading a tokenizer's vocabulary");
    }
    v->es[v->n++] = (vocab_entry){.text = text, .len = len, .id = id};
}

static void vocab_free(vocab_list *v)
{
    for (size_t i = 0; i < v->n; i++)
        free(v->es[i].text);
    free(v->es);
    *v = (vocab_list){0};
}

/* {"token": id, ...} (vocab.json, tokenizer.json's model.vocab) appended to v. */
static bool vocab_object(dpt_json *p, vocab_list *v)
{
    bool first = true, ok = dpt_json_expect(p, '{');
    while (ok && dpt_json_more(p, '}', &first)) {
        char *text = NULL;
        size_t len = 0;
        uint64_t id = 0;
        ok = dpt_json_string(p, &text, &len) && dpt_json_expect(p, ':') && dpt_json_uint(p, &id);
        if (text) vocab_add(v, text, len, id);
        if (ok && id >= TOK_MAX_VOCAB) ok = dpt_json_fail(p, "has a token id of 2^24 or more");
    }
    return ok && !p->failed;
}

static int by_id(const void *a, const void *b)
{
    const vocab_entry *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The tokens' bytes into t (file/at as llm.c's layout) and the end-of-text id; v freed. The same
 * token listed twice under one id (tokenizer.json's added tokens repeat the vocabulary's) is
 * one token. */
static bool vocab_build(dpt_tokenizer *t, vocab_list *v, const char *path, const int16_t *char_byte, dpt_error *err)
{
    vocab_entry *es = v->es;
    size_t n = v->n;
    if (n) qsort(es, n, sizeof *es, by_id);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (kept && es[kept - 1].id == es[i].id && es[kept - 1].len == es[i].len &&
            !memcmp(es[kept - 1].text, es[i].text, es[i].len)) {
            free(es[i].text);
            continue;
        }
        es[kept++] = es[i];
    }
    v->n = n = kept;
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++)
        if (es[i].id != i) {
            bool twice = i > 0 && es[i].id == es[i - 1].id;
            ok = dpt_errorf(err, "%s: token id %llu %s (ids are 0 to the vocabulary's size - 1, each once)\n" HF_HINT,
                            path, twice ? (unsigned long long)es[i].id : (unsigned long long)i,
                            twice ? "is given twice" : "is missing");
        }
    if (ok && n == 0) ok = dpt_errorf(err, "%s: no tokens\n" HF_HINT, path);
    size_t total = 0;
    for (size_t i = 0; ok && i < n; i++)
        total += 1 + es[i].len;
    if (ok) {
        t->vocab = (int32_t)n, t->eot = (int32_t)n - 1;
        t->file = malloc(total), t->at = malloc(n * sizeof *t->at);
        if (!t->file || !t->at) dpt_fatal("out of host memory for a tokenizer of %zu tokens", n);
    }
    size_t at = 0;
    for (size_t i = 0; ok && i < n; i++) {
        /* room for es[i].len bytes at t->file + at + 1: a character is at least one byte */
        int len = es[i].len <= INT32_MAX ? from_alphabet(es[i].text, es[i].len, char_byte, t->file + at + 1) : -1;
        if (len < 0) { /* outside GPT-2's alphabet: an added token, kept as written */
            memcpy(t->file + at + 1, es[i].text, es[i].len);
            len = es[i].len <= 255 ? (int)es[i].len : 256;
        }
        if (len < 1 || len > 255) {
            dpt_printable(es[i].text);
            ok = dpt_errorf(err, "%s: token %zu (\"%.60s\") is %s\n" HF_HINT, path, i, es[i].text,
                            es[i].len ? "longer than 255 bytes" : "empty");
            break;
        }
        t->file[at] = (unsigned char)len;
        t->at[i] = at + 1;
        at += 1 + (size_t)len;
        if (!strcmp(es[i].text, "<|endoftext|>")) t->eot = (int32_t)i;
    }
    vocab_free(v);
    return ok;
}

/* vocab.json. */
/* A tokenizer's JSON file read whole (NULL with err), and p a cursor over it. */
static char *json_file(const char *path, dpt_json *p, dpt_error *err)
{
    size_t size;
    char *json = read_whole(path, &size, err);
    if (json)
        *p = (dpt_json){.s = json, .end = json + size, .start = json, .path = path, .where = "its JSON", .unit = "",
                        .hint = HF_HINT, .err = err, .controls = true};
    return json;
}

static bool read_vocab(dpt_tokenizer *t, const char *path, const int16_t *char_byte, dpt_error *err)
{
    dpt_json p;
    char *json = json_file(path, &p, err);
    if (!json) return false;
    vocab_list v = {0};
    bool ok = vocab_object(&p, &v) && dpt_json_end(&p);
    free(json);
    if (!ok) {
        vocab_free(&v);
        return false;
    }
    return vocab_build(t, &v, path, char_byte, err);
}

/* The merge of tokens l and r (as written in the files), of rank `rank`: NULL, or what is wrong.
 * scratch holds ln + rn bytes. */
static const char *merge_pair(dpt_tokenizer *t, const by_bytes *ix, const char *l, size_t ln, const char *r, size_t rn,
                              int32_t rank, const int16_t *char_byte, unsigned char *scratch)
{
    int a = ln ? from_alphabet(l, ln, char_byte, scratch) : -1;
    int b = a > 0 && rn ? from_alphabet(r, rn, char_byte, scratch + a) : -1;
    if (a <= 0 || b <= 0) return "two tokens of GPT-2's alphabet expected";
    int32_t left = find_bytes(t, ix, scratch, (size_t)a);
    if (left < 0) return "its left token is not in the vocabulary";
    int32_t right = find_bytes(t, ix, scratch + a, (size_t)b);
    if (right < 0) return "its right token is not in the vocabulary";
    int32_t made = find_bytes(t, ix, scratch, (size_t)(a + b));
    if (made < 0) return "the token they make is not in the vocabulary";
    return dpt_bpe_add(t->bpe, left, right, rank, made) ? NULL : "the same pair is merged earlier";
}

static bool start_merges(dpt_tokenizer *t, by_bytes *ix, const char *path, dpt_error *err)
{
    index_tokens(t, ix);
    return start_bpe(t, ix) || dpt_errorf(err, "%s: a byte has no token of its own in the vocabulary (not a "
                                               "byte-level BPE like GPT-2's)\n" HF_HINT, path);
}

/* merges.txt: each line's two tokens, one space between them, rank the line's order. */
static bool read_merges(dpt_tokenizer *t, const char *path, const int16_t *char_byte, dpt_error *err)
{
    size_t size;
    char *text = read_whole(path, &size, err);
    if (!text) return false;
    by_bytes ix;
    bool ok = start_merges(t, &ix, path, err);
    unsigned char *bytes = malloc(size + 1);
    if (!bytes) dpt_fatal("out of host memory reading %s", path);
    int32_t rank = 0;
    long line = 0;
    for (char *at = text; ok && at < text + size; line++) {
        char *end = memchr(at, '\n', (size_t)(text + size - at));
        if (!end) end = text + size;
        char *s = at;
        size_t len = (size_t)(end - at);
        at = end + 1;
        if (len && s[len - 1] == '\r') len--;
        if (len == 0 || (line == 0 && len >= 8 && !memcmp(s, "#version", 8))) continue;
        char *space = memchr(s, ' ', len);
        const char *why = "two tokens of GPT-2's alphabet separated by one space expected";
        if (space && !memchr(space + 1, ' ', (size_t)(s + len - space - 1)))
            why = merge_pair(t, &ix, s, (size_t)(space - s), space + 1, (size_t)(s + len - space - 1), rank++,
                             char_byte, bytes);
        if (why) {
            char shown[80];
            snprintf(shown, sizeof shown, "%.*s", (int)(len < 60 ? len : 60), s);
            dpt_printable(shown);
            ok = dpt_errorf(err, "%s:%ld: \"%s\" is not a merge of this vocabulary (%s)\n" HF_HINT, path, line + 1,
                            shown, why);
        }
    }
    free(bytes), free(ix.slot), free(text);
    return ok;
}

static void alphabet(int16_t char_byte[512])
{
    uint32_t byte_char[256];
    byte_chars(byte_char);
    memset(char_byte, 0xff, 512 * sizeof *char_byte);
    for (int b = 0; b < 256; b++)
        char_byte[byte_char[b]] = (int16_t)b;
}

/* ---------------------------------------------------------------- tokenizer.json */

typedef struct hf_json {
    vocab_list vocab;
    char **merges; /* 2 per merge: left, right (as written) */
    size_t *merge_len;
    size_t nmerges, cap;
    const char *refuse; /* what of the file says it is not GPT-2's kind of tokenizer */
    char *what;         /* ... and the value (a type's name) */
} hf_json;

static void merge_add(hf_json *h, char *l, size_t ln, char *r, size_t rn)
{
    if (h->nmerges == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 1024;
        h->merges = realloc(h->merges, 2 * h->cap * sizeof *h->merges);
        h->merge_len = realloc(h->merge_len, 2 * h->cap * sizeof *h->merge_len);
        if (!h->merges || !h->merge_len) dpt_fatal("out of host memory reading a tokenizer's merges");
    }
    h->merges[2 * h->nmerges] = l, h->merge_len[2 * h->nmerges] = ln;
    h->merges[2 * h->nmerges + 1] = r, h->merge_len[2 * h->nmerges + 1] = rn;
    h->nmerges++;
}

static void refuse(hf_json *h, const char *why, const char *value)
{
    if (h->refuse) return;
    h->refuse = why;
    h->what = value ? strdup(value) : NULL;
}

/* "merges": ["a b", ...] (tokenizers before 0.20) or [["a", "b"], ...] */
static bool merges_array(dpt_json *p, hf_json *h)
{
    bool first = true, ok = dpt_json_expect(p, '[');
    while (ok && dpt_json_more(p, ']', &first)) {
        dpt_json_ws(p);
        char *l = NULL, *r = NULL;
        size_t ln = 0, rn = 0;
        if (p->s < p->end && *p->s == '[') {
            p->s++;
            ok = dpt_json_string(p, &l, &ln) && dpt_json_expect(p, ',') && dpt_json_string(p, &r, &rn) &&
                 dpt_json_expect(p, ']');
        } else if ((ok = dpt_json_string(p, &l, &ln))) {
            char *space = memchr(l, ' ', ln);
            if (!space || memchr(space + 1, ' ', ln - (size_t)(space - l) - 1)) {
                ok = dpt_json_fail(p, "has a merge that is not two tokens with one space between them");
            } else {
                rn = ln - (size_t)(space - l) - 1;
                r = malloc(rn + 1);
                if (!r) dpt_fatal("out of host memory");
                memcpy(r, space + 1, rn + 1);
                ln = (size_t)(space - l);
                l[ln] = '\0';
            }
        }
        if (ok) merge_add(h, l, ln, r, rn);
        else free(l), free(r);
    }
    return ok && !p->failed;
}

/* "model": {"type": "BPE", "vocab": {...}, "merges": [...], ...} */
static bool model_object(dpt_json *p, hf_json *h)
{
    bool first = true, ok = dpt_json_expect(p, '{');
    while (ok && dpt_json_more(p, '}', &first)) {
        char *key = NULL;
        ok = dpt_json_string(p, &key, NULL) && dpt_json_expect(p, ':');
        if (ok && !strcmp(key, "type")) {
            char *type = NULL;
            ok = dpt_json_string(p, &type, NULL);
            if (ok && strcmp(type, "BPE")) refuse(h, "its model is not a BPE", type);
            free(type);
        } else if (ok && !strcmp(key, "vocab")) {
            ok = vocab_object(p, &h->vocab);
        } else if (ok && !strcmp(key, "merges")) {
            ok = merges_array(p, h);
        } else if (ok && (!strcmp(key, "ignore_merges") || !strcmp(key, "byte_fallback"))) {
            bool on = false;
            ok = dpt_json_null(p) || dpt_json_bool(p, &on);
            if (ok && on) refuse(h, "its model sets one of ignore_merges and byte_fallback, which GPT-2's does not", key);
        } else if (ok) {
            ok = dpt_json_skip(p, 2);
        }
        free(key);
    }
    return ok && !p->failed;
}

/* "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true} */
static bool pre_tokenizer_object(dpt_json *p, hf_json *h)
{
    if (dpt_json_null(p)) return refuse(h, "it has no pre_tokenizer (GPT-2's is ByteLevel)", NULL), true;
    bool first = true, ok = dpt_json_expect(p, '{'), prefix = false, regex = true;
    char *type = NULL;
    while (ok && dpt_json_more(p, '}', &first)) {
        char *key = NULL;
        ok = dpt_json_string(p, &key, NULL) && dpt_json_expect(p, ':');
        if (ok && !strcmp(key, "type") && !type) ok = dpt_json_string(p, &type, NULL);
        else if (ok && !strcmp(key, "add_prefix_space")) ok = dpt_json_bool(p, &prefix);
        else if (ok && !strcmp(key, "use_regex")) ok = dpt_json_bool(p, &regex);
        else if (ok) ok = dpt_json_skip(p, 2);
        free(key);
    }
    if (ok && (!type || strcmp(type, "ByteLevel")))
        refuse(h, "its pre_tokenizer is not GPT-2's ByteLevel", type ? type : "(no type)");
    else if (ok && (prefix || !regex))
        refuse(h, "its ByteLevel pre_tokenizer is not GPT-2's (add_prefix_space false, use_regex true)",
               prefix ? "add_prefix_space" : "use_regex");
    free(type);
    return ok && !p->failed;
}

/* "added_tokens": [{"id": 50256, "content": "<|endoftext|>", ...}, ...] */
static bool added_tokens_array(dpt_json *p, hf_json *h)
{
    bool first = true, ok = dpt_json_expect(p, '[');
    while (ok && dpt_json_more(p, ']', &first)) {
        bool inner = true, have_id = false;
        uint64_t id = 0;
        char *content = NULL;
        size_t len = 0;
        ok = dpt_json_expect(p, '{');
        while (ok && dpt_json_more(p, '}', &inner)) {
            char *key = NULL;
            ok = dpt_json_string(p, &key, NULL) && dpt_json_expect(p, ':');
            if (ok && !strcmp(key, "id")) ok = dpt_json_uint(p, &id), have_id = true;
            else if (ok && !strcmp(key, "content") && !content) ok = dpt_json_string(p, &content, &len);
            else if (ok) ok = dpt_json_skip(p, 3);
            free(key);
        }
        if (ok && (!have_id || !content)) ok = dpt_json_fail(p, "has an added token without its id or content");
        if (ok && id >= TOK_MAX_VOCAB) ok = dpt_json_fail(p, "has a token id of 2^24 or more");
        if (ok) vocab_add(&h->vocab, content, len, id);
        else free(content);
    }
    return ok && !p->failed;
}

/* Hugging Face's tokenizer.json of a GPT-2-like byte-level BPE: the model's vocab and merges,
 * its added tokens; refused (naming what) when its pre-tokenizer, normalizer or model is
 * another kind, which would cut or change text otherwise than GPT-2's. */
dpt_tokenizer *dpt_tokenizer_load_hf_json(const char *path, dpt_error *err)
{
    dpt_json p;
    char *json = json_file(path, &p, err);
    if (!json) return NULL;
    hf_json h = {0};
    bool first = true, ok = dpt_json_expect(&p, '{'), have_model = false, have_pre = false;
    while (ok && dpt_json_more(&p, '}', &first)) {
        char *key = NULL;
        ok = dpt_json_string(&p, &key, NULL) && dpt_json_expect(&p, ':');
        if (ok && !strcmp(key, "model")) {
            ok = model_object(&p, &h), have_model = true;
        } else if (ok && !strcmp(key, "pre_tokenizer")) {
            ok = pre_tokenizer_object(&p, &h), have_pre = true;
        } else if (ok && !strcmp(key, "normalizer")) {
            if (!dpt_json_null(&p)) {
                refuse(&h, "it has a normalizer (GPT-2's has none), which changes text first", NULL);
                ok = dpt_json_skip(&p, 1);
            }
        } else if (ok && !strcmp(key, "added_tokens")) {
            ok = added_tokens_array(&p, &h);
        } else if (ok) {
            ok = dpt_json_skip(&p, 1);
        }
        free(key);
    }
    ok = ok && dpt_json_end(&p);
    free(json);
    if (ok && (!have_model || !have_pre))
        ok = dpt_errorf(err, "%s: no %s: not a tokenizer.json of Hugging Face's tokenizers\n" HF_HINT, path,
                        have_model ? "pre_tokenizer" : "model");
    if (ok && h.refuse)
        ok = dpt_errorf(err, "%s: %s%s%s%s: only GPT-2's kind of tokenizer is read (a byte-level BPE cut by "
                             "GPT-2's pattern)\n" HF_HINT,
                        path, h.refuse, h.what ? " (" : "", h.what ? h.what : "", h.what ? ")" : "");
    int16_t char_byte[512];
    alphabet(char_byte);
    dpt_tokenizer *t = calloc(1, sizeof *t);
    if (!t) dpt_fatal("out of host memory");
    by_bytes ix = {0};
    if (ok) ok = vocab_build(t, &h.vocab, path, char_byte, err) && start_merges(t, &ix, path, err);
    size_t most = 0;
    for (size_t i = 0; i < 2 * h.nmerges; i++)
        most = h.merge_len[i] > most ? h.merge_len[i] : most;
    unsigned char *scratch = malloc(2 * most + 1);
    if (!scratch) dpt_fatal("out of host memory");
    for (size_t i = 0; ok && i < h.nmerges; i++) {
        const char *why = merge_pair(t, &ix, h.merges[2 * i], h.merge_len[2 * i], h.merges[2 * i + 1],
                                     h.merge_len[2 * i + 1], (int32_t)i, char_byte, scratch);
        if (why) {
            char shown[80];
            snprintf(shown, sizeof shown, "%.30s %.30s", h.merges[2 * i], h.merges[2 * i + 1]);
            dpt_printable(shown);
            ok = dpt_errorf(err, "%s: model.merges[%zu] \"%s\" is not a merge of its vocabulary (%s)\n" HF_HINT, path, i,
                            shown, why);
        }
    }
    free(scratch), free(ix.slot);
    for (size_t i = 0; i < 2 * h.nmerges; i++)
        free(h.merges[i]);
    free(h.merges), free(h.merge_len), free(h.what);
    vocab_free(&h.vocab);
    if (!ok) {
        dpt_tokenizer_free(t);
        return NULL;
    }
    return t;
}

dpt_tokenizer *dpt_tokenizer_load_hf(const char *vocab, const char *merges, dpt_error *err)
{
    int16_t char_byte[512];
    alphabet(char_byte);
    dpt_tokenizer *t = calloc(1, sizeof *t);
    if (!t) dpt_fatal("out of host memory");
    if (!read_vocab(t, vocab, char_byte, err) || !read_merges(t, merges, char_byte, err)) {
        dpt_tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* There, and not a folder (what else it is, read_whole says). */
static bool is_there(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

static const char *const PAIRS[][2] = {{"vocab.json", "merges.txt"}, {"encoder.json", "vocab.bpe"}};

/* The tokenizer files dir holds: a vocabulary and its merges (*vocab, *merges; only PAIRS[only]
 * when only >= 0), else a tokenizer.json (*json; when only < 0). false: none. The caller frees
 * the paths. */
static bool folder_files(const char *dir, int only, char **vocab, char **merges, char **json)
{
    *vocab = *merges = *json = NULL;
    for (int i = 0; i < 2; i++) {
        if (only >= 0 && i != only) continue;
        char *v = dpt_strf("%s/%s", dir, PAIRS[i][0]), *m = dpt_strf("%s/%s", dir, PAIRS[i][1]);
        if (is_there(v) && is_there(m)) return *vocab = v, *merges = m, true;
        free(v), free(m);
    }
    if (only >= 0) return false;
    char *j = dpt_strf("%s/tokenizer.json", dir);
    if (is_there(j)) return *json = j, true;
    free(j);
    return false;
}

bool dpt_tokenizer_in(const char *dir)
{
    char *v, *m, *j;
    bool found = folder_files(dir, -1, &v, &m, &j);
    free(v), free(m), free(j);
    return found;
}

/* PATH: a folder with vocab.json and merges.txt (or encoder.json and vocab.bpe, or
 * tokenizer.json), one of those JSON files (the merges beside vocab.json or encoder.json), or
 * llm.c's file. */
dpt_tokenizer *dpt_tokenizer_load(const char *path, dpt_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        dpt_errorf(err, "tokenizer %s: %s\n" HF_HINT, path, strerror(errno));
        return NULL;
    }
    char *dir = NULL;
    int pair = -1;
    if (S_ISDIR(st.st_mode)) {
        dir = dpt_strf("%s", path);
    } else {
        const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
        for (int i = 0; i < 2; i++)
            if (!strcmp(base, PAIRS[i][0])) pair = i;
        if (pair < 0) return ends_with(base, ".json") ? dpt_tokenizer_load_hf_json(path, err) : load_llmc(path, err);
        dir = dpt_strf("%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    }
    char *v, *m, *j;
    dpt_tokenizer *t = NULL;
    if (!folder_files(dir, pair, &v, &m, &j))
        dpt_errorf(err, "tokenizer %s: %s\n" HF_HINT, path,
                   pair >= 0 ? (pair ? "no vocab.bpe beside it" : "no merges.txt beside it")
                             : "a folder without vocab.json and merges.txt, encoder.json and vocab.bpe, or tokenizer.json");
    else
        t = j ? dpt_tokenizer_load_hf_json(j, err) : dpt_tokenizer_load_hf(v, m, err);
    free(v), free(m), free(j), free(dir);
    return t;
}

bool dpt_tokenizer_can_encode(const dpt_tokenizer *t)
{
    return t->bpe != NULL;
}

int32_t *dpt_tokenizer_encode(const dpt_tokenizer *t, const char *text, size_t len, size_t *n)
{
    if (!t->bpe) return *n = 0, NULL;
    return dpt_bpe_encode(t->bpe, (const unsigned char *)text, len, n);
}

int32_t *dpt_tokenizer_encode_some(const dpt_tokenizer *t, const char *text, size_t len, bool final, size_t *used,
                                   size_t *n)
{
    if (!t->bpe) return *n = 0, *used = 0, NULL;
    return dpt_bpe_encode_some(t->bpe, (const unsigned char *)text, len, final, used, n);
}

void dpt_tokenizer_free(dpt_tokenizer *t)
{
    if (!t) return;
    dpt_bpe_free(t->bpe);
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
