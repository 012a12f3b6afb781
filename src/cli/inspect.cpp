// `pipetrain inspect FILE.safetensors | DIR [--strict]`: what a load would see, for when a load
// fails. A file: its tensors and the model names they map to. A model directory: also the
// config, the vocab, and every problem a load would report (all of them, not just the first).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "src/cli/args.hpp"
#include "src/cli/train.hpp"
#include "src/formats/checkpoint.hpp"
#include "src/formats/lifecycle.hpp"

namespace pt {

namespace {

// Names and metadata come from the file: control characters in them would break the listing or
// drive the terminal, so they are shown as '?'.
std::string printable(std::string s) {
    for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return s;
}

void print_tensors(const Checkpoint& c) {
    bool paddle = c.convention == "paddle";
    size_t n = 0, width = 0;
    for (const st::File& f : c.files)
        for (const st::TensorInfo& t : f.tensors) n++, width = std::max(width, t.name.size());
    std::printf("weights: %s, %zu tensors in %zu file%s\n", c.path.c_str(), n, c.files.size(),
                c.files.size() > 1 ? "s" : "");
    std::printf("naming: %s\n", paddle ? "paddle (PaddleNLP names, Linear weights [in, out]: transposed on load)"
                                       : "hf (Hugging Face names, Linear weights [out, in])");
    for (const st::File& f : c.files) {
        std::string meta;
        for (const auto& [k, v] : f.metadata) meta += (meta.empty() ? "" : ", ") + printable(k) + "=" + printable(v);
        std::printf("%s: %zu tensors, %zu data bytes%s%s\n", f.path.c_str(), f.tensors.size(), f.data.size(),
                    meta.empty() ? "" : ", metadata ", meta.c_str());
        for (const st::TensorInfo& t : f.tensors) {
            bool transpose = false;
            std::string m = to_model_name(t.name, paddle, &transpose);
            std::string shape = shape_str(t.shape);
            std::printf("  %-*s %-4s %-14s -> %s%s\n", int(width), printable(t.name).c_str(), t.dtype.c_str(), shape.c_str(),
                        m.empty() ? "(ignored buffer)" : printable(m).c_str(), transpose ? " (transposed)" : "");
        }
    }
}

}  // namespace

int inspect_main(const std::vector<std::string>& argv) {
    Args a(argv, {}, {"--strict"}, true);
    if (a.positional().size() != 1)
        throw std::runtime_error("expected one FILE.safetensors or model DIR (inspect FILE | DIR [--strict])");
    const std::string target = a.positional()[0];
    if (!std::filesystem::is_directory(target)) {
        print_tensors(open_checkpoint_file(target));   // a bad file throws its one-line reason
        return 0;
    }
    int errors = 0;
    auto report = [&](Problem::Kind kind, const std::string& msg) {
        const char* tag[] = {"error", "warning", "note"};
        std::printf("%s: %s\n", tag[kind], msg.c_str());
        errors += kind == Problem::error;
    };
    std::unique_ptr<ModelConfig> cfg;
    try {   // the manifest first: a directory that fails it is refused whatever else it holds
        verify_dir(target);
        size_t sealed = read_manifest(target).size();
        if (sealed && !verifying_manifests()) std::printf("manifest: %zu files listed, not checked (--no-verify)\n", sealed);
        else if (sealed) std::printf("manifest: %zu files match their sizes and SHA-256 (%s)\n", sealed, kManifest);
        else std::printf("manifest: none (not written by pipetrain): files not checked\n");
        cfg = std::make_unique<ModelConfig>(load_model_config(target));
        std::printf("config: vocab %d, hidden %d, layers %d, heads %d (head size %d), intermediate %d, act %s, "
                    "max_pos %d, token types %d, task ids %s, layer_norm_eps %g, labels %d\n",
                    cfg->vocab_size, cfg->hidden_size, cfg->num_hidden_layers, cfg->num_attention_heads,
                    cfg->head_size(), cfg->intermediate_size, cfg->hidden_act.c_str(), cfg->max_position_embeddings,
                    cfg->type_vocab_size, cfg->use_task_id ? std::to_string(cfg->task_type_vocab_size).c_str() : "no",
                    double(cfg->layer_norm_eps), cfg->num_labels);
        size_t lines = load_vocab_lines(target, *cfg).size();
        if (lines) std::printf("vocab: %zu tokens for %d embedding rows\n", lines, cfg->vocab_size);
        else report(Problem::error, target + "/vocab.txt: missing, and no tokenizer.json (text cannot be tokenized for this model)");
    } catch (const std::exception& e) {
        report(Problem::error, e.what());
    }
    try {
        Checkpoint c = open_checkpoint(target);
        print_tensors(c);
        if (cfg) {
            ForwardModel model = forward_model(*cfg);
            for (const Problem& p : check_checkpoint(c, model.layers, a.has("--strict"))) report(p.kind, p.message);
        }
    } catch (const std::exception& e) {
        report(Problem::error, e.what());
    }
    std::fflush(stdout);   // the listing first: through a pipe, stdout is flushed in 4 KiB blocks
    if (errors) std::fprintf(stderr, "%d error%s: a load of %s fails\n", errors, errors > 1 ? "s" : "", target.c_str());
    else std::printf("ok: %s loads\n", target.c_str());
    return errors ? 1 : 0;
}

}  // namespace pt
