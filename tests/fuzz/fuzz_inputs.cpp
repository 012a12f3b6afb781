// fuzz: max_len=4194304 seeds=ernie/*/inputs.safetensors bad/valid_edge_cases.safetensors dict=safetensors.dict
// The --inputs loader (pt::load_inputs: a fixed batch of I64 tensors from a safetensors file)
// for both objectives. An accepted batch must keep data.hpp's promise: every array is B*T long.
#include "tests/fuzz/fuzz_util.hpp"

#include "src/formats/corpus.hpp"

namespace {
void check_batch(const pt::Batch& b) {
    fuzz::expect(b.B >= 1 && b.T >= 1, "B and T are at least 1");
    const size_t n = size_t(b.B) * size_t(b.T);
    fuzz::expect(b.input_ids.size() == n && b.token_type_ids.size() == n && b.attention_mask.size() == n &&
                     b.targets.size() == n,
                 "every array of the batch is B*T long");
    fuzz::expect(b.task_type_ids.empty() || b.task_type_ids.size() == n, "task_type_ids is empty or B*T long");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz::as_file(data, size);
    for (pt::Objective obj : {pt::Objective::mlm, pt::Objective::causal}) {
        pt::Batch b;
        if (fuzz::parse([&] { b = pt::load_inputs(path, obj); })) check_batch(b);
    }
    return 0;
}
