/* C side of hetero-sme's C API tests: every exported function called from C, the way a host
 * engine uses it. tests/capi.rs links this file (built by build.rs) and compares the outputs
 * with the Rust API's; tests/c/sme_main.c runs the same functions standalone under
 * AddressSanitizer and UndefinedBehaviorSanitizer (scripts/capi.sh test). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hetero_sme.h"
#include "sme_capi_test.h"

#define CHECK_OK(call)                                                                      \
    do {                                                                                    \
        hetero_sme_status st_ = (call);                                                     \
        if (st_ != HETERO_SME_OK) {                                                         \
            fprintf(stderr, "%s:%d: %s -> %d %s (%s)\n", __FILE__, __LINE__, #call, (int)st_, \
                    hetero_sme_status_message(st_), hetero_sme_last_error());               \
            return (int)st_;                                                                \
        }                                                                                   \
    } while (0)

static void *alloc64(size_t n) { return aligned_alloc(HETERO_SME_PACKED_ALIGN, (n + 63) / 64 * 64 + 64); }

static size_t out_len(size_t m, size_t n, size_t ldd) { return m == 0 || n == 0 ? 0 : (m - 1) * ldd + n; }

/* Host-engine threading: workers take tiles of a fixed grid from an atomic counter. */
struct tile_job {
    const hetero_sme_matmul_ukernel *uk;
    size_t m, n, m_step, n_step, tiles_m, tiles;
    const uint8_t *lhs, *rhs;
    size_t lhs_size, rhs_size, dst_len, ldd;
    float *dst;
    atomic_size_t next;
    atomic_int failures;
};

static void *tile_worker(void *arg) {
    struct tile_job *j = arg;
    for (;;) {
        size_t t = atomic_fetch_add(&j->next, 1);
        if (t >= j->tiles) break;
        size_t tm = t % j->tiles_m, tn = t / j->tiles_m;
        size_t m0 = tm * j->m_step, n0 = tn * j->n_step;
        size_t m1 = m0 + j->m_step < j->m ? m0 + j->m_step : j->m;
        size_t n1 = n0 + j->n_step < j->n ? n0 + j->n_step : j->n;
        if (j->uk->run_matmul(m0, m1, n0, n1, j->lhs, j->lhs_size, j->rhs, j->rhs_size, j->dst,
                              j->dst_len, j->ldd) != HETERO_SME_OK)
            atomic_fetch_add(&j->failures, 1);
    }
    return NULL;
}

int ctest_sme_matmul(uint32_t v, uint32_t type, size_t m, size_t n, size_t k, const uint8_t *w,
                     size_t w_len, const float *x, size_t ldx, size_t ldd, float *y_tiles,
                     float *y_ukernel, float *y_threads, float *y_pool, uint8_t *rhs_out,
                     size_t rhs_out_cap, uint8_t *lhs_out, size_t lhs_out_cap) {
    size_t rhs_size = 0, lhs_size = 0, x_len = m == 0 ? 0 : (m - 1) * ldx + k;
    size_t dst_len = out_len(m, n, ldd);
    CHECK_OK(hetero_sme_matmul_get_rhs_packed_size(v, type, n, k, &rhs_size));
    CHECK_OK(hetero_sme_matmul_get_lhs_packed_size(v, type, m, k, &lhs_size));
    uint8_t *rhs = alloc64(rhs_size), *lhs = alloc64(lhs_size), *lhs2 = alloc64(lhs_size);
    int rc = 0;
    hetero_sme_pool *pool = NULL;
#define TRY(call)                  \
    do {                           \
        rc = ctest_ok((call), #call); \
        if (rc) goto done;         \
    } while (0)
    TRY(hetero_sme_matmul_run_rhs_pack(v, type, n, k, w, w_len, rhs, rhs_size));
    TRY(hetero_sme_matmul_run_lhs_pack(v, type, m, k, x, x_len, ldx, lhs, lhs_size));
    if (rhs_out) {
        if (rhs_out_cap < rhs_size) { rc = 1001; goto done; }
        memcpy(rhs_out, rhs, rhs_size);
    }
    if (lhs_out) {
        if (lhs_out_cap < lhs_size) { rc = 1002; goto done; }
        memcpy(lhs_out, lhs, lhs_size);
    }
    /* 1. plain functions, tiles of m_step x 2 n_step, last tile first. */
    {
        size_t ms = hetero_sme_matmul_get_m_step(v), ns = 2 * hetero_sme_matmul_get_n_step(v);
        if (ms == 0 || ns == 0) { rc = 1003; goto done; }
        size_t tm = (m + ms - 1) / ms, tn = (n + ns - 1) / ns;
        for (size_t t = tm * tn; t-- > 0;) {
            size_t m0 = (t % tm) * ms, n0 = (t / tm) * ns;
            size_t m1 = m0 + ms < m ? m0 + ms : m, n1 = n0 + ns < n ? n0 + ns : n;
            TRY(hetero_sme_matmul_run_matmul(v, m0, m1, n0, n1, lhs, lhs_size, rhs, rhs_size,
                                             y_tiles, dst_len, ldd));
        }
    }
    /* 2. the function-pointer struct, odd row chunks (5) x n_step. */
    hetero_sme_matmul_ukernel uk;
    TRY(hetero_sme_matmul_ukernel_get(v, &uk));
    if (uk.variant != v || uk.family != hetero_sme_variant_family(v) ||
        uk.get_m_step() != hetero_sme_matmul_get_m_step(v) ||
        uk.get_n_step() != hetero_sme_matmul_get_n_step(v) || uk.get_mr() != hetero_sme_matmul_get_mr(v) ||
        uk.get_nr() != hetero_sme_matmul_get_nr(v) || uk.get_kr() != hetero_sme_matmul_get_kr(v) ||
        uk.get_sr() != hetero_sme_matmul_get_sr(v) ||
        uk.get_dst_offset(3, 16, 100) != 3 * 100 + 16 || uk.get_dst_size(2, 5, 100) != 100 + 5 ||
        uk.get_dst_size(m, n, ldd) != out_len(m, n, ldd) || uk.get_dst_size(0, 5, 100) != 0 ||
        uk.get_dst_offset(SIZE_MAX, 2, 2) != SIZE_MAX) {
        rc = 1004;
        goto done;
    }
    {
        size_t s1 = 0, s2 = 0;
        TRY(uk.get_rhs_packed_size(type, n, k, &s1));
        TRY(uk.get_lhs_packed_size(type, m, k, &s2));
        if (s1 != rhs_size || s2 != lhs_size) { rc = 1005; goto done; }
        /* Re-pack through the struct: same bytes. */
        uint8_t *rhs2 = alloc64(rhs_size);
        hetero_sme_status st = uk.run_rhs_pack(type, n, k, w, w_len, rhs2, rhs_size);
        int same = st == HETERO_SME_OK && memcmp(rhs, rhs2, rhs_size) == 0;
        free(rhs2);
        if (!same) { rc = 1006; goto done; }
        TRY(uk.run_lhs_pack(type, m, k, x, x_len, ldx, lhs2, lhs_size));
        if (memcmp(lhs, lhs2, lhs_size) != 0) { rc = 1007; goto done; }
        size_t ns = uk.get_n_step();
        for (size_t n0 = 0; n0 < n; n0 += ns)
            for (size_t m0 = 0; m0 < m; m0 += 5) {
                size_t m1 = m0 + 5 < m ? m0 + 5 : m, n1 = n0 + ns < n ? n0 + ns : n;
                TRY(uk.run_matmul(m0, m1, n0, n1, lhs2, lhs_size, rhs, rhs_size, y_ukernel, dst_len, ldd));
            }
    }
    /* 3. three threads of the host engine on disjoint tiles of one output. */
    {
        struct tile_job j = {.uk = &uk, .m = m, .n = n, .m_step = uk.get_m_step(),
                             .n_step = uk.get_n_step(), .lhs = lhs, .rhs = rhs,
                             .lhs_size = lhs_size, .rhs_size = rhs_size, .dst_len = dst_len,
                             .ldd = ldd, .dst = y_threads};
        j.tiles_m = (m + j.m_step - 1) / j.m_step;
        j.tiles = j.tiles_m * ((n + j.n_step - 1) / j.n_step);
        atomic_init(&j.next, 0);
        atomic_init(&j.failures, 0);
        pthread_t th[3];
        for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, tile_worker, &j);
        for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
        if (atomic_load(&j.failures)) { rc = 1008; goto done; }
    }
    /* 4. the pool: packed activations, then from f32. */
    TRY(hetero_sme_pool_new(3, &pool));
    if (hetero_sme_pool_threads(pool) != 3) { rc = 1009; goto done; }
    TRY(hetero_sme_matmul_f32_pool(pool, v, x, x_len, m, ldx, rhs, rhs_size, lhs2, lhs_size,
                                   y_pool, dst_len, ldd));
    {
        /* The packed-LHS pool call must give the same bits as the f32 one. */
        float *y2 = malloc((dst_len + 1) * sizeof(float));
        memcpy(y2, y_pool, dst_len * sizeof(float));
        hetero_sme_status st = hetero_sme_matmul_pool(pool, v, lhs, lhs_size, rhs, rhs_size, y2, dst_len, ldd);
        int same = st == HETERO_SME_OK && memcmp(y2, y_pool, dst_len * sizeof(float)) == 0;
        free(y2);
        if (!same) { rc = 1010; goto done; }
    }
done:
    hetero_sme_pool_free(pool);
    free(rhs);
    free(lhs);
    free(lhs2);
    return rc;
#undef TRY
}

int ctest_ok(hetero_sme_status st, const char *what) {
    if (st == HETERO_SME_OK) return 0;
    fprintf(stderr, "%s -> %d %s (%s)\n", what, (int)st, hetero_sme_status_message(st),
            hetero_sme_last_error());
    return (int)st;
}

int ctest_sme_rows(uint32_t type, size_t n, const float *src, uint8_t *q, size_t q_len, float *deq) {
    size_t bytes = 0;
    CHECK_OK(hetero_sme_type_row_bytes(type, n, &bytes));
    if (bytes != q_len) return 1020;
    CHECK_OK(hetero_sme_quantize_row(type, src, n, q, q_len));
    CHECK_OK(hetero_sme_dequantize_row(type, q, q_len, deq, n));
    return 0;
}

int ctest_sme_info(uint32_t *variants, size_t cap, size_t *count) {
    int fails = 0;
    if (hetero_sme_version() != ((HETERO_SME_VERSION_MAJOR << 16) | (HETERO_SME_VERSION_MINOR << 8) |
                                 HETERO_SME_VERSION_PATCH)) {
        fprintf(stderr, "version: library %u vs header macros\n", hetero_sme_version());
        fails++;
    }
    size_t total = 0;
    if (hetero_sme_variants_available(NULL, 0, &total) != HETERO_SME_OK || total == 0) fails++;
    if (hetero_sme_variants_available(variants, cap, count) != HETERO_SME_OK || *count != total) fails++;
    for (size_t i = 0; i < total && i < cap; i++) {
        if (!hetero_sme_variant_available(variants[i])) fails++;
        if (strcmp(hetero_sme_variant_name(variants[i]), "unknown") == 0) fails++;
    }
    for (int32_t s = -5; s <= 200; s++)
        if (hetero_sme_status_message(s) == NULL) fails++;
    if (strcmp(hetero_sme_variant_name(999), "unknown") != 0) fails++;
    if (strcmp(hetero_sme_type_name(12), "Q4_K") != 0 || strcmp(hetero_sme_type_name(5), "unknown") != 0)
        fails++;
    return fails;
}

/* ---- bad input: a status, never a crash, and nothing written ------------------------------- */

static int bad_fails;

static void expect(hetero_sme_status got, hetero_sme_status want, const char *what, int line) {
    if (got != want) {
        fprintf(stderr, "sme_capi_test.c:%d: %s -> %d (%s), expected %d (%s)\n", line, what, (int)got,
                hetero_sme_status_message(got), (int)want, hetero_sme_status_message(want));
        bad_fails++;
    } else if (want != HETERO_SME_OK && hetero_sme_last_error()[0] == '\0') {
        fprintf(stderr, "sme_capi_test.c:%d: %s: no last-error text\n", line, what);
        bad_fails++;
    }
}
#define EXPECT(call, want) expect((call), (want), #call, __LINE__)

static int poisoned(const float *y, size_t len) {
    for (size_t i = 0; i < len; i++) {
        uint32_t b;
        memcpy(&b, &y[i], 4);
        if (b != 0x7fc0dead) return 0;
    }
    return 1;
}

static void poison(float *y, size_t len) {
    uint32_t b = 0x7fc0dead;
    for (size_t i = 0; i < len; i++) memcpy(&y[i], &b, 4);
}

/* `w32`: a Q4_0 weight of n = 32 rows x k = 64 (32 * 2 * 18 bytes, 2-aligned); `x`: 4 x 64
 * floats. `int8_v`/`gemv_v`: available variants; `unavailable_v`: a known variant this CPU
 * lacks (0 if none). Returns the number of failed checks. */
int ctest_sme_bad_inputs(uint32_t int8_v, uint32_t gemv_v, uint32_t unavailable_v, const uint8_t *w32,
                         const float *x) {
    const uint32_t Q4_0 = 2, Q4_K = 12, Q2_K = 10, F32 = 0;
    const size_t n = 32, k = 64, m = 4, w_len = 32 * 2 * 18, ldd = 32, dst_len = 3 * 32 + 32;
    bad_fails = 0;
    size_t rs = 0, ls = 0, sz = 0;
    EXPECT(hetero_sme_matmul_get_rhs_packed_size(int8_v, Q4_0, n, k, &rs), HETERO_SME_OK);
    EXPECT(hetero_sme_matmul_get_lhs_packed_size(int8_v, Q4_0, m, k, &ls), HETERO_SME_OK);
    uint8_t *rhs = alloc64(rs + 64), *lhs = alloc64(ls + 64), *grhs = NULL, *glhs = NULL;
    float *y = malloc((dst_len + 1) * sizeof(float));
    EXPECT(hetero_sme_matmul_run_rhs_pack(int8_v, Q4_0, n, k, w32, w_len, rhs, rs), HETERO_SME_OK);
    EXPECT(hetero_sme_matmul_run_lhs_pack(int8_v, Q4_0, m, k, x, m * k, k, lhs, ls), HETERO_SME_OK);

    /* null pointers */
    EXPECT(hetero_sme_matmul_get_rhs_packed_size(int8_v, Q4_0, n, k, NULL), HETERO_SME_NULL_POINTER);
    EXPECT(hetero_sme_matmul_run_rhs_pack(int8_v, Q4_0, n, k, NULL, w_len, rhs, rs), HETERO_SME_NULL_POINTER);
    EXPECT(hetero_sme_matmul_run_rhs_pack(int8_v, Q4_0, n, k, w32, w_len, NULL, rs), HETERO_SME_NULL_POINTER);
    EXPECT(hetero_sme_matmul_run_lhs_pack(int8_v, Q4_0, m, k, NULL, m * k, k, lhs, ls), HETERO_SME_NULL_POINTER);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, NULL, ls, rhs, rs, y, dst_len, ldd), HETERO_SME_NULL_POINTER);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, lhs, ls, NULL, rs, y, dst_len, ldd), HETERO_SME_NULL_POINTER);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, lhs, ls, rhs, rs, NULL, dst_len, ldd), HETERO_SME_NULL_POINTER);
    EXPECT(hetero_sme_matmul_pool(NULL, int8_v, lhs, ls, rhs, rs, y, dst_len, ldd), HETERO_SME_NULL_POINTER);
    EXPECT(hetero_sme_pool_new(2, NULL), HETERO_SME_NULL_POINTER);
    EXPECT(hetero_sme_matmul_ukernel_get(int8_v, NULL), HETERO_SME_NULL_POINTER);
    EXPECT(hetero_sme_variants_available(NULL, 4, &sz), HETERO_SME_NULL_POINTER);
    EXPECT(hetero_sme_best_variant(HETERO_SME_FAMILY_QGEMV, NULL), HETERO_SME_NULL_POINTER);
    EXPECT(hetero_sme_dequantize_row(Q4_0, NULL, 18, y, 32), HETERO_SME_NULL_POINTER);
    EXPECT(hetero_sme_quantize_row(Q4_0, x, 32, NULL, 18), HETERO_SME_NULL_POINTER);
    hetero_sme_pool_free(NULL); /* ignored */

    /* lengths that overflow or do not fit */
    EXPECT(hetero_sme_matmul_get_rhs_packed_size(int8_v, Q4_0, SIZE_MAX, k, &sz), HETERO_SME_OVERFLOW);
    EXPECT(hetero_sme_matmul_get_rhs_packed_size(gemv_v, Q4_0, SIZE_MAX / 2, 1u << 20, &sz), HETERO_SME_OVERFLOW);
    EXPECT(hetero_sme_matmul_get_lhs_packed_size(int8_v, Q4_0, SIZE_MAX / 32, 64, &sz), HETERO_SME_OVERFLOW);
    EXPECT(hetero_sme_matmul_run_lhs_pack(int8_v, Q4_0, SIZE_MAX / 64, k, x, m * k, SIZE_MAX / 2, lhs, ls), HETERO_SME_OVERFLOW);
    EXPECT(hetero_sme_matmul_run_lhs_pack(int8_v, Q4_0, m, k, x, m * k - 1, k, lhs, ls), HETERO_SME_BUFFER_TOO_SMALL);
    EXPECT(hetero_sme_matmul_run_lhs_pack(int8_v, Q4_0, m, k, x, m * k, k - 1, lhs, ls), HETERO_SME_INVALID_ARGUMENT);
    EXPECT(hetero_sme_matmul_run_lhs_pack(int8_v, Q4_0, m, k, x, m * k, k, lhs, ls - 1), HETERO_SME_BUFFER_TOO_SMALL);
    EXPECT(hetero_sme_matmul_run_rhs_pack(int8_v, Q4_0, n, k, w32, w_len - 18, rhs, rs), HETERO_SME_INVALID_ARGUMENT);
    EXPECT(hetero_sme_matmul_run_rhs_pack(int8_v, Q4_0, n, k, w32, w_len, rhs, rs - 1), HETERO_SME_BUFFER_TOO_SMALL);
    EXPECT(hetero_sme_matmul_get_rhs_packed_size(int8_v, Q4_0, n, 48, &sz), HETERO_SME_INVALID_ARGUMENT);
    EXPECT(hetero_sme_matmul_get_rhs_packed_size(int8_v, Q4_K, n, 64, &sz), HETERO_SME_INVALID_ARGUMENT);
    EXPECT(hetero_sme_matmul_get_rhs_packed_size(int8_v, Q4_0, 0, k, &sz), HETERO_SME_INVALID_ARGUMENT);
    EXPECT(hetero_sme_type_row_bytes(Q4_0, 33, &sz), HETERO_SME_INVALID_ARGUMENT);
    EXPECT(hetero_sme_type_row_bytes(8 /* Q8_0: 34 bytes per 32 */, SIZE_MAX - 31, &sz), HETERO_SME_OVERFLOW);
    EXPECT(hetero_sme_dequantize_row(Q4_0, w32, 17, y, 32), HETERO_SME_INVALID_ARGUMENT);
    EXPECT(hetero_sme_quantize_row(Q4_0, x, 32, (uint8_t *)y, 17), HETERO_SME_INVALID_ARGUMENT);

    /* the output: too short, bad stride, bad ranges; poisoned and checked untouched */
    poison(y, dst_len + 1);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, lhs, ls, rhs, rs, y, dst_len - 1, ldd), HETERO_SME_BUFFER_TOO_SMALL);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, lhs, ls, rhs, rs, y, dst_len, n - 1), HETERO_SME_INVALID_ARGUMENT);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m + 1, 0, n, lhs, ls, rhs, rs, y, dst_len, ldd), HETERO_SME_INVALID_ARGUMENT);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 2, 1, 0, n, lhs, ls, rhs, rs, y, dst_len, ldd), HETERO_SME_INVALID_ARGUMENT);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 8, n, lhs, ls, rhs, rs, y, dst_len, ldd), HETERO_SME_INVALID_ARGUMENT);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, 20, lhs, ls, rhs, rs, y, dst_len, ldd), HETERO_SME_INVALID_ARGUMENT);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, lhs, ls, rhs, rs - 1, y, dst_len, ldd), HETERO_SME_BUFFER_TOO_SMALL);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, lhs, 63, rhs, rs, y, dst_len, ldd), HETERO_SME_BUFFER_TOO_SMALL);

    /* misaligned buffers */
    EXPECT(hetero_sme_matmul_run_rhs_pack(int8_v, Q4_0, n, k, w32, w_len, rhs + 8, rs), HETERO_SME_MISALIGNED);
    EXPECT(hetero_sme_matmul_run_rhs_pack(int8_v, Q4_0, n, k, w32 + 1, w_len, rhs, rs), HETERO_SME_MISALIGNED);
    EXPECT(hetero_sme_matmul_run_lhs_pack(int8_v, Q4_0, m, k, x, m * k, k, lhs + 4, ls), HETERO_SME_MISALIGNED);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, lhs, ls, rhs + 32, rs, y, dst_len, ldd), HETERO_SME_MISALIGNED);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, lhs, ls, rhs, rs, (float *)((char *)y + 2), dst_len, ldd), HETERO_SME_MISALIGNED);
    EXPECT(hetero_sme_dequantize_row(Q4_0, w32, 18, (float *)((char *)y + 1), 32), HETERO_SME_MISALIGNED);

    /* blobs of another variant, kind, type or shape; corrupt headers */
    EXPECT(hetero_sme_matmul_get_rhs_packed_size(gemv_v, Q4_0, n, k, &sz), HETERO_SME_OK);
    grhs = alloc64(sz);
    EXPECT(hetero_sme_matmul_run_rhs_pack(gemv_v, Q4_0, n, k, w32, w_len, grhs, sz), HETERO_SME_OK);
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, lhs, ls, grhs, sz, y, dst_len, ldd), HETERO_SME_BLOB_VARIANT_MISMATCH);
    {
        size_t gls = 0;
        EXPECT(hetero_sme_matmul_get_lhs_packed_size(gemv_v, Q4_0, m, k, &gls), HETERO_SME_OK);
        glhs = alloc64(gls);
        EXPECT(hetero_sme_matmul_run_lhs_pack(gemv_v, Q4_0, m, k, x, m * k, k, glhs, gls), HETERO_SME_OK);
        EXPECT(hetero_sme_matmul_run_matmul(gemv_v, 0, m, 0, n, lhs, ls, grhs, sz, y, dst_len, ldd), HETERO_SME_BLOB_VARIANT_MISMATCH);
        EXPECT(hetero_sme_matmul_run_matmul(gemv_v, 0, m, 0, n, glhs, gls, grhs, sz, y, dst_len, ldd), HETERO_SME_OK);
        poison(y, dst_len + 1);
        /* f32 activations carry no scheme: a forged one is a corrupt header */
        glhs[40] = 1;
        EXPECT(hetero_sme_matmul_run_matmul(gemv_v, 0, m, 0, n, glhs, gls, grhs, sz, y, dst_len, ldd), HETERO_SME_BAD_BLOB);
        glhs[40] = 0;
    }
    EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, rhs, rs, lhs, ls, y, dst_len, ldd), HETERO_SME_BAD_BLOB);
    {
        /* activations quantized per 256 values (a K-quant's scheme) for a Q4_0 weight of the
         * same K; activations of another K */
        const size_t k2 = 256;
        size_t l2 = 0, r2 = 0;
        float *x2 = calloc(m * k2, sizeof(float));
        for (size_t i = 0; i < m * k2; i++) x2[i] = (float)((int)(i % 7) - 3);
        uint8_t *w2 = malloc(16 * 8 * 18);
        for (size_t r = 0; r < 16; r++)
            EXPECT(hetero_sme_quantize_row(Q4_0, x2 + (r % m) * k2, k2, w2 + r * 8 * 18, 8 * 18), HETERO_SME_OK);
        EXPECT(hetero_sme_matmul_get_rhs_packed_size(int8_v, Q4_0, 16, k2, &r2), HETERO_SME_OK);
        uint8_t *rhs2 = alloc64(r2);
        EXPECT(hetero_sme_matmul_run_rhs_pack(int8_v, Q4_0, 16, k2, w2, 16 * 8 * 18, rhs2, r2), HETERO_SME_OK);
        EXPECT(hetero_sme_matmul_get_lhs_packed_size(int8_v, Q4_K, m, k2, &l2), HETERO_SME_OK);
        uint8_t *lk = alloc64(l2), *l32 = NULL;
        EXPECT(hetero_sme_matmul_run_lhs_pack(int8_v, Q4_K, m, k2, x2, m * k2, k2, lk, l2), HETERO_SME_OK);
        EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, 16, lk, l2, rhs2, r2, y, dst_len, ldd), HETERO_SME_BLOB_MISMATCH);
        {
            /* Forged LHS headers (fields: ggml_type at byte 12, payload at 32, scheme at 40), in
             * a copy no larger than the blob, so reading it as another layout is an ASan error.
             * The Q4_K activations' scheme forged to "per 32" (what the Q4_0 weight expects):
             * type and scheme disagree, refused (it used to pass and be read per 32: past the
             * buffer). Then the type forged to Q4_0 too: its payload is per 256's. */
            const size_t lks = l2;
            uint8_t *fl = aligned_alloc(HETERO_SME_PACKED_ALIGN, (lks + 63) / 64 * 64);
            memcpy(fl, lk, lks);
            const uint32_t per32 = 1, per256 = 2, q40 = Q4_0;
            memcpy(fl + 40, &per32, 4);
            EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, 16, fl, lks, rhs2, r2, y, dst_len, ldd), HETERO_SME_BAD_BLOB);
            memcpy(fl + 12, &q40, 4);
            EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, 16, fl, lks, rhs2, r2, y, dst_len, ldd), HETERO_SME_BAD_BLOB);
            memcpy(fl + 40, &per256, 4);
            EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, 16, fl, lks, rhs2, r2, y, dst_len, ldd), HETERO_SME_BAD_BLOB);
            free(fl);
        }
        EXPECT(hetero_sme_matmul_get_lhs_packed_size(int8_v, Q4_0, m, k2, &l2), HETERO_SME_OK);
        l32 = alloc64(l2);
        EXPECT(hetero_sme_matmul_run_lhs_pack(int8_v, Q4_0, m, k2, x2, m * k2, k2, l32, l2), HETERO_SME_OK);
        EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, l32, l2, rhs, rs, y, dst_len, ldd), HETERO_SME_BLOB_MISMATCH);
        free(lk);
        free(l32);
        free(x2);
        free(w2);
        free(rhs2);
    }
    {
        uint8_t saved = rhs[0];
        rhs[0] ^= 0xff; /* magic */
        EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, lhs, ls, rhs, rs, y, dst_len, ldd), HETERO_SME_BAD_BLOB);
        rhs[0] = saved;
        saved = rhs[4];
        rhs[4] ^= 0x7; /* version */
        EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, lhs, ls, rhs, rs, y, dst_len, ldd), HETERO_SME_BAD_BLOB);
        rhs[4] = saved;
        saved = rhs[16];
        rhs[16] ^= 0x1; /* n: the payload no longer matches */
        EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, lhs, ls, rhs, rs, y, dst_len, ldd), HETERO_SME_BAD_BLOB);
        rhs[16] = saved;
    }
    if (!poisoned(y, dst_len + 1)) {
        fprintf(stderr, "sme_capi_test.c: a refused run_matmul wrote its output\n");
        bad_fails++;
    }

    /* types, variants */
    EXPECT(hetero_sme_matmul_get_rhs_packed_size(int8_v, Q2_K, n, 256, &sz), HETERO_SME_UNSUPPORTED_TYPE);
    EXPECT(hetero_sme_matmul_get_rhs_packed_size(int8_v, F32, n, k, &sz), HETERO_SME_UNSUPPORTED_TYPE);
    EXPECT(hetero_sme_matmul_get_rhs_packed_size(int8_v, 4 /* no such GGML type */, n, k, &sz), HETERO_SME_UNSUPPORTED_TYPE);
    EXPECT(hetero_sme_type_row_bytes(4, 32, &sz), HETERO_SME_UNSUPPORTED_TYPE);
    EXPECT(hetero_sme_matmul_get_rhs_packed_size(999, Q4_0, n, k, &sz), HETERO_SME_UNKNOWN_VARIANT);
    EXPECT(hetero_sme_matmul_run_matmul(0, 0, m, 0, n, lhs, ls, rhs, rs, y, dst_len, ldd), HETERO_SME_UNKNOWN_VARIANT);
    if (hetero_sme_matmul_get_m_step(999) != 0 || hetero_sme_variant_available(999)) bad_fails++;
    EXPECT(hetero_sme_best_variant(7, &int8_v), HETERO_SME_INVALID_ARGUMENT);
    if (unavailable_v) {
        hetero_sme_matmul_ukernel uk;
        size_t us = 0;
        if (hetero_sme_variant_available(unavailable_v)) bad_fails++;
        EXPECT(hetero_sme_matmul_ukernel_get(unavailable_v, &uk), HETERO_SME_VARIANT_UNAVAILABLE);
        /* Packing is pure data, so a blob for it can be made here; running it cannot. */
        EXPECT(hetero_sme_matmul_get_rhs_packed_size(unavailable_v, Q4_0, n, k, &us), HETERO_SME_OK);
        uint8_t *urhs = alloc64(us);
        EXPECT(hetero_sme_matmul_run_rhs_pack(unavailable_v, Q4_0, n, k, w32, w_len, urhs, us), HETERO_SME_OK);
        EXPECT(hetero_sme_matmul_run_lhs_pack(unavailable_v, Q4_0, m, k, x, m * k, k, lhs, ls), HETERO_SME_VARIANT_UNAVAILABLE);
        EXPECT(hetero_sme_matmul_run_matmul(unavailable_v, 0, m, 0, n, lhs, ls, urhs, us, y, dst_len, ldd), HETERO_SME_VARIANT_UNAVAILABLE);
        /* Its blob given to an available variant of the same family: another variant's. */
        if (hetero_sme_variant_family(unavailable_v) == hetero_sme_variant_family(int8_v))
            EXPECT(hetero_sme_matmul_run_matmul(int8_v, 0, m, 0, n, lhs, ls, urhs, us, y, dst_len, ldd), HETERO_SME_BLOB_VARIANT_MISMATCH);
        free(urhs);
    }
    EXPECT(hetero_sme_pool_new(0, &(hetero_sme_pool *){NULL}), HETERO_SME_INVALID_ARGUMENT);

    /* values */
    {
        float bad[32] = {0};
        bad[5] = 1.0f / 0.0f;
        uint8_t q[18];
        EXPECT(hetero_sme_quantize_row(Q4_0, bad, 32, q, 18), HETERO_SME_NON_FINITE);
        bad[5] = 1e6f;
        EXPECT(hetero_sme_quantize_row(Q4_0, bad, 32, q, 18), HETERO_SME_VALUE_OUT_OF_RANGE);
    }

    /* a panic inside Rust */
    EXPECT(hetero_sme_selftest_panic(), HETERO_SME_PANIC);
    if (!poisoned(y, dst_len + 1)) {
        fprintf(stderr, "sme_capi_test.c: a refused call wrote the output\n");
        bad_fails++;
    }
    free(rhs);
    free(lhs);
    free(grhs);
    free(glhs);
    free(y);
    return bad_fails;
}
