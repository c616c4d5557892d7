/* Standalone C run of hetero-partition's C tests (scripts/capi.sh test: ASan + UBSan). The
 * profile is the example of docs/profile-format.md. */
#include <stdio.h>
#include <string.h>
#include "partition_capi_test.h"

static const char *PROFILE =
    "{ \"device\": \"example SoC\", \"memory_gbps\": 60, \"backends\": [\n"
    "  { \"backend\": \"gpu\", \"bandwidth_gbps\": 43.3, \"weight_bytes\": 0.5625, \"paths\": [\n"
    "    { \"name\": \"gemv\", \"phase\": \"decode\", \"points\": [ { \"k\": 2048, \"n\": 2048, \"m\": 1, \"us\": 60 } ] },\n"
    "    { \"name\": \"gemm\", \"phase\": \"prefill\", \"points\": [ { \"k\": 2048, \"n\": 2048, \"m\": 32, \"us\": 180 },\n"
    "                                                  { \"k\": 2048, \"n\": 2048, \"m\": 256, \"us\": 900 } ] } ] },\n"
    "  { \"backend\": \"cpu\", \"sync_us\": 5, \"bandwidth_gbps\": 20, \"points\": [\n"
    "    { \"k\": 2048, \"n\": 2048, \"m\": 1, \"us\": 150 }, { \"k\": 2048, \"n\": 2048, \"m\": 256, \"us\": 5000 } ] },\n"
    "  { \"backend\": \"npu\", \"sync_us\": 40, \"copy_gbps\": 20, \"standard_m\": [32, 64, 128, 256], \"graph_prepare_us\": 50000,\n"
    "    \"points\": [ { \"k\": 2048, \"n\": 2048, \"m\": 32, \"us\": 150, \"order\": \"activation_first\" },\n"
    "                { \"k\": 2048, \"n\": 2048, \"m\": 256, \"us\": 300, \"order\": \"weight_first\" } ] } ],\n"
    "  \"pairs\": [ { \"backends\": [\"gpu\", \"npu\"], \"split_us\": 15, \"concurrent_gbps\": 59.5 } ] }";

int main(void) {
    int passed = 0, failed = 0, r;
    size_t n = strlen(PROFILE), len = 0;
    const hetero_partition_shape shapes[] = {{2048, 2048}, {2048, 8192}, {8192, 2048}};
    static hetero_partition_plan out[3 * 300];
    for (uint32_t phase = 0; phase < 3; phase++) {
        r = ctest_partition_table(PROFILE, n, phase, NULL, shapes, 3, 300, out, 3 * 300, &len);
        r == 0 && len == 900 ? passed++ : failed++;
        if (r) fprintf(stderr, "FAIL table phase %u: %d (%s)\n", phase, r, hetero_partition_last_error());
    }
    hetero_partition_plan p;
    r = ctest_partition_op(PROFILE, n, HETERO_PARTITION_PHASE_BY_ROWS, NULL, 2048, 2048, 300, &p);
    r == 0 && p.m == 300 && p.total_us > 0 ? passed++ : failed++;
    r = ctest_partition_bad_inputs(PROFILE, n);
    r == 0 ? passed++ : failed++;
    if (r) fprintf(stderr, "FAIL bad inputs: %d\n", r);
    r = example_partition_plan(PROFILE, n);
    r == 0 ? passed++ : failed++;
    printf("capi-c hetero-partition: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
