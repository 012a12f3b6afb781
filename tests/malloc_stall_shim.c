// An LD_PRELOAD shim for test_watchdog: a rank thread stopped while it holds the allocator's lock.
// PT_STALL_AFTER_MS=N: N ms after the program starts, the first malloc, calloc, realloc or free of
// the thread named "rank 1" takes the shim's lock and never returns; from then on every other
// thread's call waits for that lock, forever, as it would for glibc's arena lock (pipetrain runs
// one arena). Without PT_STALL_AFTER_MS it only passes the calls on.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void __libc_free(void*);

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static volatile int stalled = 0;
static double stall_at = -1;   // seconds on CLOCK_MONOTONIC; -1: never

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((constructor)) static void arm(void) {
    const char* ms = getenv("PT_STALL_AFTER_MS");
    if (ms) stall_at = now() + atof(ms) / 1000;
}

// Before every call: wait forever once a rank holds the lock; be that rank when the time has come.
static void gate(void) {
    if (stall_at < 0) return;
    if (stalled) {
        pthread_mutex_lock(&held);   // never granted
        return;
    }
    if (now() < stall_at) return;
    char name[16] = {0};
    prctl(PR_GET_NAME, name, 0, 0, 0);
    if (strcmp(name, "rank 1") != 0) return;
    pthread_mutex_lock(&held);
    stalled = 1;
    for (;;) pause();
}

void* malloc(size_t n) { gate(); return __libc_malloc(n); }
void* calloc(size_t k, size_t n) { gate(); return __libc_calloc(k, n); }
void* realloc(void* p, size_t n) { gate(); return __libc_realloc(p, n); }
void free(void* p) { gate(); __libc_free(p); }
