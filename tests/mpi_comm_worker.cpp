// tests/mpi_comm_worker.cpp — one MPI rank of tests/test_mpi_comm.cpp, which launches it as
// `scripts/mpirun.sh N mpi_comm_worker MODE TIMEOUT`. Every rank checks what it received itself
// and prints "rank R: MODE ok" at the end; a failed check throws, so the job ends non-zero.
//
//   exchange  send/recv, group, a wrong-size receive, allreduce_sum and background sums (bitwise
//             against ThreadComm on the same inputs, computed here in-process) and barrier
//   idle      rank 1 waits 2 s for a message and prints the CPU time it burnt meanwhile
//   timeout   rank 1 waits for F3, which rank 0 never sends (it sends F4)
//   abort     rank 2 aborts while the others wait for it
//   exit      rank 1 ends (std::_Exit) while the others wait for it;  kill: it SIGKILLs itself
//   lend      rank 1 waits while rank 0 multiplies on one thread: rank 0's pieces go to its helper
//             thread (rank 1's idle core), with the bits of a 3-thread product; prints the count
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/parallel.hpp"
#include "kernels/ops.hpp"
#include "src/comm.hpp"
#include "src/mpi_comm.hpp"

namespace {

void require(bool ok, const std::string& what) {
    if (!ok) throw std::runtime_error("check failed: " + what);
}

// The bytes that rank `src` sends with `tag`: known to the receiver, different per message.
std::vector<char> pattern(int src, int tag, std::size_t bytes) {
    std::vector<char> b(bytes);
    for (std::size_t i = 0; i < bytes; i++) b[i] = char((src * 31 + tag * 7 + i * 13) & 0xff);
    return b;
}

// Rank r's all-reduce input: signs and magnitudes vary, so the order of the additions shows in the bits.
template <typename T>
std::vector<T> input(int r, std::size_t n) {
    std::vector<T> x(n);
    for (std::size_t i = 0; i < n; i++) {
        std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ std::uint64_t(r + 1) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31, h *= 0x94D049BB133111EBull, h ^= h >> 29;
        double u = double(h >> 11) / double(1ull << 53) - 0.5;
        double scale[] = {1e-3, 1.0, 1e3, 1e6};
        x[i] = T(u * scale[(h >> 3) % 4]);
    }
    return x;
}

void p2p(pp::Comm& comm) {
    const int me = comm.rank(), N = comm.size();
    // Pairs (0,1), (2,3): the even rank sends, the odd one receives and answers.
    for (std::size_t bytes : {std::size_t(0), std::size_t(1), std::size_t(4097), std::size_t(1) << 20}) {
        const int tag = pp::transfer_tag(false, 1, 0), back = pp::transfer_tag(true, 1, 0);
        const int peer = me ^ 1;
        std::vector<char> got(bytes);
        if (me % 2 == 0) {
            comm.send(pattern(me, tag, bytes).data(), bytes, peer, tag);
            comm.recv(got.data(), bytes, peer, back);
            require(got == pattern(peer, back, bytes), "send/recv answer of " + std::to_string(bytes) + " bytes");
        } else {
            comm.recv(got.data(), bytes, peer, tag);
            require(got == pattern(peer, tag, bytes), "send/recv of " + std::to_string(bytes) + " bytes");
            comm.send(pattern(me, back, bytes).data(), bytes, peer, back);
        }
    }
    // A ring in one group, both directions at once (a 1F1B steady state): activations to the next
    // rank, gradients to the previous one, three of each, sizes up to rendezvous messages.
    const int next = (me + 1) % N, prev = (me + N - 1) % N;
    const std::size_t sizes[] = {5, 70000, std::size_t(1) << 20};
    std::vector<std::vector<char>> out, in;
    std::vector<pp::P2POp> ops;
    for (int m = 0; m < 3; m++)
        for (bool grad : {false, true}) {
            int tag = pp::transfer_tag(grad, m, 0);
            out.push_back(pattern(me, tag, sizes[m]));
            in.emplace_back(sizes[m]);
        }
    for (int k = 0; k < 6; k++) {   // message k: micro-batch k / 2, a gradient when k is odd
        int m = k / 2, tag = pp::transfer_tag(k % 2, m, 0);
        ops.push_back({true, out[k].data(), sizes[m], k % 2 ? prev : next, tag});
        ops.push_back({false, in[k].data(), sizes[m], k % 2 ? next : prev, tag});
    }
    comm.group(ops);
    for (int k = 0; k < 6; k++) {
        int m = k / 2, tag = pp::transfer_tag(k % 2, m, 0);
        require(in[k] == pattern(k % 2 ? next : prev, tag, sizes[m]), "group message " + pp::tag_label(tag));
    }
    // A message of 10 bytes into a buffer of 12: the receiver names both sizes.
    const int tag = pp::transfer_tag(false, 5, 0);
    if (me == 0) comm.send(pattern(0, tag, 10).data(), 10, 1, tag);
    if (me == 1) {
        std::vector<char> got(12);
        std::string error;
        try {
            comm.recv(got.data(), 12, 0, tag);
        } catch (const std::exception& e) {
            error = e.what();
        }
        std::string want = "rank 1: recv from rank 0: " + pp::tag_label(tag) + " (tag " + std::to_string(tag) +
                           ") has 10 bytes, the receive buffer 12";
        require(error == want, "wrong-size error \"" + error + "\", expected \"" + want + "\"");
    }
}

// The bits ThreadComm gives for the same inputs: N threads in this process.
template <typename T>
std::vector<T> thread_reference(int N, int me, std::size_t n, const std::vector<int>& group) {
    std::vector<T> mine;
    pt::ThreadWorld world(N, 60.0);
    pt::run_ranks(world, [&](int r) {
        std::vector<T> x = input<T>(r, n);
        if (std::find(group.begin(), group.end(), r) != group.end()) {
            pt::ThreadComm comm(world, r);
            comm.allreduce_sum(x.data(), n, group);
        }
        if (r == me) mine = x;
    });
    return mine;
}

template <typename T>
void allreduce_case(pp::Comm& comm, std::size_t n, const std::vector<int>& group) {
    const int me = comm.rank();
    std::vector<T> x = input<T>(me, n);
    const bool member = std::find(group.begin(), group.end(), me) != group.end();
    if (member) comm.allreduce_sum(x.data(), n, group);
    std::vector<T> want = thread_reference<T>(comm.size(), me, n, group);
    std::string what = std::string(sizeof(T) == 4 ? "float" : "double") + " allreduce of " + std::to_string(n) +
                       " over {";
    for (int r : group) what += std::to_string(r) + (r == group.back() ? "}" : ",");
    if (std::memcmp(x.data(), want.data(), n * sizeof(T)) != 0) {
        std::size_t i = 0;
        while (std::memcmp(&x[i], &want[i], sizeof(T)) == 0) i++;
        char diff[160];
        std::snprintf(diff, sizeof diff, ": element %zu is %.17g, ThreadComm's %.17g", i, double(x[i]), double(want[i]));
        require(false, what + diff);
    }
    // The inputs are such that another order gives other bits (else this case could not fail).
    if (member && n > 1000 && group.size() > 2) {
        std::vector<T> reversed = input<T>(group.back(), n);
        for (std::size_t k = group.size() - 1; k-- > 0;) {
            std::vector<T> y = input<T>(group[k], n);
            for (std::size_t i = 0; i < n; i++) reversed[i] += y[i];
        }
        require(std::memcmp(reversed.data(), x.data(), n * sizeof(T)) != 0, what + ": the order does not matter");
    }
}

void allreduce(pp::Comm& comm) {
    const int N = comm.size();
    std::vector<std::vector<int>> groups;
    std::vector<int> all;
    for (int r = 0; r < N; r++) all.push_back(r);
    groups.push_back(all);
    if (N == 4) groups.push_back({1, 3}), groups.push_back({0, 1, 2}), groups.push_back({3, 0, 2});
    if (N == 2) groups.push_back({1, 0});
    for (const std::vector<int>& g : groups)
        for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(1000003)}) {
            allreduce_case<float>(comm, n, g);
            allreduce_case<double>(comm, n, g);
        }
}

// MpiComm's background sums (AsyncSum, the data-parallel overlap): three in flight at once over a
// group, in any member order, each with the bits of allreduce_sum (ThreadComm's, in-process).
void background_sums(pp::Comm& comm) {
    auto& async = dynamic_cast<pt::AsyncSum&>(comm);
    const int me = comm.rank(), N = comm.size();
    std::vector<std::vector<int>> groups = {{}};
    for (int r = 0; r < N; r++) groups[0].push_back(r);
    if (N == 4) groups.push_back({3, 0, 2});
    const std::vector<std::size_t> sizes = {1, 7, 1000003};
    for (const std::vector<int>& g : groups) {
        std::vector<std::vector<float>> x;
        for (std::size_t n : sizes) x.push_back(input<float>(me, n));
        if (std::find(g.begin(), g.end(), me) != g.end()) {
            for (std::size_t i = 0; i < sizes.size(); i++) async.start_sum(x[i].data(), sizes[i], g);
            require(async.wait_sums().size() == sizes.size(), "one span per background sum");
        }
        for (std::size_t i = 0; i < sizes.size(); i++)
            require(std::memcmp(x[i].data(), thread_reference<float>(N, me, sizes[i], g).data(), sizes[i] * sizeof(float)) == 0,
                    "background sum of " + std::to_string(sizes[i]) + " floats: not allreduce_sum's bits");
    }
}

// The CPU a rank burns while it waits 2 s for a message (MpiComm polls: bounded, it sleeps).
void idle(pp::Comm& comm) {
    std::vector<char> buf(8);
    if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::seconds(2)), comm.send(buf.data(), 8, 1, 0);
    if (comm.rank() != 1) return;
    auto cpu_s = [] {
        rusage u{};
        getrusage(RUSAGE_SELF, &u);   // every thread of the process: the rank, its watchdog, MPI's
        return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
    };
    double wall0 = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(), cpu0 = cpu_s();
    comm.recv(buf.data(), 8, 0, 0);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() - wall0;
    std::printf("rank 1: waited %.3f s, CPU %.3f s\n", wall, cpu_s() - cpu0);
}

void say(const char* line) {
    std::printf("%s\n", line);
    std::fflush(stdout);
}

double wall_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// Nobody leaves the barrier before the last one has entered it (rank N-1 comes 0.3 s late).
void barrier(pp::Comm& comm) {
    const int me = comm.rank(), N = comm.size();
    if (me == N - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::vector<double> t(2 * N, 0.0);   // [enter of each rank..., leave of each rank...]
    t[me] = wall_s();
    comm.barrier();
    t[N + me] = wall_s();
    comm.allreduce_sum(t.data(), t.size(), [&] { std::vector<int> a; for (int r = 0; r < N; r++) a.push_back(r); return a; }());
    double last_in = *std::max_element(t.begin(), t.begin() + N), first_out = *std::min_element(t.begin() + N, t.end());
    require(first_out >= last_in, "a rank left the barrier " + std::to_string(last_in - first_out) + " s before the last entered");
}

// Rank 0 sends 2 MB ($PT_OVERLAP_BYTES: past Open MPI's default eager limits) and then computes: no MPI
// call until rank 1 has it, which rank 1 says by creating the file $PT_OVERLAP_FLAG. Over Open MPI's
// TCP transport, or its shared memory copying twice, the message moves without its sender only when
// it is sent eagerly (MpiWorld raises TCP's limit to 4 MiB, scripts/mpirun.sh shared memory's to
// 512 KiB). Rank 0 gives up after 10 s.
void overlap(pp::Comm& comm) {
    const char* flag = std::getenv("PT_OVERLAP_FLAG");
    require(flag != nullptr, "overlap: PT_OVERLAP_FLAG (a file to create) is not set");
    const char* size = std::getenv("PT_OVERLAP_BYTES");   // 2 MB unless it says otherwise
    std::vector<char> bytes(size ? std::strtoul(size, nullptr, 10) : 2 << 20, 7);
    if (comm.rank() == 0) {
        comm.send(bytes.data(), bytes.size(), 1, 0);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        bool arrived = false;
        while (!(arrived = std::filesystem::exists(flag)) && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        std::printf(arrived ? "rank 0: the message arrived while rank 0 made no MPI call\n"
                            : "rank 0: the message did not arrive in 10 s of rank 0 making no MPI call\n");
    } else if (comm.rank() == 1) {
        std::vector<char> got(bytes.size());
        comm.recv(got.data(), got.size(), 0, 0);
        require(got == bytes, "overlap: the message arrived changed");
        std::FILE* f = std::fopen(flag, "w");
        require(f != nullptr, std::string("overlap: cannot create ") + flag);
        std::fclose(f);
    }
    comm.barrier();
}

// Rank 1 waits for a message; meanwhile rank 0, one thread, sees it waiting and gives pieces of its
// products to its helper thread. Every product must have the bits of a 3-thread one (a cut that
// does not depend on the lending). Where this machine has one core, nobody may lend: said so.
void lend(pp::Comm& comm) {
    char c = 0;
    if (comm.rank() == 1) return comm.recv(&c, 1, 0, 0);
    if (comm.rank() != 0) return;
    const int M = 384, N = 320, K = 256;
    std::vector<float> A(size_t(M) * K), B(size_t(K) * N), three(size_t(M) * N), C(three.size());
    for (size_t i = 0; i < A.size(); i++) A[i] = float(int(i * 7919 % 201) - 100) / 64.0f;
    for (size_t i = 0; i < B.size(); i++) B[i] = float(int(i * 104729 % 199) - 99) / 128.0f;
    ops::set_num_threads(3);
    ops::gemm(three.data(), A.data(), B.data(), nullptr, M, N, K, false, false, 1.0f, 0.0f);
    ops::set_num_threads(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ops::num_threads() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    if (ops::num_threads() < 2) {
        std::printf("rank 0: nobody lent (%u cores)\n", std::thread::hardware_concurrency());
    } else {
        for (int k = 0; k < 20; k++) {
            std::fill(C.begin(), C.end(), -1.0f);
            ops::gemm(C.data(), A.data(), B.data(), nullptr, M, N, K, false, false, 1.0f, 0.0f);
            require(std::memcmp(C.data(), three.data(), C.size() * sizeof(float)) == 0, "a lent product differs");
        }
        std::printf("rank 0: gave %lld pieces, run by its helper for %.9f s\n", (long long)ops::lent_work().given,
                    ops::lent_work().given_s);
    }
    comm.send(&c, 1, 1, 0);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: mpi_comm_worker exchange|idle|lend|overlap|timeout|abort|exit|kill|late TIMEOUT_S\n");
        return 2;
    }
    const std::string mode = argv[1];
    try {
        if (mode == "late") {   // rank 1 starts MPI 15 s after the others (read from mpirun's environment)
            const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
            if (!rank) rank = std::getenv("PMI_RANK");
            if (rank && std::atoi(rank) == 1) std::this_thread::sleep_for(std::chrono::seconds(15));
            say("rank ?: starting MPI");
        }
        pt::MpiWorld world(std::atof(argv[2]));
        pt::run_mpi_rank(world, [&](pp::Comm& comm) {
            const int me = comm.rank();
            std::vector<char> buf(8);
            if (mode == "exchange") {
                p2p(comm);
                allreduce(comm);
                background_sums(comm);
                barrier(comm);
            } else if (mode == "idle") {
                idle(comm);
            } else if (mode == "lend") {
                lend(comm);
            } else if (mode == "overlap") {
                overlap(comm);
            } else if (mode == "timeout") {
                if (me == 1) {
                    say("rank 1: receiving F3");
                    comm.recv(buf.data(), buf.size(), 0, pp::transfer_tag(false, 3, 0));
                }
                if (me == 0) {   // sends F4 instead of F3 (a small message: MPI sends it at once), then idles
                    comm.send(buf.data(), buf.size(), 1, pp::transfer_tag(false, 4, 0));
                    std::this_thread::sleep_for(std::chrono::seconds(30));
                }
            } else if (mode == "abort") {
                if (me == 2) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(300));
                    say("rank 2: aborting");
                    comm.abort("stage exploded");
                }
                comm.recv(buf.data(), buf.size(), 2, 0);
            } else if (mode == "late") {
                comm.barrier();
            } else if (mode == "exit" || mode == "kill") {
                comm.barrier();   // everyone is up: now rank 1 goes, mid-exchange
                if (me == 1) {
                    say("rank 1: ending");
                    if (mode == "exit") std::_Exit(3);
                    raise(SIGKILL);
                }
                comm.recv(buf.data(), buf.size(), 1, 0);
            } else {
                throw std::runtime_error("unknown mode " + mode);
            }
            std::printf("rank %d: %s ok\n", me, mode.c_str());
            std::fflush(stdout);
        });
    } catch (const std::exception& e) {   // before MPI started (or after it ended)
        std::fprintf(stderr, "mpi_comm_worker: %s\n", e.what());
        return 1;
    }
    return 0;
}
