/* json.h: a small checked JSON reader for the files dptrain reads from other tools (a
 * safetensors header, a tokenizer's vocab.json and tokenizer.json). A cursor over bytes
 * already in memory; every failure names the file, what was wrong and the byte where it was,
 * once (the first), with the caller's HINT. Nesting is bounded, strings' escapes decoded
 * (\uXXXX as UTF-8, surrogate pairs joined), integers checked against 64 bits. */
#ifndef DPT_JSON_H
#define DPT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dpt.h"

typedef struct dpt_json {
    const char *s, *end, *start;
    const char *path;  /* the file, first in every message */
    const char *where; /* what the bytes are, e.g. "its JSON header" */
    const char *unit;  /* after "at byte N": e.g. " of the header" (may be "") */
    const char *hint;  /* the HINT line that ends every message */
    dpt_error *err;
    bool failed;
    /* Strings may hold control characters (escaped or not; never NUL): a vocabulary's tokens.
     * Off: names that go into messages and into our own files refuse them. */
    bool controls;
} dpt_json;

/* "PATH: WHERE WHAT at byte N UNIT\nHINT" into err, once; false. */
bool dpt_json_fail(dpt_json *p, const char *what);
void dpt_json_ws(dpt_json *p);
bool dpt_json_expect(dpt_json *p, char c);
/* Inside an object or array, after its opening character: true while another member follows
 * (the ',' between members consumed), false at the closing character (consumed) or on a
 * failure (p->failed then). `first` starts true. */
bool dpt_json_more(dpt_json *p, char close, bool *first);
/* A string into a new NUL-terminated allocation (*len its bytes; out NULL: only checked). */
bool dpt_json_string(dpt_json *p, char **out, size_t *len);
/* A non-negative integer without fraction or exponent (a size, an offset, an id). */
bool dpt_json_uint(dpt_json *p, uint64_t *v);
/* A number (JSON's grammar, finite as a double). */
bool dpt_json_number(dpt_json *p, double *v);
/* true or false. */
bool dpt_json_bool(dpt_json *p, bool *v);
/* Whether the next value is null (then consumed; else nothing is). */
bool dpt_json_null(dpt_json *p);
/* Any value, checked and passed over; depth is the caller's nesting (the bound is 64). */
bool dpt_json_skip(dpt_json *p, int depth);
/* After the document: nothing but white space may follow. */
bool dpt_json_end(dpt_json *p);

#endif
