/* bpe.c: GPT-2's byte-level BPE (bpe.h): the pre-tokenizing pattern as a scanner over
 * code points, and the merges with a heap. */
#include "bpe.h"

#include <stdlib.h>
#include <string.h>

#include "../runtime/error.h"
#include "../runtime/openmp.h"
#include "unicode_classes.h"

typedef struct pair_slot {
    uint64_t key; /* left << 32 | right */
    int32_t rank, merged; /* rank -1: empty */
} pair_slot;

struct dpt_bpe {
    int32_t byte_id[256];
    pair_slot *slots;
    uint64_t mask; /* slots - 1, a power of two minus one */
    int64_t count;
};

/* ---------------------------------------------------------------- the pattern's classes */

enum { C_LETTER, C_NUMBER, C_SPACE, C_OTHER };

static bool in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return true;
    }
    return false;
}

/* A longer piece (a gigabyte without a space) is merged in parts of this many bytes. */
#define MAX_PIECE ((size_t)1 << 28)

#define COUNT(a) (sizeof(a) / sizeof(a)[0])

static int class_of(uint32_t cp)
{
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return C_LETTER;
        if (cp >= '0' && cp <= '9') return C_NUMBER;
        if (cp == ' ' || (cp >= '\t' && cp <= '\r')) return C_SPACE;
        return C_OTHER;
    }
    if (cp == UINT32_MAX) return C_OTHER; /* a byte that is not UTF-8 */
    if (in_ranges(uc_letter, COUNT(uc_letter), cp)) return C_LETTER;
    if (in_ranges(uc_number, COUNT(uc_number), cp)) return C_NUMBER;
    if (in_ranges(uc_space, COUNT(uc_space), cp)) return C_SPACE;
    return C_OTHER;
}

/* The code point at text[at] and its length in bytes; a byte that does not start a well-formed
 * UTF-8 sequence (overlong, a surrogate, past U+10FFFF, cut short) is one character of its own,
 * UINT32_MAX. */
static size_t decode(const unsigned char *t, size_t len, size_t at, uint32_t *cp)
{
    unsigned c = t[at];
    if (c < 0x80) return *cp = c, 1;
    size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    if (c > 0xf4) n = 0;
    if (n == 0 || len - at < n) return *cp = UINT32_MAX, 1;
    uint32_t v = c & (0xff >> (n + 1));
    for (size_t i = 1; i < n; i++) {
        if ((t[at + i] & 0xc0) != 0x80) return *cp = UINT32_MAX, 1;
        v = v << 6 | (t[at + i] & 0x3f);
    }
    if ((n == 3 && (v < 0x800 || (v >= 0xd800 && v < 0xe000))) || (n == 4 && (v < 0x10000 || v > 0x10ffff)))
        return *cp = UINT32_MAX, 1;
    return *cp = v, n;
}

static int class_at(const unsigned char *t, size_t len, size_t at, size_t *n)
{
    uint32_t cp;
    *n = decode(t, len, at, &cp);
    return class_of(cp);
}

/* The end of the run of class k from `at`. */
static size_t run(const unsigned char *t, size_t len, size_t at, int k)
{
    size_t n;
    while (at < len && class_at(t, len, at, &n) == k)
        at += n;
    return at;
}

size_t dpt_bpe_piece_end(const unsigned char *t, size_t len, size_t at)
{
    if (t[at] == '\'' && len - at >= 2) { /* 's|'t|'re|'ve|'m|'ll|'d */
        unsigned char a = t[at + 1], b = len - at >= 3 ? t[at + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return at + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return at + 3;
    }
    size_t n;
    if (t[at] == ' ' && len - at >= 2) { /*  ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+ with the space */
        int k = class_at(t, len, at + 1, &n);
        if (k != C_SPACE) return run(t, len, at + 1, k);
    }
    int k = class_at(t, len, at, &n);
    if (k != C_SPACE) return run(t, len, at, k);
    /* \s+(?!\S)|\s+: the white space up to the last character before a non-space, or all of it
     * at the end of the text or when it is one character */
    size_t end = at, last = at, count = 0;
    while (end < len && class_at(t, len, end, &n) == C_SPACE)
        last = end, end += n, count++;
    return end == len || count < 2 ? end : last;
}

/* ---------------------------------------------------------------- the merges */

static uint64_t hash(uint64_t key)
{
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ULL;
    return key ^ (key >> 32);
}

static pair_slot *find(const dpt_bpe *b, uint64_t key)
{
    for (uint64_t i = hash(key) & b->mask;; i = (i + 1) & b->mask)
        if (b->slots[i].rank < 0 || b->slots[i].key == key) return &b->slots[i];
}

static void grow(dpt_bpe *b)
{
    pair_slot *old = b->slots;
    uint64_t n = b->mask + 1, bigger = old ? 2 * n : 1024;
    b->slots = malloc(bigger * sizeof *b->slots);
    if (!b->slots) dpt_fatal("out of host memory for a tokenizer's merges");
    for (uint64_t i = 0; i < bigger; i++)
        b->slots[i].rank = -1;
    b->mask = bigger - 1;
    for (uint64_t i = 0; old && i < n; i++)
        if (old[i].rank >= 0) *find(b, old[i].key) = old[i];
    free(old);
}

dpt_bpe *dpt_bpe_new(const int32_t byte_id[256])
{
    dpt_bpe *b = calloc(1, sizeof *b);
    if (!b) dpt_fatal("out of host memory");
    memcpy(b->byte_id, byte_id, sizeof b->byte_id);
    grow(b);
    return b;
}

void dpt_bpe_free(dpt_bpe *b)
{
    if (!b) return;
    free(b->slots), free(b);
}

bool dpt_bpe_add(dpt_bpe *b, int32_t left, int32_t right, int32_t rank, int32_t merged)
{
    if ((uint64_t)(b->count + 1) * 2 > b->mask + 1) grow(b);
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    pair_slot *s = find(b, key);
    if (s->rank >= 0) return false;
    *s = (pair_slot){.key = key, .rank = rank, .merged = merged};
    b->count++;
    return true;
}

int64_t dpt_bpe_merges(const dpt_bpe *b)
{
    return b->count;
}

typedef struct candidate {
    int32_t rank, pos, left, right; /* pos: the left symbol (its first byte in the piece) */
} candidate;

typedef struct scratch {
    int32_t *id, *next, *prev; /* per byte of the piece: the symbol that starts there */
    candidate *heap;
    size_t cap, heap_cap, heap_n;
} scratch;

static bool before(const candidate *a, const candidate *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void push(scratch *s, candidate c)
{
    if (s->heap_n == s->heap_cap) {
        s->heap_cap = s->heap_cap ? 2 * s->heap_cap : 64;
        s->heap = realloc(s->heap, s->heap_cap * sizeof *s->heap);
        if (!s->heap) dpt_fatal("out of host memory encoding text");
    }
    size_t i = s->heap_n++;
    while (i > 0 && before(&c, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = c;
}

static candidate pop(scratch *s)
{
    candidate top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static void offer(const dpt_bpe *b, scratch *s, int32_t pos)
{
    if (pos < 0 || s->next[pos] < 0) return;
    int32_t nx = s->next[pos];
    const pair_slot *p = find(b, (uint64_t)(uint32_t)s->id[pos] << 32 | (uint32_t)s->id[nx]);
    if (p->rank >= 0) push(s, (candidate){.rank = p->rank, .pos = pos, .left = s->id[pos], .right = s->id[nx]});
}

/* p, an array of *cap elements of `size` bytes, grown (doubling) to hold at least need */
static void *grow_to(void *p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap) return p;
    while (*cap < need)
        *cap = *cap ? 2 * *cap : 1 << 16;
    p = realloc(p, *cap * size);
    if (!p) dpt_fatal("out of host memory encoding text");
    return p;
}

/* One piece's tokens appended to out[*n...]. */
static void encode_piece(const dpt_bpe *b, scratch *s, const unsigned char *t, size_t m, int32_t **out, size_t *n,
                         size_t *cap)
{
    if (m > s->cap) {
        s->cap = m;
        s->id = realloc(s->id, m * sizeof *s->id), s->next = realloc(s->next, m * sizeof *s->next);
        s->prev = realloc(s->prev, m * sizeof *s->prev);
        if (!s->id || !s->next || !s->prev) dpt_fatal("out of host memory encoding text");
    }
    for (size_t i = 0; i < m; i++) {
        s->id[i] = b->byte_id[t[i]];
        s->next[i] = i + 1 < m ? (int32_t)(i + 1) : -1;
        s->prev[i] = (int32_t)i - 1;
    }
    s->heap_n = 0;
    for (size_t i = 0; i + 1 < m; i++)
        offer(b, s, (int32_t)i);
    while (s->heap_n) {
        candidate c = pop(s);
        int32_t r = s->next[c.pos];
        /* stale: the left symbol was merged into its neighbour (id -1), or either side changed */
        if (s->id[c.pos] != c.left || r < 0 || s->id[r] != c.right) continue;
        s->id[c.pos] = find(b, (uint64_t)(uint32_t)c.left << 32 | (uint32_t)c.right)->merged;
        s->id[r] = -1;
        s->next[c.pos] = s->next[r];
        if (s->next[r] >= 0) s->prev[s->next[r]] = c.pos;
        offer(b, s, s->prev[c.pos]);
        offer(b, s, c.pos);
    }
    for (int32_t i = 0; i >= 0; i = s->next[i]) {
        *out = grow_to(*out, cap, *n + 1, sizeof **out);
        (*out)[(*n)++] = s->id[i];
    }
}

/* ---------------------------------------------------------------- the pieces seen before */

/* Text repeats its words: a piece's tokens are looked up by its bytes before they are merged
 * again (Hugging Face's tokenizers keep such a cache too). Short pieces only, in a table per
 * call sized by the text (at most 2^18 slots), emptied when 3/4 full (a corpus's words change
 * along it); a hit compares the bytes, so the tokens are always the merges' own. */
enum { CACHE_MAX_PIECE = 48, CACHE_SLOTS = 1 << 18 };

typedef struct cache_slot {
    uint64_t hash;
    uint32_t text_at, ids_at; /* into the arenas */
    uint16_t len, nids;       /* len 0: empty */
} cache_slot;

typedef struct piece_cache {
    cache_slot *slots;
    uint64_t mask; /* slots - 1 */
    size_t used;
    unsigned char *text;
    int32_t *ids;
    size_t text_n, text_cap, ids_n, ids_cap;
} piece_cache;

/* For a text of len bytes: about a slot per 8 of its bytes, 256 to 2^18 */
static piece_cache cache_new(size_t len)
{
    uint64_t slots = 256;
    while (slots < CACHE_SLOTS && slots * 8 < len)
        slots *= 2;
    piece_cache c = {.slots = calloc(slots, sizeof(cache_slot)), .mask = slots - 1};
    if (!c.slots) dpt_fatal("out of host memory encoding text");
    return c;
}

static void cache_free(piece_cache *c)
{
    free(c->slots), free(c->text), free(c->ids);
}

static uint64_t piece_hash(const unsigned char *t, size_t m)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ m;
    for (size_t i = 0; i < m; i++)
        h = (h ^ t[i]) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

static cache_slot *cache_find(const piece_cache *c, const unsigned char *t, size_t m, uint64_t h)
{
    for (uint64_t i = h & c->mask;; i = (i + 1) & c->mask) {
        cache_slot *e = &c->slots[i];
        if (!e->len || (e->hash == h && e->len == m && !memcmp(c->text + e->text_at, t, m))) return e;
    }
}

static void cache_put(piece_cache *c, cache_slot *e, uint64_t h, const unsigned char *t, size_t m,
                      const int32_t *ids, size_t nids)
{
    if (nids > UINT16_MAX) return;
    if (c->used >= (c->mask + 1) / 4 * 3) { /* full: start again (the text's words change with it) */
        memset(c->slots, 0, (c->mask + 1) * sizeof *c->slots);
        c->used = c->text_n = c->ids_n = 0;
        e = cache_find(c, t, m, h);
    }
    c->text = grow_to(c->text, &c->text_cap, c->text_n + m, 1);
    c->ids = grow_to(c->ids, &c->ids_cap, c->ids_n + nids, sizeof *c->ids);
    memcpy(c->text + c->text_n, t, m);
    memcpy(c->ids + c->ids_n, ids, nids * sizeof *ids);
    *e = (cache_slot){.hash = h, .text_at = (uint32_t)c->text_n, .ids_at = (uint32_t)c->ids_n,
                      .len = (uint16_t)m, .nids = (uint16_t)nids};
    c->text_n += m, c->ids_n += nids;
    c->used++;
}

static int32_t *encode_run(const dpt_bpe *b, const unsigned char *text, size_t len, bool final, size_t *used,
                           size_t *n)
{
    scratch s = {0};
    piece_cache cache_of_text = cache_new(len), *cache = &cache_of_text;
    size_t cap = len / 3 + 16;
    int32_t *out = malloc(cap * sizeof *out);
    if (!out) dpt_fatal("out of host memory encoding text");
    *n = 0;
    size_t at = 0;
    while (at < len) {
        size_t end = dpt_bpe_piece_end(text, len, at);
        if (end - at > MAX_PIECE && (final || len - at >= MAX_PIECE + 8)) {
            end = at + MAX_PIECE; /* positions are int32_t; as long in the whole text */
        } else if (!final && end + 4 > len) {
            break; /* the piece may go on, or its end depend on, what follows the text */
        }
        size_t m = end - at;
        if (m > CACHE_MAX_PIECE) {
            encode_piece(b, &s, text + at, m, &out, n, &cap);
        } else {
            uint64_t h = piece_hash(text + at, m);
            cache_slot *e = cache_find(cache, text + at, m, h);
            if (e->len) { /* seen: its tokens */
                out = grow_to(out, &cap, *n + e->nids, sizeof *out);
                memcpy(out + *n, cache->ids + e->ids_at, e->nids * sizeof *out);
                *n += e->nids;
            } else {
                size_t first = *n;
                encode_piece(b, &s, text + at, m, &out, n, &cap);
                cache_put(cache, e, h, text + at, m, out + first, *n - first);
            }
        }
        at = end;
    }
    free(s.id), free(s.next), free(s.prev), free(s.heap);
    cache_free(cache);
    *used = at;
    return out;
}

/* ---------------------------------------------------------------- long texts on several threads */

static bool plain(unsigned char c) /* printable ASCII, not a space */
{
    return c > 0x20 && c < 0x7f;
}

/* A place where every piece ends whatever comes before or after it: "X\nY" with X and Y
 * printable ASCII, between \n and Y. X's piece cannot take in the newline (no branch of the
 * pattern mixes white space with anything but a leading ' '), the newline alone is a piece
 * both when Y follows (\s+) and at the end of a text (\s+(?!\S)), and Y starts the next one.
 * (A run of white space before the newline would not do: "  \n" at the end of a text is one
 * piece, before Y two.) The first such place in [from, to), or 0. */
static size_t safe_cut(const unsigned char *t, size_t from, size_t to)
{
    for (size_t i = from < 2 ? 2 : from; i < to; i++)
        if (t[i - 1] == '\n' && plain(t[i]) && plain(t[i - 2])) return i;
    return 0;
}

int32_t *dpt_bpe_encode_segments(const dpt_bpe *b, const unsigned char *text, size_t len, bool final, size_t *used,
                                 size_t *n, size_t min_segment, int threads)
{
    enum { MOST = 64 };
    size_t cuts[MOST + 1];
    int nseg = 0;
    cuts[0] = 0;
    if (threads > MOST) threads = MOST;
    if (min_segment < 1) min_segment = 1;
    for (int k = 1; k < threads; k++) { /* near len * k / threads, each at least min_segment */
        size_t want = len / (size_t)threads * (size_t)k;
        if (want < cuts[nseg] + min_segment) want = cuts[nseg] + min_segment;
        if (want >= len || len - want < min_segment) break;
        size_t cut = safe_cut(text, want, want + min_segment < len ? want + min_segment : len);
        if (cut) cuts[++nseg] = cut;
    }
    cuts[++nseg] = len;
    if (nseg == 1) return encode_run(b, text, len, final, used, n);
    int32_t *outs[MOST];
    size_t counts[MOST], useds[MOST];
    /* every segment but the last ends at a safe place: encoded whole, as if the text ended there */
#pragma omp parallel for num_threads(nseg) schedule(static, 1)
    for (int i = 0; i < nseg; i++)
        outs[i] = encode_run(b, text + cuts[i], cuts[i + 1] - cuts[i], i == nseg - 1 ? final : true, &useds[i],
                             &counts[i]);
    size_t total = 0;
    for (int i = 0; i < nseg; i++)
        total += counts[i];
    int32_t *out = malloc((total ? total : 1) * sizeof *out);
    if (!out) dpt_fatal("out of host memory encoding text");
    *n = 0;
    for (int i = 0; i < nseg; i++) {
        memcpy(out + *n, outs[i], counts[i] * sizeof *out);
        *n += counts[i];
        free(outs[i]);
    }
    *used = cuts[nseg - 1] + useds[nseg - 1];
    return out;
}

int32_t *dpt_bpe_encode_some(const dpt_bpe *b, const unsigned char *text, size_t len, bool final, size_t *used,
                             size_t *n)
{
    /* segments of at least 1 MiB: below that a thread's start and a cache of its own cost more
     * than they save */
    return dpt_bpe_encode_segments(b, text, len, final, used, n, (size_t)1 << 20, omp_get_max_threads());
}

int32_t *dpt_bpe_encode(const dpt_bpe *b, const unsigned char *text, size_t len, size_t *n)
{
    size_t used;
    return dpt_bpe_encode_some(b, text, len, true, &used, n);
}
