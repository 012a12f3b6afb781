// labs/check.hpp — the harness every lab's check.cpp uses: numbered tasks, each run in a child
// process of its own with a deadline, and a report of at most ~20 lines: pass, FAIL with the
// first thing that differs (in the student's terms) and one hint, or "not implemented".
//
// A task is a function that returns when the student's code is right and calls fail(differs,
// hint) at the first thing that is not. Running it in a fork means a crash (a bad index) or a
// hang (a receive that waits forever) in the student's code ends that task alone, with a
// sentence saying what it most likely was; the other tasks still run.
//
//   build/lab_04               every task
//   build/lab_04 --verbose     also what the student's code printed
//   build/lab_04 --json F      the results as JSON (scripts/lab.sh submit and grade read it)
#pragma once
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "labs/todo.hpp"

namespace labcheck {

// ---- what a task says when it fails ------------------------------------------------------------
struct Failed {
    std::string differs, hint;
};
[[noreturn]] inline void fail(const std::string& differs, const std::string& hint) { throw Failed{differs, hint}; }
// A task that cannot be judged before an earlier one passes: reported on one line, as failed.
struct NeedsTask {
    int task;
};
[[noreturn]] inline void needs_task(int task) { throw NeedsTask{task}; }

struct Task {
    std::string name;      // what is checked, in the student's words
    std::string against;   // the reference, computed without the student's code path
    std::function<void()> run;
    std::string hang_hint = "a loop that never ends, or a wait with no deadline?";
    double seconds = 20;   // deadline of the task
};

struct Lab {
    std::string number, title;
    std::string file;      // the student's file, as the report names it
    int version = 1;       // of the check (results.json)
    std::vector<Task> tasks;
};

// ---- text a student can read -----------------------------------------------------------------
// Every message goes through this: control characters and bytes that are not valid UTF-8 are
// shown as \xNN, and a line is cut at `width` characters, so a report never prints raw bytes.
inline std::string printable(const std::string& s, size_t width = 300) {
    std::string out;
    for (size_t i = 0; i < s.size() && out.size() < width;) {
        unsigned char c = (unsigned char)s[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = n > 0 && i + n <= s.size() && (c >= 0x20 || c == '\t') && c != 0x7f;
        for (size_t k = 1; ok && k < n; k++) ok = ((unsigned char)s[i + k] >> 6) == 2;
        if (ok) {
            out.append(s, i, n), i += n;
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02X", c);
            out += buf, i++;
        }
    }
    if (out.size() >= width) out = out.substr(0, width) + "...";
    return out;
}

// A float with every digit that tells it apart from its neighbours.
inline std::string num(double x) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9g", x);
    return buf;
}

// "57.1%"
inline std::string percent(double fraction) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.1f%%", 100 * fraction);
    return buf;
}

// How many representable floats lie between a and b (0: the same bits).
inline long long ulps(float a, float b) {
    int32_t ia, ib;
    std::memcpy(&ia, &a, 4), std::memcpy(&ib, &b, 4);
    if (ia < 0) ia = int32_t(0x80000000u - uint32_t(ia));
    if (ib < 0) ib = int32_t(0x80000000u - uint32_t(ib));
    return std::llabs((long long)ia - ib);
}

// "" when yours and expected hold the same bits; else the first element that differs:
// "element (3, 17) of dinp: yours 0.417200029, expected 0.417300016 (3 ULPs apart)".
inline std::string first_difference(const float* yours, const float* expected, size_t n, size_t cols,
                                    const std::string& what) {
    for (size_t i = 0; i < n; i++) {
        if (std::memcmp(yours + i, expected + i, sizeof(float)) == 0) continue;
        std::string at = cols > 1 ? "(" + std::to_string(i / cols) + ", " + std::to_string(i % cols) + ")"
                                  : std::to_string(i);
        // ULPs say "rounding" when there are a few; thousands say nothing the values do not.
        long long n = ulps(yours[i], expected[i]);
        std::string apart = std::isfinite(yours[i]) && std::isfinite(expected[i]) && n <= 1000
                                ? " (" + std::to_string(n) + (n == 1 ? " ULP" : " ULPs") + " apart)" : "";
        return "element " + at + " of " + what + ": yours " + num(yours[i]) + ", expected " + num(expected[i]) + apart;
    }
    return "";
}

// ---- running the tasks -------------------------------------------------------------------------
namespace detail {

// What a child tells its parent: a status letter, what differs (it may hold lines), the unit
// separator 0x1F, the hint.
inline void write_all(int fd, const std::string& s) {
    for (size_t off = 0; off < s.size();) {
        ssize_t k = ::write(fd, s.data() + off, s.size() - off);
        if (k <= 0) return;
        off += size_t(k);
    }
}

inline bool is_todo(const std::string& what) { return what.find("not implemented: ") != std::string::npos; }

// In the child: runs the task and reports. Output of the student's code goes to `log_fd`.
[[noreturn]] inline void run_child(const Task& task, int report_fd, int log_fd) {
    ::dup2(log_fd, 1), ::dup2(log_fd, 2);
    std::string report;
    try {
        task.run();
        report = "P";
    } catch (const Failed& f) {
        report = "F" + f.differs + "\x1f" + f.hint;
    } catch (const NeedsTask& n) {
        report = "N" + std::to_string(n.task);
    } catch (const std::exception& e) {
        std::string what = e.what();
        size_t at = what.find("not implemented: ");
        if (at != std::string::npos) report = "T" + what.substr(at + 17);
        else report = "F" + std::string("your code threw: ") + what + "\x1fread the message: it names what went wrong";
    } catch (...) {
        report = "Fyour code threw something that is not a std::exception\x1fthrow std::runtime_error(\"...\") instead";
    }
    std::fflush(stdout), std::fflush(stderr);
    write_all(report_fd, report);
    ::_exit(0);
}

inline std::string signal_hint(int sig) {
    switch (sig) {
        case SIGSEGV: return "segmentation fault: a read or write outside an array (check your indices and sizes), or a null pointer";
        case SIGBUS: return "bus error: a read outside a mapped array";
        case SIGFPE: return "arithmetic exception: an integer division by zero?";
        case SIGABRT: return "abort(): a failed assert, or an exception thrown out of a thread (std::terminate)";
        default: return std::string("signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")";
    }
}

struct Outcome {
    char status = 'F';   // P pass, F fail, T not implemented, C crash, H hang (deadline)
    std::string differs, hint;
    int printed = 0;     // lines the student's code printed
    std::string log;
};

inline Outcome run_task(const Task& task) {
    Outcome out;
    int fds[2];
    char log_name[] = "/tmp/pipetrain-lab-XXXXXX";
    int log_fd = ::mkstemp(log_name);
    if (::pipe(fds) != 0 || log_fd < 0) {
        out.differs = "could not start the task (pipe or temporary file failed)";
        return out;
    }
    ::unlink(log_name);
    std::fflush(stdout), std::fflush(stderr);
    pid_t pid = ::fork();
    if (pid == 0) {
        ::close(fds[0]);
        run_child(task, fds[1], log_fd);
    }
    ::close(fds[1]);
    std::string report;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(task.seconds);
    bool timed_out = false;
    for (;;) {
        double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) { timed_out = true; break; }
        pollfd p{fds[0], POLLIN, 0};
        if (::poll(&p, 1, int(left * 1000) + 1) <= 0) continue;
        char buf[4096];
        ssize_t k = ::read(fds[0], buf, sizeof buf);
        if (k <= 0) break;
        report.append(buf, size_t(k));
    }
    ::close(fds[0]);
    if (timed_out) ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    // What the student's code printed: counted, and shown with --verbose.
    ::lseek(log_fd, 0, SEEK_SET);
    char buf[4096];
    for (ssize_t k; (k = ::read(log_fd, buf, sizeof buf)) > 0;) out.log.append(buf, size_t(k));
    ::close(log_fd);
    for (char c : out.log) out.printed += c == '\n';
    if (timed_out) {
        out.status = 'H';
        out.differs = "did not finish within " + num(task.seconds) + " s";
        out.hint = task.hang_hint;
    } else if (WIFSIGNALED(status)) {
        out.status = 'C';
        out.differs = "crashed: " + signal_hint(WTERMSIG(status));
        out.hint = "run it under gdb: gdb -batch -ex run -ex bt --args build/lab_NN";
    } else if (report.empty()) {
        out.differs = "ended without a result (exit code " + std::to_string(WEXITSTATUS(status)) + ")";
        out.hint = "does your code call exit()? return or throw instead";
    } else {
        out.status = report[0];
        size_t sep = report.find('\x1f');
        out.differs = report.substr(1, sep == std::string::npos ? std::string::npos : sep - 1);
        out.hint = sep == std::string::npos ? "" : report.substr(sep + 1);
    }
    return out;
}

inline const char* status_word(char s) {
    return s == 'P' ? "pass" : s == 'T' ? "todo" : s == 'C' ? "crash" : s == 'H' ? "timeout" : "fail";
}

inline std::string json_escape(const std::string& s) {
    std::string out;
    for (char c : printable(s, 2000)) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out;
}

}  // namespace detail

namespace detail {

// The lines a task's outcome prints: its status and name, then why it failed and one hint.
inline void print_outcome(const Lab& lab, size_t k, const Outcome& o, bool verbose) {
    const char* word = o.status == 'P' ? "pass" : o.status == 'T' ? "todo" : "FAIL";
    std::printf("  %-4s %zu. %s\n", word, k + 1, printable(lab.tasks[k].name).c_str());
    if (o.status == 'N') {
        std::printf("       needs task %s to pass first\n", printable(o.differs).c_str());
    } else if (o.status == 'T') {
        std::printf("       not implemented yet: %s (TODO(student) in %s)\n", printable(o.differs).c_str(),
                    lab.file.c_str());
    } else if (o.status != 'P') {
        size_t from = 0;   // what differs: up to three lines of it
        for (int line = 0; line < 3 && from <= o.differs.size(); line++) {
            size_t nl = o.differs.find('\n', from);
            std::printf("       %s\n", printable(o.differs.substr(from, nl - from)).c_str());
            if (nl == std::string::npos) break;
            from = nl + 1;
        }
        std::printf("       against: %s\n", printable(lab.tasks[k].against).c_str());
        if (!o.hint.empty()) std::printf("       hint: %s\n", printable(o.hint).c_str());
    }
    if (o.printed && verbose) {
        std::printf("       --- your code printed:\n");
        for (size_t from = 0, nl; from < o.log.size(); from = nl + 1) {
            nl = o.log.find('\n', from);
            if (nl == std::string::npos) nl = o.log.size();
            std::printf("       %s\n", printable(o.log.substr(from, nl - from), 1000).c_str());
        }
        std::printf("       ---\n");
    } else if (o.printed && o.status != 'P') {
        std::printf("       (your code printed %d lines: --verbose shows them)\n", o.printed);
    }
}

// One line per task: {"task": 1, "name": "...", "status": "pass"} (scripts/lab.sh reads it line by line).
inline void write_json(const std::string& path, const Lab& lab, const std::vector<std::string>& tasks) {
    std::ofstream f(path);
    f << "{\n  \"lab\": \"" << lab.number << "\",\n  \"check_version\": " << lab.version << ",\n  \"tasks\": [\n";
    for (size_t i = 0; i < tasks.size(); i++) f << tasks[i] << (i + 1 < tasks.size() ? ",\n" : "\n");
    f << "  ]\n}\n";
    if (!f) std::fprintf(stderr, "%s: could not write\n", path.c_str());
}

}  // namespace detail

// Runs the lab's tasks (all, or --only K) and prints the report; returns the exit code: 0 when
// every task passes, 1 otherwise. A starter with every task "not implemented" says
// "nothing implemented yet" (ctest shows that as skipped: the lab is not started, not broken).
inline int run(const Lab& lab, int argc, char** argv) {
    bool verbose = false;
    std::string json;
    int only = 0;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--verbose") verbose = true;
        else if (a == "--json" && i + 1 < argc) json = argv[++i];
        else if (a == "--only" && i + 1 < argc && std::atoi(argv[i + 1]) >= 1 && std::atoi(argv[i + 1]) <= int(lab.tasks.size()))
            only = std::atoi(argv[++i]);
        else {
            std::fprintf(stderr, "usage: %s [--verbose] [--json FILE] [--only K (1-%zu)]\n", argv[0], lab.tasks.size());
            return 2;
        }
    }
    auto t0 = std::chrono::steady_clock::now();
    std::printf("lab %s: %s (your file: %s)\n", lab.number.c_str(), lab.title.c_str(), lab.file.c_str());
    int ran = 0, pass = 0, todo = 0;
    std::vector<std::string> results;
    for (size_t k = 0; k < lab.tasks.size(); k++) {
        if (only && int(k) + 1 != only) continue;
        detail::Outcome o = detail::run_task(lab.tasks[k]);
        detail::print_outcome(lab, k, o, verbose);
        ran++, pass += o.status == 'P', todo += o.status == 'T';
        results.push_back("    {\"task\": " + std::to_string(k + 1) + ", \"name\": \"" + detail::json_escape(lab.tasks[k].name) +
                          "\", \"status\": \"" + detail::status_word(o.status) + "\"}");
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int failed = ran - pass - todo;
    if (todo == ran)
        std::printf("lab %s: nothing implemented yet: every task says not implemented (%.1f s)\n", lab.number.c_str(), secs);
    else
        std::printf("lab %s: %d of %d tasks pass%s%s (%.1f s)\n", lab.number.c_str(), pass, ran,
                    failed ? (", " + std::to_string(failed) + " failed").c_str() : "",
                    todo ? (", " + std::to_string(todo) + " not implemented").c_str() : "", secs);
    if (!json.empty()) detail::write_json(json, lab, results);
    return pass == ran ? 0 : 1;
}

}  // namespace labcheck
