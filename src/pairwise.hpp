// src/pairwise.hpp — a sum in one fixed tree, whoever adds the leaves.
//
// Leaves 0, 1, 2, ... come in order; two partial sums merge as soon as they cover aligned blocks
// of one size (a binary counter's carries), and the rest is added from the right at the end:
// ((s0 + s1) + (s2 + s3)) + s4, with at most ⌈log2 n⌉ + 1 partials alive. An aligned block of 2^k
// leaves is a subtree: a replica that sums its M = 2^k micro-batches' gradients so, then an
// all-reduce that sums the D replicas so, complete one device's tree over all D·M micro-batches.
#pragma once
#include <functional>
#include <utility>
#include <vector>

namespace pt {

template <typename T>
class PairwiseSum {
 public:
    using Add = std::function<void(T& into, T& from)>;   // into += from (from is dropped after)
    explicit PairwiseSum(Add add) : add_(std::move(add)) {}
    size_t leaves() const { return leaves_; }
    void push(T leaf) { parts_.emplace_back(std::move(leaf), 1), leaves_++, carry(); }
    // After an odd count of leaves the last partial is a lone leaf that the next merges with at once:
    // where adds are `into += leaf`, the next leaf may be added straight into it, then grow().
    T* lone_last() { return leaves_ % 2 ? &parts_.back().first : nullptr; }
    void grow() { parts_.back().second++, leaves_++, carry(); }
    void clear() { parts_.clear(), leaves_ = 0; }   // drops every partial sum
    T finish() {   // the sum of every leaf pushed (one at least); empties the tree
        while (parts_.size() > 1) merge();
        T total = std::move(parts_.at(0).first);
        return clear(), total;
    }

 private:
    void carry() { while (parts_.size() > 1 && parts_[parts_.size() - 2].second == parts_.back().second) merge(); }
    void merge() {
        auto& [into, n] = parts_[parts_.size() - 2];
        add_(into, parts_.back().first), n += parts_.back().second, parts_.pop_back();
    }
    Add add_;
    std::vector<std::pair<T, size_t>> parts_;   // (partial sum, its leaves), oldest first
    size_t leaves_ = 0;
};

}  // namespace pt
