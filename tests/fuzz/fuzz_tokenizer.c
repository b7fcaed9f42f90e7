/* fuzz_tokenizer.c: llm.c's tokenizer file (--sample --tokenizer). Every input must load, with
 * every token's bytes inside what the file held, or be refused with the file named. Inputs under
 * 1024 bytes get a valid header put in front (version 2, a vocabulary of 1-64 tokens chosen by
 * the first byte), so mutations reach the token table; longer ones are read as they are. */
#include "tests/fuzz/fuzz_common.h"
#include "dpt.h"
#include "data/data.h"

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = NULL;
    const uint8_t *in = data;
    size_t n = size;
    if (size < 1024) { /* a header of our own, then the bytes as the table */
        buf = malloc(1024 + size);
        if (!buf) abort();
        memset(buf, 0, 1024);
        uint32_t vocab = size ? 1 + data[0] % 64 : 1;
        put32(buf, 20240328u), put32(buf + 4, 2), put32(buf + 8, vocab), put32(buf + 12, vocab - 1);
        if (size) memcpy(buf + 1024, data + 1, size - 1);
        in = buf, n = 1024 + (size ? size - 1 : 0);
    }
    char path[64];
    int fd = fuzz_file(in, n, path, sizeof path);
    dpt_error err;
    dpt_tokenizer *t = dpt_tokenizer_load(path, &err);
    if (t) {
        size_t total = 0;
        for (int32_t i = 0; i < dpt_tokenizer_vocab(t); i++) {
            size_t len;
            const unsigned char *b = dpt_tokenizer_bytes(t, i, &len);
            if (!b || len < 1 || len > 255) abort();
            volatile unsigned char sink = b[0] ^ b[len - 1]; /* ASan: inside the table */
            (void)sink;
            total += len + 1;
        }
        if (total + 1024 != n || dpt_tokenizer_eot(t) < 0 || dpt_tokenizer_eot(t) >= dpt_tokenizer_vocab(t)) abort();
        size_t len;
        if (dpt_tokenizer_bytes(t, -1, &len) || dpt_tokenizer_bytes(t, dpt_tokenizer_vocab(t), &len)) abort();
        dpt_tokenizer_free(t);
    } else if (!strstr(err.msg, path)) {
        abort(); /* a refusal names the file */
    }
    close(fd);
    free(buf);
    return 0;
}
