/* safetensors.c: reading Hugging Face's safetensors files, the format PyTorch, timm, the
 * Hugging Face hub and `./train --export safetensors` write weights in: an 8-byte little-endian
 * header length N, N bytes of JSON ({"name": {"dtype": "F32", "shape": [64, 3, 7, 7],
 * "data_offsets": [begin, end]}, ..., "__metadata__": {...}}, padded with spaces), then the
 * tensors' bytes, row-major little-endian, offsets relative to the end of the header.
 *
 * Everything is checked before any tensor is handed on (a hostile or damaged file is refused
 * naming the file and the tensor): the header's size against the file's, the JSON (strings,
 * escapes, nesting), each dtype, shape and offsets (sizes in checked 64-bit, inside the data,
 * not overlapping), names (not twice, no control bytes), and then each tensor's values
 * (finite, in float32's range). Integer and boolean tensors are not weights of a float model
 * (PyTorch's num_batches_tracked): passed over and counted. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpt.h"
#include "error.h"
#include "half.h"
#include "json.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads little-endian bytes as the host's"
#endif

#define HEADER_MAX 100000000ULL /* the format's own limit on the JSON header */
#define MAX_DIMS 8
#define HINT_DAMAGED                                                                                              \
    "HINT: the file is damaged or not a safetensors file: write it again (Python: "                               \
    "safetensors.torch.save_file(model.state_dict(), PATH), or ./train --export safetensors CKPT PATH)"

typedef enum { T_F64, T_F32, T_F16, T_BF16, T_INT, T_UNREAD } value_kind;

static const struct {
    const char *name;
    int size;
    value_kind kind;
} dtypes[] = {
    {"F64", 8, T_F64},      {"F32", 4, T_F32},      {"F16", 2, T_F16},  {"BF16", 2, T_BF16},
    {"I64", 8, T_INT},      {"I32", 4, T_INT},      {"I16", 2, T_INT},  {"I8", 1, T_INT},
    {"U64", 8, T_INT},      {"U32", 4, T_INT},      {"U16", 2, T_INT},  {"U8", 1, T_INT},
    {"BOOL", 1, T_INT},     {"F8_E4M3", 1, T_UNREAD}, {"F8_E5M2", 1, T_UNREAD},
};

typedef struct entry {
    char *name;
    int dtype; /* index into dtypes */
    int ndim;
    int64_t dims[MAX_DIMS];
    uint64_t begin, end; /* relative to the data */
} entry;

/* One tensor's description: {"dtype": ..., "shape": [...], "data_offsets": [b, e]}. */
static bool tensor_entry(dpt_json *p, entry *e)
{
    if (!dpt_json_expect(p, '{')) return false;
    bool have_dtype = false, have_shape = false, have_offsets = false;
    dpt_json_ws(p);
    if (p->s < p->end && *p->s == '}') return dpt_json_fail(p, "has a tensor without dtype, shape and data_offsets");
    bool first = true;
    while (dpt_json_more(p, '}', &first)) {
        char *key = NULL;
        if (!dpt_json_string(p, &key, NULL) || !dpt_json_expect(p, ':')) return free(key), false;
        bool ok = true;
        if (!strcmp(key, "dtype")) {
            char *dt = NULL;
            ok = dpt_json_string(p, &dt, NULL);
            e->dtype = -1;
            for (size_t i = 0; ok && i < sizeof dtypes / sizeof dtypes[0]; i++)
                if (!strcmp(dt, dtypes[i].name)) e->dtype = (int)i;
            if (ok && e->dtype < 0) {
                dpt_printable(dt);
                dpt_errorf(p->err, "%s: tensor %s has dtype \"%.32s\", which is not one of safetensors' dtypes\n"
                                   "HINT: dptrain reads F64, F32, F16 and BF16 weights (integer tensors are passed over)",
                           p->path, e->name, dt);
                p->failed = true, ok = false;
            }
            free(dt);
            have_dtype = true;
        } else if (!strcmp(key, "shape")) {
            bool dims_first = true;
            ok = dpt_json_expect(p, '[');
            e->ndim = 0;
            while (ok && dpt_json_more(p, ']', &dims_first)) {
                uint64_t d;
                ok = dpt_json_uint(p, &d);
                if (ok && e->ndim == MAX_DIMS) ok = dpt_json_fail(p, "has a shape of more than 8 dimensions");
                if (ok && d > ((uint64_t)1 << 40)) ok = dpt_json_fail(p, "has a dimension larger than 2^40");
                if (ok) e->dims[e->ndim++] = (int64_t)d;
            }
            ok = ok && !p->failed;
            have_shape = true;
        } else if (!strcmp(key, "data_offsets")) {
            ok = dpt_json_expect(p, '[') && dpt_json_uint(p, &e->begin) && dpt_json_expect(p, ',') && dpt_json_uint(p, &e->end) &&
                 dpt_json_expect(p, ']');
            have_offsets = true;
        } else {
            ok = dpt_json_skip(p, 1);
        }
        free(key);
        if (!ok) return false;
    }
    if (p->failed) return false;
    if (!have_dtype || !have_shape || !have_offsets) {
        dpt_errorf(p->err, "%s: tensor %s lacks its %s\n" HINT_DAMAGED, p->path, e->name,
                   !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
        p->failed = true;
        return false;
    }
    return true;
}

static int by_begin(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const entry *const *)a)->name, (*(const entry *const *)b)->name);
}

static void free_entries(entry *es, int n)
{
    for (int i = 0; i < n; i++)
        free(es[i].name);
    free(es);
}

static bool read_at(int fd, void *buf, size_t n, uint64_t at, const char *path, dpt_error *err)
{
    size_t got;
    bool read = dpt_read_at(fd, buf, n, at, &got);
    if (got < n)
        return dpt_errorf(err, "%s: %s at byte %llu\n" HINT_DAMAGED, path, read ? "the file ended" : strerror(errno),
                          (unsigned long long)(at + got));
    return true;
}

bool dpt_safetensors_is(const char *path)
{
    size_t len = strlen(path);
    if (len >= 12 && !strcmp(path + len - 12, ".safetensors")) return true; /* its reader says what is wrong */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    unsigned char head[9];
    struct stat st;
    bool is = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head;
    uint64_t n = 0;
    for (int i = 7; is && i >= 0; i--)
        n = n << 8 | head[i];
    close(fd);
    /* a header length the format allows, then '{' (a dptrain checkpoint starts "DPTCKPT") */
    return is && head[8] == '{' && n >= 2 && n <= HEADER_MAX;
}

/* The file's tensors, checked, in the order of their bytes. */
static bool read_header(int fd, const char *path, uint64_t file_size, entry **out, int *count, uint64_t *data_at,
                        dpt_error *err)
{
    unsigned char len8[8];
    if (file_size < 10) return dpt_errorf(err, "%s: %llu bytes, too short for a safetensors file\n" HINT_DAMAGED, path,
                                          (unsigned long long)file_size);
    if (!read_at(fd, len8, 8, 0, path, err)) return false;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len8[i];
    if (n < 2 || n > HEADER_MAX || n > file_size - 8)
        return dpt_errorf(err, "%s: its header length %llu does not fit the file (%llu bytes; the format allows up to "
                               "100,000,000)\n" HINT_DAMAGED,
                          path, (unsigned long long)n, (unsigned long long)file_size);
    char *json = malloc(n);
    if (!json) dpt_fatal("out of host memory reading %s's header (%llu bytes)", path, (unsigned long long)n);
    if (!read_at(fd, json, n, 8, path, err)) return free(json), false;
    dpt_json p = {.s = json, .end = json + n, .start = json, .path = path, .where = "its JSON header",
                  .unit = " of the header", .hint = HINT_DAMAGED, .err = err};
    int cap = 64, k = 0;
    entry *es = calloc((size_t)cap, sizeof *es);
    if (!es) dpt_fatal("out of host memory");
    bool ok = dpt_json_expect(&p, '{'), first = true;
    while (ok && dpt_json_more(&p, '}', &first)) {
        char *name = NULL;
        ok = dpt_json_string(&p, &name, NULL) && dpt_json_expect(&p, ':');
        if (ok && !strcmp(name, "__metadata__")) {
            ok = dpt_json_skip(&p, 1);
            free(name);
        } else if (ok) {
            if (k == cap) {
                entry *grown = realloc(es, (size_t)(cap *= 2) * sizeof *es);
                if (!grown) dpt_fatal("out of host memory");
                es = grown;
            }
            memset(&es[k], 0, sizeof es[k]);
            es[k].name = name;
            ok = tensor_entry(&p, &es[k++]);
        } else {
            free(name);
        }
    }
    ok = ok && dpt_json_end(&p);
    free(json);
    uint64_t data = file_size - 8 - n;
    for (int i = 0; ok && i < k; i++) { /* sizes in checked 64-bit, inside the data */
        entry *e = &es[i];
        uint64_t numel = 1, bytes;
        bool over = false;
        for (int d = 0; d < e->ndim; d++)
            over |= __builtin_mul_overflow(numel, (uint64_t)e->dims[d], &numel);
        over |= __builtin_mul_overflow(numel, (uint64_t)dtypes[e->dtype].size, &bytes);
        if (over || e->begin > e->end || e->end > data || e->end - e->begin != bytes) {
            char shape[160] = "";
            size_t at = 0;
            for (int d = 0; d < e->ndim && at < sizeof shape; d++)
                at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%lld", d ? ", " : "", (long long)e->dims[d]);
            dpt_printable(e->name);
            ok = dpt_errorf(err,
                            "%s: tensor %.200s (%s, shape [%s]) has data_offsets [%llu, %llu], which %s (the data "
                            "holds %llu bytes)\n" HINT_DAMAGED,
                            path, e->name, dtypes[e->dtype].name, shape, (unsigned long long)e->begin,
                            (unsigned long long)e->end,
                            over || e->begin > e->end ? "cannot hold it"
                            : e->end > data          ? "run past the end of the file"
                                                     : "do not span its shape's bytes",
                            (unsigned long long)data);
        }
    }
    if (ok && k > 1) { /* no name twice */
        entry **names = malloc((size_t)k * sizeof *names);
        if (!names) dpt_fatal("out of host memory");
        for (int i = 0; i < k; i++)
            names[i] = &es[i];
        qsort(names, (size_t)k, sizeof *names, by_name);
        for (int i = 1; ok && i < k; i++)
            if (!strcmp(names[i - 1]->name, names[i]->name)) {
                dpt_printable(names[i]->name);
                ok = dpt_errorf(err, "%s: tensor %.200s is described twice in its header\n" HINT_DAMAGED, path,
                                names[i]->name);
            }
        free(names);
    }
    if (ok) qsort(es, (size_t)k, sizeof *es, by_begin);
    for (int i = 1; ok && i < k; i++) /* and no two tensors' bytes overlap */
        if (es[i].begin < es[i - 1].end && es[i].begin < es[i].end) {
            dpt_printable(es[i - 1].name), dpt_printable(es[i].name);
            ok = dpt_errorf(err, "%s: tensors %.200s and %.200s share bytes (data_offsets [%llu, %llu] and [%llu, %llu])\n" HINT_DAMAGED,
                            path, es[i - 1].name, es[i].name, (unsigned long long)es[i - 1].begin,
                            (unsigned long long)es[i - 1].end, (unsigned long long)es[i].begin,
                            (unsigned long long)es[i].end);
        }
    if (!ok) {
        free_entries(es, k);
        return false;
    }
    *out = es, *count = k, *data_at = 8 + n;
    return true;
}

bool dpt_safetensors_tensors(const char *path, dpt_ckpt_tensor_fn fn, void *user, dpt_safetensors_skips *skips,
                             dpt_error *err)
{
    if (skips) memset(skips, 0, sizeof *skips);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dpt_errorf(err, "%s: %s\nHINT: the path of a .safetensors file", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return dpt_errorf(err, "%s is not a regular file\nHINT: the path of a .safetensors file", path);
    }
    entry *es = NULL;
    int n = 0;
    uint64_t data_at = 0;
    if (!read_header(fd, path, (uint64_t)st.st_size, &es, &n, &data_at, err)) {
        close(fd);
        return false;
    }
    bool ok = true;
    void *raw = NULL;
    float *vals = NULL;
    size_t raw_cap = 0, vals_cap = 0;
    for (int i = 0; ok && i < n; i++) {
        entry *e = &es[i];
        dpt_printable(e->name);
        value_kind k = dtypes[e->dtype].kind;
        if (k == T_INT) {
            if (skips) { /* the first two names (whole, while they fit), then " ..." */
                size_t at = strlen(skips->names), len = strlen(e->name) + (at ? 2 : 0);
                if (skips->count < 2 && at + len + 5 < sizeof skips->names)
                    snprintf(skips->names + at, sizeof skips->names - at, "%s%s", at ? ", " : "", e->name);
                else if (at + 5 <= sizeof skips->names && !strstr(skips->names, " ..."))
                    snprintf(skips->names + at, sizeof skips->names - at, " ...");
                skips->count++;
            }
            continue;
        }
        if (k == T_UNREAD) {
            ok = dpt_errorf(err, "%s: tensor %s is %s (8-bit floats), which dptrain does not read\nHINT: write the "
                                 "weights in F32, BF16 or F16 (PyTorch: tensor.float())",
                            path, e->name, dtypes[e->dtype].name);
            break;
        }
        uint64_t numel = 1;
        for (int d = 0; d < e->ndim; d++)
            numel *= (uint64_t)e->dims[d]; /* checked with the offsets */
        size_t bytes = (size_t)(e->end - e->begin), need = (size_t)numel * sizeof(float);
        if (bytes > raw_cap || need > vals_cap) { /* each buffer as large as the largest tensor's so far */
            free(raw), free(vals);
            raw_cap = bytes > raw_cap ? bytes : raw_cap, vals_cap = need > vals_cap ? need : vals_cap;
            raw = malloc(raw_cap ? raw_cap : 1), vals = malloc(vals_cap ? vals_cap : 1);
            if (!raw || !vals) dpt_fatal("out of host memory reading tensor %s of %s (%zu bytes)", e->name, path, need);
        }
        if (!read_at(fd, raw, bytes, data_at + e->begin, path, err)) {
            ok = false;
            break;
        }
        const unsigned char *b = raw;
        for (uint64_t j = 0; j < numel; j++) {
            double v;
            switch (k) {
            case T_F64: memcpy(&v, b + 8 * j, 8); break;
            case T_F32: {
                float f;
                memcpy(&f, b + 4 * j, 4);
                v = f;
                break;
            }
            case T_F16:
            case T_BF16: {
                uint16_t h;
                memcpy(&h, b + 2 * j, 2);
                v = k == T_F16 ? dpt_f32_from_fp16(h) : dpt_f32_from_bf16(h);
                break;
            }
            default: v = 0; break;
            }
            vals[j] = (float)v;
            if (!isfinite(vals[j])) {
                ok = dpt_errorf(err, "%s: tensor %s holds %g at element %llu%s\nHINT: weights must be finite: the run "
                                     "that wrote them diverged, or the file is damaged",
                                path, e->name, v, (unsigned long long)j,
                                isfinite(v) ? ", beyond float32's range" : "");
                break;
            }
        }
        if (ok) ok = fn(user, e->name, false, e->ndim, e->dims, vals, (int64_t)numel, err);
    }
    free(raw), free(vals);
    free_entries(es, n);
    close(fd);
    return ok;
}

/* ---------------------------------------------------------------- writing */

static void json_string(FILE *m, const char *s)
{
    fputc('"', m);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(m, "\\%c", c);
        else if (c < 0x20)
            fprintf(m, "\\u%04x", c);
        else
            fputc(c, m);
    }
    fputc('"', m);
}

bool dpt_safetensors_write_header(FILE *f, const char *path, const dpt_safetensors_entry *e, int n,
                                  const char *source, dpt_error *err)
{
    char *json = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&json, &len);
    if (!m) dpt_fatal("out of host memory");
    fputc('{', m);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        json_string(m, e[i].name);
        fprintf(m, ":{\"dtype\":\"F32\",\"shape\":[");
        uint64_t bytes = sizeof(float);
        for (int d = 0; d < e[i].ndim; d++) {
            fprintf(m, "%s%lld", d ? "," : "", (long long)e[i].dims[d]);
            bytes *= (uint64_t)e[i].dims[d];
        }
        fprintf(m, "],\"data_offsets\":[%llu,%llu]},", (unsigned long long)at, (unsigned long long)(at + bytes));
        at += bytes;
    }
    fprintf(m, "\"__metadata__\":{\"format\":\"pt\",\"producer\":\"dptrain %s\"", DPT_VERSION);
    if (source) {
        fprintf(m, ",\"source\":");
        json_string(m, source);
    }
    fprintf(m, "}}");
    fclose(m);
    uint64_t padded = (len + 7) / 8 * 8; /* the data 8-byte aligned, as the reference writer pads */
    unsigned char n8[8];
    for (int i = 0; i < 8; i++)
        n8[i] = (unsigned char)(padded >> (8 * i));
    bool ok = fwrite(n8, 8, 1, f) == 1 && fwrite(json, 1, len, f) == len;
    for (size_t i = len; ok && i < padded; i++)
        ok = fputc(' ', f) != EOF;
    free(json);
    return ok || dpt_errorf(err, "writing %s failed: %s\nHINT: is the disk full?", path, strerror(errno));
}
