// src/cli/bench_link.cpp — `pipetrain bench-link`: one link's latency and bandwidth, by ping-pong
// between two ranks: threads of this process (ThreadComm), or two MPI processes (one machine, two
// machines, or the two network namespaces of tests/netns_mpirun.sh). What `schedule --predict
// --links` takes (issue #33 §5): latency = half the round trip of 8 bytes; bandwidth = the bytes
// of a large message over the rest of its half round trip. Medians over --reps round trips.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/cli/args.hpp"
#include "src/cli/commands.hpp"
#include "src/comm.hpp"
#include "src/mpi_comm.hpp"

namespace pt {

namespace {

using Clock = std::chrono::steady_clock;

// Rank 0's median half round trip of `bytes` with rank 1, in seconds (rank 1 returns 0).
double half_round_trip(pp::Comm& comm, size_t bytes, int reps) {
    std::vector<char> buf(bytes);
    std::vector<double> t;
    comm.barrier();
    for (int i = 0; i < reps + 1; i++) {   // the first round trip (connection set-up, first touch) untimed
        auto t0 = Clock::now();
        if (comm.rank() == 0) comm.send(buf.data(), bytes, 1, 1), comm.recv(buf.data(), bytes, 1, 2);
        else comm.recv(buf.data(), bytes, 0, 1), comm.send(buf.data(), bytes, 0, 2);
        if (i > 0) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / 2);
    }
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    return comm.rank() == 0 ? t[t.size() / 2] : 0.0;
}

void report(pp::Comm& comm, const std::string& what, size_t bytes, int reps) {
    double small = half_round_trip(comm, 8, reps), large = half_round_trip(comm, bytes, reps);
    if (comm.rank() != 0) return;
    double bandwidth = double(bytes) / std::max(large - small, 1e-9);
    std::printf("%s: latency %.1f µs, bandwidth %.3f GB/s (median half round trips: 8 B %.1f µs, %zu B %.1f µs; %d each)\n",
                what.c_str(), 1e6 * small, bandwidth / 1e9, 1e6 * small, bytes, 1e6 * large, reps);
    std::printf("--links value for this link: %.1f,%.3f\n", 1e6 * small, bandwidth / 1e9);
}

}  // namespace

int bench_link_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--comm", "--bytes", "--reps", "--timeout"});
    std::string comm = a.str("--comm", launched_by_mpi() ? "mpi" : "thread");
    size_t bytes = size_t(a.integer("--bytes", 4 << 20, 1024, 1 << 30));
    int reps = int(a.integer("--reps", 30, 1, 1000000));
    double timeout = a.real("--timeout", 60.0, 1e-3, 1e6);
    if (comm == "thread") {
        ThreadWorld world(2, timeout);
        run_ranks(world, [&](int rank) {
            ThreadComm c(world, rank);
            report(c, "threads of one process", bytes, reps);
        });
        return 0;
    }
    if (comm != "mpi") throw std::runtime_error("--comm: expected thread or mpi, got \"" + comm + "\"");
    MpiWorld world(timeout);
    if (world.size() != 2)
        throw std::runtime_error("--comm mpi: bench-link measures one link: run it as 2 processes, got " + std::to_string(world.size()));
    run_mpi_rank(world, [&](pp::Comm& c) { report(c, "MPI, 2 processes (rank 0 on " + world.host() + ")", bytes, reps); });
    return 0;
}

}  // namespace pt
