/* bench_linear.c: the linear layer's three GEMMs (forward y = x W^T, backward data dx = dy W,
 * backward weights dW = dy^T x) on OpenBLAS, as dptrain runs them, against oneDNN's inner
 * product with the same plain layouts (weights oc x ic, so no reorder per step), on the MLP's
 * and the CNN's layer shapes, at 1 and 2 threads. Answers issue 11's question: does oneDNN's
 * inner product beat OpenBLAS for our linear layers? Prints a table and JSON lines. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "dpt.h"
#include "runtime/log.h"

#if DPT_DNNL
#include <oneapi/dnnl/dnnl.h>

#define CHECK(call)                                                                                               \
    do {                                                                                                          \
        dnnl_status_t s_ = (call);                                                                                \
        if (s_ != dnnl_success) {                                                                                 \
            fprintf(stderr, "%s: %s failed: %d\n", __func__, #call, (int)s_);                                    \
            exit(1);                                                                                              \
        }                                                                                                         \
    } while (0)

typedef struct ip {
    dnnl_primitive_t fwd, bwd_data, bwd_weights;
    dnnl_memory_t x, w, y, dx, dw, dy;
} ip;

static dnnl_memory_t mem(dnnl_engine_t eng, int64_t a, int64_t b, float *data)
{
    dnnl_memory_desc_t md;
    CHECK(dnnl_memory_desc_init_by_tag(&md, 2, (dnnl_dims_t){a, b}, dnnl_f32, dnnl_ab));
    dnnl_memory_t m;
    CHECK(dnnl_memory_create(&m, &md, eng, data));
    return m;
}

static ip ip_new(dnnl_engine_t eng, int64_t mb, int64_t ic, int64_t oc, float *x, float *w, float *y, float *dx,
                 float *dw, float *dy)
{
    ip p;
    dnnl_memory_desc_t xd, wd, yd;
    CHECK(dnnl_memory_desc_init_by_tag(&xd, 2, (dnnl_dims_t){mb, ic}, dnnl_f32, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&wd, 2, (dnnl_dims_t){oc, ic}, dnnl_f32, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&yd, 2, (dnnl_dims_t){mb, oc}, dnnl_f32, dnnl_ab));
    dnnl_inner_product_desc_t f, bd, bw;
    CHECK(dnnl_inner_product_forward_desc_init(&f, dnnl_forward_training, &xd, &wd, NULL, &yd));
    CHECK(dnnl_inner_product_backward_data_desc_init(&bd, &xd, &wd, &yd));
    CHECK(dnnl_inner_product_backward_weights_desc_init(&bw, &xd, &wd, NULL, &yd));
    dnnl_primitive_desc_t fpd, bdpd, bwpd;
    CHECK(dnnl_primitive_desc_create(&fpd, &f, NULL, eng, NULL));
    CHECK(dnnl_primitive_desc_create(&bdpd, &bd, NULL, eng, fpd));
    CHECK(dnnl_primitive_desc_create(&bwpd, &bw, NULL, eng, fpd));
    CHECK(dnnl_primitive_create(&p.fwd, fpd));
    CHECK(dnnl_primitive_create(&p.bwd_data, bdpd));
    CHECK(dnnl_primitive_create(&p.bwd_weights, bwpd));
    dnnl_primitive_desc_destroy(fpd), dnnl_primitive_desc_destroy(bdpd), dnnl_primitive_desc_destroy(bwpd);
    p.x = mem(eng, mb, ic, x), p.w = mem(eng, oc, ic, w), p.y = mem(eng, mb, oc, y);
    p.dx = mem(eng, mb, ic, dx), p.dw = mem(eng, oc, ic, dw), p.dy = mem(eng, mb, oc, dy);
    return p;
}

static void ip_run(dnnl_stream_t s, const ip *p)
{
    dnnl_exec_arg_t fa[] = {{DNNL_ARG_SRC, p->x}, {DNNL_ARG_WEIGHTS, p->w}, {DNNL_ARG_DST, p->y}};
    dnnl_exec_arg_t da[] = {{DNNL_ARG_DIFF_DST, p->dy}, {DNNL_ARG_WEIGHTS, p->w}, {DNNL_ARG_DIFF_SRC, p->dx}};
    dnnl_exec_arg_t wa[] = {{DNNL_ARG_SRC, p->x}, {DNNL_ARG_DIFF_DST, p->dy}, {DNNL_ARG_DIFF_WEIGHTS, p->dw}};
    CHECK(dnnl_primitive_execute(p->fwd, s, 3, fa));
    CHECK(dnnl_primitive_execute(p->bwd_data, s, 3, da));
    CHECK(dnnl_primitive_execute(p->bwd_weights, s, 3, wa));
    CHECK(dnnl_stream_wait(s));
}
#endif

static void blas_run(int64_t mb, int64_t ic, int64_t oc, const float *x, const float *w, float *y, float *dx,
                     float *dw, const float *dy)
{
    /* y (mb, oc) = x (mb, ic) W^T; dx (mb, ic) = dy W (oc, ic); dW (oc, ic) = dy^T x */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)mb, (int)oc, (int)ic, 1.0f, x, (int)ic, w, (int)ic,
                0.0f, y, (int)oc);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)mb, (int)ic, (int)oc, 1.0f, dy, (int)oc, w,
                (int)ic, 0.0f, dx, (int)ic);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)oc, (int)ic, (int)mb, 1.0f, dy, (int)oc, x, (int)ic,
                0.0f, dw, (int)ic);
}

#if DPT_DNNL
/* the same three products through oneDNN's own GEMM (row-major: dnnl_sgemm is row-major) */
static void dnnl_gemm_run(int64_t mb, int64_t ic, int64_t oc, const float *x, const float *w, float *y, float *dx,
                          float *dw, const float *dy)
{
    CHECK(dnnl_sgemm('N', 'T', mb, oc, ic, 1.0f, x, ic, w, ic, 0.0f, y, oc));
    CHECK(dnnl_sgemm('N', 'N', mb, ic, oc, 1.0f, dy, oc, w, ic, 0.0f, dx, ic));
    CHECK(dnnl_sgemm('T', 'N', oc, ic, mb, 1.0f, dy, oc, x, ic, 0.0f, dw, ic));
}
#endif

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    (void)argc, (void)argv;
#if !DPT_DNNL
    printf("bench_linear: this build has no oneDNN\n");
    return 0;
#else
    const struct {
        const char *layer;
        int64_t mb, ic, oc;
    } cases[] = {
        {"mlp fc1", 64, 784, 256}, {"mlp fc2", 64, 256, 256}, {"mlp fc3", 64, 256, 10},
        {"cnn fc1", 64, 3136, 128}, {"cnn fc2", 64, 128, 10},   {"resnet50 fc", 16, 2048, 1000},
    };
    dnnl_engine_t eng;
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    dnnl_stream_t stream;
    CHECK(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
    printf("%-12s %-16s %7s %12s %12s %7s %12s\n", "layer", "shape mb/ic/oc", "threads", "openblas us", "onednn us",
           "dnnl/blas", "dnnl_sgemm us");
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int64_t mb = cases[c].mb, ic = cases[c].ic, oc = cases[c].oc;
            float *buf = calloc((size_t)(2 * mb * ic + 2 * oc * ic + 2 * mb * oc), sizeof(float));
            float *x = buf, *dx = x + mb * ic, *w = dx + mb * ic, *dw = w + oc * ic, *y = dw + oc * ic, *dy = y + mb * oc;
            for (int64_t i = 0; i < mb * ic; i++)
                x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
            for (int64_t i = 0; i < oc * ic; i++)
                w[i] = (float)((i * 104729) % 1000) / 10000.0f - 0.05f;
            for (int64_t i = 0; i < mb * oc; i++)
                dy[i] = (float)((i * 31) % 100) / 100.0f - 0.5f;
            ip p = ip_new(eng, mb, ic, oc, x, w, y, dx, dw, dy);
            /* the same results first: max relative difference of y, dx, dW */
            size_t outs = (size_t)(mb * oc + mb * ic + oc * ic);
            float *ref = malloc(outs * sizeof(float));
            blas_run(mb, ic, oc, x, w, y, dx, dw, dy);
            memcpy(ref, y, (size_t)(mb * oc) * sizeof(float));
            memcpy(ref + mb * oc, dx, (size_t)(mb * ic) * sizeof(float));
            memcpy(ref + mb * oc + mb * ic, dw, (size_t)(oc * ic) * sizeof(float));
            memset(y, 0, (size_t)(mb * oc) * sizeof(float));
            memset(dx, 0, (size_t)(mb * ic) * sizeof(float));
            memset(dw, 0, (size_t)(oc * ic) * sizeof(float));
            ip_run(stream, &p);
            double worst = 0, scale = 1e-30;
            const float *got[3] = {y, dx, dw};
            const int64_t n[3] = {mb * oc, mb * ic, oc * ic};
            for (int k = 0, off = 0; k < 3; off += (int)n[k], k++)
                for (int64_t i = 0; i < n[k]; i++) {
                    double d = fabs((double)got[k][i] - ref[off + i]);
                    worst = d > worst ? d : worst;
                    scale = fabs(ref[off + i]) > scale ? fabs(ref[off + i]) : scale;
                }
            free(ref);
            if (worst / scale > 1e-4) {
                fprintf(stderr, "%s: oneDNN and OpenBLAS differ: %g (of %g)\n", cases[c].layer, worst, scale);
                return 1;
            }
            /* turn by turn, median of 15 pairs after a warm-up */
            enum { PAIRS = 15, INNER = 20 };
            double tb[PAIRS], td[PAIRS], tg[PAIRS];
            for (int r = -1; r < PAIRS; r++) {
                double t0 = dpt_now_s();
                for (int k = 0; k < INNER; k++)
                    blas_run(mb, ic, oc, x, w, y, dx, dw, dy);
                double t1 = dpt_now_s();
                for (int k = 0; k < INNER; k++)
                    ip_run(stream, &p);
                double t2 = dpt_now_s();
                for (int k = 0; k < INNER; k++)
                    dnnl_gemm_run(mb, ic, oc, x, w, y, dx, dw, dy);
                double t3 = dpt_now_s();
                if (r >= 0) tb[r] = (t1 - t0) / INNER * 1e6, td[r] = (t2 - t1) / INNER * 1e6, tg[r] = (t3 - t2) / INNER * 1e6;
            }
            qsort(tb, PAIRS, sizeof tb[0], cmp);
            qsort(td, PAIRS, sizeof td[0], cmp);
            qsort(tg, PAIRS, sizeof tg[0], cmp);
            char shape[32];
            snprintf(shape, sizeof shape, "%lld/%lld/%lld", (long long)mb, (long long)ic, (long long)oc);
            printf("%-12s %-16s %7d %12.1f %12.1f %7.2f %12.1f\n", cases[c].layer, shape, threads, tb[PAIRS / 2],
                   td[PAIRS / 2], td[PAIRS / 2] / tb[PAIRS / 2], tg[PAIRS / 2]);
            printf("{\"bench\":\"linear\",\"layer\":\"%s\",\"threads\":%d,\"openblas_us\":%.1f,\"onednn_us\":%.1f}\n",
                   cases[c].layer, threads, tb[PAIRS / 2], td[PAIRS / 2]);
            dnnl_primitive_destroy(p.fwd), dnnl_primitive_destroy(p.bwd_data), dnnl_primitive_destroy(p.bwd_weights);
            dnnl_memory_t ms[] = {p.x, p.w, p.y, p.dx, p.dw, p.dy};
            for (int i = 0; i < 6; i++)
                dnnl_memory_destroy(ms[i]);
            free(buf);
        }
    }
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    return 0;
#endif
}
