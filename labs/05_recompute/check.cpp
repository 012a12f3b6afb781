// labs/05_recompute/check.cpp — lab 05's check: scripts/lab.sh check 05 (or build/lab_05).
//
// References, none of them your code: the lesson's pt::TransformerStage with Recompute::none (it
// keeps every layer's stash from F to B) on layers initialized as yours, one device, every forward
// then every backward; and the check's own runs of the layers (one micro-batch's stash bytes, and
// the known mistaken variant that runs the layers' backward in forward order).
#include <numeric>
#include <random>

#include "labs/05_recompute/recompute_stage.hpp"
#include "labs/pipeline_check.hpp"

using namespace labcheck;

namespace {

// 8 rows of 32 tokens in 4 micro-batches of 2 rows. The step and the first global micro-batch
// index are not 0, so a dropout key that drops either shows.
constexpr int kM = 4, kMbRows = 2;
constexpr uint32_t kStep = 3;
constexpr int kFirstMb = 2;

const char* const kKeyHint =
    "the recomputed forward must draw the same dropout masks: rebuild with the same MicroBatch as the forward "
    "(micro_batch(microbatch): its rows, step and index, the key of every mask)";
const char* const kOrderHint =
    "run the layers' backward_input last layer first: the gradient enters at the chunk's output and each "
    "layer's din is the dout of the layer before it";

const pt::ModelConfig& cfg() { return tiny_data().cfg; }
const pt::Batch& batch() {
    static const pt::Batch b = lab::batch_of(tiny_data(), kM * kMbRows);
    return b;
}
float loss_scale() { return 1.0f / float(batch().num_targets()); }
size_t activation_numel() { return size_t(kMbRows) * kTokens * cfg().hidden_size; }   // (B, T, C)

pt::RunOptions options(float dropout) {
    pt::RunOptions opt;
    opt.seed = 1, opt.hidden_dropout = opt.attention_dropout = dropout;
    return opt;
}

std::string layer_list(const std::vector<int>& ids) {
    std::string s;
    for (int i : ids) s += (s.empty() ? "" : ", ") + std::to_string(i);
    return "layers [" + s + "]";
}

// A chunk of fresh layers of the tiny model, initialized as every lab::Stages is (seed 1, by name),
// and your stage over them.
struct Yours {
    std::vector<std::unique_ptr<pt::Layer>> owned;
    std::unique_ptr<student::RecomputeStage> stage;

    Yours(const std::vector<int>& ids, float dropout) {
        std::vector<pt::Layer*> layers;
        for (int i : ids) {
            owned.push_back(pt::make_layer(cfg(), i));
            owned.back()->init(1, 0.02f);
            layers.push_back(owned.back().get());
        }
        stage = std::make_unique<student::RecomputeStage>(layers, cfg(), options(dropout));
        stage->begin_step(&batch(), kMbRows, kFirstMb, kStep, loss_scale());
    }
};

// The lesson's stashing stage on the same layers.
std::unique_ptr<pt::TransformerStage> stashing(const std::vector<int>& ids, float dropout) {
    auto s = lab::make_stage(cfg(), {ids}, pt::Recompute::none, dropout);
    s->begin_step(&batch(), kMbRows, kFirstMb, kStep, loss_scale());
    return s;
}

// What a stage received (a made-up activation or gradient of micro-batch m), the same for every stage.
std::vector<float> received(int m, bool gradient) {
    std::mt19937 rng(uint32_t(17 + 2 * m + gradient));
    std::normal_distribution<float> normal(0.0f, gradient ? 0.01f : 1.0f);
    std::vector<float> v(activation_numel());
    for (float& x : v) x = normal(rng);
    return v;
}

void receive(pp::Stage& s, pp::Op op, int m) {
    pp::Bytes b = s.input_buffer(op, m, 0);
    std::vector<float> v = received(m, op != pp::Op::F);
    std::memcpy(b.data, v.data(), std::min(b.bytes, v.size() * sizeof(float)));
}

// What an action returned, copied before the stage may free it (as the executor's send would).
std::vector<float> take(pp::Stage& s, pp::Op op, int m, pp::Bytes b) {
    std::vector<float> v(b.bytes / sizeof(float));
    if (b.bytes) std::memcpy(v.data(), b.data, v.size() * sizeof(float));
    s.sent(op, m, 0);
    return v;
}

std::string compare_sent(const std::vector<float>& yours, const std::vector<float>& expected, const std::string& what) {
    if (yours.size() != expected.size())
        return what + ": yours has " + std::to_string(yours.size()) + " floats, expected " +
               std::to_string(expected.size());
    return first_difference(yours.data(), expected.data(), yours.size(), size_t(cfg().hidden_size), what + " (B*T, C)");
}

std::string first_grad_difference(const std::vector<pt::Layer*>& yours, const std::vector<pt::Layer*>& expected) {
    for (size_t i = 0; i < yours.size() && i < expected.size(); i++)
        for (const pt::ParamInfo& pi : yours[i]->params_info) {
            std::string d =
                first_difference(yours[i]->grads.data() + pi.offset, expected[i]->grads.data() + pi.offset, pi.numel,
                                 pi.shape.size() == 2 ? size_t(pi.shape[1]) : 1, "the gradient of " + pi.name);
            if (!d.empty()) return d;
        }
    return "";
}

// ---- task 1: the forward ---------------------------------------------------------------------------
// "" when your forward sends the stashing stage's bits for every micro-batch; else the first difference.
std::string forward_difference(const std::vector<int>& ids, float dropout) {
    Yours y(ids, dropout);
    auto ref = stashing(ids, dropout);
    for (int m = 0; m < kM; m++) {
        if (ids[0] != 0) receive(*y.stage, pp::Op::F, m), receive(*ref, pp::Op::F, m);
        std::vector<float> yours = take(*y.stage, pp::Op::F, m, y.stage->forward(m, 0));
        std::vector<float> expected = take(*ref, pp::Op::F, m, ref->forward(m, 0));
        std::string d = compare_sent(yours, expected, "micro-batch " + std::to_string(m) + "'s output");
        if (!d.empty()) return layer_list(ids) + ": " + d;
    }
    return "";
}

void check_forward(const std::vector<int>& ids) {
    std::string d = forward_difference(ids, 0.1f);
    if (d.empty()) return;
    if (forward_difference(ids, 0.0f).empty())
        fail(d + "\nwith dropout off yours matches: the dropout masks differ",
             "set mb.step = step_ and mb.index = first_mb_ + microbatch in micro_batch: (step, index) is the key "
             "of every dropout mask");
    fail(d,
         "run every layer in order, each one's output the next one's input (the first reads f.input, null on "
         "the embedding's chunk), on rows [m * mb_rows, (m + 1) * mb_rows) of the batch");
}

const std::vector<int> kEmbeddingChunk = {0, 1, 2}, kMiddleChunk = {3, 4};   // no input; a received activation

void task_forward() {
    check_forward(kEmbeddingChunk);
    check_forward(kMiddleChunk);
}

// ---- task 2: the backward ----------------------------------------------------------------------------
struct Backward {
    std::string differs;
    std::vector<float> din0;   // micro-batch 0's input gradient, as sent
};

// Every forward, then each micro-batch's backward_input and backward_weight (one device), yours
// against the stashing stage: the input gradients sent, then every weight gradient.
Backward backward_difference(const std::vector<int>& ids, float dropout) {
    Yours y(ids, dropout);
    auto ref = stashing(ids, dropout);
    for (int m = 0; m < kM; m++) {
        receive(*y.stage, pp::Op::F, m), receive(*ref, pp::Op::F, m);
        take(*y.stage, pp::Op::F, m, y.stage->forward(m, 0)), take(*ref, pp::Op::F, m, ref->forward(m, 0));
    }
    Backward out;
    for (int m = 0; m < kM && out.differs.empty(); m++) {
        receive(*y.stage, pp::Op::BI, m), receive(*ref, pp::Op::BI, m);
        std::vector<float> yours = take(*y.stage, pp::Op::BI, m, y.stage->backward_input(m, 0));
        std::vector<float> expected = take(*ref, pp::Op::BI, m, ref->backward_input(m, 0));
        if (m == 0) out.din0 = yours;
        out.differs = compare_sent(yours, expected, "micro-batch " + std::to_string(m) + "'s input gradient");
        y.stage->backward_weight(m, 0), ref->backward_weight(m, 0);
    }
    if (out.differs.empty()) out.differs = first_grad_difference(y.stage->layers(), ref->layers());
    if (!out.differs.empty()) out.differs = layer_list(ids) + ": " + out.differs;
    return out;
}

// The check's own forward and backward_input of micro-batch 0 over fresh layers `ids` (blocks only:
// no embedding, no head): returns the input gradient; *stash_bytes = {the stash after the forward,
// after the backward_input}.
// With forward_order, the known mistake: the layers' backward_input run first layer first.
std::vector<float> own_backward(const std::vector<int>& ids, float dropout, bool forward_order,
                                std::pair<size_t, size_t>* stash_bytes = nullptr) {
    Yours fresh(ids, dropout);   // its layers only: nothing of your code runs here
    pt::RunOptions opt = options(dropout);
    pt::MicroBatch mb = batch().rows(0, kMbRows);
    mb.step = kStep, mb.index = kFirstMb, mb.loss_scale = loss_scale();
    std::vector<float> x = received(0, false), g = received(0, true);
    std::vector<std::unique_ptr<pt::Stash>> stash;
    pt::Buf in, out, dout, din;   // (B, T, C) each
    in.assign(x.data(), x.size());
    for (auto& l : fresh.owned) {
        out.resize(activation_numel());
        stash.push_back(l->forward(out.data(), in.data(), mb, opt));
        in.swap(out);
    }
    auto bytes = [&] {
        size_t sum = 0;
        for (auto& s : stash) sum += s->bytes();
        return sum;
    };
    if (stash_bytes) stash_bytes->first = bytes();
    dout.assign(g.data(), g.size());
    size_t n = fresh.owned.size();
    for (size_t k = 0; k < n; k++) {
        size_t i = forward_order ? k : n - 1 - k;
        din.zeros(activation_numel());
        fresh.owned[i]->backward_input(din.data(), dout.data(), *stash[i], mb, opt);
        dout.swap(din);
    }
    if (stash_bytes) stash_bytes->second = bytes();
    return dout.host();
}

void check_backward_alone(const std::vector<int>& ids) {
    Backward b = backward_difference(ids, 0.1f);
    if (b.differs.empty()) return;
    if (b.din0 == own_backward(ids, 0.1f, true))
        fail(b.differs + "\nyours is what the layers' backward gives in FORWARD order", kOrderHint);
    if (backward_difference(ids, 0.0f).differs.empty())
        fail(b.differs + "\nwith dropout off yours matches: your recompute drew other dropout masks than the forward",
             kKeyHint);
    fail(b.differs,
         "rebuild the stash when there is none (run_layers on f.input), then backward_input last layer "
         "first, each din the next dout; backward_weight on that same stash");
}

// One step of `s` on threads, every rank your RecomputeStage over its layers (split as the lesson
// splits them); returns the layers, model order, holding their gradients.
std::vector<std::unique_ptr<pt::Layer>> pipeline_step(const pp::Schedule& s, float dropout) {
    int P = int(s.size());
    std::vector<std::vector<std::vector<int>>> split = lab::split_by_flops(cfg(), P);
    std::vector<std::unique_ptr<Yours>> ranks;
    std::vector<std::unique_ptr<pt::Layer>> layers;
    for (int r = 0; r < P; r++) ranks.push_back(std::make_unique<Yours>(split[r][0], dropout));
    pt::ThreadWorld world(P, 10.0);
    pt::run_ranks(world, [&](int rank) {
        pt::ThreadComm comm(world, rank);
        std::vector<int> group(P);
        std::iota(group.begin(), group.end(), 0);
        pp::Pipeline pipe(s, 1, *ranks[rank]->stage, comm, rank, group, pp::plan_for(s, 1));
        pipe.run_step();
    });
    for (auto& r : ranks)
        for (auto& l : r->owned) layers.push_back(std::move(l));
    return layers;
}

void check_pipeline(const pp::Schedule& s, const std::string& name) {
    const float dropout = 0.1f;
    std::vector<std::unique_ptr<pt::Layer>> yours = pipeline_step(s, dropout);
    std::vector<int> all(size_t(pt::num_model_layers(cfg())));
    std::iota(all.begin(), all.end(), 0);
    auto ref = stashing(all, dropout);   // one device: every F, then every B, in micro-batch order
    for (int m = 0; m < kM; m++) ref->forward(m, 0);
    for (int m = 0; m < kM; m++) ref->backward(m, 0);
    std::vector<pt::Layer*> mine;
    for (auto& l : yours) mine.push_back(l.get());
    std::string d = first_grad_difference(mine, ref->layers());
    if (!d.empty())
        fail(name + ", after the step: " + d,
             "the middle chunk passes alone, so look at the ends: the head's chunk receives no gradient (dout null) "
             "and sends its loss nowhere; the embedding's chunk has no input and returns no input gradient");
}

void task_backward() {
    if (!forward_difference(kEmbeddingChunk, 0.1f).empty() || !forward_difference(kMiddleChunk, 0.1f).empty())
        needs_task(1);
    check_backward_alone({2, 3});
    check_pipeline(pp::one_f_one_b(3, kM), "1F1B on 3 threads, M = 4");
    check_pipeline(pp::zero_bubble_h1(2, kM), "ZB-H1 on 2 threads, M = 4 (BI and BW apart)");
}

// ---- task 3: memory ----------------------------------------------------------------------------------
void task_memory() {
    const std::vector<int> ids = {1, 2, 3};
    std::pair<size_t, size_t> stash;   // one micro-batch's, after its forward and after its backward_input
    own_backward(ids, 0.1f, false, &stash);
    size_t one = stash.second;
    std::string stashing_note = "a stashing stage keeps " + lab::kb(double(stash.first)) + " per micro-batch, " +
                                lab::kb(double(kM * stash.first)) + " after F" + std::to_string(kM - 1);
    Yours y(ids, 0.1f);
    for (int m = 0; m < kM; m++) {   // GPipe on one device: every F, then BI and BW of each micro-batch
        receive(*y.stage, pp::Op::F, m);
        take(*y.stage, pp::Op::F, m, y.stage->forward(m, 0));
        if (size_t held = y.stage->held_stash_bytes(); held > 0)
            fail(layer_list(ids) + ", after F" + std::to_string(m) + ": your stage holds " + lab::kb(double(held)) +
                     " of stashes; keeping only the input it holds none (" + stashing_note + ")",
                 "forward must end with no stash: clear f.stash once the output is computed (keep only f.input); "
                 "backward_input rebuilds it");
    }
    for (int m = 0; m < kM; m++) {
        receive(*y.stage, pp::Op::BI, m);
        take(*y.stage, pp::Op::BI, m, y.stage->backward_input(m, 0));
        if (size_t held = y.stage->held_stash_bytes(); held > one)
            fail(layer_list(ids) + ", after BI" + std::to_string(m) + ": your stage holds " + lab::kb(double(held)) +
                     " of stashes, the rebuilt stash of micro-batch " + std::to_string(m) + " alone is " +
                     lab::kb(double(one)),
                 "only the micro-batch in its backward may have a stash: rebuild that one alone");
        y.stage->backward_weight(m, 0);
        if (size_t held = y.stage->held_stash_bytes(); held > 0)
            fail(layer_list(ids) + ", after BW" + std::to_string(m) + ": your stage still holds " +
                     lab::kb(double(held)) + " of stashes",
                 "release(microbatch) at the end of backward_weight: a finished micro-batch's stash is garbage");
    }
}

}   // namespace

int main(int argc, char** argv) {
    Lab lab{"05", "activation recomputation", "labs/05_recompute/recompute_stage.cpp", 1, {}};
    lab.tasks.push_back({"forward: each micro-batch's output has the stashing stage's bits (dropout 0.1, step 3)",
                         "pt::TransformerStage with Recompute::none on the same layers, one device", task_forward});
    lab.tasks.push_back(
        {"backward: input and weight gradients have the stashing stage's bits, alone and in 1F1B / ZB-H1 on threads",
         "pt::TransformerStage with Recompute::none, one device (every F, then every B in micro-batch order)",
         task_backward, "a rank waits for a message that never comes: does every action return what to send?", 30});
    lab.tasks.push_back({"memory: no stash after a forward; during the backward one micro-batch's stash at most",
                         "one micro-batch's stash bytes, measured on the layers run here", task_memory});
    return run(lab, argc, argv);
}
