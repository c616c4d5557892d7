/* C side of hetero-sync's C API tests. tests/capi.rs compares ctest_sync_sequence's results
 * with the same operations on the Rust API; tests/c/sync_main.c runs everything standalone
 * under AddressSanitizer and UndefinedBehaviorSanitizer (scripts/capi.sh test). */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sync_capi_test.h"

/* Runs `n` (op, arg) pairs on a flag at `start_epoch` (in caller memory) and a barrier over
 * `producers`; results[i] = the status (negative) or the value of op i. */
int ctest_sync_sequence(uint32_t start_epoch, uint32_t producers, const uint32_t *ops, size_t n,
                        int64_t *results) {
    alignas(HETERO_SYNC_FLAG_ALIGN) unsigned char fmem[HETERO_SYNC_FLAG_SIZE];
    hetero_sync_flag *flag = NULL;
    hetero_sync_barrier *bar = NULL;
    hetero_sync_barrier_storage bmem;
    hetero_sync_status st = hetero_sync_flag_init(fmem, sizeof fmem, start_epoch, &flag);
    if (st) return (int)st;
    st = hetero_sync_barrier_init(&bmem, sizeof bmem, producers, start_epoch, &bar);
    if (st) return (int)st;
    if ((void *)flag != (void *)fmem) return 900;
    for (size_t i = 0; i < n; i++) {
        uint32_t op = ops[2 * i], arg = ops[2 * i + 1];
        switch (op) {
        case OP_PUBLISH:
            results[i] = -(int64_t)hetero_sync_flag_publish(flag, arg);
            break;
        case OP_EPOCH:
            results[i] = hetero_sync_flag_epoch(flag);
            break;
        case OP_IS_REACHED:
            results[i] = hetero_sync_flag_is_reached(flag, arg);
            break;
        case OP_ARRIVE: {
            uint32_t remaining = 99;
            st = hetero_sync_barrier_arrive(bar, arg >> 27, arg & 0x7FFFFFF, &remaining);
            results[i] = st ? -(int64_t)st : (int64_t)remaining;
            break;
        }
        case OP_BARRIER_EPOCH:
            results[i] = hetero_sync_barrier_completed_epoch(bar);
            break;
        default:
            return 901;
        }
    }
    return (void *)bar == (void *)&bmem ? 0 : 902;
}

/* ---- threads: producers write data, then publish / arrive; consumers must see the data ---- */

#define PRODUCERS 3
#define CHUNK 256
struct shared {
    hetero_sync_flag_storage flag_mem; /* heap memory of the caller's (calloc below) */
    hetero_sync_flag *flag;
    hetero_sync_barrier *bar;
    uint32_t rounds;
    uint32_t data[PRODUCERS * CHUNK];
    int failures;
};
struct prod_arg {
    struct shared *s;
    uint32_t index;
};

static void *flag_producer(void *arg) {
    struct shared *s = arg;
    for (uint32_t e = 1; e <= s->rounds; e++) {
        /* Wait until the consumer took epoch e-1 (it publishes nothing: spin on our own data). */
        for (size_t i = 0; i < CHUNK; i++) s->data[i] = e * 1000u + (uint32_t)i;
        if (hetero_sync_flag_publish(s->flag, e) != HETERO_SYNC_OK) s->failures++;
        /* The consumer acknowledges by storing e into data[CHUNK]. */
        while (__atomic_load_n(&s->data[CHUNK], __ATOMIC_ACQUIRE) != e) {}
    }
    return NULL;
}

static void *barrier_producer(void *arg) {
    struct prod_arg *a = arg;
    struct shared *s = a->s;
    for (uint32_t e = 1; e <= s->rounds; e++) {
        /* Epoch e opens when e-1 completed. */
        while (hetero_sync_barrier_completed_epoch(s->bar) != e - 1) {}
        for (size_t i = 0; i < CHUNK; i++) s->data[a->index * CHUNK + i] = e * 7u + a->index;
        if (hetero_sync_barrier_arrive(s->bar, a->index, e, NULL) != HETERO_SYNC_OK) s->failures++;
    }
    return NULL;
}

int ctest_sync_threads(uint32_t rounds) {
    struct shared *s = calloc(1, sizeof *s);
    int fails = 0;
    s->rounds = rounds;
    /* One flag, a thread producer, the consumer alternating the blocking, timed and spin waits. */
    if (hetero_sync_flag_init(&s->flag_mem, sizeof s->flag_mem, 0, &s->flag) != HETERO_SYNC_OK) return 1;
    hetero_sync_site *site = NULL;
    if (hetero_sync_site_new(0, 0, 0, &site) != HETERO_SYNC_OK) return 1;
    hetero_sync_wait_config cfg;
    hetero_sync_wait_config_default(&cfg);
    pthread_t t;
    pthread_create(&t, NULL, flag_producer, s);
    for (uint32_t e = 1; e <= rounds; e++) {
        hetero_sync_status st = HETERO_SYNC_OK;
        hetero_sync_wait_report rep = {99, 0, 0};
        switch (e % 3) {
        case 0: st = hetero_sync_flag_wait_blocking(s->flag, e); break;
        case 1: st = hetero_sync_flag_wait(s->flag, e, &cfg, site, &rep); if (!st && rep.phase > 3) fails++; break;
        default: while (!hetero_sync_flag_wait_spin(s->flag, e, 1000)) {} break;
        }
        if (st) fails++;
        for (size_t i = 0; i < CHUNK; i++)
            if (s->data[i] != e * 1000u + (uint32_t)i) { fails++; break; }
        __atomic_store_n(&s->data[CHUNK], e, __ATOMIC_RELEASE);
    }
    pthread_join(t, NULL);
    uint64_t pred = 0;
    uint32_t samples = 0;
    if (rounds >= 3 && !hetero_sync_site_predicted_ns(site, &pred, &samples)) fails++;
    if (rounds >= 3 && samples == 0) fails++;
    hetero_sync_site_free(site);
    /* A barrier (in caller memory) over three producers writing disjoint ranges. */
    memset(s->data, 0, sizeof s->data);
    alignas(HETERO_SYNC_BARRIER_ALIGN) unsigned char bmem[HETERO_SYNC_BARRIER_SIZE];
    if (hetero_sync_barrier_init(bmem, sizeof bmem, PRODUCERS, 0, &s->bar) != HETERO_SYNC_OK) return 1;
    pthread_t p[PRODUCERS];
    struct prod_arg args[PRODUCERS];
    for (uint32_t i = 0; i < PRODUCERS; i++) {
        args[i] = (struct prod_arg){s, i};
        pthread_create(&p[i], NULL, barrier_producer, &args[i]);
    }
    for (uint32_t e = 1; e <= rounds; e++) {
        if (hetero_sync_barrier_wait(s->bar, e, &cfg, NULL, NULL) != HETERO_SYNC_OK) fails++;
        for (uint32_t i = 0; i < PRODUCERS; i++)
            for (size_t j = 0; j < CHUNK; j++)
                if (s->data[i * CHUNK + j] < e * 7u + i) { fails++; i = PRODUCERS; break; }
        if (!hetero_sync_flag_is_reached(hetero_sync_barrier_flag(s->bar), e)) fails++;
    }
    for (uint32_t i = 0; i < PRODUCERS; i++) pthread_join(p[i], NULL);
    fails += s->failures;
    free(s);
    return fails;
}

/* ---- bad input ------------------------------------------------------------------------------ */

static int bad;
static void expect(hetero_sync_status got, hetero_sync_status want, const char *what, int line) {
    if (got != want) {
        fprintf(stderr, "sync_capi_test.c:%d: %s -> %d (%s), expected %d\n", line, what, (int)got,
                hetero_sync_status_message(got), (int)want);
        bad++;
    } else if (want != HETERO_SYNC_OK && hetero_sync_last_error()[0] == '\0') {
        fprintf(stderr, "sync_capi_test.c:%d: %s: no last-error text\n", line, what);
        bad++;
    }
}
#define EXPECT(call, want) expect((call), (want), #call, __LINE__)

int ctest_sync_bad_inputs(void) {
    bad = 0;
    hetero_sync_flag *f = NULL;
    hetero_sync_barrier *b = NULL;
    alignas(8) unsigned char mem[32];
    EXPECT(hetero_sync_flag_init(mem, 4, 5, NULL), HETERO_SYNC_NULL_POINTER);
    EXPECT(hetero_sync_flag_init(NULL, 4, 0, &f), HETERO_SYNC_NULL_POINTER);
    EXPECT(hetero_sync_flag_init(mem + 1, 8, 0, &f), HETERO_SYNC_MISALIGNED);
    EXPECT(hetero_sync_flag_init(mem, 3, 0, &f), HETERO_SYNC_BUFFER_TOO_SMALL);
    EXPECT(hetero_sync_flag_attach(NULL, 4, &f), HETERO_SYNC_NULL_POINTER);
    EXPECT(hetero_sync_flag_attach(mem, 4, NULL), HETERO_SYNC_NULL_POINTER);
    EXPECT(hetero_sync_flag_attach(mem + 2, 8, &f), HETERO_SYNC_MISALIGNED);
    EXPECT(hetero_sync_flag_attach(mem, 3, &f), HETERO_SYNC_BUFFER_TOO_SMALL);
    EXPECT(hetero_sync_barrier_init(mem + 4, 16, 2, 0, &b), HETERO_SYNC_MISALIGNED);
    EXPECT(hetero_sync_barrier_init(mem, 15, 2, 0, &b), HETERO_SYNC_BUFFER_TOO_SMALL);
    EXPECT(hetero_sync_barrier_init(mem, 16, 0, 0, &b), HETERO_SYNC_BAD_PRODUCER_COUNT);
    EXPECT(hetero_sync_barrier_init(mem, 16, 33, 0, &b), HETERO_SYNC_BAD_PRODUCER_COUNT);
    EXPECT(hetero_sync_barrier_init(NULL, 16, 2, 0, &b), HETERO_SYNC_NULL_POINTER);
    EXPECT(hetero_sync_barrier_init(mem, 16, 2, 0, NULL), HETERO_SYNC_NULL_POINTER);
    EXPECT(hetero_sync_flag_publish(NULL, 1), HETERO_SYNC_NULL_POINTER);
    EXPECT(hetero_sync_flag_wait(NULL, 1, NULL, NULL, NULL), HETERO_SYNC_NULL_POINTER);
    EXPECT(hetero_sync_barrier_arrive(NULL, 0, 1, NULL), HETERO_SYNC_NULL_POINTER);
    EXPECT(hetero_sync_wait_config_default(NULL), HETERO_SYNC_NULL_POINTER);
    if (hetero_sync_flag_epoch(NULL) != 0 || hetero_sync_flag_is_reached(NULL, 0) ||
        hetero_sync_barrier_flag(NULL) != NULL || hetero_sync_site_predicted_ns(NULL, NULL, NULL))
        bad++;
    hetero_sync_site_free(NULL);
    if (sizeof(hetero_sync_flag_storage) != HETERO_SYNC_FLAG_SIZE ||
        alignof(hetero_sync_flag_storage) != HETERO_SYNC_FLAG_ALIGN ||
        sizeof(hetero_sync_barrier_storage) != HETERO_SYNC_BARRIER_SIZE ||
        alignof(hetero_sync_barrier_storage) != HETERO_SYNC_BARRIER_ALIGN)
        bad++;

    EXPECT(hetero_sync_flag_init(mem, 4, 7, &f), HETERO_SYNC_OK);
    EXPECT(hetero_sync_flag_publish(f, 7), HETERO_SYNC_STALE_EPOCH);
    EXPECT(hetero_sync_flag_publish(f, 0x80000009u), HETERO_SYNC_INVALID_EPOCH);
    if (hetero_sync_flag_epoch(f) != 7) bad++;
    hetero_sync_flag *g = NULL; /* attach: the same flag, unchanged */
    EXPECT(hetero_sync_flag_attach(mem, 4, &g), HETERO_SYNC_OK);
    if (g != f || hetero_sync_flag_epoch(g) != 7) bad++;
    hetero_sync_wait_config cfg;
    EXPECT(hetero_sync_wait_config_default(&cfg), HETERO_SYNC_OK);
    cfg.timeout_ns = 2000000; /* 2 ms */
    cfg.producer = HETERO_SYNC_PRODUCER_DEVICE;
    EXPECT(hetero_sync_flag_wait(f, 8, &cfg, NULL, NULL), HETERO_SYNC_TIMEOUT);
    cfg.producer = 7;
    EXPECT(hetero_sync_flag_wait(f, 8, &cfg, NULL, NULL), HETERO_SYNC_INVALID_ARGUMENT);
    EXPECT(hetero_sync_flag_wait(f, 0x80000000u, NULL, NULL, NULL), HETERO_SYNC_INVALID_EPOCH);
    EXPECT(hetero_sync_flag_wait_blocking(f, 0x80000001u), HETERO_SYNC_INVALID_EPOCH);
    hetero_sync_wait_report rep = {42, 0, 0};
    EXPECT(hetero_sync_flag_wait(f, 7, NULL, NULL, &rep), HETERO_SYNC_OK);
    if (rep.phase != HETERO_SYNC_PHASE_IMMEDIATE) bad++;

    hetero_sync_barrier_storage bs;
    EXPECT(hetero_sync_barrier_init(&bs, sizeof bs, 2, 0, &b), HETERO_SYNC_OK);
    EXPECT(hetero_sync_barrier_arrive(b, 2, 1, NULL), HETERO_SYNC_UNKNOWN_PRODUCER);
    EXPECT(hetero_sync_barrier_arrive(b, 0, 2, NULL), HETERO_SYNC_EPOCH_NOT_OPEN);
    EXPECT(hetero_sync_barrier_arrive(b, 0, 0, NULL), HETERO_SYNC_STALE_EPOCH);
    EXPECT(hetero_sync_barrier_arrive(b, 0, 0x80000001u, NULL), HETERO_SYNC_INVALID_EPOCH);
    uint32_t rem = 9;
    EXPECT(hetero_sync_barrier_arrive(b, 0, 1, &rem), HETERO_SYNC_OK);
    if (rem != 1) bad++;
    EXPECT(hetero_sync_barrier_arrive(b, 0, 1, &rem), HETERO_SYNC_DUPLICATE_PUBLISH);
    if (rem != 1) bad++; /* untouched on error */
    EXPECT(hetero_sync_barrier_arrive(b, 1, 1, &rem), HETERO_SYNC_OK);
    if (rem != 0 || hetero_sync_barrier_completed_epoch(b) != 1) bad++;

    EXPECT(hetero_sync_selftest_panic(), HETERO_SYNC_PANIC);
    for (int32_t s = -3; s < 200; s++)
        if (hetero_sync_status_message(s) == NULL) bad++;
    if (hetero_sync_version() != ((HETERO_SYNC_VERSION_MAJOR << 16) | (HETERO_SYNC_VERSION_MINOR << 8) |
                                  HETERO_SYNC_VERSION_PATCH))
        bad++;
    return bad;
}

/* ---- one wait site shared by two waiting threads (issue 32, finding 5) ---- */

struct site_share {
    hetero_sync_flag_storage mem[2];
    hetero_sync_flag *flag[2];
    hetero_sync_site *site;
    uint32_t rounds;
    atomic_uint acked[2];
    atomic_int stop, failures;
};
struct site_waiter {
    struct site_share *s;
    int which;
};

static void *site_waiter_main(void *arg) {
    struct site_waiter *w = arg;
    struct site_share *s = w->s;
    hetero_sync_wait_config cfg;
    hetero_sync_wait_config_default(&cfg);
    cfg.timeout_ns = 5000000000ull;
    for (uint32_t e = 1; e <= s->rounds; e++) {
        hetero_sync_wait_report rep;
        if (hetero_sync_flag_wait(s->flag[w->which], e, &cfg, s->site, &rep) != HETERO_SYNC_OK) {
            atomic_fetch_add(&s->failures, 1);
            break;
        }
        atomic_store_explicit(&s->acked[w->which], e, memory_order_release);
    }
    return NULL;
}

/* Two threads wait (sleep, poll, block) on their own flags with one shared site while a producer
 * publishes both every ~30 us and a reader takes snapshots of the site: every wait must succeed
 * and every snapshot must be a state some wait stored (samples within the waits made, the
 * prediction within the waits' range), never a torn one. Returns the number of failures. */
int ctest_sync_shared_site(uint32_t rounds) {
    static struct site_share s;
    memset(&s, 0, sizeof s);
    s.rounds = rounds;
    for (int i = 0; i < 2; i++)
        if (hetero_sync_flag_init(&s.mem[i], sizeof s.mem[i], 0, &s.flag[i]) != HETERO_SYNC_OK) return 100;
    if (hetero_sync_site_new(0, 0, 0, &s.site) != HETERO_SYNC_OK) return 101;
    struct site_waiter w[2] = {{&s, 0}, {&s, 1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, site_waiter_main, &w[i])) return 102;
    int bad_snap = 0;
    for (uint32_t e = 1; e <= rounds && !atomic_load(&s.failures); e++) {
        struct timespec ts = {0, 30000};
        nanosleep(&ts, NULL);
        for (int i = 0; i < 2; i++)
            if (hetero_sync_flag_publish(s.flag[i], e) != HETERO_SYNC_OK) atomic_fetch_add(&s.failures, 1);
        while ((atomic_load_explicit(&s.acked[0], memory_order_acquire) != e ||
                atomic_load_explicit(&s.acked[1], memory_order_acquire) != e) &&
               !atomic_load(&s.failures)) {
            uint64_t ns = 0;
            uint32_t samples = 0;
            if (hetero_sync_site_predicted_ns(s.site, &ns, &samples) &&
                (samples == 0 || samples > 2 * e || ns > 5000000000ull))
                bad_snap++;
            sched_yield(); /* 2 shared cores: leave them to the waiters */
        }
    }
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    uint64_t ns = 0;
    uint32_t samples = 0;
    int learned = hetero_sync_site_predicted_ns(s.site, &ns, &samples);
    hetero_sync_site_free(s.site);
    int fails = atomic_load(&s.failures) + bad_snap + (!learned || samples == 0 || samples > 2 * rounds);
    if (fails)
        fprintf(stderr, "shared site: %d failed waits, %d bad snapshots, learned %d (%u samples, %llu ns)\n",
                atomic_load(&s.failures), bad_snap, learned, samples, (unsigned long long)ns);
    return fails;
}
