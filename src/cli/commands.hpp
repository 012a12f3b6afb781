// src/cli/commands.hpp — the pipetrain commands (src/cli/main.cpp dispatches to them). Each takes
// the words after the command name and returns the exit code: 0 on success, non-zero after a
// one-line error on stderr (main prints the errors these throw).
#pragma once
#include <string>
#include <vector>

#include "pipeline.hpp"

namespace pt {

int train_main(const std::vector<std::string>& args, const std::string& program);   // trainer.cpp
int train_main(const std::vector<std::string>& args);   // program: "pipetrain"
int eval_main(const std::vector<std::string>& args);
int schedule_main(const std::vector<std::string>& args);
int partition_main(const std::vector<std::string>& args);
int fill_mask_main(const std::vector<std::string>& args);        // infer.cpp
int generate_main(const std::vector<std::string>& args);         // infer.cpp
int inspect_main(const std::vector<std::string>& args);          // inspect.cpp: FILE.safetensors | DIR [--strict]
int tokenize_main(const std::vector<std::string>& args);         // tokenize.cpp: --vocab FILE [--ids] (TEXT | --file F)
int vocab_main(const std::vector<std::string>& args);            // tokenize.cpp: --data F --out vocab.txt [--size N]
int bench_pipeline_main(const std::vector<std::string>& args);   // bench_pipeline.cpp
int bench_gemm_main(const std::vector<std::string>& args);       // bench_gemm.cpp

// schedules.cpp: --schedule NAME as a pp::Schedule (every name but auto, which needs costs), and
// the chunks per rank it takes when --chunks is not given (the V shape's two).
extern const char* const kScheduleNames;
pp::Schedule make_schedule(const std::string& name, int P, int M, int V);
int default_chunks(const std::string& name);
bool takes_chunks(const std::string& name);   // interleaved, interleaved-zb, looped-bfs: any --chunks V

}  // namespace pt
