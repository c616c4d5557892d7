/* Standalone C run of hetero-uma's C tests (scripts/capi.sh test: ASan + UBSan). */
#include <stdio.h>
#include "uma_capi_test.h"

int main(void) {
    int passed = 0, failed = 0, r;
    const uint32_t ops[] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0, 0, 0xFFFFFFFFu, 1, 3, 2};
    int64_t res[9];
    r = ctest_uma_sequence(2, ops, 9, res);
    int ok = r == 0 && res[0] == 0 && res[1] == ((int64_t)1 << 32) && res[2] == -HETERO_UMA_EXHAUSTED &&
             res[3] == 0 && res[4] == -HETERO_UMA_STALE_HANDLE && res[5] == 1 && res[6] == 0 &&
             res[7] == -999 && res[8] == 0;
    ok ? passed++ : failed++;
    if (!ok) fprintf(stderr, "FAIL sequence (%d)\n", r);
    r = ctest_uma_views();
    r == 0 ? passed++ : failed++;
    if (r) fprintf(stderr, "FAIL views: %d\n", r);
    r = ctest_uma_bad_inputs();
    r == 0 ? passed++ : failed++;
    if (r) fprintf(stderr, "FAIL bad inputs: %d\n", r);
    uint64_t dbl = 0, alias = 0, leak = 0;
    r = ctest_uma_release_race(2, 2, 30000, &dbl, &alias, &leak);
    ok = r == 0 && dbl == 0 && alias == 0 && leak == 0;
    ok ? passed++ : failed++;
    if (!ok) fprintf(stderr, "FAIL release race: rc %d, %llu double releases, %llu aliased, %llu leaked\n", r,
                     (unsigned long long)dbl, (unsigned long long)alias, (unsigned long long)leak);
    r = example_uma_split();
    r == 0 ? passed++ : failed++;
    printf("capi-c hetero-uma: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
