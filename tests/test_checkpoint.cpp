// Checkpoints: every ERNIE fixture variant (Hugging Face, PaddleNLP, gamma/beta) loads to the
// same bits and reproduces the reference outputs; save (both formats) → load is exact; shards;
// config keys of both libraries; and every broken input fails with one line through the CLI.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

#include "src/cli/commands.hpp"
#include "src/formats/checkpoint.hpp"
#include "src/formats/corpus.hpp"
#include "src/formats/safetensors.hpp"
#include "tests/cli_util.hpp"
#include "tests/model_diff.hpp"
#include "src/formats/config_json.hpp"

using namespace test;
namespace fs = std::filesystem;

namespace {

struct Model {
    pt::ModelConfig cfg;
    std::vector<std::unique_ptr<pt::Layer>> owned;
    std::vector<pt::Layer*> layers;
};

Model build(const pt::ModelConfig& cfg) {
    Model m;
    m.cfg = cfg;
    for (int i = 0; i < pt::num_model_layers(cfg); i++) {
        m.owned.push_back(pt::make_layer(cfg, i));
        m.layers.push_back(m.owned.back().get());
        m.layers.back()->init(99, 0.02f);
    }
    return m;
}

std::unique_ptr<Model> load(const std::string& dir, bool strict = false) {
    auto m = std::make_unique<Model>(build(pt::load_model_config(dir)));
    pt::load_weights(dir, m->layers, strict);
    return m;
}

bool same_params(const Model& a, const Model& b) {
    if (a.layers.size() != b.layers.size()) return false;
    for (size_t i = 0; i < a.layers.size(); i++)
        if (a.layers[i]->params.size() != b.layers[i]->params.size() ||
            std::memcmp(a.layers[i]->params.data(), b.layers[i]->params.data(), a.layers[i]->params.size() * 4) != 0)
            return false;
    return true;
}

const float* find_param(const Model& m, const std::string& name) {
    for (pt::Layer* l : m.layers)
        for (const pt::ParamInfo& p : l->params_info)
            if (p.name == name) return l->params.data() + p.offset;
    FAIL("no parameter " << name);
    return nullptr;
}

void copy_dir(const std::string& from, const std::string& to) {
    fs::create_directories(to);
    for (const auto& e : fs::directory_iterator(from))
        fs::copy_file(e.path(), to + "/" + e.path().filename().string(), fs::copy_options::overwrite_existing);
}

// A safetensors file as editable entries.
struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};
std::vector<Entry> read_entries(const std::string& path) {
    pt::st::File f = pt::st::read(path);
    std::vector<Entry> out;
    for (const auto& t : f.tensors)
        out.push_back({t.name, t.dtype, t.shape, {f.data.begin() + long(t.begin), f.data.begin() + long(t.end)}});
    return out;
}
void write_entries(const std::string& path, const std::vector<Entry>& entries) {
    pt::st::Writer w;
    for (const Entry& e : entries) w.add(e.name, e.dtype, e.shape, e.bytes.data(), e.bytes.size());
    w.write(path);
}
Entry* entry(std::vector<Entry>& v, const std::string& name) {
    for (Entry& e : v)
        if (e.name == name) return &e;
    FAIL("no entry " << name);
    return nullptr;
}

// ---- forward and comparison -------------------------------------------------------------------

struct Outputs {
    std::vector<std::vector<float>> hidden;   // embedding output, then each block's
    std::vector<float> logits, pooled;
    double loss = 0;
};

Outputs forward(const Model& m, const pt::Batch& b, bool causal) {
    pt::MicroBatch mb = b.rows(0, b.B);
    pt::RunOptions opt;
    opt.train = false, opt.causal = causal, opt.all_logits = true;
    Outputs o;
    std::vector<float> act, next;
    for (pt::Layer* l : m.layers) {
        next.assign(l->out_numel(mb.B, mb.T), 0.0f);
        auto st = l->forward(next.data(), act.empty() ? nullptr : act.data(), mb, opt);
        if (auto* hs = dynamic_cast<pt::HeadStash*>(st.get())) {
            REQUIRE(hs->rows.size() == size_t(b.B) * b.T);   // all_logits: every row, in order
            o.logits = hs->logits.host();
            o.loss = hs->loss_sum / double(hs->num_targets);
        } else {
            o.hidden.push_back(next);
        }
        act.swap(next);
    }
    // pooled = tanh(Wp h[:, 0] + bp), in double, from the loaded pooler ([out, in]).
    int C = m.cfg.hidden_size;
    const float* w = find_param(m, "ernie.pooler.dense.weight");
    const float* bias = find_param(m, "ernie.pooler.dense.bias");
    const std::vector<float>& h = o.hidden.back();
    for (int r = 0; r < b.B; r++)
        for (int j = 0; j < C; j++) {
            double s = bias[j];
            for (int i = 0; i < C; i++) s += double(w[size_t(j) * C + i]) * h[size_t(r) * b.T * C + i];
            o.pooled.push_back(float(std::tanh(s)));
        }
    return o;
}

// max |Δ| / max |ref| over the positions whose attention_mask is 1 (all when mask is empty).
double rel_err(const std::vector<float>& got, const std::vector<float>& ref, const std::vector<int32_t>& mask) {
    REQUIRE(got.size() == ref.size());
    size_t per = mask.empty() ? 1 : ref.size() / mask.size();
    double d = 0, r = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!mask.empty() && mask[i / per] != 1) continue;
        d = std::max(d, std::fabs(double(got[i]) - ref[i]));
        r = std::max(r, std::fabs(double(ref[i])));
    }
    return d / r;
}

struct Variant {
    std::string model, dir;
};
const Variant kVariants[] = {{"nano-like", "hf"},  {"nano-like", "paddle"}, {"nano-like", "hf_gamma_beta"},
                             {"ernie1-like", "hf"}, {"ernie1-like", "paddle"}};

std::string variant_dir(const Variant& v) { return fixture("ernie/" + v.model + "/" + v.dir); }

// A small valid batch for base_tiny (V=16, T=6 <= max_pos 8).
std::string tiny_inputs(const std::string& dir) {
    std::vector<int64_t> ids = {1, 4, 5, 3, 7, 2, 1, 8, 3, 2, 0, 0}, types(12, 0), labels(12, -100);
    std::vector<int64_t> mask = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
    labels[3] = 6, labels[8] = 9;
    pt::st::Writer w;
    w.add_i64("input_ids", {2, 6}, ids.data());
    w.add_i64("token_type_ids", {2, 6}, types.data());
    w.add_i64("attention_mask", {2, 6}, mask.data());
    w.add_i64("labels", {2, 6}, labels.data());
    std::string path = dir + "/tiny_inputs.safetensors";
    w.write(path);
    return path;
}

int lines(const std::string& s) {
    int n = 0;
    std::istringstream in(s);
    for (std::string line; std::getline(in, line);) n += !line.empty();
    return n;
}

}  // namespace

TEST_CASE("parity: every variant reproduces the reference outputs within 1e-4") {
    for (const Variant& v : kVariants) {
        std::string base = fixture("ernie/" + v.model);
        auto m = load(variant_dir(v));
        pt::st::File ref = pt::st::read(base + "/expected.safetensors");
        for (bool causal : {false, true}) {
            pt::Batch b = pt::load_inputs(base + "/inputs.safetensors", causal ? pt::Objective::causal : pt::Objective::mlm);
            if (causal) {   // the data code's next-token targets are the reference's
                std::vector<int64_t> t = ref.to_i64("causal_targets");
                CHECK(std::vector<int32_t>(t.begin(), t.end()) == b.targets);
            }
            Outputs o = forward(*m, b, causal);
            std::string p = causal ? "causal_" : "";
            std::vector<std::pair<std::string, double>> errs;
            auto masked = [&](const std::vector<float>& got, const std::string& name) {
                errs.push_back({name, rel_err(got, ref.to_f32(name), b.attention_mask)});
            };
            if (!causal)
                for (size_t i = 0; i < o.hidden.size(); i++) masked(o.hidden[i], "hidden_states." + std::to_string(i));
            masked(o.hidden.back(), p + "last_hidden_state");
            masked(o.logits, causal ? "causal_logits" : "mlm_logits");
            errs.push_back({causal ? "causal_lm_loss" : "mlm_loss",
                            rel_err({float(o.loss)}, ref.to_f32(causal ? "causal_lm_loss" : "mlm_loss"), {})});
            if (!causal) errs.push_back({"pooled_output", rel_err(o.pooled, ref.to_f32("pooled_output"), {})});
            for (const auto& [name, e] : errs) {
                MESSAGE(v.model << "/" << v.dir << " " << name << ": max rel err " << e);
                CHECK_MESSAGE(e < 1e-4, v.model << "/" << v.dir << " " << name);
            }
        }
    }
}

TEST_CASE("all variants load to bit-identical parameters; load → save (hf, paddle) → load is exact") {
    for (const char* model : {"nano-like", "ernie1-like"}) {
        auto hf = load(fixture(std::string("ernie/") + model + "/hf"));
        for (const Variant& v : kVariants)
            if (v.model == model) CHECK_MESSAGE(same_params(*hf, *load(variant_dir(v))), v.dir);
        for (const char* format : {"hf", "paddle"}) {
            std::string out = temp_dir(std::string("save_") + model + "_" + format);
            std::vector<std::string> vocab = pt::load_vocab_lines(variant_dir({model, "hf"}), hf->cfg);
            pt::save_model_dir(out, hf->cfg, vocab, hf->layers, format);
            CHECK(same_params(*hf, *load(out)));
            // Our writer and naming reproduce the fixture files (written by another program) byte for byte.
            std::string fixture_file = fixture(std::string("ernie/") + model + "/" + format + "/model.safetensors");
            CHECK_MESSAGE(model_difference(out + "/model.safetensors", fixture_file) == "", format);
            CHECK(pt::load_vocab_lines(out, hf->cfg) == vocab);
            fs::remove_all(out);
        }
    }
}

TEST_CASE("naming: the two conventions map to each other, Paddle Linear weights transposed (the pooler too)") {
    auto m = build(pt::load_model_config(fixture("ernie/nano-like/hf")));
    for (pt::Layer* l : m.layers)
        for (const pt::ParamInfo& p : l->params_info)
            for (bool paddle : {false, true}) {
                bool t1 = false, t2 = false;
                std::string file = pt::to_file_name(p.name, paddle, &t1);
                INFO(p.name << " -> " << (paddle ? "Paddle " : "HF ") << file);
                if (!p.tied) CHECK(pt::to_model_name(file, paddle, &t2) == p.name);
                CHECK(t1 == t2);
                CHECK(t1 == (paddle && p.shape.size() == 2 && p.name.find("embeddings") == std::string::npos && !p.tied));
            }
    bool t = false;
    CHECK(pt::to_model_name("ernie.pooler.dense.weight", true, &t) == "ernie.pooler.dense.weight");
    CHECK(t);
    CHECK(pt::to_model_name("ernie.pooler.dense.weight", false, &t) == "ernie.pooler.dense.weight");
    CHECK(!t);
    CHECK(pt::to_model_name("encoder.layers.3.linear1.weight", true, &t) ==
          "ernie.encoder.layer.3.intermediate.dense.weight");
    CHECK(t);
    CHECK(pt::to_model_name("classifier.weight", true, &t) == "classifier.weight");
    CHECK(t);
    CHECK(pt::to_model_name("cls.predictions.decoder_bias", true, &t) == "cls.predictions.bias");
    CHECK(pt::to_model_name("ernie.encoder.layer.1.output.LayerNorm.gamma", false, &t) ==
          "ernie.encoder.layer.1.output.LayerNorm.weight");
    CHECK(pt::to_model_name("ernie.embeddings.position_ids", false, &t).empty());
    CHECK(pt::open_checkpoint(fixture("ernie/nano-like/paddle")).convention == "paddle");
    CHECK(pt::open_checkpoint(fixture("ernie/nano-like/hf_gamma_beta")).convention == "hf");
}

TEST_CASE("sharded checkpoints: load identically; a missing shard or a misplaced tensor is one line") {
    for (const char* variant : {"hf", "paddle"}) {
        std::string src = fixture(std::string("ernie/nano-like/") + variant);
        auto whole = load(src);
        std::string dir = temp_dir(std::string("shards_") + variant);
        for (const char* f : {"config.json", "vocab.txt"}) fs::copy_file(src + "/" + f, dir + "/" + f);
        // Shard 2 holds only the pooler: its orientation must come from the whole checkpoint.
        std::vector<Entry> all = read_entries(src + "/model.safetensors"), one, two;
        for (Entry& e : all) (e.name.find("pooler") != std::string::npos ? two : one).push_back(e);
        REQUIRE(two.size() == 2);
        const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
        write_entries(dir + "/" + s1, one);
        write_entries(dir + "/" + s2, two);
        std::string map;
        for (const Entry& e : all)
            map += (map.empty() ? "\"" : ", \"") + e.name + "\": \"" + (e.name.find("pooler") != std::string::npos ? s2 : s1) + "\"";
        auto write_index = [&](const std::string& m) {
            std::ofstream(dir + "/model.safetensors.index.json") << "{\"metadata\": {}, \"weight_map\": {" << m << "}}";
        };
        write_index(map);
        CHECK(same_params(*whole, *load(dir)));

        // The index puts a tensor in the other shard.
        std::string moved = map;
        std::string key = "\"ernie.pooler.dense.bias\": \"" + s2 + "\"";
        REQUIRE(moved.find(key) != std::string::npos);
        moved.replace(moved.find(key), key.size(), "\"ernie.pooler.dense.bias\": \"" + s1 + "\"");
        write_index(moved);
        std::string e = error_of([&] { load(dir); });
        const std::string index = dir + "/model.safetensors.index.json";
        CHECK(e == dir + "/" + s2 + ": holds tensor ernie.pooler.dense.bias, but " + index + " puts it in " + s1);

        // A shard holds a tensor the index does not list; the index lists one its shard lacks.
        std::string unlisted = map;
        key = "\"ernie.pooler.dense.bias\": \"" + s2 + "\", ";
        if (unlisted.find(key) == std::string::npos) key = ", \"ernie.pooler.dense.bias\": \"" + s2 + "\"";
        REQUIRE(unlisted.find(key) != std::string::npos);
        write_index(unlisted.replace(unlisted.find(key), key.size(), ""));
        CHECK(error_of([&] { load(dir); }) == dir + "/" + s2 + ": holds tensor ernie.pooler.dense.bias, which " + index + " does not list");
        write_index(map + ", \"ernie.extra\": \"" + s1 + "\"");
        CHECK(error_of([&] { load(dir); }) == index + ": lists tensor ernie.extra in " + s1 + ", which does not hold it");

        // A shard is missing.
        write_index(map);
        fs::remove(dir + "/" + s2);
        e = error_of([&] { load(dir); });
        CHECK(e.find(s2) != std::string::npos);
        CHECK(e.find("not found") != std::string::npos);
        CHECK(e.find('\n') == std::string::npos);

        // The index escapes the directory.
        write_index("\"x\": \"../" + s1 + "\"");
        CHECK(error_of([&] { load(dir); }).find("file name") != std::string::npos);
        fs::remove_all(dir);
    }
}

TEST_CASE("load problems: missing, mis-shaped, wrong dtype, unexpected (strict), optional, tied decoder, mixed names") {
    const std::string src = fixture("ernie/ernie1-like/hf");
    std::string dir = temp_dir("problems");
    copy_dir(src, dir);
    const std::string file = dir + "/model.safetensors";
    auto edit = [&](const std::function<void(std::vector<Entry>&)>& f) {
        std::vector<Entry> v = read_entries(src + "/model.safetensors");
        f(v);
        write_entries(file, v);
    };
    auto one_line_with = [&](const std::vector<std::string>& words) {
        std::string e = error_of([&] { load(dir); });
        INFO(e);
        CHECK(!e.empty());
        CHECK(e.find('\n') == std::string::npos);
        for (const std::string& w : words) CHECK(e.find(w) != std::string::npos);
    };
    const std::string ffn = "ernie.encoder.layer.1.intermediate.dense.weight";

    edit([&](auto& v) { v.erase(v.begin() + (entry(v, ffn) - v.data())); });
    one_line_with({file, "missing", ffn, "[96, 48]"});

    edit([&](auto& v) { entry(v, ffn)->shape = {48, 96}; });
    one_line_with({file, ffn, "[48, 96]", "expected [96, 48]"});

    edit([&](auto& v) { entry(v, ffn)->dtype = "I32"; });
    one_line_with({ffn, "has dtype I32, expected F32 (F64, F16, BF16)"});   // the check's, before any tensor is read

    auto whole = load(src);
    edit([&](auto& v) { v.push_back({"ernie.extra.weight", "F32", {2}, std::vector<uint8_t>(8, 0)}); });
    CHECK(same_params(*whole, *load(dir)));   // a warning only
    std::string e = error_of([&] { load(dir, true); });
    CHECK(e.find("unexpected") != std::string::npos);
    CHECK(e.find("ernie.extra.weight") != std::string::npos);

    // The pooler is optional: absent, it keeps its initial values.
    edit([&](auto& v) {
        v.erase(v.begin() + (entry(v, "ernie.pooler.dense.weight") - v.data()));
        v.erase(v.begin() + (entry(v, "ernie.pooler.dense.bias") - v.data()));
    });
    auto fresh = build(whole->cfg);
    auto no_pooler = load(dir);
    size_t C = size_t(whole->cfg.hidden_size);
    const std::string pooler = "ernie.pooler.dense.weight";
    CHECK(std::memcmp(find_param(*no_pooler, pooler), find_param(fresh, pooler), C * C * 4) == 0);
    CHECK(std::memcmp(find_param(*no_pooler, "ernie.encoder.layer.0.output.dense.weight"),
                      find_param(*whole, "ernie.encoder.layer.0.output.dense.weight"), C * 4) == 0);

    // A stored decoder must equal the word embedding.
    edit([&](auto& v) {
        Entry d = *entry(v, "ernie.embeddings.word_embeddings.weight");
        d.name = "cls.predictions.decoder.weight";
        v.push_back(d);
    });
    CHECK(same_params(*whole, *load(dir, true)));
    edit([&](auto& v) {
        Entry d = *entry(v, "ernie.embeddings.word_embeddings.weight");
        d.name = "cls.predictions.decoder.weight";
        d.bytes[5] ^= 1;
        v.push_back(d);
    });
    one_line_with({"cls.predictions.decoder.weight", "differs", "word_embeddings"});

    // Names from both conventions: the pooler's orientation would be a guess.
    edit([&](auto& v) {
        entry(v, "ernie.encoder.layer.0.attention.self.query.bias")->name = "ernie.encoder.layers.0.self_attn.q_proj.bias";
    });
    one_line_with({"mixes", "PaddleNLP"});

    // A task embedding the config does not use would be silently ignored: an error.
    edit([&](auto& v) {
        v.push_back({"ernie.embeddings.task_type_embeddings.weight", "F32", {3, 48}, std::vector<uint8_t>(3 * 48 * 4, 0)});
    });
    one_line_with({"task_type_embeddings", "use_task_id"});
    fs::remove_all(dir);
}

TEST_CASE("config: Hugging Face and PaddleNLP keys, legacy model_config.json, labels") {
    std::string dir = temp_dir("config");
    auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir + "/" + name) << text; };
    const std::string shape =
        "\"vocab_size\": 16, \"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
        "\"intermediate_size\": 16, \"max_position_embeddings\": 8, \"type_vocab_size\": 2, \"hidden_act\": \"relu\"";

    // PaddleNLP <= 2.4: the encoder's arguments nested in init_args; num_classes outside.
    write("model_config.json", "{\"init_args\": [{\"vocab_size\": 16, \"hidden_size\": 8, \"num_hidden_layers\": 1, "
                               "\"num_attention_heads\": 2, \"init_class\": \"ErnieModel\"}], "
                               "\"init_class\": \"ErnieForSequenceClassification\", \"num_classes\": 3}");
    pt::ModelConfig c = pt::load_model_config(dir);
    CHECK(c.vocab_size == 16);
    CHECK(c.hidden_size == 8);
    CHECK(c.num_labels == 3);
    CHECK(c.intermediate_size == 3072);   // that class's own defaults
    CHECK(c.type_vocab_size == 2);
    CHECK(!c.use_task_id);
    CHECK(c.layer_norm_eps == 1e-12f);   // exactly: Approx(1e-12) would take 1e-5 (its scale is 1)
    // A key both outside and inside init_args: the outer one, as the class's own arguments.
    write("model_config.json", "{\"init_args\": [{\"vocab_size\": 16, \"hidden_size\": 8, \"num_hidden_layers\": 1, "
                               "\"num_attention_heads\": 2, \"init_class\": \"ErnieModel\"}], \"num_hidden_layers\": 3, "
                               "\"init_class\": \"ErnieForSequenceClassification\", \"num_classes\": 3}");
    CHECK(pt::load_model_config(dir).num_hidden_layers == 3);

    // config.json wins over model_config.json; use_task_id must be written out.
    write("config.json", "{" + shape + "}");
    std::string e = error_of([&] { pt::load_model_config(dir); });
    CHECK(e.find("use_task_id") != std::string::npos);
    CHECK(e.find(dir + "/config.json") == 0);

    write("config.json", "{" + shape + ", \"use_task_id\": false, \"num_classes\": 4}");
    c = pt::load_model_config(dir);
    CHECK(c.num_labels == 4);
    CHECK(c.hidden_act == "relu");
    CHECK(c.layer_norm_eps == 1e-12f);   // both libraries' default

    write("config.json", "{" + shape + ", \"use_task_id\": false, \"architectures\": [\"ErnieForSequenceClassification\"], "
                                       "\"id2label\": {\"0\": \"a\", \"1\": \"b\", \"2\": \"c\"}}");
    CHECK(pt::load_model_config(dir).num_labels == 3);
    write("config.json", "{" + shape + ", \"use_task_id\": false, \"architectures\": [\"ErnieForSequenceClassification\"]}");
    CHECK(pt::load_model_config(dir).num_labels == 2);   // Hugging Face omits the default two labels
    write("config.json", "{" + shape + ", \"use_task_id\": false, \"id2label\": {\"0\": \"a\", \"1\": \"b\"}}");
    CHECK(pt::load_model_config(dir).num_labels == 0);   // an MLM config may carry the default id2label

    c.num_labels = 5;
    pt::ModelConfig back = pt::config_from_json_string(config_to_json(c), "round trip");
    CHECK(back.num_labels == 5);
    CHECK(config_to_json(back) == config_to_json(c));
    // Floats are written as the shortest decimals that read back as the same float.
    c.layer_norm_eps = 1e-5f, c.hidden_dropout_prob = 0.1f;
    std::string json = config_to_json(c);
    CHECK(json.find("\"layer_norm_eps\": 1e-05,") != std::string::npos);
    CHECK(json.find("\"hidden_dropout_prob\": 0.1,") != std::string::npos);
    back = pt::config_from_json_string(json, "round trip");
    CHECK(back.layer_norm_eps == c.layer_norm_eps);
    CHECK(back.hidden_dropout_prob == c.hidden_dropout_prob);

    fs::remove_all(dir);
    CHECK(error_of([&] { pt::load_model_config(dir); }).find("not a model directory") != std::string::npos);
}

TEST_CASE("config.json: each value no model can have is refused, naming the file and the key") {
    // One edit of a valid config (nano-like's) per row; the load must fail with the row's words.
    const std::string valid = read_file(fixture("ernie/nano-like/config.json"));
    REQUIRE_NOTHROW(pt::config_from_json_string(valid, "config.json"));
    struct Row { std::string from, to, words; };
    const Row rows[] = {
        {"\"hidden_size\": 52", "\"hidden_size\": 0", "sizes must be positive"},
        {"\"num_attention_heads\": 2", "\"num_attention_heads\": 3", "hidden_size 52 is not divisible by num_attention_heads 3"},
        {"\"hidden_act\": \"gelu\"", "\"hidden_act\": \"swish\"", "hidden_act must be \"gelu\" or \"relu\", got \"swish\""},
        {"\"hidden_act\": \"gelu\",", "", "missing key \"hidden_act\""},
        {"\"pad_token_id\": 0", "\"pad_token_id\": 512", "pad_token_id out of range"},
        {"\"layer_norm_eps\": 1e-12", "\"layer_norm_eps\": 0", "layer_norm_eps must be > 0"},
        {"\"hidden_dropout_prob\": 0.1", "\"hidden_dropout_prob\": 1", "dropout probabilities must be in [0, 1)"},
        {"\"attention_probs_dropout_prob\": 0.1", "\"attention_probs_dropout_prob\": -0.1", "dropout probabilities must be in [0, 1)"},
        {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1025", "num_hidden_layers 1025 is above 1024"},
        {"\"task_type_vocab_size\": 16", "\"task_type_vocab_size\": 0", "use_task_id needs task_type_vocab_size > 0"},
        {"\"use_task_id\": true", "\"use_task_id\": 1", "\"use_task_id\" must be true/false"},
        {"\"position_embedding_type\": \"absolute\"", "\"position_embedding_type\": \"relative_key\"",
         "position_embedding_type must be \"absolute\""},
        {"\"vocab_size\": 512", "\"vocab_size\": 512.5", "\"vocab_size\" must be an integer"},
        {"\"vocab_size\": 512", "\"vocab_size\": 3000000000", "\"vocab_size\" 3000000000 is out of range"},
        {"\"intermediate_size\": 208", "\"intermediate_size\": 50000000", "intermediate_size 50000000 × hidden_size 52 is more than 2^31"},
        {"\"model_type\": \"ernie\"", "\"num_labels\": 1", "num_labels must be 0 (no classifier) or at least 2"},
        {"\"model_type\": \"ernie\"", "\"is_decoder\": \"yes\"", "\"is_decoder\" must be true/false"},
        // Loaded as ERNIE before: another architecture with BERT's keys, a multi-label classifier.
        {"\"model_type\": \"ernie\"", "\"model_type\": \"roberta\"", "\"model_type\": \"roberta\": pipetrain reads ERNIE and BERT models"},
        {"\"model_type\": \"ernie\"", "\"problem_type\": \"multi_label_classification\"",
         "\"problem_type\": \"multi_label_classification\": pipetrain's classifier is single-label"},
    };
    for (const Row& r : rows) {
        std::string text = valid;
        REQUIRE_MESSAGE(text.find(r.from) != std::string::npos, r.from);
        text.replace(text.find(r.from), r.from.size(), r.to);
        CAPTURE(r.to);
        std::string e = error_of([&] { pt::config_from_json_string(text, "dir/config.json"); });
        CHECK(e.find("dir/config.json: ") == 0);
        CHECK(e.find(r.words) != std::string::npos);
        CHECK(e.find('\n') == std::string::npos);
    }
}

TEST_CASE("use_task_id: inputs without task_type_ids mean task 0, as in Hugging Face and PaddleNLP") {
    std::string dir = temp_dir("task_ids");
    std::vector<Entry> with = read_entries(fixture("ernie/nano-like/inputs.safetensors")), without, zeros = with;
    for (Entry& e : zeros)
        if (e.name == "task_type_ids") std::fill(e.bytes.begin(), e.bytes.end(), uint8_t(0));
        else without.push_back(e);
    REQUIRE(without.size() + 1 == with.size());
    write_entries(dir + "/without.safetensors", without);
    write_entries(dir + "/zeros.safetensors", zeros);
    std::string model = fixture("ernie/nano-like/hf");
    Run a = run_cli("eval --model " + model + " --inputs " + dir + "/without.safetensors");
    Run b = run_cli("eval --model " + model + " --inputs " + dir + "/zeros.safetensors");
    REQUIRE_MESSAGE(a.code == 0, a.out);
    CHECK(a.out == b.out);   // row 0 of the task table was left out without them
    // A shape other than input_ids' is refused even with as many elements.
    std::vector<Entry> odd = with;
    for (Entry& e : odd)
        if (e.name == "attention_mask") std::swap(e.shape[0], e.shape[1]);
    write_entries(dir + "/odd.safetensors", odd);
    Run c = run_cli("eval --model " + model + " --inputs " + dir + "/odd.safetensors");
    CHECK(c.code != 0);
    CHECK(c.out.find("tensor \"attention_mask\" must be [B, T] like input_ids") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("--inputs: an id outside its table, a mask of 2, a sequence too long or no target: one line, eval and train alike") {
    // base_tiny: vocab 16, 2 token types, 8 positions; tiny_inputs' batch (2, 6) with one edit per row.
    const std::string base = fixture("bad/base_tiny"), dir = temp_dir("bad_inputs");
    const pt::st::File good = pt::st::read(tiny_inputs(dir));
    struct Row { std::string tensor; int at; int64_t value; std::string words; };
    const Row rows[] = {
        {"input_ids", 4, 16, "input id 16 out of range [0, 16)"},
        {"input_ids", 0, -1, "input id -1 out of range [0, 16)"},
        {"token_type_ids", 7, 2, "token_type id 2 out of range [0, 2)"},
        {"labels", 3, 16, "target id 16 out of range [0, 16)"},
        {"labels", 3, -2, "target id -2 out of range [0, 16)"},
        {"attention_mask", 5, 2, "attention_mask must be 0 or 1"},
        {"labels", -1, -100, "no target (every label is -100)"},
        {"", 0, 0, "sequence length 9 exceeds max_position_embeddings 8"},
    };
    for (const Row& r : rows) {
        pt::st::Writer w;
        for (const char* name : {"input_ids", "token_type_ids", "attention_mask", "labels"}) {
            std::vector<int64_t> v = good.to_i64(name);
            if (r.tensor == name && r.at >= 0) v[size_t(r.at)] = r.value;
            if (r.tensor == name && r.at < 0) std::fill(v.begin(), v.end(), r.value);
            if (r.tensor.empty()) v.resize(9, name == std::string("attention_mask") ? 1 : name == std::string("labels") ? 3 : 0);
            w.add_i64(name, {r.tensor.empty() ? 1 : 2, r.tensor.empty() ? 9 : 6}, v.data());
        }
        const std::string path = dir + "/edited.safetensors", out = dir + "/out";
        w.write(path);
        for (const std::string& command : {"eval --model " + base + " --inputs " + path,
                                            "train --model " + base + " --inputs " + path + " --steps 1 --batch 2 --out " + out}) {
            Run x = run_cli(command);
            INFO(command << "\n" << x.out);
            CHECK(x.code != 0);
            CHECK(x.out.find(path + ": " + r.words) != std::string::npos);
            CHECK(lines(x.out) == 1);
            CHECK(!fs::exists(out));
        }
    }
    fs::remove_all(dir);
}

TEST_CASE("--inputs without attention_mask or token_type_ids: every position seen, type 0, as Hugging Face") {
    const std::string base = fixture("bad/base_tiny"), dir = temp_dir("defaults_inputs");
    const pt::st::File good = pt::st::read(tiny_inputs(dir));
    auto eval_of = [&](bool with_defaults_written) {
        pt::st::Writer w;
        std::vector<int64_t> ids = good.to_i64("input_ids"), labels = good.to_i64("labels"), ones(ids.size(), 1), zeros(ids.size(), 0);
        w.add_i64("input_ids", {2, 6}, ids.data());
        w.add_i64("labels", {2, 6}, labels.data());
        if (with_defaults_written) w.add_i64("attention_mask", {2, 6}, ones.data()), w.add_i64("token_type_ids", {2, 6}, zeros.data());
        w.write(dir + "/inputs.safetensors");
        Run r = run_cli("eval --model " + base + " --inputs " + dir + "/inputs.safetensors");
        REQUIRE_MESSAGE(r.code == 0, r.out);
        return r.out;
    };
    CHECK(eval_of(false) == eval_of(true));
    fs::remove_all(dir);
}

TEST_CASE("vocab.txt: fewer lines than vocab_size load, more are an error") {
    std::string dir = temp_dir("vocab");
    pt::ModelConfig cfg = pt::load_model_config(fixture("bad/base_tiny"));
    std::string base = read_file(fixture("bad/base_tiny/vocab.txt"));
    std::ofstream(dir + "/vocab.txt") << "[PAD]\n[CLS]\n[SEP]\n[MASK]\n[UNK]\n";
    CHECK(pt::load_vocab_lines(dir, cfg).size() == 5);
    std::ofstream(dir + "/vocab.txt") << base << "extra\n";
    std::string e = error_of([&] { pt::load_vocab_lines(dir, cfg); });
    CHECK(e.find(dir + "/vocab.txt") == 0);
    CHECK(e.find("17") != std::string::npos);
    fs::remove(dir + "/vocab.txt");
    CHECK(pt::load_vocab_lines(dir, cfg).empty());
    fs::remove_all(dir);
}

TEST_CASE("CLI: every broken input makes eval exit non-zero with one line naming the file, writing nothing") {
    const std::string base = fixture("bad/base_tiny");
    std::string work = temp_dir("cli_bad");
    std::string inputs = tiny_inputs(work);
    std::string out_dir = work + "/out";
    fs::create_directories(out_dir);
    const std::string dump = out_dir + "/logits.safetensors";
    std::string model = work + "/model";
    auto eval = [&] { return run_cli("eval --model " + model + " --inputs " + inputs + " --seq 6 --dump-logits " + dump); };

    copy_dir(base, model);   // the control
    Run ok = eval();
    REQUIRE_MESSAGE(ok.code == 0, ok.out);
    CHECK(fs::exists(dump));
    fs::remove(dump);

    struct Case {
        std::string target, why;   // the file in the model dir that breaks, and a word of the error
        std::function<void()> make;
    };
    auto from_fixture = [&](const std::string& name, const std::string& target) {
        return [=] { fs::copy_file(fixture("bad/" + name), model + "/" + target, fs::copy_options::overwrite_existing); };
    };
    std::vector<Case> cases;
    for (const auto& e : fs::directory_iterator(fixture("bad")))
        if (e.path().extension() == ".safetensors")
            cases.push_back({"model.safetensors", "", from_fixture(e.path().filename().string(), "model.safetensors")});
    cases.push_back({"vocab.txt", "[UNK]", from_fixture("vocab_no_unk.txt", "vocab.txt")});
    cases.push_back({"config.json", "hidden_size", from_fixture("config_missing_hidden_size.json", "config.json")});
    cases.push_back({"config.json", "divisible", from_fixture("config_heads_not_divisible.json", "config.json")});
    cases.push_back({model, "pdparams", [&] {   // only a (truncated) pdparams: not read, pointed to the converter
                         fs::remove(model + "/model.safetensors");
                         from_fixture("truncated.pdparams", "model_state.pdparams")();
                     }});
    cases.push_back({"model.safetensors", "", [&] {
                         std::string bytes = read_file(base + "/model.safetensors");
                         std::ofstream(model + "/model.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
                     }});
    cases.push_back({"model.safetensors", "I64", [&] {   // integer weights
                         std::vector<Entry> v = read_entries(base + "/model.safetensors");
                         Entry* w = entry(v, "ernie.encoder.layer.0.attention.self.key.weight");
                         w->dtype = "I64", w->bytes.resize(w->bytes.size() * 2);
                         write_entries(model + "/model.safetensors", v);
                     }});
    cases.push_back({"model.safetensors", "[8, 16]", [&] {   // the FFN weight transposed
                         std::vector<Entry> v = read_entries(base + "/model.safetensors");
                         entry(v, "ernie.encoder.layer.0.intermediate.dense.weight")->shape = {8, 16};
                         write_entries(model + "/model.safetensors", v);
                     }});
    cases.push_back({"vocab.txt", "vocab_size", [&] {
                         std::ofstream(model + "/vocab.txt", std::ios::app) << "extra\n";
                     }});
    // config.json sizes that the weights cannot hold fail before the model is allocated: 2^32 + 16
    // wrapped to 16 and loaded, 4e8 x 8 and 4e7 x 8 allocated gigabytes (the first one was killed).
    auto vocab_size = [&](const std::string& v) {
        return [=] {
            std::string cfg = read_file(base + "/config.json");
            cfg.replace(cfg.find("\"vocab_size\": 16"), 16, "\"vocab_size\": " + v);
            std::ofstream(model + "/config.json") << cfg;
        };
    };
    cases.push_back({"config.json", "\"vocab_size\" 4294967312 is out of range", vocab_size("4294967312")});
    cases.push_back({"config.json", "vocab_size 400000000 × hidden_size 8 is more than 2^31 elements", vocab_size("400000000")});
    cases.push_back({"config.json", "its sizes need at least 640001", vocab_size("40000000")});
    cases.push_back({"config.json", "not valid JSON (parse error at line", [&] {   // Python's json.dump writes NaN
                         std::string cfg = read_file(base + "/config.json");
                         cfg.replace(cfg.find("\"vocab_size\": 16"), 16, "\"vocab_size\": NaN");
                         std::ofstream(model + "/config.json") << cfg;
                     }});
    cases.push_back({"model.safetensors", "ernie.encoder.layer.0.output.dense.bias holds NaN or infinite values", [&] {
                         std::vector<Entry> v = read_entries(base + "/model.safetensors");
                         Entry* b = entry(v, "ernie.encoder.layer.0.output.dense.bias");
                         float nan = NAN;
                         std::memcpy(b->bytes.data() + 4, &nan, 4);
                         write_entries(model + "/model.safetensors", v);
                     }});
    REQUIRE(cases.size() >= 25);
    for (const Case& c : cases) {
        fs::remove_all(model);
        copy_dir(base, model);
        c.make();
        Run r = eval();
        INFO(c.target << " / " << c.why << ": " << r.out);
        CHECK(r.code != 0);
        CHECK(lines(r.out) == 1);
        CHECK(r.out.find(c.target[0] == '/' ? c.target : model + "/" + c.target) != std::string::npos);
        if (!c.why.empty()) CHECK(r.out.find(c.why) != std::string::npos);
        CHECK(fs::is_empty(out_dir));
    }
    fs::remove_all(work);
}

TEST_CASE("CLI: inspect shows control characters in names and metadata as '?'") {
    std::string dir = temp_dir("ctrl");
    std::vector<Entry> v = read_entries(fixture("bad/base_tiny/model.safetensors"));
    v[0].name = "evil\n\x1b[2Jname";
    write_entries(dir + "/x.safetensors", v);
    Run r = run_cli("inspect " + dir + "/x.safetensors");
    CHECK(r.code == 0);
    CHECK(r.out.find("evil??[2Jname") != std::string::npos);
    CHECK(r.out.find('\x1b') == std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("CLI: inspect lists the mapping of a good directory and fails on a bad one") {
    Run probe = run_cli("inspect " + fixture("ernie/nano-like/paddle"));
    if (probe.out.find("unknown command") != std::string::npos) {
        MESSAGE("pipetrain has no inspect command yet: calling inspect_main in-process");
        CHECK(pt::inspect_main({fixture("ernie/nano-like/paddle")}) == 0);
        return;
    }
    INFO(probe.out);
    CHECK(probe.code == 0);
    CHECK(probe.out.find("naming: paddle") != std::string::npos);
    CHECK(probe.out.find("ernie.encoder.layers.1.linear2.weight") != std::string::npos);
    CHECK(probe.out.find("-> ernie.encoder.layer.1.output.dense.weight (transposed)") != std::string::npos);
    CHECK(probe.out.find("-> ernie.pooler.dense.weight (transposed)") != std::string::npos);
    CHECK(probe.out.find("ok:") != std::string::npos);

    Run file = run_cli("inspect " + fixture("bad/valid_edge_cases.safetensors"));
    CHECK(file.code == 0);
    CHECK(file.out.find("scalar_f32 F32  []") != std::string::npos);

    Run broken = run_cli("inspect " + fixture("bad/huge_shape_overflow.safetensors"));
    CHECK(broken.code != 0);
    CHECK(lines(broken.out) == 1);

    // A directory with two problems: inspect lists both (a load stops at the first).
    std::string dir = temp_dir("inspect_bad");
    copy_dir(fixture("bad/base_tiny"), dir);
    std::vector<Entry> v = read_entries(dir + "/model.safetensors");
    entry(v, "ernie.encoder.layer.0.intermediate.dense.weight")->shape = {8, 16};
    v.erase(v.begin() + (entry(v, "cls.predictions.bias") - v.data()));
    write_entries(dir + "/model.safetensors", v);
    Run bad = run_cli("inspect " + dir);
    INFO(bad.out);
    CHECK(bad.code != 0);
    CHECK(bad.out.find("has shape [8, 16], expected [16, 8]") != std::string::npos);
    CHECK(bad.out.find("missing tensor cls.predictions.bias") != std::string::npos);
    CHECK(bad.out.find("2 errors") != std::string::npos);
    fs::remove_all(dir);

    // A stray tensor: a warning, and the directory loads; --strict makes it an error.
    copy_dir(fixture("bad/base_tiny"), dir);
    v = read_entries(dir + "/model.safetensors");
    v.push_back({"ernie.extra.weight", "F32", {2}, std::vector<uint8_t>(8, 0)});
    write_entries(dir + "/model.safetensors", v);
    Run lenient = run_cli("inspect " + dir), strict = run_cli("inspect " + dir + " --strict");
    INFO(lenient.out);
    INFO(strict.out);
    CHECK(lenient.code == 0);
    CHECK(lenient.out.find("warning: " + dir + "/model.safetensors: unexpected tensors, not used by the model: ernie.extra.weight") !=
          std::string::npos);
    CHECK(lenient.out.find("ok: " + dir + " loads") != std::string::npos);
    CHECK(strict.code == 1);
    CHECK(strict.out.find("error: " + dir + "/model.safetensors: unexpected tensors, not used by the model: ernie.extra.weight") !=
          std::string::npos);
    CHECK(strict.out.find("1 error: a load of " + dir + " fails") != std::string::npos);
    fs::remove_all(dir);
}
