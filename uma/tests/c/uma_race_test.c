/* Two owners of one slot (issue 32, finding 1): C slot handles are copyable, so a stale copy can
 * be released at the same moment as the holder's own release. Exactly one of the two may
 * succeed; were both to succeed, the slot's next owner would find it marked free and a later
 * acquirer would get the same slot ("refused, never aliased" broken).
 *
 * Threads (pthreads from C, as an engine would call it):
 * - `pairs` holder/rogue pairs: each round the holder acquires a slot and hands a copy of the
 *   handle to its rogue; on a shared start signal both release it at once. A round with two
 *   successful releases is counted in *double_ok.
 * - `acquirers` threads take and give back slots in a loop, marking each slot they hold in
 *   an owner count: a count above one is two live owners of one slot (*aliased).
 * Every successful release matches one acquisition; the pool is clean at the end (*leaked). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "uma_capi_test.h"

#define RACE_SLOTS 2
#define MAX_PAIRS 4
#define MAX_ACQ 4

struct race {
    hetero_uma_pool *pool;
    uint32_t rounds;
    atomic_int stop;
    atomic_uint owners[RACE_SLOTS];
    atomic_ullong double_ok, aliased, acquired, released, stale, exhausted;
};

struct pair {
    struct race *r;
    hetero_uma_slot copy;
    atomic_uint round; /* holder: round r's copy is ready */
    atomic_uint ready; /* rogue: round r's copy read, releasing now */
    atomic_uint done;  /* rogue: round r's release returned */
    atomic_int rogue_ok;
    pthread_t holder, rogue;
};

static void relax(unsigned *spins) {
    if (++*spins % 256 == 0) sched_yield(); /* 2 cores shared with other work: give way */
}

/* A few nanoseconds per step: sweeps the offset between the two releases of a round across
 * the ~100 ns it takes the rogue's "ready" to reach the holder, so some rounds overlap them. */
static void delay(uint32_t steps) {
    for (volatile uint32_t k = 0; k < steps; k++) {
    }
}

static void *holder_main(void *arg) {
    struct pair *p = arg;
    struct race *r = p->r;
    for (uint32_t i = 1; i <= r->rounds && !atomic_load(&r->stop); i++) {
        hetero_uma_slot s;
        unsigned spins = 0;
        hetero_uma_status st;
        while ((st = hetero_uma_acquire(r->pool, &s)) == HETERO_UMA_EXHAUSTED) {
            atomic_fetch_add(&r->exhausted, 1);
            relax(&spins);
        }
        if (st) { atomic_store(&r->stop, 100 + st); break; }
        atomic_fetch_add(&r->acquired, 1);
        p->copy = s; /* published by the release store below */
        atomic_store_explicit(&p->round, i, memory_order_release);
        spins = 0;
        while (atomic_load_explicit(&p->ready, memory_order_acquire) != i) relax(&spins);
        delay((i * 91u) % 256u);
        /* the holder's own release, racing the rogue's release of the copy */
        int mine = hetero_uma_release(r->pool, s) == HETERO_UMA_OK;
        spins = 0;
        while (atomic_load_explicit(&p->done, memory_order_acquire) != i) relax(&spins);
        int theirs = atomic_load(&p->rogue_ok);
        if (mine + theirs == 2) atomic_fetch_add(&r->double_ok, 1);
        if (mine + theirs == 0) atomic_store(&r->stop, 200); /* released by nobody: a bug */
        atomic_fetch_add(&r->released, (unsigned long long)(mine + theirs));
    }
    atomic_store_explicit(&p->round, UINT32_MAX, memory_order_release);
    return NULL;
}

static void *rogue_main(void *arg) {
    struct pair *p = arg;
    uint32_t seen = 0;
    for (;;) {
        unsigned spins = 0;
        uint32_t now;
        while ((now = atomic_load_explicit(&p->round, memory_order_acquire)) == seen) relax(&spins);
        if (now == UINT32_MAX) return NULL;
        seen = now;
        hetero_uma_slot copy = p->copy;
        atomic_store_explicit(&p->ready, now, memory_order_release);
        delay((now * 37u) % 512u);
        hetero_uma_status st = hetero_uma_release(p->r->pool, copy);
        if (st != HETERO_UMA_OK && st != HETERO_UMA_STALE_HANDLE) atomic_store(&p->r->stop, 300 + st);
        if (st == HETERO_UMA_STALE_HANDLE) atomic_fetch_add(&p->r->stale, 1);
        atomic_store(&p->rogue_ok, st == HETERO_UMA_OK);
        atomic_store_explicit(&p->done, now, memory_order_release);
    }
}

static void *acquirer_main(void *arg) {
    struct race *r = arg;
    while (!atomic_load(&r->stop)) {
        hetero_uma_slot s;
        hetero_uma_status st = hetero_uma_acquire(r->pool, &s);
        if (st == HETERO_UMA_EXHAUSTED) { sched_yield(); continue; }
        sched_yield(); /* leave the cores to the pairs most of the time */
        if (st || s.slot >= RACE_SLOTS) { atomic_store(&r->stop, 400 + st); break; }
        atomic_fetch_add(&r->acquired, 1);
        if (atomic_fetch_add(&r->owners[s.slot], 1) != 0) atomic_fetch_add(&r->aliased, 1);
        for (volatile int k = 0; k < 64; k++) {
        }
        atomic_fetch_sub(&r->owners[s.slot], 1);
        st = hetero_uma_release(r->pool, s);
        if (st == HETERO_UMA_OK) atomic_fetch_add(&r->released, 1);
        else if (st != HETERO_UMA_STALE_HANDLE) { atomic_store(&r->stop, 500 + st); break; }
        /* STALE here means a double release above freed our slot under us: the bug, seen as
         * acquired != released below */
    }
    return NULL;
}

int ctest_uma_release_race(uint32_t pairs, uint32_t acquirers, uint32_t rounds, uint64_t *double_ok,
                           uint64_t *aliased, uint64_t *leaked) {
    if (pairs == 0 || pairs > MAX_PAIRS || acquirers > MAX_ACQ || !double_ok || !aliased || !leaked) return 1;
    static struct race r;
    static struct pair ps[MAX_PAIRS];
    memset(&r, 0, sizeof r);
    memset(ps, 0, sizeof ps);
    r.rounds = rounds;
    if (hetero_uma_pool_new(RACE_SLOTS, 4096, &r.pool)) return 2;
    pthread_t acq[MAX_ACQ];
    for (uint32_t i = 0; i < acquirers; i++)
        if (pthread_create(&acq[i], NULL, acquirer_main, &r)) return 3;
    for (uint32_t i = 0; i < pairs; i++) {
        ps[i].r = &r;
        if (pthread_create(&ps[i].rogue, NULL, rogue_main, &ps[i]) ||
            pthread_create(&ps[i].holder, NULL, holder_main, &ps[i]))
            return 4;
    }
    for (uint32_t i = 0; i < pairs; i++) {
        pthread_join(ps[i].holder, NULL);
        pthread_join(ps[i].rogue, NULL);
    }
    int why = atomic_exchange(&r.stop, 1);
    for (uint32_t i = 0; i < acquirers; i++) pthread_join(acq[i], NULL);
    *double_ok = atomic_load(&r.double_ok);
    *aliased = atomic_load(&r.aliased);
    unsigned long long acquired = atomic_load(&r.acquired), released = atomic_load(&r.released);
    size_t held = hetero_uma_pool_free(r.pool);
    /* leaked: slots still marked held, or successful releases that do not match acquisitions */
    *leaked = held + (acquired > released ? acquired - released : released - acquired);
    fprintf(stderr,
            "uma release race: %u pairs, %u acquirers, %u rounds: %llu acquisitions, %llu releases, "
            "%llu stale refusals, %llu double releases, %llu aliased, %zu held at the end\n",
            pairs, acquirers, rounds, acquired, released, (unsigned long long)atomic_load(&r.stale),
            (unsigned long long)*double_ok, (unsigned long long)*aliased, held);
    return why;
}
