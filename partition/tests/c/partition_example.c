/* The README's "From C" example (compiled and run by tests/capi.rs). */
#include <stdio.h>
#include <stdlib.h>
#include "hetero_partition.h"

/* Plans a layer's two weight shapes at 1..64 rows on a profile, then looks one plan up. */
int example_partition_plan(const char *json, size_t json_len) {
    const hetero_partition_shape shapes[] = {{2048, 2048}, {2048, 8192}};
    const uint32_t max_m = 64;
    size_t len = 0;
    hetero_partition_plan *table = NULL;
    const hetero_partition_plan *p = NULL;
    hetero_partition_status st = hetero_partition_plan_table_len(shapes, 2, max_m, &len); /* size first */
    if (!st) table = malloc(len * sizeof *table);
    if (!st) st = hetero_partition_plan_table(json, json_len, HETERO_PARTITION_PHASE_PREFILL, NULL /* solver */,
                                              shapes, 2, max_m, table, len);
    if (!st) st = hetero_partition_plan_table_find(table, len, max_m, 2048, 8192, 48, &p);
    if (!st)
        printf("k=2048 n=8192 m=48: %s on %s + %s, rows %u cols %u, %.1f us\n", hetero_partition_strategy_name(p->strategy),
               hetero_partition_backend_name(p->a), hetero_partition_backend_name(p->b), p->rows, p->cols, p->total_us);
    if (st) fprintf(stderr, "hetero_partition: %s (%s)\n", hetero_partition_status_message(st), hetero_partition_last_error());
    free(table);
    return st;
}
