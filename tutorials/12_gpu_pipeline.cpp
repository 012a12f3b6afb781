// Tutorial 12 — the pipeline on GPUs.
//
// The same TransformerStage and pp::Pipeline as in tutorials 05-10; only the device changes.
// Each rank's thread selects its GPU (rank r on GPU r mod the number of GPUs) and its own CUDA
// stream; its arrays live there and every op runs the CUDA kernel (src/device.hpp). With one GPU
// all four stages share it and pass activations by device-to-device copies; with several, the
// CLI uses NCCL (src/nccl_comm.hpp). Without a GPU this lab runs on CPU threads and says so.
//
// Run: build/tutorial_12_gpu_pipeline   (writes runs/tutorial12-<pid>/timeline.json)
#include "tutorials/common.hpp"

using namespace lab;

int main() {
    const int P = 4, M = 8, T = 64, rows = 4;
    Data data = load_data(T);
    Batch batch = batch_of(data, rows * M);
    pp::Schedule schedule = pp::one_f_one_b(P, M);
    int gpus = cuda_device_count();

    std::printf("== step 1: where the stages go ==\n");
    if (gpus == 0) std::printf("no CUDA device here: CPU threads stand in for the GPUs (steps 2 and 4 need one).\n");
    for (int r = 0; r < P; r++)
        std::printf("  stage %d -> %s, stream %d\n", r, gpus ? ("cuda:" + std::to_string(r % gpus)).c_str() : "cpu", r);
    std::printf("look at: with one GPU the four stages share it; their streams let one stage compute while\n"
                "another waits for a message.\n\n");

    Device gpu = gpus ? parse_device("cuda") : Device{};
    if (gpus) {
        std::printf("== step 2: one step on the CPU and on the GPU, from the same weights ==\n");
        Stages cpu_model = make_stages(data.cfg, P), gpu_model = make_stages(data.cfg, P);
        gpu_model.device = gpu;
        StepResult c = step_on_threads(cpu_model, schedule, batch, 0, false), g = step_on_threads(gpu_model, schedule, batch, 0, false);
        std::printf("  loss: cpu %.9f  gpu %.9f  relative difference %.1e\n", c.loss, g.loss, std::fabs(g.loss - c.loss) / c.loss);
        compare(gpu_model, cpu_model, true);
        std::printf("look at: about 1e-6, not 0. A GPU kernel adds the same numbers in another order (a tree\n"
                    "of warp sums instead of a loop), and float addition is not associative.\n\n");
    }

    std::printf("== step 3: the measured timeline, 1F1B, P = %d, M = %d, %d rows of %d tokens each ==\n", P, M, rows, T);
    Stages model = make_stages(data.cfg, P);
    model.device = gpu;
    print_split(model);
    StepResult r = measure(model, schedule, batch);
    pp::SimResult sim = pp::simulate(schedule, pp::Costs{1, 1, 1, 0});
    std::printf("%s", pp::ascii_timeline(r.events, P, 100).c_str());
    std::printf("  step %.2f ms | bubble measured %.1f%% | simulated with equal stages %.1f%%\n", r.makespan / 1000,
                100 * r.bubble, 100 * sim.bubble);
    loaded(P, r);
    std::string trace = fresh_run_dir("12") + "/timeline.json";   // this run's own: two runs never collide
    write_file_atomic(trace, pp::chrome_trace(r.events));
    std::printf("  wrote %s (open it in https://ui.perfetto.dev)\n", trace.c_str());
    if (gpus == 1)
        std::printf("look at: the four stages share one GPU, so they overlap only as far as it has room for the\n"
                    "kernels of several streams at once; compare the step time with --stages 1 in the CLI.\n\n");
    else if (gpus > 1)
        std::printf("look at: each stage has its own GPU; the bubble is the pipeline's, as in tutorial 07.\n\n");
    else
        std::printf("look at: the same timeline as tutorial 07 draws, made by the code a GPU would run.\n\n");

    if (gpus) {
        std::printf("== step 4: two GPU runs give the same bits ==\n");
        Stages a = make_stages(data.cfg, P), b = make_stages(data.cfg, P);
        a.device = b.device = gpu;
        for (int step = 0; step < 2; step++) step_on_threads(a, schedule, batch, step), step_on_threads(b, schedule, batch, step);
        compare(a, b, false);
        std::printf("look at: bitwise equal. Every CUDA reduction runs in a fixed order (no atomics), so the\n"
                    "GPU is deterministic even though it is not bitwise equal to the CPU.\n\n");
    }
    std::printf("Question: with one GPU, would the 4-stage pipeline ever beat one stage? What does\n"
                "pipelining buy when all stages share the same device?\n");
    std::printf("answer: docs/answers.md, section \"12 gpu pipeline\"\n");
    return 0;
}
