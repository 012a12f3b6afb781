// labs/08_allreduce/check.cpp — lab 08's check: scripts/lab.sh check 08 (or build/lab_08).
// build/lab_08 --bench measures the deliverable (fixed order against ring, 4 threads, 1M floats).
//
// References, none of them your code: the sums written out serially here, in the fixed order and
// in the ring's order; the chunk formula; and the tiny model's gradients on one device with three
// micro-batches, which the three replicas' summed gradients must equal bit for bit.
#include <chrono>
#include <functional>
#include <random>
#include <thread>

#include "labs/08_allreduce/allreduce.hpp"
#include "labs/pipeline_check.hpp"

using namespace labcheck;
using Clock = std::chrono::steady_clock;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// "{2, 0, 3, 1}"
std::string list_text(const std::vector<int>& v) {
    std::string s;
    for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
    return "{" + s + "}";
}

// The Comm you get: pt::ThreadComm's point-to-point part alone (its allreduce_sum is task 1's answer),
// counting the bytes this rank sends.
class PointToPoint : public pp::Comm {
 public:
    PointToPoint(pt::ThreadWorld& world, int rank) : inner_(world, rank) {}
    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    void send(const void* data, std::size_t bytes, int peer, int tag) override {
        sent += bytes;
        inner_.send(data, bytes, peer, tag);
    }
    void recv(void* data, std::size_t bytes, int peer, int tag) override { inner_.recv(data, bytes, peer, tag); }
    void group(const std::vector<pp::P2POp>& ops) override {
        for (const pp::P2POp& op : ops) sent += op.send ? op.bytes : 0;
        inner_.group(ops);
    }
    void abort(const std::string& why) override { inner_.abort(why); }
    std::size_t sent = 0;

 private:
    pt::ThreadComm inner_;
};

using AllReduce = void (*)(pp::Comm&, float*, std::size_t, const std::vector<int>&);

// Every rank of `ranks` on a thread of its own calls fn on its row of `data` ([comm rank][n]);
// the world's other ranks sit idle. A rank that throws aborts the world, waking the others.
struct Run {
    std::vector<std::string> errors;   // [comm rank]
    std::vector<std::size_t> sent;   // [comm rank] floats
    double seconds = 0;
};
Run run_allreduce(AllReduce fn, std::vector<std::vector<float>>& data, const std::vector<int>& ranks,
                  double timeout = 2) {
    int world_size = int(data.size());
    pt::ThreadWorld world(world_size, timeout);
    Run run;
    run.errors.assign(size_t(world_size), "");
    run.sent.assign(size_t(world_size), 0);
    std::vector<std::thread> threads;
    Clock::time_point t0 = Clock::now();
    for (int r : ranks)
        threads.emplace_back([&, r] {
            PointToPoint comm(world, r);
            try {
                fn(comm, data[size_t(r)].data(), data[size_t(r)].size(), ranks);
            } catch (const std::exception& e) {
                run.errors[size_t(r)] = e.what();
                world.abort(e.what());
            } catch (...) {
                run.errors[size_t(r)] = "an exception that is not a std::exception";
                world.abort(run.errors[size_t(r)]);
            }
            run.sent[size_t(r)] = comm.sent / sizeof(float);
        });
    for (std::thread& t : threads) t.join();
    run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    for (const std::string& e : run.errors)
        if (has(e, "not implemented: ")) throw std::runtime_error(e);
    return run;
}

// The first error, not the "aborted: ..." it caused on the other ranks; "" when none.
std::string first_error(const Run& run) {
    std::string first;
    for (size_t r = 0; r < run.errors.size(); r++) {
        const std::string& e = run.errors[r];
        if (!e.empty() && (first.empty() || (has(first, "aborted: ") && !has(e, "aborted: "))))
            first = "rank " + std::to_string(r) + " threw: " + e;
    }
    return first;
}

// n floats per rank of a world of `size`, of mixed magnitudes (2^-4 .. 2^4): another order of the
// additions then gives other bits in most elements.
std::vector<std::vector<float>> inputs(int size, std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<std::vector<float>> x(static_cast<size_t>(size), std::vector<float>(n));
    for (auto& row : x)
        for (float& v : row) v = std::ldexp(u(rng), int(rng() % 9) - 4);
    return x;
}

// ((x[order[0]] + x[order[1]]) + x[order[2]]) + ..., element by element.
std::vector<float> serial_sum(const std::vector<std::vector<float>>& x, const std::vector<int>& order) {
    std::vector<float> s = x[size_t(order[0])];
    for (size_t k = 1; k < order.size(); k++)
        for (size_t i = 0; i < s.size(); i++) s[i] = s[i] + x[size_t(order[k])][i];
    return s;
}

struct Case {
    int world;
    std::vector<int> ranks;
    std::size_t n;
};
std::string case_text(const Case& c) {
    return "D = " + std::to_string(c.ranks.size()) + ", ranks " + list_text(c.ranks) + " (of " +
           std::to_string(c.world) + "), n = " + std::to_string(c.n);
}
// D = 2, 3, 4; lists out of rank order; groups that leave ranks out (a data-parallel group);
// awkward n, n = 1 and n < D.
const std::vector<Case> kCases = {
    {4, {2, 0, 3, 1}, 10}, {3, {0, 1, 2}, 1001}, {2, {0, 1}, 1},    {4, {0, 1, 2, 3}, 4099},
    {4, {1, 3}, 37},       {4, {3, 1, 2}, 5},    {3, {1, 2, 0}, 2}, {4, {0, 1, 2, 3}, 3},
};

// ---- task 1: the fixed order -------------------------------------------------------------------
const char* const kTimedOutFixed =
    "a rank waited for a message nobody sent: every rank but ranks[0] sends its data to ranks[0], then "
    "receives the sum from it; ranks[0] receives from ranks[1], ranks[2], ... in turn, then sends to each";

// The likely mistake behind a rank's error in the fixed order.
std::string fixed_error_hint(const std::string& error) {
    if (has(error, "timed out")) return kTimedOutFixed;
    if (has(error, "does not have it"))
        return "use comm.send and comm.recv: this Comm has no all-reduce of its own (it is what you are writing)";
    return "read the message: it names the rank and the transfer";
}

void check_fixed(const Case& c) {
    std::vector<std::vector<float>> x = inputs(c.world, c.n, unsigned(c.n * 7 + c.ranks.size())), y = x;
    Run run = run_allreduce(student::allreduce_fixed, y, c.ranks);
    std::string error = first_error(run);
    if (!error.empty()) fail(case_text(c) + ": " + error, fixed_error_hint(error));
    std::vector<float> expected = serial_sum(x, c.ranks);
    int root = c.ranks[0];
    std::string root_diff = first_difference(y[size_t(root)].data(), expected.data(), c.n, 1,
                                             "the root's (rank " + std::to_string(root) + ") data");
    if (!root_diff.empty()) {
        std::vector<int> sorted = c.ranks, reversed = {c.ranks[0]};
        std::sort(sorted.begin(), sorted.end());
        reversed.insert(reversed.end(), c.ranks.rbegin(), c.ranks.rend() - 1);
        std::string hint = "the root adds the others' data to its own: data[i] += other[i], once per rank of the list";
        if (sorted != c.ranks && y[size_t(root)] == serial_sum(x, sorted))
            hint =
                "yours adds in increasing rank order; add in the order of the list `ranks`, ((x[ranks[0]] + "
                "x[ranks[1]]) + x[ranks[2]]) + ...: the caller's fixed order, the same bits whatever the timing";
        else if (c.ranks.size() > 2 && y[size_t(root)] == serial_sum(x, reversed))
            hint =
                "yours adds ranks[D-1] first: add in the order of the list `ranks`, ((x[ranks[0]] + x[ranks[1]]) "
                "+ x[ranks[2]]) + ...: one device adds micro-batch 0's gradient, then 1's, then 2's";
        fail(case_text(c) + ": " + root_diff, hint);
    }
    for (int r : c.ranks) {
        std::string d =
            first_difference(y[size_t(r)].data(), expected.data(), c.n, 1, "rank " + std::to_string(r) + "'s data");
        if (d.empty()) continue;
        if (y[size_t(r)] == x[size_t(r)])
            fail(case_text(c) + ": " + d + "\nrank " + std::to_string(r) + " still holds its own input",
                 "the root never sent the sum back: after the reduce, ranks[0] sends the sum to every other rank, "
                 "which receives it into data (the broadcast)");
        fail(case_text(c) + ": the root is right, but " + d,
             "ranks disagree: every rank must end with the root's bits; receive the root's sum, do not add "
             "your own copy");
    }
}

void task_fixed() {
    for (const Case& c : kCases) check_fixed(c);
}

// ---- task 2: the ring's chunks ------------------------------------------------------------------
std::size_t chunk_begin(std::size_t n, int D, int c) { return size_t(c) * (n / D) + std::min(size_t(c), n % D); }

// "3 3 2 2": the chunk sizes a begin function gives.
std::string sizes_text(const std::function<std::size_t(int)>& begin, int D) {
    std::string s;
    for (int c = 0; c < D; c++) s += (c ? " " : "") + std::to_string(long(begin(c + 1)) - long(begin(c)));
    return s;
}

void task_chunks() {
    std::vector<std::pair<std::size_t, int>> sizes = {{10, 4}, {1001, 3}, {4099, 4}, {3, 4}, {4096, 4}, {1, 1}};
    for (int D = 1; D <= 7; D++)
        for (std::size_t n = 0; n <= 30; n++) sizes.push_back({n, D});
    for (auto [n, D] : sizes)
        for (int c = 0; c <= D; c++) {
            std::size_t yours = student::ring_chunk_begin(n, D, c), expected = chunk_begin(n, D, c);
            if (yours == expected) continue;
            std::string hint = "chunk c begins at c * (n / D) + min(c, n % D): the first n % D chunks hold one more";
            if (c == D)
                hint = "chunk D begins at n: the D chunks end where the data ends";
            else if (yours == size_t(c) * (n / D))
                hint =
                    "the remainder all went to the last chunk (or nowhere): spread it, one float more for each "
                    "of the first n % D chunks, so no rank's chunk is more than one float longer";
            else if (yours == std::min(n, size_t(c) * ((n + D - 1) / D)))
                hint =
                    "chunks of ceil(n / D) leave the last ones short (or empty); the first n % D chunks hold "
                    "n / D + 1, the others n / D";
            fail("n = " + std::to_string(n) + ", D = " + std::to_string(D) + ", chunk " + std::to_string(c) +
                     " begins at yours " + std::to_string(yours) + ", expected " + std::to_string(expected) +
                     " (chunk sizes yours " + sizes_text([&](int k) { return student::ring_chunk_begin(n, D, k); }, D) +
                     ", expected " + sizes_text([&](int k) { return chunk_begin(n, D, k); }, D) + ")",
                 hint);
        }
}

// ---- task 3: the ring --------------------------------------------------------------------------
// The ring's order, serially: chunk c is summed from position c around the ring.
std::vector<float> ring_sum(const std::vector<std::vector<float>>& x, const std::vector<int>& ranks, std::size_t n) {
    int D = int(ranks.size());
    std::vector<float> s(n);
    for (int c = 0; c < D; c++)
        for (std::size_t i = chunk_begin(n, D, c); i < chunk_begin(n, D, c + 1); i++) {
            float acc = x[size_t(ranks[size_t(c)])][i];
            for (int k = 1; k < D; k++) acc = acc + x[size_t(ranks[size_t((c + k) % D)])][i];
            s[i] = acc;
        }
    return s;
}

int chunk_of(std::size_t i, std::size_t n, int D) {
    int c = 0;
    while (c + 1 < D && chunk_begin(n, D, c + 1) <= i) c++;
    return c;
}

void check_ring(const Case& c) {
    int D = int(c.ranks.size());
    std::vector<std::vector<float>> x = inputs(c.world, c.n, unsigned(c.n * 13 + c.ranks.size())), y = x;
    Run run = run_allreduce(student::allreduce_ring, y, c.ranks);
    std::string error = first_error(run);
    if (!error.empty())
        fail(case_text(c) + ": " + error,
             has(error, "timed out")        ? "a rank waited for a chunk nobody sent: at each step position i sends to "
                                              "ranks[(i + 1) % D] and receives from ranks[(i + D - 1) % D]; both "
                                              "phases take D - 1 steps"
             : has(error, "receive buffer") ? "the sender and the receiver disagree on a chunk's size: the chunk "
                                              "received at step s is the one the previous position sends at step s"
             : has(error, "expected")       ? "a rank received another chunk than it expected: at step s position "
                                              "i sends chunk i - s and receives chunk i - s - 1 (all-gather: i + 1 "
                                              "- s and i - s), mod D"
                                            : "read the message: it names the rank and the transfer");
    std::vector<float> expected = ring_sum(x, c.ranks, c.n);
    for (int p = 0; p < D; p++) {   // position p, in the order of the ring
        int r = c.ranks[size_t(p)];
        std::string d =
            first_difference(y[size_t(r)].data(), expected.data(), c.n, 1, "rank " + std::to_string(r) + "'s data");
        if (d.empty()) continue;
        // Which phase: after the reduce-scatter, position k - 1 holds chunk k complete.
        size_t at = 0;
        while (std::memcmp(&y[size_t(r)][at], &expected[at], sizeof(float)) == 0) at++;
        int k = chunk_of(at, c.n, D), owner = c.ranks[size_t((k + D - 1) % D)];
        std::size_t b = chunk_begin(c.n, D, k), e = chunk_begin(c.n, D, k + 1);
        bool owner_right = std::equal(y[size_t(owner)].begin() + long(b), y[size_t(owner)].begin() + long(e),
                                      expected.begin() + long(b));
        std::string where = case_text(c) + ": " + d + " (chunk " + std::to_string(k) + ")";
        if (owner_right && owner != r)
            fail(where + "\nrank " + std::to_string(owner) + " holds chunk " + std::to_string(k) +
                     "'s sum right: the reduce-scatter is right, the all-gather is not",
                 "in the all-gather copy the chunk you receive (it is a finished sum) into your data, do not add it; "
                 "at step s send chunk i + 1 - s, receive chunk i - s");
        if (y[size_t(owner)] == serial_sum(x, c.ranks))
            fail(where,
                 "yours is the fixed order's sum: in the ring chunk c is summed starting at position c, "
                 "((x[ranks[c]] + x[ranks[c + 1]]) + ...), the order the reduce-scatter adds in");
        fail(where,
             "the reduce-scatter: at step s position i sends chunk i - s and receives chunk i - s - 1 "
             "(mod D), and adds it: chunk = received + yours");
    }
    // Bit-equal to the ring's order, hence within rounding of the fixed order's sum.
    std::vector<float> fixed = serial_sum(x, c.ranks);
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < c.n; i++)
        diff += std::pow(double(expected[i]) - fixed[i], 2), norm += std::pow(double(fixed[i]), 2);
    if (std::sqrt(diff) > 1e-6 * std::sqrt(norm))
        fail(case_text(c) + ": the ring's sum is " + num(std::sqrt(diff / norm)) + " relative from the fixed order's",
             "rounding alone stays within 1e-6: some element is summed wrongly");
    // A ring sends each chunk twice around, less one step: at most 2 (D - 1) ceil(n / D) floats.
    std::size_t most = 2 * std::size_t(D - 1) * ((c.n + D - 1) / D);
    for (int r : c.ranks)
        if (run.sent[size_t(r)] > most)
            fail(case_text(c) + ": rank " + std::to_string(r) + " sent " + std::to_string(run.sent[size_t(r)]) +
                     " floats; a ring sends at most 2 (D - 1) ceil(n / D) = " + std::to_string(most),
                 "send one chunk per step, 2 (D - 1) steps: never the whole array");
}

void task_ring() {
    for (const Case& c : kCases) {
        for (int k = 0; k <= int(c.ranks.size()); k++)
            if (student::ring_chunk_begin(c.n, int(c.ranks.size()), k) != chunk_begin(c.n, int(c.ranks.size()), k))
                fail(case_text(c) + ": ring_chunk_begin gives other chunks than the header's",
                     "make task 2 pass first");
        check_ring(c);
    }
}

// ---- task 4: a data-parallel step --------------------------------------------------------------
// What train_step does before the micro-batches: zeroed gradients, the rows, the global scale.
void begin_step(pt::TransformerStage& stage, const pt::Batch& rows, int first_microbatch, int64_t global_targets) {
    stage.zero_grads();
    stage.begin_step(&rows, 2, first_microbatch, 0, 1.0f / float(global_targets));
}

void task_data_parallel() {
    const int D = 3, B = 6;   // D replicas of the whole model, 2 rows each; D = 3: the order shows
    const lab::Data& d = tiny_data();
    pt::Batch batch = lab::batch_of(d, B);
    int64_t targets = batch.num_targets();
    // The reference: one device, the 6 rows as 3 micro-batches, whose gradients add up in the layers.
    lab::Stages one = lab::make_stages(d.cfg, 1);
    begin_step(*one.stages[0], batch, 0, targets);
    for (int mb = 0; mb < D; mb++) one.stages[0]->forward(mb, 0);
    for (int mb = 0; mb < D; mb++) one.stages[0]->backward(mb, 0);
    // Yours: replica r computes global micro-batch r (its dropout masks too), then your all-reduce
    // sums every layer's gradients over the replicas {0, 1, 2}.
    lab::Stages dp = lab::make_stages(d.cfg, 1, 1, pt::Recompute::none, D);
    std::vector<pt::Batch> rows;
    for (int r = 0; r < D; r++) rows.push_back(batch.slice(2 * r, 2));
    for (int r = 0; r < D; r++) {
        begin_step(*dp.stages[size_t(r)], rows[size_t(r)], r, targets);
        dp.stages[size_t(r)]->forward(0, 0);
        dp.stages[size_t(r)]->backward(0, 0);
    }
    std::vector<pt::Layer*> layers = dp.stages[0]->layers();
    std::vector<std::vector<float>> grads(D);
    for (size_t li = 0; li < layers.size(); li++) {
        for (int r = 0; r < D; r++) {
            pt::Buf& g = dp.stages[size_t(r)]->layers()[li]->grads;
            grads[size_t(r)].assign(g.data(), g.data() + g.size());
        }
        Run run = run_allreduce(student::allreduce_fixed, grads, {0, 1, 2});
        std::string error = first_error(run);
        if (!error.empty())
            fail("the replicas' gradients of layer " + std::to_string(li) + ": " + error, kTimedOutFixed);
        const pt::Layer& ref = *one.stages[0]->layers()[li];
        for (int r : {0, 1, 2})   // the root first: is the sum right, then did every replica get it
            for (const pt::ParamInfo& pi : ref.params_info) {
                const float* yours = grads[size_t(r)].data() + pi.offset;
                std::string diff =
                    first_difference(yours, ref.grads.data() + pi.offset, pi.numel,
                                     pi.shape.size() == 2 ? size_t(pi.shape[1]) : 1, "the gradient of " + pi.name);
                if (diff.empty()) continue;
                std::string what =
                    "3 replicas, your allreduce_fixed over {0, 1, 2}: replica " + std::to_string(r) + "'s " + diff;
                const float* own = dp.stages[size_t(r)]->layers()[li]->grads.data() + pi.offset;
                if (r > 0 && std::memcmp(yours, own, pi.numel * sizeof(float)) == 0)
                    fail(what + "\nreplica " + std::to_string(r) + " still holds its own gradient",
                         "the root never sent the sum back: every replica must end with the summed gradient");
                if (r > 0 && std::memcmp(yours, grads[0].data() + pi.offset, pi.numel * sizeof(float)) != 0)
                    fail(what + "\nreplica 0 (the root) has one device's bits, replica " + std::to_string(r) + " not",
                         "ranks disagree: the replicas would drift apart step after step; every rank receives the "
                         "root's sum");
                fail(what,
                     "one device adds micro-batch 0's gradient, then 1's, then 2's: ((g0 + g1) + g2); the root "
                     "must add the replicas in the order of `ranks`, whichever is ready first");
            }
    }
}

// ---- the deliverable: fixed order against ring --------------------------------------------------
int bench() {
    const int D = 4;
    const std::size_t n = std::size_t(1) << 20;
    std::vector<int> ranks = {0, 1, 2, 3};
    std::vector<std::vector<float>> x = inputs(D, n, 1);
    std::printf("all-reduce of n = %zu floats (%zu MB) over D = %d threads; best of 5 runs each\n\n", n, n * 4 >> 20,
                D);
    std::printf("| all-reduce | busiest rank sends (floats) | formula | time (ms) |\n| --- | --- | --- | --- |\n");
    double best[2] = {1e9, 1e9};
    const char* names[2] = {"fixed order", "ring"};
    const char* formulas[2] = {"root: (D-1) n = ", "each: 2 (D-1)/D n = "};
    std::size_t formula[2] = {(D - 1) * n, 2 * (D - 1) * n / D}, busiest[2] = {0, 0};
    AllReduce fns[2] = {student::allreduce_fixed, student::allreduce_ring};
    for (int rep = 0; rep < 5; rep++)
        for (int k = 0; k < 2; k++) {
            std::vector<std::vector<float>> y = x;
            Run run;
            try {
                run = run_allreduce(fns[k], y, ranks, 30);
            } catch (const std::exception& e) {
                std::printf("%s: %s\n", names[k], printable(e.what()).c_str());
                return 1;
            }
            std::string error = first_error(run);
            if (!error.empty()) return std::printf("%s: %s\n", names[k], printable(error).c_str()), 1;
            best[k] = std::min(best[k], run.seconds);
            busiest[k] = *std::max_element(run.sent.begin(), run.sent.end());
        }
    for (int k = 0; k < 2; k++)
        std::printf("| %s | %zu | %s%zu | %.2f |\n", names[k], busiest[k], formulas[k], formula[k], best[k] * 1e3);
    std::printf(
        "\nfixed / ring: measured %.2f, formula (busiest rank's traffic) D/2 = %.2f. %u cores for %d threads.\n",
        best[0] / best[1], D / 2.0, std::thread::hardware_concurrency(), D);
    return 0;
}

}   // namespace

int main(int argc, char** argv) {
    if (argc == 2 && std::string(argv[1]) == "--bench") return bench();
    Lab lab{"08", "data parallelism: a fixed-order all-reduce, then a ring", "labs/08_allreduce/allreduce.cpp", 1, {}};
    lab.tasks.push_back(
        {"allreduce_fixed: every rank holds ((x[ranks[0]] + x[ranks[1]]) + ...) bit for bit; D = 2, "
         "3, 4, lists out of rank order, groups of a larger world, n = 1, 2, 5, 10, 1001, 4099",
         "the serial sum in the order of `ranks`, written in the check", task_fixed,
         "a rank waits for a message nobody sends: the Comm's receive has a 2 s deadline, so a "
         "loop that never ends?",
         5});
    lab.tasks.push_back(
        {"ring_chunk_begin: n floats in D chunks, the first n % D one float longer (D 1-7, n 0-30 "
         "and more)",
         "c * (n / D) + min(c, n % D)", task_chunks});
    lab.tasks.push_back(
        {"allreduce_ring: every rank holds the ring order's sum bit for bit, within 1e-6 of the "
         "fixed order's, sending at most 2 (D - 1) ceil(n / D) floats",
         "the ring's order written serially in the check (chunk c summed from position c)", task_ring,
         "a rank waits for a message nobody sends: the Comm's receive has a 2 s deadline, so a "
         "loop that never ends?",
         5});
    lab.tasks.push_back(
        {"data parallelism: 3 replicas of the tiny model, a micro-batch each, gradients summed by "
         "your allreduce_fixed, have one device's bits (3 micro-batches)",
         "one device accumulating the same 3 micro-batches", task_data_parallel,
         "a rank waits for a message nobody sends", 10});
    return run(lab, argc, argv);
}
