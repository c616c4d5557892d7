/* The README's "From C" example (compiled and run by tests/capi.rs). */
#include <pthread.h>
#include <stdio.h>
#include "hetero_sync.h"

static float out[1024];

static void *producer(void *flag) {
    for (int i = 0; i < 1024; i++) out[i] = (float)i; /* write the data, then publish */
    hetero_sync_flag_publish(flag, 1);
    return NULL;
}

/* One producer thread hands a buffer to this thread through a completion flag. */
int example_sync_handoff(void) {
    hetero_sync_flag_storage mem; /* the caller's memory: the library never allocates a flag */
    hetero_sync_flag *flag = NULL;
    hetero_sync_status st = hetero_sync_flag_init(&mem, sizeof mem, 0, &flag);
    pthread_t t;
    if (!st) pthread_create(&t, NULL, producer, flag);
    if (!st) st = hetero_sync_flag_wait(flag, 1, NULL, NULL, NULL); /* sleep, poll, block */
    if (!st) pthread_join(t, NULL);
    if (st) fprintf(stderr, "hetero_sync: %s (%s)\n", hetero_sync_status_message(st), hetero_sync_last_error());
    return st || out[1023] != 1023.0f;
}
