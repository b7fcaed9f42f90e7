/* config_value.c: one config value parsed against its key's declaration (type, range, choices),
 * with the error a user sees. Shared by the registry (a declared default must parse) and by
 * config.c (every value of a file or a --set). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "expect.h"
#include "schema.h"

static const char *const type_names[] = {"int",  "float",      "bool",       "string",
                                         "enum", "int list",   "float list", "comparison"};
_Static_assert(sizeof type_names / sizeof type_names[0] == DPT_KEY_TYPE_COUNT, "type_names");

const char *dpt_key_type_name(dpt_key_type type)
{
    return (unsigned)type < DPT_KEY_TYPE_COUNT ? type_names[type] : "?";
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

static bool parse_int(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool check_range(dpt_error *err, const char *where, const dpt_config_key *k, const char *raw, double v)
{
    bool ranged = k->min <= k->max && !(k->min == 0 && k->max == 0); /* both 0: none, as declared */
    if (ranged && (v < k->min || v > k->max))
        return dpt_errorf(err, "%s: [%s] %s = %s: out of range, must be between %g and %g\nHINT: %s", where,
                          k->section, k->key, raw, k->min, k->max, k->help);
    return true;
}

/* The position of raw among "a|b|c", or -1. */
static int choice_index(const char *choices, const char *raw)
{
    size_t len = strlen(raw);
    int i = 0;
    for (const char *c = choices; c && *c; i++) {
        const char *bar = strchr(c, '|');
        size_t n = bar ? (size_t)(bar - c) : strlen(c);
        if (n == len && strncmp(c, raw, n) == 0) return i;
        c = bar ? bar + 1 : c + n;
    }
    return -1;
}

static bool parse_list(const dpt_config_key *k, const char *raw, const char *where, dpt_value *parsed,
                       dpt_error *err)
{
    /* Split by hand: strtok would silently skip the empty element of "256,,256". */
    bool ints = k->type == DPT_KEY_INT_LIST;
    const char *tok = raw;
    for (;;) {
        const char *comma = strchr(tok, ',');
        size_t len = comma ? (size_t)(comma - tok) : strlen(tok);
        char item[64];
        int64_t x = 0;
        double f = 0;
        bool ok = len < sizeof item;
        if (ok) {
            memcpy(item, tok, len);
            item[len] = '\0';
        }
        char *t = ok ? trim(item) : NULL;
        if (ok && !*t)
            return dpt_errorf(err, "%s: [%s] %s = %s: element %d is empty\nHINT: %s, e.g. %s", where, k->section,
                              k->key, raw, parsed->nlist + 1, k->help, k->def);
        if (ok) ok = ints ? parse_int(t, &x) : parse_double(t, &f);
        if (!ok || parsed->nlist == DPT_VALUE_MAX_LIST || !check_range(NULL, where, k, t, ints ? (double)x : f))
            return dpt_errorf(err,
                              "%s: [%s] %s = %s: expected up to %d comma-separated %s between %g and %g\nHINT: %s",
                              where, k->section, k->key, raw, DPT_VALUE_MAX_LIST, ints ? "integers" : "numbers",
                              k->min, k->max, k->help);
        parsed->list[parsed->nlist] = x;
        parsed->flist[parsed->nlist++] = f;
        if (!comma) return true;
        tok = comma + 1;
    }
}

bool dpt_value_parse(const dpt_config_key *k, const char *raw, const char *where, dpt_value *out, dpt_error *err)
{
    dpt_value parsed;
    memset(&parsed, 0, sizeof parsed);
    /* Quotes only surround a whole value (and are removed before here): one inside could not
     * be written back (dpt_config_print, a checkpoint's config) as the same value. */
    if (strchr(raw, '"'))
        return dpt_errorf(err,
                          "%s: [%s] %s = %s: a double quote inside a value\nHINT: quotes may only surround the "
                          "whole value, e.g. dir = \"/data/my set\"",
                          where, k->section, k->key, raw);
    switch (k->type) {
    case DPT_KEY_INT:
        if (!parse_int(raw, &parsed.i))
            return dpt_errorf(err, "%s: [%s] %s = %s: expected an integer\nHINT: %s", where, k->section, k->key,
                              raw, k->help);
        if (!check_range(err, where, k, raw, (double)parsed.i)) return false;
        break;
    case DPT_KEY_FLOAT:
        /* a number, or one of the key's words ("auto"): read as NAN, the word with dpt_config_str */
        parsed.choice = k->choices ? choice_index(k->choices, raw) : -1;
        if (parsed.choice >= 0) {
            parsed.f = NAN;
            break;
        }
        if (!parse_double(raw, &parsed.f))
            return dpt_errorf(err, "%s: [%s] %s = %s: expected a number%s%s\nHINT: %s", where, k->section, k->key,
                              raw, k->choices ? " or " : "", k->choices ? k->choices : "", k->help);
        if (!check_range(err, where, k, raw, parsed.f)) return false;
        break;
    case DPT_KEY_BOOL:
        if (!strcmp(raw, "true") || !strcmp(raw, "yes") || !strcmp(raw, "on") || !strcmp(raw, "1"))
            parsed.b = true;
        else if (!strcmp(raw, "false") || !strcmp(raw, "no") || !strcmp(raw, "off") || !strcmp(raw, "0"))
            parsed.b = false;
        else
            return dpt_errorf(err, "%s: [%s] %s = %s: expected true or false\nHINT: %s", where, k->section, k->key,
                              raw, k->help);
        break;
    case DPT_KEY_ENUM:
        if (k->choices[0] == '@') { /* a registered name: the caller checks the registry */
            parsed.choice = -1;
            break;
        }
        parsed.choice = choice_index(k->choices, raw);
        if (parsed.choice < 0)
            return dpt_errorf(err, "%s: [%s] %s = %s: not one of %s\nHINT: %s", where, k->section, k->key, raw,
                              k->choices, k->help);
        break;
    case DPT_KEY_INT_LIST:
    case DPT_KEY_FLOAT_LIST:
        if (!parse_list(k, raw, where, &parsed, err)) return false;
        break;
    case DPT_KEY_COMPARISON: {
        dpt_expectation e;
        char msg[200];
        if (*raw && !dpt_expectation_parse(k->key, raw, &e, msg, sizeof msg))
            return dpt_errorf(err, "%s: [%s] %s = %s: %s\nHINT: write OP VALUE, e.g. %s = >= 85%%", where,
                              k->section, k->key, raw, msg, k->key);
        break;
    }
    case DPT_KEY_STRING:
    case DPT_KEY_TYPE_COUNT:
        break;
    }
    parsed.raw = strdup(raw);
    if (!parsed.raw) dpt_fatal("out of host memory in the config parser");
    snprintf(parsed.where, sizeof parsed.where, "%s", where);
    free(out->raw);
    *out = parsed;
    return true;
}

void dpt_value_free(dpt_value *v)
{
    free(v->raw);
    v->raw = NULL;
}
