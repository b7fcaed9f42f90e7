/* test_config.c: the INI parser: values, defaults, overrides, and every kind of bad input with
 * the file, line and key in the message; and docs/config.md matching the schema. */
#include <sys/stat.h>
#include <unistd.h>

#include "tests/testutil.h"

static char path[256];

static const char *write_ini(const char *text)
{
    snprintf(path, sizeof path, "/tmp/dpt_test_config_%d.ini", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static void expect_load_error(const char *text, const char *needle1, const char *needle2)
{
    dpt_error err;
    dpt_config *cfg = dpt_config_load(write_ini(text), &err);
    if (cfg) fail_msg("expected an error for:\n%s", text);
    assert_contains(err.msg, needle1);
    if (needle2) assert_contains(err.msg, needle2);
}

static void test_values_and_defaults(void **state)
{
    (void)state;
    dpt_error err;
    dpt_config *cfg =
        dpt_config_load(write_ini("# comment\n; another\n[train]\nbatch = 128  # inline\n"
                                  "seed=7\n\n[model]\nhidden = 512, 64 ,32\n"
                                  "[data]\ndir = \"/tmp/a b\"\nshuffle = no\n[optim]\nlr = 3e-4\n"),
                        &err);
    if (!cfg) fail_msg("%s", err.msg);
    assert_int_equal(dpt_config_int(cfg, "train", "batch"), 128);
    assert_int_equal(dpt_config_int(cfg, "train", "seed"), 7);
    assert_int_equal(dpt_config_int(cfg, "train", "epochs"), 5); /* default */
    int64_t hidden[8];
    assert_int_equal(dpt_config_int_list(cfg, "model", "hidden", hidden, 8), 3);
    assert_int_equal(hidden[0], 512);
    assert_int_equal(hidden[2], 32);
    assert_string_equal(dpt_config_str(cfg, "data", "dir"), "/tmp/a b");
    assert_false(dpt_config_bool(cfg, "data", "shuffle"));
    assert_float_equal(dpt_config_float(cfg, "optim", "lr"), 3e-4, 1e-12);
    assert_string_equal(dpt_config_str(cfg, "optim", "name"), "adamw");
    assert_contains(dpt_config_where(cfg, "train", "batch"), ":4");
    assert_string_equal(dpt_config_where(cfg, "train", "epochs"), "default");
    double mean[4];
    assert_int_equal(dpt_config_float_list(cfg, "data", "mean", mean, 4), 1); /* the default, one value */
    assert_float_equal(mean[0], 0.2860, 1e-12);
    dpt_config_free(cfg);
    cfg = dpt_config_load(write_ini("[data]\nmean = 0.485, 0.456 ,4.06e-1\n"), &err);
    if (!cfg) fail_msg("%s", err.msg);
    assert_int_equal(dpt_config_float_list(cfg, "data", "mean", mean, 4), 3);
    assert_float_equal(mean[1], 0.456, 1e-12);
    assert_float_equal(mean[2], 0.406, 1e-12);
    dpt_config_free(cfg);
}

static void test_overrides_and_hash(void **state)
{
    (void)state;
    dpt_error err;
    dpt_config *cfg = dpt_config_defaults();
    uint64_t h0 = dpt_config_hash(cfg);
    assert_true(dpt_config_set(cfg, "train.batch=32", &err));
    assert_int_equal(dpt_config_int(cfg, "train", "batch"), 32);
    assert_true(dpt_config_hash(cfg) != h0);
    assert_true(dpt_config_set(cfg, " optim.name = sgd ", &err));
    assert_string_equal(dpt_config_str(cfg, "optim", "name"), "sgd");
    assert_false(dpt_config_set(cfg, "train.bach=3", &err));
    assert_contains(err.msg, "did you mean 'batch'");
    assert_false(dpt_config_set(cfg, "train.batch", &err));
    assert_contains(err.msg, "expected section.key=value");
    assert_false(dpt_config_set(cfg, "train.batch=-4", &err));
    assert_contains(err.msg, "out of range");
    assert_false(dpt_config_set(cfg, "optim.name=adam", &err));
    assert_contains(err.msg, "[optim] name = adam: not a registered optimizer");
    assert_contains(err.msg, "HINT: known optimizers are adamw, ");
    assert_true(dpt_config_set(cfg, "train.batch=64", &err));
    assert_true(dpt_config_set(cfg, "optim.name=adamw", &err));
    assert_true(dpt_config_hash(cfg) == h0); /* the hash is of values, not of their history */
    /* Keys that cannot change the run's numbers stay out of the hash; the rest are in it. */
    const char *outside[] = {"log.interval=7",
                             "log.metrics=/tmp/m.jsonl",
                             "data.prefetch=0",
                             "checkpoint.dir=/tmp/ck",
                             "checkpoint.every_steps=5",
                             "checkpoint.keep_last=9",
                             "distributed.comm_timeout_s=9",
                             "train.memory_limit_mb=100",
                             "log.progress=lines"};
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
        assert_true(dpt_config_set(cfg, outside[i], &err));
        if (dpt_config_hash(cfg) != h0) fail_msg("--set %s changed the config hash", outside[i]);
    }
    const char *inside[] = {"train.seed=1",    "data.shuffle=false",      "optim.lr=0.5",
                            "train.threads=1", "distributed.bucket_mb=3", "data.classes=12"};
    for (size_t i = 0; i < sizeof inside / sizeof inside[0]; i++) {
        dpt_config *c = dpt_config_defaults();
        assert_true(dpt_config_set(c, inside[i], &err));
        if (dpt_config_hash(c) == h0) fail_msg("--set %s left the config hash unchanged", inside[i]);
        dpt_config_free(c);
    }
    /* A long value is taken whole, not cut at a buffer's end. */
    char longset[3000] = "data.dir=/";
    memset(longset + 10, 'd', 2500);
    assert_true(dpt_config_set(cfg, longset, &err));
    assert_int_equal(strlen(dpt_config_str(cfg, "data", "dir")), 2501);
    dpt_config_free(cfg);
}

static void test_bad_input(void **state)
{
    (void)state;
    expect_load_error("[train]\nbatch = 1\nthis is not ini\n", ":3:", "expected 'key = value'");
    expect_load_error("[train\nbatch = 1\n", ":1:", "malformed section header");
    expect_load_error("[trian]\n", "unknown section [trian]", "did you mean [train]?");
    expect_load_error("[train]\nbach = 3\n", ":2: unknown key 'bach' in [train]", "did you mean 'batch'?");
    expect_load_error("[train]\nzzzzzzzz = 3\n", "unknown key 'zzzzzzzz'", "keys of [train] are epochs");
    expect_load_error("[train]\nbatch = many\n", ":2: [train] batch = many", "expected an integer");
    expect_load_error("[train]\nbatch = 12x\n", "expected an integer", NULL);
    expect_load_error("[train]\nbatch = 0\n", "out of range", "between 1 and");
    expect_load_error("[optim]\nlr = fast\n", "[optim] lr = fast", "expected a number");
    expect_load_error("[optim]\nlr = nan\n", "expected a number", NULL);
    expect_load_error("[data]\nshuffle = maybe\n", "expected true or false", NULL);
    expect_load_error("[model]\nactivation = tanh\n", "not one of relu|gelu", NULL);
    expect_load_error("[model]\nhidden = 256,,x\n", "element 2 is empty", NULL);
    expect_load_error("[model]\nhidden = 256,,256\n", ":2: [model] hidden = 256,,256: element 2 is empty",
                      NULL);
    expect_load_error("[model]\nhidden = ,256\n", "element 1 is empty", NULL);
    expect_load_error("[model]\nhidden = 256,\n", "element 2 is empty", NULL);
    expect_load_error("[model]\nhidden = 256, x\n", "comma-separated integers", NULL);
    expect_load_error("[model]\nhidden = 0\n", "comma-separated integers", NULL);
    expect_load_error("[data]\nmean = 0.5,,0.5\n", "[data] mean = 0.5,,0.5: element 2 is empty", NULL);
    expect_load_error("[data]\nmean = 0.5,grey\n", "comma-separated numbers between", NULL);
    expect_load_error("[data]\nstd = 0.2,0\n", "comma-separated numbers between 1e-06", NULL);
    expect_load_error("batch = 3\n", "before any [section]", NULL);
    expect_load_error("[train]\nbatch = 3\nbatch = 4\n", ":3: [train] batch set twice", "first on line 2");
    expect_load_error("[data]\ndir = \"/tmp\n", "unterminated quote", NULL);
    expect_load_error("[train]\n = 3\n", "missing key", NULL);
    /* a 300-character key is an unknown key, like any other */
    char long_key[400] = "[train]\n";
    memset(long_key + 8, 'k', 300);
    strcat(long_key, " = 3\n");
    expect_load_error(long_key, ":2: unknown key 'kkkk", "keys of [train] are");
    dpt_error err;
    /* a NUL byte inside a value: an error with its column, not a silently cut value */
    FILE *f = fopen(write_ini(""), "wb");
    fwrite("[data]\ndir = /tmp\0/evil\n", 1, 25, f);
    fclose(f);
    assert_null(dpt_config_load(path, &err));
    assert_contains(err.msg, ":2: a NUL byte at column 11");
    /* a UTF-8 byte-order mark (Windows editors) is accepted */
    dpt_config *cfg = dpt_config_load(write_ini("\xEF\xBB\xBF[train]\nbatch = 3\n"), &err);
    if (!cfg) fail_msg("%s", err.msg);
    assert_int_equal(dpt_config_int(cfg, "train", "batch"), 3);
    dpt_config_free(cfg);
    /* What print writes parses back to the same values (found by fuzz_ini: "name =# x" is a
     * value, printed as "name = # x" it became a comment); a quote inside a value is refused. */
    cfg = dpt_config_load(write_ini("[data]\ndir =# not a comment ;nor this\ntrain_images = \"  spaced \"\n"),
                          &err);
    if (!cfg) fail_msg("%s", err.msg);
    assert_string_equal(dpt_config_str(cfg, "data", "dir"), "# not a comment"); /* " ;" starts one */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    dpt_config_print(cfg, mem);
    fclose(mem);
    dpt_config *again = dpt_config_parse(text, len, "printed", &err);
    if (!again) fail_msg("%s", err.msg);
    assert_string_equal(dpt_config_str(again, "data", "dir"), "# not a comment");
    assert_string_equal(dpt_config_str(again, "data", "train_images"), "  spaced ");
    assert_true(dpt_config_hash(again) == dpt_config_hash(cfg));
    dpt_config_free(again);
    free(text);
    assert_false(dpt_config_set(cfg, "data.dir=a\"b", &err));
    assert_contains(err.msg, "a double quote inside a value");
    assert_true(dpt_config_set(cfg, "data.dir=\"/tmp/with space\"", &err)); /* --set unquotes too */
    assert_string_equal(dpt_config_str(cfg, "data", "dir"), "/tmp/with space");
    dpt_config_free(cfg);
    expect_load_error("[data]\ndir = \"a\"b\"\n", "a double quote inside a value", NULL);
    /* a folder and a FIFO: refused at once (a FIFO used to block forever) */
    assert_null(dpt_config_load("/tmp", &err));
    assert_contains(err.msg, "config file /tmp is not a regular file");
    char fifo[300];
    snprintf(fifo, sizeof fifo, "/tmp/dpt_test_config_fifo_%d", (int)getpid());
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_null(dpt_config_load(fifo, &err));
    assert_contains(err.msg, "is not a regular file");
    unlink(fifo);
    assert_null(dpt_config_load("/nonexistent/x.ini", &err));
    assert_contains(err.msg, "cannot open config file /nonexistent/x.ini");
}

/* docs/config.md is generated from the schema; it must not drift. */
static void test_reference_matches_docs(void **state)
{
    (void)state;
    char *generated = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&generated, &len);
    dpt_config_print_reference(mem);
    fclose(mem);
    FILE *f = fopen("docs/config.md", "r");
    if (!f) fail_msg("docs/config.md missing; run ./train --config-reference > docs/config.md");
    char *doc = calloc(1, len + 2);
    size_t got = fread(doc, 1, len + 1, f);
    fclose(f);
    if (got != len || memcmp(doc, generated, len) != 0)
        fail_msg("docs/config.md differs from the schema\nHINT: ./train --config-reference > docs/config.md");
    free(doc);
    free(generated);
}

static void test_shipped_configs_parse(void **state)
{
    (void)state;
    const char *configs[] = {"configs/fmnist_mlp.ini"};
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        dpt_error err;
        dpt_config *cfg = dpt_config_load(configs[i], &err);
        if (!cfg) fail_msg("%s", err.msg);
        dpt_config_free(cfg);
    }
}

/* dpt_error_prefix: the prefix before what the message said, control bytes made printable, the
 * whole cut to the buffer (never past it), false returned as dpt_errorf does. */
static void test_error_prefix(void **state)
{
    (void)state;
    dpt_error err;
    dpt_errorf(&err, "cannot open x.dat: No such file\nHINT: check it");
    assert_false(dpt_error_prefix(&err, "%s: ", "--input"));
    assert_string_equal(err.msg, "--input: cannot open x.dat: No such file\nHINT: check it");
    dpt_errorf(&err, "tail");
    dpt_error_prefix(&err, "a\033[31mb ");
    assert_string_equal(err.msg, "a?[31mb tail");
    char big[2000];
    memset(big, 'p', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    dpt_errorf(&err, "tail");
    dpt_error_prefix(&err, "%s", big); /* longer than the buffer: cut, terminated */
    assert_int_equal(strlen(err.msg), sizeof err.msg - 1);
    assert_false(dpt_error_prefix(NULL, "x"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_and_defaults),
        cmocka_unit_test(test_overrides_and_hash),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_reference_matches_docs),
        cmocka_unit_test(test_shipped_configs_parse),
        cmocka_unit_test(test_error_prefix),
    };
    int rc = cmocka_run_group_tests_name("config", tests, NULL, NULL);
    unlink(path);
    return rc;
}
