// `pipetrain eval --dump-logits` on the ERNIE fixtures writes the tensors of the independent
// reference's expected.safetensors, under the same names, within 1e-4 relative at real tokens,
// and the batch they are for (the --inputs names).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>

#include "src/formats/safetensors.hpp"
#include "tests/cli_util.hpp"

using namespace test;

namespace {

// max |a - b| / max |b|; for per-token tensors ([B, T, ...]) only where attention_mask is 1
// (pad positions are implementation-defined, see the fixtures' README).
double rel_error(const pt::st::File& got, const pt::st::File& want, const std::string& name,
                 const std::vector<int64_t>& mask, bool per_token, const std::string& want_name = "") {
    std::vector<float> a = got.to_f32(name), b = want.to_f32(want_name.empty() ? name : want_name);
    REQUIRE(a.size() == b.size());
    size_t width = a.size() / mask.size();
    double diff = 0, ref = 0;
    for (size_t i = 0; i < a.size(); i++) {
        if (per_token && !mask[i / width]) continue;
        diff = std::max(diff, double(std::fabs(a[i] - b[i])));
        ref = std::max(ref, double(std::fabs(b[i])));
    }
    return diff / ref;
}

}  // namespace

TEST_CASE("eval --dump-logits matches the reference outputs for every fixture model and variant") {
    struct Case { std::string model, variant; int layers; };
    for (const Case& c : {Case{"nano-like", "hf", 2}, Case{"nano-like", "paddle", 2}, Case{"nano-like", "hf_gamma_beta", 2},
                          Case{"ernie1-like", "hf", 2}, Case{"ernie1-like", "paddle", 2}}) {
        std::string dir = fixture("ernie/" + c.model), out = temp_dir("dump") + "/" + c.model + c.variant;
        pt::st::File inputs = pt::st::read(dir + "/inputs.safetensors"), want = pt::st::read(dir + "/expected.safetensors");
        std::vector<int64_t> mask = inputs.to_i64("attention_mask");
        for (const char* objective : {"mlm", "causal"}) {
            std::string file = out + objective + ".safetensors";
            Run r = run_cli("eval --model " + dir + "/" + c.variant + " --inputs " + dir + "/inputs.safetensors --objective " +
                            objective + " --dump-logits " + file);
            CAPTURE(c.model + "/" + c.variant + " " + objective);
            REQUIRE_MESSAGE(r.code == 0, r.out);
            pt::st::File got = pt::st::read(file);
            // The batch the outputs are for comes with them (task ids only where the model has a table).
            for (std::string n : {"input_ids", "token_type_ids", "attention_mask", "task_type_ids"}) {
                CAPTURE(n);
                bool want_it = std::string(n) != "task_type_ids" || c.model == "nano-like";
                REQUIRE(bool(got.find(n)) == want_it);
                if (want_it) CHECK(got.to_i64(n) == inputs.to_i64(n));
            }
            std::vector<std::string> names;
            if (std::string(objective) == "mlm") {
                names = {"last_hidden_state", "mlm_logits", "mlm_loss", "pooled_output"};
                for (int i = 0; i <= c.layers; i++) names.push_back("hidden_states." + std::to_string(i));
            } else {
                names = {"causal_last_hidden_state", "causal_logits", "causal_lm_loss"};
            }
            for (const std::string& n : names) {
                CAPTURE(n);
                REQUIRE(got.find(n));
                bool per_token = n != "pooled_output" && n.find("loss") == std::string::npos;
                double err = rel_error(got, want, n, mask, per_token);
                // PyTorch's own float32 run is within 7e-7 (expected.json); 1e-5 still leaves 10x for
                // float32 rounding and catches what moves the logits by 1e-4 (the README's tanh GELU: 4e-4).
                CHECK(err < 1e-5);
                // The check can fail: the MLM logits are far from the causal ones.
                if (n == "causal_logits") CHECK(rel_error(got, want, n, mask, true, "mlm_logits") > 1e-2);
            }
            if (std::string(objective) == "causal") {
                pt::st::File mlm = pt::st::read(out + "mlm.safetensors");
                CHECK(rel_error(mlm, want, "mlm_logits", mask, true) < 1e-4);
            }
        }
    }
}
