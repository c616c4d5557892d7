/* The C test functions of tests/c/uma_capi_test.c (called by tests/capi.rs and uma_main.c). */
#ifndef UMA_CAPI_TEST_H
#define UMA_CAPI_TEST_H
#include <stddef.h>
#include <stdint.h>
#include "hetero_uma.h"

int ctest_uma_sequence(size_t slots, const uint32_t *ops, size_t n, int64_t *results);
int ctest_uma_views(void);
int ctest_uma_bad_inputs(void);
int ctest_uma_release_race(uint32_t pairs, uint32_t acquirers, uint32_t rounds, uint64_t *double_ok,
                           uint64_t *aliased, uint64_t *leaked);
int example_uma_split(void);
#endif
