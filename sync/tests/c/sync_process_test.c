/* Cross-process waits (issue 32, finding 2): a flag in a memfd page shared with another
 * process. The parent places the flag in the page; a forked child maps the same memfd again
 * (at another address, as an unrelated process given the fd would) and blocks in
 * hetero_sync_flag_wait_blocking; the parent writes data, publishes, and the child must wake
 * and see the data. With process-private futexes the child never woke (the kernel keys a
 * private futex by the address space): the parent then times out and kills it. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sync_capi_test.h"

#define FLAG_AT 64   /* the flag's offset in the page */
#define DATA_AT 1024 /* the data the publish hands over */
#define DATA_N 256

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The child: map the memfd anew, attach to the flag, block until epoch 1, check the data.
 * Only syscalls and the library's wait (no allocation) between fork and _exit. */
static void child(int fd) {
    alarm(30); /* a child that never wakes must not outlive the test */
    unsigned char *mine = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mine == MAP_FAILED) _exit(10);
    hetero_sync_flag *f = NULL;
    if (hetero_sync_flag_attach(mine + FLAG_AT, 4, &f) != HETERO_SYNC_OK) _exit(11);
    if (hetero_sync_flag_wait_blocking(f, 1) != HETERO_SYNC_OK) _exit(12);
    const uint32_t *data = (const uint32_t *)(mine + DATA_AT);
    for (uint32_t i = 0; i < DATA_N; i++)
        if (data[i] != i * 2654435761u) _exit(13);
    _exit(0);
}

/* 0 on success; on failure a code and a line on stderr. `timeout_s`: how long the parent waits
 * for the child to block and then to wake. */
int ctest_sync_cross_process(double timeout_s) {
    int fd = memfd_create("hetero-sync-ctest", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 4096) != 0) return 1;
    unsigned char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (page == MAP_FAILED) return 2;
    hetero_sync_flag *flag = NULL;
    if (hetero_sync_flag_init(page + FLAG_AT, 4, 0, &flag) != HETERO_SYNC_OK) return 3;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return 4;
    if (pid == 0) child(fd);
    /* Wait until the child announced itself as a sleeper (bit 31 of the word), so the publish
     * below must wake it through the kernel, not be seen by a poll. */
    const uint32_t *word = (const uint32_t *)(page + FLAG_AT);
    double t0 = now_s();
    int rc = 0;
    while (!(__atomic_load_n(word, __ATOMIC_ACQUIRE) & 0x80000000u)) {
        if (now_s() - t0 > timeout_s) { rc = 5; break; }
        usleep(200);
    }
    if (!rc) {
        usleep(2000); /* let it reach FUTEX_WAIT (the kernel's compare covers the rest) */
        uint32_t *data = (uint32_t *)(page + DATA_AT);
        for (uint32_t i = 0; i < DATA_N; i++) data[i] = i * 2654435761u;
        if (hetero_sync_flag_publish(flag, 1) != HETERO_SYNC_OK) rc = 6;
    }
    int status = 0;
    pid_t done = 0;
    t0 = now_s();
    while (!rc && (done = waitpid(pid, &status, WNOHANG)) == 0) {
        if (now_s() - t0 > timeout_s) { rc = 7; break; }
        usleep(500);
    }
    if (done != pid) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    if (!rc && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        rc = 20 + (WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status));
    if (rc)
        fprintf(stderr, "cross-process wait: failed with %d (5: the child never blocked; 7: the "
                        "publish did not wake the blocked child; 2x: the child's exit code x)\n", rc);
    munmap(page, 4096);
    close(fd);
    return rc;
}
