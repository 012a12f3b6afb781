// fuzz: max_len=2048 seeds=torch_schedules/*.csv
// PyTorch's schedule CSV (`pipetrain schedule --import F.csv`, `train --schedule-file F.csv`)
// through pt::parse_schedule_csv, which parses it cell by cell and then proves it with
// pp::validate: every micro-batch's F, B (or I then W) once per stage, in an order the transfers
// allow, with sends that do not wait in a buffer. A last byte 'l' or 'v' asks for that placement
// (otherwise inferred). An input that starts with '#' is not a file but choices (generate below):
// a schedule of any shape and order is made from them, written as CSV and read, so that the
// checks reach far more accepted schedules than mutated files do. An accepted schedule must
//   - be written back by schedule_csv and read again as the same schedule, M and V;
//   - simulate to the end (pipeline_lab.hpp), every action once;
//   - run to the end on the executor (pp::Pipeline, one thread a rank, with plan_for's plans) over
//     a transport with NCCL's semantics: a send completes only when its receive is posted, each
//     link FIFO. Every transfer must carry what its producer made, to the stage that needs it.
//     A rank that waits 5 s is a hang: the proof was wrong.
// That last check is the promise of "never a hang" for any file a user hands pipetrain.
#include "tests/fuzz/fuzz_util.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <tuple>

#include "pipeline_lab.hpp"
#include "src/cli/schedule_csv.hpp"
#include "tests/rendezvous_comm.hpp"

namespace {

// What a transfer carries: {1 forward / 2 backward, the producing virtual stage, micro-batch}.
using Payload = std::array<int, 3>;

// One rank's chunks, computing nothing: each action checks that its input came from the stage
// next to it for the same micro-batch, after its own forward, and makes the payload it sends.
class CheckingStage : public pp::Stage {
 public:
    CheckingStage(int rank, const pp::Layout& layout) : rank_(rank), layout_(layout), S_(layout.P * layout.V) {}
    pp::Bytes input_buffer(pp::Op op, int mb, int chunk) override {
        Payload& p = (op == pp::Op::F ? act_in_ : grad_in_)[{mb, chunk}];
        p = {0, -1, -1};
        return {p.data(), sizeof p};
    }
    pp::Bytes forward(int mb, int chunk) override {
        int s = layout_.stage(rank_, chunk);
        if (s > 0) need(act_in_[{mb, chunk}] == Payload{1, s - 1, mb}, "a forward's input is the previous stage's output");
        need(done_.insert({'F', mb, chunk}).second, "one forward per micro-batch and chunk");
        return out(out_, 1, s, mb, chunk, s < S_ - 1);
    }
    pp::Bytes backward_input(int mb, int chunk) override {
        int s = layout_.stage(rank_, chunk);
        need(done_.count({'F', mb, chunk}) == 1, "a backward after its forward");
        if (s < S_ - 1) need(grad_in_[{mb, chunk}] == Payload{2, s + 1, mb}, "a backward's input is the next stage's gradient");
        need(done_.insert({'I', mb, chunk}).second, "one input gradient per micro-batch and chunk");
        return out(dx_, 2, s, mb, chunk, s > 0);
    }
    void backward_weight(int mb, int chunk) override {
        need(done_.count({'I', mb, chunk}) == 1, "a weight gradient after its input gradient");
        need(done_.insert({'W', mb, chunk}).second, "one weight gradient per micro-batch and chunk");
    }
    void sent(pp::Op op, int mb, int chunk) override { (op == pp::Op::F ? out_ : dx_)[{mb, chunk}] = {-7, -7, -7}; }
    size_t actions() const { return done_.size(); }

 private:
    static void need(bool ok, const char* what) {
        if (!ok) throw std::runtime_error(std::string("broken: ") + what);
    }
    pp::Bytes out(std::map<std::pair<int, int>, Payload>& where, int kind, int s, int mb, int chunk, bool sends) {
        Payload& p = where[{mb, chunk}];
        p = {kind, s, mb};
        return sends ? pp::Bytes{p.data(), sizeof p} : pp::Bytes{};
    }
    int rank_;
    pp::Layout layout_;
    int S_;
    std::map<std::pair<int, int>, Payload> act_in_, grad_in_, out_, dx_;
    std::set<std::tuple<char, int, int>> done_;
};

size_t count_actions(const pp::Schedule& s) {
    size_t n = 0;
    for (const auto& actions : s) n += actions.size();
    return n;
}

// Runs one step of `cs` on one thread a rank; the first failure's message, or "".
std::string execute(const pt::CsvSchedule& cs) {
    int P = int(cs.schedule.size());
    pp::Layout layout{P, cs.V, cs.schedule.placement};
    std::vector<pp::Plan> plans = pp::plan_for(cs.schedule, cs.V);
    std::vector<int> ranks(P);
    for (int r = 0; r < P; r++) ranks[r] = r;
    std::vector<size_t> ran(P, 0);
    std::vector<std::string> errors = test::run_unbuffered(P, [&](int r, pp::Comm& comm) {
        CheckingStage stage(r, layout);
        pp::Pipeline(cs.schedule, cs.V, stage, comm, r, ranks, plans).run_step();
        ran[r] = stage.actions();
    });
    size_t total = 0;
    for (int r = 0; r < P; r++) {
        if (!errors[r].empty()) return errors[r];
        total += ran[r];
    }
    // Each action leaves one mark (F, I or W), a full B two (I and W).
    size_t expected = 0;
    for (const auto& actions : cs.schedule)
        for (const pp::Action& a : actions) expected += a.op == pp::Op::B ? 2 : 1;
    return total == expected ? "" : "the executor ran " + std::to_string(total) + " of " + std::to_string(expected) + " actions";
}

// A schedule from the bytes after '#': P (1-4), V (1-2), the placement, M (1-6), whether in one
// global order, then one choice a step among the actions the ranks may take next: in each rank's
// own order, any F; a B, or a BI, after its F; a BW after its BI (a backward split or not, and an
// F&B pair or not, are choices too). In one global order an action also waits for the stage
// whose output it needs, so every rank's inputs exist before it runs (but a send may still wait
// for its receive); otherwise whether the ranks' lists fit together is left to the parser.
// Bytes past the end read as 0.
std::string generate(const uint8_t* data, size_t size) {
    size_t at = 1;
    auto next = [&](size_t n) { return at < size ? size_t(data[at++]) % n : 0; };
    const int P = 1 + int(next(4)), V = 1 + int(next(2));
    pp::Schedule s(static_cast<size_t>(P));
    s.placement = V == 2 && next(2) ? pp::Placement::vee : pp::Placement::loop;
    const int M = 1 + int(next(6)), S = P * V;
    const bool global = next(2);
    const pp::Layout layout{P, V, s.placement};
    std::vector<std::vector<pp::Action>> ready(static_cast<size_t>(P));   // what each rank's own order allows next
    for (int r = 0; r < P; r++)
        for (int c = 0; c < V; c++)
            for (int mb = 0; mb < M; mb++) ready[r].push_back({pp::Op::F, mb, c});
    std::vector<char> made_x(size_t(S) * M, 0), made_dx(size_t(S) * M, 0);   // [stage * M + mb]: outputs, input gradients
    auto inputs_made = [&](int r, const pp::Action& a) {
        int st = layout.stage(r, a.chunk);
        if (a.op == pp::Op::F) return st == 0 || made_x[size_t(st - 1) * M + a.microbatch];
        return a.op == pp::Op::BW || st == S - 1 || made_dx[size_t(st + 1) * M + a.microbatch];
    };
    for (;;) {
        std::vector<std::pair<int, size_t>> can;   // (rank, index in ready)
        for (int r = 0; r < P; r++)
            for (size_t k = 0; k < ready[r].size(); k++)
                if (!global || inputs_made(r, ready[r][k])) can.push_back({r, k});
        if (can.empty()) break;
        auto [r, k] = can[next(can.size())];
        pp::Action a = ready[r][k];
        ready[r].erase(ready[r].begin() + long(k));
        size_t at_stage = size_t(layout.stage(r, a.chunk)) * M + a.microbatch;
        if (a.op == pp::Op::F) made_x[at_stage] = 1, ready[r].push_back({next(2) ? pp::Op::BI : pp::Op::B, a.microbatch, a.chunk});
        if (a.op == pp::Op::B || a.op == pp::Op::BI) made_dx[at_stage] = 1;
        if (a.op == pp::Op::BI) ready[r].push_back({pp::Op::BW, a.microbatch, a.chunk});
        a.overlapped = a.op != pp::Op::F && a.op != pp::Op::BW && !s[r].empty() && s[r].back().op == pp::Op::F &&
                       !s[r].back().overlapped && next(4) == 0;
        s[r].push_back(a);
    }
    return pt::schedule_csv(s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    pt::CsvExpect expect;   // a last byte 'l' or 'v' (not part of the file): --placement loop or v
    if (size > 0 && (data[size - 1] == 'l' || data[size - 1] == 'v')) expect.placement = data[--size] == 'l' ? "loop" : "v";
    const std::string text = size > 0 && data[0] == '#' ? generate(data, size) : fuzz::text(data, size);
    pt::CsvSchedule cs;
    if (!fuzz::parse([&] { cs = pt::parse_schedule_csv(text, "f.csv", expect); })) return 0;
    int P = int(cs.schedule.size());

    pt::CsvSchedule again = pt::parse_schedule_csv(pt::schedule_csv(cs.schedule), "again.csv",
                                                   {P, cs.M, cs.V, cs.schedule.placement == pp::Placement::vee ? "v" : "loop"});
    fuzz::expect(again.schedule == cs.schedule && again.M == cs.M && again.V == cs.V,
                 "a schedule written back reads as the same schedule");

    pp::SimResult sim = pp::simulate(cs.schedule, pp::Costs{}, cs.V);
    size_t computed = 0;
    for (const pp::Event& e : sim.events) computed += !e.comm && e.end >= e.start;
    fuzz::expect(computed == count_actions(cs.schedule) && sim.makespan > 0, "the simulation runs every action once");

    if (P > 16 || count_actions(cs.schedule) > 1024) return 0;   // threads enough
    std::string failed = execute(cs);
    if (!failed.empty()) std::fprintf(stderr, "fuzz: the executor: %s\n", failed.c_str());
    fuzz::expect(failed.empty(), "an accepted schedule runs to the end on the executor, each transfer where it belongs");
    return 0;
}
