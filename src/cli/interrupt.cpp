// src/cli/interrupt.cpp — see interrupt.hpp.
#include "src/cli/interrupt.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <utility>

namespace pt {

namespace {
std::atomic<int> first_signal{0};   // lock-free, so the handler may touch it
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler needs a lock-free flag");
struct sigaction saved_int, saved_term;

// write(2) of a literal: async-signal-safe, unlike printf.
template <size_t N>
void say(const char (&text)[N]) {
    ssize_t ignored = ::write(2, text, N - 1);
    (void)ignored;
}

extern "C" void on_signal(int sig) {
    int none = 0;
    if (first_signal.compare_exchange_strong(none, sig)) {
        if (sig == SIGINT) say("\npipetrain: SIGINT: finishing this step and saving it, then stopping (a second signal quits at once)\n");
        else say("\npipetrain: SIGTERM: finishing this step and saving it, then stopping (a second signal quits at once)\n");
        return;
    }
    say("pipetrain: second signal: quitting now; the checkpoints already saved are whole\n");
    _exit(interrupt_exit_code(sig));
}
}  // namespace

InterruptHandlers::InterruptHandlers() {
    first_signal = 0;
    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;   // reads and writes of the other threads carry on
    for (auto [sig, saved] : {std::pair{SIGINT, &saved_int}, {SIGTERM, &saved_term}}) {
        sigaction(sig, nullptr, saved);
        // A run started with the signal ignored (`cmd &` in a script) keeps ignoring it, as shells do.
        if (saved->sa_handler != SIG_IGN) sigaction(sig, &sa, nullptr);
    }
}

InterruptHandlers::~InterruptHandlers() {
    sigaction(SIGINT, &saved_int, nullptr);
    sigaction(SIGTERM, &saved_term, nullptr);
}

int interrupt_signal() { return first_signal.load(); }

}  // namespace pt
