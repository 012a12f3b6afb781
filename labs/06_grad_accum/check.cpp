// labs/06_grad_accum/check.cpp — lab 06's check: scripts/lab.sh check 06 (or build/lab_06).
//
// References, none of them your code: one big batch (M = 1) on one device, and the lesson's
// pt::train_step on the same stages (the same sums in the same order: the bits to match), with
// each data-parallel replica on one device for the D = 2 task. Every step runs on threads, a rank
// each, as tutorials/common.hpp's step_on_threads does; the step under test is yours.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "labs/06_grad_accum/train_step.hpp"
#include "labs/pipeline_check.hpp"

using namespace labcheck;

namespace {

constexpr int kB = 12;   // rows of the global batch (32 tokens each)
constexpr int kStep = 2;   // the optimizer step: part of the dropout key
constexpr float kStale = 0.25f;   // what every gradient holds when a step begins (a previous step's leftovers)

// 12 rows of the corpus, with the targets evened out between rows 0-5 and 6-11 (a few ignored),
// so that the two replicas of D = 2 hold the same number: a replica that scales by its own
// targets then gets exactly D times the gradient, a mistake the check can name.
const pt::Batch& global_batch() {
    static const pt::Batch b = [] {
        pt::Batch b = lab::batch_of(tiny_data(), kB);
        size_t half = b.targets.size() / 2;
        auto count = [&](size_t from, size_t to) {
            return std::count_if(b.targets.begin() + long(from), b.targets.begin() + long(to),
                                 [](int32_t t) { return t != pt::kIgnore; });
        };
        long extra = count(0, half) - count(half, b.targets.size());
        size_t from = extra > 0 ? 0 : half;   // drop the extra targets of the fuller half, from its end
        for (size_t i = from + half; i-- > from && extra != 0;)
            if (b.targets[i] != pt::kIgnore) b.targets[i] = pt::kIgnore, extra += extra > 0 ? -1 : 1;
        return b;
    }();
    return b;
}
int64_t targets() { return global_batch().num_targets(); }

using StepFn = std::function<pt::StepOutcome(pp::Pipeline&, pp::Comm&, pt::TransformerStage&, pt::Optimizer&,
                                             const pt::ModelConfig&, const pt::RankPlace&, const pt::Batch&, int,
                                             const pt::Update&)>;
const StepFn kYours = student::train_step;
const StepFn kLesson = [](pp::Pipeline& pipe, pp::Comm& comm, pt::TransformerStage& stage, pt::Optimizer& opt,
                          const pt::ModelConfig& cfg, const pt::RankPlace& at, const pt::Batch& b, int M,
                          const pt::Update& u) { return pt::train_step(pipe, comm, stage, opt, cfg, at, b, M, u); };

// A step's stages (P ranks x D replicas, every one initialized from seed 1) and what each rank returned.
struct Run {
    lab::Stages m;
    std::vector<double> loss_sum;   // [rank]
};

// One step of `step` (yours or the lesson's) on P x D threads, 1F1B with M micro-batches per
// replica; the gradients hold kStale everywhere when it begins.
Run step_on_threads(const StepFn& step, int P, int D, int M, float dropout, bool apply) {
    Run r{lab::make_stages(tiny_data().cfg, P, 1, pt::Recompute::none, D, dropout), std::vector<double>(size_t(P * D))};
    for (auto& s : r.m.stages)
        for (pt::Layer* l : s->layers()) std::fill(l->grads.data(), l->grads.data() + l->grads.size(), kStale);
    pp::Schedule s = pp::one_f_one_b(P, M);
    pt::ThreadWorld world(P * D, 10.0);
    pt::run_ranks(world, [&](int rank) {
        pt::ThreadComm comm(world, rank);
        pt::RankPlace at{P, D, rank % P, rank / P};
        pp::Pipeline pipe(s, 1, *r.m.stages[size_t(rank)], comm, at.p, at.pipeline_group(), pp::plan_for(s, 1));
        pt::Update u;
        u.step = kStep, u.apply = apply;
        r.loss_sum[size_t(rank)] =
            step(pipe, comm, *r.m.stages[size_t(rank)], *r.m.optim[size_t(rank)], r.m.cfg, at, global_batch(), M, u)
                .loss_sum;
    });
    return r;
}

std::string sizes(int P, int D, int M) {
    return "P = " + std::to_string(P) + ", D = " + std::to_string(D) + ", M = " + std::to_string(M);
}

// ---- gradients: how far yours are, and the likely mistake -------------------------------------------
struct Compared {
    std::string first;   // the first element that differs, "" when every bit is the same
    double rel = 0;   // |yours - expected| / |expected| over every gradient of the replica
    double ratio = 0;   // |yours| / |expected|
    double stale = 0;   // the share of elements where yours - expected is what kStale becomes in the sum
};

// Gradients left from before the step come out of the sum as kStale times D (the replicas), or 2D
// for the word embedding's two tied copies.
bool is_stale(double yours_minus_expected, int D) {
    double k = yours_minus_expected / (double(kStale) * D);
    return std::fabs(k - 1) < 1e-3 || std::fabs(k - 2) < 1e-3;
}

Compared compare_grads(const lab::Stages& yours, const lab::Stages& expected, int d) {
    std::vector<pt::Layer*> a = yours.layers(d), b = expected.layers(d);
    Compared c;
    double diff = 0, ny = 0, ne = 0, stale = 0, n = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); i++)
        for (const pt::ParamInfo& pi : a[i]->params_info) {
            const float *y = a[i]->grads.data() + pi.offset, *e = b[i]->grads.data() + pi.offset;
            if (c.first.empty())
                c.first = first_difference(y, e, pi.numel, pi.shape.size() == 2 ? size_t(pi.shape[1]) : 1,
                                           "the gradient of " + pi.name);
            for (size_t j = 0; j < pi.numel; j++)
                diff += (double(y[j]) - e[j]) * (double(y[j]) - e[j]), ny += double(y[j]) * y[j],
                    ne += double(e[j]) * e[j], stale += is_stale(double(y[j]) - e[j], yours.D), n++;
        }
    c.rel = std::sqrt(diff / ne), c.ratio = std::sqrt(ny / ne), c.stale = stale / n;
    return c;
}

std::string sci(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2e", x);
    return buf;
}

// The hint for gradients that differ from the reference's, from the known mistakes' signatures.
std::string gradient_hint(const Compared& c, int D, int M) {
    double G = double(targets());
    if (std::fabs(c.ratio / G - 1) < 0.05)
        return "your gradients are about " + std::to_string(targets()) + " times too large (the batch's targets): "
               "the loss must be scaled: begin_step's loss scale is 1 / (the GLOBAL batch's targets), not 1";
    if (D > 1 && std::fabs(c.ratio / D - 1) < 1e-3)
        return "yours are D = " + std::to_string(D) + " times too large: scaled by the replica's own targets; "
               "divide by the GLOBAL batch's targets (global.num_targets()): the replicas' shares add up to its mean";
    if (std::fabs(c.ratio / M - 1) < 0.05 || std::fabs(c.ratio / (D * M) - 1) < 0.05)
        return "yours are about " + std::to_string(c.ratio < M + 0.5 ? M : D * M) + " times too large: scaled by "
               "a micro-batch's share of the targets; the mean of the micro-batches' means is not the batch's "
               "mean: divide every micro-batch by the GLOBAL batch's targets";
    if (c.stale > 0.99)
        return "yours hold what the gradients held when the step began (" + num(kStale) + " each) on top: "
               "zero the gradients once per step, before the pipeline runs (stage.zero_grads())";
    if (c.ratio == 0) return "your gradients are all zero: zero them before pipe.run_step(), not after";
    return "zero the gradients once, begin_step with the scale 1 / (the global batch's targets), run the pipeline, "
           "then pt::sum_gradients: in that order";
}

// ---- each replica's loss: its rows and its micro-batches' indices ---------------------------------
// The loss sum of replica d's last stage (its micro-batches' losses, before any sum over ranks).
double head_loss(const Run& r, int d) { return r.m.stages[size_t(d * r.m.P + r.m.P - 1)]->loss_sum(); }

// Fails when a replica's last stage summed another loss than the lesson's: other rows, or other
// dropout masks (told apart by a rerun with dropout off, where only the rows matter).
void check_replica_losses(const Run& yours, const Run& lesson, int M) {
    int P = yours.m.P, D = yours.m.D;
    for (int d = 0; d < D; d++) {
        double y = head_loss(yours, d), e = head_loss(lesson, d);
        if (y == e) continue;
        std::string differs = sizes(P, D, M) + ": replica " + std::to_string(d) + "'s last stage summed the loss " +
                              num(y) + ", the lesson's " + num(e) + " (over " +
                              std::to_string(lesson.m.stages[size_t(d * P + P - 1)]->num_targets()) + " targets)";
        Run y0 = step_on_threads(kYours, P, D, M, 0.0f, false), e0 = step_on_threads(kLesson, P, D, M, 0.0f, false);
        if (head_loss(y0, d) == head_loss(e0, d))
            fail(differs + "\nwith dropout off yours matches: your micro-batches drew other dropout masks",
                 "replica d's micro-batches are the global micro-batches d*M .. d*M + M - 1: begin_step's "
                 "first_microbatch is d*M (with the step, it keys every dropout mask)");
        fail(differs,
             "replica d takes the rows d*B/D .. (d+1)*B/D - 1 of the global batch: "
             "global.slice(d * rows, rows) with rows = B / D, and rows / M per micro-batch");
    }
}

// ---- the tasks -------------------------------------------------------------------------------------
// Task 1: M = 4 on one rank against one big batch (within rounding) and against the lesson's step (bits).
void task_accumulation() {
    const int M = 4;
    Run big = step_on_threads(kLesson, 1, 1, 1, 0.0f,
                              false);   // dropout off: the big batch is ONE micro-batch (one mask key)
    Run yours = step_on_threads(kYours, 1, 1, M, 0.0f, false);
    Compared c = compare_grads(yours.m, big.m, 0);
    if (c.rel > 1e-6)
        fail(sizes(1, 1, M) + ": your gradients differ from one big batch's (M = 1) by " + sci(c.rel) +
                 " (relative; float rounding allows 1e-6)\n" + c.first,
             gradient_hint(c, 1, M));
    double loss = yours.loss_sum[0] / double(targets()), expected = big.loss_sum[0] / double(targets());
    if (std::fabs(loss - expected) > 1e-6 * std::fabs(expected))
        fail(sizes(1, 1, M) + ": your loss sum / the batch's targets is " + num(loss) + ", one big batch's mean loss " +
                 num(expected),
             "return the loss SUM of every micro-batch: pt::global_loss_sum(comm, stage, place)");
    Run lesson = step_on_threads(kLesson, 1, 1, M, 0.0f, false);
    if (std::string d = compare_grads(yours.m, lesson.m, 0).first; !d.empty())
        fail(sizes(1, 1, M) + ": " + d + " (the lesson's step gets other bits)",
             "scale each micro-batch's loss through begin_step, not the gradients afterwards: the same value "
             "reached by another order of float operations has other bits");
    Run yours_updated = step_on_threads(kYours, 1, 1, M, 0.0f, true),
        lesson_updated = step_on_threads(kLesson, 1, 1, M, 0.0f, true);
    if (std::string d = first_parameter_difference(yours_updated.m, lesson_updated.m); !d.empty())
        fail(sizes(1, 1, M) + ", after the update: " + d,
             "call pt::update_weights(comm, stage, opt, cfg, place, update) after pt::sum_gradients when update.apply");
}

// Task 2: every rank returns the global loss sum (P = 2, D = 2: the loss lives on two of four ranks).
void task_loss() {
    const int P = 2, D = 2, M = 3;
    Run yours = step_on_threads(kYours, P, D, M, 0.1f, false), lesson = step_on_threads(kLesson, P, D, M, 0.1f, false);
    check_replica_losses(yours, lesson, M);
    double expected = lesson.loss_sum[0];
    for (int rank = 0; rank < P * D; rank++) {
        double y = yours.loss_sum[size_t(rank)];
        if (y == expected) continue;
        std::string differs = sizes(P, D, M) + ", rank " + std::to_string(rank) + " (pipeline rank " +
                              std::to_string(rank % P) + " of replica " + std::to_string(rank / P) + ") returned " +
                              num(y) + ", the global loss sum is " + num(expected) + " (mean " +
                              num(expected / double(targets())) + " over " + std::to_string(targets()) + " targets)";
        if (y == yours.m.stages[size_t(rank)]->loss_sum())
            fail(differs,
                 "that is this rank's own stage's loss: only the last stage of each replica has one; "
                 "pt::global_loss_sum(comm, stage, place) sums every rank's");
        if (std::fabs(y * double(targets()) - expected) < 1e-6 * std::fabs(expected))
            fail(differs, "that is the mean: StepOutcome.loss_sum is the SUM (the caller divides by the targets)");
        fail(differs, "return pt::global_loss_sum(comm, stage, place) as loss_sum, on every rank");
    }
}

// Task 3: D = 2 replicas of P = 2 stages against 2 replicas of one device each, bit for bit.
void task_data_parallel() {
    const int P = 2, D = 2, M = 3;
    Run yours = step_on_threads(kYours, P, D, M, 0.1f, false), lesson = step_on_threads(kLesson, P, D, M, 0.1f, false);
    check_replica_losses(yours, lesson, M);
    Run one_device = step_on_threads(kLesson, 1, D, M, 0.1f, false);
    for (int d = 0; d < D; d++) {
        Compared c = compare_grads(yours.m, one_device.m, d);
        if (!c.first.empty())
            fail(sizes(P, D, M) + ", replica " + std::to_string(d) + " after the gradient sum: " + c.first +
                     " (relative difference " + sci(c.rel) + ")",
                 gradient_hint(c, D, M));
    }
    Run yours_updated = step_on_threads(kYours, P, D, M, 0.1f, true);
    Run one_updated = step_on_threads(kLesson, 1, D, M, 0.1f, true);
    for (int d = 0; d < D; d++) {
        std::vector<pt::Layer*> y = yours_updated.m.layers(d), e = one_updated.m.layers(d);
        for (size_t i = 0; i < y.size(); i++)
            for (const pt::ParamInfo& pi : y[i]->params_info) {
                std::string diff = first_difference(y[i]->params.data() + pi.offset, e[i]->params.data() + pi.offset,
                                                    pi.numel, pi.shape.size() == 2 ? size_t(pi.shape[1]) : 1, pi.name);
                if (!diff.empty())
                    fail(sizes(P, D, M) + ", replica " + std::to_string(d) + " after the update: " + diff,
                         "call pt::update_weights when update.apply, after pt::sum_gradients (every replica then "
                         "applies the same summed gradient)");
            }
    }
}

}   // namespace

int main(int argc, char** argv) {
    Lab lab{"06", "gradient accumulation and loss scaling", "labs/06_grad_accum/train_step.cpp", 1, {}};
    lab.tasks.push_back({"accumulation: M = 4 micro-batches on one rank equal one big batch (and the lesson's bits)",
                         "one big batch (M = 1) on one device within 1e-6; pt::train_step with M = 4 bit for bit",
                         task_accumulation, "a rank waits forever: does every rank call pipe.run_step() once?", 20});
    lab.tasks.push_back(
        {"loss: every rank returns the global loss sum (P = 2 x D = 2, M = 3, dropout 0.1)",
         "pt::train_step on the same stages", task_loss,
         "a rank waits forever: every rank must call each of the three phases (they talk to the others)", 20});
    lab.tasks.push_back(
        {"data parallelism: D = 2 replicas x P = 2 stages equal each replica on one device, bit for bit",
         "pt::train_step with D = 2 replicas of one device each (P = 1), dropout 0.1", task_data_parallel,
         "a rank waits forever: every rank must call each of the three phases", 20});
    return run(lab, argc, argv);
}
