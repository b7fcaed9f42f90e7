/* test_csv.c: [data] source = csv (data/csv.c) on files it writes: RFC 4180 quoting, CRLF, a
 * byte-order mark, blank lines, gzip, the delimiter and header found, class names in sorted order,
 * standardisation against float64 sums, the held-out split, --predict --input's two layouts, and
 * every malformed table refused with its file, line and column. (tests/csv.sh: the same samples
 * as the IDX reader's, bit for bit, through training.) */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/testutil.h"
#include "data/data.h"

static char tmpdir[256], home[4096];

/* The tests run in a folder of their own: the source reads paths from the working folder. */
static int make_tmpdir(void **state)
{
    (void)state;
    if (!getcwd(home, sizeof home) || test_mkdtemp(tmpdir, sizeof tmpdir, "dpt_test_csv")) return -1;
    return chdir(tmpdir);
}

static int remove_tmpdir(void **state)
{
    (void)state;
    return chdir(home) || test_rmrf(tmpdir);
}

/* tmpdir/name holding n bytes of text (gzip-compressed when gz); its path. */
static const char *put(const char *name, const char *text, size_t n, bool gz)
{
    static char path[4][512];
    static int slot;
    char *out = path[slot++ % 4];
    snprintf(out, 512, "%s/%s", tmpdir, name);
    if (gz) {
        gzFile f = gzopen(out, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, text, (unsigned)n), (int)n);
        gzclose(f);
    } else {
        FILE *f = fopen(out, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(text, 1, n, f), n);
        fclose(f);
    }
    return out;
}

static const char *put_text(const char *name, const char *text)
{
    return put(name, text, strlen(text), false);
}

/* The csv source over [data] sets; false with err. */
static bool open_sets(const char *const *sets, int n, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    dpt_config *cfg = dpt_config_defaults();
    if (!dpt_config_set(cfg, "data.source=csv", err)) fail_msg("%s", err->msg);
    for (int i = 0; i < n; i++)
        if (!dpt_config_set(cfg, sets[i], err)) fail_msg("%s", err->msg);
    bool ok = dpt_data_open(cfg, train, test, err);
    dpt_config_free(cfg);
    return ok;
}

/* Sample i's features (x) and its label or targets (into lab or y). */
static void sample(const dpt_dataset *ds, int64_t i, float *x, int32_t *lab, float *y)
{
    ds->get(ds, i, (void *[]){x, lab ? (void *)lab : (void *)y});
}

/* A semicolon table with a byte-order mark, CRLF, a blank line, quoted cells holding the
 * delimiter, a doubled quote and a line break, spaces around a number, no final line break. */
static const char quoted_table[] = "\xEF\xBB\xBF"
                                   "id;\"width; cm\";height;kind\r\n"
                                   "1;1.5;10;\"cat\"\r\n"
                                   "\r\n"
                                   "2;\"2.5\";20;dog\r\n"
                                   "3; 3.5 ;30;\"ca\"\"t\"\r\n"
                                   "4;4.5;40;\"multi\nline\"\r\n"
                                   "5;5.5;50;dog";

static void check_quoted(bool gz)
{
    put("q.csv", quoted_table, sizeof quoted_table - 1, gz);
    put_text("qt.csv", "id;width;height;kind\n9;3.5;30;cat\n"); /* its header differs: refused below */
    put_text("qt2.csv", "id;\"width; cm\";height;kind\n9;3.5;30;cat\n10;1.5;0;dog\n");
    const char *sets[] = {"data.csv_train=q.csv", "data.csv_test=qt2.csv", "data.csv_target=kind",
                          "data.csv_exclude=id"};
    dpt_dataset *train, *test;
    dpt_error err;
    if (!open_sets(sets, 4, &train, &test, &err)) fail_msg("%s", err.msg);
    assert_int_equal(train->n, 5);
    assert_int_equal(test->n, 2);
    assert_int_equal(train->fields[0].shape[0], 2); /* width and height */
    assert_int_equal(train->num_classes, 4);
    /* classes in byte order: ca"t < cat < dog < multi\nline */
    const char *names[] = {"ca\"t", "cat", "dog", "multi\nline"};
    for (int c = 0; c < 4; c++)
        assert_string_equal(dpt_dataset_class_name(train, c), names[c]);
    const int32_t labels[] = {1, 2, 0, 3, 2};
    assert_non_null(train->class_counts); /* ca"t 1, cat 1, dog 2, multi\nline 1 */
    assert_true(train->class_counts[0] == 1 && train->class_counts[1] == 1 && train->class_counts[2] == 2 &&
                train->class_counts[3] == 1);
    char line[256];
    dpt_dataset_describe_classes(train, line, sizeof line);
    assert_string_equal(line,
                        "4 classes: 0 ca\"t (1), 1 cat (1), 2 dog (2), 3 multi?line (1)"); /* one line */
    /* standardised with the training rows' float64 mean and population standard deviation */
    double w[] = {1.5, 2.5, 3.5, 4.5, 5.5}, h[] = {10, 20, 30, 40, 50};
    double mw = 0, mh = 0, vw = 0, vh = 0;
    for (int i = 0; i < 5; i++)
        mw += w[i] / 5, mh += h[i] / 5;
    for (int i = 0; i < 5; i++)
        vw += (w[i] - mw) * (w[i] - mw) / 5, vh += (h[i] - mh) * (h[i] - mh) / 5;
    for (int i = 0; i < 5; i++) {
        float x[2];
        int32_t lab;
        sample(train, i, x, &lab, NULL);
        assert_int_equal(lab, labels[i]);
        assert_float_equal(x[0], (w[i] - mw) / sqrt(vw), 1e-6);
        assert_float_equal(x[1], (h[i] - mh) / sqrt(vh), 1e-6);
    }
    /* the test rows with the training rows' numbers */
    float x[2];
    int32_t lab;
    sample(test, 1, x, &lab, NULL);
    assert_int_equal(lab, 2);
    assert_float_equal(x[0], (1.5 - mw) / sqrt(vw), 1e-6);
    assert_float_equal(x[1], (0 - mh) / sqrt(vh), 1e-6);
    dpt_dataset_free(train), dpt_dataset_free(test);
    /* a test file whose header differs */
    const char *other[] = {"data.csv_train=q.csv", "data.csv_test=qt.csv", "data.csv_target=kind",
                           "data.csv_exclude=id"};
    assert_false(open_sets(other, 4, &train, &test, &err));
    if (!strstr(err.msg, "qt.csv: column 1 is named 'width', and in the training file"))
        fail_msg("%s", err.msg);
}

static void test_quoting_crlf_bom_gzip(void **state)
{
    (void)state;
    check_quoted(false);
    check_quoted(true);
}

/* No header and names as labels (iris's layout): the first row is data; a header is found when a
 * column's first cell is a name over numbers; targets by negative index, several for regression;
 * comma, tab and semicolon found. */
static void test_header_and_delimiter(void **state)
{
    (void)state;
    put_text("nohead.csv", "5.1,3.5,setosa\n4.9,3.0,setosa\n6.3,3.3,virginica\n5.8,2.7,versicolor\n");
    const char *a[] = {"data.csv_train=nohead.csv", "data.csv_test=nohead.csv", "data.csv_standardize=false"};
    dpt_dataset *train, *test;
    dpt_error err;
    if (!open_sets(a, 3, &train, &test, &err)) fail_msg("%s", err.msg);
    assert_int_equal(train->n, 4);
    assert_int_equal(train->num_classes, 3);
    float x[2];
    int32_t lab;
    sample(train, 0, x, &lab, NULL);
    assert_float_equal(x[0], 5.1f, 0);
    assert_float_equal(x[1], 3.5f, 0);
    assert_int_equal(lab, 0); /* setosa < versicolor < virginica */
    sample(train, 2, x, &lab, NULL);
    assert_int_equal(lab, 2);
    dpt_dataset_free(train), dpt_dataset_free(test);

    put_text("tab.tsv", "a\tb\ty1\ty2\n1\t2\t3\t4\n5\t6\t7\t8\n");
    const char *b[] = {"data.csv_train=tab.tsv", "data.csv_test=tab.tsv", "data.csv_task=regression",
                       "data.csv_target=y2, -2", "data.csv_standardize=false"};
    if (!open_sets(b, 5, &train, &test, &err)) fail_msg("%s", err.msg);
    assert_int_equal(train->n, 2);
    assert_int_equal(train->fields[0].shape[0], 2);
    assert_int_equal(train->fields[1].shape[0], 2);
    assert_true(train->fields[1].target && train->fields[1].dtype == DPT_F32);
    assert_string_equal(train->task.loss, "mse");
    float y[2];
    sample(train, 1, x, NULL, y);
    assert_float_equal(x[0], 5, 0);
    assert_float_equal(x[1], 6, 0);
    assert_float_equal(y[0], 8, 0); /* y2 first, as listed */
    assert_float_equal(y[1], 7, 0);
    dpt_dataset_free(train), dpt_dataset_free(test);

    /* csv_header = no: a row of names is data, and refused as such (naming line 1) */
    put_text("named.csv", "a,b,label\n1,2,0\n3,4,1\n");
    const char *c[] = {"data.csv_train=named.csv", "data.csv_test=named.csv", "data.csv_header=no"};
    assert_false(open_sets(c, 3, &train, &test, &err));
    assert_non_null(strstr(err.msg, "named.csv: line 1, column 0: 'a' is not a number"));
    /* integer labels as they are: 0 and 1 of a two-column-feature file, at least 2 classes */
    const char *d[] = {"data.csv_train=named.csv", "data.csv_test=named.csv"};
    if (!open_sets(d, 2, &train, &test, &err)) fail_msg("%s", err.msg);
    assert_int_equal(train->num_classes, 2);
    assert_null(dpt_dataset_class_name(train, 0)); /* numbers, not names */
    char line[256];
    dpt_dataset_describe_classes(train, line, sizeof line);
    assert_string_equal(line, "2 classes: 0 (1), 1 (1)");
    dpt_dataset_free(train), dpt_dataset_free(test);
}

/* Many classes: the first 10 and the last, counted. */
static void test_many_classes(void **state)
{
    (void)state;
    char text[4096];
    size_t used = (size_t)snprintf(text, sizeof text, "v,label\n");
    for (int i = 0; i < 30; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%d,c%02d\n", i, i % 15);
    put_text("many.csv", text);
    const char *sets[] = {"data.csv_train=many.csv", "data.csv_test=many.csv"};
    dpt_dataset *train, *test;
    dpt_error err;
    if (!open_sets(sets, 2, &train, &test, &err)) fail_msg("%s", err.msg);
    char line[512];
    dpt_dataset_describe_classes(train, line, sizeof line);
    assert_string_equal(
        line, "15 classes: 0 c00 (2), 1 c01 (2), 2 c02 (2), 3 c03 (2), 4 c04 (2), 5 c05 (2), 6 c06 (2), "
              "7 c07 (2), 8 c08 (2), 9 c09 (2), ..., 14 c14 (2)");
    dpt_dataset_free(train), dpt_dataset_free(test);
}

/* Without csv_test: round(fraction x rows) held out by the seed, every row in exactly one set,
 * the same split for the same seed. */
static void test_held_out_split(void **state)
{
    (void)state;
    char text[4096];
    size_t used = (size_t)snprintf(text, sizeof text, "v,label\n");
    for (int i = 0; i < 40; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%d,%d\n", i, i % 3);
    put_text("split.csv", text);
    int64_t seen[40] = {0}, first_test[10];
    for (int run = 0; run < 3; run++) {
        const char *sets[] = {"data.csv_train=split.csv", "data.csv_test_fraction=0.25",
                              "data.csv_standardize=false", run == 2 ? "train.seed=7" : "train.seed=42"};
        dpt_dataset *train, *test;
        dpt_error err;
        if (!open_sets(sets, 4, &train, &test, &err)) fail_msg("%s", err.msg);
        assert_int_equal(train->n, 30);
        assert_int_equal(test->n, 10);
        bool differs = false;
        for (int s = 0; s < 2; s++) {
            const dpt_dataset *ds = s ? test : train;
            for (int64_t i = 0; i < ds->n; i++) {
                float x;
                int32_t lab;
                sample(ds, i, &x, &lab, NULL);
                assert_int_equal(lab, (int)x % 3);
                if (run == 0) seen[(int)x]++;
                if (s && run == 0) first_test[i] = (int64_t)x;
                if (s && run > 0) differs |= first_test[i] != (int64_t)x;
                if (s && i > 0) { /* file order within a set */
                    float prev;
                    sample(ds, i - 1, &prev, &lab, NULL);
                    assert_true(prev < x);
                }
            }
        }
        assert_int_equal(differs, run == 2); /* seed 42 again: the same rows; seed 7: others */
        dpt_dataset_free(train), dpt_dataset_free(test);
    }
    for (int i = 0; i < 40; i++)
        assert_int_equal(seen[i], 1);
}

/* --predict --input: the training file's columns with or without the target, read as the test
 * set is (same scaling), unlabelled. */
static void test_predict_input(void **state)
{
    (void)state;
    put_text("tr.csv", "id,a,b,kind\n1,1,10,x\n2,2,20,y\n3,3,30,x\n4,4,40,y\n");
    const char *sets[] = {"data.csv_train=tr.csv", "data.csv_test=tr.csv", "data.csv_exclude=id"};
    dpt_dataset *train, *test, *in;
    dpt_error err;
    if (!open_sets(sets, 3, &train, &test, &err)) fail_msg("%s", err.msg);
    const char *inputs[] = {"id,a,b,kind\n9,3,30,y\n", "id,a,b\n9,3,30\n"};
    for (int k = 0; k < 2; k++) {
        const char *path = put_text("in.csv", inputs[k]);
        if (!dpt_csv_open_input(path, test, &in, &err)) fail_msg("%s", err.msg);
        assert_true(in->unlabelled);
        assert_int_equal(in->n, 1);
        float x[2], want[2];
        int32_t lab, tlab;
        sample(in, 0, x, &lab, NULL);
        sample(test, 2, want, &tlab, NULL); /* row 3 of the training file: a = 3, b = 30 */
        assert_memory_equal(x, want, sizeof x);
        assert_int_equal(lab, 0);
        assert_string_equal(dpt_dataset_class_name(in, 1), "y");
        dpt_dataset_free(in);
    }
    const char *bad[][2] = {
        {"id,a\n9,3\n", "in.csv: 2 columns; the model's training file had 4, 1 of them target"},
        {"id,b,a\n9,3,30\n", "column 1 is named 'b', where the training file had 'a'"},
        {"id,a,b\n9,3,\n", "line 2, column 2 ('b'): '' is a missing value (empty)"}};
    for (int k = 0; k < 3; k++) {
        const char *path = put_text("in.csv", bad[k][0]);
        assert_false(dpt_csv_open_input(path, test, &in, &err));
        if (!strstr(err.msg, bad[k][1])) fail_msg("case %d: %s", k, err.msg);
    }
    dpt_dataset_free(train), dpt_dataset_free(test);
}

/* Categorical columns one-hot over the training rows' sorted values (auto: columns of text; or
 * listed, codes too), missing cells with csv_missing = mean (a number: its column's mean; a
 * category: all 0), number columns standardised with the imputed values in (scikit-learn's
 * SimpleImputer then StandardScaler), one-hot values left 0 and 1; an unseen category refused. */
static void test_categorical_and_missing(void **state)
{
    (void)state;
    put_text("t.csv", "id,age,sex,port,class,fare,survived\n"
                      "1,22,male,S,3,7.25,0\n"
                      "2,38,female,C,1,71.28,1\n"
                      "3,,female,S,3,7.92,1\n"
                      "4,35,female,NA,1,53.1,1\n"
                      "5,35,male,Q,3,8.05,0\n");
    const char *sets[] = {"data.csv_train=t.csv",     "data.csv_test=t.csv",   "data.csv_exclude=id",
                          "data.csv_target=survived", "data.csv_missing=mean", "data.csv_standardize=false"};
    dpt_dataset *train, *test, *in;
    dpt_error err;
    if (!open_sets(sets, 6, &train, &test, &err)) fail_msg("%s", err.msg);
    /* age, sex (female, male), port (C, Q, S), class (a number), fare */
    assert_int_equal(train->fields[0].shape[0], 1 + 2 + 3 + 1 + 1);
    assert_string_equal(train->name, "csv train (5 rows, 2 one-hot columns)");
    const float want[5][8] = {{22, 0, 1, 0, 0, 1, 3, 7.25f},
                              {38, 1, 0, 1, 0, 0, 1, 71.28f},
                              {32.5f, 1, 0, 0, 0, 1, 3, 7.92f},
                              {35, 1, 0, 0, 0, 0, 1, 53.1f},
                              {35, 0, 1, 0, 1, 0, 3, 8.05f}};
    for (int i = 0; i < 5; i++) {
        float x[8];
        int32_t lab;
        sample(train, i, x, &lab, NULL);
        for (int j = 0; j < 8; j++)
            if (x[j] != want[i][j]) fail_msg("row %d value %d: %g, expected %g", i, j, x[j], want[i][j]);
    }
    dpt_dataset_free(train), dpt_dataset_free(test);

    /* standardised: age and fare (imputed value included), class too; one-hot stays 0/1 */
    const char *std[] = {"data.csv_train=t.csv", "data.csv_test=t.csv", "data.csv_exclude=id",
                         "data.csv_target=survived", "data.csv_missing=mean"};
    if (!open_sets(std, 5, &train, &test, &err)) fail_msg("%s", err.msg);
    double ages[5] = {22, 38, 32.5, 35, 35}, m = 0, v = 0;
    for (int i = 0; i < 5; i++)
        m += ages[i] / 5;
    for (int i = 0; i < 5; i++)
        v += (ages[i] - m) * (ages[i] - m) / 5;
    for (int i = 0; i < 5; i++) {
        float x[8];
        int32_t lab;
        sample(train, i, x, &lab, NULL);
        assert_float_equal(x[0], (ages[i] - m) / sqrt(v), 1e-6);
        for (int j = 1; j < 6; j++)
            assert_true(x[j] == want[i][j]);
    }
    /* --input: a known row, then a port never seen in training */
    const char *path = put_text("in.csv", "id,age,sex,port,class,fare\n9,38,female,C,1,71.28\n");
    if (!dpt_csv_open_input(path, test, &in, &err)) fail_msg("%s", err.msg);
    float a[8], b[8];
    int32_t lab;
    sample(in, 0, a, &lab, NULL);
    sample(test, 1, b, &lab, NULL);
    assert_memory_equal(a, b, sizeof a);
    dpt_dataset_free(in);
    path = put_text("in.csv", "id,age,sex,port,class,fare\n9,38,female,X,1,71.28\n");
    assert_false(dpt_csv_open_input(path, test, &in, &err));
    if (!strstr(err.msg,
                "in.csv: line 2, column 3 ('port'): 'X' is not one of the 3 categories of the training rows"))
        fail_msg("%s", err.msg);
    dpt_dataset_free(train), dpt_dataset_free(test);
    /* csv_unknown_category = ignore: the unseen port is all 0, the rest as the known row's */
    const char *ignore[] = {"data.csv_train=t.csv",  "data.csv_test=t.csv",
                            "data.csv_exclude=id",   "data.csv_target=survived",
                            "data.csv_missing=mean", "data.csv_unknown_category=ignore"};
    if (!open_sets(ignore, 6, &train, &test, &err)) fail_msg("%s", err.msg);
    if (!dpt_csv_open_input(path, test, &in, &err)) fail_msg("%s", err.msg);
    sample(in, 0, a, &lab, NULL);
    sample(test, 1, b, &lab, NULL); /* 38, female, C, 1, 71.28: C is b[3] */
    assert_true(a[3] == 0 && a[4] == 0 && a[5] == 0 && b[3] == 1);
    a[3] = b[3];
    assert_memory_equal(a, b, sizeof a);
    dpt_dataset_free(in), dpt_dataset_free(train), dpt_dataset_free(test);

    /* listed: a column of codes read as categories ("1" and "3") */
    const char *listed[] = {"data.csv_train=t.csv",      "data.csv_test=t.csv",
                            "data.csv_exclude=id",       "data.csv_target=survived",
                            "data.csv_missing=mean",     "data.csv_categorical=sex,port,class",
                            "data.csv_standardize=false"};
    if (!open_sets(listed, 7, &train, &test, &err)) fail_msg("%s", err.msg);
    assert_int_equal(train->fields[0].shape[0], 1 + 2 + 3 + 2 + 1);
    float x[9];
    sample(train, 1, x, &lab, NULL);
    assert_true(x[6] == 1 && x[7] == 0 && x[8] == 71.28f); /* class 1 of {1, 3} */
    dpt_dataset_free(train), dpt_dataset_free(test);

    /* "NaN", as pandas writes a missing value, is one: the column's mean (22 and 38) */
    put_text("nan.csv", "a,y\n22,0\nNaN,1\n38,0\n");
    const char *nan[] = {"data.csv_train=nan.csv", "data.csv_test=nan.csv", "data.csv_missing=mean",
                         "data.csv_standardize=false"};
    if (!open_sets(nan, 4, &train, &test, &err)) fail_msg("%s", err.msg);
    sample(train, 1, x, &lab, NULL);
    assert_true(x[0] == 30);
    dpt_dataset_free(train), dpt_dataset_free(test);
    /* missing values stop the run by default, naming the cell and the way out */
    const char *strict[] = {"data.csv_train=t.csv", "data.csv_test=t.csv", "data.csv_exclude=id",
                            "data.csv_target=survived"};
    assert_false(open_sets(strict, 4, &train, &test, &err));
    if (!strstr(err.msg, "t.csv: line 4, column 1 ('age'): '' is a missing value (empty)") ||
        !strstr(err.msg, "csv_missing = mean"))
        fail_msg("%s", err.msg);
    /* a column of names, nearly all distinct, is not categories (auto); listed, it is */
    char text[8192];
    size_t used = (size_t)snprintf(text, sizeof text, "name,v,y\n");
    for (int i = 0; i < 40; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "\"Person, %d\",%d,%d\n", i, i, i % 2);
    put_text("names.csv", text);
    const char *names[] = {"data.csv_train=names.csv", "data.csv_test=names.csv"};
    assert_false(open_sets(names, 2, &train, &test, &err));
    if (!strstr(err.msg, "names.csv: column 0 ('name') holds text with 40 distinct values in 40 rows"))
        fail_msg("%s", err.msg);
    const char *names_listed[] = {"data.csv_train=names.csv", "data.csv_test=names.csv",
                                  "data.csv_categorical=name"};
    if (!open_sets(names_listed, 3, &train, &test, &err)) fail_msg("%s", err.msg);
    assert_int_equal(train->fields[0].shape[0], 41);
    dpt_dataset_free(train), dpt_dataset_free(test);
    /* a listed column that is the target */
    const char *bad[] = {"data.csv_train=t.csv",  "data.csv_test=t.csv",
                         "data.csv_exclude=id",   "data.csv_target=survived",
                         "data.csv_missing=mean", "data.csv_categorical=survived"};
    assert_false(open_sets(bad, 6, &train, &test, &err));
    assert_non_null(strstr(err.msg, "csv_categorical names column 6, which is a target or excluded"));
}

/* Every malformed table or setting refused, naming the file (or key), the line and the column. */
static void test_refusals(void **state)
{
    (void)state;
    struct {
        const char *text; /* the training file's (NULL: not written again) */
        const char *set[3];
        const char *expect;
    } cases[] = {
        {"a,b,c\n1,2,0\n3,4\n", {NULL}, "bad.csv: line 3 has 2 cells, and line 1 has 3"},
        {"a,b,c\n1,NA,0\n", {NULL}, "bad.csv: line 2, column 1 ('b'): 'NA' is a missing value"},
        {"a,b,c\n1,inf,0\n", {NULL}, "column 1 ('b'): 'inf' is not finite"},
        {"a,b,c\n1,NaN,0\n", {NULL}, "column 1 ('b'): 'NaN' is a missing value"},
        {"a,b,c\n1,nan,0\n", {NULL}, "column 1 ('b'): 'nan' is a missing value"},
        {"a,b,c\n1,2x,0\n", {"data.csv_categorical=none"}, "column 1 ('b'): '2x' is not a number"},
        {"a,b,c\n1,2x,0\n3,4,1\n",
         {NULL},
         "line 2, column 1 ('b'): '2x' is not a number, and line 3 holds one"},
        {"a,b,c\n1,1e39,0\n", {NULL}, "column 1 ('b'): '1e39' is beyond float32's range"},
        {"a,b,c\n1,1e39x,0\n", {"data.csv_categorical=none"}, "column 1 ('b'): '1e39x' is not a number"},
        {"a,b,c\n1,1,0\n1,2,1\n",
         {"data.csv_test=far.csv"},
         "far.csv: line 2: feature 1, 3e+38, is 6e+38 standard"},
        {"a,b,c\n1,\"2,0\n", {NULL}, "bad.csv: line 2: a quoted cell opened there is never closed"},
        {"a,b,c\n1,\"2\"x,0\n", {NULL}, "line 2: text after a quoted cell's closing quote"},
        {"a,b,c\n1,2,0\n", {"data.csv_target=kindd"}, "no column of"},
        {"a,b,kind\n1,2,0\n", {"data.csv_target=kindd"}, "did you mean 'kind'?"},
        {"1,2,0\n1,2,1\n", {"data.csv_target=c"}, "has no header row of names"},
        {"a,b,c\n1,2,0\n", {"data.csv_target=7"}, "names column 7, and"},
        {"a,b,c\n1,2,0\n", {"data.csv_target=a,b"}, "a classifier has one column of labels"},
        {"a,b,c\n1,2,0\n", {"data.csv_exclude=a,b"}, "no features left"},
        {"a,b,c\n1,2,0\n", {"data.csv_exclude=c"}, "which [data] csv_target names too"},
        {"a,a,c\n1,2,0\n", {"data.csv_target=a"}, "has two columns of that name (0 and 1)"},
        {"a,b,c\n1,2,1\n3,4,2\n", {NULL}, "the labels run to 2, and class 0 never occurs"},
        {"a,b,c\n1,2,1\n3,4,5\n", {"data.classes=3"}, "has label 5, and"},
        {"a,b,c\n", {NULL}, "holds a header and no rows"},
        {"a,b,c\n1,2,x\n3,4,\n",
         {NULL},
         "bad.csv: line 3, column 2 ('c'): the label '' is a missing value (empty)"},
        {"a,b,c\n1,2,x\n3,4,NA\n",
         {"data.csv_missing=mean"},
         "line 3, column 2 ('c'): the label 'NA' is a missing value"},
        {"", {NULL}, "holds no rows"},
        {"a,b,c\n1,2,x\n3,4,y\n", {"data.classes=3"}, "names 2 classes"},
        {"a,b,c\n1,2,0\n3,4,1\n",
         {"data.csv_test=", "data.csv_test_fraction=0.1"},
         "holds out 0: the train and test sets need one row"},
        {"a,b,c\n1,2,0\n3,4,1\n", {"data.csv_test=nosuch.csv"}, "nosuch.csv"},
        {"a,b,c\n1,2,x\n3,4,y\n",
         {"data.csv_test=other.csv"},
         "other.csv: line 2: label 'z' is not one of the 2 classes"},
        {"a,b,c\n1,2,0\n3,4,1\n", {"data.csv_test=other.csv"}, "label 'z' is not a class index"},
        {"a,b,c\n1,2,0\n3,4,1\n",
         {"data.csv_task=regression", "data.csv_test=other.csv"},
         "other.csv: line 2, column 2 ('c'): 'z' is not a number"},
    };
    put_text("other.csv", "a,b,c\n1,2,z\n");
    put_text("far.csv", "a,b,c\n1,3e38,1\n"); /* 3e38 fits float32; standardised by b's 1 and 2: 6e38 */
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        put_text("bad.csv", cases[k].text);
        const char *sets[5] = {"data.csv_train=bad.csv", "data.csv_test=bad.csv"};
        int n = 2;
        for (int s = 0; s < 3 && cases[k].set[s]; s++)
            sets[n++] = cases[k].set[s];
        dpt_dataset *train = NULL, *test = NULL;
        dpt_error err;
        if (open_sets(sets, n, &train, &test, &err)) fail_msg("case %zu accepted", k);
        if (!strstr(err.msg, cases[k].expect) || !strstr(err.msg, "\nHINT: "))
            fail_msg("case %zu: expected '%s' (and a HINT), got: %s", k, cases[k].expect, err.msg);
        assert_null(train);
    }
    /* a NUL byte: binary or UTF-16 text, named with its line */
    put("bad.csv", "a,b\n1,\0002\n", 9, false);
    const char *sets[] = {"data.csv_train=bad.csv"};
    dpt_dataset *train, *test;
    dpt_error err;
    assert_false(open_sets(sets, 1, &train, &test, &err));
    assert_non_null(strstr(err.msg, "line 2 holds a NUL byte"));
    /* lines ended by a carriage return alone */
    put_text("bad.csv", "a,b\r1,2\r3,4\r");
    assert_false(open_sets(sets, 1, &train, &test, &err));
    if (!strstr(err.msg, "bad.csv ends its lines with a carriage return alone") ||
        !strstr(err.msg, "tr '\\r' '\\n'"))
        fail_msg("%s", err.msg);
    /* no csv_train */
    const char *none[] = {"data.csv_test=other.csv"};
    assert_false(open_sets(none, 1, &train, &test, &err));
    assert_non_null(strstr(err.msg, "needs [data] csv_train"));
    /* a folder named as the file */
    char sub[300];
    snprintf(sub, sizeof sub, "%s/sub.csv", tmpdir);
    assert_int_equal(mkdir(sub, 0700), 0);
    const char *dir[] = {"data.csv_train=sub.csv"};
    assert_false(open_sets(dir, 1, &train, &test, &err));
    assert_non_null(strstr(err.msg, "is not a regular file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quoting_crlf_bom_gzip),
        cmocka_unit_test(test_header_and_delimiter),
        cmocka_unit_test(test_held_out_split),
        cmocka_unit_test(test_many_classes),
        cmocka_unit_test(test_predict_input),
        cmocka_unit_test(test_categorical_and_missing),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
