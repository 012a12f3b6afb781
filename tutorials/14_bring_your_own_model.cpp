// Tutorial 14 — bring your own model: pipeline.hpp alone, with a model and a transport of yours.
//
// Copy pipeline.hpp into your project and write two things: a `pp::Stage` (your model's slice:
// F, B, and B split into BI and BW) and a `pp::Comm` (your transport). Here both use only the C++
// standard library: residual MLP layers y = x + W2·relu(W1·x) with a hand-written backward and a
// squared-error loss, and mailboxes between threads. 1F1B and ZB-H1 on 4 threads must give the
// bits of a plain loop on one thread. CMake builds this file with a copy of pipeline.hpp as its
// only include directory. Compile with -ffp-contract=off: an FMA in one loop only changes bits.
//
// Run: build/tutorial_14_bring_your_own_model
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "pipeline.hpp"

const int D = 16, B = 2048, L = 8;  // width, rows per micro-batch, layers (L / P per stage)

// ---- the model: tensors (B, D) row-major, weights (D, D) out × in --------------------------
struct Layer { std::vector<float> w1, w2, dw1, dw2; };
std::vector<Layer> make_layers() {  // the same weights on every call, zero gradients
    std::vector<Layer> layers(L);
    for (int l = 0; l < L; l++)
        for (int k = 0; k < D * D; k++) {
            layers[l].w1.push_back(0.4f * std::sin(float(l * D * D + k)));
            layers[l].w2.push_back(0.2f * std::cos(float(l * D * D + k)));
            layers[l].dw1.push_back(0.0f), layers[l].dw2.push_back(0.0f);
        }
    return layers;
}
float input_at(int mb, int k) { return std::sin(0.37f * float(mb * B * D + k)); }   // x of micro-batch mb
float target_at(int mb, int k) { return std::cos(0.11f * float(mb * B * D + k)); }  // its target
float dot(const float* w, int stride, const float* v) {  // Σ_j w[j·stride]·v[j]: a row (1) or a column (D)
    float s = 0;
    for (int j = 0; j < D; j++) s += w[j * stride] * v[j];
    return s;
}

void layer_forward(float* y, float* h, const float* x, const Layer& l) {  // h = W1·x is kept for the backward
    for (int b = 0; b < B; b++, x += D, h += D, y += D) {
        float a[D];
        for (int i = 0; i < D; i++) h[i] = dot(&l.w1[i * D], 1, x), a[i] = std::max(h[i], 0.0f);
        for (int i = 0; i < D; i++) y[i] = x[i] + dot(&l.w2[i * D], 1, a);
    }
}
// BI: dh = relu'(h) ⊙ W2ᵀ·dy, dx = dy + W1ᵀ·dh. Reads the weights, writes no weight gradient.
void layer_backward_input(float* dx, float* dh, const float* dy, const float* h, const Layer& l) {
    for (int b = 0; b < B; b++, dx += D, dh += D, dy += D, h += D) {
        for (int j = 0; j < D; j++) dh[j] = h[j] > 0 ? dot(&l.w2[j], D, dy) : 0.0f;
        for (int j = 0; j < D; j++) dx[j] = dy[j] + dot(&l.w1[j], D, dh);
    }
}
// BW: dW2 += dy·relu(h)ᵀ, dW1 += dh·xᵀ, row after row: the order of the sum is fixed.
void layer_backward_weight(Layer& l, const float* dy, const float* dh, const float* x, const float* h) {
    for (int b = 0; b < B; b++, dy += D, dh += D, x += D, h += D)
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++) l.dw2[i * D + j] += dy[i] * std::max(h[j], 0.0f), l.dw1[i * D + j] += dh[i] * x[j];
}

// ---- the Stage: layers [begin, end). V = 1 here, so chunk is always 0 (with V > 1, key the
// stash by (micro-batch, chunk) and give each chunk its own layers) ---------------------------
class MlpStage : public pp::Stage {
 public:
    MlpStage(std::vector<Layer>& layers, int begin, int end, int M) : layers_(layers), begin_(begin), n_(end - begin), M_(M) {}
    double loss = 0;  // last stage: the sum of squared errors of the micro-batches seen

    pp::Buffer input_buffer(pp::Op op, int mb, int) override {  // receive straight into the stash
        return buffer(op == pp::Op::F ? stash(mb).x[0] : stash(mb).dy[n_ - 1]);
    }
    pp::Buffer forward(int mb, int) override {
        Stash& s = stash(mb);
        if (begin_ == 0) for (int k = 0; k < B * D; k++) s.x[0][k] = input_at(mb, k);
        for (int l = 0; l < n_; l++)
            layer_forward(l + 1 < n_ ? s.x[l + 1].data() : out_.data(), s.h[l].data(), s.x[l].data(), layer(l));
        if (begin_ + n_ < L) return buffer(out_);
        for (int k = 0; k < B * D; k++) {  // loss = Σ (y - t)² / (M·B·D); its gradient starts the backward
            float e = out_[k] - target_at(mb, k);
            loss += double(e) * e;
            s.dy[n_ - 1][k] = 2 * e / float(M_ * B * D);
        }
        return {};
    }
    pp::Buffer backward(int mb, int chunk) override {  // B = BI then BW
        pp::Buffer dx = backward_input(mb, chunk);
        backward_weight(mb, chunk);
        return dx;
    }
    pp::Buffer backward_input(int mb, int) override {
        Stash& s = stash(mb);
        for (int l = n_ - 1; l >= 0; l--)
            layer_backward_input(l > 0 ? s.dy[l - 1].data() : out_.data(), s.dh[l].data(), s.dy[l].data(), s.h[l].data(),
                                 layer(l));
        return begin_ > 0 ? buffer(out_) : pp::Buffer{};
    }
    void backward_weight(int mb, int) override {
        Stash& s = stash(mb);
        for (int l = n_ - 1; l >= 0; l--)
            layer_backward_weight(layer(l), s.dy[l].data(), s.dh[l].data(), s.x[l].data(), s.h[l].data());
        stash_.erase(mb);  // the micro-batch is done here: free its activations
    }

 private:
    struct Stash { std::vector<std::vector<float>> x, h, dy, dh; };  // per layer: input, W1·x, their gradients
    Stash& stash(int mb) {
        auto [it, fresh] = stash_.try_emplace(mb);
        for (auto* v : {&it->second.x, &it->second.h, &it->second.dy, &it->second.dh})
            if (fresh) v->assign(n_, std::vector<float>(B * D));
        return it->second;
    }
    Layer& layer(int l) { return layers_[begin_ + l]; }
    static pp::Buffer buffer(std::vector<float>& v) { return {v.data(), v.size() * sizeof(float)}; }
    std::vector<Layer>& layers_;
    int begin_, n_, M_;
    std::map<int, Stash> stash_;
    // What the last F or BI sends. One buffer is enough: the executor sends it before this rank's
    // next action starts (the rule above Stage::forward in pipeline.hpp).
    std::vector<float> out_ = std::vector<float>(B * D);
};

// ---- the Comm: mailboxes between threads, one mutex and one condition variable for all --------
struct World {
    explicit World(int n) : size(n), boxes(size_t(n) * n) {}
    int size, arrived = 0, round = 0;                                  // the barrier counts arrivals per round
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::deque<std::pair<int, std::vector<char>>>> boxes;  // [src * size + dst]: FIFO of (tag, bytes)
    std::string aborted;                                               // why, once a rank has failed
};
class MailboxComm : public pp::Comm {
 public:
    MailboxComm(World& w, int rank) : w_(w), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return w_.size; }
    void send(const void* data, std::size_t bytes, int peer, int tag) override {  // buffered: returns at once
        std::lock_guard<std::mutex> lock(w_.mu);
        const char* p = static_cast<const char*>(data);
        w_.boxes[size_t(rank_) * w_.size + peer].push_back({tag, std::vector<char>(p, p + bytes)});
        w_.cv.notify_all();
    }
    void recv(void* data, std::size_t bytes, int peer, int tag) override {
        std::unique_lock<std::mutex> lock(w_.mu);
        auto& box = w_.boxes[size_t(peer) * w_.size + rank_];
        wait(lock, [&] { return !box.empty(); }, "recv from rank " + std::to_string(peer));
        if (box.front().first != tag || box.front().second.size() != bytes)  // the ranks disagree on the order
            throw std::runtime_error("recv from rank " + std::to_string(peer) + ": not the tag or size expected");
        std::memcpy(data, box.front().second.data(), bytes);
        box.pop_front();
    }
    void group(const std::vector<pp::P2POp>& ops) override {  // sends never block, so they go first
        for (const pp::P2POp& op : ops) if (op.send) send(op.data, op.bytes, op.peer, op.tag);
        for (const pp::P2POp& op : ops) if (!op.send) recv(op.data, op.bytes, op.peer, op.tag);
    }
    void allreduce_sum(float* x, std::size_t n, const std::vector<int>& ranks) override { reduce(x, n, ranks); }
    void allreduce_sum(double* x, std::size_t n, const std::vector<int>& ranks) override { reduce(x, n, ranks); }
    void barrier() override {
        std::unique_lock<std::mutex> lock(w_.mu);
        int round = w_.round;
        if (++w_.arrived == w_.size) w_.arrived = 0, w_.round++, w_.cv.notify_all();
        else wait(lock, [&] { return w_.round != round; }, "barrier");
    }
    void abort(const std::string& why) override {
        std::lock_guard<std::mutex> lock(w_.mu);
        if (w_.aborted.empty()) w_.aborted = why;
        w_.cv.notify_all();  // every waiting rank wakes up and throws
    }

 private:
    template <class Ready> void wait(std::unique_lock<std::mutex>& lock, Ready ready, const std::string& what) {
        bool ok = w_.cv.wait_for(lock, std::chrono::seconds(10), [&] { return !w_.aborted.empty() || ready(); });
        if (!w_.aborted.empty()) throw std::runtime_error("aborted: " + w_.aborted);
        if (!ok) throw std::runtime_error("rank " + std::to_string(rank_) + ": " + what + " timed out after 10 s");
    }
    // Every rank sends its part to the others, then all add the parts in the order of `ranks`.
    template <class T> void reduce(T* x, std::size_t n, const std::vector<int>& ranks) {
        for (int r : ranks) if (r != rank_) send(x, n * sizeof(T), r, -1);  // tag -1: pipeline tags are >= 0
        std::vector<T> sum(x, x + n), part(x, x + n);
        for (size_t k = 0; k < ranks.size(); k++) {
            if (ranks[k] != rank_) recv(part.data(), n * sizeof(T), ranks[k], -1);
            else part.assign(x, x + n);
            for (size_t i = 0; i < n; i++) sum[i] = k == 0 ? part[i] : sum[i] + part[i];
        }
        std::copy(sum.begin(), sum.end(), x);
    }
    World& w_;
    int rank_;
};

// ---- one step, on one thread and on P ------------------------------------------------------
struct Result { std::vector<Layer> layers = make_layers(); double loss = 0; std::vector<pp::Event> events; };

Result run_one_thread(int M) {  // the reference: one stage holding every layer, micro-batches in order
    Result res;
    MlpStage all(res.layers, 0, L, M);
    for (int mb = 0; mb < M; mb++) all.forward(mb, 0), all.backward(mb, 0);
    res.loss = all.loss / (M * B * D);
    return res;
}

Result run_pipeline(const pp::Schedule& schedule, int M) {  // one thread per rank
    int P = int(schedule.size());
    Result res;
    World world(P);
    std::vector<int> ranks(P);
    std::iota(ranks.begin(), ranks.end(), 0);
    std::vector<std::vector<pp::Event>> events(P);
    std::vector<std::string> errors(P);
    std::vector<std::thread> threads;
    for (int r = 0; r < P; r++)
        threads.emplace_back([&, r] {
            try {
                MailboxComm comm(world, r);
                MlpStage stage(res.layers, r * L / P, (r + 1) * L / P, M);  // ranks touch disjoint layers
                pp::Pipeline pipe(schedule, 1, stage, comm, r, ranks);
                comm.barrier();  // start the clocks together
                pipe.run_step();
                events[r] = pipe.timeline();
                comm.allreduce_sum(&stage.loss, 1, ranks);  // only the last stage had a loss; now all do
                if (r == 0) res.loss = stage.loss / (M * B * D);
            } catch (const std::exception& e) { errors[r] = e.what(); }
        });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < P; r++)
        if (!errors[r].empty()) std::printf("rank %d failed: %s\n", r, errors[r].c_str()), std::exit(1);
    for (const auto& e : events) res.events.insert(res.events.end(), e.begin(), e.end());
    return res;
}

bool compare(const Result& got, const Result& want) {  // "<what>: bitwise equal", or how far apart
    bool loss_same = std::memcmp(&got.loss, &want.loss, sizeof(double)) == 0, grads_same = true;
    double worst = 0;
    for (int l = 0; l < L; l++)
        for (auto m : {&Layer::dw1, &Layer::dw2}) {
            const std::vector<float>&a = got.layers[l].*m, &b = want.layers[l].*m;
            grads_same &= std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
            for (size_t k = 0; k < a.size(); k++) worst = std::max(worst, std::fabs(double(a[k]) - b[k]));
        }
    if (loss_same) std::printf("  loss: bitwise equal (%.9f)\n", got.loss);
    else std::printf("  loss: pipeline %.9g, one thread %.9g\n", got.loss, want.loss);
    if (grads_same) std::printf("  gradients: bitwise equal (%d layers x 2 matrices of %d x %d)\n", L, D, D);
    else std::printf("  gradients: max difference %g\n", worst);
    return loss_same && grads_same;
}

int main() {
    const int P = 4, M = 8;
    std::printf("== step 1: the model on one thread, the reference ==\n");
    Result reference = run_one_thread(M);
    std::printf("%d layers y = x + W2·relu(W1·x), W1 W2 (%d, %d); M = %d micro-batches x (%d, %d); loss %.9f\n",
                L, D, D, M, B, D, reference.loss);
    std::printf("look at: here one MlpStage holds all %d layers; the pipeline gives each of %d threads %d.\n\n", L, P, L / P);

    std::printf("== step 2: the schedules, plain data from pipeline.hpp ==\n");
    pp::Schedule one_f_one_b = pp::one_f_one_b(P, M), zb = pp::zero_bubble_h1(P, M);
    std::printf("1f1b:\n%szb-h1:\n%s", pp::to_string(one_f_one_b).c_str(), pp::to_string(zb).c_str());
    std::printf("look at: zb-h1 is 1f1b with each B split into BI and BW, rank r's BWs delayed by r micro-batches.\n\n");

    bool ok = true;
    int step = 3;
    for (const auto& [name, schedule] : {std::pair{"1f1b", one_f_one_b}, std::pair{"zb-h1", zb}}) {
        std::printf("== step %d: %s on %d threads, against one thread ==\n", step++, name, P);
        Result got = run_pipeline(schedule, M);
        ok &= compare(got, reference);
        std::printf("%s", pp::ascii_timeline(got.events, P, 100).c_str());
    }
    std::printf("look at: in zb-h1 a rank's I (BI) and W (BW) of one micro-batch stand apart: I goes right after\n"
                "the gradient arrives and its result is sent on, W runs later in a gap. The BWs still run in\n"
                "micro-batch order, so the weight gradients are summed in the one-thread order.\n"
                "(%u cores for %d threads and actions of ~0.2 ms: waits stretch the chart, not the bits.)\n\n",
                std::thread::hardware_concurrency(), P);

    std::printf("question: what must your Stage guarantee for the bits to match (the order of its BWs, the\n"
                "buffers it hands out, -ffp-contract)? And if your Comm's sends blocked until received, would\n"
                "this group(), which posts them before the receives, still finish every schedule?\n");
    return ok ? 0 : 1;
}
