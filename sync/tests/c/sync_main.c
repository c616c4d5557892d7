/* Standalone C run of hetero-sync's C tests (scripts/capi.sh test builds it against the
 * staticlib with -fsanitize=address,undefined). Ends with "N passed, N failed". */
#include <stdio.h>
#include "sync_capi_test.h"

int main(void) {
    int passed = 0, failed = 0;
    const uint32_t ops[] = {OP_PUBLISH, 3, OP_EPOCH, 0, OP_IS_REACHED, 2, OP_IS_REACHED, 4,
                            OP_PUBLISH, 2, OP_ARRIVE, (0u << 27) | 1, OP_ARRIVE, (1u << 27) | 1,
                            OP_BARRIER_EPOCH, 0};
    int64_t res[8];
    int r = ctest_sync_sequence(0, 2, ops, 8, res);
    int ok = r == 0 && res[0] == 0 && res[1] == 3 && res[2] == 1 && res[3] == 0 &&
             res[4] == -HETERO_SYNC_STALE_EPOCH && res[5] == 1 && res[6] == 0 && res[7] == 1;
    ok ? passed++ : failed++;
    if (!ok) fprintf(stderr, "FAIL sequence\n");
    r = ctest_sync_threads(200);
    r == 0 ? passed++ : failed++;
    if (r) fprintf(stderr, "FAIL threads: %d\n", r);
    r = ctest_sync_bad_inputs();
    r == 0 ? passed++ : failed++;
    if (r) fprintf(stderr, "FAIL bad inputs: %d\n", r);
    r = ctest_sync_shared_site(100);
    r == 0 ? passed++ : failed++;
    if (r) fprintf(stderr, "FAIL shared site: %d\n", r);
    r = ctest_sync_cross_process(5.0);
    r == 0 ? passed++ : failed++;
    if (r) fprintf(stderr, "FAIL cross-process wait: %d\n", r);
    r = example_sync_handoff();
    r == 0 ? passed++ : failed++;
    printf("capi-c hetero-sync: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
