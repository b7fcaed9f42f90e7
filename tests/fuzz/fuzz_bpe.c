/* fuzz_bpe.c: GPT-2's tokenizer (data/tokenizer.c, data/bpe.c): Hugging Face's vocab.json and
 * merges.txt as hostile files, and the encoder on any bytes. The first input byte chooses:
 * - even: the rest is text for a fixed tokenizer (the 256 bytes and merges of common English
 *   pairs and of white space): every piece must end past its start and within the text, the tokens' bytes must be
 *   the text again, and the text read in parts of 1-16 bytes, or cut into segments for threads
 *   at every place the cutting rule allows, must give the same ids, whatever the text (UTF-8 or
 *   not, one huge piece or many);
 * - 1 mod 4: the rest, cut at its first 0x00 byte (or in the middle), is vocab.json then
 *   merges.txt; 3 mod 4: the rest is a tokenizer.json. Either refused with a file named, or
 *   loaded with every token 1-255 bytes, and then (when it encodes) a text's tokens inside the
 *   vocabulary and its bytes again. */
#include "tests/fuzz/fuzz_common.h"
#include "dpt.h"
#include "data/bpe.h"
#include "data/data.h"

static const char *const MERGES[][2] = {{"t", "h"}, {"th", "e"}, {" ", "t"}, {" t", "h"}, {" th", "e"}, {"i", "n"},
                                        {"e", "r"}, {"a", "n"}, {"in", "g"}, {" ", "a"}, {"o", "n"},
                                        {"r", "e"}, {" a", "n"}, {" an", "d"}, {"a", "a"}, {"aa", "aa"},
                                        /* white space merges as GPT-2's: where pieces of white
                                         * space end changes the ids */
                                        {" ", "\n"}, {" ", " "}, {"\n", "\n"}};
enum { NMERGES = sizeof MERGES / sizeof MERGES[0] };

static dpt_bpe *fixed;
static char tokens[256 + NMERGES][16];

static int32_t id_of(const char *s)
{
    for (int i = 0; i < 256 + NMERGES; i++)
        if (!strcmp(tokens[i], s) && (i >= 256 || strlen(s) == 1)) return i;
    abort();
}

static void setup(void)
{
    int32_t byte_id[256];
    for (int b = 0; b < 256; b++)
        tokens[b][0] = (char)b, byte_id[b] = b;
    fixed = dpt_bpe_new(byte_id);
    for (int m = 0; m < NMERGES; m++) {
        snprintf(tokens[256 + m], sizeof tokens[0], "%s%s", MERGES[m][0], MERGES[m][1]);
        dpt_bpe_add(fixed, id_of(MERGES[m][0]), id_of(MERGES[m][1]), m, 256 + m);
    }
}

static size_t token_len(int32_t id)
{
    return id < 256 ? 1 : strlen(tokens[id]);
}

static void encode_fixed(const uint8_t *text, size_t len)
{
    for (size_t at = 0; at < len;) {
        size_t end = dpt_bpe_piece_end(text, len, at);
        if (end <= at || end > len) abort();
        at = end;
    }
    size_t n;
    int32_t *ids = dpt_bpe_encode(fixed, text, len, &n);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= 256 + NMERGES) abort();
        size_t k = token_len(ids[i]);
        if (at + k > len || memcmp(text + at, ids[i] < 256 ? (const char[]){(char)ids[i]} : tokens[ids[i]], k)) abort();
        at += k;
    }
    if (at != len) abort();
    /* cut into segments for threads (as a long text is), anywhere the rule allows: the whole
     * text's ids; not final, the whole text's first ids, for as many bytes as they say, and at
     * least as many as one thread's run takes (the segments before the last end where every
     * piece ends, so they are taken whole) */
    size_t min_segment = 1 + (len ? text[len / 2] % 8 : 0), used_seg, m_seg, used_one, m_one;
    int threads = 2 + (len ? text[len - 1] % 7 : 0);
    int32_t *seg = dpt_bpe_encode_segments(fixed, text, len, true, &used_seg, &m_seg, min_segment, threads);
    if (used_seg != len || m_seg != n || memcmp(seg, ids, n * sizeof *ids)) abort();
    free(seg);
    free(dpt_bpe_encode_segments(fixed, text, len, false, &used_one, &m_one, len + 1, 1));
    seg = dpt_bpe_encode_segments(fixed, text, len, false, &used_seg, &m_seg, min_segment, threads);
    size_t bytes = 0;
    for (size_t i = 0; i < m_seg; i++)
        bytes += token_len(seg[i]);
    if (m_seg > n || memcmp(seg, ids, m_seg * sizeof *ids) || bytes != used_seg || used_seg < used_one) abort();
    free(seg);
    /* read in parts of 1-16 bytes (dpt_bpe_encode_some, as tools/text_tokens reads a corpus): the
     * same ids */
    size_t part = len ? 1 + text[0] % 16 : 1, from = 0, have = 0, k = 0;
    uint8_t *buf = malloc(len + 1);
    if (!buf) abort();
    while (from < len || have) {
        size_t take = len - from < part ? len - from : part;
        memcpy(buf + have, text + from, take);
        from += take, have += take;
        size_t used, m;
        int32_t *some = dpt_bpe_encode_some(fixed, buf, have, from == len, &used, &m);
        if (used > have || k + m > n || memcmp(some, ids + k, m * sizeof *ids)) abort();
        k += m;
        memmove(buf, buf + used, have - used);
        have -= used;
        free(some);
        if (from == len && have) abort();
    }
    if (k != n) abort();
    free(buf);
    free(ids);
}

static void load_files(const uint8_t *data, size_t size, bool one_json)
{
    const uint8_t *zero = memchr(data, 0, size);
    size_t cut = one_json ? size : zero ? (size_t)(zero - data) : size / 2;
    char vpath[64], mpath[64] = "(none)";
    int vfd = fuzz_file(data, cut, vpath, sizeof vpath), mfd = -1;
    if (!one_json) mfd = fuzz_file(data + cut + (zero != NULL), size - cut - (zero != NULL), mpath, sizeof mpath);
    dpt_error err;
    dpt_tokenizer *t = one_json ? dpt_tokenizer_load_hf_json(vpath, &err) : dpt_tokenizer_load_hf(vpath, mpath, &err);
    if (t) {
        int32_t v = dpt_tokenizer_vocab(t);
        if (v < 1 || dpt_tokenizer_eot(t) < 0 || dpt_tokenizer_eot(t) >= v) abort();
        for (int32_t i = 0; i < v; i++) {
            size_t len;
            const unsigned char *b = dpt_tokenizer_bytes(t, i, &len);
            if (!b || len < 1 || len > 255) abort();
            volatile unsigned char sink = b[0] ^ b[len - 1];
            (void)sink;
        }
        if (dpt_tokenizer_can_encode(t)) {
            static const char text[] = "The quick brown fox's 123 jumps\n\n  over\xff\xfe the lazy dog. \xe2\x82\xac";
            size_t n, at = 0;
            int32_t *ids = dpt_tokenizer_encode(t, text, sizeof text - 1, &n);
            for (size_t i = 0; i < n; i++) {
                size_t len;
                const unsigned char *b = dpt_tokenizer_bytes(t, ids[i], &len);
                if (!b || at + len > sizeof text - 1 || memcmp(text + at, b, len)) abort();
                at += len;
            }
            if (at != sizeof text - 1) abort();
            free(ids);
        }
        dpt_tokenizer_free(t);
    } else if (!strstr(err.msg, vpath) && !strstr(err.msg, mpath)) {
        abort(); /* a refusal names the file */
    }
    close(vfd);
    if (mfd >= 0) close(mfd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fixed) setup();
    if (size == 0) return 0;
    if (data[0] % 2 == 0) encode_fixed(data + 1, size - 1);
    else load_files(data + 1, size - 1, data[0] % 4 == 3);
    return 0;
}
