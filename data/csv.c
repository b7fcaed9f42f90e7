/* csv.c: [data] source = csv, a table of numbers (tabular data: one row a sample, one column a
 * feature, one or more columns its target), read as pandas.read_csv reads it and checked as
 * hostile input. RFC 4180 text: cells split by the delimiter (auto: the most frequent of ',' ';'
 * and tab in the first row), quoted cells ("a, b", quotes doubled) may hold delimiters and line
 * breaks, CRLF or LF, blank lines skipped, a UTF-8 byte-order mark dropped, gzip read through zlib.
 * A header row of names is detected (a column whose first cell is not a number and whose second
 * is) or stated.
 *
 * Sample i is row i: x, its features (every column but the targets and [data] csv_exclude,
 * float32, standardised with the training rows' mean and standard deviation unless
 * csv_standardize = false: scikit-learn's StandardScaler), and its target: for a classifier one
 * column of labels (non-negative integers as they are, or names numbered in sorted order, which
 * --predict prints back), for a regression its real values. Every cell must be a finite number
 * (a missing one is named with its file, line and column). Without [data] csv_test a seeded
 * csv_test_fraction of the training file's rows is held out. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "dpt.h"
#include "data.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"
#include "../runtime/rng.h"

#define CSV_HINT "HINT: [data] source = csv reads a table of numbers, one row a sample (see docs/config.md, [data] csv_*)"
/* far beyond any table that fits a machine's memory as floats, far below what overflows a size */
#define CSV_MAX_BYTES ((int64_t)1 << 38)
#define CSV_MAX_COLS ((int64_t)1 << 20)
#define CSV_MAX_TARGETS 64 /* columns a csv_target or csv_exclude list may name */

/* ---------------------------------------------------------------- reading the text */

/* The whole file (gzip or plain), NUL-terminated; false with err naming it. */
static bool read_text(const char *path, char **out, int64_t *len, dpt_error *err)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return dpt_errorf(err, "cannot open CSV file %s: %s\nHINT: [data] csv_train and csv_test are paths from the "
                               "folder ./train runs in (unless absolute); [data] dir is not used for them",
                          path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return dpt_errorf(err, "CSV file %s is not a regular file (a folder, FIFO or device)\n" CSV_HINT, path);
    gzFile gz = gzopen(path, "rb");
    if (!gz) return dpt_errorf(err, "cannot open CSV file %s: %s\n" CSV_HINT, path, errno ? strerror(errno) : "out of memory");
    int64_t cap = 1 << 16, have = 0;
    char *buf = malloc((size_t)cap + 1);
    if (!buf) dpt_fatal("out of host memory reading %s", path);
    for (;;) {
        if (have == cap) {
            if (cap >= CSV_MAX_BYTES) {
                gzclose(gz);
                free(buf);
                return dpt_errorf(err, "CSV file %s: more than %lld bytes of text\nHINT: split it, or convert it "
                                       "to a binary format",
                                  path, (long long)CSV_MAX_BYTES);
            }
            cap *= 2;
            char *grown = realloc(buf, (size_t)cap + 1);
            if (!grown) {
                gzclose(gz);
                free(buf);
                return dpt_errorf(err, "CSV file %s: out of host memory for %lld bytes of text\nHINT: a smaller file, or a "
                                       "machine with more memory", path, (long long)cap);
            }
            buf = grown;
        }
        int64_t want = cap - have > (1 << 30) ? (1 << 30) : cap - have;
        int r = gzread(gz, buf + have, (unsigned)want);
        if (r < 0) {
            int code = 0;
            const char *msg = gzerror(gz, &code);
            dpt_errorf(err, "CSV file %s: cannot read it (%s)\nHINT: the file is truncated or corrupt", path,
                       code == Z_ERRNO ? strerror(errno) : msg);
            gzclose(gz);
            free(buf);
            return false;
        }
        if (r == 0) break;
        have += r;
    }
    gzclose(gz);
    buf[have] = 0;
    const char *nul = memchr(buf, 0, (size_t)have);
    if (nul) {
        int64_t line = 1;
        for (const char *p = buf; p < nul; p++)
            line += *p == '\n';
        free(buf);
        return dpt_errorf(err, "CSV file %s: line %lld holds a NUL byte: not text\nHINT: a binary file, or text in "
                               "UTF-16 (Excel's \"Unicode text\"): save the table as CSV in UTF-8",
                          path, (long long)line);
    }
    *out = buf, *len = have;
    return true;
}

/* Records of a text, cut in place: each cell unquoted and NUL-terminated where it stood. */
typedef struct reader {
    char *p, *end;
    int64_t line; /* of the next record's first character */
    char delim;
    const char *path;
    char **cells;
    int64_t cap;
} reader;

static void reader_init(reader *r, char *text, int64_t len, char delim, const char *path)
{
    memset(r, 0, sizeof *r);
    r->p = text, r->end = text + len, r->line = 1, r->delim = delim, r->path = path;
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) r->p += 3; /* a UTF-8 byte-order mark */
}

static void push_cell(reader *r, int64_t n, char *cell)
{
    if (n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->cells = realloc(r->cells, (size_t)r->cap * sizeof *r->cells);
        if (!r->cells) dpt_fatal("out of host memory for a CSV row");
    }
    r->cells[n] = cell;
}

/* The next record that is not blank: its cell count (cells in r->cells), 0 at the end of the
 * text, -1 with err. *line: the line it starts on. */
static int64_t next_record(reader *r, int64_t *line, dpt_error *err)
{
    for (;;) {
        if (r->p >= r->end) return 0;
        *line = r->line;
        int64_t n = 0;
        bool more = true;
        while (more) {
            if (n >= CSV_MAX_COLS) {
                dpt_errorf(err, "%s: line %lld has more than %lld cells\n" CSV_HINT, r->path, (long long)*line,
                           (long long)CSV_MAX_COLS);
                return -1;
            }
            char *w = r->p, *start = r->p;
            if (r->p < r->end && *r->p == '"') { /* quoted: to the closing quote, "" a quote */
                int64_t opened = r->line;
                r->p++;
                for (;;) {
                    if (r->p >= r->end) {
                        dpt_errorf(err, "%s: line %lld: a quoted cell opened there is never closed\nHINT: a quote "
                                        "inside a cell is written twice (\"\")",
                                   r->path, (long long)opened);
                        return -1;
                    }
                    if (*r->p == '"') {
                        if (r->p + 1 < r->end && r->p[1] == '"') {
                            *w++ = '"', r->p += 2;
                            continue;
                        }
                        r->p++;
                        break;
                    }
                    if (*r->p == '\n') r->line++;
                    *w++ = *r->p++;
                }
                if (r->p < r->end && *r->p == '\r' && r->p + 1 < r->end && r->p[1] == '\n') r->p++;
                if (r->p < r->end && *r->p != r->delim && *r->p != '\n') {
                    dpt_errorf(err, "%s: line %lld: text after a quoted cell's closing quote\nHINT: a quote inside "
                                    "a cell is written twice (\"\"), and the whole cell quoted",
                               r->path, (long long)r->line);
                    return -1;
                }
            } else {
                while (r->p < r->end && *r->p != r->delim && *r->p != '\n')
                    r->p++;
                w = r->p;
                if (w > start && w[-1] == '\r' && (r->p >= r->end || *r->p == '\n')) w--; /* CRLF */
            }
            /* the cell ends at w; what ends it (delimiter, line break, the end) is consumed */
            more = r->p < r->end && *r->p == r->delim;
            if (r->p < r->end && *r->p == '\n') r->line++;
            if (r->p < r->end) r->p++;
            *w = 0; /* w <= the consumed character, or the text's terminating NUL */
            push_cell(r, n++, start);
        }
        if (n == 1 && !r->cells[0][0]) continue; /* a blank line */
        return n;
    }
}

/* ---------------------------------------------------------------- cells */

/* A number filling the whole cell (spaces around it allowed), finite. */
static bool cell_number(const char *s, double *v)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (!*s) return false;
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    if (end == s) return false;
    while (*end == ' ' || *end == '\t')
        end++;
    return !*end && isfinite(*v);
}

/* A cell in a message: at most 40 characters, then "..." */
#define CELL_FMT "'%.40s%s'"
#define CELL_ARG(s) (s), strlen(s) > 40 ? "..." : ""

/* Why a cell is not a number, for the message. */
static const char *not_number_why(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (!*s) return "a missing value (empty)";
    double v;
    if (cell_number(s, &v)) return "beyond float32's range (3.4e38)"; /* a number, refused for its size */
    char *end;
    v = strtod(s, &end);
    if (end != s && !isfinite(v) && !end[strspn(end, " \t")]) return "not finite";
    static const char *missing[] = {"NA", "N/A", "NaN", "nan", "NULL", "null", "None", "?", "-"};
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++)
        if (!strcmp(s, missing[i])) return "a missing value";
    return "not a number";
}

/* ---------------------------------------------------------------- one file as a table */

typedef struct table {
    int64_t rows, cols;
    char *text;
    char **cell;   /* rows x cols, into text */
    int64_t *line; /* each row's first line */
    char **names;  /* the header's cells, or NULL */
} table;

static void table_free(table *t)
{
    free(t->text), free(t->cell), free(t->line), free(t->names);
    memset(t, 0, sizeof *t);
}

/* The delimiter a first line uses most, outside quotes (',' when none). */
static char sniff_delimiter(const char *p, const char *end)
{
    int64_t count[3] = {0};
    const char cand[3] = {',', ';', '\t'};
    bool quoted = false;
    for (; p < end && (quoted || *p != '\n'); p++) {
        if (*p == '"') quoted = !quoted;
        for (int i = 0; i < 3 && !quoted; i++)
            count[i] += *p == cand[i];
    }
    int best = 0;
    for (int i = 1; i < 3; i++)
        if (count[i] > count[best]) best = i;
    return cand[best];
}

/* Read path into t. *delim: 0 to sniff it (then set). header: 0 auto, 1 yes, 2 no. */
static bool table_read(const char *path, char *delim, int header, table *t, dpt_error *err)
{
    memset(t, 0, sizeof *t);
    int64_t len = 0;
    if (!read_text(path, &t->text, &len, err)) return false;
    if (!*delim) *delim = sniff_delimiter(t->text, t->text + len);
    reader r;
    reader_init(&r, t->text, len, *delim, path);
    int64_t cap = 0, line, n;
    bool ok = true;
    while ((n = next_record(&r, &line, err)) > 0) {
        if (!t->cols) t->cols = n;
        if (n != t->cols) {
            ok = dpt_errorf(err, "%s: line %lld has %lld cells, and line %lld has %lld\nHINT: every row needs the same "
                                 "columns; a cell holding the delimiter must be quoted (\"a, b\")",
                            path, (long long)line, (long long)n, (long long)t->line[0], (long long)t->cols);
            break;
        }
        if (t->rows == cap) {
            cap = cap ? 2 * cap : 1024;
            int64_t cells;
            if (__builtin_mul_overflow(cap, t->cols, &cells) || cells > CSV_MAX_BYTES) dpt_fatal("CSV table too large");
            char **cell = realloc(t->cell, (size_t)cells * sizeof *cell);
            int64_t *lines = realloc(t->line, (size_t)cap * sizeof *lines);
            if (!cell || !lines) dpt_fatal("out of host memory for the CSV file %s", path);
            t->cell = cell, t->line = lines;
        }
        memcpy(t->cell + t->rows * t->cols, r.cells, (size_t)n * sizeof *r.cells);
        t->line[t->rows++] = line;
    }
    free(r.cells);
    if (n < 0) ok = false;
    if (ok && !t->rows) ok = dpt_errorf(err, "CSV file %s holds no rows\n" CSV_HINT, path);
    if (ok && header == 0) { /* auto: a column whose first cell is a name and whose second a number
                              * (a lone row: names in every cell) */
        double v;
        int64_t names = 0;
        for (int64_t j = 0; j < t->cols; j++) {
            bool name = !cell_number(t->cell[j], &v) && t->cell[j][strspn(t->cell[j], " \t")];
            names += name;
            if (name && t->rows > 1 && cell_number(t->cell[t->cols + j], &v)) header = 1;
        }
        if (t->rows == 1 && names == t->cols) header = 1;
    }
    if (ok && header == 1) {
        t->names = malloc((size_t)t->cols * sizeof *t->names);
        if (!t->names) dpt_fatal("out of host memory");
        memcpy(t->names, t->cell, (size_t)t->cols * sizeof *t->names);
        memmove(t->cell, t->cell + t->cols, (size_t)((t->rows - 1) * t->cols) * sizeof *t->cell);
        memmove(t->line, t->line + 1, (size_t)(t->rows - 1) * sizeof *t->line);
        if (!--t->rows) ok = dpt_errorf(err, "CSV file %s holds a header and no rows\n" CSV_HINT, path);
    }
    if (!ok) table_free(t);
    return ok;
}

/* ---------------------------------------------------------------- the data set */

typedef struct csv_plan {
    int64_t cols;       /* of the training file */
    char **names;       /* its header (copies), or NULL */
    int ntargets;
    int64_t target[CSV_MAX_TARGETS];
    bool *is_feature;   /* cols */
    int64_t features;
    bool classify, standardize;
    char delim;         /* the training file's */
    int nclasses;       /* classification by names: the sorted names */
    char **classes;
    double *mean, *scale; /* features: x' = (x - mean) * scale */
} csv_plan;

typedef struct csv_set {
    int64_t n, features, ntargets;
    float *x;        /* n x features */
    float *y;        /* n x ntargets (regression) */
    int32_t *labels; /* n (classification) */
    int64_t *line;   /* n: each row's line in its file (messages) */
    csv_plan plan;   /* its own copy: --predict --input reads a file as this set was read */
} csv_set;

static void plan_free(csv_plan *p)
{
    for (int64_t j = 0; p->names && j < p->cols; j++)
        free(p->names[j]);
    for (int c = 0; c < p->nclasses; c++)
        free(p->classes[c]);
    free(p->names), free(p->classes), free(p->is_feature), free(p->mean), free(p->scale);
    memset(p, 0, sizeof *p);
}

static char **copy_strings(char *const *v, int64_t n)
{
    if (!v) return NULL;
    char **c = malloc((size_t)(n > 0 ? n : 1) * sizeof *c);
    if (!c) dpt_fatal("out of host memory");
    for (int64_t i = 0; i < n; i++)
        c[i] = dpt_strf("%s", v[i]);
    return c;
}

static void *copy_bytes(const void *v, size_t n)
{
    if (!v) return NULL;
    void *c = malloc(n ? n : 1);
    if (!c) dpt_fatal("out of host memory");
    return memcpy(c, v, n);
}

static void plan_copy(csv_plan *dst, const csv_plan *p)
{
    *dst = *p;
    dst->names = copy_strings(p->names, p->cols);
    dst->classes = copy_strings(p->classes, p->nclasses);
    dst->is_feature = copy_bytes(p->is_feature, (size_t)p->cols * sizeof *p->is_feature);
    dst->mean = copy_bytes(p->mean, (size_t)p->features * sizeof *p->mean);
    dst->scale = copy_bytes(p->scale, (size_t)p->features * sizeof *p->scale);
}

static void csv_set_free(void *source)
{
    csv_set *s = source;
    if (!s) return;
    plan_free(&s->plan);
    free(s->x), free(s->y), free(s->labels), free(s->line), free(s);
}

static void csv_get(const dpt_dataset *ds, int64_t index, void *const *dst)
{
    const csv_set *s = ds->source;
    memcpy(dst[0], s->x + index * s->features, (size_t)s->features * sizeof(float));
    if (s->labels)
        *(int32_t *)dst[1] = s->labels[index];
    else
        memcpy(dst[1], s->y + index * s->ntargets, (size_t)s->ntargets * sizeof(float));
}

/* One column of a csv_target / csv_exclude list: a header name, or an index (negative from the
 * end, as Python's). -1 with err. */
static int64_t column_of(const csv_plan *p, const char *item, const char *where, const char *key, const char *path,
                         dpt_error *err)
{
    char *end;
    errno = 0;
    long long i = strtoll(item, &end, 10);
    if (end != item && !*end && !errno) {
        if (i < -p->cols || i >= p->cols) {
            dpt_errorf(err, "%s: [data] %s names column %lld, and %s has %lld columns (0 to %lld, or -1 for the "
                            "last)\nHINT: columns count from 0; a negative index counts from the end",
                       where, key, i, path, (long long)p->cols, (long long)p->cols - 1);
            return -1;
        }
        return i < 0 ? i + p->cols : i;
    }
    int64_t found = -1;
    for (int64_t j = 0; p->names && j < p->cols; j++)
        if (!strcmp(p->names[j], item)) {
            if (found >= 0) {
                dpt_errorf(err, "%s: [data] %s = %s: %s has two columns of that name (%lld and %lld)\nHINT: name "
                                "the column by its index",
                           where, key, item, path, (long long)found, (long long)j);
                return -1;
            }
            found = j;
        }
    if (found >= 0) return found;
    if (!p->names) {
        dpt_errorf(err, "%s: [data] %s = %s: %s has no header row of names\nHINT: name columns by index (0 for the "
                        "first, -1 for the last), or set [data] csv_header = yes",
                   where, key, item, path);
        return -1;
    }
    int best = 99;
    const char *near = NULL;
    for (int64_t j = 0; j < p->cols; j++) {
        int d = dpt_edit_distance(item, p->names[j]);
        if (d < best) best = d, near = p->names[j];
    }
    dpt_errorf(err, "%s: [data] %s = %s: no column of %s has that name%s%s%s\nHINT: the header's names are matched "
                    "exactly; a column may be named by its index",
               where, key, item, path, near && best <= 3 ? " (did you mean '" : "",
               near && best <= 3 ? near : "", near && best <= 3 ? "'?)" : "");
    return -1;
}

/* The columns a comma list names, into cols; their count, or -1 with err. */
static int column_list(const dpt_config *cfg, const char *key, const csv_plan *p, const char *path, int64_t *cols,
                       dpt_error *err)
{
    const char *v = dpt_config_str(cfg, "data", key), *where = dpt_config_where(cfg, "data", key);
    int n = 0;
    char item[256];
    while (*v) {
        size_t len = strcspn(v, ",");
        const char *next = v[len] ? v + len + 1 : v + len;
        while (len && (*v == ' ' || *v == '\t'))
            v++, len--;
        while (len && (v[len - 1] == ' ' || v[len - 1] == '\t'))
            len--;
        if (!len || len >= sizeof item) {
            dpt_errorf(err, "%s: [data] %s holds an empty or overlong item\nHINT: a comma-separated list of column "
                            "names or indices",
                       where, key);
            return -1;
        }
        if (n == CSV_MAX_TARGETS) {
            dpt_errorf(err, "%s: [data] %s names more than %d columns\nHINT: name the few columns that are "
                            "not features: targets and excluded ones", where, key, CSV_MAX_TARGETS);
            return -1;
        }
        memcpy(item, v, len), item[len] = 0;
        int64_t c = column_of(p, item, where, key, path, err);
        if (c < 0) return -1;
        for (int i = 0; i < n; i++)
            if (cols[i] == c) {
                dpt_errorf(err, "%s: [data] %s names column %lld twice\nHINT: a name and an index may be the "
                                "same column", where, key, (long long)c);
                return -1;
            }
        cols[n++] = c;
        v = next;
    }
    return n;
}

/* The training file's columns: which are targets, which features. */
static bool plan_columns(const dpt_config *cfg, const table *t, const char *path, csv_plan *p, dpt_error *err)
{
    p->cols = t->cols;
    if (t->names) {
        p->names = calloc((size_t)t->cols, sizeof *p->names);
        if (!p->names) dpt_fatal("out of host memory");
        for (int64_t j = 0; j < t->cols; j++)
            p->names[j] = dpt_strf("%s", t->names[j]);
    }
    p->classify = dpt_config_enum(cfg, "data", "csv_task") == 0; /* classification|regression */
    p->standardize = dpt_config_bool(cfg, "data", "csv_standardize");
    int64_t excluded[CSV_MAX_TARGETS];
    int nt = column_list(cfg, "csv_target", p, path, p->target, err);
    if (nt < 0) return false;
    int ne = column_list(cfg, "csv_exclude", p, path, excluded, err);
    if (ne < 0) return false;
    if (nt == 0)
        return dpt_errorf(err, "%s: [data] csv_target is empty\nHINT: name the target column (e.g. -1 for the last)",
                          dpt_config_where(cfg, "data", "csv_target"));
    if (p->classify && nt != 1)
        return dpt_errorf(err, "%s: [data] csv_target names %d columns, and a classifier has one column of labels\n"
                               "HINT: several real-valued targets are [data] csv_task = regression",
                          dpt_config_where(cfg, "data", "csv_target"), nt);
    p->ntargets = nt;
    p->is_feature = malloc((size_t)t->cols * sizeof *p->is_feature);
    if (!p->is_feature) dpt_fatal("out of host memory");
    for (int64_t j = 0; j < t->cols; j++)
        p->is_feature[j] = true;
    for (int i = 0; i < nt; i++)
        p->is_feature[p->target[i]] = false;
    for (int i = 0; i < ne; i++) {
        if (!p->is_feature[excluded[i]])
            return dpt_errorf(err, "%s: [data] csv_exclude names column %lld, which [data] csv_target names too\n"
                                   "HINT: a target column is never a feature; leave it out of csv_exclude",
                              dpt_config_where(cfg, "data", "csv_exclude"), (long long)excluded[i]);
        p->is_feature[excluded[i]] = false;
    }
    for (int64_t j = 0; j < t->cols; j++)
        p->features += p->is_feature[j];
    if (!p->features)
        return dpt_errorf(err, "%s: every column of %s is a target or excluded: no features left\nHINT: check [data] "
                               "csv_target and csv_exclude",
                          path, path);
    return true;
}

/* A column's name for messages: its header name, or its index. */
static const char *col_name(const csv_plan *p, int64_t j, char *buf, size_t size)
{
    if (p->names)
        snprintf(buf, size, "%lld ('%.40s%s')", (long long)j, p->names[j], strlen(p->names[j]) > 40 ? "..." : "");
    else
        snprintf(buf, size, "%lld", (long long)j);
    return buf;
}

static bool bad_cell(const csv_plan *p, const table *t, const char *path, int64_t row, int64_t j, dpt_error *err)
{
    char name[96];
    const char *s = t->cell[row * t->cols + j];
    return dpt_errorf(err, "%s: line %lld, column %s: " CELL_FMT " is %s\nHINT: every feature%s cell must be a number; "
                           "fill or drop the rows with missing values, or leave the column out with [data] csv_exclude",
                      path, (long long)t->line[row], col_name(p, j, name, sizeof name), CELL_ARG(s), not_number_why(s),
                      p->classify ? "" : " and target");
}

/* Numbers first, in order, then names in byte order: labels "-1" and "1" give classes 0 and 1. */
static int cmp_class(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    double u, v;
    bool nu = cell_number(x, &u), nv = cell_number(y, &v);
    if (nu && nv && u != v) return u < v ? -1 : 1;
    if (nu != nv) return nu ? -1 : 1;
    return strcmp(x, y);
}

/* The training rows' labels: non-negative integers as they are, or else each distinct cell a
 * class, numbered in sorted order (the plan keeps the names). */
static bool plan_classes(const dpt_config *cfg, const table *t, const char *path, csv_plan *p, dpt_error *err)
{
    int64_t j = p->target[0];
    bool integers = true;
    for (int64_t i = 0; i < t->rows && integers; i++) {
        const char *s = t->cell[i * t->cols + j];
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        integers = end != s && !*end && !errno && v >= 0 && v < (1 << 24);
    }
    if (integers) return true;
    int64_t n = 0;
    char **all = malloc((size_t)t->rows * sizeof *all);
    if (!all) dpt_fatal("out of host memory");
    for (int64_t i = 0; i < t->rows; i++)
        all[n++] = t->cell[i * t->cols + j];
    qsort(all, (size_t)n, sizeof *all, cmp_class);
    int64_t distinct = 0;
    for (int64_t i = 0; i < n; i++)
        if (!i || cmp_class(&all[i], &all[i - 1])) all[distinct++] = all[i];
    int64_t stated = dpt_config_int(cfg, "data", "classes");
    if (distinct > (1 << 20) || distinct < 1) {
        free(all);
        return dpt_errorf(err, "%s: the target column holds %lld distinct labels: not a classification\nHINT: a real-"
                               "valued target is [data] csv_task = regression",
                          path, (long long)distinct);
    }
    if (stated && stated != distinct) {
        free(all);
        return dpt_errorf(err, "%s: [data] classes = %lld, and the target column of %s names %lld classes\nHINT: "
                               "leave [data] classes at 0 to take the names the file holds",
                          dpt_config_where(cfg, "data", "classes"), (long long)stated, path, (long long)distinct);
    }
    p->nclasses = (int)distinct;
    p->classes = malloc((size_t)distinct * sizeof *p->classes);
    if (!p->classes) dpt_fatal("out of host memory");
    for (int64_t c = 0; c < distinct; c++)
        p->classes[c] = dpt_strf("%s", all[c]);
    free(all);
    return true;
}

/* A label cell's class; -1 with err. */
static int32_t label_of(const csv_plan *p, const table *t, int64_t col, const char *path, int64_t row, dpt_error *err)
{
    const char *s = t->cell[row * t->cols + col];
    if (p->nclasses) {
        char *const *hit = bsearch(&s, p->classes, (size_t)p->nclasses, sizeof *p->classes, cmp_class);
        if (hit) return (int32_t)(hit - p->classes);
        dpt_errorf(err, "%s: line %lld: label " CELL_FMT " is not one of the %d classes of the training rows\nHINT: "
                        "every test label must occur among the training labels",
                   path, (long long)t->line[row], CELL_ARG(s), p->nclasses);
        return -1;
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < 0 || v >= (1 << 24)) {
        dpt_errorf(err, "%s: line %lld: label " CELL_FMT " is not a class index (a non-negative integer)\nHINT: the "
                        "training file's labels are integers, so these must be too",
                   path, (long long)t->line[row], CELL_ARG(s));
        return -1;
    }
    return (int32_t)v;
}

/* The rows of t that take[] selects (all when NULL) as a set, the plan's column j read from t's
 * column map[j] (NULL: j; -1: absent, a target of --input's rows, left 0); NULL with err. */
static csv_set *make_set(const csv_plan *p, const table *t, const bool *take, const int64_t *map, const char *path,
                         dpt_error *err)
{
    int64_t n = 0;
    for (int64_t i = 0; i < t->rows; i++)
        n += !take || take[i];
    csv_set *s = calloc(1, sizeof *s);
    if (!s) dpt_fatal("out of host memory");
    s->n = n, s->features = p->features, s->ntargets = p->ntargets;
    int64_t values;
    if (__builtin_mul_overflow(n > 0 ? n : 1, p->features, &values) || values > CSV_MAX_BYTES / 4) {
        free(s);
        dpt_errorf(err, "%s: %lld rows x %lld features: more values than memory holds\nHINT: fewer rows "
                            "or columns (csv_exclude)", path, (long long)n,
                   (long long)p->features);
        return NULL;
    }
    s->x = malloc((size_t)values * sizeof *s->x);
    if (p->classify)
        s->labels = malloc((size_t)(n + 1) * sizeof *s->labels);
    else
        s->y = malloc((size_t)((n + 1) * p->ntargets) * sizeof *s->y);
    s->line = malloc((size_t)(n + 1) * sizeof *s->line);
    if (!s->x || (!s->labels && !s->y) || !s->line) dpt_fatal("out of host memory for %s", path);
    int64_t at = 0;
    for (int64_t i = 0; i < t->rows; i++) {
        if (take && !take[i]) continue;
        char *const *row = t->cell + i * t->cols;
        float *x = s->x + at * p->features;
        double v;
        for (int64_t j = 0; j < p->cols; j++) {
            if (!p->is_feature[j]) continue;
            int64_t c = map ? map[j] : j;
            if (!cell_number(row[c], &v) || fabs(v) > FLT_MAX) {
                bad_cell(p, t, path, i, c, err);
                csv_set_free(s);
                return NULL;
            }
            *x++ = (float)v;
        }
        if (map && map[p->target[0]] < 0) { /* --input rows without targets */
            if (p->classify)
                s->labels[at] = 0;
            else
                for (int k = 0; k < p->ntargets; k++)
                    s->y[at * p->ntargets + k] = 0;
        } else if (p->classify) {
            int32_t label = label_of(p, t, map ? map[p->target[0]] : p->target[0], path, i, err);
            if (label < 0) {
                csv_set_free(s);
                return NULL;
            }
            s->labels[at] = label;
        } else {
            for (int k = 0; k < p->ntargets; k++) {
                int64_t c = map ? map[p->target[k]] : p->target[k];
                if (!cell_number(row[c], &v) || fabs(v) > FLT_MAX) {
                    bad_cell(p, t, path, i, c, err);
                    csv_set_free(s);
                    return NULL;
                }
                s->y[at * p->ntargets + k] = (float)v;
            }
        }
        s->line[at++] = t->line[i];
    }
    return s;
}

/* The training rows' mean and 1 / standard deviation of each feature (population variance, as
 * StandardScaler; a constant feature keeps scale 1). */
static void plan_scaling(const csv_set *train, csv_plan *p)
{
    int64_t f = p->features;
    p->mean = calloc((size_t)f, sizeof *p->mean);
    p->scale = malloc((size_t)f * sizeof *p->scale);
    double *m2 = calloc((size_t)f, sizeof *m2);
    if (!p->mean || !p->scale || !m2) dpt_fatal("out of host memory");
    for (int64_t i = 0; i < train->n; i++) /* Welford, in float64 */
        for (int64_t j = 0; j < f; j++) {
            double x = train->x[i * f + j], d = x - p->mean[j];
            p->mean[j] += d / (double)(i + 1);
            m2[j] += d * (x - p->mean[j]);
        }
    for (int64_t j = 0; j < f; j++) {
        double sd = train->n > 0 ? sqrt(m2[j] / (double)train->n) : 0;
        p->scale[j] = sd > 1e-12 * (fabs(p->mean[j]) > 1 ? fabs(p->mean[j]) : 1) ? 1.0 / sd : 1.0;
    }
    free(m2);
}

/* false with err when a standardised value leaves float32's range (a test row far outside the
 * training rows' spread). */
static bool apply_scaling(const csv_plan *p, csv_set *s, const char *path, dpt_error *err)
{
    if (!p->standardize) return true;
    for (int64_t i = 0; i < s->n; i++)
        for (int64_t j = 0; j < p->features; j++) {
            float *x = &s->x[i * p->features + j];
            double v = ((double)*x - p->mean[j]) * p->scale[j];
            if (fabs(v) > FLT_MAX)
                return dpt_errorf(err, "%s: line %lld: feature %lld, %g, is %g standard deviations of the training "
                                       "rows from their mean: beyond float32's range\nHINT: check the value, or "
                                       "set [data] csv_standardize = false",
                                  path, (long long)s->line[i], (long long)j, (double)*x, v);
            *x = (float)v;
        }
    return true;
}

/* The label check of a classifier whose labels are integers: [data] classes, or the largest + 1,
 * every class below it occurring in the training rows (labels from 1 leave class 0 empty), or
 * in the file's rows when the test rows are held out of it. */
static bool check_labels(const dpt_config *cfg, const csv_set *train, const csv_set *test, bool one_file,
                         const char *train_path, const char *test_path, int *classes, dpt_error *err)
{
    int64_t stated = dpt_config_int(cfg, "data", "classes");
    int32_t most = 0;
    const csv_set *sets[2] = {train, test};
    const char *paths[2] = {train_path, test_path};
    for (int s = 0; s < 2; s++)
        for (int64_t i = 0; i < sets[s]->n; i++) {
            int32_t l = sets[s]->labels[i];
            if (stated && l >= stated)
                return dpt_errorf(err, "%s: row %lld has label %d, and %s says [data] classes = %lld (labels 0 to "
                                       "%lld)\nHINT: fix the labels, or raise [data] classes",
                                  paths[s], (long long)i, l, dpt_config_where(cfg, "data", "classes"), (long long)stated,
                                  (long long)stated - 1);
            if (l > most) most = l;
        }
    if (stated) {
        *classes = (int)stated;
        return true;
    }
    char *seen = calloc((size_t)most + 1, 1);
    if (!seen) dpt_fatal("out of host memory");
    for (int64_t i = 0; i < train->n; i++)
        seen[train->labels[i]] = 1;
    for (int64_t i = 0; one_file && i < test->n; i++)
        seen[test->labels[i]] = 1;
    int32_t missing = -1;
    for (int32_t c = 0; c <= most && missing < 0; c++)
        if (!seen[c]) missing = c;
    free(seen);
    if (missing >= 0)
        return dpt_errorf(err, "%s: the labels run to %d, and class %d never occurs in %s\nHINT: labels "
                               "count from 0 (labels from 1 leave class 0 empty: subtract 1); if some classes really "
                               "have no training rows, say how many there are with [data] classes",
                          train_path, most, missing, one_file ? "the file" : "the training rows");
    *classes = most + 1 > 2 ? most + 1 : 2;
    return true;
}

static dpt_dataset *make_dataset(const csv_plan *p, csv_set *s, const char *name, uint64_t hash, int classes)
{
    dpt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) dpt_fatal("out of host memory");
    ds->n = s->n;
    snprintf(ds->name, sizeof ds->name, "%s", name);
    ds->nfields = 2;
    ds->fields[0] = (dpt_field){.name = "x", .dtype = DPT_F32, .ndim = 1, .shape = {p->features}};
    if (p->classify) {
        ds->fields[1] = (dpt_field){.name = "label", .dtype = DPT_I32, .ndim = 0, .target = true};
        ds->num_classes = classes;
        ds->task = (dpt_task){.loss = "cross_entropy", .metrics = DPT_METRIC_ACCURACY, .unit = "samples"};
    } else {
        ds->fields[1] = (dpt_field){.name = "y", .dtype = DPT_F32, .ndim = 1, .shape = {p->ntargets}, .target = true};
        ds->task = (dpt_task){.loss = "mse", .unit = "samples"};
    }
    plan_copy(&s->plan, p);
    if (p->nclasses) ds->class_names = (const char *const *)s->plan.classes;
    ds->content_hash = hash;
    ds->get = csv_get;
    ds->source = s;
    ds->free_source = csv_set_free;
    return ds;
}

/* The test file's columns must be the training file's. */
static bool same_columns(const csv_plan *p, const table *t, const char *train_path, const char *path, dpt_error *err)
{
    if (t->cols != p->cols)
        return dpt_errorf(err, "%s has %lld columns, and the training file %s has %lld\nHINT: the test rows need the "
                               "training rows' columns, in the same order",
                          path, (long long)t->cols, train_path, (long long)p->cols);
    for (int64_t j = 0; p->names && t->names && j < p->cols; j++)
        if (strcmp(p->names[j], t->names[j]))
            return dpt_errorf(err, "%s: column %lld is named " CELL_FMT ", and in the training file %s " CELL_FMT
                                   "\nHINT: the test rows need the training rows' columns, in the same order",
                              path, (long long)j, CELL_ARG(t->names[j]), train_path, CELL_ARG(p->names[j]));
    return true;
}

static uint64_t table_hash(const table *t, uint64_t h)
{
    for (int64_t i = 0; i < t->rows * t->cols; i++)
        h = dpt_hash_bytes(h, t->cell[i], strlen(t->cell[i]) + 1);
    return h;
}

static char delimiter_of(const dpt_config *cfg)
{
    static const char delims[] = {0, ',', ';', '\t'}; /* auto|comma|semicolon|tab */
    return delims[dpt_config_enum(cfg, "data", "csv_delimiter")];
}

static int header_of(const dpt_config *cfg)
{
    return dpt_config_enum(cfg, "data", "csv_header"); /* auto|yes|no */
}

static bool csv_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    /* paths as given (from the working folder unless absolute), as [data] train of tokens */
    const char *train_file = dpt_config_str(cfg, "data", "csv_train"), *test_file = dpt_config_str(cfg, "data", "csv_test");
    if (!*train_file)
        return dpt_errorf(err, "%s: [data] source = csv needs [data] csv_train, the CSV file of training rows\n" CSV_HINT,
                          dpt_config_where(cfg, "data", "csv_train"));
    char *train_path = dpt_strf("%s", train_file), *test_path = *test_file ? dpt_strf("%s", test_file) : NULL;
    table tt = {0}, vt = {0};
    csv_plan plan = {0};
    csv_set *tr = NULL, *te = NULL;
    bool *held = NULL, *kept = NULL, ok = false;
    int classes = 0;
    char delim = delimiter_of(cfg);
    if (!table_read(train_path, &delim, header_of(cfg), &tt, err) || !plan_columns(cfg, &tt, train_path, &plan, err))
        goto done;
    plan.delim = delim;
    if (!test_path) { /* hold out a seeded fraction of the rows: the first k of a seeded shuffle */
        double fraction = dpt_config_float(cfg, "data", "csv_test_fraction");
        int64_t k = (int64_t)llround(fraction * (double)tt.rows);
        if (k < 1 || k >= tt.rows) {
            dpt_errorf(err, "%s: [data] csv_test_fraction = %g of %s's %lld rows holds out %lld: the train and test "
                            "sets need one row each at least\nHINT: give the test rows their own file with [data] "
                            "csv_test",
                       dpt_config_where(cfg, "data", "csv_test_fraction"), fraction, train_path, (long long)tt.rows,
                       (long long)k);
            goto done;
        }
        int64_t *perm = malloc((size_t)tt.rows * sizeof *perm);
        held = calloc((size_t)tt.rows, sizeof *held);
        if (!perm || !held) dpt_fatal("out of host memory");
        for (int64_t i = 0; i < tt.rows; i++)
            perm[i] = i;
        dpt_rng rng;
        dpt_rng_seed(&rng, (uint64_t)dpt_config_int(cfg, "train", "seed") ^ 0xc5c5c5c5c5c5c5c5ULL);
        for (int64_t i = tt.rows - 1; i > 0; i--) {
            int64_t j = (int64_t)dpt_rng_below(&rng, (uint64_t)i + 1), tmp = perm[i];
            perm[i] = perm[j], perm[j] = tmp;
        }
        for (int64_t i = 0; i < k; i++)
            held[perm[i]] = true;
        free(perm);
    }
    if (held) {
        kept = calloc((size_t)tt.rows, sizeof *kept);
        if (!kept) dpt_fatal("out of host memory");
        for (int64_t i = 0; i < tt.rows; i++)
            kept[i] = !held[i];
    }
    /* class names from every row of the file (a rare class may fall in the held-out rows alone) */
    ok = (!plan.classify || plan_classes(cfg, &tt, train_path, &plan, err)) &&
         (tr = make_set(&plan, &tt, kept, NULL, train_path, err));
    if (!ok) goto done;
    if (test_path) {
        ok = table_read(test_path, &delim, tt.names ? 1 : 2, &vt, err) && same_columns(&plan, &vt, train_path, test_path, err) &&
             (te = make_set(&plan, &vt, NULL, NULL, test_path, err));
    } else {
        ok = (te = make_set(&plan, &tt, held, NULL, train_path, err)) != NULL;
    }
    if (!ok) goto done;
    if (plan.classify && !plan.nclasses &&
        !(ok = check_labels(cfg, tr, te, !test_path, train_path, test_path ? test_path : train_path, &classes, err)))
        goto done;
    if (plan.nclasses) classes = plan.nclasses;
    plan_scaling(tr, &plan);
    if (!(ok = apply_scaling(&plan, tr, train_path, err) &&
               apply_scaling(&plan, te, test_path ? test_path : train_path, err)))
        goto done;
    uint64_t hash = table_hash(&tt, DPT_HASH_SEED);
    char name[64];
    snprintf(name, sizeof name, "csv train (%lld rows)", (long long)tr->n);
    *train = make_dataset(&plan, tr, name, hash, classes);
    tr = NULL;
    snprintf(name, sizeof name, "csv test (%lld rows)", (long long)te->n);
    *test = make_dataset(&plan, te, name, test_path ? table_hash(&vt, DPT_HASH_SEED) : hash, classes);
    te = NULL;
    dpt_input_note(train_path, "the data file", false);
    if (test_path) dpt_input_note(test_path, "the data file", false);
    ok = true;
done:
    csv_set_free(tr), csv_set_free(te);
    plan_free(&plan);
    table_free(&tt), table_free(&vt);
    free(held), free(kept), free(train_path), free(test_path);
    return ok;
}

/* ---------------------------------------------------------------- --predict --input */

bool dpt_csv_open_input(const char *path, const dpt_dataset *like, dpt_dataset **out, dpt_error *err)
{
    *out = NULL;
    const csv_plan *p = &((const csv_set *)like->source)->plan;
    table t;
    char delim = p->delim;
    if (!table_read(path, &delim, p->names ? 1 : 2, &t, err)) return dpt_error_prefix(err, "--input: ");
    /* the training file's columns, or all of them but the targets, in the same order */
    int64_t *map = malloc((size_t)p->cols * sizeof *map);
    if (!map) dpt_fatal("out of host memory");
    bool full = t.cols == p->cols, ok = true;
    if (!full && t.cols != p->cols - p->ntargets)
        ok = dpt_errorf(err, "--input %s: %lld columns; the model's training file had %lld, %d of them target%s\nHINT: "
                             "--input takes the training file's columns, with or without the targets, in the same order",
                        path, (long long)t.cols, (long long)p->cols, p->ntargets, p->ntargets == 1 ? "" : "s");
    for (int64_t j = 0, c = 0; ok && j < p->cols; j++) {
        bool target = false;
        for (int k = 0; k < p->ntargets; k++)
            target |= p->target[k] == j;
        map[j] = full ? j : target ? -1 : c++;
        if (map[j] >= 0 && p->names && t.names && strcmp(p->names[j], t.names[map[j]]))
            ok = dpt_errorf(err, "--input %s: column %lld is named " CELL_FMT ", where the training file had " CELL_FMT
                                 "\nHINT: --input takes the training file's columns, with or without the targets, "
                                 "in the same order",
                            path, (long long)map[j], CELL_ARG(t.names[map[j]]), CELL_ARG(p->names[j]));
    }
    if (full) /* the targets are there: read as the features are, then left out (unlabelled) */
        for (int k = 0; k < p->ntargets; k++)
            map[p->target[k]] = -1;
    csv_set *s = ok ? make_set(p, &t, NULL, map, path, err) : NULL;
    free(map);
    table_free(&t);
    if (!s) return false;
    if (!apply_scaling(p, s, path, err)) {
        csv_set_free(s);
        return false;
    }
    char name[64];
    snprintf(name, sizeof name, "csv (%lld rows)", (long long)s->n);
    dpt_dataset *ds = make_dataset(p, s, name, 0, like->num_classes);
    ds->unlabelled = true;
    *out = ds;
    dpt_input_note(path, "the --input file", false);
    return true;
}

static const dpt_data_impl csv_impl = {.open = csv_open};

static const dpt_config_key csv_keys[] = {
    {NULL, "csv_train", DPT_KEY_STRING, "", 0, 0, NULL,
     "CSV file of the training rows (a path from the working folder, or absolute; .gz read through zlib): one row a "
     "sample, one column a feature or a target",
     0},
    {NULL, "csv_test", DPT_KEY_STRING, "", 0, 0, NULL,
     "CSV file of the test rows, with the training file's columns (empty: csv_test_fraction of the training rows "
     "are held out)",
     0},
    {NULL, "csv_test_fraction", DPT_KEY_FLOAT, "0.2", 0, 0.9, NULL,
     "without csv_test, the fraction of the training file's rows held out as the test set (chosen by [train] "
     "seed, the same on every rank and every resume)",
     0},
    {NULL, "csv_target", DPT_KEY_STRING, "-1", 0, 0, NULL,
     "the target column(s): header names or indices from 0 (-1: the last), comma-separated; a classifier has one",
     0},
    {NULL, "csv_exclude", DPT_KEY_STRING, "", 0, 0, NULL,
     "columns that are neither features nor targets (ids, dates): names or indices, comma-separated", 0},
    {NULL, "csv_task", DPT_KEY_ENUM, "classification", 1, 0, "classification|regression",
     "classification: the target holds labels (integers from 0, or names numbered in sorted order), cross-entropy "
     "and accuracy; regression: real values, mse",
     0},
    {NULL, "csv_header", DPT_KEY_ENUM, "auto", 1, 0, "auto|yes|no",
     "whether the first row holds column names (auto: when a column's first cell is not a number and its second is)",
     0},
    {NULL, "csv_delimiter", DPT_KEY_ENUM, "auto", 1, 0, "auto|comma|semicolon|tab",
     "what separates cells (auto: the most frequent of the three in the first row)", 0},
    {NULL, "csv_standardize", DPT_KEY_BOOL, "true", 1, 0, NULL,
     "scale each feature to mean 0 and standard deviation 1 over the training rows (scikit-learn's StandardScaler; "
     "the test rows and --input with the same numbers); false: as read",
     0},
};
DPT_BUILTIN(data_csv) = {DPT_KIND_DATA, "csv", "a CSV table of numbers: one row a sample, feature and target columns",
                         csv_keys, DPT_COUNT(csv_keys), &csv_impl};
