/* test_half.c: runtime/half.h's conversions against an independent reference: every 16-bit
 * pattern decoded by the IEEE formula (ldexp), every finite pattern round-tripping, and
 * floats of every scale (subnormal halves, ties, overflow) rounded to the nearest
 * representable value with ties to even, found by a search over all patterns in double. */
#include "tests/testutil.h"
#include "runtime/half.h"

/* The value of a 16-bit pattern with `mbits` mantissa bits and `ebits` exponent bits. */
static double decode(uint16_t h, int ebits, int mbits)
{
    int sign = h >> 15, e = (h >> mbits) & ((1 << ebits) - 1), m = h & ((1 << mbits) - 1);
    int bias = (1 << (ebits - 1)) - 1;
    if (e == (1 << ebits) - 1) return m ? NAN : (sign ? -INFINITY : INFINITY);
    double v = e ? ldexp(1.0 + ldexp(m, -mbits), e - bias) : ldexp(ldexp(m, -mbits), 1 - bias);
    return sign ? -v : v;
}

/* Nearest pattern to x (ties to even), by bisection over the positive finite patterns, whose
 * values increase with the pattern; past the largest by half an ulp or more: infinity. */
static uint16_t nearest(double x, int ebits, int mbits)
{
    uint16_t sign = x < 0 ? 0x8000 : 0;
    double a = fabs(x);
    uint16_t inf = (uint16_t)(((1 << ebits) - 1) << mbits), lo = 0, hi = inf - 1;
    double top = decode(hi, ebits, mbits), ulp = top - decode(hi - 1, ebits, mbits);
    if (a >= top + ulp / 2) return sign | inf;
    if (a >= top) return sign | hi;
    while (hi - lo > 1) { /* decode(lo) <= a < decode(hi) */
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (decode(mid, ebits, mbits) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - decode(lo, ebits, mbits), dh = decode(hi, ebits, mbits) - a;
    uint16_t pick = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | pick;
}

static void test_decode_and_round_trip(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        double want = decode((uint16_t)h, 5, 10);
        float got = dpt_f32_from_fp16((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(got) && isnan(dpt_f32_from_fp16(dpt_fp16_from_f32(got))));
            continue;
        }
        if ((double)got != want) fail_msg("fp16 %04x decodes to %.9g, not %.9g", h, got, want);
        if (dpt_fp16_from_f32(got) != h) fail_msg("fp16 %04x does not round-trip", h);
    }
    for (uint32_t h = 0; h < 65536; h++) {
        double want = decode((uint16_t)h, 8, 7);
        float got = dpt_f32_from_bf16((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(got) && isnan(dpt_f32_from_bf16(dpt_bf16_from_f32(got))));
            continue;
        }
        if ((double)got != want) fail_msg("bf16 %04x decodes to %.9g, not %.9g", h, got, want);
        if (dpt_bf16_from_f32(got) != h) fail_msg("bf16 %04x does not round-trip", h);
    }
}

static void test_round_to_nearest_even(void **state)
{
    (void)state;
    dpt_rng rng;
    dpt_rng_seed(&rng, 7);
    int ties = 0;
    for (int k = 0; k < 400000; k++) {
        float x;
        if (k % 4 == 0) { /* an exact tie between two halves (or bf16s) */
            uint16_t h = (uint16_t)(dpt_rng_next(&rng) & 0x7bfe);
            bool bf = k % 8 == 0;
            double a = bf ? decode(h, 8, 7) : decode(h, 5, 10), b = bf ? decode(h + 1, 8, 7) : decode(h + 1, 5, 10);
            x = (float)((a + b) / 2);
            ties += (double)x == (a + b) / 2;
        } else { /* any scale from below the halves' subnormals to past their range */
            double e = (double)(dpt_rng_next(&rng) % 6000) / 100.0 - 30.0;
            x = (float)(ldexp(1.0 + (double)(dpt_rng_next(&rng) >> 11) * 0x1.0p-53, (int)e) *
                        ((dpt_rng_next(&rng) & 1) ? -1 : 1));
        }
        uint16_t h = dpt_fp16_from_f32(x), want = nearest(x, 5, 10);
        if (h != want) fail_msg("fp16 of %.9g: %04x, nearest-even is %04x", x, h, want);
        uint16_t b = dpt_bf16_from_f32(x), bwant = nearest(x, 8, 7);
        if (b != bwant) fail_msg("bf16 of %.9g: %04x, nearest-even is %04x", x, b, bwant);
    }
    assert_true(ties > 90000); /* the ties were exercised */
    assert_int_equal(dpt_fp16_from_f32(65519.0f), 0x7bff);
    assert_int_equal(dpt_fp16_from_f32(65520.0f), 0x7c00); /* overflow: infinity */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_and_round_trip),
        cmocka_unit_test(test_round_to_nearest_even),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
