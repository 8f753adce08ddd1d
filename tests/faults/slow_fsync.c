/* A slow shared disk for one process: every fsync waits PACER_SLOW_FSYNC_MS first.
 * Built by the fault tests and loaded with LD_PRELOAD into a worker, so that a batch write
 * takes seconds (a step's write syncs each file and the folder). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static void wait_a_while(void) {
    const char *ms = getenv("PACER_SLOW_FSYNC_MS");
    long delay = ms ? atol(ms) : 0;
    struct timespec pause = {delay / 1000, (delay % 1000) * 1000000L};
    if (delay > 0) nanosleep(&pause, NULL);
}

int fsync(int fd) {
    static int (*real_fsync)(int);
    if (!real_fsync) real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    wait_a_while();
    return real_fsync(fd);
}
