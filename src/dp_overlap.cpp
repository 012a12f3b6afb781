// src/dp_overlap.cpp — see dp_overlap.hpp.
#include "src/dp_overlap.hpp"

#include <algorithm>
#include <string>

namespace pt {

DpReducer::DpReducer(pp::Comm& comm, const RankPlace& at, TransformerStage& stage) : comm_(comm), at_(at), stage_(stage) {
    if (at.overlap && at.D > 1 && !at.zero) async_ = dynamic_cast<AsyncSum*>(&comm);
    if (async_) stage.grads_done = [this](Layer& l) { ready(l); };
}

DpReducer::~DpReducer() { stage_.grads_done = nullptr; }

void DpReducer::ready(Layer& l) {
    if (l.grads.device().cuda != async_->sums_device_memory()) return;   // summed by finish()
    async_->start_sum(l.grads.data(), l.grads.size(), at_.data_parallel_group());
    started_.push_back(l.index());
}

void DpReducer::finish() {
    if (at_.D == 1) return;
    if (async_) spans_ = async_->wait_sums();
    for (Layer* l : stage_.layers())
        if (std::find(started_.begin(), started_.end(), l->index()) == started_.end())
            comm_.allreduce_sum(l->grads.data(), l->grads.size(), at_.data_parallel_group());
}

std::vector<pp::Event> DpReducer::spans(Clock::time_point origin) const {
    std::vector<pp::Event> events;
    auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - origin).count(); };
    for (size_t i = 0; i < spans_.size() && i < started_.size(); i++) {
        pp::Event e;
        e.rank = at_.d * at_.P + at_.p, e.comm = true, e.start = us(spans_[i].start), e.end = us(spans_[i].end);
        e.detail = "data-parallel sum, layer " + std::to_string(started_[i]);
        events.push_back(e);
    }
    return events;
}

}   // namespace pt
