// labs/todo.hpp — what a starter file's stubs call. A stub that is still a TODO throws
// NotImplemented, and the lab's check reports that task as "not implemented" (not as wrong).
#pragma once
#include <stdexcept>
#include <string>

namespace labcheck {

// The message starts with "not implemented: " wherever it ends up (a pipeline rank's thread
// rewraps what it catches), so the check recognises it by that prefix.
struct NotImplemented : std::logic_error {
    using std::logic_error::logic_error;
};

[[noreturn]] inline void not_implemented(const std::string& what) {
    throw NotImplemented("not implemented: " + what);
}

}  // namespace labcheck
