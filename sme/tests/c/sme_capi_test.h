/* The C test functions of tests/c/sme_capi_test.c (called by tests/capi.rs and sme_main.c). */
#ifndef SME_CAPI_TEST_H
#define SME_CAPI_TEST_H
#include <stddef.h>
#include <stdint.h>
#include "hetero_sme.h"

int ctest_ok(hetero_sme_status st, const char *what);
int ctest_sme_matmul(uint32_t v, uint32_t type, size_t m, size_t n, size_t k, const uint8_t *w,
                     size_t w_len, const float *x, size_t ldx, size_t ldd, float *y_tiles,
                     float *y_ukernel, float *y_threads, float *y_pool, uint8_t *rhs_out,
                     size_t rhs_out_cap, uint8_t *lhs_out, size_t lhs_out_cap);
int ctest_sme_rows(uint32_t type, size_t n, const float *src, uint8_t *q, size_t q_len, float *deq);
int ctest_sme_info(uint32_t *variants, size_t cap, size_t *count);
int ctest_sme_bad_inputs(uint32_t int8_v, uint32_t gemv_v, uint32_t unavailable_v, const uint8_t *w32,
                         const float *x);
int example_matmul_q4_0(const uint8_t *w, size_t n, size_t k, const float *x, size_t m, float *y);
#endif
