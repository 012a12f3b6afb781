// src/config.cpp — the presets (see config.hpp); config.json ↔ ModelConfig is src/ernie.cpp.
#include "src/config.hpp"

#include <stdexcept>

namespace pt {

namespace {
struct Preset { const char* name; int V, C, L, NH, I, max_pos, types, tasks; bool use_task; };
// ERNIE 3.0 shapes from the released configs (vocab 40000, 2048 positions, 4 token types).
const Preset kPresets[] = {
    {"tiny", 4000, 64, 4, 4, 256, 128, 2, 0, false},
    {"small", 8000, 256, 6, 4, 1024, 512, 2, 0, false},
    {"ernie-3.0-nano-zh", 40000, 312, 4, 12, 1248, 2048, 4, 16, true},
    {"ernie-3.0-micro-zh", 40000, 384, 4, 12, 1536, 2048, 4, 16, true},
    {"ernie-3.0-mini-zh", 40000, 384, 6, 12, 1536, 2048, 4, 16, true},
    {"ernie-3.0-medium-zh", 40000, 768, 6, 12, 3072, 2048, 4, 16, true},
    {"ernie-3.0-base-zh", 40000, 768, 12, 12, 3072, 2048, 4, 3, true},
};
}  // namespace

ModelConfig ModelConfig::preset(const std::string& name) {
    for (const Preset& p : kPresets) {
        if (name != p.name) continue;
        ModelConfig c;
        c.vocab_size = p.V, c.hidden_size = p.C, c.num_hidden_layers = p.L;
        c.num_attention_heads = p.NH, c.intermediate_size = p.I;
        c.max_position_embeddings = p.max_pos, c.type_vocab_size = p.types;
        c.task_type_vocab_size = p.tasks, c.use_task_id = p.use_task;
        return c;
    }
    std::string all;
    for (const Preset& p : kPresets) all += std::string(all.empty() ? "" : ", ") + p.name;
    throw std::runtime_error("unknown preset \"" + name + "\" (expected one of " + all + ")");
}

}  // namespace pt
