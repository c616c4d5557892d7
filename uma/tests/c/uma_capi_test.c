/* C side of hetero-uma's C API tests. tests/capi.rs replays ctest_uma_sequence's operations on
 * the Rust API and compares; tests/c/uma_main.c runs everything standalone under ASan + UBSan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uma_capi_test.h"

/* ops[i]: 0xFFFFFFFF = acquire, otherwise release the i-th acquisition (index into the
 * acquisitions so far, released again if already released: stale). results[i] = -status, or
 * (slot << 32 | generation) for an acquire, 0 for a release; a byte pattern written into each
 * acquired slot through its raw pointer is checked at its release. */
int ctest_uma_sequence(size_t slots, const uint32_t *ops, size_t n, int64_t *results) {
    hetero_uma_pool *pool = NULL;
    hetero_uma_status st = hetero_uma_pool_new(slots, 4096, &pool);
    if (st) return (int)st;
    hetero_uma_slot *got = calloc(n + 1, sizeof *got);
    size_t ngot = 0;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (ops[i] == 0xFFFFFFFFu) {
            hetero_uma_slot s;
            st = hetero_uma_acquire(pool, &s);
            if (st) { results[i] = -(int64_t)st; continue; }
            hetero_uma_raw_slot raw;
            if (hetero_uma_slot_raw(pool, s, &raw) || raw.len != 4096 || ((uintptr_t)raw.ptr & 4095)) rc = 800;
            else memset(raw.ptr, (int)(i & 0xff), raw.len);
            got[ngot++] = s;
            results[i] = (int64_t)((uint64_t)s.slot << 32 | s.generation);
        } else {
            if (ops[i] >= ngot) { results[i] = -999; continue; }
            hetero_uma_slot s = got[ops[i]];
            int current = hetero_uma_slot_is_current(pool, s);
            st = hetero_uma_release(pool, s);
            if (current != (st == HETERO_UMA_OK)) rc = 801;
            results[i] = -(int64_t)st;
        }
    }
    size_t held = hetero_uma_pool_free(pool);
    size_t want = 0;
    (void)want;
    free(got);
    if (rc) return rc;
    return held > slots ? 802 : 0;
}

int ctest_uma_views(void) {
    hetero_uma_pool *pool = NULL;
    if (hetero_uma_pool_new(2, 8192, &pool)) return 1;
    hetero_uma_slot s;
    if (hetero_uma_acquire(pool, &s)) return 2;
    hetero_uma_layout l = {.rows = 10, .cols = 100, .elem_size = 4, .row_stride = 400 + 16, .offset = 64};
    hetero_uma_view a, b;
    if (hetero_uma_slot_columns(pool, s, &l, 0, 60, &a) || hetero_uma_slot_columns(pool, s, &l, 60, 100, &b)) return 3;
    for (size_t r = 0; r < a.rows; r++) {
        float *ra = (float *)(a.ptr + r * a.row_stride), *rb = (float *)(b.ptr + r * b.row_stride);
        for (size_t c = 0; c < a.row_bytes / 4; c++) ra[c] = (float)(r * 100 + c);
        for (size_t c = 0; c < b.row_bytes / 4; c++) rb[c] = (float)(r * 100 + 60 + c);
    }
    hetero_uma_raw_slot raw;
    if (hetero_uma_slot_raw(pool, s, &raw)) return 4;
    for (size_t r = 0; r < 10; r++)
        for (size_t c = 0; c < 100; c++) {
            float v;
            memcpy(&v, raw.ptr + 64 + r * 416 + c * 4, 4);
            if (v != (float)(r * 100 + c)) return 5;
        }
    if (raw.fd < 0 || raw.flag == NULL || (raw.offset & 4095)) return 6;
    if (hetero_uma_release(pool, s)) return 7;
    return (int)hetero_uma_pool_free(pool);
}

static int bad;
static void expect(hetero_uma_status got, hetero_uma_status want, const char *what, int line) {
    if (got != want) {
        fprintf(stderr, "uma_capi_test.c:%d: %s -> %d (%s), expected %d\n", line, what, (int)got,
                hetero_uma_status_message(got), (int)want);
        bad++;
    } else if (want != HETERO_UMA_OK && hetero_uma_last_error()[0] == '\0') {
        fprintf(stderr, "uma_capi_test.c:%d: %s: no last-error text\n", line, what);
        bad++;
    }
}
#define EXPECT(call, want) expect((call), (want), #call, __LINE__)

int ctest_uma_bad_inputs(void) {
    bad = 0;
    hetero_uma_pool *pool = NULL, *other = NULL;
    size_t sz = 0;
    EXPECT(hetero_uma_pool_new(0, 4096, &pool), HETERO_UMA_BAD_CONFIG);
    EXPECT(hetero_uma_pool_new(2, 0, &pool), HETERO_UMA_BAD_CONFIG);
    EXPECT(hetero_uma_pool_new(2, 100, &pool), HETERO_UMA_MISALIGNED);
    EXPECT(hetero_uma_pool_new(SIZE_MAX, 4096, &pool), HETERO_UMA_BAD_CONFIG);
    EXPECT(hetero_uma_pool_new(2, SIZE_MAX - 4095, &pool), HETERO_UMA_BAD_CONFIG);
    EXPECT(hetero_uma_pool_new(2, 4096, NULL), HETERO_UMA_NULL_POINTER);
    EXPECT(hetero_uma_round_slot_size(SIZE_MAX, &sz), HETERO_UMA_OVERFLOW);
    EXPECT(hetero_uma_round_slot_size(5000, &sz), HETERO_UMA_OK);
    if (sz != 8192) bad++;
    EXPECT(hetero_uma_pool_new(1, 4096, &pool), HETERO_UMA_OK);
    EXPECT(hetero_uma_pool_new(1, 4096, &other), HETERO_UMA_OK);
    hetero_uma_slot s, t;
    EXPECT(hetero_uma_acquire(NULL, &s), HETERO_UMA_NULL_POINTER);
    EXPECT(hetero_uma_acquire(pool, NULL), HETERO_UMA_NULL_POINTER);
    EXPECT(hetero_uma_acquire(pool, &s), HETERO_UMA_OK);
    EXPECT(hetero_uma_acquire(pool, &t), HETERO_UMA_EXHAUSTED);
    EXPECT(hetero_uma_release(other, s), HETERO_UMA_FOREIGN_HANDLE);
    hetero_uma_slot wrong = s;
    wrong.slot = 5;
    EXPECT(hetero_uma_release(pool, wrong), HETERO_UMA_FOREIGN_HANDLE);
    hetero_uma_raw_slot raw;
    hetero_uma_view v;
    hetero_uma_layout l = {.rows = 2, .cols = 8, .elem_size = 4, .row_stride = 32, .offset = 0};
    EXPECT(hetero_uma_slot_raw(pool, s, NULL), HETERO_UMA_NULL_POINTER);
    EXPECT(hetero_uma_slot_columns(pool, s, &l, 4, 2, &v), HETERO_UMA_INVALID_ARGUMENT);
    EXPECT(hetero_uma_slot_columns(pool, s, &l, 0, 9, &v), HETERO_UMA_INVALID_ARGUMENT);
    l.row_stride = 31;
    EXPECT(hetero_uma_slot_columns(pool, s, &l, 0, 8, &v), HETERO_UMA_INVALID_ARGUMENT);
    l.row_stride = 32;
    l.elem_size = 0;
    EXPECT(hetero_uma_slot_columns(pool, s, &l, 0, 8, &v), HETERO_UMA_INVALID_ARGUMENT);
    l.elem_size = 4;
    l.rows = 200;
    EXPECT(hetero_uma_slot_columns(pool, s, &l, 0, 8, &v), HETERO_UMA_INVALID_ARGUMENT);
    l.rows = SIZE_MAX;
    EXPECT(hetero_uma_slot_columns(pool, s, &l, 0, 8, &v), HETERO_UMA_OVERFLOW);
    l.rows = 2;
    l.offset = 4096 - 63;
    EXPECT(hetero_uma_slot_columns(pool, s, &l, 0, 8, &v), HETERO_UMA_INVALID_ARGUMENT);
    EXPECT(hetero_uma_slot_columns(pool, s, NULL, 0, 8, &v), HETERO_UMA_NULL_POINTER);
    EXPECT(hetero_uma_release(pool, s), HETERO_UMA_OK);
    /* the released copy: stale everywhere, and after the slot's next acquisition too */
    EXPECT(hetero_uma_release(pool, s), HETERO_UMA_STALE_HANDLE);
    EXPECT(hetero_uma_slot_raw(pool, s, &raw), HETERO_UMA_STALE_HANDLE);
    EXPECT(hetero_uma_acquire(pool, &t), HETERO_UMA_OK);
    if (t.slot != s.slot || t.generation == s.generation) bad++;
    EXPECT(hetero_uma_slot_raw(pool, s, &raw), HETERO_UMA_STALE_HANDLE);
    EXPECT(hetero_uma_release(pool, s), HETERO_UMA_STALE_HANDLE);
    if (!hetero_uma_slot_is_current(pool, t) || hetero_uma_slot_is_current(pool, s)) bad++;
    EXPECT(hetero_uma_selftest_panic(), HETERO_UMA_PANIC);
    if (hetero_uma_pool_free(pool) != 1) bad++; /* t still held: reported */
    if (hetero_uma_pool_free(other) != 0 || hetero_uma_pool_free(NULL) != 0) bad++;
    for (int32_t k = -3; k < 200; k++)
        if (hetero_uma_status_message(k) == NULL) bad++;
    if (hetero_uma_version() != ((HETERO_UMA_VERSION_MAJOR << 16) | (HETERO_UMA_VERSION_MINOR << 8) |
                                 HETERO_UMA_VERSION_PATCH))
        bad++;
    return bad;
}
