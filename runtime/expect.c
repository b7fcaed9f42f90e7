/* expect.c: expectations about a finished run and their JUnit report. */
#include "expect.h"
#include "registry.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct metric {
    const char *name;
    bool accuracy; /* may be written as a percentage */
} metrics[] = {
    {"final_test_acc", true}, {"best_test_acc", true}, {"final_test_top5", true}, {"final_test_loss", false},
    {"final_train_loss", false}, {"img_s", false}, {"weights_sha256", false},
};
enum { NMETRICS = sizeof metrics / sizeof metrics[0] };
static const char *const op_names[] = {">=", "<=", "==", "!="};

const char *dpt_expect_metric(int i)
{
    return i >= 0 && i < NMETRICS ? metrics[i].name : NULL;
}

static const struct metric *find_metric(const char *name)
{
    for (int i = 0; i < NMETRICS; i++)
        if (!strcmp(metrics[i].name, name)) return &metrics[i];
    return NULL;
}

static bool say(char *msg, size_t cap, const char *fmt, const char *a, const char *b)
{
    snprintf(msg, cap, fmt, a, b);
    return false;
}

bool dpt_expectation_parse(const char *metric, const char *op_value, dpt_expectation *e, char *msg, size_t cap)
{
    memset(e, 0, sizeof *e);
    const struct metric *m = find_metric(metric);
    if (!m) {
        return say(msg, cap, "unknown metric '%s'%s; metrics are final_test_acc, best_test_acc, final_test_top5, "
                             "final_test_loss, final_train_loss, img_s, weights_sha256", metric, "");
    }
    const char *s = op_value;
    while (isspace((unsigned char)*s))
        s++;
    op_value = s; /* messages quote it without the leading blanks */
    int op = -1;
    for (int i = 0; i < 4; i++)
        if (!strncmp(s, op_names[i], 2)) op = i;
    if (op < 0) return say(msg, cap, "'%s': expected an operator (>= <= == !=) before the value%s", op_value, "");
    s += 2;
    if (!strcmp(metric, "weights_sha256")) { /* == or != 64 hex digits (./train --inspect prints them) */
        while (isspace((unsigned char)*s))
            s++;
        size_t n = strspn(s, "0123456789abcdef");
        const char *rest = s + n;
        while (isspace((unsigned char)*rest))
            rest++;
        if (op != DPT_EXPECT_EQ && op != DPT_EXPECT_NE)
            return say(msg, cap, "'%s': a hash is compared with == or !=%s", op_value, "");
        if (n != 64 || *rest)
            return say(msg, cap, "'%s': expected 64 lower-case hex digits (./train --inspect CKPT prints the %s)",
                       op_value, "weights sha256");
        snprintf(e->metric, sizeof e->metric, "%s", metric);
        e->op = (dpt_expect_op)op;
        memcpy(e->hex, s, 64);
        e->hex[64] = '\0';
        snprintf(e->text, sizeof e->text, "%s %s %.12s...", metric, op_names[op], e->hex);
        return true;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v)) return say(msg, cap, "'%s': expected a number after the operator%s", op_value, "");
    /* the tolerance of == and !=: half a unit of the last digit written */
    const char *dot = memchr(s, '.', (size_t)(end - s));
    int decimals = dot ? (int)(end - dot - 1) : 0;
    double tol = 0.5 * pow(10.0, -decimals);
    bool percent = *end == '%';
    if (percent) {
        if (!m->accuracy) return say(msg, cap, "'%s': a percentage, but %s is not an accuracy", op_value, metric);
        v /= 100.0, tol /= 100.0, end++;
    }
    while (isspace((unsigned char)*end))
        end++;
    if (*end) return say(msg, cap, "'%s': unexpected '%s' after the value", op_value, end);
    if (m->accuracy && (v < 0 || v > 1))
        return say(msg, cap, "'%s': an accuracy is a fraction (0.85) or a percentage (85%%)%s", op_value, "");
    snprintf(e->metric, sizeof e->metric, "%s", metric);
    e->op = (dpt_expect_op)op;
    e->value = v;
    e->tolerance = tol;
    snprintf(e->text, sizeof e->text, "%s %s", metric, s - 2);
    return true;
}

bool dpt_expectation_parse_flag(const char *text, dpt_expectation *e, char *msg, size_t cap)
{
    const char *s = text;
    while (isspace((unsigned char)*s))
        s++;
    size_t n = 0;
    while (s[n] && (isalnum((unsigned char)s[n]) || s[n] == '_'))
        n++;
    char metric[64];
    if (n == 0 || n >= sizeof metric) return say(msg, cap, "'%s': expected METRIC OP VALUE, e.g. 'final_test_acc >= 85%%'%s", text, "");
    memcpy(metric, s, n);
    metric[n] = '\0';
    return dpt_expectation_parse(metric, s + n, e, msg, cap);
}

static double metric_value(const char *name, const dpt_run_result *r)
{
    if (!strcmp(name, "final_test_acc")) return r->final_test_acc;
    if (!strcmp(name, "best_test_acc")) return r->best_test_acc;
    if (!strcmp(name, "final_test_top5")) return r->final_test_top5;
    if (!strcmp(name, "final_test_loss")) return r->final_test_loss;
    if (!strcmp(name, "final_train_loss")) return r->final_train_loss;
    if (!strcmp(name, "img_s")) return r->img_s;
    return NAN;
}

bool dpt_expectation_holds(const dpt_expectation *e, const dpt_run_result *r, double *measured)
{
    if (e->hex[0]) {
        *measured = r->weights_sha256[0] ? 0.0 : NAN;
        if (!r->weights_sha256[0]) return false;
        return (strcmp(e->hex, r->weights_sha256) == 0) == (e->op == DPT_EXPECT_EQ);
    }
    double v = metric_value(e->metric, r);
    *measured = v;
    if (isnan(v)) return false; /* never measured (e.g. no evaluation ran): not met */
    switch (e->op) {
    case DPT_EXPECT_GE: return v >= e->value;
    case DPT_EXPECT_LE: return v <= e->value;
    case DPT_EXPECT_EQ: return fabs(v - e->value) <= e->tolerance;
    case DPT_EXPECT_NE: return fabs(v - e->value) > e->tolerance;
    }
    return false;
}

void dpt_expectation_format(const dpt_expectation *e, const dpt_run_result *r, double value, char *buf, size_t cap)
{
    const struct metric *m = find_metric(e->metric);
    if (e->hex[0] && r->weights_sha256[0])
        snprintf(buf, cap, "%s", r->weights_sha256);
    else if (isnan(value))
        snprintf(buf, cap, "not measured");
    else if (m && m->accuracy)
        snprintf(buf, cap, "%.2f%%", 100.0 * value);
    else if (!strcmp(e->metric, "img_s"))
        snprintf(buf, cap, "%.1f", value);
    else
        snprintf(buf, cap, "%.4f", value);
}

/* ---------------------------------------------------------------- JUnit XML */

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '&') fputs("&amp;", f);
        else if (c == '<') fputs("&lt;", f);
        else if (c == '>') fputs("&gt;", f);
        else if (c == '"') fputs("&quot;", f);
        else if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') fputc('?', f); /* not allowed in XML 1.0 */
        else fputc(c, f);
    }
}

static void xml_cdata(FILE *f, const char *s)
{
    fputs("<![CDATA[", f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (!strncmp(s, "]]>", 3)) {
            fputs("]]]]><![CDATA[>", f); /* a CDATA section cannot hold its own end */
            s += 2;
        } else if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') {
            fputc('?', f);
        } else {
            fputc(c, f);
        }
    }
    fputs("]]>", f);
}

size_t dpt_junit_crash_text(const char *suite, char *buf, size_t cap)
{
    FILE *f = fmemopen(buf, cap, "w");
    if (!f) return 0;
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"dptrain\" tests=\"1\" failures=\"0\" "
          "errors=\"1\">\n  <testsuite name=\"", f);
    xml_text(f, suite);
    fputs("\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\">\n    <testcase classname=\"dptrain.run\" "
          "name=\"training run completes\">\n      <error type=\"crash\" message=\"the run crashed (SIGSEGV, "
          "SIGBUS, SIGFPE or SIGILL: its report, with the call stack, is on stderr)\"/>\n    </testcase>\n  "
          "</testsuite>\n</testsuites>\n", f);
    long n = ftell(f);
    bool whole = !ferror(f) && n > 0 && (size_t)n < cap - 1;
    fclose(f);
    return whole ? (size_t)n : 0;
}

bool dpt_junit_write(const char *path, const char *suite, const dpt_expectation *e, int n,
                     const dpt_run_result *r, int run_rc, const char *log_tail, char *msg, size_t cap)
{
    dpt_atomic_file af;
    dpt_error err;
    if (!dpt_atomic_file_open(&af, path, &err)) { /* not path.tmp: a planted link there */
        snprintf(msg, cap, "%s", err.msg);
        return false;
    }
    FILE *f = af.f;
    int failures = 0, errors = 0;
    for (int i = 0; i < n; i++) {
        double v;
        if (run_rc != 0 && run_rc != 3)
            errors++;
        else if (!dpt_expectation_holds(&e[i], r, &v))
            failures++;
    }
    time_t now = time(NULL);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", gmtime(&now));
    bool run_failed = run_rc != 0 && run_rc != 3;
    errors += run_failed;
    /* the first testcase is the run itself: an error when it did not complete */
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"dptrain\" tests=\"%d\" "
               "failures=\"%d\" errors=\"%d\" time=\"%.3f\">\n  <testsuite name=\"",
            n + 1, failures, errors, r->seconds);
    xml_text(f, suite);
    fprintf(f, "\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"0\" time=\"%.3f\" timestamp=\"%s\">\n",
            n + 1, failures, errors, r->seconds, stamp);
    fprintf(f, "    <testcase classname=\"dptrain.run\" name=\"training run completes\" time=\"%.3f\">", r->seconds);
    if (run_failed)
        fprintf(f, "\n      <error type=\"run\" message=\"the run ended with exit code %d (its error is in "
                   "system-out)\"/>\n    ", run_rc);
    fputs("</testcase>\n", f);
    for (int i = 0; i < n; i++) {
        double v;
        bool ok = dpt_expectation_holds(&e[i], r, &v);
        char shown[80];
        dpt_expectation_format(&e[i], r, v, shown, sizeof shown);
        fputs("    <testcase classname=\"dptrain.expect\" name=\"", f);
        xml_text(f, e[i].text);
        fprintf(f, "\" time=\"%.3f\">", r->seconds);
        if (run_rc != 0 && run_rc != 3) {
            fprintf(f, "\n      <error type=\"run\" message=\"the run ended with exit code %d before this could be "
                       "checked\"/>\n    ",
                    run_rc);
        } else if (!ok) {
            fputs("\n      <failure type=\"expectation\" message=\"", f);
            char text[240];
            snprintf(text, sizeof text, "%s: %s%s", e[i].text, strcmp(shown, "not measured") ? "measured " : "", shown);
            xml_text(f, text);
            fputs("\"/>\n    ", f);
        }
        fputs("</testcase>\n", f);
    }
    fputs("    <system-out>", f);
    xml_cdata(f, log_tail ? log_tail : "");
    fputs("</system-out>\n  </testsuite>\n</testsuites>\n", f);
    if (!dpt_atomic_file_close(&af, true, &err)) {
        snprintf(msg, cap, "cannot write %s: %s", path, err.msg);
        return false;
    }
    return true;
}

/* CI smoke tests: checked after the run (exit code 3 when one fails); see --expect */
static const dpt_config_key expect_keys[] = {
    {"expect", "final_test_acc", DPT_KEY_COMPARISON, "", 1, 0, NULL,
     "after the run: 'OP VALUE' with OP one of >= <= == != and VALUE a fraction or a percentage, e.g. >= 85%", DPT_KEY_NOT_HASHED},
    {"expect", "best_test_acc", DPT_KEY_COMPARISON, "", 1, 0, NULL, "after the run: the best epoch's test accuracy", DPT_KEY_NOT_HASHED},
    {"expect", "final_test_top5", DPT_KEY_COMPARISON, "", 1, 0, NULL,
     "after the run: the last evaluation's top-5 accuracy (a classifier of more than 10 classes)", DPT_KEY_NOT_HASHED},
    {"expect", "final_test_loss", DPT_KEY_COMPARISON, "", 1, 0, NULL, "after the run: the last evaluation's test loss", DPT_KEY_NOT_HASHED},
    {"expect", "final_train_loss", DPT_KEY_COMPARISON, "", 1, 0, NULL,
     "after the run: the last epoch's training loss (average over all ranks)", DPT_KEY_NOT_HASHED},
    {"expect", "img_s", DPT_KEY_COMPARISON, "", 1, 0, NULL,
     "after the run: training images per second over the whole run, all ranks (evaluation time excluded)", DPT_KEY_NOT_HASHED},
    {"expect", "weights_sha256", DPT_KEY_COMPARISON, "", 1, 0, NULL,
     "after the run: == or != the 64 hex digits of the final weights' SHA-256 (./train --inspect CKPT prints "
     "a checkpoint's; the run prints its own)", DPT_KEY_NOT_HASHED},
};
DPT_BUILTIN(settings_expect) = {DPT_KIND_SETTINGS, "expect", "what a run must reach", expect_keys,
                                DPT_COUNT(expect_keys), NULL};
