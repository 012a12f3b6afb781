// labs/08_allreduce/allreduce.hpp — lab 08's contract: what your allreduce.cpp defines.
// Read pipeline.hpp's Comm (search "class Comm") first, then labs/08_allreduce/README.md.
//
// Every function is called by every rank of `ranks` (Comm ranks, distinct, comm.rank() among them)
// with the same n and the same list, and sums in place: afterwards every one of them holds the
// same bits. Use comm.send, comm.recv and comm.group only: the Comm you get has no all-reduce of
// its own. Any tags will do (a tag per chunk makes a mix-up name the chunk).
#pragma once
#include <cstddef>
#include <vector>

#include "pipeline.hpp"

namespace student {

// Task 1. The fixed-order all-reduce: every rank ends with
//     ((x[ranks[0]] + x[ranks[1]]) + x[ranks[2]]) + ...      x[r]: the n floats rank r passed in
// added in the order of the list, whichever rank is ready first. Reduce to the root, ranks[0]: it
// receives the data of ranks[1], ranks[2], ... in that order and adds each to its own; then it
// sends the sum to every other rank (the broadcast), which receives it into `data`.
void allreduce_fixed(pp::Comm& comm, float* data, std::size_t n, const std::vector<int>& ranks);

// Task 2. Where chunk c of the ring begins, n floats cut into D chunks: chunk c (c = 0 .. D-1) is
// [ring_chunk_begin(n, D, c), ring_chunk_begin(n, D, c + 1)), and the first n % D chunks hold one
// float more than the others: n = 10, D = 4 gives chunks of 3, 3, 2, 2 floats (begins 0, 3, 6, 8, 10).
std::size_t ring_chunk_begin(std::size_t n, int D, int c);

// Task 3. The ring all-reduce: each rank sends 2(D-1)/D · n floats, where the root of the fixed order
// receives (D-1) · n. Position i is ranks[i]; it sends to ranks[(i + 1) % D], receives from
// ranks[(i + D - 1) % D]; chunk indices are taken mod D.
//   Reduce-scatter, steps s = 0 .. D-2: send chunk i - s, receive chunk i - s - 1 and add it:
//     chunk = received + yours. Afterwards position i holds the whole sum of chunk i + 1.
//   All-gather, steps s = 0 .. D-2: send chunk i + 1 - s, receive chunk i - s and copy it in.
// So chunk c is summed around the ring starting at position c, on every rank the same bits:
//     ((x[ranks[c]] + x[ranks[c + 1]]) + x[ranks[c + 2]]) + ... + x[ranks[c - 1]]
void allreduce_ring(pp::Comm& comm, float* data, std::size_t n, const std::vector<int>& ranks);

}   // namespace student
