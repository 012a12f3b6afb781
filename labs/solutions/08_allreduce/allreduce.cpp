// labs/solutions/08_allreduce/allreduce.cpp — lab 08's answer (what a student should end with).
#include "labs/08_allreduce/allreduce.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace student {

namespace {
const int kReduceTag = 1, kResultTag = 2;

// Where this rank sits in `ranks`.
int position_of(const pp::Comm& comm, const std::vector<int>& ranks) {
    auto it = std::find(ranks.begin(), ranks.end(), comm.rank());
    if (it == ranks.end())
        throw std::invalid_argument("rank " + std::to_string(comm.rank()) + ": not among the all-reduce's ranks");
    return int(it - ranks.begin());
}
}   // namespace

void allreduce_fixed(pp::Comm& comm, float* data, std::size_t n, const std::vector<int>& ranks) {
    position_of(comm, ranks);
    std::size_t bytes = n * sizeof(float);
    int root = ranks[0];
    if (comm.rank() != root) {
        comm.send(data, bytes, root, kReduceTag);
        comm.recv(data, bytes, root, kResultTag);
        return;
    }
    // The root adds in the order of the list, not in the order the data arrives: the bits then do
    // not depend on which rank was ready first.
    std::vector<float> other(n);
    for (std::size_t k = 1; k < ranks.size(); k++) {
        comm.recv(other.data(), bytes, ranks[k], kReduceTag);
        for (std::size_t i = 0; i < n; i++) data[i] += other[i];
    }
    for (std::size_t k = 1; k < ranks.size(); k++) comm.send(data, bytes, ranks[k], kResultTag);
}

std::size_t ring_chunk_begin(std::size_t n, int D, int c) {
    return std::size_t(c) * (n / D) + std::min(std::size_t(c), n % D);
}

void allreduce_ring(pp::Comm& comm, float* data, std::size_t n, const std::vector<int>& ranks) {
    int D = int(ranks.size()), i = position_of(comm, ranks);
    int next = ranks[(i + 1) % D], prev = ranks[(i + D - 1) % D];
    auto begin = [&](int c) { return ring_chunk_begin(n, D, c); };
    auto wrap = [&](int c) { return ((c % D) + D) % D; };
    std::vector<float> incoming(n / D + 1);
    // One step: chunk `out` to the next rank, chunk `in` from the previous one (tag: the chunk).
    auto exchange = [&](int out, int in) {
        std::size_t out_n = begin(out + 1) - begin(out), in_n = begin(in + 1) - begin(in);
        comm.group({{true, data + begin(out), out_n * sizeof(float), next, out},
                    {false, incoming.data(), in_n * sizeof(float), prev, in}});
        return in_n;
    };
    // Reduce-scatter: the partial sum of chunk c travels from position c around the ring.
    for (int s = 0; s < D - 1; s++) {
        int in = wrap(i - s - 1);
        float* chunk = data + begin(in);
        std::size_t len = exchange(wrap(i - s), in);
        for (std::size_t e = 0; e < len; e++) chunk[e] = incoming[e] + chunk[e];   // the partial sum, then yours
    }
    // All-gather: each finished chunk travels around once more.
    for (int s = 0; s < D - 1; s++) {
        int in = wrap(i - s);
        float* chunk = data + begin(in);
        std::size_t len = exchange(wrap(i + 1 - s), in);
        std::copy(incoming.begin(), incoming.begin() + long(len), chunk);   // a finished sum: copied, not added
    }
}

}   // namespace student
