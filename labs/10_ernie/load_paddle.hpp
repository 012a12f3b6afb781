// labs/10_ernie/load_paddle.hpp — lab 10's contract: what your load_paddle.cpp defines.
// Read tests/fixtures/ernie/README.md ("Name mapping" and its pitfall) and tutorial 11's steps 2-3
// first, then labs/10_ernie/README.md.
#pragma once
#include <string>
#include <vector>

#include "src/formats/safetensors.hpp"   // pt::st::File: a file's tensors, already read and checked
#include "src/model.hpp"   // pt::Layer, pt::ParamInfo: the model's parameters

namespace student {

// Task 1. The model's name (its pt::ParamInfo::name: Hugging Face ErnieForMaskedLM's) of the
// tensor a PaddleNLP checkpoint calls `paddle_name`, e.g.
//   ernie.encoder.layers.0.self_attn.q_proj.weight -> ernie.encoder.layer.0.attention.self.query.weight
// and "" for a tensor the model does not load: cls.predictions.decoder_weight, the copy of the
// word embeddings that PaddleNLP's .pdparams files hold (the decoder is tied to them).
// *transpose: true for a Linear weight, which PaddleNLP stores [in, out] and the model [out, in];
// false for everything else (biases, LayerNorms, the embedding tables).
std::string to_model_name(const std::string& paddle_name, bool* transpose);

// Tasks 2-3. Copies every tensor of `file` (a PaddleNLP-named model.safetensors) into the parameters
// of `layers` (the model as [Embedding, Block 0..N-1, Head]). For each tensor of file.tensors (its
// .name and .shape; file.to_f32(name) gives its numbers, row-major): the parameter named
// to_model_name(...) in some layer's params_info; its shape checked (the file's is the
// parameter's, reversed for a transposed tensor); Linear weights transposed, [in, out] -> [out, in];
// the numbers copied to layer->params.data() + offset. The Head holds a second copy of the word
// embeddings (the tied decoder, ParamInfo::tied): it gets them too. Throws std::runtime_error naming
// the tensor when its name maps to no parameter or a shape differs.
void load_paddle(const std::vector<pt::Layer*>& layers, const pt::st::File& file);

}   // namespace student
