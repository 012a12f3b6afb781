// src/cli/eval.cpp — evaluation (loss, accuracy) and `pipetrain eval`.
#include "src/cli/train.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "kernels/ops.hpp"
#include "pipeline_lab.hpp"
#include "src/cli/args.hpp"
#include "src/formats/checkpoint.hpp"
#include "src/formats/io.hpp"
#include "src/formats/safetensors.hpp"
#include "src/watchdog.hpp"

namespace pt {

std::string EvalResult::summary(bool classifier) const {
    char buf[512];   // ppl %.3f of a diverged loss can take 300 digits
    if (targets == 0) return "eval n/a (no target position: a loss of 0 would read as a perfect model)";
    if (classifier)
        std::snprintf(buf, sizeof buf, "eval loss %.9g accuracy %.4f (%lld/%lld)", loss(), accuracy(),
                      (long long)correct, (long long)targets);
    else
        std::snprintf(buf, sizeof buf, "eval loss %.9g ppl %.3f (%lld targets)", loss(), std::exp(loss()),
                      (long long)targets);
    return buf;
}

// Forward only (no dropout) through `layers` in model order, batch by batch.
EvalResult evaluate(const std::vector<Layer*>& layers, const std::vector<Batch>& batches, bool causal) {
    EvalResult r;
    RunOptions opt;
    opt.train = false, opt.causal = causal;
    for (const Batch& b : batches) {
        MicroBatch mb = b.rows(0, b.B);
        std::vector<float> act, next;
        for (Layer* l : layers) {
            next.assign(l->out_numel(mb.B, mb.T), 0.0f);
            std::unique_ptr<Stash> s = l->forward(next.data(), act.empty() ? nullptr : act.data(), mb, opt);
            if (auto* hs = dynamic_cast<HeadStash*>(s.get())) {
                r.loss_sum += hs->loss_sum, r.targets += hs->num_targets;
                size_t n = hs->rows.size(), L = n ? hs->logits.size() / n : 0;
                for (size_t i = 0; i < n; i++) {   // accuracy: argmax of each row against its target
                    if (hs->targets[i] == kIgnore) continue;
                    const float* row = hs->logits.data() + i * L;
                    r.correct += int64_t(std::max_element(row, row + L) - row) == hs->targets[i];
                }
            }
            act.swap(next);
            pt::beat();   // on rank 0 during --eval-every: a long evaluation is not a hang
        }
    }
    return r;
}

namespace {

// --dump-logits: the tensors of the fixtures' expected.safetensors, for the first eval batch:
// hidden_states.i (embedding output, then each block), last_hidden_state, pooled_output,
// the logits at every position and the loss (prefix causal_ with --objective causal).
void dump_logits(const Setup& s, const std::vector<Layer*>& layers, const std::string& path) {
    const Batch& b = s.eval[0];
    MicroBatch mb = b.rows(0, b.B);
    RunOptions opt;
    opt.train = false, opt.causal = s.objective == Objective::causal, opt.all_logits = true;
    std::string pre = opt.causal ? "causal_" : "";
    std::vector<float> act, next;
    st::Writer w;
    int C = s.cfg.hidden_size;
    // The batch itself (I64, the --inputs names), so that another implementation can run the
    // same rows: with --data, the masking, the tokenizer and the padding made them.
    auto add_ids = [&](const char* name, const std::vector<int32_t>& v) {
        std::vector<int64_t> ids(v.begin(), v.end());
        if (ids.empty()) ids.assign(size_t(b.B) * b.T, 0);   // no task ids given: task 0
        w.add_i64(name, {b.B, b.T}, ids.data());
    };
    add_ids("input_ids", b.input_ids);
    add_ids("token_type_ids", b.token_type_ids);
    add_ids("attention_mask", b.attention_mask);
    if (s.cfg.use_task_id) add_ids("task_type_ids", b.task_type_ids);
    for (Layer* l : layers) {
        next.assign(l->out_numel(mb.B, mb.T), 0.0f);
        auto st = l->forward(next.data(), act.empty() ? nullptr : act.data(), mb, opt);
        if (auto* hs = dynamic_cast<HeadStash*>(st.get())) {
            w.add_f32(pre + "last_hidden_state", {b.B, b.T, C}, act.data());
            if (!hs->pooled.empty()) w.add_f32("pooled_output", {b.B, C}, hs->pooled.data());
            float loss = hs->num_targets ? float(hs->loss_sum / double(hs->num_targets)) : 0.0f;
            if (s.cfg.num_labels > 0) {
                w.add_f32("logits", {b.B, s.cfg.num_labels}, hs->logits.data());
                w.add_f32("loss", {1}, &loss);
            } else {
                w.add_f32(opt.causal ? "causal_logits" : "mlm_logits", {b.B, b.T, s.cfg.vocab_size}, hs->logits.data());
                w.add_f32(opt.causal ? "causal_lm_loss" : "mlm_loss", {1}, &loss);
            }
        } else if (!opt.causal) {
            w.add_f32("hidden_states." + std::to_string(l->index()), {b.B, b.T, C}, next.data());
        }
        act.swap(next);
    }
    w.write(path);
}

}  // namespace

ForwardModel forward_model(const ModelConfig& cfg) {
    ForwardModel m;
    for (int i = 0; i < num_model_layers(cfg); i++) {
        m.owned.push_back(make_layer(cfg, i));
        m.owned.back()->grads = Buf();   // before the next layer's are made: never all at once
        m.layers.push_back(m.owned.back().get());
    }
    return m;
}

int eval_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--model", "--data", "--inputs", "--objective", "--dump-logits", "--seq", "--seed", "--threads"});
    // The task comes from the model: a config with labels is a classifier, evaluated on a TSV.
    ops::set_num_threads(int(a.integer("--threads", 1, 1, 256)));
    Setup s = make_setup(a, false);
    if (s.cfg.num_labels > 0 && a.has("--objective"))   // make_setup refuses causal; mlm would be ignored
        throw std::runtime_error("--objective: " + s.model_dir + " is a classifier (num_labels " + std::to_string(s.cfg.num_labels) +
                                 "): eval reports its labels' loss and accuracy; --objective is for a language model");
    ForwardModel model = forward_model(s.cfg);
    const std::vector<Layer*>& layers = model.layers;
    if (a.has("--dump-logits")) check_output_path(a.str("--dump-logits"), "--dump-logits");
    load_weights(s.model_dir, layers, false, s.cfg.num_labels == 0);   // a classifier's head must be there
    EvalResult ev = evaluate(layers, s.eval, s.objective == Objective::causal);
    if (ev.targets == 0)
        throw std::runtime_error(a.str(a.has("--data") ? "--data" : "--inputs") + ": nothing to evaluate (no target position)");
    std::printf("%s\n", ev.summary(s.cfg.num_labels > 0).c_str());
    if (a.has("--dump-logits")) dump_logits(s, layers, a.str("--dump-logits"));
    return 0;
}

}  // namespace pt
