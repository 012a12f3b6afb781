// src/cli/interrupt.hpp — Ctrl-C and SIGTERM during training: finish the step, save, say how to resume.
//
// A signal handler may do almost nothing (only async-signal-safe calls), so the first SIGINT or
// SIGTERM only records itself; the training loop reads interrupt_signal() at the end of every step
// and agrees with the other ranks on stopping there (src/cli/train_run.cpp, run_rank). A second signal
// cannot wait for that: it writes one fixed line and ends the process at once (_exit), with the
// shell's code for that signal, 128 + its number: 130 for SIGINT, 143 for SIGTERM. What was
// committed stays whole (every commit is an atomic rename); what was being staged is removed by
// the next run.
#pragma once

namespace pt {

// While alive, SIGINT and SIGTERM are handled as above; the previous handlers come back after.
class InterruptHandlers {
 public:
    InterruptHandlers();
    ~InterruptHandlers();
    InterruptHandlers(const InterruptHandlers&) = delete;
    InterruptHandlers& operator=(const InterruptHandlers&) = delete;
};

// The first signal received while InterruptHandlers was alive (SIGINT or SIGTERM), or 0.
int interrupt_signal();

inline int interrupt_exit_code(int signal) { return 128 + signal; }   // what a shell reports

}  // namespace pt
