/* The README's "From C" example (compiled and run by tests/capi.rs). */
#include <stdio.h>
#include <stdlib.h>
#include "hetero_sme.h"

static void *alloc64(size_t n) { return aligned_alloc(HETERO_SME_PACKED_ALIGN, (n + 63) / 64 * 64); }

/* y[m x n] = x[m x k] . W^T for a GGUF Q4_0 weight w (n rows of k values), on 2 threads. */
int example_matmul_q4_0(const uint8_t *w, size_t n, size_t k, const float *x, size_t m, float *y) {
    const uint32_t Q4_0 = 2; /* the GGUF type code */
    uint32_t v = 0;
    size_t rhs_size = 0, lhs_size = 0;
    hetero_sme_pool *pool = NULL;
    hetero_sme_status st = hetero_sme_best_variant(HETERO_SME_FAMILY_INT8_GEMM, &v);
    if (!st) st = hetero_sme_matmul_get_rhs_packed_size(v, Q4_0, n, k, &rhs_size);
    if (!st) st = hetero_sme_matmul_get_lhs_packed_size(v, Q4_0, m, k, &lhs_size);
    uint8_t *rhs = alloc64(rhs_size), *lhs = alloc64(lhs_size);
    if (!st) st = hetero_sme_matmul_run_rhs_pack(v, Q4_0, n, k, w, n * (k / 32) * 18, rhs, rhs_size);
    if (!st) st = hetero_sme_pool_new(2, &pool);
    if (!st) st = hetero_sme_matmul_f32_pool(pool, v, x, m * k, m, k, rhs, rhs_size, lhs, lhs_size,
                                             y, m * n, n);
    if (st) fprintf(stderr, "hetero_sme: %s (%s)\n", hetero_sme_status_message(st), hetero_sme_last_error());
    hetero_sme_pool_free(pool);
    free(rhs);
    free(lhs);
    return st;
}
