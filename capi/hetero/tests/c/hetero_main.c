/* One C program on the combined library (libhetero: one copy of Rust's std for every hetero C
 * API), using sme, sync and uma together the way an engine would (scripts/capi.sh test hetero
 * runs it under AddressSanitizer + UndefinedBehaviorSanitizer against libhetero.a, then against
 * libhetero.so through pkg-config):
 *
 *   hetero-partition's planner splits the matmul's columns between two processors (EdgeAgent's
 *   CPU-GPU column split, on a small profile); a uma pool holds the packed activations (slot A) and the output (slot B); two producer
 *   threads each compute one column range of the output with hetero-sme's int8 GEMM tiles and
 *   arrive on a hetero-sync barrier; the main thread waits on the barrier and publishes slot B's
 *   own completion flag (attached from the slot's raw flag word); a consumer thread blocked on
 *   that flag wakes and checks the output bit for bit against one whole-output run_matmul. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hetero.h"

#define M 9
#define N 128
#define K 128
#define Q4_0 2u

static int fails;
#define CHECK(cond, ...)                                           \
    do {                                                           \
        if (!(cond)) {                                             \
            fprintf(stderr, "hetero_main.c:%d: ", __LINE__);        \
            fprintf(stderr, __VA_ARGS__);                          \
            fprintf(stderr, "\n");                                 \
            fails++;                                               \
        }                                                          \
    } while (0)

struct job {
    uint32_t variant;
    const uint8_t *lhs, *rhs;
    size_t lhs_size, rhs_size;
    float *y;        /* the output in slot B */
    const float *want; /* one whole-output run, to compare with */
    hetero_sync_barrier *bar;
    hetero_sync_flag *done; /* slot B's flag */
    size_t c0, c1;   /* this producer's columns */
    uint32_t index;
    int status;
};

static void *producer(void *arg) {
    struct job *j = arg;
    j->status = hetero_sme_matmul_run_matmul(j->variant, 0, M, j->c0, j->c1, j->lhs, j->lhs_size, j->rhs,
                                             j->rhs_size, j->y, (size_t)M * N, N);
    uint32_t left = 99;
    /* arrive even after a failure, so the consumer never waits forever; the status says it */
    hetero_sync_status st = hetero_sync_barrier_arrive(j->bar, j->index, 1, &left);
    if (!j->status) j->status = st;
    return NULL;
}

static void *consumer(void *arg) {
    struct job *j = arg;
    j->status = hetero_sync_flag_wait_blocking(j->done, 1); /* blocks until the main thread publishes */
    if (!j->status)
        for (size_t i = 0; i < (size_t)M * N; i++)
            if (memcmp(&j->y[i], &j->want[i], sizeof(float)) != 0) { j->status = 1000 + (int)(i % 1000); break; }
    return NULL;
}

int main(void) {
    /* the three libraries are the header's versions */
    CHECK(hetero_sme_version() == ((HETERO_SME_VERSION_MAJOR << 16) | (HETERO_SME_VERSION_MINOR << 8) | HETERO_SME_VERSION_PATCH), "sme version");
    CHECK(hetero_sync_version() == ((HETERO_SYNC_VERSION_MAJOR << 16) | (HETERO_SYNC_VERSION_MINOR << 8) | HETERO_SYNC_VERSION_PATCH), "sync version");
    CHECK(hetero_uma_version() == ((HETERO_UMA_VERSION_MAJOR << 16) | (HETERO_UMA_VERSION_MINOR << 8) | HETERO_UMA_VERSION_PATCH), "uma version");
    CHECK(hetero_partition_version() == ((HETERO_PARTITION_VERSION_MAJOR << 16) | (HETERO_PARTITION_VERSION_MINOR << 8) | HETERO_PARTITION_VERSION_PATCH), "partition version");

    /* a Q4_0 weight of N rows x K, quantized from smooth values; activations M x K */
    size_t row = 0;
    CHECK(hetero_sme_type_row_bytes(Q4_0, K, &row) == HETERO_SME_OK && row == K / 32 * 18, "row bytes");
    uint8_t *w = malloc(N * row);
    float *src = malloc(K * sizeof(float)), *x = malloc((size_t)M * K * sizeof(float));
    for (size_t r = 0; r < N; r++) {
        for (size_t i = 0; i < K; i++) src[i] = (float)sin(0.37 * (double)(r * K + i)) * (1.0f + (float)(r % 5));
        CHECK(hetero_sme_quantize_row(Q4_0, src, K, w + r * row, row) == HETERO_SME_OK, "quantize row %zu", r);
    }
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = (float)cos(0.11 * (double)i);

    uint32_t v = 0;
    CHECK(hetero_sme_best_variant(HETERO_SME_FAMILY_INT8_GEMM, &v) == HETERO_SME_OK, "best variant");
    size_t rs = 0, ls = 0;
    CHECK(hetero_sme_matmul_get_rhs_packed_size(v, Q4_0, N, K, &rs) == HETERO_SME_OK, "rhs size");
    CHECK(hetero_sme_matmul_get_lhs_packed_size(v, Q4_0, M, K, &ls) == HETERO_SME_OK, "lhs size");
    uint8_t *rhs = aligned_alloc(HETERO_SME_PACKED_ALIGN, (rs + 63) / 64 * 64);
    CHECK(hetero_sme_matmul_run_rhs_pack(v, Q4_0, N, K, w, N * row, rhs, rs) == HETERO_SME_OK, "rhs pack: %s",
          hetero_sme_last_error());

    /* uma: slot A holds the packed activations, slot B the output (4096-aligned slots) */
    size_t slot_size = 0, need = ls > (size_t)M * N * 4 ? ls : (size_t)M * N * 4;
    CHECK(hetero_uma_round_slot_size(need, &slot_size) == HETERO_UMA_OK, "slot size");
    hetero_uma_pool *pool = NULL;
    hetero_uma_slot a, b;
    hetero_uma_raw_slot ra, rb;
    if (hetero_uma_pool_new(3, slot_size, &pool) || hetero_uma_acquire(pool, &a) || hetero_uma_acquire(pool, &b) ||
        hetero_uma_slot_raw(pool, a, &ra) || hetero_uma_slot_raw(pool, b, &rb)) {
        fprintf(stderr, "uma: %s\n", hetero_uma_last_error());
        return 1;
    }
    CHECK(hetero_sme_matmul_run_lhs_pack(v, Q4_0, M, K, x, (size_t)M * K, K, ra.ptr, ra.len) == HETERO_SME_OK,
          "lhs pack into slot A: %s", hetero_sme_last_error());
    float *y = (float *)rb.ptr;
    for (size_t i = 0; i < (size_t)M * N; i++) y[i] = NAN; /* poisoned */

    /* the reference: the whole output in one call */
    float *want = malloc((size_t)M * N * sizeof(float));
    CHECK(hetero_sme_matmul_run_matmul(v, 0, M, 0, N, ra.ptr, ra.len, rhs, rs, want, (size_t)M * N, N) ==
              HETERO_SME_OK, "reference matmul");

    /* the producers' column ranges: the planner's split (a multiple of 64 columns, so of n_step);
     * uma's views of the same ranges */
    static const char profile[] =
        "{ \"backends\": [\n"
        "  { \"backend\": \"cpu\", \"points\": [ { \"k\": 128, \"n\": 128, \"m\": 1, \"us\": 10 },\n"
        "                                      { \"k\": 128, \"n\": 128, \"m\": 16, \"us\": 20 } ] },\n"
        "  { \"backend\": \"gpu\", \"points\": [ { \"k\": 128, \"n\": 128, \"m\": 1, \"us\": 10 },\n"
        "                                      { \"k\": 128, \"n\": 128, \"m\": 16, \"us\": 20 } ] } ] }";
    hetero_partition_policy cols = {HETERO_PARTITION_POLICY_CPU_GPU_COLUMNS, 0, 0, 0.0};
    hetero_partition_plan plan;
    CHECK(hetero_partition_plan_op(profile, sizeof profile - 1, HETERO_PARTITION_PHASE_PREFILL, &cols, K, N, M, &plan) ==
              HETERO_PARTITION_OK, "plan: %s", hetero_partition_last_error());
    size_t step = hetero_sme_matmul_get_n_step(v), split = plan.cols;
    CHECK(plan.a == HETERO_PARTITION_BACKEND_CPU && plan.b == HETERO_PARTITION_BACKEND_GPU && plan.rows == M &&
              split > 0 && split < N && split % step == 0,
          "the planner's split: %s on %s + %s, %u x %u", hetero_partition_strategy_name(plan.strategy),
          hetero_partition_backend_name(plan.a), hetero_partition_backend_name(plan.b), plan.rows, plan.cols);
    if (split % step != 0 || split > N) split = N / 2;
    hetero_uma_layout lay = {.rows = M, .cols = N, .elem_size = 4, .row_stride = N * 4, .offset = 0};
    hetero_uma_view va, vb;
    CHECK(hetero_uma_slot_columns(pool, b, &lay, 0, split, &va) == HETERO_UMA_OK &&
              hetero_uma_slot_columns(pool, b, &lay, split, N, &vb) == HETERO_UMA_OK,
          "column views");
    CHECK(va.ptr == rb.ptr && vb.ptr == rb.ptr + split * 4 && va.row_stride == N * 4, "views match the tiles");

    /* sync: a barrier over the two producers (caller-placed), slot B's own flag for the consumer */
    hetero_sync_barrier_storage bmem;
    hetero_sync_barrier *bar = NULL;
    hetero_sync_flag *done = NULL;
    CHECK(hetero_sync_barrier_init(&bmem, sizeof bmem, 2, 0, &bar) == HETERO_SYNC_OK, "barrier");
    CHECK(hetero_sync_flag_attach(rb.flag, HETERO_SYNC_FLAG_SIZE, &done) == HETERO_SYNC_OK, "attach slot flag");
    uint32_t e0 = hetero_sync_flag_epoch(done);

    struct job jobs[3];
    for (int i = 0; i < 3; i++)
        jobs[i] = (struct job){v, ra.ptr, rhs, ra.len, rs, y, want, bar, done, i == 0 ? 0 : split, i == 0 ? split : N, (uint32_t)i, 0};
    pthread_t t[3];
    if (e0 != 0) {
        fprintf(stderr, "a fresh slot's flag is at epoch %u\n", e0);
        return 1;
    }
    pthread_create(&t[2], NULL, consumer, &jobs[2]);
    pthread_create(&t[0], NULL, producer, &jobs[0]);
    pthread_create(&t[1], NULL, producer, &jobs[1]);
    hetero_sync_wait_report rep;
    CHECK(hetero_sync_barrier_wait(bar, 1, NULL, NULL, &rep) == HETERO_SYNC_OK, "barrier wait");
    CHECK(hetero_sync_flag_publish(done, 1) == HETERO_SYNC_OK, "publish slot B's flag");
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    CHECK(jobs[0].status == 0 && jobs[1].status == 0, "producers: %d %d (%s)", jobs[0].status, jobs[1].status,
          hetero_sme_status_message(jobs[0].status ? jobs[0].status : jobs[1].status));
    CHECK(jobs[2].status == 0, "consumer: %d (1000+: first differing element)", jobs[2].status);

    /* a refusal from each library, with its own text */
    CHECK(hetero_sme_matmul_run_matmul(v, 0, M, 0, N, ra.ptr, ra.len, rhs, rs, want, 1, N) == HETERO_SME_BUFFER_TOO_SMALL &&
              hetero_sme_last_error()[0] != '\0', "sme refusal");
    CHECK(hetero_sync_flag_publish(done, 1) == HETERO_SYNC_STALE_EPOCH && hetero_sync_last_error()[0] != '\0', "sync refusal");
    CHECK(hetero_uma_release(pool, a) == HETERO_UMA_OK && hetero_uma_release(pool, a) == HETERO_UMA_STALE_HANDLE &&
              hetero_uma_last_error()[0] != '\0', "uma refusal");
    CHECK(strcmp(hetero_sme_last_error(), hetero_uma_last_error()) != 0, "each library keeps its own last error");
    CHECK(hetero_uma_release(pool, b) == HETERO_UMA_OK, "release B");
    CHECK(hetero_uma_pool_free(pool) == 0, "no slot left held");

    free(w);
    free(src);
    free(x);
    free(rhs);
    free(want);
    printf("capi-c hetero (combined library): partition (%s, columns 0..%zu | %zu..%d), sme %s, sync, uma: %s\n",
           hetero_partition_strategy_name(plan.strategy), split, split, N, hetero_sme_variant_name(v),
           fails ? "FAILED" : "passed");
    return fails != 0;
}
