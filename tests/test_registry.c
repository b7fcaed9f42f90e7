/* test_registry.c: a program's own model and config keys (dpt_register_model,
 * dpt_register_config_keys): bad registrations refused with a message, a registered model's
 * keys validated, suggested, hashed and listed like the built-in ones, and registration after
 * a config exists refused. The tests run in this order: no config may exist before the second. */
#include "tests/testutil.h"

static char out[1 << 16]; /* the whole config reference (16 KB and growing) */

static dpt_model *toy_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w, int num_classes,
                            dpt_error *err)
{
    dpt_model *model = dpt_model_new(ctx, "toy", NULL);
    dpt_model_param(model, "scale", 1, (int64_t[]){dpt_config_int(cfg, "model", "toy_width")});
    (void)c, (void)h, (void)w, (void)num_classes, (void)err;
    return model;
}

/* A program's model with a first-day mistake: its forward asks the batch for a field the data
 * has not got (NULL) and hands it to an op, after one op of its own was recorded. */
static dpt_tensor *crashy_forward(dpt_model *model, dpt_ctx *ctx, const dpt_batch *batch)
{
    dpt_tensor *w = dpt_model_param_at(model, 0);
    dpt_tensor *h = dpt_matmul(ctx, dpt_flatten(ctx, batch->x), w); /* recorded: matmul of layer head */
    dpt_tensor *ids = dpt_batch_get(batch, "tokens");               /* images only here: NULL */
    return dpt_add(ctx, h, dpt_sum_last(ctx, dpt_embedding(ctx, w, ids), false));
}

static dpt_model *crashy_build(dpt_ctx *ctx, const dpt_config *cfg, int64_t c, int64_t h, int64_t w, int num_classes,
                               dpt_error *err)
{
    dpt_model *model = dpt_model_new(ctx, "crashy", NULL);
    dpt_model_param(model, "head.weight", 2, (int64_t[]){c * h * w, num_classes});
    dpt_model_set_batch_forward(model, crashy_forward);
    (void)cfg, (void)err;
    return model;
}

/* A multi-label head of a program's own: 2 logits from the regression source's 16 x values,
 * trained with bce_with_logits against its y (2 values a sample). */
static dpt_tensor *multilabel_forward(dpt_model *model, dpt_ctx *ctx, const dpt_batch *batch)
{
    return dpt_affine(ctx, dpt_batch_get(batch, "x"), dpt_model_param_at(model, 0), dpt_model_param_at(model, 1));
}

static dpt_model *multilabel_build(dpt_ctx *ctx, const dpt_config *cfg, const dpt_dataset *data, dpt_error *err)
{
    dpt_model *model = dpt_model_new(ctx, "multilabel", NULL);
    dpt_init_normal(ctx, dpt_model_param(model, "head.weight", 2, (int64_t[]){2, 16}), 0.5f);
    dpt_model_param(model, "head.bias", 1, (int64_t[]){2});
    dpt_model_set_batch_forward(model, multilabel_forward);
    dpt_model_set_task(model, &(dpt_task){.loss = "bce_with_logits", .target = "y"});
    (void)cfg, (void)data, (void)err;
    return model;
}
static const dpt_model_impl multilabel_impl = {.build = multilabel_build};

static const dpt_config_key toy_keys[] = {
    {NULL, "toy_width", DPT_KEY_INT, "4", 1, 64, NULL, "units", 0},
    {NULL, "toy_mode", DPT_KEY_ENUM, "fast", 1, 0, "fast|exact", "how", 0},
    {NULL, "bn_momentum", DPT_KEY_FLOAT, "0.1", 0, 1, NULL, "batch norm running-statistics momentum", 0}, /* shared */
    {"toy_data", "noise", DPT_KEY_FLOAT, "0.5", 0, 1, NULL, "a section of its own", 0},
};

static void reg_bad_model_name(void) { exit(dpt_register_model("Bad Name", toy_build) ? 0 : 1); }
static void reg_builtin_name(void) { exit(dpt_register_model("mlp", toy_build) ? 0 : 1); }
static void reg_twice(void) { exit(dpt_register_model("twice", toy_build) && !dpt_register_model("twice", toy_build) ? 1 : 0); }
static void reg_bad_default(void)
{
    dpt_config_key k = {NULL, "toy_big", DPT_KEY_INT, "100", 1, 64, NULL, "units", 0};
    exit(dpt_register_config_keys("toy", &k, 1) ? 0 : 1);
}
static void reg_clash_runtime(void)
{
    dpt_config_key k = {"train", "batch", DPT_KEY_FLOAT, "1", 0, 0, NULL, "not the runtime's", 0};
    exit(dpt_register_config_keys("toy", &k, 1) ? 0 : 1);
}
static void reg_clash_model(void)
{
    dpt_config_key k = {NULL, "depth", DPT_KEY_INT, "50", 1, 1000, NULL, "another default than resnet's", 0};
    exit(dpt_register_config_keys("toy", &k, 1) ? 0 : 1);
}
static void reg_enum_without_choices(void)
{
    dpt_config_key k = {NULL, "toy_kind", DPT_KEY_ENUM, "a", 0, 0, NULL, "kind", 0};
    exit(dpt_register_config_keys("toy", &k, 1) ? 0 : 1);
}

/* Each in a child (the parent's schema stays clean): exit 1 = refused, with the message. */
static void test_bad_registrations_refused(void **state)
{
    (void)state;
    struct {
        void (*fn)(void);
        const char *msg;
    } cases[] = {
        {reg_bad_model_name, "dpt_register(model Bad Name): a name of lower-case letters"},
        {reg_builtin_name, "dpt_register(model mlp): a built-in one has this name"},
        {reg_twice, "dpt_register(model twice): registered twice"},
        {reg_bad_default, "[model] toy_big = 100: out of range, must be between 1 and 64"},
        {reg_clash_runtime, "[train] batch is already a key of the runtime"},
        {reg_clash_model, "[model] depth is already a key of resnet"},
        {reg_enum_without_choices, "an enum needs its choices"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_child_ends(cases[i].fn, 1, cases[i].msg, NULL);
}

static void test_registered_model_and_keys(void **state)
{
    (void)state;
    assert_true(dpt_register_model("toy", toy_build));
    assert_true(dpt_register_model("crashy", crashy_build));
    const dpt_registration multilabel = {DPT_KIND_MODEL, "multilabel", "2 logits from x, bce_with_logits", NULL, 0,
                                         &multilabel_impl};
    assert_true(dpt_register(&multilabel));
    assert_true(dpt_register_config_keys("toy", toy_keys, 4));
    /* the INI reads them like built-in keys; defaults fill the rest */
    const char *ini = "[model]\nname = toy\ntoy_width = 7\n[toy_data]\nnoise = 0.25\n";
    dpt_error err;
    dpt_config *cfg = dpt_config_parse(ini, strlen(ini), "toy.ini", &err);
    if (!cfg) fail_msg("%s", err.msg);
    assert_int_equal(dpt_config_int(cfg, "model", "toy_width"), 7);
    assert_string_equal(dpt_config_str(cfg, "model", "toy_mode"), "fast");
    assert_true(dpt_config_float(cfg, "toy_data", "noise") == 0.25);
    assert_string_equal(dpt_config_where(cfg, "model", "toy_width"), "toy.ini:3");
    /* the model builds through the registry, with its key */
    dpt_ctx *ctx = test_ctx(1, 1);
    dpt_model *m = dpt_model_build(ctx, cfg, 1, 28, 28, 10, &err);
    if (!m) fail_msg("%s", err.msg);
    assert_int_equal(dpt_model_param_count(m), 7);
    dpt_model_free(m);
    /* the key is in the hash: changing it changes the hash */
    uint64_t h = dpt_config_hash(cfg);
    assert_true(dpt_config_set(cfg, "model.toy_width=8", &err));
    assert_true(dpt_config_hash(cfg) != h);
    /* a bad value, a typo: the same messages as for built-in keys */
    assert_false(dpt_config_set(cfg, "model.toy_width=65", &err));
    assert_contains(err.msg, "[model] toy_width = 65: out of range, must be between 1 and 64");
    assert_false(dpt_config_set(cfg, "model.toy_mode=slow", &err));
    assert_contains(err.msg, "not one of fast|exact");
    assert_false(dpt_config_set(cfg, "model.toy_widht=3", &err));
    assert_contains(err.msg, "did you mean 'toy_width'?");
    /* an unknown model lists the registered ones: the built-in ones by name, then the program's */
    assert_false(dpt_config_set(cfg, "model.name=toys", &err));
    assert_contains(err.msg, "[model] name = toys: not a registered model");
    assert_contains(err.msg, "known models are cnn, gpt, llama, mlp, resnet, vit, toy");
    dpt_config_free(cfg);
    dpt_ctx_free(ctx);
    /* the reference: the model's keys under [model], a shared key with both owners, its section */
    char path[] = "/tmp/dpt_ref_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w+");
    dpt_config_print_reference(f);
    rewind(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    fclose(f), unlink(path);
    assert_contains(out, "| `toy_width` | int in [1, 64] | `4` | toy: units |");
    assert_contains(out, "| `bn_momentum` | float in [0, 1] | `0.1` | cnn, resnet, toy: batch norm");
    assert_contains(out, "## [toy_data]");
    assert_true(strstr(out, "## [model]") < strstr(out, "`toy_width`") && strstr(out, "`toy_width`") < strstr(out, "## [data]"));
}

static void reg_late(void)
{
    dpt_config_key k = {NULL, "late", DPT_KEY_INT, "1", 0, 0, NULL, "too late", 0};
    exit(dpt_register_config_keys("toy", &k, 1) ? 0 : 1);
}

static void test_registration_after_a_config_refused(void **state)
{
    (void)state;
    dpt_config *cfg = dpt_config_defaults(); /* a config exists (the previous test made some too) */
    assert_child_ends(reg_late, 1, "called after a config was made", NULL);
    dpt_config_free(cfg);
}

static char crash_ini[] = "/tmp/dpt_crash_XXXXXX", crash_xml[64];

static void train_crashy(void)
{
    char *argv[] = {"train", crash_ini, "--set", "train.threads=1", "--junit", crash_xml, NULL};
    exit(dpt_train_main(6, argv));
}

/* A crash in a program's own model is reported (signal, step, the last op recorded and its layer,
 * a hint naming the usual causes, the call stack), and the process still ends by the signal. */
static void test_crash_report(void **state)
{
    (void)state;
#ifdef __SANITIZE_ADDRESS__
    skip(); /* make asan: the sanitizers see the NULL first and report it themselves (the better report) */
#endif
    int fd = mkstemp(crash_ini);
    assert_true(fd >= 0);
    const char *ini = "[model]\nname = crashy\n[data]\nsource = synthetic\nsynthetic_shape = 1,4,4\n"
                      "synthetic_samples = 64\nsynthetic_classes = 3\n[train]\nbatch = 16\nepochs = 1\n"
                      "memory_check = false\n[checkpoint]\nfinal = false\n";
    assert_true(write(fd, ini, strlen(ini)) == (ssize_t)strlen(ini));
    close(fd);
    snprintf(crash_xml, sizeof crash_xml, "%s.xml", crash_ini);
    unlink(crash_xml);
    int rc = run_in_child(train_crashy, out, sizeof out);
    unlink(crash_ini);
    if (rc != 128 + SIGSEGV) fail_msg("exit %d, expected %d (SIGSEGV); stderr:\n%s", rc, 128 + SIGSEGV, out);
    assert_contains(out, "dptrain: crashed: SIGSEGV: a read or write of memory it may not touch, address 0x");
    assert_contains(out, ", rank 0, before step 1\n"); /* the forward traced at batch 1 meets it first */
    assert_contains(out, "the tape holds 1 op of this forward; the last recorded: matmul (layer head)");
    assert_contains(out, "dpt_batch_get returns NULL for a field the data does not have");
    assert_contains(out, "call stack:");
    /* --junit: a CI's reporter gets the crash as the run's error, the config as the suite */
    char xml[4096] = "";
    FILE *f = fopen(crash_xml, "r");
    if (!f) fail_msg("--junit %s: no report after the crash", crash_xml);
    xml[fread(xml, 1, sizeof xml - 1, f)] = '\0';
    fclose(f);
    unlink(crash_xml);
    assert_contains(xml, "<testsuite name=\"/tmp/dpt_crash_");
    assert_contains(xml, "<error type=\"crash\" message=\"the run crashed (SIGSEGV, SIGBUS, SIGFPE or SIGILL");
    assert_contains(xml, "</testsuites>\n");
}

static char bce_dir[] = "/tmp/dpt_bce_XXXXXX", bce_ini[96], bce_csv[96];

static void bce_child(const char *mode)
{
    dup2(2, 1); /* the eval line is on stdout: run_in_child keeps stderr */
    char dir[128];
    snprintf(dir, sizeof dir, "checkpoint.dir=%s/ck", bce_dir);
    char *argv[12] = {"train", bce_ini, "--set", dir, "--set", "train.threads=1"};
    int n = 6;
    if (!strcmp(mode, "train")) argv[n++] = "--set", argv[n++] = "train.max_steps=30";
    else argv[n++] = (char *)mode, argv[n++] = "latest";
    if (!strcmp(mode, "--predict")) argv[n++] = "--out", argv[n++] = bce_csv;
    argv[n] = NULL;
    exit(dpt_train_main(n, argv));
}
static void bce_train(void) { bce_child("train"); }
static void bce_predict(void) { bce_child("--predict"); }
static void bce_eval(void) { bce_child("--eval"); }

/* A program's model whose task is bce_with_logits: --predict writes each value's probability
 * (the sigmoid of its logit: p0, p1), and the binary cross-entropy of those rows against their
 * targets is what --eval reports as the test loss. */
static void test_bce_predict(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(bce_dir));
    snprintf(bce_ini, sizeof bce_ini, "%s/m.ini", bce_dir);
    snprintf(bce_csv, sizeof bce_csv, "%s/p.csv", bce_dir);
    FILE *f = fopen(bce_ini, "w");
    fputs("[model]\nname = multilabel\n[data]\nsource = regression\nregression_features = 16\nregression_outputs = 2\n"
          "test_limit = 256\n[train]\nbatch = 32\n"
          "eval_batch = 64\nepochs = 1\n[checkpoint]\nfinal = true\n", f);
    fclose(f);
    int rc = run_in_child(bce_train, out, sizeof out);
    if (rc != 0) fail_msg("training: exit %d\n%s", rc, out);
    assert_contains(out, "loss bce_with_logits");
    rc = run_in_child(bce_predict, out, sizeof out);
    if (rc != 0) fail_msg("--predict: exit %d\n%s", rc, out);
    rc = run_in_child(bce_eval, out, sizeof out);
    if (rc != 0) fail_msg("--eval: exit %d\n%s", rc, out);
    const char *at = strstr(out, "test loss ");
    assert_non_null(at);
    double eval_loss = atof(at + strlen("test loss "));
    f = fopen(bce_csv, "r");
    assert_non_null(f);
    char line[1024];
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "index,target0,target1,p0,p1\n");
    double total = 0;
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        double t[2], p[2];
        int index;
        assert_int_equal(sscanf(line, "%d,%lf,%lf,%lf,%lf", &index, &t[0], &t[1], &p[0], &p[1]), 5);
        for (int j = 0; j < 2; j++) {
            if (!(p[j] > 0 && p[j] < 1)) fail_msg("row %d: p%d = %g is not a probability", index, j, p[j]);
            total -= t[j] * log(p[j]) + (1 - t[j]) * log(1 - p[j]);
        }
        rows++;
    }
    fclose(f);
    assert_int_equal(rows, 256);
    double csv_loss = total / (2.0 * rows);
    if (fabs(csv_loss - eval_loss) > 1e-3 * (1 + eval_loss)) /* --eval prints 4 decimals */
        fail_msg("the CSV's binary cross-entropy %.6f, --eval's test loss %.6f", csv_loss, eval_loss);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", bce_dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_registrations_refused),
        cmocka_unit_test(test_registered_model_and_keys),
        cmocka_unit_test(test_registration_after_a_config_refused),
        cmocka_unit_test(test_crash_report),
        cmocka_unit_test(test_bce_predict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
