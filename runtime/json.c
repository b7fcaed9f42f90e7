/* json.c: the checked JSON reader of json.h (safetensors headers, tokenizer files). */
#include "json.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#define MAX_DEPTH 64

bool dpt_json_fail(dpt_json *p, const char *what)
{
    if (!p->failed)
        dpt_errorf(p->err, "%s: %s %s at byte %lld%s\n%s", p->path, p->where, what, (long long)(p->s - p->start),
                   p->unit ? p->unit : "", p->hint);
    p->failed = true;
    return false;
}

void dpt_json_ws(dpt_json *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

bool dpt_json_expect(dpt_json *p, char c)
{
    dpt_json_ws(p);
    if (p->s >= p->end || *p->s != c) {
        char what[48];
        snprintf(what, sizeof what, "lacks a '%c'", c);
        return dpt_json_fail(p, what);
    }
    p->s++;
    return true;
}

bool dpt_json_more(dpt_json *p, char close, bool *first)
{
    if (p->failed) return false;
    dpt_json_ws(p);
    if (*first) {
        *first = false;
        if (p->s < p->end && *p->s == close) return p->s++, false;
        return true;
    }
    if (p->s < p->end && *p->s == ',') return p->s++, true;
    dpt_json_expect(p, close);
    return false;
}

static int hex4(const char *s)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int c = s[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

bool dpt_json_string(dpt_json *p, char **out, size_t *len)
{
    dpt_json_ws(p);
    if (p->s >= p->end || *p->s != '"') return dpt_json_fail(p, "lacks a '\"' opening a string");
    p->s++;
    size_t cap = 32, n = 0;
    char *buf = out ? malloc(cap) : NULL;
    if (out && !buf) dpt_fatal("out of host memory reading %s", p->path);
    const char *bad = NULL;
    for (;;) {
        if (p->s >= p->end) {
            bad = "ends inside a string";
            break;
        }
        unsigned char c = (unsigned char)*p->s++;
        uint32_t cp = c;
        if (c == '"') break;
        if (c < 0x20 && !p->controls) {
            bad = "has a control byte inside a string";
            break;
        }
        if (c == '\\') {
            if (p->s >= p->end) {
                bad = "ends inside a string";
                break;
            }
            char e = *p->s++;
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e && simple) {
                cp = (uint32_t) "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            } else if (e == 'u' && p->end - p->s >= 4 && hex4(p->s) >= 0) {
                cp = (uint32_t)hex4(p->s);
                p->s += 4;
                if (cp >= 0xd800 && cp < 0xdc00 && p->end - p->s >= 6 && p->s[0] == '\\' && p->s[1] == 'u' &&
                    hex4(p->s + 2) >= 0xdc00 && hex4(p->s + 2) < 0xe000) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (uint32_t)(hex4(p->s + 2) - 0xdc00);
                    p->s += 6;
                } else if (cp >= 0xd800 && cp < 0xe000) {
                    bad = "has a lone UTF-16 surrogate in a string";
                    break;
                }
            } else {
                bad = "has an unknown escape in a string";
                break;
            }
            if (cp == 0 || ((cp < 0x20 || cp == 0x7f) && !p->controls)) {
                bad = "has a control character (escaped) inside a string";
                break;
            }
        }
        if (!out) continue;
        if (n + 5 >= cap) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown) dpt_fatal("out of host memory reading %s", p->path);
            buf = grown;
        }
        if (c == '\\' && cp >= 0x80) { /* an escaped code point, as UTF-8 */
            if (cp < 0x800) {
                buf[n++] = (char)(0xc0 | (cp >> 6));
            } else if (cp < 0x10000) {
                buf[n++] = (char)(0xe0 | (cp >> 12));
                buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            } else {
                buf[n++] = (char)(0xf0 | (cp >> 18));
                buf[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
                buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            }
            buf[n++] = (char)(0x80 | (cp & 0x3f));
        } else {
            buf[n++] = (char)cp;
        }
    }
    if (bad) {
        free(buf);
        return dpt_json_fail(p, bad);
    }
    if (out) {
        buf[n] = '\0';
        *out = buf;
    }
    if (len) *len = n;
    return true;
}

bool dpt_json_uint(dpt_json *p, uint64_t *v)
{
    dpt_json_ws(p);
    if (p->s >= p->end || *p->s < '0' || *p->s > '9')
        return dpt_json_fail(p, "has a value that is not a non-negative integer");
    uint64_t x = 0;
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
        if (x > (UINT64_MAX - 9) / 10) return dpt_json_fail(p, "has an integer too large for 64 bits");
        x = x * 10 + (uint64_t)(*p->s++ - '0');
    }
    if (p->s < p->end && (*p->s == '.' || *p->s == 'e' || *p->s == 'E'))
        return dpt_json_fail(p, "has a size or offset that is not an integer");
    *v = x;
    return true;
}

bool dpt_json_number(dpt_json *p, double *v)
{
    dpt_json_ws(p);
    const char *at = p->s;
    /* JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
    if (at < p->end && *at == '-') at++;
    const char *digits = at;
    while (at < p->end && *at >= '0' && *at <= '9')
        at++;
    bool ok = at > digits && !(*digits == '0' && at - digits > 1);
    if (ok && at < p->end && *at == '.') {
        const char *frac = ++at;
        while (at < p->end && *at >= '0' && *at <= '9')
            at++;
        ok = at > frac;
    }
    if (ok && at < p->end && (*at == 'e' || *at == 'E')) {
        at++;
        if (at < p->end && (*at == '+' || *at == '-')) at++;
        const char *exp = at;
        while (at < p->end && *at >= '0' && *at <= '9')
            at++;
        ok = at > exp;
    }
    char text[64];
    if (!ok || at - p->s >= (ptrdiff_t)sizeof text) return dpt_json_fail(p, "has a value that is not a number");
    memcpy(text, p->s, (size_t)(at - p->s));
    text[at - p->s] = '\0';
    *v = strtod(text, NULL);
    if (!isfinite(*v)) return dpt_json_fail(p, "has a number out of range");
    p->s = at;
    return true;
}

static bool word(dpt_json *p, const char *w)
{
    dpt_json_ws(p);
    size_t n = strlen(w);
    if ((size_t)(p->end - p->s) < n || strncmp(p->s, w, n)) return false;
    p->s += n;
    return true;
}

bool dpt_json_bool(dpt_json *p, bool *v)
{
    if (word(p, "true")) return *v = true, true;
    if (word(p, "false")) return *v = false, true;
    return dpt_json_fail(p, "has a value that is not true or false");
}

bool dpt_json_null(dpt_json *p)
{
    return word(p, "null");
}

bool dpt_json_skip(dpt_json *p, int depth)
{
    if (depth > MAX_DEPTH) return dpt_json_fail(p, "nests deeper than 64 levels");
    dpt_json_ws(p);
    if (p->s >= p->end) return dpt_json_fail(p, "ends where a value should be");
    char c = *p->s;
    if (c == '"') return dpt_json_string(p, NULL, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        p->s++;
        bool first = true;
        while (dpt_json_more(p, close, &first)) {
            if (c == '{' && !(dpt_json_string(p, NULL, NULL) && dpt_json_expect(p, ':'))) return false;
            if (!dpt_json_skip(p, depth + 1)) return false;
        }
        return !p->failed;
    }
    if (word(p, "true") || word(p, "false") || word(p, "null")) return true;
    const char *from = p->s; /* a number: -?digits(.digits)?([eE][+-]?digits)? */
    if (p->s < p->end && *p->s == '-') p->s++;
    int digits = 0;
    while (p->s < p->end && ((*p->s >= '0' && *p->s <= '9') || *p->s == '.' || *p->s == 'e' || *p->s == 'E' ||
                             ((*p->s == '+' || *p->s == '-') && (p->s[-1] == 'e' || p->s[-1] == 'E'))))
        digits += *p->s >= '0' && *p->s <= '9', p->s++;
    if (!digits) {
        p->s = from;
        return dpt_json_fail(p, "has something that is not a JSON value");
    }
    return true;
}

bool dpt_json_end(dpt_json *p)
{
    dpt_json_ws(p);
    return p->failed ? false : p->s == p->end || dpt_json_fail(p, "goes on after its closing '}'");
}
