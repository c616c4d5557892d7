/* The C test functions of tests/c/partition_capi_test.c (called by tests/capi.rs and
 * partition_main.c). */
#ifndef PARTITION_CAPI_TEST_H
#define PARTITION_CAPI_TEST_H
#include <stddef.h>
#include <stdint.h>
#include "hetero_partition.h"

int ctest_partition_table(const char *json, size_t json_len, uint32_t phase, const hetero_partition_policy *policy,
                          const hetero_partition_shape *shapes, size_t n_shapes, uint32_t max_m,
                          hetero_partition_plan *out, size_t cap, size_t *len);
int ctest_partition_op(const char *json, size_t json_len, uint32_t phase, const hetero_partition_policy *policy,
                       uint32_t k, uint32_t n, uint32_t m, hetero_partition_plan *out);
int ctest_partition_bad_inputs(const char *json, size_t json_len);
int example_partition_plan(const char *json, size_t json_len);
#endif
