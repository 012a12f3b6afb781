// Tutorial 14 — bring your own model: pipeline.hpp alone, with a model and a transport of yours.
//
// Copy pipeline.hpp into your project and write two things: a `pp::Stage` (your model's slice:
// F, B, and B split into BI and BW) and a `pp::Comm` (your transport). Here both use only the C++
// standard library: residual MLP layers y = x + W2·relu(W1·x) with a hand-written backward and a
// squared-error loss, and mailboxes between threads. GPipe and 1F1B on 4 threads must give the
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
#include <string>
#include <thread>

#include "pipeline.hpp"

const int D = 16, B = 2048, L = 8, P = 4, M = 8;  // width, rows per micro-batch, layers, ranks, micro-batches

// ---- the model: tensors (B, D) row-major, weights (D, D) out × in --------------------------
struct Layer { std::vector<float> w1, w2, dw1 = std::vector<float>(D * D), dw2 = dw1; };
std::vector<Layer> make_layers() {  // the same weights on every call, zero gradients
    std::vector<Layer> layers(L);   // weight k of the model is weight k % (D·D) of layer k / (D·D)
    for (int k = 0; k < L * D * D; k++) layers[k / (D * D)].w1.push_back(0.4f * std::sin(float(k)));
    for (int k = 0; k < L * D * D; k++) layers[k / (D * D)].w2.push_back(0.2f * std::cos(float(k)));
    return layers;
}
float input_at(int mb, int k) { return std::sin(0.37f * float(mb * B * D + k)); }   // x of micro-batch mb
float target_at(int mb, int k) { return std::cos(0.11f * float(mb * B * D + k)); }  // its target
float dot(const float* w, int stride, const float* v) {  // Σ_j w[j·stride]·v[j]: a row (1) or a column (D)
    float s = 0;
    for (int j = 0; j < D; j++) s += w[j * stride] * v[j];
    return s;
}
// F: a = relu(W1·x) is kept for the backward, y = x + W2·a.
void layer_forward(float* y, float* a, const float* x, const Layer& l) {
    for (int b = 0; b < B; b++, x += D, a += D, y += D) {
        for (int i = 0; i < D; i++) a[i] = std::max(dot(&l.w1[i * D], 1, x), 0.0f);
        for (int i = 0; i < D; i++) y[i] = x[i] + dot(&l.w2[i * D], 1, a);
    }
}
// BI: dh = (a > 0) ⊙ W2ᵀ·dy, dx = dy + W1ᵀ·dh. Reads the weights, writes no weight gradient.
void layer_backward_input(float* dx, float* dh, const float* dy, const float* a, const Layer& l) {
    for (int b = 0; b < B; b++, dx += D, dh += D, dy += D, a += D) {
        for (int j = 0; j < D; j++) dh[j] = a[j] > 0 ? dot(&l.w2[j], D, dy) : 0.0f;
        for (int j = 0; j < D; j++) dx[j] = dy[j] + dot(&l.w1[j], D, dh);
    }
}
// BW, one weight at a time: dW += Σ_b u_b·v_bᵀ, row after row, so the order of the sum is fixed.
void add_outer(std::vector<float>& dw, const float* u, const float* v) {
    for (int b = 0; b < B; b++, u += D, v += D)
        for (int i = 0; i < D * D; i++) dw[i] += u[i / D] * v[i % D];
}

// ---- the Stage: layers [first, last). V = 1 here, so chunk is always 0 (with V > 1, key the
// stash by (micro-batch, chunk) and give each chunk its own layers). B is pp::Stage's default:
// BI, then BW. ----------------------------------------------------------------------------------
class MlpStage : public pp::Stage {
 public:
    MlpStage(std::vector<Layer>& layers, int first, int last)
        : layer_(&layers[first]), n_(last - first), first_(first == 0), last_(last == L) {}
    double loss = 0;  // last stage: the sum of squared errors of the micro-batches seen

    pp::Bytes input_buffer(pp::Op op, int mb, int) override {  // receive straight into the stash
        return buffer(op == pp::Op::F ? stash(mb).x[0] : stash(mb).dy[n_ - 1]);
    }
    pp::Bytes forward(int mb, int) override {
        Stash& s = stash(mb);
        if (first_) for (int k = 0; k < B * D; k++) s.x[0][k] = input_at(mb, k);
        for (int l = 0; l < n_; l++)
            layer_forward(l + 1 < n_ ? &s.x[l + 1][0] : &out_[0], &s.a[l][0], &s.x[l][0], layer_[l]);
        if (!last_) return buffer(out_);
        for (int k = 0; k < B * D; k++) {  // loss = Σ (y - t)² / (M·B·D); its gradient starts the backward
            float e = out_[k] - target_at(mb, k);
            loss += double(e) * e;
            s.dy[n_ - 1][k] = 2 * e / float(M * B * D);
        }
        return {};
    }
    pp::Bytes backward_input(int mb, int) override {
        Stash& s = stash(mb);
        for (int l = n_ - 1; l >= 0; l--)
            layer_backward_input(l > 0 ? &s.dy[l - 1][0] : &out_[0], &s.dh[l][0], &s.dy[l][0], &s.a[l][0],
                                 layer_[l]);
        return first_ ? pp::Bytes{} : buffer(out_);
    }
    void backward_weight(int mb, int) override {  // dW2 += dy·aᵀ, dW1 += dh·xᵀ
        Stash& s = stash(mb);
        for (int l = n_ - 1; l >= 0; l--) {
            add_outer(layer_[l].dw2, &s.dy[l][0], &s.a[l][0]);
            add_outer(layer_[l].dw1, &s.dh[l][0], &s.x[l][0]);
        }
        stash_.erase(mb);  // the micro-batch is done here: free its activations
    }

 private:
    struct Stash {  // per layer: its input x, a = relu(W1·x), the gradients of its output (dy), of W1·x (dh)
        explicit Stash(int n) : x(n, std::vector<float>(B * D)), a(x), dy(x), dh(x) {}
        std::vector<std::vector<float>> x, a, dy, dh;
    };
    Stash& stash(int mb) { return stash_.try_emplace(mb, n_).first->second; }
    static pp::Bytes buffer(std::vector<float>& v) { return {v.data(), v.size() * sizeof(float)}; }
    Layer* layer_;       // this stage's first layer
    int n_;              // its number of layers
    bool first_, last_;  // the first stage makes the inputs, the last one the loss
    std::map<int, Stash> stash_;
    // What the last F or BI sends. One buffer is enough: the executor sends it before this rank's
    // next action starts (the rule above Stage::forward in pipeline.hpp).
    std::vector<float> out_ = std::vector<float>(B * D);
};

// ---- the Comm: mailboxes between threads, one mutex and one condition variable for all. The
// Pipeline only calls group() and abort(); all-reduce and barrier (data parallelism) are left out.
struct World {  // what the ranks share
    int size = P;
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::pair<int, int>, std::deque<std::pair<int, std::vector<char>>>> boxes;  // (src, dst): FIFO of (tag, bytes)
    std::string aborted;  // why, once a rank has failed
};
class MailboxComm : public pp::Comm {
 public:
    MailboxComm(World& w, int rank) : w_(w), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return w_.size; }
    void send(const void* data, std::size_t bytes, int peer, int tag) override {  // buffered: returns at once
        std::lock_guard<std::mutex> lock(w_.mu);
        const char* p = static_cast<const char*>(data);
        w_.boxes[{rank_, peer}].push_back({tag, std::vector<char>(p, p + bytes)});
        w_.cv.notify_all();
    }
    void recv(void* data, std::size_t bytes, int peer, int tag) override {  // waits 10 s at most
        std::unique_lock<std::mutex> lock(w_.mu);
        auto& box = w_.boxes[{peer, rank_}];
        bool ok = w_.cv.wait_for(lock, std::chrono::seconds(10), [&] { return !w_.aborted.empty() || !box.empty(); });
        std::string what = "rank " + std::to_string(rank_) + ": recv from rank " + std::to_string(peer);
        if (!w_.aborted.empty()) throw std::runtime_error("aborted: " + w_.aborted);
        if (!ok) throw std::runtime_error(what + " timed out after 10 s");
        if (box.front().first != tag || box.front().second.size() != bytes)  // the ranks disagree on an order
            throw std::runtime_error(what + ": not the tag or size expected");
        std::copy(box.front().second.begin(), box.front().second.end(), static_cast<char*>(data));
        box.pop_front();
    }
    void group(const std::vector<pp::P2POp>& ops) override {  // sends never block, so they go first
        for (const pp::P2POp& op : ops) if (op.send) send(op.data, op.bytes, op.peer, op.tag);
        for (const pp::P2POp& op : ops) if (!op.send) recv(op.data, op.bytes, op.peer, op.tag);
    }
    void abort(const std::string& why) override {
        std::lock_guard<std::mutex> lock(w_.mu);
        if (w_.aborted.empty()) w_.aborted = why;
        w_.cv.notify_all();  // every waiting rank wakes up and throws
    }

 private:
    World& w_;
    int rank_;
};

// ---- one step on P threads, and how it compares with one thread ----------------------------
// The measured order of each rank, with when it began (ms): "rank 1 | F0@0.4 F1@0.9 ... |".
std::string timeline(const std::vector<pp::Event>& events) {
    std::string out;
    for (int r = 0; r < P; r++) {
        out += "rank " + std::to_string(r) + " |";
        for (const pp::Event& e : events)
            if (e.rank == r && !e.comm) {
                char at[48];
                std::snprintf(at, sizeof at, " %s@%.1f", pp::to_string(e.action).c_str(), e.start / 1000);
                out += at;
            }
        out += " |\n";
    }
    return out;
}

struct Result { std::vector<Layer> layers = make_layers(); double loss = 0; std::vector<pp::Event> events; };

Result run_pipeline(const pp::Schedule& schedule) {  // one thread per rank
    Result res;
    World world;
    std::vector<int> ranks = {0, 1, 2, 3};  // pipeline rank r is Comm rank r
    auto origin = std::chrono::steady_clock::now();  // one time axis for all ranks
    std::vector<std::string> errors(P);
    std::vector<std::thread> threads;
    std::mutex mu;
    for (int r = 0; r < P; r++)
        threads.emplace_back([&, r] {
            try {
                MailboxComm comm(world, r);
                MlpStage stage(res.layers, r * L / P, (r + 1) * L / P);  // ranks touch disjoint layers
                pp::Pipeline pipe(schedule, 1, stage, comm, r, ranks);
                pipe.run_step(origin);
                std::lock_guard<std::mutex> lock(mu);
                res.events.insert(res.events.end(), pipe.timeline().begin(), pipe.timeline().end());
                if (r == P - 1) res.loss = stage.loss / (M * B * D);  // the last stage has the loss
            } catch (const std::exception& e) { errors[r] = e.what(); }
        });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < P; r++)
        if (!errors[r].empty()) std::printf("rank %d failed: %s\n", r, errors[r].c_str()), std::exit(1);
    return res;
}

bool compare(const Result& got, const Result& want) {  // "<what>: bitwise equal", or how far apart
    bool loss_same = std::memcmp(&got.loss, &want.loss, sizeof(double)) == 0, grads_same = true;
    double worst = 0;
    for (int l = 0; l < L; l++)
        for (auto m : {&Layer::dw1, &Layer::dw2})
            for (int k = 0; k < D * D; k++) {
                float a = (got.layers[l].*m)[k], b = (want.layers[l].*m)[k];
                grads_same &= std::memcmp(&a, &b, sizeof(float)) == 0;
                worst = std::max(worst, std::fabs(double(a) - b));
            }
    std::printf("  loss: %s (%.9f; one thread %.9f)\n", loss_same ? "bitwise equal" : "differs", got.loss, want.loss);
    std::printf("  gradients: %s (%d layers x 2 matrices of %d x %d; max difference %g)\n",
                grads_same ? "bitwise equal" : "differ", L, D, D, worst);
    return loss_same && grads_same;
}

int main() {
    std::printf("== step 1: the model on one thread, the reference ==\n");
    Result reference;
    MlpStage all(reference.layers, 0, L);  // one stage holding every layer, in a plain loop
    for (int mb = 0; mb < M; mb++) all.forward(mb, 0);
    for (int mb = 0; mb < M; mb++) all.backward(mb, 0);
    reference.loss = all.loss / (M * B * D);
    std::printf("%d layers y = x + W2·relu(W1·x), W1 W2 (%d, %d); M = %d micro-batches x (%d, %d); loss %.9f\n"
                "look at: here one MlpStage holds all %d layers; the pipeline gives each of %d threads %d.\n\n",
                L, D, D, M, B, D, reference.loss, L, P, L / P);

    std::printf("== step 2: the schedules, plain data from pipeline.hpp ==\n");
    pp::Schedule gpipe = pp::gpipe(P, M), one_f_one_b = pp::one_f_one_b(P, M);
    std::printf("gpipe:\n%s1f1b:\n%s", pp::to_string(gpipe).c_str(), pp::to_string(one_f_one_b).c_str());
    std::printf("look at: both run every micro-batch's backward in increasing order; 1f1b starts them sooner.\n\n");

    bool ok = true;
    for (const auto& [step, name, schedule] : {std::tuple{3, "gpipe", gpipe}, std::tuple{4, "1f1b", one_f_one_b}}) {
        std::printf("== step %d: %s on %d threads, against one thread ==\n", step, name, P);
        Result got = run_pipeline(schedule);
        ok &= compare(got, reference);
        std::printf("%s", timeline(got.events).c_str());
    }
    std::printf("look at: gpipe's rank 0 holds all %d stashes before its first B, 1f1b's at most %d; the B's\n"
                "still run in micro-batch order, so the weight gradients are summed in the one-thread order.\n"
                "(%u cores for %d threads and actions of ~0.2 ms: waits stretch the times, not the bits.)\n\n",
                M, P,
                std::thread::hardware_concurrency(), P);

    std::printf("question: what must your Stage guarantee for the bits to match (the order of its BWs, the\n"
                "buffers it hands out, -ffp-contract)? And if your Comm's sends blocked until received, would\n"
                "this group(), which posts them before the receives, still finish every schedule?\n"
                "answer: docs/answers.md, section \"14 bring your own model\"\n");
    return ok ? 0 : 1;
}
