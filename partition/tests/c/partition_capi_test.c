/* C side of hetero-partition's C API tests. tests/capi.rs compares the tables and plans made
 * here with the Rust API's, field for field; tests/c/partition_main.c runs everything standalone
 * under AddressSanitizer and UndefinedBehaviorSanitizer (scripts/capi.sh test). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition_capi_test.h"

static int same(const hetero_partition_plan *a, const hetero_partition_plan *b) { return memcmp(a, b, sizeof *a) == 0; }

/* Queries the length, plans the table into a poisoned array of exactly that length, checks
 * that every entry is found by hetero_partition_plan_table_find at its place, and copies the
 * table to `out` (cap entries). Returns a status, or 900+ for a failed check. */
int ctest_partition_table(const char *json, size_t json_len, uint32_t phase, const hetero_partition_policy *policy,
                          const hetero_partition_shape *shapes, size_t n_shapes, uint32_t max_m,
                          hetero_partition_plan *out, size_t cap, size_t *len) {
    hetero_partition_status st = hetero_partition_plan_table_len(shapes, n_shapes, max_m, len);
    if (st) return st;
    hetero_partition_plan *t = malloc(*len * sizeof *t);
    memset(t, 0xA5, *len * sizeof *t);
    st = hetero_partition_plan_table(json, json_len, phase, policy, shapes, n_shapes, max_m, t, *len);
    int rc = st;
    for (size_t i = 0; !rc && i < *len; i++) {
        const hetero_partition_plan *f = NULL;
        st = hetero_partition_plan_table_find(t, *len, max_m, t[i].k, t[i].n, t[i].m, &f);
        if (st || f != &t[i] || t[i].m != (uint32_t)(i % max_m) + 1) rc = 900;
        if (i > 0 && i % max_m == 0 && !(t[i - 1].k < t[i].k || (t[i - 1].k == t[i].k && t[i - 1].n < t[i].n)))
            rc = 901; /* shapes sorted by (k, n), each once */
    }
    if (!rc && cap >= *len) memcpy(out, t, *len * sizeof *t);
    free(t);
    return rc;
}

int ctest_partition_op(const char *json, size_t json_len, uint32_t phase, const hetero_partition_policy *policy,
                       uint32_t k, uint32_t n, uint32_t m, hetero_partition_plan *out) {
    return hetero_partition_plan_op(json, json_len, phase, policy, k, n, m, out);
}

static int bad;
static void expect(hetero_partition_status got, hetero_partition_status want, const char *what, int line) {
    if (got != want) {
        fprintf(stderr, "partition_capi_test.c:%d: %s -> %d (%s: %s), expected %d\n", line, what, (int)got,
                hetero_partition_status_message(got), hetero_partition_last_error(), (int)want);
        bad++;
    } else if (want != HETERO_PARTITION_OK && hetero_partition_last_error()[0] == '\0') {
        fprintf(stderr, "partition_capi_test.c:%d: %s: no last-error text\n", line, what);
        bad++;
    }
}
#define EXPECT(call, want) expect((call), (want), #call, __LINE__)
#define LAST_HAS(text)                                                                        \
    do {                                                                                      \
        if (!strstr(hetero_partition_last_error(), (text))) {                                 \
            fprintf(stderr, "partition_capi_test.c:%d: last error '%s' lacks '%s'\n", __LINE__, \
                    hetero_partition_last_error(), (text));                                   \
            bad++;                                                                            \
        }                                                                                     \
    } while (0)

/* `json`: a valid profile with CPU and GPU (and maybe NPU) latencies at k = n = 2048. Returns
 * the number of failed checks. */
int ctest_partition_bad_inputs(const char *json, size_t json_len) {
    bad = 0;
    const hetero_partition_shape sh[2] = {{2048, 2048}, {2048, 2048}};
    size_t len = 0;
    hetero_partition_plan p, t[8];
    memset(t, 0x5A, sizeof t);
    const hetero_partition_plan poison = t[0];

    EXPECT(hetero_partition_profile_check(json, json_len), HETERO_PARTITION_OK);
    EXPECT(hetero_partition_plan_table_len(sh, 2, 4, &len), HETERO_PARTITION_OK);
    if (len != 4) bad++; /* duplicates count once */

    /* bad JSON: syntax, an unknown (misspelt) field, a wrong type, not UTF-8, empty */
    const char *syntax = "{ \"backends\": [ { \"backend\": \"gpu\" ";
    EXPECT(hetero_partition_profile_check(syntax, strlen(syntax)), HETERO_PARTITION_BAD_JSON);
    LAST_HAS("line 1");
    const char *typo = "{ \"backends\": [ { \"backend\": \"gpu\", \"sync_usec\": 5,\n"
                       "  \"points\": [ { \"k\": 64, \"n\": 64, \"m\": 1, \"us\": 3 } ] } ] }";
    EXPECT(hetero_partition_profile_check(typo, strlen(typo)), HETERO_PARTITION_BAD_JSON);
    LAST_HAS("sync_usec");
    const char *type = "{ \"backends\": [ { \"backend\": 7, \"points\": [] } ] }";
    EXPECT(hetero_partition_profile_check(type, strlen(type)), HETERO_PARTITION_BAD_JSON);
    const char utf8[] = {'{', '"', (char)0xC3, '"', '}'};
    EXPECT(hetero_partition_profile_check(utf8, sizeof utf8), HETERO_PARTITION_BAD_JSON);
    LAST_HAS("UTF-8");
    EXPECT(hetero_partition_profile_check(json, 0), HETERO_PARTITION_BAD_JSON);

    /* bad profiles: a negative latency, no backends, a duplicate backend */
    const char *neg = "{ \"backends\": [ { \"backend\": \"cpu\", \"points\": [ { \"k\": 64, \"n\": 64, \"m\": 1, \"us\": -3 } ] } ] }";
    EXPECT(hetero_partition_profile_check(neg, strlen(neg)), HETERO_PARTITION_BAD_PROFILE);
    const char *none = "{ \"backends\": [] }";
    EXPECT(hetero_partition_profile_check(none, strlen(none)), HETERO_PARTITION_BAD_PROFILE);
    const char *dup = "{ \"backends\": [ { \"backend\": \"cpu\", \"points\": [ { \"k\": 64, \"n\": 64, \"m\": 1, \"us\": 3 } ] },"
                      " { \"backend\": \"cpu\", \"points\": [ { \"k\": 64, \"n\": 64, \"m\": 1, \"us\": 3 } ] } ] }";
    EXPECT(hetero_partition_profile_check(dup, strlen(dup)), HETERO_PARTITION_BAD_PROFILE);
    /* ... and through the planning calls: nothing written */
    EXPECT(hetero_partition_plan_table(neg, strlen(neg), 0, NULL, sh, 1, 2, t, 8), HETERO_PARTITION_BAD_PROFILE);
    EXPECT(hetero_partition_plan_table(typo, strlen(typo), 0, NULL, sh, 1, 2, t, 8), HETERO_PARTITION_BAD_JSON);
    EXPECT(hetero_partition_plan_op(neg, strlen(neg), 0, NULL, 64, 64, 1, t), HETERO_PARTITION_BAD_PROFILE);

    /* no plan: a forced single backend the profile lacks */
    const char *cpu_only = "{ \"backends\": [ { \"backend\": \"cpu\", \"points\": [ { \"k\": 64, \"n\": 64, \"m\": 1, \"us\": 3 } ] } ] }";
    hetero_partition_policy npu = {HETERO_PARTITION_POLICY_SINGLE, HETERO_PARTITION_BACKEND_NPU, 0, 0.0};
    EXPECT(hetero_partition_plan_table(cpu_only, strlen(cpu_only), 0, &npu, sh, 1, 2, t, 8), HETERO_PARTITION_NO_PLAN);
    LAST_HAS("k=2048 n=2048 m=1");
    EXPECT(hetero_partition_plan_op(cpu_only, strlen(cpu_only), 0, &npu, 64, 64, 1, t), HETERO_PARTITION_NO_PLAN);

    /* bad arguments */
    hetero_partition_policy badp = {99, 0, 0, 0.0};
    EXPECT(hetero_partition_plan_table(json, json_len, 0, &badp, sh, 1, 2, t, 8), HETERO_PARTITION_INVALID_ARGUMENT);
    badp = (hetero_partition_policy){HETERO_PARTITION_POLICY_SINGLE, 7, 0, 0.0};
    EXPECT(hetero_partition_plan_table(json, json_len, 0, &badp, sh, 1, 2, t, 8), HETERO_PARTITION_INVALID_ARGUMENT);
    badp = (hetero_partition_policy){HETERO_PARTITION_POLICY_WEIGHT_CENTRIC, 0, 1, 1.5};
    EXPECT(hetero_partition_plan_table(json, json_len, 0, &badp, sh, 1, 2, t, 8), HETERO_PARTITION_INVALID_ARGUMENT);
    badp.ratio = NAN;
    EXPECT(hetero_partition_plan_table(json, json_len, 0, &badp, sh, 1, 2, t, 8), HETERO_PARTITION_INVALID_ARGUMENT);
    EXPECT(hetero_partition_plan_table(json, json_len, 3, NULL, sh, 1, 2, t, 8), HETERO_PARTITION_INVALID_ARGUMENT);
    EXPECT(hetero_partition_plan_op(json, json_len, 0, NULL, 0, 64, 1, &p), HETERO_PARTITION_NO_PLAN);

    /* sizes: no shapes, max_m 0 or too large, too many shapes, an output too short */
    EXPECT(hetero_partition_plan_table_len(sh, 0, 4, &len), HETERO_PARTITION_BAD_TABLE_SIZE);
    EXPECT(hetero_partition_plan_table_len(sh, 1, 0, &len), HETERO_PARTITION_BAD_TABLE_SIZE);
    EXPECT(hetero_partition_plan_table_len(sh, 1, HETERO_PARTITION_MAX_TABLE_M + 1, &len), HETERO_PARTITION_BAD_TABLE_SIZE);
    {
        hetero_partition_shape *many = malloc((HETERO_PARTITION_MAX_TABLE_SHAPES + 1) * sizeof *many);
        for (uint32_t i = 0; i <= HETERO_PARTITION_MAX_TABLE_SHAPES; i++) many[i] = (hetero_partition_shape){64, 64 + i};
        EXPECT(hetero_partition_plan_table_len(many, HETERO_PARTITION_MAX_TABLE_SHAPES + 1, 1, &len), HETERO_PARTITION_BAD_TABLE_SIZE);
        EXPECT(hetero_partition_plan_table_len(many, HETERO_PARTITION_MAX_TABLE_SHAPES, 1, &len), HETERO_PARTITION_OK);
        free(many);
    }
    EXPECT(hetero_partition_plan_table(json, json_len, 0, NULL, sh, 1, 4, t, 3), HETERO_PARTITION_BUFFER_TOO_SMALL);
    EXPECT(hetero_partition_plan_table(json, json_len, 0, NULL, sh, 0, 4, t, 8), HETERO_PARTITION_BAD_TABLE_SIZE);

    /* null pointers */
    EXPECT(hetero_partition_profile_check(NULL, 4), HETERO_PARTITION_NULL_POINTER);
    EXPECT(hetero_partition_plan_table_len(NULL, 1, 4, &len), HETERO_PARTITION_NULL_POINTER);
    EXPECT(hetero_partition_plan_table_len(sh, 1, 4, NULL), HETERO_PARTITION_NULL_POINTER);
    EXPECT(hetero_partition_plan_table(NULL, 4, 0, NULL, sh, 1, 4, t, 8), HETERO_PARTITION_NULL_POINTER);
    EXPECT(hetero_partition_plan_table(json, json_len, 0, NULL, sh, 1, 4, NULL, 8), HETERO_PARTITION_NULL_POINTER);
    EXPECT(hetero_partition_plan_op(json, json_len, 0, NULL, 64, 64, 1, NULL), HETERO_PARTITION_NULL_POINTER);

    /* nothing above wrote the output */
    for (int i = 0; i < 8; i++)
        if (!same(&t[i], &poison)) {
            fprintf(stderr, "partition_capi_test.c: a refused call wrote entry %d\n", i);
            bad++;
            break;
        }

    /* find: a shape not in the table, m out of range, a max_m that does not fit */
    EXPECT(hetero_partition_plan_table(json, json_len, 0, NULL, sh, 2, 4, t, 8), HETERO_PARTITION_OK);
    const hetero_partition_plan *f = NULL;
    EXPECT(hetero_partition_plan_table_find(t, 4, 4, 2048, 2048, 3, &f), HETERO_PARTITION_OK);
    if (f != &t[2]) bad++;
    EXPECT(hetero_partition_plan_table_find(t, 4, 4, 2048, 1024, 3, &f), HETERO_PARTITION_INVALID_ARGUMENT);
    EXPECT(hetero_partition_plan_table_find(t, 4, 4, 2048, 2048, 5, &f), HETERO_PARTITION_INVALID_ARGUMENT);
    EXPECT(hetero_partition_plan_table_find(t, 4, 3, 2048, 2048, 1, &f), HETERO_PARTITION_INVALID_ARGUMENT);
    EXPECT(hetero_partition_plan_table_find(NULL, 4, 4, 2048, 2048, 1, &f), HETERO_PARTITION_NULL_POINTER);

    /* names, messages, version, a panic inside Rust */
    if (strcmp(hetero_partition_backend_name(HETERO_PARTITION_BACKEND_GPU), "gpu") ||
        strcmp(hetero_partition_backend_name(99), "unknown") ||
        strcmp(hetero_partition_strategy_name(HETERO_PARTITION_STRATEGY_HYBRID), "hybrid") ||
        strcmp(hetero_partition_strategy_name(99), "unknown"))
        bad++;
    for (int32_t s = -3; s < 200; s++)
        if (hetero_partition_status_message(s) == NULL) bad++;
    EXPECT(hetero_partition_selftest_panic(), HETERO_PARTITION_PANIC);
    if (hetero_partition_version() != ((HETERO_PARTITION_VERSION_MAJOR << 16) | (HETERO_PARTITION_VERSION_MINOR << 8) |
                                       HETERO_PARTITION_VERSION_PATCH))
        bad++;
    return bad;
}
