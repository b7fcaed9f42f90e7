/* test_sample.c: the next-token draw of --sample (runtime/sample.c). For temperature, top-k and
 * top-p (nucleus) settings, the frequencies of 200,000 draws from fixed logits against the
 * probabilities Hugging Face's warpers give, computed here in float64 from their definitions
 * (TemperatureLogitsWarper, TopKLogitsWarper: scores below the k-th largest removed;
 * TopPLogitsWarper: ascending sort, tokens whose cumulative softmax is <= 1 - top_p removed,
 * the most likely always kept), each within 5 binomial standard errors, and a removed token
 * never drawn; temperature 0 is the first arg-max. */
#include "tests/testutil.h"
#include "runtime/sample.h"

enum { V = 12 };

/* The warpers' distribution over V tokens. */
static void reference(const float *logits, double temperature, int top_k, double top_p, double *prob)
{
    double s[V];
    for (int v = 0; v < V; v++)
        s[v] = (double)logits[v] / temperature;
    if (top_k > 0 && top_k < V) { /* the k-th largest score: below it, -inf */
        double sorted[V];
        memcpy(sorted, s, sizeof s);
        for (int i = 0; i < V; i++) /* selection sort, descending */
            for (int j = i + 1; j < V; j++)
                if (sorted[j] > sorted[i]) {
                    double t = sorted[i];
                    sorted[i] = sorted[j], sorted[j] = t;
                }
        for (int v = 0; v < V; v++)
            if (s[v] < sorted[top_k - 1]) s[v] = -INFINITY;
    }
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < V; v++)
        mx = fmax(mx, s[v]);
    for (int v = 0; v < V; v++)
        z += exp(s[v] - mx);
    for (int v = 0; v < V; v++)
        prob[v] = exp(s[v] - mx) / z;
    if (top_p < 1.0) { /* ascending order; the cumulative softmax through each token */
        int idx[V];
        for (int v = 0; v < V; v++)
            idx[v] = v;
        for (int i = 0; i < V; i++)
            for (int j = i + 1; j < V; j++)
                if (prob[idx[j]] < prob[idx[i]]) {
                    int t = idx[i];
                    idx[i] = idx[j], idx[j] = t;
                }
        double cum = 0, kept = 0;
        bool removed[V] = {false};
        for (int r = 0; r < V; r++) {
            cum += prob[idx[r]];
            removed[idx[r]] = cum <= 1.0 - top_p && r < V - 1; /* the most likely always stays */
        }
        for (int v = 0; v < V; v++)
            if (removed[v])
                prob[v] = 0;
            else
                kept += prob[v];
        for (int v = 0; v < V; v++)
            prob[v] /= kept;
    }
}

static void test_draw_distribution(void **state)
{
    (void)state;
    enum { N = 200000 };
    /* distinct logits, and two equal ones (ids 3 and 8) */
    const float logits[V] = {1.0f, -0.5f, 2.2f, 0.4f, -2.0f, 1.7f, 0.0f, -1.1f, 0.4f, 3.0f, -0.2f, 0.9f};
    const struct {
        float temperature;
        int top_k;
        float top_p;
    } cases[] = {{1.0f, 0, 1.0f},  {0.7f, 5, 1.0f}, {1.0f, 3, 1.0f}, {1.3f, 0, 0.6f}, {1.0f, 0, 0.93f},
                 {0.8f, 6, 0.75f}, {2.0f, 0, 0.3f}, {1.0f, 7, 0.5f}, {1.0f, 0, 0.01f}};
    float scratch[V];
    int32_t order[V];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dpt_sample_options o = {
            .temperature = cases[c].temperature, .top_k = cases[c].top_k, .top_p = cases[c].top_p};
        double want[V];
        reference(logits, o.temperature, o.top_k, o.top_p, want);
        long count[V] = {0};
        dpt_rng rng;
        dpt_rng_seed(&rng, 11 + c);
        for (int i = 0; i < N; i++) {
            int32_t t = dpt_sample_draw(logits, V, &o, scratch, order, &rng);
            assert_true(t >= 0 && t < V);
            count[t]++;
        }
        for (int v = 0; v < V; v++) {
            double got = (double)count[v] / N, se = sqrt(want[v] * (1 - want[v]) / N);
            if (want[v] == 0 ? count[v] != 0 : !(fabs(got - want[v]) <= 5 * se + 1e-12))
                fail_msg(
                    "temperature %g top-k %d top-p %g: token %d drawn %.5f of the time, expected %.5f (5 "
                    "standard errors %.5f)",
                    o.temperature, o.top_k, o.top_p, v, got, want[v], 5 * se);
        }
    }
    /* temperature 0: the most likely, whatever top-k and top-p say */
    dpt_rng rng;
    dpt_rng_seed(&rng, 1);
    dpt_sample_options greedy = {.temperature = 0.0f, .top_k = 2, .top_p = 0.5f};
    assert_int_equal(dpt_sample_draw(logits, V, &greedy, scratch, order, &rng), 9);
    const float tie[4] = {0.5f, 2.0f, 2.0f, 1.0f};
    assert_int_equal(dpt_sample_draw(tie, 4, &greedy, scratch, order, &rng), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_draw_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
