/* config.c: the INI parser. It knows no key of its own: the schema is what the registrations
 * declared (runtime/registry.c), and the same table validates files, answers the typed getters,
 * fills defaults, hashes a config and prints docs/config.md. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpt.h"
#include "error.h"
#include "rng.h"
#include "schema.h"

struct dpt_config {
    int nkeys; /* the schema's size when it was made (the schema is frozen by then) */
    dpt_value *values;
};

static const dpt_config_key *decl(int k)
{
    return &dpt_schema_at(k)->decl;
}

/* ---------------------------------------------------------------- schema look-up */

static int find_key(const char *section, const char *key)
{
    return dpt_schema_find(section, key);
}

static bool section_exists(const char *section)
{
    for (int k = 0; k < dpt_schema_count(); k++)
        if (strcmp(decl(k)->section, section) == 0) return true;
    return false;
}

/* The nearest known section (key == NULL) or key of a section, or NULL if none is close. */
static const char *nearest(const char *section, const char *name)
{
    const char *best = NULL;
    int best_d = 4;
    for (int k = 0; k < dpt_schema_count(); k++) {
        const char *cand = section ? decl(k)->key : decl(k)->section;
        if (section && strcmp(decl(k)->section, section) != 0) continue;
        /* lengths further apart than the best distance so far cannot beat it */
        int gap = (int)strlen(name) - (int)strlen(cand);
        if (gap >= best_d || -gap >= best_d) continue;
        int d = dpt_edit_distance(name, cand);
        if (d < best_d) best_d = d, best = cand;
    }
    return best;
}

static void list_keys(const char *section, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; k < dpt_schema_count() && used < size; k++) {
        if (section && strcmp(decl(k)->section, section) != 0) continue;
        const char *name = section ? decl(k)->key : decl(k)->section;
        if (!section) { /* each section once */
            bool seen = false;
            for (int j = 0; j < k && !seen; j++)
                seen = !strcmp(decl(j)->section, name);
            if (seen) continue;
        }
        used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", name);
    }
}

static bool unknown_name(dpt_error *err, const char *where, const char *section, const char *key)
{
    char known[512];
    const char *near;
    if (!section_exists(section)) {
        near = nearest(NULL, section);
        list_keys(NULL, known, sizeof known);
        return dpt_errorf(err, "%s: unknown section [%s]%s%s%s\nHINT: sections are %s", where, section,
                          near ? "; did you mean [" : "", near ? near : "", near ? "]?" : "", known);
    }
    near = nearest(section, key);
    list_keys(section, known, sizeof known);
    return dpt_errorf(err, "%s: unknown key '%s' in [%s]%s%s%s\nHINT: keys of [%s] are %s", where, key,
                      section, near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", section,
                      known);
}

/* ---------------------------------------------------------------- values */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

/* The names registered for a kind, "a, b, c" (or with another separator). */
static void list_registered(dpt_kind kind, const char *sep, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < dpt_registry_count(kind) && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? sep : "", dpt_registry_at(kind, i)->name);
}

static bool set_value(dpt_error *err, const char *where, int k, const char *raw, dpt_value *v)
{
    const dpt_schema_key *sk = dpt_schema_at(k);
    if (sk->choice_kind >= 0 && !dpt_registry_find((dpt_kind)sk->choice_kind, raw)) {
        char known[512];
        list_registered((dpt_kind)sk->choice_kind, ", ", known, sizeof known);
        return dpt_errorf(err, "%s: [%s] %s = %s: not a registered %s\nHINT: known %ss are %s", where,
                          sk->decl.section, sk->decl.key, raw, dpt_kind_name((dpt_kind)sk->choice_kind),
                          dpt_kind_name((dpt_kind)sk->choice_kind), known);
    }
    return dpt_value_parse(&sk->decl, raw, where, v, err);
}

/* ---------------------------------------------------------------- parsing */

dpt_config *dpt_config_defaults(void)
{
    dpt_registry_freeze(); /* registrations end here: every config has every key */
    int nkeys = dpt_schema_count();
    dpt_config *cfg = calloc(1, sizeof *cfg);
    if (cfg) cfg->values = calloc((size_t)nkeys, sizeof *cfg->values);
    if (!cfg || !cfg->values) dpt_fatal("out of host memory for a config");
    cfg->nkeys = nkeys;
    for (int k = 0; k < nkeys; k++) {
        dpt_error err;
        if (!set_value(&err, "default", k, decl(k)->def, &cfg->values[k]))
            dpt_fatal("bad default in the config schema: %s", err.msg);
    }
    return cfg;
}

void dpt_config_free(dpt_config *cfg)
{
    if (!cfg) return;
    for (int k = 0; k < cfg->nkeys; k++)
        dpt_value_free(&cfg->values[k]);
    free(cfg->values);
    free(cfg);
}

/* Cut a comment: '#' or ';' at the start, or after whitespace; not inside quotes. */
static void strip_comment(char *s)
{
    bool quoted = false;
    for (char *p = s; *p; p++) {
        if (*p == '"') quoted = !quoted;
        if (!quoted && (*p == '#' || *p == ';') && (p == s || isspace((unsigned char)p[-1]))) {
            *p = '\0';
            return;
        }
    }
}

static bool unquote(char **value)
{
    char *v = *value;
    size_t n = strlen(v);
    if (n == 0 || v[0] != '"') return true;
    if (n < 2 || v[n - 1] != '"') return false;
    v[n - 1] = '\0';
    *value = v + 1;
    return true;
}

static dpt_config *parse_stream(FILE *f, const char *path, dpt_error *err);

dpt_config *dpt_config_load(const char *path, dpt_error *err)
{
    /* O_NONBLOCK and the regular-file test: a FIFO or a device named as the config would
     * otherwise block the open or the read forever. */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            dpt_errorf(err,
                       "config file %s is not a regular file (a folder, FIFO or device)\nHINT: pass the path "
                       "of an INI file, e.g. configs/fmnist_mlp.ini",
                       path);
        else
            dpt_errorf(err,
                       "cannot open config file %s: %s\nHINT: pass the path of an INI file, e.g. "
                       "configs/fmnist_mlp.ini",
                       path, strerror(errno));
        if (fd >= 0) close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) dpt_fatal("fdopen of %s failed: %s", path, strerror(errno));
    dpt_config *cfg = parse_stream(f, path, err);
    fclose(f);
    if (cfg) dpt_input_note(path, "the config file", false); /* no report or metrics file may replace it */
    return cfg;
}

dpt_config *dpt_config_parse(const char *text, size_t len, const char *name, dpt_error *err)
{
    FILE *f = fmemopen((void *)text, len, "r");
    if (!f) dpt_fatal("fmemopen failed: %s", strerror(errno));
    dpt_config *cfg = parse_stream(f, name, err);
    fclose(f);
    return cfg;
}

static dpt_config *parse_stream(FILE *f, const char *path, dpt_error *err)
{
    dpt_config *cfg = dpt_config_defaults();
    int *set_line = calloc((size_t)cfg->nkeys, sizeof *set_line);
    if (!set_line) dpt_fatal("out of host memory in the config parser");
    char section[64] = "";
    char where[320];
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    int lineno = 0;
    bool ok = true;
    while (ok && (len = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        if (len > 65536) {
            ok = dpt_errorf(err, "%s: line longer than 65536 characters\nHINT: is this an INI file?", where);
            break;
        }
        const char *nul = memchr(line, '\0', (size_t)len);
        if (nul) {
            ok = dpt_errorf(err,
                            "%s: a NUL byte at column %d\nHINT: the file is binary or was saved in UTF-16; "
                            "save it as UTF-8 text",
                            where, (int)(nul - line) + 1);
            break;
        }
        /* A UTF-8 byte-order mark, as Windows editors write at the start of a file. */
        if (lineno == 1 && len >= 3 && !memcmp(line, "\xEF\xBB\xBF", 3))
            memmove(line, line + 3, (size_t)len - 2);
        strip_comment(line);
        char *s = trim(line);
        if (!*s) continue;
        if (*s == '[') {
            char *close = strchr(s, ']');
            if (!close || *trim(close + 1)) {
                ok = dpt_errorf(err, "%s: malformed section header '%s'\nHINT: write it as [name]", where, s);
                break;
            }
            *close = '\0';
            char *name = trim(s + 1);
            if (!section_exists(name)) {
                ok = unknown_name(err, where, name, NULL);
                break;
            }
            snprintf(section, sizeof section, "%s", name);
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq) {
            ok = dpt_errorf(err, "%s: expected 'key = value' or '[section]', got '%s'", where, s);
            break;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        if (!*key) {
            ok = dpt_errorf(err, "%s: missing key before '='", where);
            break;
        }
        if (!*section) {
            ok = dpt_errorf(err,
                            "%s: key '%s' before any [section]\nHINT: put it under its section, "
                            "e.g. [train]",
                            where, key);
            break;
        }
        int k = find_key(section, key);
        if (k < 0) {
            ok = unknown_name(err, where, section, key);
            break;
        }
        if (set_line[k]) {
            ok =
                dpt_errorf(err, "%s: [%s] %s set twice (first on line %d)", where, section, key, set_line[k]);
            break;
        }
        if (!unquote(&val)) {
            ok = dpt_errorf(err, "%s: [%s] %s: unterminated quote", where, section, key);
            break;
        }
        if (!set_value(err, where, k, val, &cfg->values[k])) {
            ok = false;
            break;
        }
        set_line[k] = lineno;
    }
    if (ok && ferror(f)) ok = dpt_errorf(err, "%s: read error: %s", path, strerror(errno));
    free(line);
    free(set_line);
    if (!ok) {
        dpt_config_free(cfg);
        return NULL;
    }
    return cfg;
}

bool dpt_config_set(dpt_config *cfg, const char *assignment, dpt_error *err)
{
    char where[320];
    snprintf(where, sizeof where, "--set %s", assignment);
    char *buf = strdup(assignment);
    if (!buf) dpt_fatal("out of host memory in the config parser");
    char *eq = strchr(buf, '='), *dot = strchr(buf, '.');
    bool ok;
    if (!eq || !dot || dot > eq) {
        ok = dpt_errorf(err, "%s: expected section.key=value\nHINT: e.g. --set train.batch=128", where);
    } else {
        *eq = '\0';
        *dot = '\0';
        char *section = trim(buf), *key = trim(dot + 1), *val = trim(eq + 1);
        int k = find_key(section, key);
        if (k < 0)
            ok = unknown_name(err, where, section, key);
        else if (!unquote(&val))
            ok = dpt_errorf(err, "%s: unterminated quote", where);
        else
            ok = set_value(err, where, k, val, &cfg->values[k]);
    }
    free(buf);
    return ok;
}

/* ---------------------------------------------------------------- getters */

static const dpt_value *get(const dpt_config *cfg, const char *section, const char *key, dpt_key_type want)
{
    int k = find_key(section, key);
    DPT_ASSERT(k >= 0, "config key [%s] %s is not in the schema (declare it in a registration's keys)", section,
               key);
    DPT_ASSERT(k < cfg->nkeys, "config key [%s] %s was registered after this config was made", section, key);
    dpt_key_type type = decl(k)->type;
    DPT_ASSERT(type == want ||
                   (want == DPT_KEY_STRING && (type == DPT_KEY_ENUM || type == DPT_KEY_COMPARISON)),
               "[%s] %s is a %s, read as a %s", section, key, dpt_key_type_name(type), dpt_key_type_name(want));
    return &cfg->values[k];
}

int64_t dpt_config_int(const dpt_config *cfg, const char *s, const char *k)
{
    return get(cfg, s, k, DPT_KEY_INT)->i;
}
double dpt_config_float(const dpt_config *cfg, const char *s, const char *k)
{
    return get(cfg, s, k, DPT_KEY_FLOAT)->f;
}
bool dpt_config_bool(const dpt_config *cfg, const char *s, const char *k)
{
    return get(cfg, s, k, DPT_KEY_BOOL)->b;
}
const char *dpt_config_str(const dpt_config *cfg, const char *s, const char *k)
{
    return get(cfg, s, k, DPT_KEY_STRING)->raw;
}

int dpt_config_enum(const dpt_config *cfg, const char *s, const char *k)
{
    const dpt_value *v = get(cfg, s, k, DPT_KEY_ENUM);
    DPT_ASSERT(v->choice >= 0, "[%s] %s names a registration: read it with dpt_config_choice", s, k);
    return v->choice;
}

const dpt_registration *dpt_config_choice(const dpt_config *cfg, const char *s, const char *k)
{
    const dpt_value *v = get(cfg, s, k, DPT_KEY_ENUM);
    int kind = dpt_schema_at(find_key(s, k))->choice_kind;
    DPT_ASSERT(kind >= 0, "[%s] %s is an enum of fixed choices: read it with dpt_config_enum", s, k);
    const dpt_registration *r = dpt_registry_find((dpt_kind)kind, v->raw);
    DPT_ASSERT(r, "[%s] %s = %s: checked when it was set", s, k, v->raw);
    return r;
}

int dpt_config_int_list(const dpt_config *cfg, const char *s, const char *k, int64_t *values, int max)
{
    const dpt_value *v = get(cfg, s, k, DPT_KEY_INT_LIST);
    for (int i = 0; i < v->nlist && i < max; i++)
        values[i] = v->list[i];
    return v->nlist;
}

int dpt_config_float_list(const dpt_config *cfg, const char *s, const char *k, double *values, int max)
{
    const dpt_value *v = get(cfg, s, k, DPT_KEY_FLOAT_LIST);
    for (int i = 0; i < v->nlist && i < max; i++)
        values[i] = v->flist[i];
    return v->nlist;
}

const char *dpt_config_where(const dpt_config *cfg, const char *section, const char *key)
{
    int k = find_key(section, key);
    DPT_ASSERT(k >= 0 && k < cfg->nkeys, "config key [%s] %s is not in this config's schema", section, key);
    return cfg->values[k].where;
}

/* The kinds whose one registration a config key selects, and that key. */
static const struct {
    dpt_kind kind;
    const char *section, *key, *noun;
} selectors[] = {
    {DPT_KIND_MODEL, "model", "name", "model"},
    {DPT_KIND_OPTIMIZER, "optim", "name", "optimizer"},
    {DPT_KIND_SCHEDULE, "optim", "schedule", "schedule"},
    {DPT_KIND_DATA, "data", "source", "data source"},
};
#define NSELECTORS (int)(sizeof selectors / sizeof selectors[0])

/* Whether nothing reads key k: every owner a registration of a kind judged here, none of them
 * the chosen one of its kind ([model] depth with name = mlp). The kinds judged: `kind` alone with
 * `chosen` its registration (a loss, which the model's task names), or with kind ==
 * DPT_KIND_COUNT the kinds a key selects, each its selected one (*sel: the first owner's
 * selector). A key with no owners (the runtime's), or with an owner of another kind (a user's
 * settings, a backend), is read. */
static bool unread_key(const dpt_config *cfg, int k, dpt_kind kind, const char *chosen, int *sel)
{
    const dpt_schema_key *sk = dpt_schema_at(k);
    if (!*sk->owners) return false;
    char owners[sizeof sk->owners];
    snprintf(owners, sizeof owners, "%s", sk->owners);
    *sel = -1;
    for (char *save = NULL, *o = strtok_r(owners, ", ", &save); o; o = strtok_r(NULL, ", ", &save)) {
        const char *pick = NULL; /* the chosen one of o's kind */
        if (kind < DPT_KIND_COUNT) {
            if (dpt_registry_find(kind, o)) pick = chosen;
        } else {
            for (int i = 0; i < NSELECTORS && !pick; i++)
                if (dpt_registry_find(selectors[i].kind, o)) {
                    pick = dpt_config_str(cfg, selectors[i].section, selectors[i].key);
                    if (*sel < 0) *sel = i;
                }
        }
        if (!pick || !strcmp(o, pick)) return false;
    }
    return true;
}

/* A key set for a model, optimizer, schedule or data source the config does not select would be
 * read by no one: refused, naming the key, where it was set, its owners and the selection. Not
 * for a file's key when --set chose another one of that kind (switching the model, optimizer or
 * source from the command line over a file written for another keeps working). */
bool dpt_config_check_owners(const dpt_config *cfg, dpt_error *err)
{
    for (int k = 0; k < cfg->nkeys; k++) {
        const char *where = cfg->values[k].where;
        int sel;
        if (!strcmp(where, "default") || !unread_key(cfg, k, DPT_KIND_COUNT, NULL, &sel)) continue;
        /* another optimizer's or source's key at its default changes nothing, and the printed
         * config (--dry-run's, a checkpoint's) holds every one of them: it must read back */
        if (selectors[sel].kind != DPT_KIND_MODEL && !strcmp(cfg->values[k].raw, decl(k)->def)) continue;
        const char *chosen = dpt_config_str(cfg, selectors[sel].section, selectors[sel].key);
        bool switched = !strncmp(dpt_config_where(cfg, selectors[sel].section, selectors[sel].key), "--set", 5);
        if (switched && strncmp(where, "--set", 5) != 0) continue;
        const dpt_schema_key *sk = dpt_schema_at(k);
        return dpt_errorf(err,
                          "%s: [%s] %s is a key of %s %s, not of %s, the %s this config selects ([%s] %s = %s): "
                          "nothing would read it\nHINT: remove it, or select %s",
                          where, sk->decl.section, sk->decl.key, selectors[sel].noun, sk->owners, chosen,
                          selectors[sel].noun, selectors[sel].section, selectors[sel].key, chosen, sk->owners);
    }
    return true;
}

/* Keys read only when another key has some value: set without it, nothing reads them. */
static const struct {
    const char *section, *key, *gov_section, *gov_key;
    enum { IS_STR, NOT_STR, INT_AT_LEAST, INT_IS, FLOAT_ABOVE } test;
    const char *str;
    double num;
    const char *needs; /* the HINT's words */
} dependents[] = {
    {"train", "loss_scale_init", "train", "loss_scale", IS_STR, "dynamic", 0, "loss_scale = dynamic"},
    {"train", "loss_scale_growth", "train", "loss_scale", IS_STR, "dynamic", 0, "loss_scale = dynamic"},
    {"train", "bf16_activations", "train", "precision", IS_STR, "bf16", 0, "precision = bf16"},
    {"train", "ema_warmup", "train", "ema_decay", FLOAT_ABOVE, NULL, 0, "ema_decay (above 0)"},
    {"distributed", "zero_overlap", "distributed", "zero", INT_AT_LEAST, NULL, 1, "zero = 1 or 2"},
    {"distributed", "zero_grads", "distributed", "zero", INT_IS, NULL, 2, "zero = 2"},
    {"distributed", "fault_rank", "distributed", "fault", NOT_STR, "none", 0, "fault (exit, hang or nan)"},
    {"distributed", "fault_step", "distributed", "fault", NOT_STR, "none", 0, "fault (exit, hang or nan)"},
};

/* Whether dependents[i]'s governing setting is on (the key is read). */
static bool governor_on(const dpt_config *cfg, size_t i)
{
    const char *gs = dependents[i].gov_section, *gk = dependents[i].gov_key;
    switch (dependents[i].test) {
    case IS_STR: return !strcmp(dpt_config_str(cfg, gs, gk), dependents[i].str);
    case NOT_STR: return strcmp(dpt_config_str(cfg, gs, gk), dependents[i].str) != 0;
    case INT_AT_LEAST: return (double)dpt_config_int(cfg, gs, gk) >= dependents[i].num;
    case INT_IS: return (double)dpt_config_int(cfg, gs, gk) == dependents[i].num;
    default: return dpt_config_float(cfg, gs, gk) > dependents[i].num;
    }
}

/* Whether this run reads key k at all: not a key of a model, optimizer, schedule or data source
 * the config does not select, nor, away from its default, a key read only with a setting the
 * config lacks. The checks above refuse such a key where it was set, except a file's key when
 * --set switched the selection or the setting over it; then the run is the one --set asked for,
 * and the key is left out of the printed config (--dry-run's, a checkpoint's), which must read
 * back as a file, and out of the hash, which must be the printed config's. */
static bool read_by_no_one(const dpt_config *cfg, int k)
{
    int sel;
    if (unread_key(cfg, k, DPT_KIND_COUNT, NULL, &sel)) return true;
    if (!strcmp(cfg->values[k].raw, decl(k)->def)) return false; /* a dependent at its default: printed */
    for (size_t i = 0; i < sizeof dependents / sizeof dependents[0]; i++)
        if (!strcmp(dependents[i].section, decl(k)->section) && !strcmp(dependents[i].key, decl(k)->key))
            return dpt_schema_find(dependents[i].gov_section, dependents[i].gov_key) >= 0 && !governor_on(cfg, i);
    return false;
}

bool dpt_config_check_dependents(const dpt_config *cfg, dpt_error *err)
{
    for (size_t i = 0; i < sizeof dependents / sizeof dependents[0]; i++) {
        const char *sec = dependents[i].section, *key = dependents[i].key;
        const char *gs = dependents[i].gov_section, *gk = dependents[i].gov_key, *where = dpt_config_where(cfg, sec, key);
        int self = dpt_schema_find(sec, key);
        if (!strcmp(where, "default") || self < 0 || !strcmp(cfg->values[self].raw, decl(self)->def))
            continue; /* at its default it changes nothing (and a printed config holds it) */
        /* a file's key under a value --set chose (a GPU config's loss scaling run with --set
         * train.loss_scale=none) stays allowed, as for another optimizer's keys */
        if (!strncmp(dpt_config_where(cfg, gs, gk), "--set", 5) && strncmp(where, "--set", 5) != 0) continue;
        if (governor_on(cfg, i)) continue;
        char value[96];
        int at = dpt_schema_find(gs, gk);
        snprintf(value, sizeof value, "%s", at >= 0 ? cfg->values[at].raw : "?");
        return dpt_errorf(err,
                          "%s: [%s] %s is read only with [%s] %s, and this config has %s = %s: nothing would read "
                          "it\nHINT: remove it, or set [%s] %s",
                          where, sec, key, gs, dependents[i].needs, gk, value, gs, dependents[i].needs);
    }
    return true;
}

bool dpt_config_check_kind_owners(const dpt_config *cfg, dpt_kind kind, const char *chosen, const char *noun,
                                  const char *why, dpt_error *err)
{
    for (int k = 0; k < cfg->nkeys; k++) {
        const char *where = cfg->values[k].where;
        const dpt_schema_key *sk = dpt_schema_at(k);
        int sel;
        if (!strcmp(where, "default") || !strcmp(cfg->values[k].raw, decl(k)->def)) continue;
        if (unread_key(cfg, k, kind, chosen, &sel))
            return dpt_errorf(err,
                              "%s: [%s] %s is a key of %s %s, not of %s, the %s %s: nothing would read it\nHINT: "
                              "remove it",
                              where, sk->decl.section, sk->decl.key, noun, sk->owners, chosen, noun, why);
    }
    return true;
}

/* ---------------------------------------------------------------- printing and hashing */

/* Whether a value must be quoted to read back the same: surrounding whitespace, or a '#' or
 * ';' where the parser would take it for a comment. */
static bool needs_quotes(const char *v)
{
    size_t n = strlen(v);
    if (n && (isspace((unsigned char)v[0]) || isspace((unsigned char)v[n - 1]))) return true;
    for (size_t i = 0; i < n; i++)
        if ((v[i] == '#' || v[i] == ';') && (i == 0 || isspace((unsigned char)v[i - 1]))) return true;
    return false;
}

/* Sections print in the order a run reads them, the ones a program adds after, in the order
 * first declared; all of a section's keys together, in declaration order. */
static const char *const section_order[] = {"model", "data", "train", "optim", "distributed", "checkpoint", "log", "expect"};

static int section_rank(int k)
{
    for (int i = 0; i < (int)(sizeof section_order / sizeof section_order[0]); i++)
        if (!strcmp(section_order[i], decl(k)->section)) return i;
    for (int j = 0; j < k; j++) /* after the known ones, by first declaration */
        if (!strcmp(decl(j)->section, decl(k)->section)) return section_rank(j);
    return 100 + k;
}

/* The first key of each section in printing order, written into first[]; returns the count. */
static int sections(int *first, int cap)
{
    int n = 0, count = dpt_schema_count();
    for (int k = 0; k < count; k++) {
        bool seen = false;
        for (int j = 0; j < n && !seen; j++)
            seen = !strcmp(decl(first[j])->section, decl(k)->section);
        if (!seen && n < cap) first[n++] = k;
    }
    for (int i = 1; i < n; i++) /* insertion sort by rank: a handful of sections */
        for (int j = i; j > 0 && section_rank(first[j]) < section_rank(first[j - 1]); j--) {
            int t = first[j];
            first[j] = first[j - 1], first[j - 1] = t;
        }
    return n;
}

void dpt_config_print(const dpt_config *cfg, FILE *out)
{
    int first[128];
    int n = sections(first, 128);
    for (int s = 0; s < n; s++) {
        const char *section = decl(first[s])->section;
        fprintf(out, "%s[%s]\n", s ? "\n" : "", section);
        for (int k = first[s]; k < cfg->nkeys; k++) {
            if (strcmp(decl(k)->section, section)) continue;
            if (read_by_no_one(cfg, k)) continue; /* another model's or optimizer's, ...: not this run's */
            const char *v = cfg->values[k].raw;
            fprintf(out, needs_quotes(v) ? "%s = \"%s\"\n" : "%s = %s\n", decl(k)->key, v);
        }
    }
}

static int by_name(const void *pa, const void *pb)
{
    const dpt_config_key *a = decl(*(const int *)pa), *b = decl(*(const int *)pb);
    int c = strcmp(a->section, b->section);
    return c ? c : strcmp(a->key, b->key);
}

int dpt_config_num_keys(const dpt_config *cfg)
{
    return cfg->nkeys;
}

const char *dpt_config_key_value(const dpt_config *cfg, int k, const char **section, const char **key, bool *hashed)
{
    DPT_ASSERT(k >= 0 && k < cfg->nkeys, "key %d of %d", k, cfg->nkeys);
    *section = decl(k)->section, *key = decl(k)->key;
    *hashed = !(decl(k)->flags & DPT_KEY_NOT_HASHED);
    return cfg->values[k].raw;
}

uint64_t dpt_config_hash(const dpt_config *cfg)
{
    /* Keys in name order, so the hash depends on the values alone, not on the order in which
     * registrations declared them. A key at its default is left out, so a release that adds a
     * key (at a default that keeps the old behaviour) does not change every config's hash and
     * make resuming an older checkpoint warn that the run is not an exact continuation. Nor a
     * key this run does not read (a file's key of another model or optimizer, when --set chose
     * this one: read_by_no_one): the printed config, which leaves it out, must hash the same
     * when read back. */
    int *order = malloc((size_t)cfg->nkeys * sizeof *order + 1);
    if (!order) dpt_fatal("out of host memory hashing a config");
    for (int k = 0; k < cfg->nkeys; k++)
        order[k] = k;
    qsort(order, (size_t)cfg->nkeys, sizeof *order, by_name);
    uint64_t h = DPT_HASH_SEED;
    for (int i = 0; i < cfg->nkeys; i++) {
        int k = order[i];
        if ((decl(k)->flags & DPT_KEY_NOT_HASHED) || !strcmp(cfg->values[k].raw, decl(k)->def) ||
            read_by_no_one(cfg, k))
            continue;
        const char *parts[3] = {decl(k)->section, decl(k)->key, cfg->values[k].raw};
        for (int p = 0; p < 3; p++) {
            h = dpt_hash_bytes(h, parts[p], strlen(parts[p]));
            h = dpt_hash_bytes(h, "\xff", 1); /* separator so "ab"+"c" != "a"+"bc" */
        }
    }
    free(order);
    return h;
}

static void print_reference_row(FILE *out, int k)
{
    const dpt_schema_key *sk = dpt_schema_at(k);
    const dpt_config_key *d = &sk->decl;
    char type[640];
    if (d->type == DPT_KEY_ENUM && sk->choice_kind >= 0) {
        char known[512];
        list_registered((dpt_kind)sk->choice_kind, "|", known, sizeof known);
        snprintf(type, sizeof type, "a registered %s: `%s`", dpt_kind_name((dpt_kind)sk->choice_kind), known);
    } else if (d->type == DPT_KEY_ENUM) {
        snprintf(type, sizeof type, "one of `%s`", d->choices);
    } else if (d->min <= d->max) {
        snprintf(type, sizeof type, "%s in [%g, %g]%s%s", dpt_key_type_name(d->type), d->min, d->max,
                 d->choices ? " or " : "", d->choices ? d->choices : "");
    } else {
        snprintf(type, sizeof type, "%s", dpt_key_type_name(d->type));
    }
    fprintf(out, "| `%s` | %s | `%s` | %s%s%s%s |\n", d->key, type, *d->def ? d->def : "\"\"", sk->owners,
            *sk->owners ? ": " : "", d->help,
            (d->flags & DPT_KEY_NOT_HASHED) ? " (not in the config hash: changing it keeps a resume exact)" : "");
}

void dpt_config_print_reference(FILE *out)
{
    fprintf(out, "# Config reference\n\n"
                 "Generated by `./train --config-reference` from the schema the registrations declare "
                 "(runtime/registry.c: every model, optimizer, schedule, data source, loss and subsystem "
                 "declares its own keys); a test fails if this file and the schema drift apart.\n\n"
                 "Every key is optional; a key that is not listed here is an error, as is a value of "
                 "the wrong type or out of range. Any key can be overridden on the command line with "
                 "`--set section.key=value`.\n");
    dpt_registry_freeze();
    int first[128];
    int n = sections(first, 128);
    for (int s = 0; s < n; s++) {
        const char *section = decl(first[s])->section;
        fprintf(out, "\n## [%s]\n\n| key | type | default | meaning |\n|---|---|---|---|\n", section);
        for (int k = first[s]; k < dpt_schema_count(); k++)
            if (!strcmp(decl(k)->section, section)) print_reference_row(out, k);
    }
}
