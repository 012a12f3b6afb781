// pipetrain — the command line. Each subcommand lives next to the code it drives.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/parallel.hpp"
#include "src/cli/args.hpp"
#include "src/cli/commands.hpp"
#include "src/formats/checkpoint.hpp"
#include "src/formats/io.hpp"
#include "src/formats/lifecycle.hpp"
#include "src/formats/tokenizer.hpp"
#include "src/device.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace {

const char* kUsage =
    "usage: pipetrain COMMAND [flags]          (flags in [ ] are optional)\n"
    "  train      (--data F | --inputs F.safetensors) --out DIR [--model DIR | --preset NAME | --resume DIR]\n"
    "             [--stages P] [--micro-batches M] [--batch B] [--seq L] [--dp D [--zero 0|1] [--dp-overlap 1|0]] [--chunks V]\n"
    "             [--schedule gpipe|1f1b|interleaved|looped-bfs|zb-h1|zb-h2|interleaved-zb|zbv|v-half|v-min|dualpipev|auto]\n"
    "             [--schedule-file F.csv (PyTorch's schedule CSV)] [--memory-cap BYTES (auto)] [--recompute none|full]\n"
    "             [--partition time|params|memory|uniform] [--objective mlm|causal] [--vocab-size N] [--blocks N]\n"
    "             [--steps N] [--lr X] [--warmup N] [--weight-decay X] [--clip X] [--dropout P] [--seed S]\n"
    "             [--task classify --labels N [--eval DEV.tsv]] [--eval-every N]\n"
    "             [--save-every K [--keep K]] [--save-format hf|paddle] [--trace F.json] [--dump-grads F]\n"
    "             [--threads T] [--timeout SECONDS] [--device cpu|cuda[:N]] [--dtype fp32|bf16]\n"
    "             [--comm auto|thread|nccl|mpi] [--overwrite] [--dry-run]\n"
    "             defaults: --preset tiny --blocks the preset's --stages 1 --micro-batches 1 --batch 8 --seq 64\n"
    "             --dp 1 --zero 0 --dp-overlap 1 --chunks 1 (2 for zbv, v-half, v-min, dualpipev) --schedule gpipe (P = 1)\n"
    "             or 1f1b --recompute none --partition time --memory-cap P stashes --steps 10 --lr 1e-3\n"
    "             --warmup steps/10 (at least 1) --weight-decay 0.01 --clip 1 --dropout the model's (0.1) --seed 1234\n"
    "             --threads 1 --timeout 120 --device cpu --dtype fp32 --comm auto --save-format hf --keep 2\n"
    "             --eval-every steps/5 for a classifier, else 0 (never)\n"
    "             --overwrite: an --out that holds a model or checkpoints is cleared of them first; --dry-run: check\n"
    "             the flags and plan the pipeline, without reading --data, training or writing anything\n"
    "  eval       --model DIR (--data F | --inputs F.safetensors) [--objective mlm|causal] [--seq L]\n"
    "             [--seed S] [--threads T] [--dump-logits F]\n"
    "             defaults: --seq 64 --seed 1234 --threads 1, --objective the model's\n"
    "  fill-mask  --model DIR [--top K] TEXT           top-K tokens for each [MASK]; defaults: --top 5\n"
    "  generate   --model DIR --prompt TEXT [--tokens N] [--temperature X] [--top-k K] [--seed S]\n"
    "             defaults: --tokens 32 --temperature 0.8 --top-k 8 --seed 1\n"
    "  classify   --model DIR [--seq L] (TEXT... | --file F)   the label and its probabilities, per text\n"
    "             defaults: --seq 128, or the model's max_position_embeddings if fewer\n"
    "  inspect    FILE.safetensors | DIR [--strict]\n"
    "  export     --model DIR (--onnx | --web --js NODE_MODULES) --out ODIR [--task-type N] [--overwrite]\n"
    "             --onnx: ODIR/onnx/model.onnx (opset 17) with the config and tokenizer files, for onnxruntime and\n"
    "             transformers.js; --web: ODIR/index.html, the model in the browser (transformers.js and\n"
    "             onnxruntime-web copied from NODE_MODULES, nothing fetched); defaults: --task-type 0\n"
    "             ODIR: new or empty, never --model's own; --overwrite replaces a full one whole (written beside it,\n"
    "             then renamed into place: a failed export leaves nothing)\n"
    "  tokenize   --vocab FILE [--ids] (TEXT | --file F)   FILE: a vocab.txt, or a tokenizer.json\n"
    "  vocab      --data F --out vocab.txt [--size N]   defaults: --size 8000\n"
    "  schedule   [--stages P] [--micro-batches M] [--schedule S|auto] [--chunks V] [--costs f,bi,bw,comm]\n"
    "             [--memory-cap STASHES (auto)] [--overlap] [--trace F] [--svg F.svg]\n"
    "             [--import F.csv [--placement loop|v]] [--export F.csv]   PyTorch's schedule CSV (P, M, V from the file)\n"
    "             --predict (--preset NAME | --model DIR) [--blocks N] [--dp D] [--batch B] [--seq L] [--zero 0|1]\n"
    "             [--dp-overlap 1|0] [--dtype fp32|bf16] [--ranks-per-node N] [--links W_US,W_GBPS,A_US,A_GBPS]\n"
    "             [--flops F | --measured]: one step of that shape predicted (time, bubble, memory per rank) from a\n"
    "             link model (within a node, across nodes) and the model's FLOPs at F FLOP/s, or its layers timed here;\n"
    "             defaults: --preset ernie-3.0-base-zh --dp 1 --batch D*M --seq 512 --schedule gpipe (P = 1) or 1f1b\n"
    "             --ranks-per-node P*D --links 5,100,10,12.5 --flops 1e11\n"
    "             --compare: instead of one schedule, a table of bubble against peak activation memory for\n"
    "             1f1b, zb-h1, zbv, v-half and v-min at the same P, M and --costs\n"
    "             defaults: --stages 4 --micro-batches 8 --schedule 1f1b --chunks 1 (2 for zbv, v-half, v-min, dualpipev)\n"
    "             --costs 1,1,1,0 --memory-cap P\n"
    "  partition  (--model DIR | --preset NAME [--blocks N]) [--stages P] [--by time|params|memory|uniform] [--batch B]\n"
    "             [--seq L]   defaults: --stages 4 --by time --batch 4 --seq 64 (or the model's positions)\n"
    "  plot       OUT | --metrics F.jsonl [--trace F.json] [--schedule F.json] --out DIR\n"
    "             SVG pictures of a run: loss.svg, throughput.svg, timeline.svg (measured and simulated)\n"
    "  bench-pipeline [--preset NAME] [--blocks N] [--batch B] [--seq L] [--micro-batches M] [--stages 1,2,4]\n"
    "             [--schedules gpipe,1f1b,zbv,...,auto] [--chunks V] [--steps N] [--reps N]   measured vs simulated\n"
    "             defaults: --preset tiny --blocks the preset's --batch 16 --seq 64 --micro-batches 8 --stages 1,2,4\n"
    "             --schedules gpipe,1f1b --chunks 2 --steps 10 --reps 5\n"
    "  bench-gemm [--shapes MxNxK:nn,...] [--threads T] [--seconds S] [--kernel best|all|plain|avx2|avx512] [--peak]\n"
    "             GFLOP/s of the CPU GEMM; --peak: then one thread's FMA peak at each kernel's vector width\n"
    "             defaults: --shapes 1024x1024x1024:nn --threads 1 --seconds 0.5 --kernel best\n"
    "  bench-link [--comm thread|mpi] [--bytes N] [--reps N]   one link's latency and bandwidth (ping-pong of 2\n"
    "             ranks; mpi: 2 processes under mpirun), for schedule --predict --links\n"
    "             defaults: --comm mpi under an MPI launcher, else thread; --bytes 4194304 --reps 30\n"
    "any command: --no-verify loads model and checkpoint directories without checking their manifest\n"
    "             (pipetrain_manifest.json: each file's size and SHA-256); a checkpoint (trainer_state.json)\n"
    "             without one is refused unless it is given\n"
    "environment: PIPETRAIN_PROFILE=1 prints the time spent in each op at the end of any command\n"
    "             (and the GFLOP and GFLOP/s of the GEMMs and the attention);\n"
    "             PIPETRAIN_GEMM=plain|avx2|avx512 chooses the CPU GEMM micro-kernel (default: the best);\n"
    "             PIPETRAIN_LEND=0 keeps each pipeline rank (a thread, or an MPI process) on its own core\n"
    "             (default 1: a waiting rank's core runs pieces of the others' CPU kernels)\n";

// `pipetrain CMD --help`: CMD's lines of kUsage (its own and the indented ones continuing it), the
// first one as "usage: pipetrain CMD ...".
std::string usage_of(const std::string& cmd) {
    std::string out, line;
    bool in = false;
    for (std::istringstream lines(kUsage); std::getline(lines, line);) {
        if (line.rfind("  ", 0) == 0 && line[2] != ' ') {
            in = line.compare(2, cmd.size() + 1, cmd + " ") == 0;
            if (in) line = "usage: pipetrain " + cmd + " " + line.substr(line.find_first_not_of(' ', 2 + cmd.size()));
        }
        if (in) out += line + "\n";
    }
    return out;
}

using Command = int (*)(const std::vector<std::string>&);
const std::vector<std::pair<std::string, Command>> kCommands = {
    {"train", pt::train_main}, {"eval", pt::eval_main}, {"fill-mask", pt::fill_mask_main},
    {"generate", pt::generate_main}, {"classify", pt::classify_main}, {"inspect", pt::inspect_main}, {"export", pt::export_main},
    {"tokenize", pt::tokenize_main}, {"vocab", pt::vocab_main}, {"schedule", pt::schedule_main},
    {"partition", pt::partition_main}, {"plot", pt::plot_main}, {"bench-pipeline", pt::bench_pipeline_main},
    {"bench-gemm", pt::bench_gemm_main}, {"bench-link", pt::bench_link_main}};

int run(const std::string& cmd, const std::vector<std::string>& args, const char* program) {
    if (cmd == "train") return pt::train_main(args, program);   // 130/143 after Ctrl-C/SIGTERM
    std::vector<std::string> names;
    for (const auto& [name, command] : kCommands) {
        if (name == cmd) return command(args);
        names.push_back(name);
    }
    std::string nearest = pt::nearest_name(cmd, names);
    std::fprintf(stderr, "pipetrain: unknown command \"%s\"%s (pipetrain --help lists them)\n", pt::printable(cmd).c_str(),
                 nearest.empty() ? "" : ("; did you mean " + nearest + "?").c_str());
    return 2;
}

// PIPETRAIN_PROFILE=1: the ops' wall time (every thread's calls added up), slowest first.
void print_op_profile(double wall) {
    const std::vector<pt::OpTime> ops = pt::op_profile();
    double sum = 0;
    for (const pt::OpTime& t : ops) sum += t.seconds;
    std::printf("op profile (PIPETRAIN_PROFILE): %.3f s in ops, %.3f s wall (all threads' op time added up)\n", sum, wall);
    std::printf("%-28s %10s %9s %7s %12s %8s\n", "op", "seconds", "calls", "share", "GFLOP", "GFLOP/s");
    for (const pt::OpTime& t : ops) {
        std::printf("%-28s %10.3f %9lld %6.1f%%", t.name, t.seconds, t.calls, 100 * t.seconds / std::max(sum, 1e-12));
        if (t.flops > 0) std::printf(" %12.6f %8.1f", t.flops * 1e-9, t.flops * 1e-9 / std::max(t.seconds, 1e-12));
        std::printf("\n");
    }
}

// The command's exit code, or 1 where what it printed was lost (a full disk, /dev/full): said on
// stderr, as coreutils do, not an exit 0 with the output cut short.
int stdout_written(const std::string& cmd, int rc) {
    errno = 0;
    if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return rc;
    std::fprintf(stderr, "pipetrain %s: cannot write to stdout%s%s\n", pt::printable(cmd).c_str(), errno ? ": " : "", errno ? std::strerror(errno) : "");
    return rc ? rc : 1;
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
    // Every micro-batch allocates and frees the same activation buffers. By default glibc maps
    // large blocks afresh (mmap), gives each stage thread an arena of its own and returns freed
    // memory to the OS, so every step page-faults its memory in again (5-10% of a CPU pipeline
    // step; M_MMAP_THRESHOLD alone cannot stop it: its limit is 32 MiB, and thread arenas trim
    // anyway). One heap, no mmap, no trimming: freed memory is reused, and the peak stays the peak.
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
        std::fputs(kUsage, argc < 2 ? stderr : stdout);
        return stdout_written("--help", argc < 2 ? 2 : 0);
    }
    std::string cmd = argv[1];
    std::vector<std::string> args(argv + 2, argv + argc);
    auto no_verify = std::find(args.begin(), args.end(), "--no-verify");
    if (no_verify != args.end()) pt::set_verify_manifests(false), args.erase(no_verify);
    for (const std::string& a : args)
        if ((a == "--help" || a == "-h") && !usage_of(cmd).empty()) return std::printf("%s", usage_of(cmd).c_str()), stdout_written(cmd, 0);
    try {
        const auto t0 = std::chrono::steady_clock::now();
        ops::lending_on();   // a bad PIPETRAIN_LEND fails here, before any work
        int rc = run(cmd, args, argv[0]);
        if (pt::op_profiling()) print_op_profile(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        return stdout_written(cmd, rc);
    } catch (const std::exception& e) {
        // An allocation that failed on a stage's thread arrives wrapped, naming its rank and action.
        std::string why = e.what();
        if (why.size() >= 14 && why.compare(why.size() - 14, 14, "std::bad_alloc") == 0)
            why += cmd == "train" ? ": out of memory (a smaller --batch or --seq, or more --micro-batches, needs less)" : ": out of memory";
        // printable: a flag's value or a TEXT quoted in the message may hold control characters
        std::fprintf(stderr, "pipetrain %s: %s\n", pt::printable(cmd).c_str(), pt::printable(why).c_str());
        return 1;
    }
}
