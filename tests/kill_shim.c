/* kill_shim.c — an LD_PRELOAD library that counts the filesystem calls a process makes and
 * kills it (SIGKILL, no clean-up, as a power cut or the OOM killer would) right before the
 * K-th one. tests/test_crash_safety.cpp runs `pipetrain train` under it once unarmed to learn
 * the number of calls N, then once for every K in 1..N.
 *
 *   PT_KILL_AT=K        raise SIGKILL right before the K-th counted call (K >= 1)
 *   PT_KILL_COUNT=FILE  at a normal exit, write the total to FILE, then one "kind count" line per kind
 *   PT_KILL_LOG=FILE    append one line per counted call: "n kind path"
 *   PT_FAIL_FSYNC=K     make the K-th fsync/fdatasync fail with EIO instead (K >= 1): a disk
 *                       error the process sees and reports, where PT_KILL_AT is a kill it never sees
 *
 * Counted: every call that changes a directory or makes data durable: rename, renameat,
 * renameat2, link, linkat, unlink, unlinkat, remove, rmdir, mkdir, mkdirat, fsync, fdatasync,
 * syncfs, and open/openat/creat/fopen/mkstemp only when they may create a file (O_CREAT,
 * O_TMPFILE, fopen mode "w"/"a"). libstdc++'s std::filesystem calls the plain POSIX functions
 * (GCC 12, checked with strace -f: remove_all = unlinkat per entry + remove(3) for the
 * directory; rename = rename; create_directory = mkdir), so interposing them catches it too;
 * glibc's own internal calls (fopen → openat, remove → unlink + rmdir) bypass the PLT and are
 * counted once, at the outer call. A raw syscall(SYS_renameat2, …) is counted as well.
 * Writes are not counted: a kill between two writes leaves the same kind of state (a partial
 * file not yet renamed anywhere) as a kill before the fsync that follows them.
 * Linux + glibc only.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

enum Kind { RENAME, UNLINK, REMOVE, RMDIR, MKDIR, LINK, FSYNC, CREATE, NUM_KINDS };
static const char* const kind_names[NUM_KINDS] = {"rename", "unlink", "remove", "rmdir",
                                                  "mkdir",  "link",   "fsync",  "create"};

static atomic_long calls;
static atomic_long calls_by_kind[NUM_KINDS];
static long kill_at;      /* 0: unarmed */
static long fail_fsync_at;   /* 0: unarmed */
static atomic_long fsyncs;
static int log_fd = -1;
static char count_path[4096];

/* The next definition of `name` after this library (libc's, or a sanitizer's interceptor). */
#define REAL(type, name, args)                                                       \
    static type(*real_##name) args;                                                  \
    if (!real_##name) real_##name = (type(*) args)dlsym(RTLD_NEXT, #name);

static int (*real_open_for_log)(const char*, int, ...);

static atomic_int armed;   /* shim_init has run */

static void count(enum Kind kind, const char* path, int fd) {
    /* Calls before this library's constructor are not the program's: AddressSanitizer's runtime,
     * which starts first, makes the directories of its log_path. Counted, they were 3 calls no
     * kill could reach (PT_KILL_AT is read in the constructor, where getenv works). */
    if (!atomic_load(&armed)) return;
    long n = atomic_fetch_add(&calls, 1) + 1;
    atomic_fetch_add(&calls_by_kind[kind], 1);
    if (log_fd >= 0) {
        char fd_path[4096] = "";
        if (!path && fd >= 0) {   /* fsync(fd): name the file it is open on */
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t len = readlink(link, fd_path, sizeof fd_path - 1);
            fd_path[len > 0 ? len : 0] = 0;
            path = fd_path;
        }
        char line[8300];
        int len = snprintf(line, sizeof line, "%ld %s %s\n", n, kind_names[kind], path ? path : "");
        if (len > 0) (void)!write(log_fd, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
    }
    if (kill_at > 0 && n == kill_at) raise(SIGKILL);
}

__attribute__((constructor)) static void shim_init(void) {
    real_open_for_log = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, "open");
    const char* at = getenv("PT_KILL_AT");
    if (at) kill_at = atol(at);
    const char* fail = getenv("PT_FAIL_FSYNC");
    if (fail) fail_fsync_at = atol(fail);
    const char* log = getenv("PT_KILL_LOG");
    if (log && *log) log_fd = real_open_for_log(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const char* cnt = getenv("PT_KILL_COUNT");
    if (cnt) snprintf(count_path, sizeof count_path, "%s", cnt);
    atomic_store(&armed, 1);
}

__attribute__((destructor)) static void shim_exit(void) {
    if (!count_path[0] || !real_open_for_log) return;
    int fd = real_open_for_log(count_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    char text[1024];
    int len = snprintf(text, sizeof text, "%ld\n", atomic_load(&calls));
    for (int k = 0; k < NUM_KINDS && len > 0 && len < (int)sizeof text; k++)
        len += snprintf(text + len, sizeof text - (size_t)len, "%s %ld\n", kind_names[k],
                        atomic_load(&calls_by_kind[k]));
    if (len > 0) (void)!write(fd, text, (size_t)len < sizeof text ? (size_t)len : sizeof text - 1);
    close(fd);
}

static int creates(int flags) { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE; }

/* ---- directory entries ------------------------------------------------------------------ */
int rename(const char* from, const char* to) {
    REAL(int, rename, (const char*, const char*));
    count(RENAME, to, -1);
    return real_rename(from, to);
}
int renameat(int fd1, const char* from, int fd2, const char* to) {
    REAL(int, renameat, (int, const char*, int, const char*));
    count(RENAME, to, -1);
    return real_renameat(fd1, from, fd2, to);
}
int renameat2(int fd1, const char* from, int fd2, const char* to, unsigned flags) {
    REAL(int, renameat2, (int, const char*, int, const char*, unsigned));
    count(RENAME, to, -1);
    return real_renameat2(fd1, from, fd2, to, flags);
}
int link(const char* from, const char* to) {
    REAL(int, link, (const char*, const char*));
    count(LINK, to, -1);
    return real_link(from, to);
}
int linkat(int fd1, const char* from, int fd2, const char* to, int flags) {
    REAL(int, linkat, (int, const char*, int, const char*, int));
    count(LINK, to, -1);
    return real_linkat(fd1, from, fd2, to, flags);
}
int unlink(const char* path) {
    REAL(int, unlink, (const char*));
    count(UNLINK, path, -1);
    return real_unlink(path);
}
int unlinkat(int fd, const char* path, int flags) {
    REAL(int, unlinkat, (int, const char*, int));
    count((flags & AT_REMOVEDIR) ? RMDIR : UNLINK, path, -1);
    return real_unlinkat(fd, path, flags);
}
int remove(const char* path) {
    REAL(int, remove, (const char*));
    count(REMOVE, path, -1);
    return real_remove(path);
}
int rmdir(const char* path) {
    REAL(int, rmdir, (const char*));
    count(RMDIR, path, -1);
    return real_rmdir(path);
}
int mkdir(const char* path, mode_t mode) {
    REAL(int, mkdir, (const char*, mode_t));
    count(MKDIR, path, -1);
    return real_mkdir(path, mode);
}
int mkdirat(int fd, const char* path, mode_t mode) {
    REAL(int, mkdirat, (int, const char*, mode_t));
    count(MKDIR, path, -1);
    return real_mkdirat(fd, path, mode);
}

/* ---- durability ---------------------------------------------------------------------------- */
/* PT_FAIL_FSYNC: true when this fsync is the one that fails. */
static int fsync_fails(void) {
    if (fail_fsync_at <= 0 || atomic_fetch_add(&fsyncs, 1) + 1 != fail_fsync_at) return 0;
    errno = EIO;
    return 1;
}
int fsync(int fd) {
    REAL(int, fsync, (int));
    count(FSYNC, NULL, fd);
    return fsync_fails() ? -1 : real_fsync(fd);
}
int fdatasync(int fd) {
    REAL(int, fdatasync, (int));
    count(FSYNC, NULL, fd);
    return fsync_fails() ? -1 : real_fdatasync(fd);
}
int syncfs(int fd) {
    REAL(int, syncfs, (int));
    count(FSYNC, NULL, fd);
    return real_syncfs(fd);
}

/* ---- files created ----------------------------------------------------------------------- */
#define OPEN_LIKE(name)                                                   \
    int name(const char* path, int flags, ...) {                          \
        REAL(int, name, (const char*, int, ...));                         \
        mode_t mode = 0;                                                  \
        if (creates(flags)) {                                             \
            va_list ap;                                                   \
            va_start(ap, flags);                                          \
            mode = va_arg(ap, mode_t);                                    \
            va_end(ap);                                                   \
            count(CREATE, path, -1);                                      \
        }                                                                 \
        return real_##name(path, flags, mode);                            \
    }
#define OPENAT_LIKE(name)                                                 \
    int name(int dirfd, const char* path, int flags, ...) {               \
        REAL(int, name, (int, const char*, int, ...));                    \
        mode_t mode = 0;                                                  \
        if (creates(flags)) {                                             \
            va_list ap;                                                   \
            va_start(ap, flags);                                          \
            mode = va_arg(ap, mode_t);                                    \
            va_end(ap);                                                   \
            count(CREATE, path, -1);                                      \
        }                                                                 \
        return real_##name(dirfd, path, flags, mode);                     \
    }
OPEN_LIKE(open)
OPEN_LIKE(open64)
OPENAT_LIKE(openat)
OPENAT_LIKE(openat64)

/* What _FORTIFY_SOURCE builds call instead of open/openat (the flags carry no O_CREAT: a
 * mode would be needed). */
int __open_2(const char* path, int flags) {
    REAL(int, __open_2, (const char*, int));
    if (creates(flags)) count(CREATE, path, -1);
    return real___open_2(path, flags);
}
int __open64_2(const char* path, int flags) {
    REAL(int, __open64_2, (const char*, int));
    if (creates(flags)) count(CREATE, path, -1);
    return real___open64_2(path, flags);
}
int __openat_2(int dirfd, const char* path, int flags) {
    REAL(int, __openat_2, (int, const char*, int));
    if (creates(flags)) count(CREATE, path, -1);
    return real___openat_2(dirfd, path, flags);
}

int creat(const char* path, mode_t mode) {
    REAL(int, creat, (const char*, mode_t));
    count(CREATE, path, -1);
    return real_creat(path, mode);
}
int creat64(const char* path, mode_t mode) {
    REAL(int, creat64, (const char*, mode_t));
    count(CREATE, path, -1);
    return real_creat64(path, mode);
}
FILE* fopen(const char* path, const char* mode) {   /* std::ofstream's filebuf opens through it */
    REAL(FILE*, fopen, (const char*, const char*));
    if (strpbrk(mode, "wa")) count(CREATE, path, -1);
    return real_fopen(path, mode);
}
FILE* fopen64(const char* path, const char* mode) {
    REAL(FILE*, fopen64, (const char*, const char*));
    if (strpbrk(mode, "wa")) count(CREATE, path, -1);
    return real_fopen64(path, mode);
}
int mkstemp(char* tmpl) {
    REAL(int, mkstemp, (char*));
    count(CREATE, tmpl, -1);
    return real_mkstemp(tmpl);
}
int mkostemp(char* tmpl, int flags) {
    REAL(int, mkostemp, (char*, int));
    count(CREATE, tmpl, -1);
    return real_mkostemp(tmpl, flags);
}

/* ---- the same calls made through syscall(2) ------------------------------------------------ */
long syscall(long number, ...) {
    REAL(long, syscall, (long, ...));
    va_list ap;
    va_start(ap, number);
    long a[6];
    for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
    va_end(ap);
    /* Several of these numbers exist on x86-64 only (aarch64 has just the *at forms). */
#ifdef SYS_rename
    if (number == SYS_rename) count(RENAME, (const char*)a[1], -1);
#endif
#ifdef SYS_renameat
    if (number == SYS_renameat) count(RENAME, (const char*)a[3], -1);
#endif
#ifdef SYS_renameat2
    if (number == SYS_renameat2) count(RENAME, (const char*)a[3], -1);
#endif
#ifdef SYS_unlink
    if (number == SYS_unlink) count(UNLINK, (const char*)a[0], -1);
#endif
    if (number == SYS_unlinkat) count((a[2] & AT_REMOVEDIR) ? RMDIR : UNLINK, (const char*)a[1], -1);
#ifdef SYS_rmdir
    if (number == SYS_rmdir) count(RMDIR, (const char*)a[0], -1);
#endif
#ifdef SYS_mkdir
    if (number == SYS_mkdir) count(MKDIR, (const char*)a[0], -1);
#endif
    if (number == SYS_mkdirat) count(MKDIR, (const char*)a[1], -1);
    if (number == SYS_fsync || number == SYS_fdatasync || number == SYS_syncfs) count(FSYNC, NULL, (int)a[0]);
#ifdef SYS_open
    if (number == SYS_open && creates((int)a[1])) count(CREATE, (const char*)a[0], -1);
#endif
#ifdef SYS_creat
    if (number == SYS_creat) count(CREATE, (const char*)a[0], -1);
#endif
    if (number == SYS_openat && creates((int)a[2])) count(CREATE, (const char*)a[1], -1);
    return real_syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
