/* The C test functions of tests/c/sync_capi_test.c (called by tests/capi.rs and sync_main.c). */
#ifndef SYNC_CAPI_TEST_H
#define SYNC_CAPI_TEST_H
#include <stddef.h>
#include <stdint.h>
#include "hetero_sync.h"

/* Op codes of ctest_sync_sequence (pairs of words: op, argument; barrier ops pack the
 * producer in the argument's top 5 bits and the epoch in the low 27). */
enum { OP_PUBLISH = 0, OP_EPOCH = 1, OP_IS_REACHED = 2, OP_ARRIVE = 3, OP_BARRIER_EPOCH = 4 };

int ctest_sync_sequence(uint32_t start_epoch, uint32_t producers, const uint32_t *ops, size_t n,
                        int64_t *results);
int ctest_sync_threads(uint32_t rounds);
int ctest_sync_bad_inputs(void);
int ctest_sync_cross_process(double timeout_s);
int ctest_sync_shared_site(uint32_t rounds);
int example_sync_handoff(void);
#endif
