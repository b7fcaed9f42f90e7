/* bpe.c: GPT-2's byte-level BPE (bpe.h): the pre-tokenizing pattern as a scanner over
 * code points, and the merges with a heap. */
#include "bpe.h"

#include <stdlib.h>
#include <string.h>

#include "../runtime/error.h"
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
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 1024;
            *out = realloc(*out, *cap * sizeof **out);
            if (!*out) dpt_fatal("out of host memory encoding text");
        }
        (*out)[(*n)++] = s->id[i];
    }
}

int32_t *dpt_bpe_encode_some(const dpt_bpe *b, const unsigned char *text, size_t len, bool final, size_t *used,
                             size_t *n)
{
    scratch s = {0};
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
        encode_piece(b, &s, text + at, end - at, &out, n, &cap);
        at = end;
    }
    free(s.id), free(s.next), free(s.prev), free(s.heap);
    *used = at;
    return out;
}

int32_t *dpt_bpe_encode(const dpt_bpe *b, const unsigned char *text, size_t len, size_t *n)
{
    size_t used;
    return dpt_bpe_encode_some(b, text, len, true, &used, n);
}
