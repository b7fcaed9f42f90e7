/* expect.h: CI smoke-test expectations (--expect 'METRIC OP VALUE', the [expect] section),
 * checked against a finished run, and the JUnit XML report CI test reporters read. */
#ifndef DPT_EXPECT_H
#define DPT_EXPECT_H

#include <stdbool.h>
#include <stddef.h>

typedef enum dpt_expect_op { DPT_EXPECT_GE, DPT_EXPECT_LE, DPT_EXPECT_EQ, DPT_EXPECT_NE } dpt_expect_op;

typedef struct dpt_expectation {
    char metric[32];
    dpt_expect_op op;
    double value;     /* a percentage is stored as its fraction */
    char hex[65];     /* weights_sha256: the 64 hex digits */
    double tolerance; /* == and !=: half a unit of the last digit written (92.49% -> 0.00005) */
    char text[96];    /* as written: "final_test_acc >= 85%" */
} dpt_expectation;

/* What a finished run measured; the metrics expectations name. NaN: not measured. */
typedef struct dpt_run_result {
    double final_test_acc, best_test_acc, final_test_loss, final_train_loss, img_s;
    double final_test_top5; /* the last evaluation's top-5 accuracy (classifiers of more than 10 classes) */
    double seconds; /* the whole run */
    char weights_sha256[65]; /* "" when not computed */
} dpt_run_result;

/* The metrics, in order (NULL past the last): the [expect] keys and --expect's names. */
const char *dpt_expect_metric(int i);

/* "OP VALUE" for metric (an [expect] key's value); false with msg saying what is wrong. */
bool dpt_expectation_parse(const char *metric, const char *op_value, dpt_expectation *e, char *msg, size_t cap);
/* "METRIC OP VALUE" (the --expect flag). */
bool dpt_expectation_parse_flag(const char *text, dpt_expectation *e, char *msg, size_t cap);
/* Whether the run meets e; *measured is the metric's value (NaN when the run has none). */
bool dpt_expectation_holds(const dpt_expectation *e, const dpt_run_result *r, double *measured);
/* The metric's value as the logs print it: accuracies in percent, the rest as numbers. */
void dpt_expectation_format(const dpt_expectation *e, const dpt_run_result *r, double value, char *buf, size_t cap);

/* The JUnit report: one testcase per expectation (failure or, when the run ended with an
 * error before they could be checked, error), the run's time, and log_tail in system-out.
 * false with msg on a write error. */
/* The report a crash leaves (the run an error of type crash), rendered into buf ahead of time:
 * its length, 0 if it does not fit. */
size_t dpt_junit_crash_text(const char *suite, char *buf, size_t cap);
bool dpt_junit_write(const char *path, const char *suite, const dpt_expectation *e, int n,
                     const dpt_run_result *r, int run_rc, const char *log_tail, char *msg, size_t cap);

#endif
