/* Standalone C run of hetero-sme's C tests (scripts/capi.sh test builds it against the
 * staticlib with -fsanitize=address,undefined): random weights quantized through the C API,
 * every available variant and type through the four paths of ctest_sme_matmul (which must agree
 * bit for bit), each output within the int8 / f32 error bound of a double reference from the
 * dequantized weights, then the bad-input and info checks. Ends with "N passed, N failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sme_capi_test.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (float)((rng * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

static int passed, failed;
static void check(int ok, const char *what, uint32_t v, uint32_t t, size_t m, size_t n, size_t k) {
    if (ok) {
        passed++;
    } else {
        failed++;
        fprintf(stderr, "FAIL %s: variant %s type %s m=%zu n=%zu k=%zu\n", what, hetero_sme_variant_name(v),
                hetero_sme_type_name(t), m, n, k);
    }
}

/* |y - ref| bound: int8 activations move each x by at most d_x/2 (d_x = amax/127 of its block
 * of 32, or 256 for K-quants); the GEMV reads x exactly. Plus f32 accumulation slack. */
static int within(uint32_t v, int kquant, const float *x, const float *wd, size_t m, size_t n, size_t k,
                  const float *y, size_t ldd) {
    size_t blk = kquant ? 256 : 32;
    for (size_t r = 0; r < m; r++)
        for (size_t c = 0; c < n; c++) {
            double ref = 0, mag = 0, bound = 0;
            for (size_t b = 0; b < k; b += blk) {
                double amax = 0, wabs = 0;
                for (size_t i = b; i < b + blk; i++) {
                    double xv = x[r * k + i], wv = wd[c * k + i];
                    ref += xv * wv;
                    mag += fabs(xv * wv);
                    amax = fabs(xv) > amax ? fabs(xv) : amax;
                    wabs += fabs(wv);
                }
                if (hetero_sme_variant_family(v) == HETERO_SME_FAMILY_INT8_GEMM) bound += amax / 127 / 2 * wabs;
            }
            bound += 4 * (double)k * 6e-8 * mag + 1e-30;
            double got = y[r * ldd + c];
            if (!(fabs(got - ref) <= bound)) {
                fprintf(stderr, "  (%zu,%zu): got %g, reference %g, bound %g\n", r, c, got, ref, bound);
                return 0;
            }
        }
    return 1;
}

int main(void) {
    const uint32_t types[] = {2, 3, 6, 7, 8, 12, 13, 14};
    const size_t shapes[][2] = {{1, 1}, {3, 48}, {17, 16}, {37, 40}};
    uint32_t vars[16];
    size_t nv = 0;
    check(ctest_sme_info(vars, 16, &nv) == 0, "info", 0, 0, 0, 0, 0);
    for (size_t vi = 0; vi < nv; vi++)
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
            for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
                uint32_t v = vars[vi], t = types[ti];
                int kq = t >= 12;
                size_t m = shapes[si][0], n = shapes[si][1], k = kq ? 512 : 96, ldx = k + 1, ldd = n + 2;
                size_t rb = 0;
                ctest_ok(hetero_sme_type_row_bytes(t, k, &rb), "row bytes");
                uint16_t *w16 = malloc(n * rb + 2);
                uint8_t *w = (uint8_t *)w16;
                float *row = malloc(k * sizeof(float)), *wd = malloc(n * k * sizeof(float));
                float *x = malloc(m * k * sizeof(float)), *xs = malloc(((m - 1) * ldx + k) * sizeof(float));
                for (size_t r = 0; r < n; r++) {
                    for (size_t i = 0; i < k; i++) row[i] = frand();
                    ctest_ok(hetero_sme_quantize_row(t, row, k, w + r * rb, rb), "quantize");
                    ctest_ok(hetero_sme_dequantize_row(t, w + r * rb, rb, wd + r * k, k), "dequantize");
                }
                for (size_t i = 0; i < m * k; i++) x[i] = 3 * frand();
                for (size_t r = 0; r < m; r++) memcpy(xs + r * ldx, x + r * k, k * sizeof(float));
                size_t len = (m - 1) * ldd + n;
                float *y[4];
                for (int i = 0; i < 4; i++) y[i] = calloc(len, sizeof(float));
                int rc = ctest_sme_matmul(v, t, m, n, k, w, n * rb, xs, ldx, ldd, y[0], y[1], y[2], y[3],
                                          NULL, 0, NULL, 0);
                check(rc == 0, "matmul ran", v, t, m, n, k);
                int same = 1;
                for (int i = 1; i < 4; i++) same &= memcmp(y[0], y[i], len * sizeof(float)) == 0;
                check(same, "four paths agree bit for bit", v, t, m, n, k);
                check(rc == 0 && within(v, kq, x, wd, m, n, k, y[0], ldd), "within the bound", v, t, m, n, k);
                for (int i = 0; i < 4; i++) free(y[i]);
                free(w16);
                free(row);
                free(wd);
                free(x);
                free(xs);
            }
    {
        uint16_t w16[32 * 2 * 9];
        float x[4 * 64], row[64];
        for (int r = 0; r < 32; r++) {
            for (int i = 0; i < 64; i++) row[i] = frand();
            ctest_ok(hetero_sme_quantize_row(2, row, 64, (uint8_t *)w16 + r * 36, 36), "quantize");
        }
        for (int i = 0; i < 4 * 64; i++) x[i] = frand();
        uint32_t int8 = 0, gemv = 0, unavailable = 0;
        hetero_sme_best_variant(HETERO_SME_FAMILY_INT8_GEMM, &int8);
        hetero_sme_best_variant(HETERO_SME_FAMILY_QGEMV, &gemv);
        const uint32_t cand[] = {19, 2, 3, 18};
        for (int i = 0; i < 4 && !unavailable; i++)
            if (!hetero_sme_variant_available(cand[i])) unavailable = cand[i];
        check(ctest_sme_bad_inputs(int8, gemv, unavailable, (uint8_t *)w16, x) == 0, "bad inputs", 0, 0, 0, 0, 0);
        float y[4 * 32];
        check(example_matmul_q4_0((uint8_t *)w16, 32, 64, x, 4, y) == 0, "README example", 0, 2, 4, 32, 64);
    }
    printf("capi-c hetero-sme: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
