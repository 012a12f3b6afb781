#!/usr/bin/env bash
# scripts/sanitize.sh — the CPU build under a sanitizer, and every CPU test run with it:
#   scripts/sanitize.sh [address|thread] [build-dir]
#   address (default): AddressSanitizer + UndefinedBehaviorSanitizer; thread: ThreadSanitizer
# About an hour on 2 cores (address: a 40-minute build, 27 minutes of tests); not part of
# scripts/test.sh. Tests that run the `pipetrain` CLI run the sanitized binary, and a report
# written by such a child process (whose failure a test may have expected) is caught too: every
# report goes to a file under build-dir/reports, and any file there fails the script.
set -uo pipefail
cd "$(dirname "$0")/.."
KIND=${1:-address}
case $KIND in
    address) FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" ;;
    thread) FLAGS="-fsanitize=thread" ;;
    *) echo "sanitize: expected address or thread, got \"$KIND\"" >&2; exit 2 ;;
esac
B=${2:-build-$KIND}
bash scripts/setup.sh
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPIPETRAIN_CUDA=OFF -DPT_TEST_TIMEOUT=1500 \
    -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="$FLAGS" >/dev/null || exit 1
cmake --build "$B" -j"$(nproc)" || exit 1
REPORTS=$(cd "$B" && pwd)/reports
rm -rf "$REPORTS" && mkdir -p "$REPORTS"
# verify_asan_link_order=0: test_crash_safety's kill shim is an LD_PRELOAD library, which would
# otherwise come before the ASan runtime and stop the run ("ASan runtime does not come first").
# Open MPI keeps what it allocates at MPI_Init until exit, by design, and unloads its components
# before LeakSanitizer looks: their frames had no module name, no suppression could match them,
# and every mpirun test failed on Open MPI's reports alone. Here dlclose does nothing (a preloaded
# stub), and Open MPI's modules are suppressed by name (scripts/lsan-openmpi.supp). A leak of
# pipetrain's own, even in an MPI rank, is still one: a malloc planted in MpiComm's constructor
# was reported, by its line. (The full unwinder, fast_unwind_on_malloc=0, also named the callers
# of vasprintf, but made allocation-heavy tests 4x slower: their time bounds and MPI deadlines failed.)
printf 'int dlclose(void* handle) { (void)handle; return 0; }\n' >"$B/no_dlclose.c"
cc -shared -fPIC -O2 -o "$B/no_dlclose.so" "$B/no_dlclose.c" || exit 1
export LD_PRELOAD="$(cd "$B" && pwd)/no_dlclose.so"
export ASAN_OPTIONS="log_path=$REPORTS/asan:detect_leaks=1:verify_asan_link_order=0"
export LSAN_OPTIONS="suppressions=$(pwd)/scripts/lsan-openmpi.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$REPORTS/ubsan:print_stacktrace=1"
# report_thread_leaks=0: a second Ctrl-C and the watchdog end the process with _exit on purpose,
# while rank threads run or wait to be joined, and ThreadSanitizer reports each such thread as a
# leak (test_interrupt's second signal did). Nothing else can leak one: a std::thread destroyed
# unjoined calls std::terminate.
export TSAN_OPTIONS="log_path=$REPORTS/tsan:second_deadlock_stack=1:report_thread_leaks=0"
# The emulated GPU switches stacks by hand, which the sanitizers cannot follow; fuzz_smoke builds
# its own sanitized (clang) targets and is run by scripts/test.sh.
(cd "$B" && ctest --output-on-failure --timeout 1500 -j"$(nproc)" -E "emulated_gpu|fuzz_smoke")
rc=$?
if [ -n "$(ls -A "$REPORTS")" ]; then
    head -n 40 "$REPORTS"/*
    echo "sanitize: $(ls "$REPORTS" | wc -l) $KIND sanitizer report(s) in $REPORTS"
    exit 1
fi
[ $rc = 0 ] && echo "sanitize: $KIND: every test passed, no sanitizer report"
exit $rc
