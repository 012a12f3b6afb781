// tests/standalone_lab.cpp — pipeline.hpp + pipeline_lab.hpp alone: ZB-V on P threads gives the
// bits of one thread.
//
// CMake builds this file with copies of the two headers as its only include directory (as tutorial
// 14 does with the core alone). The model is toy elementwise layers y = x + w ⊙ tanh(x), one per
// virtual stage; ZB-V's V placement puts stages r and 2P-1-r on rank r and needs the lab header's
// late-send plan. Exit 0 and "bitwise equal" when the loss and every weight gradient match.
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "pipeline_lab.hpp"

const int D = 64, P = 4, V = 2, S = P * V, M = 8;  // width, ranks, chunks, virtual stages, micro-batches

struct Weights {  // per virtual stage: w and its gradient
    std::vector<std::vector<float>> w = std::vector<std::vector<float>>(S, std::vector<float>(D)), dw = w;
    Weights() {
        for (int s = 0; s < S; s++)
            for (int k = 0; k < D; k++) w[s][k] = 0.5f * std::sin(float(s * D + k));
    }
};

// The virtual stages `stages` (indexed by chunk) of one rank; all S stages, as chunks, on one thread.
class ToyStage : public pp::Stage {
 public:
    ToyStage(Weights& weights, std::vector<int> stages) : w_(weights), stages_(std::move(stages)) {}
    double loss = 0;
    pp::Bytes input_buffer(pp::Op op, int mb, int c) override { return buf(op == pp::Op::F ? at(mb, c).x : at(mb, c).dy); }
    pp::Bytes forward(int mb, int c) override {
        Stash& st = at(mb, c);
        int s = stages_[c];
        if (s == 0) for (int k = 0; k < D; k++) st.x[k] = std::cos(0.3f * float(mb * D + k));
        for (int k = 0; k < D; k++) st.y[k] = st.x[k] + w_.w[s][k] * std::tanh(st.x[k]);
        if (s < S - 1) return buf(st.y);
        for (int k = 0; k < D; k++) {  // loss = Σ (y - t)² / (M·D)
            float e = st.y[k] - std::sin(0.7f * float(mb * D + k));
            loss += double(e) * e / (M * D);
            st.dy[k] = 2 * e / float(M * D);
        }
        return {};
    }
    pp::Bytes backward_input(int mb, int c) override {  // dx = dy ⊙ (1 + w ⊙ (1 - tanh²(x)))
        Stash& st = at(mb, c);
        int s = stages_[c];
        for (int k = 0; k < D; k++) {
            float t = std::tanh(st.x[k]);
            st.dx[k] = st.dy[k] * (1 + w_.w[s][k] * (1 - t * t));
        }
        return s > 0 ? buf(st.dx) : pp::Bytes{};
    }
    void backward_weight(int mb, int c) override {  // dw += dy ⊙ tanh(x), micro-batches in order
        Stash& st = at(mb, c);
        for (int k = 0; k < D; k++) w_.dw[stages_[c]][k] += st.dy[k] * std::tanh(st.x[k]);
    }

 private:
    struct Stash { std::vector<float> x = std::vector<float>(D), y = x, dy = x, dx = x; };
    Stash& at(int mb, int c) { return stash_[{mb, c}]; }  // kept to the end: sends may leave late
    static pp::Bytes buf(std::vector<float>& v) { return {v.data(), v.size() * sizeof(float)}; }
    Weights& w_;
    std::vector<int> stages_;
    std::map<std::pair<int, int>, Stash> stash_;
};

// Mailboxes between threads: sends never block, receives wait (10 s at most).
struct World {
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::pair<int, int>, std::deque<std::pair<int, std::vector<char>>>> boxes;  // (src, dst)
    std::string aborted;
};
class MailboxComm : public pp::Comm {
 public:
    MailboxComm(World& w, int rank) : w_(w), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return P; }
    void send(const void* data, std::size_t bytes, int peer, int tag) override {
        std::lock_guard<std::mutex> lock(w_.mu);
        const char* p = static_cast<const char*>(data);
        w_.boxes[{rank_, peer}].push_back({tag, std::vector<char>(p, p + bytes)});
        w_.cv.notify_all();
    }
    void recv(void* data, std::size_t bytes, int peer, int tag) override {
        std::unique_lock<std::mutex> lock(w_.mu);
        auto& box = w_.boxes[{peer, rank_}];
        if (!w_.cv.wait_for(lock, std::chrono::seconds(10), [&] { return !w_.aborted.empty() || !box.empty(); }))
            throw std::runtime_error("recv from rank " + std::to_string(peer) + " timed out");
        if (!w_.aborted.empty()) throw std::runtime_error("aborted: " + w_.aborted);
        if (box.front().first != tag || box.front().second.size() != bytes)
            throw std::runtime_error("recv from rank " + std::to_string(peer) + ": not the tag or size expected");
        std::memcpy(data, box.front().second.data(), bytes);
        box.pop_front();
    }
    void group(const std::vector<pp::P2POp>& ops) override {
        for (const pp::P2POp& op : ops) if (op.send) send(op.data, op.bytes, op.peer, op.tag);
        for (const pp::P2POp& op : ops) if (!op.send) recv(op.data, op.bytes, op.peer, op.tag);
    }
    void abort(const std::string& why) override {
        std::lock_guard<std::mutex> lock(w_.mu);
        if (w_.aborted.empty()) w_.aborted = why;
        w_.cv.notify_all();
    }

 private:
    World& w_;
    int rank_;
};

int main() {
    // One thread: every stage as a chunk of one stage object, forward then backward in order.
    Weights one;
    std::vector<int> all;
    for (int s = 0; s < S; s++) all.push_back(s);
    ToyStage serial(one, all);
    for (int mb = 0; mb < M; mb++)
        for (int s = 0; s < S; s++) {
            pp::Bytes y = serial.forward(mb, s);
            if (s + 1 < S) std::memcpy(serial.input_buffer(pp::Op::F, mb, s + 1).data, y.data, y.bytes);
        }
    for (int mb = 0; mb < M; mb++)
        for (int s = S - 1; s >= 0; s--) {
            pp::Bytes dx = serial.backward(mb, s);
            if (s > 0) std::memcpy(serial.input_buffer(pp::Op::B, mb, s - 1).data, dx.data, dx.bytes);
        }

    // P threads, ZB-V with its late-send plan.
    pp::Schedule schedule = pp::zbv(P, M);
    std::vector<pp::Plan> plan = pp::plan_for(schedule, V);
    pp::Layout layout{P, V, schedule.placement};
    Weights many;
    World world;
    std::vector<std::string> errors(P);
    double loss = 0;
    std::vector<std::thread> threads;
    for (int r = 0; r < P; r++)
        threads.emplace_back([&, r] {
            try {
                MailboxComm comm(world, r);
                ToyStage stage(many, {layout.stage(r, 0), layout.stage(r, 1)});
                pp::Pipeline(schedule, V, stage, comm, r, {0, 1, 2, 3}, plan).run_step();
                if (r == 0) loss = stage.loss;  // stage S-1 is rank 0's chunk 1
            } catch (const std::exception& e) { errors[r] = e.what(); }
        });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < P; r++)
        if (!errors[r].empty()) return std::printf("rank %d failed: %s\n", r, errors[r].c_str()), 1;

    bool same = std::memcmp(&loss, &serial.loss, sizeof loss) == 0 && !plan.empty();
    for (int s = 0; s < S; s++) same = same && std::memcmp(one.dw[s].data(), many.dw[s].data(), D * sizeof(float)) == 0;
    std::printf("zbv P=%d M=%d (late-send plan: %s): loss %.9f, one thread %.9f: %s\n", P, M,
                plan.empty() ? "none" : "yes", loss, serial.loss, same ? "bitwise equal" : "DIFFERS");
    return same ? 0 : 1;
}
