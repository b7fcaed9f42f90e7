/* csv.c: [data] source = csv, a table of numbers (tabular data: one row a sample, one column a
 * feature, one or more columns its target), read as pandas.read_csv reads it and checked as
 * hostile input. RFC 4180 text: cells split by the delimiter (auto: the most frequent of ',' ';'
 * and tab in the first row), quoted cells ("a, b", quotes doubled) may hold delimiters and line
 * breaks, CRLF or LF, blank lines skipped, a UTF-8 byte-order mark dropped, gzip read through zlib.
 * A header row of names is detected (a column whose first cell is not a number and whose second
 * is) or stated.
 *
 * Sample i is row i: x, its features (every column but the targets and [data] csv_exclude, as
 * float32: a number column's value, standardised with the training rows' mean and standard
 * deviation unless csv_standardize = false (scikit-learn's StandardScaler); a categorical
 * column's one-hot values over the training rows' categories in sorted order (pandas'
 * get_dummies): auto for a column of text, or listed), and its target: for a classifier one
 * column of labels (non-negative integers as they are, or names numbered in sorted order, which
 * --predict prints back), for a regression its real values, for a multi-label classifier
 * (csv_task = multilabel) one column of 0 or 1 a label. A missing feature cell stops the
 * run naming its file, line and column, or with csv_missing = mean takes the training rows' mean
 * (a categorical column: no category). Without [data] csv_test a seeded csv_test_fraction of the
 * training file's rows is held out. */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <zlib.h>

#include "dpt.h"
#include "data.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"
#include "../runtime/rng.h"

#define CSV_HINT                                                                                             \
    "HINT: [data] source = csv reads a table of numbers, one row a sample (see docs/config.md, [data] "      \
    "csv_*)"
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
        return dpt_errorf(
            err,
            "cannot open CSV file %s: %s\nHINT: [data] csv_train and csv_test are paths from the "
            "folder ./train runs in (unless absolute); [data] dir is not used for them",
            path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return dpt_errorf(err, "CSV file %s is not a regular file (a folder, FIFO or device)\n" CSV_HINT,
                          path);
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return dpt_errorf(err, "cannot open CSV file %s: %s\n" CSV_HINT, path,
                          errno ? strerror(errno) : "out of memory");
    int64_t cap = 1 << 16, have = 0;
    char *buf = malloc((size_t)cap + 1);
    if (!buf) dpt_fatal("out of host memory reading %s", path);
    for (;;) {
        if (have == cap) {
            if (cap >= CSV_MAX_BYTES) {
                gzclose(gz);
                free(buf);
                return dpt_errorf(err,
                                  "CSV file %s: more than %lld bytes of text\nHINT: split it, or convert it "
                                  "to a binary format",
                                  path, (long long)CSV_MAX_BYTES);
            }
            cap *= 2;
            char *grown = realloc(buf, (size_t)cap + 1);
            if (!grown) {
                gzclose(gz);
                free(buf);
                return dpt_errorf(
                    err,
                    "CSV file %s: out of host memory for %lld bytes of text\nHINT: a smaller file, or a "
                    "machine with more memory",
                    path, (long long)cap);
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
        return dpt_errorf(
            err,
            "CSV file %s: line %lld holds a NUL byte: not text\nHINT: a binary file, or text in "
            "UTF-16 (Excel's \"Unicode text\"): save the table as CSV in UTF-8",
            path, (long long)line);
    }
    if (!memchr(buf, '\n', (size_t)have) && memchr(buf, '\r', (size_t)have)) {
        free(buf);
        return dpt_errorf(
            err,
            "CSV file %s ends its lines with a carriage return alone (classic Mac OS), not a line "
            "feed\nHINT: convert it: tr '\\r' '\\n' < %s > fixed.csv",
            path, path);
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
                dpt_errorf(err, "%s: line %lld has more than %lld cells\n" CSV_HINT, r->path,
                           (long long)*line, (long long)CSV_MAX_COLS);
                return -1;
            }
            char *w = r->p, *start = r->p;
            if (r->p < r->end && *r->p == '"') { /* quoted: to the closing quote, "" a quote */
                int64_t opened = r->line;
                r->p++;
                for (;;) {
                    if (r->p >= r->end) {
                        dpt_errorf(err,
                                   "%s: line %lld: a quoted cell opened there is never closed\nHINT: a quote "
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
                    dpt_errorf(
                        err,
                        "%s: line %lld: text after a quoted cell's closing quote\nHINT: a quote inside "
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

/* What a cell that is not a float32 number is. */
enum { CELL_MISSING, CELL_BAD_NUMBER, CELL_TEXT };
static int cell_kind(const char *s, const char **why)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (!*s) return *why = "a missing value (empty)", CELL_MISSING;
    /* the markers first: strtod reads "NaN" and "nan" as a number, which pandas writes for a
     * missing value */
    static const char *missing[] = {"NA", "N/A", "NaN", "nan", "NULL", "null", "None", "?", "-"};
    size_t len = strcspn(s, " \t");
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++)
        if (len == strlen(missing[i]) && !strncmp(s, missing[i], len) && !s[len + strspn(s + len, " \t")])
            return *why = "a missing value", CELL_MISSING;
    double v;
    if (cell_number(s, &v))
        return *why = "beyond float32's range (3.4e38)", CELL_BAD_NUMBER; /* refused for its size */
    char *end;
    v = strtod(s, &end);
    if (end != s && !isfinite(v) && !end[strspn(end, " \t")]) return *why = "not finite", CELL_BAD_NUMBER;
    return *why = "not a number", CELL_TEXT;
}

/* ---------------------------------------------------------------- one file as a table */

/* A file read as far as its header: the text, the reader at the first row not yet read, the
 * header's names (or NULL) and the data rows read ahead to decide it. */
typedef struct table {
    char *text;
    reader r;
    const char *path;
    int64_t cols, first_line;
    uint64_t hash;   /* of the file's bytes */
    char **names;    /* cols cells, into text, or NULL */
    char **ahead[2]; /* data rows read ahead (cols cells each) */
    int64_t ahead_line[2];
    int nahead, taken;
} table;

static void table_free(table *t)
{
    free(t->text), free(t->r.cells), free(t->names), free(t->ahead[0]), free(t->ahead[1]);
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

static bool ragged(const table *t, int64_t line, int64_t n, dpt_error *err)
{
    return dpt_errorf(err,
                      "%s: line %lld has %lld cells, and line %lld has %lld\nHINT: every row needs the same "
                      "columns; a cell holding the delimiter must be quoted (\"a, b\")",
                      t->path, (long long)line, (long long)n, (long long)t->first_line, (long long)t->cols);
}

static char **copy_cells(const reader *r, int64_t n)
{
    char **c = malloc((size_t)n * sizeof *c);
    if (!c) dpt_fatal("out of host memory for a CSV row");
    return memcpy(c, r->cells, (size_t)n * sizeof *c);
}

/* Open path: its text, and its first rows as far as the header decision. *delim: 0 to sniff it
 * (then set). header: 0 auto, 1 yes, 2 no. */
static bool table_open(const char *path, char *delim, int header, table *t, dpt_error *err)
{
    memset(t, 0, sizeof *t);
    t->path = path;
    int64_t len = 0, line = 0, line2 = 0;
    if (!read_text(path, &t->text, &len, err)) return false;
    /* zlib's CRC-32 and Adler-32 of the bytes, 64 bits: 5x faster than a byte-at-a-time FNV over a
     * table of hundreds of MB, read at every start on every rank */
    t->hash = (uint64_t)crc32_z(0, (const Bytef *)t->text, (size_t)len) << 32 |
              adler32_z(1, (const Bytef *)t->text, (size_t)len);
    if (!*delim) *delim = sniff_delimiter(t->text, t->text + len);
    reader_init(&t->r, t->text, len, *delim, path);
    char **first = NULL, **second = NULL;
    int64_t n = next_record(&t->r, &line, err);
    if (n <= 0) {
        if (n == 0) dpt_errorf(err, "CSV file %s holds no rows\n" CSV_HINT, path);
        goto fail;
    }
    t->cols = n, t->first_line = line;
    first = copy_cells(&t->r, n);
    n = next_record(&t->r, &line2, err);
    if (n < 0 || (n > 0 && n != t->cols)) {
        if (n > 0) ragged(t, line2, n, err);
        goto fail;
    }
    if (n > 0) second = copy_cells(&t->r, n);
    if (header == 0) { /* auto: a column whose first cell is a name and whose second a number (a
                        * lone row: names in every cell) */
        double v;
        int64_t names = 0;
        for (int64_t j = 0; j < t->cols; j++) {
            bool name = !cell_number(first[j], &v) && first[j][strspn(first[j], " \t")];
            names += name;
            if (name && second && cell_number(second[j], &v)) header = 1;
        }
        if (!second && names == t->cols) header = 1;
    }
    if (header == 1) {
        if (!second) {
            dpt_errorf(err, "CSV file %s holds a header and no rows\n" CSV_HINT, path);
            goto fail;
        }
        t->names = first;
        t->ahead[0] = second, t->ahead_line[0] = line2, t->nahead = 1;
    } else {
        t->ahead[0] = first, t->ahead_line[0] = line, t->nahead = 1;
        if (second) t->ahead[1] = second, t->ahead_line[1] = line2, t->nahead = 2;
    }
    return true;
fail:
    free(first), free(second);
    table_free(t);
    return false;
}

/* The next data row's cells (cols of them); NULL at the end, or with *failed and err. */
static char **table_next(table *t, int64_t *line, bool *failed, dpt_error *err)
{
    *failed = false;
    if (t->taken < t->nahead) {
        *line = t->ahead_line[t->taken];
        return t->ahead[t->taken++];
    }
    int64_t n = next_record(&t->r, line, err);
    if (n == 0) return NULL;
    if (n > 0 && n == t->cols) return t->r.cells;
    if (n > 0) ragged(t, *line, n, err);
    *failed = true;
    return NULL;
}

/* ---------------------------------------------------------------- the data set */

typedef struct csv_plan {
    int64_t cols; /* of the training file */
    char **names; /* its header (copies), or NULL */
    int ntargets;
    int64_t target[CSV_MAX_TARGETS];
    int8_t *kind;     /* cols: 0 not a feature, FEATURE_NUMBER, FEATURE_CATEGORIES (one-hot) */
    int64_t raw;      /* feature columns */
    int64_t features; /* the values of x: a number column's one, a categorical column's one per category */
    int32_t *ncat;    /* cols: a categorical column's categories */
    char ***cats;     /* cols: their names in sorted order (NULL for the others) */
    double *fill;     /* cols: a missing number's value (csv_missing = mean: the training rows' mean) */
    int categorical;  /* csv_categorical: CATEGORICAL_NONE, _AUTO (text makes a column categorical) or _LISTED
                       */
    bool impute;      /* csv_missing = mean */
    bool ignore_unknown; /* csv_unknown_category = ignore */
    bool resolved;       /* the training rows have fixed the categories and the means */
    bool classify, multilabel, standardize;
    int64_t shape[3]; /* csv_shape: x as (C, H, W), or 0: a vector */
    char delim;       /* the training file's */
    int nclasses;     /* classification by names: the sorted names */
    char **classes;
    double *mean, *scale; /* features: x' = (x - mean) * scale */
} csv_plan;

enum { FEATURE_NUMBER = 1, FEATURE_CATEGORIES = 2 };
enum { CATEGORICAL_NONE, CATEGORICAL_AUTO, CATEGORICAL_LISTED };
#define CSV_MAX_CATEGORIES 1024 /* a column with more distinct values is an id or free text */

typedef struct csv_set {
    int64_t n;
    float *x;                  /* n x features */
    float *y;                  /* n x ntargets (regression, multi-label) */
    int32_t *labels;           /* n (classification) */
    int64_t *line;             /* n: each row's line in its file (messages) */
    int64_t *counts;           /* classification: the rows of each class; multi-label: of each label */
    const char **target_names; /* ntargets: the target columns' names (the plan's), or NULL */
    csv_plan plan;             /* its own copy: --predict --input reads a file as this set was read */
} csv_set;

static void plan_free(csv_plan *p)
{
    for (int64_t j = 0; p->names && j < p->cols; j++)
        free(p->names[j]);
    for (int c = 0; c < p->nclasses; c++)
        free(p->classes[c]);
    for (int64_t j = 0; p->cats && j < p->cols; j++) {
        for (int32_t c = 0; p->cats[j] && c < p->ncat[j]; c++)
            free(p->cats[j][c]);
        free(p->cats[j]);
    }
    free(p->names), free(p->classes), free(p->kind), free(p->ncat), free(p->cats), free(p->fill);
    free(p->mean), free(p->scale);
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
    dst->kind = copy_bytes(p->kind, (size_t)p->cols * sizeof *p->kind);
    dst->ncat = copy_bytes(p->ncat, (size_t)p->cols * sizeof *p->ncat);
    dst->fill = copy_bytes(p->fill, (size_t)p->cols * sizeof *p->fill);
    if (p->cats) {
        dst->cats = calloc((size_t)p->cols, sizeof *dst->cats);
        if (!dst->cats) dpt_fatal("out of host memory");
        for (int64_t j = 0; j < p->cols; j++)
            dst->cats[j] = copy_strings(p->cats[j], p->ncat[j]);
    }
    dst->mean = copy_bytes(p->mean, (size_t)p->features * sizeof *p->mean);
    dst->scale = copy_bytes(p->scale, (size_t)p->features * sizeof *p->scale);
}

static void csv_set_free(void *source)
{
    csv_set *s = source;
    if (!s) return;
    plan_free(&s->plan);
    free(s->x), free(s->y), free(s->labels), free(s->line), free(s->counts), free(s->target_names), free(s);
}

static void csv_get(const dpt_dataset *ds, int64_t index, void *const *dst)
{
    const csv_set *s = ds->source;
    int64_t f = s->plan.features, t = s->plan.ntargets;
    memcpy(dst[0], s->x + index * f, (size_t)f * sizeof(float));
    if (s->labels)
        *(int32_t *)dst[1] = s->labels[index];
    else
        memcpy(dst[1], s->y + index * t, (size_t)t * sizeof(float));
}

/* One column of a csv_target / csv_exclude list: a header name, or an index (negative from the
 * end, as Python's). -1 with err. */
static int64_t column_of(const csv_plan *p, const char *item, const char *where, const char *key,
                         const char *path, dpt_error *err)
{
    char *end;
    errno = 0;
    long long i = strtoll(item, &end, 10);
    if (end != item && !*end && !errno) {
        if (i < -p->cols || i >= p->cols) {
            dpt_errorf(err,
                       "%s: [data] %s names column %lld, and %s has %lld columns (0 to %lld, or -1 for the "
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
                dpt_errorf(err,
                           "%s: [data] %s = %s: %s has two columns of that name (%lld and %lld)\nHINT: name "
                           "the column by its index",
                           where, key, item, path, (long long)found, (long long)j);
                return -1;
            }
            found = j;
        }
    if (found >= 0) return found;
    if (!p->names) {
        dpt_errorf(
            err,
            "%s: [data] %s = %s: %s has no header row of names\nHINT: name columns by index (0 for the "
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
    dpt_errorf(
        err,
        "%s: [data] %s = %s: no column of %s has that name%s%s%s\nHINT: the header's names are matched "
        "exactly; a column may be named by its index",
        where, key, item, path, near && best <= 3 ? " (did you mean '" : "", near && best <= 3 ? near : "",
        near && best <= 3 ? "'?)" : "");
    return -1;
}

/* The columns a comma list names, into cols; their count, or -1 with err. */
static int column_list(const dpt_config *cfg, const char *key, const csv_plan *p, const char *path,
                       int64_t *cols, dpt_error *err)
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
            dpt_errorf(
                err,
                "%s: [data] %s holds an empty or overlong item\nHINT: a comma-separated list of column "
                "names or indices",
                where, key);
            return -1;
        }
        if (n == CSV_MAX_TARGETS) {
            dpt_errorf(err,
                       "%s: [data] %s names more than %d columns\nHINT: name the few columns that are "
                       "not features: targets and excluded ones",
                       where, key, CSV_MAX_TARGETS);
            return -1;
        }
        memcpy(item, v, len), item[len] = 0;
        int64_t c = column_of(p, item, where, key, path, err);
        if (c < 0) return -1;
        for (int i = 0; i < n; i++)
            if (cols[i] == c) {
                dpt_errorf(err,
                           "%s: [data] %s names column %lld twice\nHINT: a name and an index may be the "
                           "same column",
                           where, key, (long long)c);
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
    int task = dpt_config_enum(cfg, "data", "csv_task"); /* classification|regression|multilabel */
    p->classify = task == 0, p->multilabel = task == 2;
    p->standardize = dpt_config_bool(cfg, "data", "csv_standardize");
    int64_t excluded[CSV_MAX_TARGETS];
    int nt = column_list(cfg, "csv_target", p, path, p->target, err);
    if (nt < 0) return false;
    int ne = column_list(cfg, "csv_exclude", p, path, excluded, err);
    if (ne < 0) return false;
    if (nt == 0)
        return dpt_errorf(
            err, "%s: [data] csv_target is empty\nHINT: name the target column (e.g. -1 for the last)",
            dpt_config_where(cfg, "data", "csv_target"));
    if (p->classify && nt != 1)
        return dpt_errorf(
            err,
            "%s: [data] csv_target names %d columns, and a classifier has one column of labels\n"
            "HINT: several real-valued targets are [data] csv_task = regression",
            dpt_config_where(cfg, "data", "csv_target"), nt);
    p->ntargets = nt;
    p->kind = malloc((size_t)t->cols * sizeof *p->kind);
    p->ncat = calloc((size_t)t->cols, sizeof *p->ncat);
    p->fill = calloc((size_t)t->cols, sizeof *p->fill);
    if (!p->kind || !p->ncat || !p->fill) dpt_fatal("out of host memory");
    for (int64_t j = 0; j < t->cols; j++)
        p->kind[j] = FEATURE_NUMBER;
    for (int i = 0; i < nt; i++)
        p->kind[p->target[i]] = 0;
    for (int i = 0; i < ne; i++) {
        if (!p->kind[excluded[i]])
            return dpt_errorf(err,
                              "%s: [data] csv_exclude names column %lld, which [data] csv_target names too\n"
                              "HINT: a target column is never a feature; leave it out of csv_exclude",
                              dpt_config_where(cfg, "data", "csv_exclude"), (long long)excluded[i]);
        p->kind[excluded[i]] = 0;
    }
    p->impute = dpt_config_enum(cfg, "data", "csv_missing") == 1;                  /* stop|mean */
    p->ignore_unknown = dpt_config_enum(cfg, "data", "csv_unknown_category") == 1; /* stop|ignore */
    const char *cat = dpt_config_str(cfg, "data", "csv_categorical");
    p->categorical = !strcmp(cat, "auto")            ? CATEGORICAL_AUTO
                     : !strcmp(cat, "none") || !*cat ? CATEGORICAL_NONE
                                                     : CATEGORICAL_LISTED;
    if (p->categorical == CATEGORICAL_LISTED) {
        int64_t listed[CSV_MAX_TARGETS];
        int nc = column_list(cfg, "csv_categorical", p, path, listed, err);
        if (nc < 0) return false;
        for (int i = 0; i < nc; i++) {
            if (!p->kind[listed[i]])
                return dpt_errorf(
                    err,
                    "%s: [data] csv_categorical names column %lld, which is a target or excluded\n"
                    "HINT: categorical columns are features; a classifier's label column is "
                    "categorical by itself",
                    dpt_config_where(cfg, "data", "csv_categorical"), (long long)listed[i]);
            p->kind[listed[i]] = FEATURE_CATEGORIES;
        }
    }
    for (int64_t j = 0; j < t->cols; j++)
        p->raw += p->kind[j] != 0;
    p->features = p->raw;
    if (!p->raw)
        return dpt_errorf(
            err,
            "%s: every column of %s is a target or excluded: no features left\nHINT: check [data] "
            "csv_target and csv_exclude",
            path, path);
    return true;
}

/* " ('name')" of the plan's column j for messages (its header name, cut at 40 characters), or "". */
static const char *col_label(const csv_plan *p, int64_t j, char *buf, size_t size)
{
    buf[0] = 0;
    if (p->names) snprintf(buf, size, " ('%.40s%s')", p->names[j], strlen(p->names[j]) > 40 ? "..." : "");
    return buf;
}

/* The rows a file holds, as a plan reads them (features and targets as floats, a classifier's
 * label cells as text until the classes are known). */
typedef struct text_cell {
    int64_t row, j, c; /* the row, the plan's column and the file's */
    const char *s;     /* into the table's text */
} text_cell;

typedef struct rows {
    int64_t n, cap;
    float *x, *y;    /* n x raw (NaN: a missing value or a text cell), then n x features; n x ntargets */
    char **label;    /* n: classification's label cells (into the table's text; NULL: none) */
    int64_t *line;   /* n: each row's first line */
    text_cell *text; /* the text cells of categorical columns, in row order */
    int64_t ntext, text_cap;
} rows;

static void rows_free(rows *r)
{
    free(r->x), free(r->y), free(r->label), free(r->line), free(r->text);
    memset(r, 0, sizeof *r);
}

static void rows_reserve(rows *r, const csv_plan *p, const char *path)
{
    if (r->n < r->cap) return;
    int64_t cap = r->cap ? 2 * r->cap : 1024, values;
    if (__builtin_mul_overflow(cap, p->raw > p->ntargets ? p->raw : p->ntargets, &values) ||
        values > CSV_MAX_BYTES)
        dpt_fatal("%s: more than %lld values: not a table this reader holds", path, (long long)CSV_MAX_BYTES);
    float *x = realloc(r->x, (size_t)(cap * p->raw) * sizeof *x);
    if (x) r->x = x;
    int64_t *line = realloc(r->line, (size_t)cap * sizeof *line);
    if (line) r->line = line;
    bool ok = x && line;
    if (p->classify) {
        char **label = realloc(r->label, (size_t)cap * sizeof *label);
        if (label) r->label = label;
        ok = ok && label;
    } else {
        float *y = realloc(r->y, (size_t)(cap * p->ntargets) * sizeof *y);
        if (y) r->y = y;
        ok = ok && y;
    }
    if (!ok) dpt_fatal("out of host memory for the rows of %s (%lld of them so far)", path, (long long)r->n);
    r->cap = cap;
}

static bool bad_cell(const csv_plan *p, const char *path, int64_t line, int64_t j, int64_t c, const char *s,
                     dpt_error *err)
{
    char name[96];
    col_label(p, j, name, sizeof name);
    const char *why, *hint;
    int k = cell_kind(s, &why);
    if (!p->kind[j])
        hint = "a regression's targets are numbers: fill or drop the rows that lack one";
    else if (k == CELL_MISSING)
        hint = "[data] csv_missing = mean gives a missing feature the training rows' mean (and a categorical "
               "column's "
               "none of its categories); or fill or drop such rows, or leave the column out with csv_exclude";
    else if (k == CELL_BAD_NUMBER)
        hint = "a feature is a finite number within float32's range";
    else if (p->resolved)
        hint = "this column held only numbers in the training rows; name it in [data] csv_categorical to "
               "read it as "
               "categories";
    else
        hint = "a column of names is read as categories (one-hot) with [data] csv_categorical = auto or a "
               "list naming "
               "it; or leave it out with csv_exclude";
    return dpt_errorf(err, "%s: line %lld, column %lld%s: " CELL_FMT " is %s\nHINT: %s", path,
                      (long long)line, (long long)c, name, CELL_ARG(s), why, hint);
}

/* A multi-label target cell: 0 or 1, or true/false (pandas' get_dummies writes True/False). */
static bool label_bit(const char *s, double *v)
{
    if (cell_number(s, v)) return *v == 0 || *v == 1;
    if (!strcasecmp(s, "true") || !strcasecmp(s, "false")) {
        *v = tolower((unsigned char)s[0]) == 't';
        return true;
    }
    return false;
}

/* t's rows into r as p reads them: the plan's column j from the file's column map[j] (NULL: j;
 * -1: absent, the targets of --input's rows: 0, no label). */
static bool read_rows(table *t, const csv_plan *p, const int64_t *map, rows *r, dpt_error *err)
{
    int64_t line;
    bool failed;
    char **cells;
    while ((cells = table_next(t, &line, &failed, err))) {
        rows_reserve(r, p, t->path);
        float *x = r->x + r->n * p->raw;
        double v;
        for (int64_t j = 0; j < p->cols; j++) {
            if (!p->kind[j]) continue;
            int64_t c = map ? map[j] : j;
            const char *why;
            if (cell_number(cells[c], &v) && fabs(v) <= FLT_MAX) {
                *x++ = (float)v;
                continue;
            }
            int k = cell_kind(cells[c], &why);
            bool text = k == CELL_TEXT && (p->kind[j] == FEATURE_CATEGORIES ||
                                           (p->categorical == CATEGORICAL_AUTO && !p->resolved));
            if (!text && !(k == CELL_MISSING && p->impute))
                return bad_cell(p, t->path, line, j, c, cells[c], err);
            if (text) { /* kept until the column's categories are known */
                if (r->ntext == r->text_cap) {
                    r->text_cap = r->text_cap ? 2 * r->text_cap : 1024;
                    r->text = realloc(r->text, (size_t)r->text_cap * sizeof *r->text);
                    if (!r->text) dpt_fatal("out of host memory for the text cells of %s", t->path);
                }
                r->text[r->ntext++] = (text_cell){r->n, j, c, cells[c]};
            }
            *x++ = NAN;
        }
        for (int k = 0; k < p->ntargets; k++) {
            int64_t j = p->target[k], c = map ? map[j] : j;
            if (p->classify) {
                const char *why;
                if (c >= 0 && !cell_number(cells[c], &v) && cell_kind(cells[c], &why) == CELL_MISSING) {
                    char name[96];
                    return dpt_errorf(err,
                                      "%s: line %lld, column %lld%s: the label " CELL_FMT
                                      " is %s\nHINT: every "
                                      "row needs its label: fill or drop the rows that lack one",
                                      t->path, (long long)line, (long long)c,
                                      col_label(p, j, name, sizeof name), CELL_ARG(cells[c]), why);
                }
                r->label[r->n] = c < 0 ? NULL : cells[c];
                continue;
            }
            if (c < 0)
                v = 0;
            else if (p->multilabel && !label_bit(cells[c], &v)) {
                char name[96];
                const char *why;
                bool missing = cell_kind(cells[c], &why) == CELL_MISSING;
                return dpt_errorf(err,
                                  "%s: line %lld, column %lld%s: the label " CELL_FMT
                                  " is %s\nHINT: a multi-label target column holds 0 or 1 (or true/false) in "
                                  "every row: one column a label, and a row may have several",
                                  t->path, (long long)line, (long long)c, col_label(p, j, name, sizeof name),
                                  CELL_ARG(cells[c]), missing ? "missing" : "not 0 or 1");
            } else if (!p->multilabel && (!cell_number(cells[c], &v) || fabs(v) > FLT_MAX))
                return bad_cell(p, t->path, line, j, c, cells[c], err);
            r->y[r->n * p->ntargets + k] = (float)v;
        }
        r->line[r->n++] = line;
    }
    return !failed;
}

/* Numbers first, in order, then names in byte order: labels "-1" and "1" give classes 0 and 1. */
static int cmp_class(const void *a, const void *b);

/* v's n strings sorted by cmp_class and each kept once, in place; the count kept. A dropped
 * duplicate is freed when the strings are owned. */
static int64_t sort_distinct(char **v, int64_t n, bool owned)
{
    qsort(v, (size_t)n, sizeof *v, cmp_class);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!kept || cmp_class(&v[i], &v[kept - 1]))
            v[kept++] = v[i];
        else if (owned)
            free(v[i]);
    }
    return kept;
}

/* A categorical column's cell of row i as text: the cell kept, or the number read (as %.9g);
 * NULL when missing. *next walks r->text in order. */
static const char *category_text(const rows *r, const csv_plan *p, int64_t i, int64_t j, int64_t at,
                                 int64_t *next, char *buf, size_t size)
{
    while (*next < r->ntext && (r->text[*next].row < i || (r->text[*next].row == i && r->text[*next].j < j)))
        (*next)++;
    if (*next < r->ntext && r->text[*next].row == i && r->text[*next].j == j) return r->text[*next].s;
    float v = r->x[i * p->raw + at];
    if (isnan(v)) return NULL;
    snprintf(buf, size, "%.9g", (double)v);
    return buf;
}

/* From the training rows: which columns are categorical (csv_categorical = auto: those with a text
 * cell), their categories, and each number column's mean (for missing values). */
static bool resolve_features(const rows *r, const char *path, csv_plan *p, dpt_error *err)
{
    /* auto: a column of text (and missing cells) is categorical; one that mixes numbers and text is
     * refused at its first text cell (a stray cell in a number column must not turn it into categories) */
    for (int64_t k = 0; k < r->ntext && p->categorical == CATEGORICAL_AUTO; k++) {
        int64_t j = r->text[k].j, at = 0;
        if (p->kind[j] == FEATURE_CATEGORIES) continue;
        for (int64_t q = 0; q < j; q++)
            at += p->kind[q] != 0;
        for (int64_t i = 0; i < r->n; i++)
            if (!isnan(r->x[i * p->raw + at])) {
                char name[96];
                col_label(p, j, name, sizeof name);
                return dpt_errorf(
                    err,
                    "%s: line %lld, column %lld%s: " CELL_FMT " is not a number, and line %lld holds "
                    "one in this column\nHINT: a number column with a stray cell (fix it), or a column "
                    "of codes and names: list it in [data] csv_categorical to read every cell as a "
                    "category",
                    path, (long long)r->line[r->text[k].row], (long long)r->text[k].c, name,
                    CELL_ARG(r->text[k].s), (long long)r->line[i]);
            }
        p->kind[j] = FEATURE_CATEGORIES;
    }
    p->cats = calloc((size_t)p->cols, sizeof *p->cats);
    char **all = malloc((size_t)(r->n + 1) * sizeof *all);
    if (!p->cats || !all) dpt_fatal("out of host memory");
    p->features = 0;
    for (int64_t j = 0, at = 0; j < p->cols; j++) {
        if (!p->kind[j]) continue;
        if (p->kind[j] == FEATURE_NUMBER) {
            double sum = 0;
            int64_t n = 0;
            for (int64_t i = 0; i < r->n; i++)
                if (!isnan(r->x[i * p->raw + at])) sum += r->x[i * p->raw + at], n++;
            p->fill[j] = n ? sum / (double)n : 0;
            p->features++, at++;
            continue;
        }
        int64_t n = 0, next = 0;
        char buf[32];
        for (int64_t i = 0; i < r->n; i++) {
            const char *c = category_text(r, p, i, j, at, &next, buf, sizeof buf);
            if (c) all[n++] = dpt_strf("%s", c);
        }
        int64_t distinct = sort_distinct(all, n, true);
        /* names, tickets, free text (auto: nearly every value distinct), or past the cap: not categories */
        bool id_like = p->categorical != CATEGORICAL_LISTED && distinct > 20 && 2 * distinct > n;
        if (id_like || distinct > CSV_MAX_CATEGORIES) {
            char name[96];
            for (int64_t i = 0; i < distinct; i++)
                free(all[i]);
            free(all);
            if (id_like)
                return dpt_errorf(
                    err,
                    "%s: column %lld%s holds text with %lld distinct values in %lld rows: an id, a "
                    "name or free text rather than categories\nHINT: leave it out with [data] "
                    "csv_exclude (or list it in csv_categorical to one-hot it anyway)",
                    path, (long long)j, col_label(p, j, name, sizeof name), (long long)distinct,
                    (long long)n);
            return dpt_errorf(
                err,
                "%s: column %lld%s holds %lld distinct values, more than the %d categories a column "
                "may have\nHINT: an id or free text: leave it out with [data] csv_exclude",
                path, (long long)j, col_label(p, j, name, sizeof name), (long long)distinct,
                CSV_MAX_CATEGORIES);
        }
        p->ncat[j] = (int32_t)distinct;
        p->cats[j] = malloc((size_t)(distinct + 1) * sizeof *p->cats[j]);
        if (!p->cats[j]) dpt_fatal("out of host memory");
        memcpy(p->cats[j], all, (size_t)distinct * sizeof *all);
        p->features += distinct;
        at++;
    }
    free(all);
    p->resolved = true;
    if (!p->features)
        return dpt_errorf(
            err,
            "%s: the feature columns hold no values (every categorical cell missing)\nHINT: check "
            "[data] csv_exclude and the file",
            path);
    return true;
}

/* r's raw columns as x: a number (a missing one: its column's training mean), a categorical
 * column's one-hot values (a missing cell: all 0; a category the training rows lack: refused). */
static bool expand_rows(rows *r, const csv_plan *p, const int64_t *map, const char *path, dpt_error *err)
{
    bool any = false;
    for (int64_t j = 0; j < p->cols; j++)
        any |= p->kind[j] == FEATURE_CATEGORIES;
    if (!any) { /* numbers only: the missing ones filled in place */
        for (int64_t i = 0; i < r->n; i++)
            for (int64_t j = 0, at = 0; j < p->cols; j++)
                if (p->kind[j]) {
                    float *x = &r->x[i * p->raw + at++];
                    if (isnan(*x)) *x = (float)p->fill[j];
                }
        return true;
    }
    int64_t values;
    if (__builtin_mul_overflow(r->n > 0 ? r->n : 1, p->features, &values) || values > CSV_MAX_BYTES / 4)
        return dpt_errorf(err,
                          "%s: %lld rows x %lld values after one-hot encoding: more than memory holds\nHINT: "
                          "leave out columns with many categories ([data] csv_exclude)",
                          path, (long long)r->n, (long long)p->features);
    float *x = calloc((size_t)values, sizeof *x);
    if (!x) dpt_fatal("out of host memory for %s's one-hot features", path);
    int64_t next = 0;
    char buf[32];
    for (int64_t i = 0; i < r->n; i++) {
        float *out = x + i * p->features;
        for (int64_t j = 0, at = 0; j < p->cols; j++) {
            if (!p->kind[j]) continue;
            if (p->kind[j] == FEATURE_NUMBER) {
                float v = r->x[i * p->raw + at++];
                *out++ = isnan(v) ? (float)p->fill[j] : v;
                continue;
            }
            const char *c = category_text(r, p, i, j, at++, &next, buf, sizeof buf);
            if (c) {
                char *const *hit = bsearch(&c, p->cats[j], (size_t)p->ncat[j], sizeof *p->cats[j], cmp_class);
                if (!hit && !p->ignore_unknown) {
                    char name[96];
                    col_label(p, j, name, sizeof name);
                    int64_t col = next < r->ntext && r->text[next].row == i && r->text[next].j == j
                                      ? r->text[next].c
                                  : map ? map[j]
                                        : j;
                    dpt_errorf(
                        err,
                        "%s: line %lld, column %lld%s: " CELL_FMT " is not one of the %d categories of "
                        "the training rows\nHINT: a category the model never saw has no input of its own; "
                        "map it to a known one, drop the row, or set [data] csv_unknown_category = ignore "
                        "(all of its column's one-hot values 0)",
                        path, (long long)r->line[i], (long long)col, name, CELL_ARG(c), p->ncat[j]);
                    free(x);
                    return false;
                }
                if (hit) out[hit - p->cats[j]] = 1; /* an unknown one, ignored: all 0 */
            }
            out += p->ncat[j];
        }
    }
    free(r->x);
    r->x = x;
    return true;
}

static int cmp_class(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    double u, v;
    bool nu = cell_number(x, &u), nv = cell_number(y, &v);
    if (nu && nv && u != v) return u < v ? -1 : 1;
    if (nu != nv) return nu ? -1 : 1;
    return strcmp(x, y);
}

/* A label cell that is a class index: a non-negative integer below 2^24. */
static bool class_index(const char *s, int32_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < 0 || v >= (1 << 24)) return false;
    *out = (int32_t)v;
    return true;
}

/* The training file's labels: non-negative integers as they are, or else each distinct cell a
 * class, numbered in sorted order (the plan keeps the names). Every row of the file counts (a
 * rare class may fall in the held-out rows alone). */
static bool plan_classes(const dpt_config *cfg, const rows *r, const char *path, csv_plan *p, dpt_error *err)
{
    bool integers = true;
    int32_t v;
    for (int64_t i = 0; i < r->n && integers; i++)
        integers = class_index(r->label[i], &v);
    if (integers) return true;
    char **all = malloc((size_t)(r->n + 1) * sizeof *all);
    if (!all) dpt_fatal("out of host memory");
    memcpy(all, r->label, (size_t)r->n * sizeof *all);
    int64_t distinct = sort_distinct(all, r->n, false);
    int64_t stated = dpt_config_int(cfg, "data", "classes");
    if (distinct > (1 << 20)) {
        free(all);
        return dpt_errorf(
            err,
            "%s: the target column holds %lld distinct labels: not a classification\nHINT: a real-"
            "valued target is [data] csv_task = regression",
            path, (long long)distinct);
    }
    if (stated && stated != distinct) {
        free(all);
        return dpt_errorf(err,
                          "%s: [data] classes = %lld, and the target column of %s names %lld classes\nHINT: "
                          "leave [data] classes at 0 to take the names the file holds",
                          dpt_config_where(cfg, "data", "classes"), (long long)stated, path,
                          (long long)distinct);
    }
    p->nclasses = (int)distinct;
    p->classes = malloc((size_t)distinct * sizeof *p->classes);
    if (!p->classes) dpt_fatal("out of host memory");
    for (int64_t c = 0; c < distinct; c++)
        p->classes[c] = dpt_strf("%s", all[c]);
    free(all);
    return true;
}

/* Each row's class (no label cell: 0); NULL with err. */
static int32_t *row_labels(const csv_plan *p, const rows *r, const char *path, dpt_error *err)
{
    int32_t *out = malloc((size_t)(r->n + 1) * sizeof *out);
    if (!out) dpt_fatal("out of host memory");
    for (int64_t i = 0; i < r->n; i++) {
        const char *s = r->label[i];
        if (!s) {
            out[i] = 0;
        } else if (p->nclasses) {
            char *const *hit = bsearch(&s, p->classes, (size_t)p->nclasses, sizeof *p->classes, cmp_class);
            if (!hit) {
                dpt_errorf(err,
                           "%s: line %lld: label " CELL_FMT " is not one of the %d classes of the training "
                           "rows\nHINT: every test label must occur among the training labels",
                           path, (long long)r->line[i], CELL_ARG(s), p->nclasses);
                free(out);
                return NULL;
            }
            out[i] = (int32_t)(hit - p->classes);
        } else if (!class_index(s, &out[i])) {
            dpt_errorf(err,
                       "%s: line %lld: label " CELL_FMT
                       " is not a class index (a non-negative integer)\nHINT: "
                       "the training file's labels are integers, so these must be too",
                       path, (long long)r->line[i], CELL_ARG(s));
            free(out);
            return NULL;
        }
    }
    return out;
}

/* A set of n rows (its sizes are its plan's, copied in by make_dataset). */
static csv_set *new_set(int64_t n)
{
    csv_set *s = calloc(1, sizeof *s);
    if (!s) dpt_fatal("out of host memory");
    s->n = n;
    return s;
}

/* The rows of r that held[] marks, copied into a set of their own. */
static csv_set *set_copy(const csv_plan *p, const rows *r, const int32_t *labels, const bool *held)
{
    int64_t n = 0;
    for (int64_t i = 0; i < r->n; i++)
        n += held[i];
    csv_set *s = new_set(n);
    s->x = malloc((size_t)(n * p->features + 1) * sizeof *s->x);
    s->line = malloc((size_t)(n + 1) * sizeof *s->line);
    if (labels)
        s->labels = malloc((size_t)(n + 1) * sizeof *s->labels);
    else
        s->y = malloc((size_t)(n * p->ntargets + 1) * sizeof *s->y);
    if (!s->x || !s->line || (!s->labels && !s->y)) dpt_fatal("out of host memory");
    for (int64_t i = 0, at = 0; i < r->n; i++) {
        if (!held[i]) continue;
        memcpy(s->x + at * p->features, r->x + i * p->features, (size_t)p->features * sizeof *s->x);
        if (labels)
            s->labels[at] = labels[i];
        else
            memcpy(s->y + at * p->ntargets, r->y + i * p->ntargets, (size_t)p->ntargets * sizeof *s->y);
        s->line[at++] = r->line[i];
    }
    return s;
}

/* The rows of r that held[] does not mark (all: NULL) as a set made of r's own memory, compacted
 * in place (r and labels are given up to it). */
static csv_set *set_steal(const csv_plan *p, rows *r, int32_t *labels, const bool *held)
{
    int64_t at = 0;
    for (int64_t i = 0; i < r->n; i++) {
        if (held && held[i]) continue;
        if (at != i) {
            memmove(r->x + at * p->features, r->x + i * p->features, (size_t)p->features * sizeof *r->x);
            if (labels)
                labels[at] = labels[i];
            else
                memmove(r->y + at * p->ntargets, r->y + i * p->ntargets, (size_t)p->ntargets * sizeof *r->y);
            r->line[at] = r->line[i];
        }
        at++;
    }
    csv_set *s = new_set(at);
    if (!r->x) { /* no rows read (cannot happen past table_open, which needs one) */
        r->x = malloc(sizeof *r->x), r->line = malloc(sizeof *r->line);
        if (!r->x || !r->line) dpt_fatal("out of host memory");
    }
    s->x = r->x, s->line = r->line, s->labels = labels, s->y = labels ? NULL : r->y;
    if (labels) free(r->y);
    free(r->label), free(r->text);
    memset(r, 0, sizeof *r);
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
    for (int64_t j = 0, at = 0; j < p->cols; j++) { /* one-hot values stay 0 and 1 */
        if (p->kind[j] == FEATURE_NUMBER) at++;
        for (int32_t c = 0; p->kind[j] == FEATURE_CATEGORIES && c < p->ncat[j]; c++, at++)
            p->mean[at] = 0, p->scale[at] = 1;
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
                return dpt_errorf(
                    err,
                    "%s: line %lld: feature %lld, %g, is %g standard deviations of the training "
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
                return dpt_errorf(err,
                                  "%s: row %lld has label %d, and %s says [data] classes = %lld (labels 0 to "
                                  "%lld)\nHINT: fix the labels, or raise [data] classes",
                                  paths[s], (long long)i, l, dpt_config_where(cfg, "data", "classes"),
                                  (long long)stated, (long long)stated - 1);
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
        return dpt_errorf(
            err,
            "%s: the labels run to %d, and class %d never occurs in %s\nHINT: labels "
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
    if (p->shape[0]) /* csv_shape: each row an image (Kaggle's MNIST tables) */
        ds->fields[0] = (dpt_field){
            .name = "x", .dtype = DPT_F32, .ndim = 3, .shape = {p->shape[0], p->shape[1], p->shape[2]}};
    if (p->classify) {
        ds->fields[1] = (dpt_field){.name = "label", .dtype = DPT_I32, .ndim = 0, .target = true};
        ds->num_classes = classes;
        ds->task = (dpt_task){.loss = "cross_entropy", .metrics = DPT_METRIC_ACCURACY, .unit = "samples"};
    } else {
        ds->fields[1] =
            (dpt_field){.name = "y", .dtype = DPT_F32, .ndim = 1, .shape = {p->ntargets}, .target = true};
        ds->task =
            p->multilabel
                ? (dpt_task){.loss = "bce_with_logits", .metrics = DPT_METRIC_ACCURACY, .unit = "samples"}
                : (dpt_task){.loss = "mse", .unit = "samples"};
    }
    plan_copy(&s->plan, p);
    if (p->nclasses) ds->class_names = (const char *const *)s->plan.classes;
    if (!p->classify && s->plan.names) { /* --predict's columns and the header's labels */
        s->target_names = calloc((size_t)p->ntargets, sizeof *s->target_names);
        if (!s->target_names) dpt_fatal("out of host memory");
        for (int k = 0; k < p->ntargets; k++)
            s->target_names[k] = s->plan.names[p->target[k]];
        ds->target_names = s->target_names;
    }
    if (p->multilabel) { /* each label's positive rows, as a classifier's class counts */
        s->counts = calloc((size_t)p->ntargets, sizeof *s->counts);
        if (!s->counts) dpt_fatal("out of host memory");
        for (int64_t i = 0; i < s->n; i++)
            for (int k = 0; k < p->ntargets; k++)
                s->counts[k] += s->y[i * p->ntargets + k] > 0.5f;
        ds->label_positives = s->counts;
    }
    if (p->classify && classes > 0) { /* the header shows them: an imbalance is seen before step 1 */
        s->counts = calloc((size_t)classes, sizeof *s->counts);
        if (!s->counts) dpt_fatal("out of host memory");
        for (int64_t i = 0; i < s->n; i++)
            if (s->labels[i] >= 0 && s->labels[i] < classes) s->counts[s->labels[i]]++;
        ds->class_counts = s->counts;
    }
    ds->content_hash = hash;
    ds->get = csv_get;
    ds->source = s;
    ds->free_source = csv_set_free;
    return ds;
}

/* The test file's columns must be the training file's. */
static bool same_columns(const csv_plan *p, const table *t, const char *train_path, dpt_error *err)
{
    if (t->cols != p->cols)
        return dpt_errorf(
            err,
            "%s has %lld columns, and the training file %s has %lld\nHINT: the test rows need the "
            "training rows' columns, in the same order",
            t->path, (long long)t->cols, train_path, (long long)p->cols);
    for (int64_t j = 0; p->names && t->names && j < p->cols; j++)
        if (strcmp(p->names[j], t->names[j]))
            return dpt_errorf(err,
                              "%s: column %lld is named " CELL_FMT ", and in the training file %s " CELL_FMT
                              "\nHINT: the test rows need the training rows' columns, in the same order",
                              t->path, (long long)j, CELL_ARG(t->names[j]), train_path,
                              CELL_ARG(p->names[j]));
    return true;
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

/* Without csv_test: the first round(fraction x n) rows of a seeded shuffle are held out; NULL
 * with err when either set would be empty. */
static bool *held_out(const dpt_config *cfg, int64_t n, const char *path, dpt_error *err)
{
    double fraction = dpt_config_float(cfg, "data", "csv_test_fraction");
    int64_t k = (int64_t)llround(fraction * (double)n);
    if (k < 1 || k >= n) {
        dpt_errorf(
            err,
            "%s: [data] csv_test_fraction = %g of %s's %lld rows holds out %lld: the train and test sets "
            "need one row each at least\nHINT: give the test rows their own file with [data] csv_test",
            dpt_config_where(cfg, "data", "csv_test_fraction"), fraction, path, (long long)n, (long long)k);
        return NULL;
    }
    int64_t *perm = malloc((size_t)n * sizeof *perm);
    bool *held = calloc((size_t)n, sizeof *held);
    if (!perm || !held) dpt_fatal("out of host memory");
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    dpt_rng rng;
    dpt_rng_seed(&rng, (uint64_t)dpt_config_int(cfg, "train", "seed") ^ 0xc5c5c5c5c5c5c5c5ULL);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)dpt_rng_below(&rng, (uint64_t)i + 1), tmp = perm[i];
        perm[i] = perm[j], perm[j] = tmp;
    }
    for (int64_t i = 0; i < k; i++)
        held[perm[i]] = true;
    free(perm);
    return held;
}

/* [data] csv_shape: 0 (x a vector), or C,H,W whose product is the features' count. */
static bool plan_shape(const dpt_config *cfg, const char *path, csv_plan *p, dpt_error *err)
{
    int64_t v[4];
    int n = dpt_config_int_list(cfg, "data", "csv_shape", v, 4);
    if (n == 1 && v[0] == 0) return true;
    const char *where = dpt_config_where(cfg, "data", "csv_shape");
    if (n != 3 || !v[0] || !v[1] || !v[2])
        return dpt_errorf(
            err,
            "%s: [data] csv_shape takes 0 (each row a vector) or three sizes, channels, height and "
            "width\nHINT: e.g. csv_shape = 1,28,28 for MNIST's 784 pixel columns",
            where);
    if (v[0] * v[1] * v[2] != p->features)
        return dpt_errorf(
            err,
            "%s: [data] csv_shape = %lld,%lld,%lld holds %lld values, and the rows of %s have %lld "
            "features\nHINT: the features are every column but the targets and csv_exclude's (a "
            "categorical one counts a value per category)",
            where, (long long)v[0], (long long)v[1], (long long)v[2], (long long)(v[0] * v[1] * v[2]), path,
            (long long)p->features);
    memcpy(p->shape, v, sizeof p->shape);
    return true;
}

static bool csv_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    /* paths as given (from the working folder unless absolute), as [data] train of tokens */
    const char *train_path = dpt_config_str(cfg, "data", "csv_train"),
               *test_path = dpt_config_str(cfg, "data", "csv_test");
    if (!*train_path)
        return dpt_errorf(
            err, "%s: [data] source = csv needs [data] csv_train, the CSV file of training rows\n" CSV_HINT,
            dpt_config_where(cfg, "data", "csv_train"));
    bool one_file = !*test_path;
    table t = {0};
    csv_plan plan = {0};
    rows tr_rows = {0}, te_rows = {0};
    csv_set *tr = NULL, *te = NULL;
    int32_t *tr_labels = NULL, *te_labels = NULL;
    bool *held = NULL, ok = false;
    int classes = 0;
    uint64_t train_hash, test_hash;
    char delim = delimiter_of(cfg);
    if (!table_open(train_path, &delim, header_of(cfg), &t, err) ||
        !plan_columns(cfg, &t, train_path, &plan, err) || !read_rows(&t, &plan, NULL, &tr_rows, err))
        goto done;
    plan.delim = delim;
    if (!resolve_features(&tr_rows, train_path, &plan, err) ||
        !expand_rows(&tr_rows, &plan, NULL, train_path, err) || !plan_shape(cfg, train_path, &plan, err))
        goto done;
    if (plan.classify && (!plan_classes(cfg, &tr_rows, train_path, &plan, err) ||
                          !(tr_labels = row_labels(&plan, &tr_rows, train_path, err))))
        goto done;
    train_hash = test_hash = t.hash;
    table_free(&t); /* the labels are numbers now: the text goes before the next file comes */
    if (one_file) {
        if (!(held = held_out(cfg, tr_rows.n, train_path, err))) goto done;
        te = set_copy(&plan, &tr_rows, tr_labels, held);
    } else {
        if (!table_open(test_path, &delim, plan.names ? 1 : 2, &t, err) ||
            !same_columns(&plan, &t, train_path, err) || !read_rows(&t, &plan, NULL, &te_rows, err) ||
            !expand_rows(&te_rows, &plan, NULL, test_path, err) ||
            (plan.classify && !(te_labels = row_labels(&plan, &te_rows, test_path, err))))
            goto done;
        test_hash = t.hash;
        table_free(&t);
        te = set_steal(&plan, &te_rows, te_labels, NULL);
        te_labels = NULL;
    }
    tr = set_steal(&plan, &tr_rows, tr_labels, held);
    tr_labels = NULL;
    if (plan.classify && !plan.nclasses &&
        !check_labels(cfg, tr, te, one_file, train_path, one_file ? train_path : test_path, &classes, err))
        goto done;
    if (plan.nclasses) classes = plan.nclasses;
    plan_scaling(tr, &plan);
    if (!apply_scaling(&plan, tr, train_path, err) ||
        !apply_scaling(&plan, te, one_file ? train_path : test_path, err))
        goto done;
    char name[64], onehot[40] = "";
    int ncategorical = 0;
    for (int64_t j = 0; j < plan.cols; j++)
        ncategorical += plan.kind[j] == FEATURE_CATEGORIES;
    if (ncategorical)
        snprintf(onehot, sizeof onehot, ", %d one-hot column%s", ncategorical, ncategorical > 1 ? "s" : "");
    snprintf(name, sizeof name, "csv train (%lld rows%s)", (long long)tr->n, onehot);
    *train = make_dataset(&plan, tr, name, train_hash, classes);
    tr = NULL;
    snprintf(name, sizeof name, "csv test (%lld rows)", (long long)te->n);
    *test = make_dataset(&plan, te, name, test_hash, classes);
    te = NULL;
    dpt_input_note(train_path, "the data file", false);
    if (!one_file) dpt_input_note(test_path, "the data file", false);
    ok = true;
done:
    csv_set_free(tr), csv_set_free(te);
    rows_free(&tr_rows), rows_free(&te_rows);
    free(tr_labels), free(te_labels), free(held);
    plan_free(&plan);
    table_free(&t);
    return ok;
}

/* ---------------------------------------------------------------- --predict --input */

bool dpt_csv_open_input(const char *path, const dpt_dataset *like, dpt_dataset **out, dpt_error *err)
{
    *out = NULL;
    const csv_plan *p = &((const csv_set *)like->source)->plan;
    table t;
    char delim = p->delim;
    if (!table_open(path, &delim, p->names ? 1 : 2, &t, err)) return dpt_error_prefix(err, "--input: ");
    /* the training file's columns, or all of them but the targets, in the same order */
    int64_t *map = malloc((size_t)p->cols * sizeof *map);
    if (!map) dpt_fatal("out of host memory");
    bool full = t.cols == p->cols, ok = true;
    if (!full && t.cols != p->cols - p->ntargets)
        ok = dpt_errorf(
            err,
            "--input %s: %lld columns; the model's training file had %lld, %d of them target%s\nHINT: "
            "--input takes the training file's columns, with or without the targets, in the same order",
            path, (long long)t.cols, (long long)p->cols, p->ntargets, p->ntargets == 1 ? "" : "s");
    for (int64_t j = 0, c = 0; ok && j < p->cols; j++) {
        bool target = false;
        for (int k = 0; k < p->ntargets; k++)
            target |= p->target[k] == j;
        map[j] = full ? j : target ? -1 : c++;
        if (map[j] >= 0 && p->names && t.names && strcmp(p->names[j], t.names[map[j]]))
            ok = dpt_errorf(err,
                            "--input %s: column %lld is named " CELL_FMT
                            ", where the training file had " CELL_FMT
                            "\nHINT: --input takes the training file's columns, with or without the targets, "
                            "in the same order",
                            path, (long long)map[j], CELL_ARG(t.names[map[j]]), CELL_ARG(p->names[j]));
    }
    if (full) /* the targets are there: left out (unlabelled rows) */
        for (int k = 0; k < p->ntargets; k++)
            map[p->target[k]] = -1;
    rows r = {0};
    int32_t *labels = NULL;
    ok = ok && read_rows(&t, p, map, &r, err) && expand_rows(&r, p, map, path, err) &&
         (!p->classify || (labels = row_labels(p, &r, path, err)));
    free(map);
    table_free(&t);
    if (!ok) {
        rows_free(&r);
        return false;
    }
    csv_set *s = set_steal(p, &r, labels, NULL);
    if (!apply_scaling(p, s, path, err)) {
        csv_set_free(s);
        return false;
    }
    char name[64];
    snprintf(name, sizeof name, "csv (%lld rows)", (long long)s->n);
    dpt_dataset *ds = make_dataset(p, s, name, 0, like->num_classes);
    ds->unlabelled = true, ds->class_counts = NULL, ds->label_positives = NULL; /* no labels to count */
    *out = ds;
    dpt_input_note(path, "the --input file", false);
    return true;
}

static const dpt_data_impl csv_impl = {.open = csv_open};

static const dpt_config_key csv_keys[] = {
    {NULL, "csv_train", DPT_KEY_STRING, "", 0, 0, NULL,
     "CSV file of the training rows (a path from the working folder, or absolute; .gz read through zlib): "
     "one row a "
     "sample, one column a feature or a target",
     0},
    {NULL, "csv_test", DPT_KEY_STRING, "", 0, 0, NULL,
     "CSV file of the test rows, with the training file's columns (empty: csv_test_fraction of the training "
     "rows "
     "are held out)",
     0},
    {NULL, "csv_test_fraction", DPT_KEY_FLOAT, "0.2", 0, 0.9, NULL,
     "without csv_test, the fraction of the training file's rows held out as the test set (chosen by [train] "
     "seed, the same on every rank and every resume)",
     0},
    {NULL, "csv_target", DPT_KEY_STRING, "-1", 0, 0, NULL,
     "the target column(s): header names or indices from 0 (-1: the last), comma-separated; a classifier has "
     "one",
     0},
    {NULL, "csv_exclude", DPT_KEY_STRING, "", 0, 0, NULL,
     "columns that are neither features nor targets (ids, dates): names or indices, comma-separated", 0},
    {NULL, "csv_task", DPT_KEY_ENUM, "classification", 1, 0, "classification|regression|multilabel",
     "classification: the target holds labels (integers from 0, or names numbered in sorted order), "
     "cross-entropy and accuracy; regression: real values, mse; multilabel: target columns of 0 or 1 "
     "(true/false), a label each, bce_with_logits and the fraction of labels right",
     0},
    {NULL, "csv_header", DPT_KEY_ENUM, "auto", 1, 0, "auto|yes|no",
     "whether the first row holds column names (auto: when a column's first cell is not a number and its "
     "second is)",
     0},
    {NULL, "csv_delimiter", DPT_KEY_ENUM, "auto", 1, 0, "auto|comma|semicolon|tab",
     "what separates cells (auto: the most frequent of the three in the first row)", 0},
    {NULL, "csv_categorical", DPT_KEY_STRING, "auto", 0, 0, NULL,
     "feature columns read as categories, each one-hot encoded over the training rows' values "
     "(pandas.get_dummies): "
     "auto = those holding a cell that is neither a number nor missing; none; or a list of names or indices "
     "(a "
     "column of codes such as 1, 2, 3 too)",
     0},
    {NULL, "csv_missing", DPT_KEY_ENUM, "stop", 1, 0, "stop|mean",
     "a missing feature cell (empty, NA, NaN, ?, NULL, None): stop, naming it; or mean: the training rows' "
     "mean of "
     "its column (scikit-learn's SimpleImputer), and in a categorical column none of its categories",
     0},
    {NULL, "csv_shape", DPT_KEY_INT_LIST, "0", 0, 1 << 20, NULL,
     "0: each row's features are a vector (x); C,H,W: an image of that shape, so the image models (cnn, "
     "resnet) take "
     "it, e.g. 1,28,28 for the 784 pixel columns of Kaggle's MNIST tables",
     0},
    {NULL, "csv_unknown_category", DPT_KEY_ENUM, "stop", 1, 0, "stop|ignore",
     "a category in the test rows or --input that the training rows lack: stop, naming it; or ignore: all of "
     "its "
     "column's one-hot values 0 (scikit-learn's OneHotEncoder handle_unknown)",
     0},
    {NULL, "csv_standardize", DPT_KEY_BOOL, "true", 1, 0, NULL,
     "scale each number feature to mean 0 and standard deviation 1 over the training rows (scikit-learn's "
     "StandardScaler; the test rows and --input with the same numbers; one-hot values stay 0 and 1); false: "
     "as read",
     0},
};
DPT_BUILTIN(data_csv) = {DPT_KIND_DATA,
                         "csv",
                         "a CSV table of numbers: one row a sample, feature and target columns",
                         csv_keys,
                         DPT_COUNT(csv_keys),
                         &csv_impl};
