// src/config.hpp — the model's shape: a preset, or read from config.json (src/ernie.hpp maps it).
#pragma once
#include <string>
#include <vector>

namespace pt {

struct ModelConfig {
    int vocab_size = 0;
    int hidden_size = 0;             // C
    int num_hidden_layers = 0;       // N blocks
    int num_attention_heads = 0;     // NH; head size HS = C / NH (26 for ernie-3.0-nano: never assume 2^k)
    int intermediate_size = 0;       // FFN width
    std::string hidden_act = "gelu"; // gelu (exact erf) | relu
    int max_position_embeddings = 0;
    int type_vocab_size = 0;
    int task_type_vocab_size = 0;    // used only when use_task_id
    bool use_task_id = false;
    float layer_norm_eps = 1e-12f;
    int pad_token_id = 0;
    int num_labels = 0;              // > 0: a sequence classifier head instead of the MLM head
    bool is_decoder = false;         // trained with the causal objective (ErnieForCausalLM)
    float hidden_dropout_prob = 0.1f;
    float attention_probs_dropout_prob = 0.1f;

    int head_size() const { return hidden_size / num_attention_heads; }

    // tiny, small, and the shapes of ernie-3.0-{nano,micro,mini,medium,base}-zh.
    static ModelConfig preset(const std::string& name);
};

}  // namespace pt
