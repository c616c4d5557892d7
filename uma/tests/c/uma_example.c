/* The README's "From C" example (compiled and run by tests/capi.rs). */
#include <stdio.h>
#include "hetero_uma.h"

/* Two producers fill disjoint column ranges of one 64 x 256 f32 matrix in a pool slot. */
int example_uma_split(void) {
    hetero_uma_pool *pool = NULL;
    hetero_uma_slot slot;
    hetero_uma_view cpu, gpu;
    hetero_uma_layout m = {.rows = 64, .cols = 256, .elem_size = 4, .row_stride = 1024, .offset = 0};
    hetero_uma_status st = hetero_uma_pool_new(4, 64 * 1024, &pool);
    if (!st) st = hetero_uma_acquire(pool, &slot);
    if (!st) st = hetero_uma_slot_columns(pool, slot, &m, 0, 160, &cpu);
    if (!st) st = hetero_uma_slot_columns(pool, slot, &m, 160, 256, &gpu);
    for (size_t r = 0; !st && r < m.rows; r++) {
        float *a = (float *)(cpu.ptr + r * cpu.row_stride), *b = (float *)(gpu.ptr + r * gpu.row_stride);
        for (size_t c = 0; c < cpu.row_bytes / 4; c++) a[c] = 1.0f;
        for (size_t c = 0; c < gpu.row_bytes / 4; c++) b[c] = 2.0f;
    }
    if (!st) st = hetero_uma_release(pool, slot);
    if (st) fprintf(stderr, "hetero_uma: %s (%s)\n", hetero_uma_status_message(st), hetero_uma_last_error());
    return st || hetero_uma_pool_free(pool) != 0;
}
