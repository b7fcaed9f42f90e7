/* ckpt_bytes.h: checkpoint files taken apart and put back together by the tests and the
 * fuzz harness, independently of runtime/checkpoint.c (the layout is in that file's head):
 * ckpt_fix_crcs makes every CRC of a (possibly mutated) file valid so the loader's checks past
 * the CRCs are reached; ckpt_build writes a file from records given in plain form. */
#ifndef DPT_CKPT_BYTES_H
#define DPT_CKPT_BYTES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static inline uint64_t ckpt_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Recompute the header CRC and the CRC of each record whose lengths fit in the buffer. */
static inline void ckpt_fix_crcs(uint8_t *buf, size_t len)
{
    if (len < 20) return;
    uint32_t crc = (uint32_t)crc32(0L, buf, 16);
    memcpy(buf + 16, &crc, 4);
    uint32_t nrec = (uint32_t)ckpt_le(buf + 12, 4);
    size_t pos = 20;
    for (uint32_t i = 0; i < nrec && i < 100000; i++) {
        size_t start = pos;
        if (len - pos < 8) return;
        uint64_t name_len = ckpt_le(buf + pos + 4, 4);
        pos += 8;
        if (len - pos < name_len + 4) return;
        pos += name_len;
        uint64_t ndim = ckpt_le(buf + pos, 4);
        pos += 4;
        if (ndim > 16 || len - pos < ndim * 8 + 16) return;
        pos += ndim * 8;
        uint64_t comp = ckpt_le(buf + pos + 8, 8);
        pos += 16;
        if (len - pos < 4 || comp > len - pos - 4) return;
        pos += comp;
        crc = (uint32_t)crc32(0L, buf + start, (uInt)(pos - start));
        memcpy(buf + pos, &crc, 4);
        pos += 4;
    }
}

typedef struct ckpt_rec {
    uint32_t kind; /* 1 tensor (zlib), 2 blob (zlib), 3 tensor stored as it is */
    const char *name;
    int ndim;
    int64_t dims[6];
    const void *raw;
    size_t raw_bytes;
    const void *comp; /* NULL: compress raw; else these bytes are stored as the zlib data */
    size_t comp_bytes;
} ckpt_rec;

static inline void ckpt_put(uint8_t **buf, size_t *len, const void *data, size_t n)
{
    *buf = realloc(*buf, *len + n + 1);
    memcpy(*buf + *len, data, n);
    *len += n;
}

/* A whole file: header, records (CRCs valid), end marker. The caller frees *out. */
static inline size_t ckpt_build(const ckpt_rec *recs, int n, uint8_t **out)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    uint32_t version = 1, count = (uint32_t)n, zero = 0;
    ckpt_put(&buf, &len, "DPTCKPT", 8);
    ckpt_put(&buf, &len, &version, 4);
    ckpt_put(&buf, &len, &count, 4);
    ckpt_put(&buf, &len, &zero, 4);
    for (int i = 0; i < n; i++) {
        const ckpt_rec *r = &recs[i];
        uint32_t name_len = (uint32_t)strlen(r->name), ndim = (uint32_t)r->ndim;
        uint64_t raw_bytes = r->raw_bytes;
        ckpt_put(&buf, &len, &r->kind, 4);
        ckpt_put(&buf, &len, &name_len, 4);
        ckpt_put(&buf, &len, r->name, name_len);
        ckpt_put(&buf, &len, &ndim, 4);
        for (int d = 0; d < r->ndim; d++)
            ckpt_put(&buf, &len, &r->dims[d], 8);
        ckpt_put(&buf, &len, &raw_bytes, 8);
        bool stored = r->kind == 3 && !r->comp;
        uLongf comp_bytes = r->comp ? (uLongf)r->comp_bytes : stored ? (uLongf)r->raw_bytes : compressBound((uLong)r->raw_bytes);
        uint8_t *comp = malloc(comp_bytes + 1);
        if (r->comp)
            memcpy(comp, r->comp, r->comp_bytes);
        else if (stored)
            memcpy(comp, r->raw, r->raw_bytes);
        else
            compress2(comp, &comp_bytes, r->raw, (uLong)r->raw_bytes, 1);
        uint64_t cb = comp_bytes;
        ckpt_put(&buf, &len, &cb, 8);
        ckpt_put(&buf, &len, comp, comp_bytes);
        free(comp);
        ckpt_put(&buf, &len, &zero, 4); /* CRC, fixed below */
    }
    ckpt_put(&buf, &len, "DPTEND\0", 8);
    ckpt_fix_crcs(buf, len);
    *out = buf;
    return len;
}

#endif
