// labs/08_allreduce/allreduce.cpp — lab 08: data parallelism, a fixed-order all-reduce, then a
// ring. Your file: replace each TODO(student) body. Check it with: scripts/lab.sh check 08
#include "labs/08_allreduce/allreduce.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "labs/todo.hpp"

namespace student {

// TODO(student) Task 1: a rank that is not the root sends its n floats to ranks[0], then receives
// the sum from it into `data`. The root receives from ranks[1], ranks[2], ... in that order into a
// buffer of its own, adds each to `data`, then sends `data` to every other rank.
void allreduce_fixed(pp::Comm& comm, float* data, std::size_t n, const std::vector<int>& ranks) {
    labcheck::not_implemented("allreduce_fixed");
}

// TODO(student) Task 2: c chunks of n / D floats each, plus one for each of the first n % D chunks
// that come before chunk c.
std::size_t ring_chunk_begin(std::size_t n, int D, int c) { labcheck::not_implemented("ring_chunk_begin"); }

// TODO(student) Task 3: find your position i in `ranks`, then the 2 (D - 1) steps of the header.
// One step is one comm.group: the send of a chunk to the next rank and the receive of another
// from the previous one into a buffer of n / D + 1 floats; then add it in (reduce-scatter) or copy
// it in (all-gather).
void allreduce_ring(pp::Comm& comm, float* data, std::size_t n, const std::vector<int>& ranks) {
    labcheck::not_implemented("allreduce_ring");
}

}   // namespace student
