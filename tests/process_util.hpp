// Test helpers for a child process watched while it runs: start it (a program, or a function in a
// fork), read what it prints as it comes, signal it, and wait for it with a deadline. A child that
// outlives its deadline is killed: a hang is a failed test, not a stuck ctest.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace test {

class Child {
 public:
    // Runs argv[0] with the arguments after it (searched in PATH), stdout and stderr into one pipe.
    static Child exec(const std::vector<std::string>& argv) {
        return start([&] {
            std::vector<char*> args;
            for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
            args.push_back(nullptr);
            execvp(args[0], args.data());
            _exit(127);
        });
    }
    // Runs body() in a fork of this process, then _exit(0); an exception in it is _exit(1).
    static Child fork(const std::function<void()>& body) {
        return start([&] {
            try {
                body();
            } catch (...) {
                _exit(1);
            }
            _exit(0);
        });
    }

    Child(Child&& o) noexcept : out(std::move(o.out)), pid_(o.pid_), fd_(o.fd_), status_(o.status_) { o.pid_ = -1, o.fd_ = -1; }
    Child& operator=(Child&&) = delete;
    ~Child() {
        if (pid_ > 0 && status_ < 0) kill(pid_, SIGKILL), reap();
        if (fd_ >= 0) close(fd_);
    }

    pid_t pid() const { return pid_; }
    void signal(int sig) const { kill(pid_, sig); }
    // This process ptrace()s some of the child's threads: those must be reaped before the child
    // itself can be, so waiting for it waits for any child of this process.
    void traced() { traced_ = true; }

    // Reads what the child prints until `text` appears (true) or `seconds` pass or it ends (false).
    bool wait_for(const std::string& text, double seconds) {
        auto deadline = now() + seconds;
        while (out.find(text) == std::string::npos) {
            if (now() > deadline || !read_some(deadline - now())) return out.find(text) != std::string::npos;
        }
        return true;
    }

    // Waits until the child has ended (true) or `seconds` passed: then it is killed (false).
    bool wait_exit(double seconds) {
        auto deadline = now() + seconds;
        while (status_ < 0) {
            int st = 0;
            pid_t got = waitpid(traced_ ? -1 : pid_, &st, __WALL | WNOHANG);
            if (got == pid_) {
                status_ = st;
                break;
            }
            if (now() > deadline) {
                kill(pid_, SIGKILL);
                reap();
                return false;
            }
            read_some(0.05);
        }
        while (read_some(0.5)) {}   // what it printed last (or until its own children close the pipe)
        return true;
    }

    // Its exit code; -N if signal N killed it (a process that exits 130 is not one SIGINT killed).
    int exit_code() const {
        if (status_ < 0) return -1000;   // still running
        return WIFEXITED(status_) ? WEXITSTATUS(status_) : -WTERMSIG(status_);
    }

    std::string out;   // stdout and stderr, as read so far

 private:
    Child(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
    static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

    static Child start(const std::function<void()>& in_child) {
        int fds[2];
        if (pipe(fds) != 0) std::abort();
        std::fflush(nullptr);   // else the child would inherit, and print again, what is buffered here
        pid_t pid = ::fork();
        if (pid == 0) {
            dup2(fds[1], 1), dup2(fds[1], 2);
            close(fds[0]), close(fds[1]);
            in_child();
            _exit(0);
        }
        close(fds[1]);
        fcntl(fds[0], F_SETFL, O_NONBLOCK);
        return Child(pid, fds[0]);
    }

    void reap() {
        int st = 0;
        for (pid_t got = 0; got != pid_ && got >= 0;) got = waitpid(traced_ ? -1 : pid_, &st, __WALL);
        status_ = st;
    }

    // Appends what arrives within `seconds`; false once the pipe is closed (or on a timeout with nothing).
    bool read_some(double seconds) {
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, int(seconds * 1000)) <= 0) return false;
        char buf[4096];
        ssize_t n = read(fd_, buf, sizeof buf);
        if (n <= 0) return false;
        out.append(buf, size_t(n));
        return true;
    }

    pid_t pid_ = -1;
    int fd_ = -1;
    int status_ = -1;   // waitpid's, once it has ended
    bool traced_ = false;
};

}  // namespace test
