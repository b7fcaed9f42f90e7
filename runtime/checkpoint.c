/* checkpoint.c: the checkpoint file. Little-endian throughout:
 *   "DPTCKPT\0" | u32 version | u32 record count | u32 CRC32 of the 16 bytes before it
 *   record*:  u32 kind | u32 name length | name | u32 ndim | i64 dims[ndim]
 *             | u64 raw bytes | u64 stored bytes | data | u32 CRC32 of the record
 *   "DPTEND\0\0"
 * A record is a tensor (f32, named param/..., buffer/..., optim/...) or a blob (meta, config,
 * rng). Blobs (kind 2) and tensors of older files (kind 1) hold zlib data; tensors are written
 * as they are (kind 3, stored bytes = raw bytes): zlib level 1 saved about 7% of a float
 * tensor's bytes and cost most of a large model's save and load time. Files are written a
 * record at a time (no copy of the whole file in memory), read whole and parsed with bounds
 * checks, so no byte pattern can crash the reader; nothing is applied to the model before
 * every record has been checked.
 * Parts ([checkpoint] sharded, under [distributed] zero): format version 2. The main file holds
 * the weights, the meta (optim_parts = N, optim_nonce = X) and, for each optimizer state tensor,
 * a record of kind 4 (its name and whole shape, no data: stored bytes 0); each rank q writes its
 * elements of them into PATH.X.optimQ-of-N (records "optim/NAME@LO": LO the first element), before
 * rank 0 writes the main file, whose rename is the checkpoint's commit. A reader fills each kind-4
 * record from the N parts (every element exactly once, the nonce and numbering checked), so
 * everything after read_records sees the one-file checkpoint. */
#include <dirent.h>
#include <time.h>
#include <sys/file.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ctx.h"
#include "digest.h"
#include "error.h"

#define CKPT_MAGIC "DPTCKPT"
#define CKPT_END "DPTEND\0"
#define CKPT_VERSION 1u       /* one file */
#define CKPT_VERSION_PARTS 2u /* the optimizer state in parts beside it */
#define HINT_CORRUPT "HINT: the file is damaged; resume from an older checkpoint (ls the checkpoint dir)"

enum { REC_TENSOR = 1, REC_BLOB = 2, REC_TENSOR_STORED = 3, REC_PARTS = 4 };
/* A record name: "optim/" + an optimizer state's name (a parameter's, DPT_NAME_MAX, + ".adamw0") + "@"
 * + a part's first element, or "ema/buffer/" + a buffer's; files of names up to 159 (before) read as before */
enum { RECORD_NAME = 256 };

/* ---------------------------------------------------------------- writing */

/* The file being written, a record at a time: each put goes to the file and into the running
 * CRC of the record it belongs to. */
typedef struct writer {
    FILE *f;
    size_t written;
    size_t crash_at; /* tests (DPT_TEST_CKPT_CRASH_AFTER): the process dies after this many bytes */
    uLong crc;
    bool ok;
} writer;

static void put(writer *w, const void *data, size_t n)
{
    const uint8_t *p = data;
    w->crc = crc32_z(w->crc, p, n);
    while (w->ok && n > 0) {
        size_t chunk = n < (1u << 20) ? n : (1u << 20);
        if (w->written < w->crash_at && w->written + chunk > w->crash_at) chunk = w->crash_at - w->written;
        if (w->written == w->crash_at) fflush(w->f), _exit(7);
        w->ok = fwrite(p, 1, chunk, w->f) == chunk;
        w->written += chunk, p += chunk, n -= chunk;
    }
}

static void put_u32(writer *w, uint32_t v)
{
    put(w, &v, 4);
}
static void put_u64(writer *w, uint64_t v)
{
    put(w, &v, 8);
}

/* A record; blobs zlib-compressed, tensors stored as they are. */
static void put_record(writer *w, uint32_t kind, const char *name, int ndim, const int64_t *dims,
                       const void *raw, uint64_t raw_bytes)
{
    w->crc = crc32(0L, NULL, 0);
    put_u32(w, kind);
    put_u32(w, (uint32_t)strlen(name));
    put(w, name, strlen(name));
    put_u32(w, (uint32_t)ndim);
    for (int i = 0; i < ndim; i++)
        put_u64(w, (uint64_t)dims[i]);
    put_u64(w, raw_bytes);
    if (kind == REC_PARTS) { /* name and shape only: the parts hold the data */
        put_u64(w, 0);
    } else if (kind == REC_TENSOR_STORED) {
        put_u64(w, raw_bytes);
        put(w, raw, raw_bytes);
    } else {
        uLongf comp_bytes = compressBound((uLong)raw_bytes);
        uint8_t *comp = malloc(comp_bytes ? comp_bytes : 1);
        if (!comp || compress2(comp, &comp_bytes, raw, (uLong)raw_bytes, 1) != Z_OK)
            dpt_fatal("zlib could not compress checkpoint record %s", name);
        put_u64(w, comp_bytes);
        put(w, comp, comp_bytes);
        free(comp);
    }
    put_u32(w, (uint32_t)w->crc);
}

static void put_tensor(writer *w, const char *prefix, const dpt_tensor *t)
{
    char name[RECORD_NAME];
    snprintf(name, sizeof name, "%s%s", prefix, t->name);
    if (t->ctx->device.kind == DPT_DEVICE_CPU && t->dtype == DPT_F32 && dpt_tensor_is_contiguous(t)) {
        /* host memory already: written from where it is */
        put_record(w, REC_TENSOR_STORED, name, t->ndim, t->shape, t->data, (uint64_t)t->numel * sizeof(float));
        return;
    }
    float *host = malloc((size_t)t->numel * sizeof(float) + 1);
    if (!host) dpt_fatal("out of host memory writing %s", name);
    dpt_tensor_copy_to_host(t, host);
    put_record(w, REC_TENSOR_STORED, name, t->ndim, t->shape, host, (uint64_t)t->numel * sizeof(float));
    free(host);
}

static char *config_text(const dpt_config *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    dpt_config_print(cfg, mem);
    fclose(mem);
    return text;
}

char *dpt_checkpoint_part_path(const char *path, uint64_t nonce, int part, int parts)
{
    return dpt_strf("%s.%016llx.optim%d-of-%d", path, (unsigned long long)nonce, part, parts);
}

static void put_header(writer *w, uint32_t version, uint32_t nrecords)
{
    w->crc = crc32(0L, NULL, 0);
    put(w, CKPT_MAGIC, 8);
    put_u32(w, version);
    put_u32(w, nrecords);
    put_u32(w, (uint32_t)w->crc); /* the header's CRC: the 16 bytes before it */
}

static bool save_file(const char *path, const dpt_model *model, dpt_optim *optim, const dpt_ctx *ctx,
                      const dpt_config *cfg, const dpt_train_state *st, int world_size, int parts, uint64_t nonce,
                      dpt_error *err);

/* The safe file (runtime/atomic_file.c: an unpredictable temporary, renamed when whole); its
 * error says it was a checkpoint. */
static bool open_file(dpt_atomic_file *af, const char *path, dpt_error *err)
{
    return dpt_atomic_checkpoint_open(af, path, err) || dpt_error_prefix(err, "checkpoint: ");
}

bool dpt_checkpoint_save(const char *path, const dpt_model *model, dpt_optim *optim, const dpt_ctx *ctx,
                         const dpt_config *cfg, const dpt_train_state *st, int world_size, dpt_error *err)
{
    return save_file(path, model, optim, ctx, cfg, st, world_size, 0, 0, err);
}

bool dpt_checkpoint_save_part(const char *path, const dpt_optim *optim, int part, int parts, uint64_t nonce,
                              dpt_error *err)
{
    char *at = dpt_checkpoint_part_path(path, nonce, part, parts);
    dpt_atomic_file af;
    bool ok = open_file(&af, at, err);
    if (!ok) {
        free(at);
        return false;
    }
    writer w = {.f = af.f, .crash_at = (size_t)-1, .ok = true};
    int nstate = dpt_optim_num_state(optim);
    uint32_t nrecords = 1;
    for (int i = 0; i < nstate; i++) {
        int64_t lo, count;
        nrecords += dpt_optim_state_mine(optim, i, &lo, &count) != NULL;
    }
    put_header(&w, CKPT_VERSION_PARTS, nrecords);
    char meta[128];
    int n = snprintf(meta, sizeof meta, "part=%d\nparts=%d\nnonce=%016llx\n", part, parts, (unsigned long long)nonce);
    put_record(&w, REC_BLOB, "meta", 0, NULL, meta, (uint64_t)n);
    for (int i = 0; i < nstate; i++) {
        int64_t lo, count;
        const float *mine = dpt_optim_state_mine(optim, i, &lo, &count);
        if (!mine) continue;
        char name[RECORD_NAME], state[DPT_NAME_MAX + 65];
        dpt_optim_state_param(optim, i, state, sizeof state);
        snprintf(name, sizeof name, "optim/%s@%lld", state, (long long)lo);
        put_record(&w, REC_TENSOR_STORED, name, 1, &count, mine, (uint64_t)count * sizeof(float));
    }
    put(&w, CKPT_END, 8);
    if (!w.ok) dpt_errorf(err, "writing checkpoint part %s failed: %s\nHINT: is the disk full?", af.tmp, strerror(errno));
    ok = dpt_atomic_file_close(&af, w.ok, err);
    free(at);
    return ok;
}

/* The parts of path's checkpoint beside it (PATH.<16 hex>.optimQ-of-N): fn(dir-relative name)
 * for each, all nonces but `keep` (0: all). */
static void each_part(const char *path, uint64_t keep, void (*fn)(const char *dir, const char *name, void *user),
                      void *user)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? dpt_strf("%.*s", (int)(slash - path), path) : dpt_strf(".");
    const char *base = slash ? slash + 1 : path;
    size_t blen = strlen(base);
    DIR *d = opendir(*dir ? dir : "/");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        unsigned long long nonce;
        int part, parts, end = 0;
        if (strncmp(e->d_name, base, blen) || e->d_name[blen] != '.' ||
            sscanf(e->d_name + blen, ".%16llx.optim%d-of-%d%n", &nonce, &part, &parts, &end) != 3 ||
            e->d_name[blen + (size_t)end] != '\0' || (keep && nonce == keep))
            continue;
        fn(*dir ? dir : "/", e->d_name, user);
    }
    if (d) closedir(d);
    free(dir);
}

static void unlink_part(const char *dir, const char *name, void *user)
{
    (void)user;
    char *at = dpt_strf("%s/%s", dir, name);
    unlink(at);
    free(at);
}

bool dpt_checkpoint_save_sharded(const char *path, const dpt_model *model, dpt_optim *optim, const dpt_ctx *ctx,
                                 const dpt_config *cfg, const dpt_train_state *st, int world_size, int parts,
                                 uint64_t nonce, dpt_error *err)
{
    if (!save_file(path, model, optim, ctx, cfg, st, world_size, parts, nonce, err)) return false;
    each_part(path, nonce, unlink_part, NULL); /* an earlier checkpoint's under this name (best.dpt) */
    return true;
}

static bool save_file(const char *path, const dpt_model *model, dpt_optim *optim, const dpt_ctx *ctx,
                      const dpt_config *cfg, const dpt_train_state *st, int world_size, int parts, uint64_t nonce,
                      dpt_error *err)
{
    dpt_atomic_file af;
    if (!open_file(&af, path, err)) return false;
    const char *fault = getenv("DPT_TEST_CKPT_CRASH_AFTER"); /* tests: die mid-write */
    writer w = {.f = af.f, .crash_at = fault ? (size_t)atoll(fault) : (size_t)-1, .ok = true};
    int nparams = dpt_model_num_params(model), nbuffers = dpt_model_num_buffers(model);
    const dpt_ema *ema = dpt_model_ema(model); /* [train] ema_decay: the weight averages, "ema/" records */
    int naverages = ema ? dpt_ema_count(ema) : 0;
    uint32_t nrecords = 3 + (uint32_t)(nparams + nbuffers + dpt_optim_num_state(optim) + naverages);
    put_header(&w, parts ? CKPT_VERSION_PARTS : CKPT_VERSION, nrecords);

    char meta[2048];
    int n = snprintf(meta, sizeof meta,
                     "model=%s\nsummary=%s\noptim=%s\noptim_steps=%lld\nepoch=%d\nbatches_done=%lld\n"
                     "step=%lld\nskipped=%lld\nbest_acc=%.17g\nbest_epoch=%d\nworld_size=%d\n"
                     "config_hash=%016llx\nepoch_samples=%lld\nloss_scale=%.17g\nscale_good_steps=%lld\n"
                     "scale_skips=%lld\ndata_hash=%016llx\nbest_loss=%.17g\nepoch_loss=%.17g\nepoch_correct=%lld\n"
                     "epoch_units=%lld\nstop_best=%.17g\nstop_best_epoch=%d\n",
                     dpt_model_name(model), dpt_model_summary(model), dpt_optim_name(optim),
                     (long long)dpt_optim_steps(optim), st->epoch, (long long)st->batches_done, (long long)st->step,
                     (long long)st->skipped, st->best_acc, st->best_epoch, world_size,
                     (unsigned long long)dpt_config_hash(cfg), (long long)st->samples_done, st->loss_scale,
                     (long long)st->scale_good_steps, (long long)st->scale_skips,
                     (unsigned long long)st->data_hash, st->best_loss, st->epoch_loss, (long long)st->epoch_correct,
                     (long long)st->epoch_units, st->stop_best, st->stop_best_epoch);
    DPT_ASSERT(n > 0 && (size_t)n < sizeof meta, "checkpoint meta of %d bytes", n);
    if (st->bucket_mb > 0) /* only where bucket_mb = auto chose: other files stay as they were */
        n += snprintf(meta + n, sizeof meta - (size_t)n, "bucket_mb=%.17g\n", st->bucket_mb);
    if (st->grad_compression > 0)
        n += snprintf(meta + n, sizeof meta - (size_t)n, "grad_compression_auto=%s\n",
                      st->grad_compression == 2 ? "bf16" : "none");
    if (parts) /* the optimizer state in parts beside the file */
        n += snprintf(meta + n, sizeof meta - (size_t)n, "optim_parts=%d\noptim_nonce=%016llx\n", parts,
                      (unsigned long long)nonce);
    DPT_ASSERT((size_t)n < sizeof meta, "checkpoint meta of %d bytes", n);
    put_record(&w, REC_BLOB, "meta", 0, NULL, meta, (uint64_t)n);
    char *text = config_text(cfg);
    put_record(&w, REC_BLOB, "config", 0, NULL, text, strlen(text));
    free(text);
    put_record(&w, REC_BLOB, "rng", 0, NULL, ctx->rng.s, sizeof ctx->rng.s);
    for (int i = 0; i < nparams; i++)
        put_tensor(&w, "param/", dpt_model_param_at(model, i));
    for (int i = 0; i < nbuffers; i++)
        put_tensor(&w, "buffer/", dpt_model_buffer_at(model, i));
    for (int i = 0; i < dpt_optim_num_state(optim); i++) {
        if (parts) { /* its name and whole shape; the ranks' parts hold the data */
            char name[RECORD_NAME], state[DPT_NAME_MAX + 65];
            const dpt_tensor *p = dpt_model_param_at(model, dpt_optim_state_param(optim, i, state, sizeof state));
            snprintf(name, sizeof name, "optim/%s", state);
            put_record(&w, REC_PARTS, name, p->ndim, p->shape, NULL, (uint64_t)p->numel * sizeof(float));
            continue;
        }
        put_tensor(&w, "optim/", dpt_optim_state_whole(optim, i, true)); /* ZeRO: gathered one at a time */
    }
    for (int i = 0; i < naverages; i++) /* the parameters' averages, then the buffers' */
        put_tensor(&w, i < nparams ? "ema/param/" : "ema/buffer/", dpt_ema_at(ema, i));
    put(&w, CKPT_END, 8);
    if (!w.ok) dpt_errorf(err, "writing checkpoint %s failed: %s\nHINT: is the disk full?", af.tmp, strerror(errno));
    return dpt_atomic_file_close(&af, w.ok, err);
}

/* ---------------------------------------------------------------- reading */

typedef struct record {
    uint32_t kind;
    char name[RECORD_NAME];
    int ndim;
    int64_t dims[DPT_MAX_DIMS];
    uint8_t *data; /* decompressed; NULL for a record the reader was told to skip */
    uint64_t bytes;
} record;

typedef struct reader {
    const uint8_t *buf;
    size_t len, pos;
} reader;

static bool take(reader *r, void *out, size_t n)
{
    if (r->len - r->pos < n) return false;
    memcpy(out, r->buf + r->pos, n);
    r->pos += n;
    return true;
}

static void free_records(record *recs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        free(recs[i].data);
    free(recs);
}

/* Parse and verify every record; false with err naming the first problem. Every error is
 * formatted before the records are freed (the message names the record). Records whose name
 * starts with `skip` (NULL: none) are checked (framing, CRC) but not decompressed: their data
 * stays NULL (a weights-only read leaves the optimizer state, most of an AdamW checkpoint). */
/* Whether a record's name starts with one of skip's prefixes ("optim/|ema/"; NULL: none). */
static bool skipped(const char *name, const char *skip)
{
    for (const char *p = skip; p && *p;) {
        size_t len = strcspn(p, "|");
        if (len && !strncmp(name, p, len)) return true;
        p += len + (p[len] == '|');
    }
    return false;
}

static bool parse(const char *path, reader *r, const char *skip, record **out, uint32_t *count, dpt_error *err)
{
    char magic[8];
    uint32_t version, nrec, hcrc;
    if (!take(r, magic, 8) || memcmp(magic, CKPT_MAGIC, 8) != 0)
        return dpt_errorf(err,
                          "%s is not a dptrain checkpoint (bad magic)\nHINT: pass a ckpt-step*.dpt "
                          "file or 'latest' (weights alone, for --eval, --predict or [model] init: a .safetensors file)",
                          path);
    if (!take(r, &version, 4) || !take(r, &nrec, 4) || !take(r, &hcrc, 4))
        return dpt_errorf(err, "%s: truncated header\n" HINT_CORRUPT, path);
    if (hcrc != (uint32_t)crc32(0L, r->buf, 16))
        return dpt_errorf(err, "%s: header CRC mismatch\n" HINT_CORRUPT, path);
    if (version != CKPT_VERSION && version != CKPT_VERSION_PARTS)
        return dpt_errorf(err,
                          "%s: checkpoint format version %u; this dptrain reads versions %u and %u\n"
                          "HINT: resume with the dptrain that wrote it",
                          path, version, CKPT_VERSION, CKPT_VERSION_PARTS);
    if (nrec > 1000000) return dpt_errorf(err, "%s: implausible record count %u\n" HINT_CORRUPT, path, nrec);
    /* Each record takes at least 32 bytes: a count beyond that is damage, not a reason to
     * allocate. */
    if ((uint64_t)nrec * 32 > r->len)
        return dpt_errorf(err, "%s: %u records cannot fit in %zu bytes\n" HINT_CORRUPT, path, nrec, r->len);
    record *recs = calloc(nrec + 1, sizeof *recs);
    if (!recs) dpt_fatal("out of host memory reading a checkpoint");
    for (uint32_t i = 0; i < nrec; i++) {
        record *rec = &recs[i];
        size_t start = r->pos;
        uint32_t name_len, ndim;
        uint64_t raw_bytes = 0, comp_bytes = 0, dim = 0;
        bool ok = take(r, &rec->kind, 4) && take(r, &name_len, 4) && name_len < sizeof rec->name &&
                  take(r, rec->name, name_len) && take(r, &ndim, 4) && ndim <= DPT_MAX_DIMS;
        for (uint32_t d = 0; ok && d < ndim; d++) {
            ok = take(r, &dim, 8) && dim < ((uint64_t)1 << 40);
            rec->dims[d] = (int64_t)dim;
        }
        ok = ok && take(r, &raw_bytes, 8) && take(r, &comp_bytes, 8) && comp_bytes <= r->len - r->pos &&
             raw_bytes < ((uint64_t)1 << 40);
        if (!ok) {
            dpt_errorf(err, "%s: record %u of %u is truncated or malformed\n" HINT_CORRUPT, path, i + 1,
                       nrec);
            goto fail;
        }
        rec->name[name_len] = '\0';
        for (uint32_t c = 0; ok && c < name_len; c++) /* names are printed (--inspect, errors) */
            ok = (unsigned char)rec->name[c] >= 0x20 && rec->name[c] != 0x7f;
        if (!ok) {
            dpt_errorf(err, "%s: record %u of %u has a name with control bytes\n" HINT_CORRUPT, path, i + 1, nrec);
            goto fail;
        }
        const uint8_t *comp = r->buf + r->pos;
        r->pos += comp_bytes;
        uint32_t crc;
        if (!take(r, &crc, 4) || crc != (uint32_t)crc32_z(0L, r->buf + start, (z_size_t)(r->pos - 4 - start))) {
            dpt_errorf(err, "%s: CRC mismatch in record %u (%.64s)\n" HINT_CORRUPT, path, i + 1, rec->name);
            goto fail;
        }
        if (rec->kind == REC_PARTS) { /* no data here: read_records fills it from the parts */
            if (comp_bytes != 0 || version != CKPT_VERSION_PARTS) {
                dpt_errorf(err, "%s: record %.64s of the parts' kind holds data\n" HINT_CORRUPT, path, rec->name);
                goto fail;
            }
            rec->ndim = (int)ndim;
            rec->bytes = raw_bytes;
            continue;
        }
        bool stored = rec->kind == REC_TENSOR_STORED;
        if (stored && comp_bytes != raw_bytes) {
            dpt_errorf(err, "%s: stored record %.64s claims %llu bytes in %llu\n" HINT_CORRUPT, path, rec->name,
                       (unsigned long long)raw_bytes, (unsigned long long)comp_bytes);
            goto fail;
        }
        if (stored) rec->kind = REC_TENSOR; /* a tensor, whichever way it was written */
        /* zlib cannot expand by more than about 1032x: a larger claim is damage. */
        if (raw_bytes > 1032 * comp_bytes + 64) {
            dpt_errorf(err, "%s: record %.64s claims %llu bytes from %llu compressed\n" HINT_CORRUPT, path,
                       rec->name, (unsigned long long)raw_bytes, (unsigned long long)comp_bytes);
            goto fail;
        }
        rec->ndim = (int)ndim;
        rec->bytes = raw_bytes;
        if (skipped(rec->name, skip)) continue;
        rec->data = malloc(raw_bytes + 1);
        uLongf got = (uLongf)raw_bytes;
        if (stored && rec->data) memcpy(rec->data, comp, raw_bytes);
        if (!rec->data ||
            (!stored && (uncompress(rec->data, &got, comp, (uLong)comp_bytes) != Z_OK || got != raw_bytes))) {
            dpt_errorf(err, "%s: record %.64s does not decompress\n" HINT_CORRUPT, path, rec->name);
            goto fail;
        }
        rec->data[raw_bytes] = '\0';
    }
    char end[8];
    if (!take(r, end, 8) || memcmp(end, CKPT_END, 8) != 0 || r->pos != r->len) {
        dpt_errorf(err, "%s: missing end marker (truncated, or trailing bytes)\n" HINT_CORRUPT, path);
        goto fail;
    }
    *out = recs;
    *count = nrec;
    return true;
fail:
    free_records(recs, nrec);
    return false;
}

static record *find(record *recs, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(recs[i].name, name) == 0) return &recs[i];
    return NULL;
}

static const char *meta_get(const record *meta, const char *key, char *out, size_t size)
{
    size_t klen = strlen(key);
    for (const char *line = (const char *)meta->data; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len > klen && strncmp(line, key, klen) == 0 && line[klen] == '=') {
            snprintf(out, size, "%.*s", (int)(len - klen - 1), line + klen + 1);
            dpt_printable(out); /* a hostile file's value reaches the terminal (--inspect) */
            return out;
        }
        line = nl ? nl + 1 : NULL;
    }
    out[0] = '\0';
    return NULL;
}

/* A record's dims as "2, 3, 4" (cut short to fit). */
static void dims_str(const record *rec, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0; d < rec->ndim && used < cap; d++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", d ? ", " : "", (long long)rec->dims[d]);
}

/* Check that a tensor record exists with the tensor's shape. */
static bool check_tensor(const char *path, record *recs, uint32_t n, const char *prefix, const dpt_tensor *t,
                         const char *model_desc, dpt_error *err, record **found)
{
    char name[RECORD_NAME], have[96];
    snprintf(name, sizeof name, "%s%s", prefix, t->name);
    record *rec = find(recs, n, name);
    if (!rec || rec->kind != REC_TENSOR)
        return dpt_errorf(err,
                          "%s has no %s (the checkpoint holds %s)\nHINT: resume with the model "
                          "and optimizer that wrote it",
                          path, name, model_desc);
    bool same = rec->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++)
        same = rec->dims[d] == t->shape[d];
    if (!same || rec->bytes != (uint64_t)t->numel * sizeof(float)) {
        dims_str(rec, have, sizeof have);
        char want[96];
        return dpt_errorf(err,
                          "%s: %s has shape (%s) in the checkpoint but %s in the model\nHINT: the "
                          "checkpoint is from another model (%s)",
                          path, name, have, dpt_shape_str(t, want, sizeof want), model_desc);
    }
    *found = rec;
    return true;
}

/* A checkpoint file read whole; NULL with err for a missing, unreadable or non-regular file
 * (a folder or a FIFO would otherwise report a nonsense size or block). */
static uint8_t *read_whole_file(const char *path, size_t *size, dpt_error *err)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        dpt_errorf(err, "cannot open checkpoint %s: %s\nHINT: pass a ckpt-step*.dpt file or 'latest'", path,
                   strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        dpt_errorf(err, "checkpoint %s is not a regular file\nHINT: pass a ckpt-step*.dpt file or 'latest'",
                   path);
        return NULL;
    }
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    if (!buf) dpt_fatal("out of host memory reading checkpoint %s (%lld bytes)", path, (long long)st.st_size);
    size_t done;
    dpt_read_at(fd, buf, (size_t)st.st_size, 0, &done);
    close(fd);
    if (done != (size_t)st.st_size) {
        free(buf);
        dpt_errorf(err, "cannot read checkpoint %s: %s", path,
                   done ? "it changed while being read" : strerror(errno));
        return NULL;
    }
    *size = done;
    dpt_input_note(path, "the checkpoint", true); /* an export or predictions must not replace it */
    return buf;
}

/* An integer of the meta record, strictly parsed and within [lo, hi]. */
static bool meta_int(const char *path, const record *meta, const char *key, int64_t lo, int64_t hi,
                     int64_t *out, dpt_error *err)
{
    char val[64];
    if (!meta_get(meta, key, val, sizeof val))
        return dpt_errorf(err, "%s: the meta record lacks %s\n" HINT_CORRUPT, path, key);
    char *end;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (errno || end == val || *end || v < lo || v > hi)
        return dpt_errorf(err, "%s: meta %s = %s is not an integer in [%lld, %lld]\n" HINT_CORRUPT, path, key,
                          val, (long long)lo, (long long)hi);
    *out = v;
    return true;
}

/* The train state of the meta record, every value range-checked (and against each other). */
static bool read_state(const char *path, const record *meta, dpt_train_state *st, int64_t *optim_steps,
                       int64_t *world_size, dpt_error *err)
{
    const int64_t big = (int64_t)1 << 53;
    int64_t epoch, best_epoch;
    bool ok = meta_int(path, meta, "step", 0, big, &st->step, err) &&
              meta_int(path, meta, "epoch", 1, 1000000000, &epoch, err) &&
              meta_int(path, meta, "batches_done", 0, big, &st->batches_done, err) &&
              meta_int(path, meta, "optim_steps", 0, st->step, optim_steps, err) &&
              meta_int(path, meta, "skipped", 0, st->step, &st->skipped, err) &&
              meta_int(path, meta, "best_epoch", 0, epoch, &best_epoch, err) &&
              meta_int(path, meta, "world_size", 1, 1 << 24, world_size, err);
    if (!ok) return false;
    /* global samples of the epoch consumed; older checkpoints lack it (-1) */
    char sv[64];
    st->samples_done = -1;
    if (meta_get(meta, "epoch_samples", sv, sizeof sv) &&
        !meta_int(path, meta, "epoch_samples", -1, big, &st->samples_done, err))
        return false;
    /* the loss scaler's state; older checkpoints lack it (0: start from [train] loss_scale_init) */
    st->loss_scale = 0, st->scale_good_steps = 0, st->scale_skips = 0;
    if (meta_get(meta, "scale_good_steps", sv, sizeof sv) &&
        !(meta_int(path, meta, "scale_good_steps", 0, big, &st->scale_good_steps, err) &&
          meta_int(path, meta, "scale_skips", 0, st->step, &st->scale_skips, err)))
        return false;
    st->data_hash = 0;
    if (meta_get(meta, "data_hash", sv, sizeof sv)) {
        char *e;
        st->data_hash = strtoull(sv, &e, 16);
        if (*e || strlen(sv) != 16)
            return dpt_errorf(err, "%s: meta data_hash = %s is not 16 hex digits\n" HINT_CORRUPT, path, sv);
    }
    if (meta_get(meta, "loss_scale", sv, sizeof sv)) {
        char *e;
        st->loss_scale = strtod(sv, &e);
        if (*e || !(st->loss_scale >= 0 && st->loss_scale <= 1e38))
            return dpt_errorf(err, "%s: meta loss_scale = %s is not a scale in [0, 1e38]\n" HINT_CORRUPT, path, sv);
    }
    st->epoch = (int)epoch;
    st->best_epoch = (int)best_epoch;
    char val[64], *end;
    st->best_acc = meta_get(meta, "best_acc", val, sizeof val) ? strtod(val, &end) : NAN;
    if (!meta_get(meta, "best_acc", val, sizeof val) || *end ||
        !(st->best_acc >= -1.0 && st->best_acc <= 1.0))
        return dpt_errorf(err, "%s: meta best_acc = %s is not an accuracy in [-1, 1]\n" HINT_CORRUPT, path,
                          val);
    /* the epoch's sums so far (older files have none: 0) */
    st->epoch_loss = 0.0, st->epoch_correct = st->epoch_units = 0;
    const char *sums[3] = {"epoch_loss", "epoch_correct", "epoch_units"};
    for (int k = 0; k < 3; k++) {
        if (!meta_get(meta, sums[k], val, sizeof val)) continue;
        double v = strtod(val, &end);
        if (*end || !isfinite(v) || v < 0 || v > 1e18)
            return dpt_errorf(err, "%s: meta %s = %s is not a sum\n" HINT_CORRUPT, path, sums[k], val);
        if (k == 0) st->epoch_loss = v;
        else if (k == 1) st->epoch_correct = (int64_t)v;
        else st->epoch_units = (int64_t)v;
    }
    st->stop_best = NAN, st->stop_best_epoch = 0; /* [train] early_stop's (older files have none) */
    if (meta_get(meta, "stop_best_epoch", val, sizeof val)) {
        int64_t e;
        if (!meta_int(path, meta, "stop_best_epoch", 0, 1000000000, &e, err)) return false;
        st->stop_best_epoch = (int)e;
        st->stop_best = meta_get(meta, "stop_best", val, sizeof val) ? strtod(val, &end) : NAN;
        if (!meta_get(meta, "stop_best", val, sizeof val) || *end)
            return dpt_errorf(err, "%s: meta stop_best = %s is not a number\n" HINT_CORRUPT, path, val);
    }
    st->bucket_mb = 0; /* [distributed] bucket_mb = auto's choice, where it made one */
    if (meta_get(meta, "bucket_mb", val, sizeof val)) {
        st->bucket_mb = strtod(val, &end);
        if (*end || !(st->bucket_mb >= 1e-9 && st->bucket_mb <= 1e5))
            return dpt_errorf(err, "%s: meta bucket_mb = %s is not a bucket size\n" HINT_CORRUPT, path, val);
    }
    st->grad_compression = 0; /* grad_compression = auto's choice, where it made one */
    if (meta_get(meta, "grad_compression_auto", val, sizeof val)) {
        st->grad_compression = !strcmp(val, "none") ? 1 : !strcmp(val, "bf16") ? 2 : -1;
        if (st->grad_compression < 0)
            return dpt_errorf(err, "%s: meta grad_compression_auto = %s is neither none nor bf16\n" HINT_CORRUPT,
                              path, val);
    }
    st->best_loss = INFINITY; /* the lowest test loss (tasks without accuracy); older files have none */
    if (meta_get(meta, "best_loss", val, sizeof val)) {
        st->best_loss = strtod(val, &end);
        if (*end || isnan(st->best_loss))
            return dpt_errorf(err, "%s: meta best_loss = %s is not a loss\n" HINT_CORRUPT, path, val);
    }
    return true;
}

/* NaN or Inf in a saved tensor is a run that had already failed: refuse it by name. */
static bool check_finite(const char *path, const record *rec, dpt_error *err)
{
    const float *v = (const float *)rec->data;
    for (uint64_t i = 0; i < rec->bytes / sizeof(float); i++)
        if (!isfinite(v[i]))
            return dpt_errorf(err,
                              "%s: %s[%llu] is %f\nHINT: the run had diverged before this checkpoint; resume "
                              "from an older one (ls the checkpoint dir)",
                              path, rec->name, (unsigned long long)i, (double)v[i]);
    return true;
}

#define HINT_PARTS                                                                                            \
    "HINT: a checkpoint written under [distributed] zero keeps its optimizer state in one file per rank beside " \
    "it (NAME.*.optimQ-of-N): keep and copy them with it; or resume from an older checkpoint"

/* Fill the main file's kind-4 records (not skipped) from its parts: every element of each
 * exactly once, from parts of this checkpoint (nonce) numbered 0..N-1. */
static bool fill_from_parts(const char *path, record *recs, uint32_t n, dpt_error *err)
{
    const record *meta = find(recs, n, "meta");
    char val[64];
    long long parts = 0;
    unsigned long long nonce = 0;
    if (!meta || meta->kind != REC_BLOB || !meta_get(meta, "optim_parts", val, sizeof val) ||
        sscanf(val, "%lld", &parts) != 1 || parts < 1 || parts > 1000000 ||
        !meta_get(meta, "optim_nonce", val, sizeof val) || sscanf(val, "%16llx", &nonce) != 1)
        return dpt_errorf(err, "%s: optimizer records in parts, but no part count in its meta\n" HINT_CORRUPT, path);
    /* what the records claim must fit in what the parts hold, before anything is allocated */
    uint64_t held = 0, claimed = 0;
    for (long long q = 0; q < parts; q++) {
        char *at = dpt_checkpoint_part_path(path, nonce, (int)q, (int)parts);
        struct stat st;
        int e = stat(at, &st) != 0 ? errno : 0;
        if (e || !S_ISREG(st.st_mode)) {
            dpt_errorf(err, "%s: its optimizer state part %lld of %lld: cannot open checkpoint %s: %s\n" HINT_PARTS, path,
                       q, parts, at, e ? strerror(e) : "not a regular file");
            free(at);
            return false;
        }
        held += (uint64_t)st.st_size;
        free(at);
    }
    for (uint32_t i = 0; i < n; i++)
        if (recs[i].kind == REC_PARTS) claimed += recs[i].bytes;
    if (claimed > held)
        return dpt_errorf(err, "%s: its %lld optimizer state parts (%s.%016llx.optim*-of-%lld) hold %llu bytes, fewer "
                               "than its records' %llu: a part is truncated or another checkpoint's\n" HINT_PARTS,
                          path, parts, path, nonce, parts, (unsigned long long)held, (unsigned long long)claimed);
    uint64_t *filled = calloc(n + 1, sizeof *filled);
    if (!filled) dpt_fatal("out of host memory reading a checkpoint");
    bool ok = true;
    for (long long q = 0; q < parts && ok; q++) {
        char *at = dpt_checkpoint_part_path(path, nonce, (int)q, (int)parts);
        size_t size = 0;
        uint8_t *buf = read_whole_file(at, &size, err);
        record *prec = NULL;
        uint32_t pn = 0;
        reader r = {buf, size, 0};
        if (!buf || !parse(at, &r, NULL, &prec, &pn, err)) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            char *cut = strstr(msg, "\nHINT:");
            if (cut) *cut = '\0';
            ok = dpt_errorf(err, "%s: its optimizer state part %lld of %lld: %s\n" HINT_PARTS, path, (long long)q,
                            (long long)parts, msg);
        }
        free(buf);
        const record *pmeta = ok ? find(prec, pn, "meta") : NULL;
        char want[96];
        snprintf(want, sizeof want, "part=%lld\nparts=%lld\nnonce=%016llx\n", (long long)q, (long long)parts, nonce);
        if (ok && (!pmeta || pmeta->kind != REC_BLOB || pmeta->bytes != strlen(want) ||
                   memcmp(pmeta->data, want, strlen(want))))
            ok = dpt_errorf(err, "%s is not part %lld of %lld of %s (another checkpoint's, or damaged)\n" HINT_PARTS, at,
                            (long long)q, (long long)parts, path);
        for (uint32_t i = 0; ok && i < pn; i++) {
            record *pr = &prec[i];
            if (pr == pmeta) continue;
            char name[RECORD_NAME];
            long long lo = -1;
            char *amp = strrchr(pr->name, '@');
            snprintf(name, sizeof name, "%.*s", amp ? (int)(amp - pr->name) : 0, pr->name);
            record *whole = amp && sscanf(amp + 1, "%lld", &lo) == 1 ? find(recs, n, name) : NULL;
            uint64_t at_bytes = lo >= 0 ? (uint64_t)lo * sizeof(float) : 0;
            /* the ranks' ranges of a tensor follow each other: each part continues where the one
             * before ended, so every element comes exactly once */
            if (!whole || whole->kind != REC_PARTS || pr->kind != REC_TENSOR || pr->ndim != 1 || lo < 0 ||
                (uint64_t)lo > whole->bytes / sizeof(float) || at_bytes != filled[whole - recs] ||
                pr->bytes > whole->bytes - at_bytes) {
                ok = dpt_errorf(err, "%s: record %.64s does not fit its checkpoint %s\n" HINT_PARTS, at, pr->name, path);
                break;
            }
            if (!whole->data && !(whole->data = calloc(whole->bytes + 1, 1)))
                dpt_fatal("out of host memory reading checkpoint %s", path);
            memcpy(whole->data + at_bytes, pr->data, pr->bytes);
            filled[whole - recs] += pr->bytes;
        }
        free_records(prec, pn);
        free(at);
    }
    for (uint32_t i = 0; ok && i < n; i++) {
        if (recs[i].kind != REC_PARTS) continue;
        if (filled[i] != recs[i].bytes) /* the parts cover each tensor once: a plan's ranges */
            ok = dpt_errorf(err, "%s: its parts hold %llu of the %llu bytes of %.64s\n" HINT_PARTS, path,
                            (unsigned long long)filled[i], (unsigned long long)recs[i].bytes, recs[i].name);
        recs[i].kind = REC_TENSOR;
    }
    free(filled);
    return ok;
}

/* The file's records, each checked (read_whole_file, then parse; those named skip... left
 * compressed; the optimizer state's parts read in unless skipped); false with err. */
static bool read_records(const char *path, const char *skip, record **recs, uint32_t *n, size_t *size,
                         dpt_error *err)
{
    uint8_t *buf = read_whole_file(path, size, err);
    if (!buf) return false;
    reader r = {buf, *size, 0};
    bool ok = parse(path, &r, skip, recs, n, err);
    free(buf);
    bool parts = false;
    for (uint32_t i = 0; ok && i < *n; i++)
        if ((*recs)[i].kind == REC_PARTS) {
            if (skipped((*recs)[i].name, skip)) (*recs)[i].kind = REC_TENSOR; /* left unread, as skipped ones are */
            else parts = true;
        }
    if (parts && !fill_from_parts(path, *recs, *n, err)) {
        free_records(*recs, *n);
        return false;
    }
    return ok;
}

/* How many weight-average records ([train] ema_decay's "ema/") the file holds. */
static int count_averages(const record *recs, uint32_t n)
{
    int have = 0;
    for (uint32_t i = 0; i < n; i++)
        have += recs[i].kind == REC_TENSOR && !strncmp(recs[i].name, "ema/", 4);
    return have;
}

/* --ema: the file must hold averages. */
static bool has_averages(const char *path, const record *recs, uint32_t n, dpt_error *err)
{
    return count_averages(recs, n) > 0 ||
           dpt_errorf(err, "%s holds no weight averages\nHINT: it was written by a run without [train] ema_decay; "
                           "leave out --ema",
                      path);
}

/* The average of each of the model's parameters, then buffers: an ema/param/ or ema/buffer/
 * record of its name and shape (src[i] for tensor i, the order of dpt_ema_at). */
static bool check_averages(const char *path, record *recs, uint32_t n, const dpt_model *model,
                           const char *model_desc, record **src, dpt_error *err)
{
    int nparams = dpt_model_num_params(model), nbuffers = dpt_model_num_buffers(model);
    bool ok = true;
    for (int i = 0; ok && i < nparams + nbuffers; i++)
        ok = i < nparams ? check_tensor(path, recs, n, "ema/param/", dpt_model_param_at(model, i), model_desc, err,
                                        &src[i])
                         : check_tensor(path, recs, n, "ema/buffer/", dpt_model_buffer_at(model, i - nparams),
                                        model_desc, err, &src[i]);
    return ok;
}

/* The weight averages a resume restores into the model's (a run with [train] ema_decay): all,
 * checked; or none, when the checkpoint was written without them (*found false). */
static bool find_averages(const char *path, record *recs, uint32_t n, const dpt_model *model,
                          const char *model_desc, record **src, bool *found, dpt_error *err)
{
    int have = count_averages(recs, n), want = dpt_ema_count(dpt_model_ema(model));
    *found = have > 0;
    if (!have) return true;
    if (have != want)
        return dpt_errorf(err, "%s holds %d weight averages; this model has %d tensors (%s)\nHINT: resume with the "
                               "model that wrote it",
                          path, have, want, model_desc);
    bool ok = check_averages(path, recs, n, model, model_desc, src, err);
    for (int i = 0; ok && i < want; i++)
        ok = check_finite(path, src[i], err);
    return ok;
}

static bool load(const char *path, dpt_model *model, dpt_optim *optim, dpt_ctx *ctx, const dpt_config *cfg,
                 dpt_train_state *st, int world_size, bool averages, dpt_error *err);

bool dpt_checkpoint_load(const char *path, dpt_model *model, dpt_optim *optim, dpt_ctx *ctx,
                         const dpt_config *cfg, dpt_train_state *st, int world_size, dpt_error *err)
{
    return load(path, model, optim, ctx, cfg, st, world_size, false, err);
}

bool dpt_checkpoint_load_averages(const char *path, dpt_model *model, dpt_ctx *ctx, dpt_train_state *st,
                                  dpt_error *err)
{
    return load(path, model, NULL, ctx, NULL, st, 1, true, err);
}

/* averages: weights only, with the checkpoint's weight averages in place of its weights. */
static bool load(const char *path, dpt_model *model, dpt_optim *optim, dpt_ctx *ctx, const dpt_config *cfg,
                 dpt_train_state *st, int world_size, bool averages, dpt_error *err)
{
    size_t size = 0;
    record *recs = NULL;
    uint32_t n = 0;
    bool weights_only = cfg == NULL; /* --sample, --eval, --export: the optimizer state is not read */
    dpt_ema *ema = weights_only ? NULL : dpt_model_ema(model); /* a resume restores the averages */
    /* the records not applied stay compressed (their framing and CRC still checked; --ema: the
     * weights' only for their names and shapes) */
    const char *skip = averages ? "optim/|param/|buffer/" : weights_only ? "optim/|ema/" : ema ? NULL : "ema/";
    if (!read_records(path, skip, &recs, &n, &size, err)) return false;

    record *meta = find(recs, n, "meta"), *rng = find(recs, n, "rng");
    char val[256], model_desc[400] = "?";
    bool ok = meta && rng && meta->kind == REC_BLOB && rng->kind == REC_BLOB && rng->bytes == sizeof ctx->rng.s;
    if (!ok) dpt_errorf(err, "%s lacks its meta or rng record\n" HINT_CORRUPT, path);
    dpt_train_state loaded = {0};
    int64_t optim_steps = 0, saved_world = 0;
    ok = ok && read_state(path, meta, &loaded, &optim_steps, &saved_world, err);
    if (ok) {
        char name[96], summary[200];
        meta_get(meta, "model", name, sizeof name);
        meta_get(meta, "summary", summary, sizeof summary);
        snprintf(model_desc, sizeof model_desc, "model %s %s", name, summary);
        if (strcmp(name, dpt_model_name(model)) != 0)
            ok = dpt_errorf(err,
                            "%s was written by %s, the config builds %s %s\nHINT: resume with "
                            "the [model] settings that wrote it",
                            path, model_desc, dpt_model_name(model), dpt_model_summary(model));
    }
    if (ok && !weights_only && strcmp(meta_get(meta, "optim", val, sizeof val) ? val : "", dpt_optim_name(optim)) != 0)
        ok = dpt_errorf(err,
                        "%s holds %s optimizer state; the config asks for %s\nHINT: set [optim] name = %s "
                        "to resume, or start a new run",
                        path, val, dpt_optim_name(optim), val);
    if (ok && !weights_only && saved_world != world_size && loaded.batches_done != 0 && loaded.samples_done < 0)
        ok = dpt_errorf(err,
                        "%s was written mid-epoch by %lld ranks; this run has %d\nHINT: resume with the "
                        "same number of ranks, or from a checkpoint written at an epoch end "
                        "([checkpoint] every_epochs), where a new world size is allowed",
                        path, (long long)saved_world, world_size);
    int nparams = dpt_model_num_params(model), nbuffers = dpt_model_num_buffers(model);
    int nstate = weights_only ? 0 : dpt_optim_num_state(optim), ntensors = nparams + nbuffers + nstate;
    record **src = calloc((size_t)ntensors + 1, sizeof *src);
    if (!src) dpt_fatal("out of host memory reading a checkpoint");
    for (int i = 0; ok && i < nparams; i++)
        ok = check_tensor(path, recs, n, "param/", dpt_model_param_at(model, i), model_desc, err, &src[i]);
    for (int i = 0; ok && i < nbuffers; i++)
        ok = check_tensor(path, recs, n, "buffer/", dpt_model_buffer_at(model, i), model_desc, err,
                          &src[nparams + i]);
    for (int i = 0; ok && i < nstate; i++)
        ok = check_tensor(path, recs, n, "optim/", dpt_optim_state_at(optim, i), model_desc, err,
                          &src[nparams + nbuffers + i]);
    /* --ema: the averages stand in for the weights (their finiteness checked below, as src) */
    if (ok && averages) ok = has_averages(path, recs, n, err) && check_averages(path, recs, n, model, model_desc, src, err);
    record **avg_src = calloc((size_t)(ema ? dpt_ema_count(ema) : 0) + 1, sizeof *avg_src);
    if (!avg_src) dpt_fatal("out of host memory reading a checkpoint");
    bool avg_found = false;
    if (ok && ema) ok = find_averages(path, recs, n, model, model_desc, avg_src, &avg_found, err);
    uint32_t counted = n; /* the records of the model's tensors (and the run's, resuming); averages apart */
    for (uint32_t i = 0; i < n; i++)
        counted -= (weights_only && (recs[i].kind != REC_TENSOR || !strncmp(recs[i].name, "optim/", 6))) ||
                   (recs[i].kind == REC_TENSOR && !strncmp(recs[i].name, "ema/", 4));
    if (ok && counted != (uint32_t)(weights_only ? ntensors : 3 + ntensors))
        ok = dpt_errorf(err,
                        "%s holds %u records; the model and optimizer need %d (the checkpoint has "
                        "tensors this model lacks: %s)\nHINT: resume with the model that wrote it",
                        path, n, 3 + ntensors, model_desc);
    for (int i = 0; ok && i < ntensors; i++)
        ok = check_finite(path, src[i], err);
    if (ok) {
        /* Everything checked: apply. */
        for (int i = 0; i < nparams; i++)
            dpt_tensor_copy_from_host(dpt_model_param_at(model, i), (float *)src[i]->data);
        for (int i = 0; i < nbuffers; i++)
            dpt_tensor_copy_from_host(dpt_model_buffer_at(model, i), (float *)src[nparams + i]->data);
        for (int i = 0; i < nstate; i++)
            dpt_tensor_copy_from_host(dpt_optim_state_at(optim, i), (float *)src[nparams + nbuffers + i]->data);
        if (ema && avg_found)
            for (int i = 0; i < dpt_ema_count(ema); i++)
                dpt_tensor_copy_from_host(dpt_ema_at(ema, i), (float *)avg_src[i]->data);
        else if (ema) { /* written without averages: they start from its weights */
            dpt_ema_reset(ctx, ema);
            fprintf(stderr, "%s holds no weight averages: [train] ema_decay's start from its weights\n", path);
        }
        memcpy(ctx->rng.s, rng->data, sizeof ctx->rng.s);
        if (!weights_only) dpt_optim_set_steps(optim, optim_steps);
        *st = loaded;
        char hash[32];
        snprintf(hash, sizeof hash, "%016llx", cfg ? (unsigned long long)dpt_config_hash(cfg) : 0ULL);
        if (cfg && strcmp(meta_get(meta, "config_hash", val, sizeof val) ? val : "", hash) != 0)
            fprintf(stderr,
                    "warning: %s was written with another config (hash %s, now %s); resuming, "
                    "but the run will not be an exact continuation\n",
                    path, val, hash);
    }
    free(src);
    free(avg_src);
    free_records(recs, n);
    return ok;
}

/* ---------------------------------------------------------------- the checkpoint folder
 * The folder holds one run: a new run does not start in a folder holding another run's
 * checkpoints, and a resumed run does not start where checkpoints newer than its own exist
 * (an abandoned continuation); [checkpoint] existing = archive moves those aside instead.
 * With that invariant, "latest" (the highest step) and pruning (the lowest steps) only ever
 * see this run's files. A lock file keeps two runs from writing one folder at once. */

static bool is_checkpoint_name(const char *name, long long *step)
{
    int end = 0;
    return sscanf(name, "ckpt-step%lld.dpt%n", step, &end) == 1 && name[end] == '\0' && *step >= 0;
}

static int cmp_asc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int64_t *dpt_checkpoint_steps(const char *dir, int64_t *count)
{
    *count = -1;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    int64_t n = 0, cap = 64;
    int64_t *steps = malloc((size_t)cap * sizeof *steps);
    if (!steps) dpt_fatal("out of host memory");
    long long step;
    struct dirent *e;
    while ((e = readdir(d)))
        if (is_checkpoint_name(e->d_name, &step)) {
            if (n == cap && !(steps = realloc(steps, (size_t)(cap *= 2) * sizeof *steps)))
                dpt_fatal("out of host memory listing %s", dir);
            steps[n++] = step;
        }
    closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, cmp_asc);
    *count = n;
    return steps;
}

static char *checkpoint_path(const char *dir, int64_t step)
{
    return dpt_strf("%s/ckpt-step%08lld.dpt", dir, (long long)step);
}

/* Into the caller's buffer, or an error naming it when it does not fit (never cut). */
static bool give_path(char *out, size_t size, char *path, dpt_error *err)
{
    bool fits = strlen(path) < size;
    if (fits) memcpy(out, path, strlen(path) + 1);
    else dpt_errorf(err, "the path %s is too long (%zu bytes; this build keeps %zu)", path, strlen(path), size - 1);
    free(path);
    return fits;
}

bool dpt_checkpoint_latest(const char *dir, char *path, size_t size, dpt_error *err)
{
    int64_t n;
    int64_t *steps = dpt_checkpoint_steps(dir, &n);
    if (n < 0)
        return dpt_errorf(err,
                          "cannot open checkpoint folder %s: %s\nHINT: set [checkpoint] dir, "
                          "or pass a checkpoint file",
                          dir, strerror(errno));
    int64_t newest = n > 0 ? steps[n - 1] : -1;
    free(steps);
    if (n == 0)
        return dpt_errorf(err, "no checkpoint (ckpt-step*.dpt) in %s\nHINT: name the folder a run wrote its "
                               "checkpoints in ([checkpoint] dir, e.g. checkpoints/NAME); a new run starts "
                               "without --resume", dir);
    return give_path(path, size, checkpoint_path(dir, newest), err);
}

/* mkdir -p; *made: the first level this call created (NULL when none), for the caller to
 * remove again */
static bool make_dirs(const char *dir, char **made, dpt_error *err)
{
    char *buf = dpt_strf("%s", dir);
    if (made) *made = NULL;
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(buf, 0755) == 0) {
                if (made && !*made) *made = dpt_strf("%s", buf);
            } else if (errno != EEXIST) {
                dpt_errorf(err, "cannot create checkpoint folder %s: %s", buf, strerror(errno));
                free(buf);
                return false;
            }
            *p = saved;
            if (!saved) break;
        }
    }
    free(buf);
    return true;
}

bool dpt_checkpoint_path_ok(const char *dir, dpt_error *err)
{
    /* the longest name written there: DIR/previous-YYYYmmdd-HHMMSS/.ckpt-stepN.dpt.XXXXXX */
    size_t len = strlen(dir), longest = len + strlen("/previous-20261204-120000/.ckpt-step18446744073709551615.dpt.XXXXXX");
    /* a path of thousands of bytes is shown by its two ends */
    int head = len > 160 ? 100 : (int)len, tail = len > 160 ? 50 : 0;
    const char *gap = len > 160 ? "..." : "";
    if (longest >= PATH_MAX)
        return dpt_errorf(err, "%.*s%s%s is too long for a checkpoint folder: %zu bytes, and the files in it reach %zu, "
                               "past this system's limit of %d\nHINT: a shorter path",
                          head, dir, gap, dir + len - tail, len, longest, PATH_MAX - 1);
    for (const char *c = dir; *c;) {
        size_t part = strcspn(c, "/");
        if (part > NAME_MAX)
            return dpt_errorf(err, "%.*s%s%s has a folder name of %zu bytes (the limit is %d): %.40s...\nHINT: a "
                                   "shorter name",
                              head, dir, gap, dir + len - tail, part, NAME_MAX, c);
        c += part + (c[part] == '/');
    }
    return true;
}

/* The lock file: created, never through a link, this user's; flock'ed without waiting. */
static bool take_lock(const char *dir, int *lock_fd, const char *hint, dpt_error *err)
{
    /* The lock doubles as the test that the folder is writable (root passes access(2) on
     * read-only mounts and /proc, so only a real write tells). */
    char *lock_path = dpt_strf("%s/.dptrain.lock", dir);
    bool ok = false;
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    struct stat lk;
    if (fd < 0 && errno == ELOOP)
        dpt_errorf(err, "the lock file %s is a symbolic link, not dptrain's: refused (a link planted in a shared "
                        "folder would make the run write where it points)\nHINT: remove it if it is yours, or "
                        "give this run its own folder",
                   lock_path);
    else if (fd < 0)
        dpt_errorf(err, "cannot write in checkpoint folder %s: %s\n%s", dir, strerror(errno), hint);
    else if (fstat(fd, &lk) != 0 || !S_ISREG(lk.st_mode) || lk.st_uid != geteuid())
        dpt_errorf(err, "the lock file %s is %s, not this user's dptrain lock: refused\nHINT: give this run its own "
                        "folder ([checkpoint] dir)",
                   lock_path, !S_ISREG(lk.st_mode) ? "not a regular file" : "owned by another user");
    else if (flock(fd, LOCK_EX | LOCK_NB) != 0)
        dpt_errorf(err,
                   "another dptrain run is writing checkpoints in %s (it holds %s)\nHINT: give this run "
                   "its own folder: --set checkpoint.dir=DIR",
                   dir, lock_path);
    else
        ok = true;
    if (!ok && fd >= 0) close(fd);
    *lock_fd = ok ? fd : -1;
    free(lock_path);
    return ok;
}

static void move_part(const char *dir, const char *name, void *archive)
{
    char *from = dpt_strf("%s/%s", dir, name), *to = dpt_strf("%s/%s", (const char *)archive, name);
    if (rename(from, to) != 0) fprintf(stderr, "warning: cannot move %s to %s: %s\n", from, to, strerror(errno));
    free(from), free(to);
}

/* Move the checkpoints of steps[first..n) into dir/previous-<time>/ (with their parts). */
static bool archive_foreign(const char *dir, const int64_t *steps, int64_t first, int64_t n, bool continuation,
                            const char *hint, dpt_error *err)
{
    char stamp[32];
    time_t now = time(NULL);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
    char *archive = dpt_strf("%s/previous-%s", dir, stamp);
    bool ok = mkdir(archive, 0755) == 0 || errno == EEXIST;
    if (!ok) dpt_errorf(err, "cannot create %s: %s\n%s", archive, strerror(errno), hint);
    for (int64_t i = first; ok && i < n; i++) {
        char *from = checkpoint_path(dir, steps[i]), *to = checkpoint_path(archive, steps[i]);
        if (rename(from, to) != 0) ok = dpt_errorf(err, "cannot move %s to %s: %s\n%s", from, to, strerror(errno), hint);
        if (ok) each_part(from, 0, move_part, archive); /* its parts go with it */
        free(from), free(to);
    }
    if (ok) {
        printf("checkpoint folder: moved %lld checkpoint%s of %s (steps %lld to %lld) to %s\n", (long long)(n - first),
               n - first == 1 ? "" : "s", continuation ? "an abandoned continuation" : "an earlier run",
               (long long)steps[first], (long long)steps[n - 1], archive);
        fflush(stdout);
    }
    free(archive);
    return ok;
}

/* With the folder's lock held no other run writes here: a hidden temporary of a checkpoint
 * (".ckpt-stepN.dpt.XXXXXX", six random characters) is what a crash mid-write left. Removed
 * when it is a regular file of this user's (a link or another user's file is left alone). */
static int remove_stale_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long step;
        int end = 0;
        size_t len = strlen(e->d_name);
        unsigned long long nonce;
        int part, parts, pend = 0;
        bool temporary = sscanf(e->d_name, ".ckpt-step%lld.dpt.%n", &step, &end) == 1 && end &&
                         (len == (size_t)end + 6 || /* or a part's: NAME.<nonce>.optimQ-of-N.XXXXXX */
                          (sscanf(e->d_name + end, "%16llx.optim%d-of-%d.%n", &nonce, &part, &parts, &pend) == 3 &&
                           pend && len == (size_t)(end + pend) + 6));
        if (!temporary) { /* a part whose checkpoint was never written (a crash between them) */
            int base = 0;
            if (sscanf(e->d_name, "ckpt-step%lld.dpt%n", &step, &base) != 1 || !base ||
                sscanf(e->d_name + base, ".%16llx.optim%d-of-%d%n", &nonce, &part, &parts, &pend) != 3 ||
                len != (size_t)(base + pend))
                continue;
            char *main_path = dpt_strf("%s/%.*s", dir, base, e->d_name);
            bool orphan = access(main_path, F_OK) != 0 && errno == ENOENT;
            free(main_path);
            if (!orphan) continue;
        }
        char *path = dpt_strf("%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && unlink(path) == 0) removed++;
        free(path);
    }
    closedir(d);
    return removed;
}

bool dpt_checkpoint_prepare_dir(const char *dir, const dpt_ckpt_dir_options *opt, int *lock_fd,
                                dpt_error *err)
{
    *lock_fd = -1;
    const char *hint = "HINT: set [checkpoint] dir to a folder this user can write";
    if (!dpt_checkpoint_path_ok(dir, err)) return false;
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return dpt_errorf(err, "[checkpoint] dir = %s is not a folder\n%s", dir, hint);
    if (opt->create && !make_dirs(dir, NULL, err)) {
        size_t len = strlen(err->msg);
        snprintf(err->msg + len, sizeof err->msg - len, "\n%s", hint);
        return false;
    }
    if (opt->claim) { /* the folder made now if missing (and removed at the end if still empty) and locked */
        char *made = NULL;
        if (!make_dirs(dir, &made, err)) {
            size_t len = strlen(err->msg);
            snprintf(err->msg + len, sizeof err->msg - len, "\n%s", hint);
            return false;
        }
        if (!take_lock(dir, lock_fd, hint, err)) {
            if (made) dpt_checkpoint_unclaim(dir, made, -1);
            free(made);
            return false;
        }
        remove_stale_temporaries(dir);
        if (opt->created) *opt->created = made;
        else free(made);
        return true;
    }
    if (stat(dir, &st) != 0)
        return dpt_errorf(err, "[checkpoint] dir = %s: %s\n%s", dir, strerror(errno), hint);
    if (!take_lock(dir, lock_fd, hint, err)) return false;
    int stale = remove_stale_temporaries(dir);
    if (stale) {
        printf("checkpoint folder: removed %d unfinished checkpoint temporar%s of a crashed write\n", stale,
               stale == 1 ? "y" : "ies");
        fflush(stdout);
    }
    /* Checkpoints that are not this run's: all of them for a new run; for a resumed one, those
     * newer than the checkpoint it continues (they belong to a continuation it replaces). */
    int64_t n, first_foreign = 0;
    int64_t *steps = dpt_checkpoint_steps(dir, &n);
    if (opt->resumed_here)
        while (first_foreign < n && steps[first_foreign] <= opt->resumed_step)
            first_foreign++;
    int64_t foreign = n - first_foreign;
    char *best = dpt_strf("%s/best.dpt", dir);
    bool foreign_best = !opt->resumed_here && stat(best, &st) == 0; /* an earlier run's best */
    bool ok = true;
    if (foreign == 0 && foreign_best && !opt->archive)
        ok = dpt_errorf(err,
                        "%s holds best.dpt of an earlier run: a new run there would replace it\nHINT: give this run "
                        "its own folder with --set checkpoint.dir=DIR, or move it into %s/previous-<time>/ with --set "
                        "checkpoint.existing=archive",
                        dir, dir);
    else if (foreign_best && opt->archive) {
        char stamp[32];
        time_t now = time(NULL);
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
        char *archive = dpt_strf("%s/previous-%s", dir, stamp), *to = dpt_strf("%s/best.dpt", archive);
        if ((mkdir(archive, 0755) != 0 && errno != EEXIST) || rename(best, to) != 0)
            ok = dpt_errorf(err, "cannot move %s to %s: %s\n%s", best, to, strerror(errno), hint);
        if (ok) each_part(best, 0, move_part, archive); /* its parts go with it */
        free(archive), free(to);
    }
    free(best);
    if (ok && foreign > 0 && !opt->archive) {
        if (opt->resumed_here)
            ok = dpt_errorf(
                err,
                "%s holds %lld checkpoint%s newer than step %lld, the one this run resumes (the newest "
                "is ckpt-step%08lld.dpt): continuing here would mix two continuations\nHINT: resume "
                "the newest with --resume latest, or move the newer ones aside with --set "
                "checkpoint.existing=archive",
                dir, (long long)foreign, foreign == 1 ? "" : "s", (long long)opt->resumed_step, (long long)steps[n - 1]);
        else
            ok = dpt_errorf(
                err,
                "%s holds %lld checkpoint%s of an earlier run (the newest is ckpt-step%08lld.dpt): a new "
                "run there would mix with them, and pruning could delete them\nHINT: continue that run "
                "with --resume latest, give this one its own folder with --set checkpoint.dir=DIR, or "
                "move the old ones into %s/previous-<time>/ with --set checkpoint.existing=archive",
                dir, (long long)foreign, foreign == 1 ? "" : "s", (long long)steps[n - 1], dir);
    } else if (ok && foreign > 0)
        ok = archive_foreign(dir, steps, first_foreign, n, opt->resumed_here, hint, err);
    free(steps);
    if (!ok) close(*lock_fd), *lock_fd = -1;
    return ok;
}

bool dpt_checkpoint_archive_foreign(const char *dir, bool resumed_here, int64_t resumed_step, dpt_error *err)
{
    int64_t n, first = 0;
    int64_t *steps = dpt_checkpoint_steps(dir, &n);
    if (n < 0) return dpt_errorf(err, "cannot open checkpoint folder %s: %s", dir, strerror(errno));
    if (resumed_here)
        while (first < n && steps[first] <= resumed_step)
            first++;
    bool ok = first >= n ||
              archive_foreign(dir, steps, first, n, resumed_here, "HINT: set [checkpoint] dir to a folder this user "
                                                                 "can write", err);
    free(steps);
    return ok;
}

void dpt_checkpoint_unclaim(const char *dir, const char *made, int lock_fd)
{
    if (!made) { /* the folder was there before: only the lock is let go */
        if (lock_fd >= 0) close(lock_fd);
        return;
    }
    char *lock_path = dpt_strf("%s/.dptrain.lock", dir);
    unlink(lock_path); /* while still held: a run that opened it meanwhile fails its flock */
    free(lock_path);
    if (lock_fd >= 0) close(lock_fd);
    /* the levels this run created, deepest first, each only if empty */
    char *p = dpt_strf("%s", dir);
    size_t stop = strlen(made);
    for (;;) {
        if (rmdir(p) != 0) break;
        size_t len = strlen(p);
        while (len > 0 && p[len - 1] == '/')
            p[--len] = '\0';
        char *slash = strrchr(p, '/');
        if (!slash || (size_t)(slash - p) < stop) break;
        *slash = '\0';
    }
    free(p);
}

/* A part of a checkpoint's sharded optimizer state, "ckpt-stepN.dpt.<nonce>.optimK-of-M": N. */
static bool is_part_name(const char *name, long long *step)
{
    unsigned long long nonce;
    int part, parts, end = 0;
    return sscanf(name, "ckpt-step%lld.dpt.%16llx.optim%d-of-%d%n", step, &nonce, &part, &parts, &end) == 4 &&
           name[end] == '\0' && *step >= 0;
}

void dpt_checkpoint_prune(const char *dir, int keep_last, int64_t keep_step)
{
    if (keep_last <= 0) return;
    int64_t n;
    int64_t *steps = dpt_checkpoint_steps(dir, &n), drop = n - keep_last; /* steps[0, drop) go */
    for (int64_t i = 0; i < drop; i++) {
        if (steps[i] == keep_step) continue; /* never the file this run has just reported */
        char *path = checkpoint_path(dir, steps[i]);
        unlink(path);
        free(path);
    }
    /* their optimizer state's parts, after them, from one more listing (a listing a checkpoint
     * read the folder once per file: minutes for a folder of 20,000) */
    DIR *d = drop > 0 ? opendir(dir) : NULL;
    struct dirent *e;
    long long step;
    while (d && (e = readdir(d)))
        if (is_part_name(e->d_name, &step) && step != keep_step &&
            bsearch(&(int64_t){step}, steps, (size_t)drop, sizeof *steps, cmp_asc)) {
            char *at = dpt_strf("%s/%s", dir, e->d_name);
            unlink(at);
            free(at);
        }
    if (d) closedir(d);
    free(steps);
}

/* dpt_checkpoint_latest with its error starting "ARG: " like the resolver's others. */
static bool latest_named(const char *arg, const char *folder, char *path, size_t size, dpt_error *err)
{
    return dpt_checkpoint_latest(folder, path, size, err) || dpt_error_prefix(err, "%s: ", arg);
}

bool dpt_checkpoint_resolve(const char *arg, const char *dir, char *path, size_t size, dpt_error *err)
{
    struct stat st;
    if (stat(arg, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return latest_named(arg, arg, path, size, err); /* a folder: its newest */
        return give_path(path, size, dpt_strf("%s", arg), err);
    }
    /* FOLDER/latest, a step number or a name without the zero padding: in the folder named,
     * else in dir (the run's [checkpoint] dir; "." when there is none, as for --inspect) */
    const char *base = strrchr(arg, '/') ? strrchr(arg, '/') + 1 : arg;
    char *folder = base != arg ? dpt_strf("%.*s", (int)(base - arg - 1), arg) : dpt_strf("%s", dir && *dir ? dir : ".");
    if (!*folder) free(folder), folder = dpt_strf("/");
    bool ok;
    if (!strcmp(base, "latest")) {
        ok = latest_named(arg, folder, path, size, err);
        free(folder);
        return ok;
    }
    if (!strcmp(base, "best")) { /* [checkpoint] best's file */
        char *best = dpt_strf("%s/best.dpt", folder);
        ok = stat(best, &st) == 0;
        if (!ok)
            dpt_errorf(err, "%s: no best.dpt in %s\nHINT: [checkpoint] best = true keeps one (auto: when the run "
                            "checkpoints every N steps or epochs)", arg, folder);
        free(folder);
        return ok ? give_path(path, size, best, err) : (free(best), false);
    }
    long long step = -1;
    int end = 0;
    if ((sscanf(base, "ckpt-step%lld.dpt%n", &step, &end) == 1 && base[end] == '\0') ||
        (sscanf(base, "%lld%n", &step, &end) == 1 && base[end] == '\0')) {
        char *named = checkpoint_path(folder, step);
        if (step >= 0 && stat(named, &st) == 0) {
            free(folder);
            return give_path(path, size, named, err);
        }
        free(named);
    }
    int64_t n;
    int64_t *steps = dpt_checkpoint_steps(folder, &n);
    char have[256] = "none";
    if (n > 0) {
        size_t used = 0;
        for (int64_t i = n > 4 ? n - 4 : 0; i < n && used < sizeof have; i++)
            used += (size_t)snprintf(have + used, sizeof have - used, "%s%lld", used ? ", " : "",
                                     (long long)steps[i]);
    }
    free(steps);
    dpt_errorf(err,
               "%s: no such checkpoint\nHINT: %s holds checkpoints of step%s %s; pass a file, a folder (its "
               "newest), a step number, or latest",
               arg, folder, n > 4 ? "s ..." : "s", have);
    free(folder);
    return false;
}

/* ---------------------------------------------------------------- tensors (--export) */

bool dpt_checkpoint_tensors(const char *path, dpt_ckpt_tensor_fn fn, void *user, dpt_error *err)
{
    return dpt_checkpoint_tensors_of(path, false, fn, user, err);
}

bool dpt_checkpoint_tensors_of(const char *path, bool averages, dpt_ckpt_tensor_fn fn, void *user, dpt_error *err)
{
    if (dpt_safetensors_is(path)) { /* another program's weights (or an export of ours) */
        if (averages)
            return dpt_errorf(err, "%s is a safetensors file: it holds weights, not a run's weight averages\nHINT: "
                                   "leave out --ema (ema: in [model] init) for this file",
                              path);
        return dpt_safetensors_tensors(path, fn, user, NULL, err);
    }
    size_t size = 0;
    record *recs = NULL;
    uint32_t n = 0;
    if (!read_records(path, averages ? "optim/|param/|buffer/" : "optim/|ema/", &recs, &n, &size, err)) return false;
    bool ok = true;
    if (averages) ok = has_averages(path, recs, n, err);
    for (int pass = 0; pass < 2 && ok; pass++) {
        const char *prefix = averages ? (pass == 0 ? "ema/param/" : "ema/buffer/") : pass == 0 ? "param/" : "buffer/";
        for (uint32_t i = 0; i < n && ok; i++) {
            record *rec = &recs[i];
            if (rec->kind != REC_TENSOR || strncmp(rec->name, prefix, strlen(prefix))) continue;
            int64_t numel = 1;
            bool overflow = false;
            for (int j = 0; j < rec->ndim; j++)
                overflow |= __builtin_mul_overflow(numel, rec->dims[j], &numel);
            if (overflow || numel > ((int64_t)1 << 40) || (uint64_t)numel * sizeof(float) != rec->bytes) {
                char shape[128];
                dims_str(rec, shape, sizeof shape);
                ok = dpt_errorf(err, "%s: tensor %.64s holds %llu bytes for shape [%s]\n" HINT_CORRUPT, path,
                                rec->name, (unsigned long long)rec->bytes, shape);
                break;
            }
            ok = fn(user, rec->name + strlen(prefix), pass == 1, rec->ndim, rec->dims, (const float *)rec->data, numel,
                    err);
        }
    }
    free_records(recs, n);
    return ok;
}

/* ---------------------------------------------------------------- --inspect */

/* --inspect of a safetensors file: its tensors in the order of their bytes, and the weights
 * hash over them in that order (a file --export safetensors wrote: its checkpoint's). */
typedef struct inspect_st {
    FILE *out;
    dpt_digest *d;
    int count;
    int64_t values;
} inspect_st;

static bool inspect_tensor(void *user, const char *name, bool buffer, int ndim, const int64_t *dims,
                           const float *data, int64_t numel, dpt_error *err)
{
    (void)buffer, (void)err;
    inspect_st *s = user;
    char shape[128] = "";
    size_t at = 0;
    for (int j = 0; j < ndim && at < sizeof shape; j++)
        at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%lld", j ? ", " : "", (long long)dims[j]);
    fprintf(s->out, "tensor %-40s [%s] %lld\n", name, shape, (long long)numel);
    if (s->d) dpt_digest_tensor(s->d, name, ndim, dims, data, numel);
    s->count++, s->values += numel;
    return true;
}

static bool inspect_safetensors(const char *path, FILE *out, dpt_error *err)
{
    struct stat st;
    const char *why = NULL;
    inspect_st s = {.out = out, .d = dpt_digest_new(&why)};
    dpt_safetensors_skips ints;
    fprintf(out, "safetensors %s | %lld bytes\n", path, stat(path, &st) == 0 ? (long long)st.st_size : -1LL);
    bool ok = dpt_safetensors_tensors(path, inspect_tensor, &s, &ints, err);
    char hex[65];
    if (s.d) dpt_digest_finish(s.d, hex);
    if (!ok) return false;
    fprintf(out, "%d tensors, %lld values", s.count, (long long)s.values);
    if (ints.count) fprintf(out, "; %d integer tensors passed over (%s)", ints.count, ints.names);
    fprintf(out, "\n");
    if (s.d) fprintf(out, "weights sha256 %s\n", hex);
    else fprintf(out, "weights sha256 unavailable: %s\n", why);
    return true;
}

bool dpt_checkpoint_inspect(const char *path, FILE *out, dpt_error *err)
{
    if (dpt_safetensors_is(path)) return inspect_safetensors(path, out, err);
    size_t size = 0;
    record *recs = NULL;
    uint32_t n = 0;
    if (!read_records(path, NULL, &recs, &n, &size, err)) return false;
    bool ok = true;
    record *meta = find(recs, n, "meta");
    if (!meta || meta->kind != REC_BLOB) {
        free_records(recs, n);
        return dpt_errorf(err, "%s has no meta record\n" HINT_CORRUPT, path);
    }
    char parts[64] = "";
    if (meta_get(meta, "optim_parts", parts, sizeof parts)) /* read in already: the state is whole below */
        snprintf(parts + strlen(parts), sizeof parts - strlen(parts), " parts");
    fprintf(out, "checkpoint %s | %zu bytes | format %u | %u records%s%s\n", path, size,
            *parts ? CKPT_VERSION_PARTS : CKPT_VERSION, n, *parts ? " | optimizer state in " : "", parts);
    static const char *const keys[] = {"step",       "epoch",     "batches_done", "epoch_samples", "world_size", "config_hash",
                                       "model",      "summary",   "optim",        "optim_steps", "skipped",
                                       "best_acc",   "best_epoch", "best_loss", "loss_scale", "scale_good_steps", "scale_skips", "data_hash",
                                       "epoch_loss", "epoch_correct", "epoch_units", "bucket_mb", "grad_compression_auto"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        char val[512];
        if (meta_get(meta, keys[k], val, sizeof val)) fprintf(out, "%-14s %s\n", keys[k], val);
    }
    /* every tensor, and the weights hash over parameters then buffers (the model's order,
     * which is the file's), as dpt_model_weights_sha256 computes it from a model */
    const char *why = NULL;
    dpt_digest *d = dpt_digest_new(&why), *avg = NULL; /* avg: the weight averages' hash, where there are some */
    dpt_digest *state = NULL; /* the optimizer state's (whole: a sharded run's parts are read in) */
    for (int pass = 0; pass < 5 && ok; pass++) {
        static const char *const prefixes[] = {"param/", "buffer/", "optim/", "ema/param/", "ema/buffer/"};
        const char *prefix = prefixes[pass];
        for (uint32_t i = 0; i < n && ok; i++) {
            record *rec = &recs[i];
            if (rec->kind != REC_TENSOR || strncmp(rec->name, prefix, strlen(prefix))) continue;
            int64_t numel = 1;
            bool overflow = false;
            char shape[128];
            dims_str(rec, shape, sizeof shape);
            for (int j = 0; j < rec->ndim; j++)
                overflow |= __builtin_mul_overflow(numel, rec->dims[j], &numel); /* a hostile shape */
            if (overflow || numel > ((int64_t)1 << 40) || (uint64_t)numel * sizeof(float) != rec->bytes) {
                ok = dpt_errorf(err, "%s: tensor %.64s holds %llu bytes for shape [%s]\n" HINT_CORRUPT, path,
                                rec->name, (unsigned long long)rec->bytes, shape);
                break;
            }
            fprintf(out, "tensor %-40s [%s] %lld\n", rec->name, shape, (long long)numel);
            if (d && pass < 2)
                dpt_digest_tensor(d, rec->name + strlen(prefix), rec->ndim, rec->dims, (const float *)rec->data,
                                  numel);
            if (d && pass == 2 && (state || (state = dpt_digest_new(&why))))
                dpt_digest_tensor(state, rec->name + strlen(prefix), rec->ndim, rec->dims, (const float *)rec->data,
                                  numel);
            if (d && pass >= 3 && (avg || (avg = dpt_digest_new(&why))))
                dpt_digest_tensor(avg, rec->name + strlen(prefix), rec->ndim, rec->dims, (const float *)rec->data,
                                  numel);
        }
    }
    if (avg) { /* as the weights hash of a model holding them (--eval --ema's) */
        char hex[65];
        dpt_digest_finish(avg, hex);
        if (ok) fprintf(out, "averages sha256 %s\n", hex);
    }
    if (state) { /* a resume's, whatever the world size or zero stage that wrote it */
        char hex[65];
        dpt_digest_finish(state, hex);
        if (ok) fprintf(out, "optimizer sha256 %s\n", hex);
    }
    if (ok && d) {
        char hex[65];
        dpt_digest_finish(d, hex);
        fprintf(out, "weights sha256 %s\n", hex);
    } else if (d) {
        char hex[65];
        dpt_digest_finish(d, hex);
    } else if (ok) {
        fprintf(out, "weights sha256 unavailable: %s\n", why);
    }
    free_records(recs, n);
    return ok;
}
