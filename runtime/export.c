/* export.c: ./train --export FORMAT CKPT OUT: a checkpoint's weights (parameters, then buffers,
 * named as in the checkpoint) in a file other programs read.
 *   safetensors: Hugging Face's format: an 8-byte little-endian header length, a JSON header
 *     ({"NAME": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
 *     "__metadata__": {...}}, padded with spaces to 8 bytes), then the tensors' bytes.
 *   npz: NumPy's np.savez layout: a zip archive (stored, no compression) of NAME.npy files,
 *     each a version 1.0 .npy header ('<f4', C order, the shape) and the values.
 * The file is written beside OUT under a random name (dpt_atomic_file), flushed, then renamed onto OUT
 * (dpt_atomic_file_open/close): a reader never sees half a file. Formats of one model (llm.c's for gpt) are the model's own
 * (dpt_model_impl.export_weights). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "dpt.h"
#include "error.h"
#include "export.h"

typedef struct entry {
    char *name;
    int ndim;
    int64_t dims[DPT_MAX_DIMS];
    int64_t numel;
} entry;

typedef struct exporter {
    FILE *f;
    const char *out;
    entry *e;
    int n, cap, next;
    uint64_t offset;  /* npz: where the next local header starts */
    uint64_t *local;  /* npz: each entry's local header offset */
    uint32_t *crc;    /* npz: each entry's CRC-32 */
    uint64_t *stored; /* npz: each entry's stored bytes (.npy header and data) */
    bool averages;    /* --ema: the weight averages in place of the weights */
} exporter;

bool dpt_export_is_file_format(const char *format)
{
    return !strcmp(format, "safetensors") || !strcmp(format, "npz");
}

static bool collect(void *user, const char *name, bool buffer, int ndim, const int64_t *dims, const float *data,
                    int64_t numel, dpt_error *err)
{
    (void)buffer, (void)data;
    exporter *x = user;
    for (int i = 0; i < x->n; i++)
        if (!strcmp(x->e[i].name, name))
            return dpt_errorf(err, "the checkpoint holds two tensors named %s (a parameter and a buffer): an exported "
                                   "file keys tensors by name",
                              name);
    if (x->n == x->cap) {
        x->cap = x->cap ? 2 * x->cap : 64;
        x->e = realloc(x->e, (size_t)x->cap * sizeof *x->e);
        if (!x->e) dpt_fatal("out of host memory");
    }
    entry *e = &x->e[x->n++];
    e->name = strdup(name);
    if (!e->name) dpt_fatal("out of host memory");
    e->ndim = ndim, e->numel = numel;
    memcpy(e->dims, dims, (size_t)ndim * sizeof *dims);
    return true;
}

static bool put(exporter *x, const void *p, size_t n, dpt_error *err)
{
    if (n && fwrite(p, 1, n, x->f) != n)
        return dpt_errorf(err, "writing %s failed: %s\nHINT: is the disk full?", x->out, strerror(errno));
    return true;
}

static bool put_le(exporter *x, uint64_t v, int bytes, dpt_error *err)
{
    unsigned char b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return put(x, b, (size_t)bytes, err);
}

/* The values as little-endian float32 (the host is little-endian: x86-64, arm64). */
static bool put_floats(exporter *x, const float *data, int64_t numel, dpt_error *err)
{
    return put(x, data, (size_t)numel * sizeof(float), err);
}

/* ---------------------------------------------------------------- safetensors */

static bool safetensors_data(void *user, const char *name, bool buffer, int ndim, const int64_t *dims,
                             const float *data, int64_t numel, dpt_error *err)
{
    (void)name, (void)buffer, (void)ndim, (void)dims;
    return put_floats(user, data, numel, err);
}

static bool write_safetensors(exporter *x, const char *ckpt, dpt_error *err)
{
    dpt_safetensors_entry *se = calloc((size_t)x->n + 1, sizeof *se);
    if (!se) dpt_fatal("out of host memory");
    for (int i = 0; i < x->n; i++)
        se[i] = (dpt_safetensors_entry){.name = x->e[i].name, .ndim = x->e[i].ndim, .dims = x->e[i].dims};
    bool ok = dpt_safetensors_write_header(x->f, x->out, se, x->n, ckpt, err);
    free(se);
    return ok && dpt_checkpoint_tensors_of(ckpt, x->averages, safetensors_data, x, err);
}

/* ---------------------------------------------------------------- npz */

/* The .npy version 1.0 header of entry e, padded with spaces and a newline so that the data
 * starts at a multiple of 64 bytes (NumPy's own alignment). */
static size_t npy_header(const entry *e, char *buf, size_t cap)
{
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int d = 0; d < e->ndim; d++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld%s", (long long)e->dims[d],
                      e->ndim == 1 ? "," : d + 1 < e->ndim ? ", " : "");
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64, hlen = total - 10;
    if (total > cap) return 0;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)(hlen & 0xff), buf[9] = (char)(hlen >> 8);
    memcpy(buf + 10, dict, (size_t)n);
    memset(buf + 10 + n, ' ', hlen - (size_t)n - 1);
    buf[total - 1] = '\n';
    return total;
}

static bool npz_entry(void *user, const char *name, bool buffer, int ndim, const int64_t *dims, const float *data,
                      int64_t numel, dpt_error *err)
{
    (void)name, (void)buffer, (void)ndim, (void)dims;
    exporter *x = user;
    int i = x->next++;
    const entry *e = &x->e[i];
    char head[1024];
    size_t hn = npy_header(e, head, sizeof head);
    if (!hn) return dpt_errorf(err, "tensor %s: a shape too long for an .npy header", e->name);
    uint64_t bytes = (uint64_t)numel * sizeof(float), stored = hn + bytes;
    if (stored >= 0xffffffffu || x->offset >= 0xffffffffu)
        return dpt_errorf(err, "%s: the tensors pass 4 GiB, more than a zip without ZIP64 holds\nHINT: --export "
                               "safetensors has no such limit",
                          x->out);
    uLong crc = crc32(0L, (const Bytef *)head, (uInt)hn);
    for (uint64_t done = 0; done < bytes;) { /* crc32 takes at most 4 GiB - 1 a call */
        uint64_t chunk = bytes - done < (1u << 30) ? bytes - done : (1u << 30);
        crc = crc32(crc, (const Bytef *)data + done, (uInt)chunk);
        done += chunk;
    }
    char fname[600];
    int fl = snprintf(fname, sizeof fname, "%s.npy", e->name);
    x->local[i] = x->offset, x->crc[i] = (uint32_t)crc, x->stored[i] = stored;
    bool ok = put_le(x, 0x04034b50u, 4, err) && put_le(x, 20, 2, err) && put_le(x, 0, 2, err) &&
              put_le(x, 0, 2, err) /* stored */ && put_le(x, 0, 2, err) && put_le(x, 0x21, 2, err) /* 1980-01-01 */ &&
              put_le(x, crc, 4, err) && put_le(x, stored, 4, err) && put_le(x, stored, 4, err) &&
              put_le(x, (uint64_t)fl, 2, err) && put_le(x, 0, 2, err) && put(x, fname, (size_t)fl, err) &&
              put(x, head, hn, err) && put_floats(x, data, numel, err);
    x->offset += 30 + (uint64_t)fl + stored;
    return ok;
}

static bool write_npz(exporter *x, const char *ckpt, dpt_error *err)
{
    x->local = calloc((size_t)x->n + 1, sizeof *x->local);
    x->crc = calloc((size_t)x->n + 1, sizeof *x->crc);
    x->stored = calloc((size_t)x->n + 1, sizeof *x->stored);
    if (!x->local || !x->crc || !x->stored) dpt_fatal("out of host memory");
    if (!dpt_checkpoint_tensors_of(ckpt, x->averages, npz_entry, x, err)) return false;
    uint64_t cd_start = x->offset, cd_size = 0;
    bool ok = true;
    for (int i = 0; i < x->n && ok; i++) {
        char fname[600];
        int fl = snprintf(fname, sizeof fname, "%s.npy", x->e[i].name);
        ok = put_le(x, 0x02014b50u, 4, err) && put_le(x, 20, 2, err) && put_le(x, 20, 2, err) && put_le(x, 0, 2, err) &&
             put_le(x, 0, 2, err) && put_le(x, 0, 2, err) && put_le(x, 0x21, 2, err) && put_le(x, x->crc[i], 4, err) &&
             put_le(x, x->stored[i], 4, err) && put_le(x, x->stored[i], 4, err) && put_le(x, (uint64_t)fl, 2, err) &&
             put_le(x, 0, 2, err) && put_le(x, 0, 2, err) && put_le(x, 0, 2, err) && put_le(x, 0, 2, err) &&
             put_le(x, 0, 4, err) && put_le(x, x->local[i], 4, err) && put(x, fname, (size_t)fl, err);
        cd_size += 46 + (uint64_t)fl;
    }
    if (x->n > 0xffff) return dpt_errorf(err, "%s: %d tensors, more than a zip without ZIP64 lists", x->out, x->n);
    return ok && put_le(x, 0x06054b50u, 4, err) && put_le(x, 0, 2, err) && put_le(x, 0, 2, err) &&
           put_le(x, (uint64_t)x->n, 2, err) && put_le(x, (uint64_t)x->n, 2, err) && put_le(x, cd_size, 4, err) &&
           put_le(x, cd_start, 4, err) && put_le(x, 0, 2, err);
}

bool dpt_export_checkpoint(const char *format, const char *ckpt, const char *out, bool averages, int *count,
                           dpt_error *err)
{
    exporter x = {.out = out, .averages = averages};
    bool ok = dpt_checkpoint_tensors_of(ckpt, averages, collect, &x, err);
    if (ok && x.n == 0) ok = dpt_errorf(err, "%s holds no parameters", ckpt);
    dpt_atomic_file af;
    if (ok && (ok = dpt_atomic_file_open(&af, out, err))) {
        x.f = af.f;
        ok = !strcmp(format, "npz") ? write_npz(&x, ckpt, err) : write_safetensors(&x, ckpt, err);
        ok = dpt_atomic_file_close(&af, ok, err);
    }
    if (count) *count = x.n;
    for (int i = 0; i < x.n; i++)
        free(x.e[i].name);
    free(x.e), free(x.local), free(x.crc), free(x.stored);
    return ok;
}
