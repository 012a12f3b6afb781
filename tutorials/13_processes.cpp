// Tutorial 13 — the same 4-stage step as threads and as processes.
//
// Until now every rank was a thread of one process, and a message was a copy between queues in
// one memory (src/comm.hpp). Here each rank is a process of its own, started by mpirun, and the
// messages go through MPI (src/mpi_comm.hpp). The stage, pp::Pipeline and train_step are the
// same; only the pp::Comm changes. This binary re-launches itself as the four workers (--worker
// DIR): each builds only its own stage, runs the step and writes its parameters and timeline
// into DIR, and this process reads them back and compares them with the threads'.
//
// Run: build/tutorial_13_processes   (the process run needs a build with MPI and mpirun on PATH)
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <fstream>

#include "src/mpi_comm.hpp"
#include "tutorials/common.hpp"

using namespace lab;

const int P = 4, M = 8, T = 32, rows = 1;
double launch_s = -1, process_step_ms = -1;   // what step 2 measured, if it ran

double resident_mb() {   // this process's resident memory: code, libraries, heap
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
    return 0;
}

double now_us() {   // steady_clock is CLOCK_MONOTONIC: one clock for every process of a machine
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One rank of the MPI job: its stage only, a warm-up step and the step of step 1, then in DIR
// rankR.params (its layers' floats, in model order) and rankR.txt (its clock and its timeline).
int worker(const std::string& dir) {
    pt::MpiWorld world(30.0);   // every wait of this process has a 30 s deadline
    if (world.size() != P) world.abort("tutorial 13 needs " + std::to_string(P) + " ranks");
    const int rank = world.rank();
    RankPlace at{P, 1, rank, 0};
    std::unique_ptr<TransformerStage> stage;
    double origin = 0;
    std::vector<pp::Event> events;
    pt::run_mpi_rank(world, [&](pp::Comm& comm) {   // a throw here ends the job with "rank R (HOST): why"
        Data data = read_data(T);   // silently: the launcher already said which corpus
        Batch batch = batch_of(data, rows * M);
        stage = make_stage(data.cfg, split_by_flops(data.cfg, P)[rank]);
        Optimizer opt(*stage);
        pp::Pipeline pipe(pp::one_f_one_b(P, M), 1, *stage, comm, rank, at.pipeline_group());
        for (int i = 0; i < 2; i++) {   // as lab::step_on_threads does it, twice: without and with the update
            StepHooks hooks;
            hooks.start = [&] {
                comm.barrier();   // start the clocks together
                auto exit = std::chrono::steady_clock::now();   // events in µs since this process's own barrier exit
                origin = std::chrono::duration<double, std::micro>(exit.time_since_epoch()).count();
                return exit;
            };
            Update u;
            u.apply = i == 1;
            train_step(pipe, comm, *stage, opt, data.cfg, at, batch, M, u, hooks);
        }
        events = pipe.timeline();
    });
    std::ofstream params(dir + "/rank" + std::to_string(rank) + ".params", std::ios::binary);
    for (Layer* l : stage->layers()) params.write((const char*)l->params.data(), l->params.size() * sizeof(float));
    std::ofstream text(dir + "/rank" + std::to_string(rank) + ".txt");
    text << "origin_us " << std::fixed << origin << "\nresident_mb " << resident_mb() << "\n";
    for (const pp::Event& e : events)   // op micro-batch chunk comm start_us end_us
        text << "FBIW"[int(e.action.op)] << ' ' << e.action.microbatch << ' ' << e.action.chunk << ' ' << e.comm << ' '
             << e.start << ' ' << e.end << "\n";
    params.close(), text.close();
    return params && text ? 0 : 1;
}

// Rank r's file against the thread run's stage r: "" if every bit agrees, else the first tensor.
std::string first_difference(TransformerStage& stage, const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    for (Layer* l : stage.layers()) {
        std::vector<float> got(l->params.size());
        if (!in.read((char*)got.data(), got.size() * sizeof(float))) return "(" + path + " is too short)";
        for (const ParamInfo& pi : l->params_info)
            if (std::memcmp(got.data() + pi.offset, l->params.data() + pi.offset, pi.numel * sizeof(float)) != 0) return pi.name;
    }
    return "";
}

size_t param_bytes(TransformerStage& stage) {
    size_t n = 0;
    for (Layer* l : stage.layers()) n += l->params.size() * sizeof(float);
    return n;
}

// Steps 2 and 3: launches this binary as the P workers, reads their files back, compares.
int processes(Stages& threads, const StepResult& rt) {
    std::string dir = std::filesystem::absolute(fresh_run_dir("13")).string();   // this run's own
    std::string cmd = "timeout 120 '" PT_SOURCE_DIR "/scripts/mpirun.sh' " + std::to_string(P) + " '" +
                      std::filesystem::read_symlink("/proc/self/exe").string() + "' --worker '" + dir + "'";
    std::fflush(stdout);   // the workers' lines, if any, after ours
    double t0 = now_us();
    int rc = std::system(cmd.c_str());
    launch_s = (now_us() - t0) / 1e6;
    if (rc != 0) {
        std::printf("the process run failed (exit status %d%s): %s\n", WEXITSTATUS(rc),
                    WEXITSTATUS(rc) == 124 ? ", timed out after 120 s" : "", cmd.c_str());
        return 1;
    }
    double origins[P], resident[P];
    std::vector<pp::Event> events;
    for (int r = 0; r < P; r++) {
        std::ifstream in(dir + "/rank" + std::to_string(r) + ".txt");
        std::string key;
        if (!(in >> key >> origins[r] >> key >> resident[r])) {
            std::printf("rank %d wrote no %s/rank%d.txt\n", r, dir.c_str(), r);
            return 1;
        }
        pp::Event e;
        char op;
        for (e.rank = r; in >> op >> e.action.microbatch >> e.action.chunk >> e.comm >> e.start >> e.end;) {
            e.action.op = pp::Op(std::string("FBIW").find(op));
            events.push_back(e);
        }
    }
    // Every process timed its events from its own barrier exit: put them all on the earliest one.
    double first = *std::min_element(origins, origins + P), last = *std::max_element(origins, origins + P);
    for (pp::Event& e : events) e.start += origins[e.rank] - first, e.end += origins[e.rank] - first;
    double makespan = 0;
    measured_bubble(events, P, &makespan);
    std::printf("%s  step %.2f ms | the barrier exits spread over %.0f µs | mpirun took %.2f s in all\n",
                pp::ascii_timeline(events, P, 100).c_str(), makespan / 1000, last - first, launch_s);
    std::printf("  step time: processes / threads = %.2f\n", makespan / rt.makespan);
    process_step_ms = makespan / 1000;
    std::printf("look at: the same rows of F and B. The barrier exits are put on one axis by steady_clock\n"
                "(CLOCK_MONOTONIC, one clock for every process of a machine): exact here. Drawn from each\n"
                "process's own exit instead, a rank could be off by the spread above.\n\n");

    std::printf("== step 3: the processes' parameters against the threads', and what each holds ==\n");
    std::string diff;
    int r = 0;
    for (; r < P && diff.empty(); r++) diff = first_difference(*threads.stages[r], dir + "/rank" + std::to_string(r) + ".params");
    if (diff.empty()) std::printf("  parameters: bitwise equal (every layer of the %d ranks)\n", P);
    else std::printf("  parameters: first differing tensor %s (rank %d)\n", diff.c_str(), r - 1);
    size_t all = 0;
    for (auto& stage : threads.stages) all += param_bytes(*stage);
    std::printf("  threads: one process holds all %s of parameters, %.0f MB resident\n", kb(double(all)).c_str(), resident_mb());
    for (int r = 0; r < P; r++)
        std::printf("  process %d holds only its stage: %s of parameters, %.0f MB resident\n", r,
                    kb(double(param_bytes(*threads.stages[r]))).c_str(), resident[r]);
    std::printf("  wrote %s/rank*.txt (the timelines, in µs) and rank*.params\n", dir.c_str());
    std::printf("look at: identical bits. Every sum runs in a fixed order (the micro-batches, the tied\n"
                "embedding's two gradients, the norm over the ranks), whatever carries the messages.\n"
                "Each process also carries its own program, MPI library and corpus: the resident sizes.\n\n");
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 3 && std::string(argv[1]) == "--worker") return worker(argv[2]);
    Data data = load_data(T);
    Batch batch = batch_of(data, rows * M);
    pp::Schedule schedule = pp::one_f_one_b(P, M);

    std::printf("== step 1: one 1F1B step, P = %d, M = %d, the ranks as threads ==\n", P, M);
    Stages threads = make_stages(data.cfg, P);
    print_split(threads);
    size_t all = 0;
    std::printf("parameters per rank:");
    for (auto& stage : threads.stages) {
        std::printf(" %s", kb(double(param_bytes(*stage))).c_str());
        all += param_bytes(*stage);
    }
    std::printf(" (%s in all)\n", kb(double(all)).c_str());
    step_on_threads(threads, schedule, batch, 0, false);   // a warm-up: caches and allocations
    StepResult rt = step_on_threads(threads, schedule, batch);
    std::printf("%s  step %.2f ms\n", pp::ascii_timeline(rt.events, P, 100).c_str(), rt.makespan / 1000);
    std::printf("look at: the timeline of tutorial 07; every message is a copy inside one process.\n\n");

    std::printf("== step 2: the same step, the ranks as %d processes (scripts/mpirun.sh) ==\n", P);
    if (!pt::mpi_built())
        std::printf("MPI unavailable: this build has no MPI (install libopenmpi-dev openmpi-bin, configure and "
                    "build again); steps 2 and 3 are skipped.\n\n");
    else if (std::system("command -v \"${MPIRUN:-mpirun}\" >/dev/null 2>&1") != 0)
        std::printf("MPI unavailable: no mpirun on PATH; steps 2 and 3 are skipped.\n\n");
    else if (processes(threads, rt) != 0)
        return 1;

    std::printf("look at: where the processes pay. Every activation and gradient is copied by MPI through\n"
                "shared memory (or TCP) instead of between queues of one memory, and a waiting rank polls\n"
                "MPI (src/mpi_comm.hpp), so it may see a message late.\n");
    if (launch_s >= 0)
        std::printf("Starting %d processes and MPI took %.2f s, %s the step itself (%.2f ms).\n", P, launch_s,
                    launch_s * 1000 > process_step_ms ? "more than" : "less than", process_step_ms);
    std::printf("In return each address space holds only its own stage, so a model too big for one process\n"
                "(or one machine) fits, and no rank can write into another's memory.\n\n");
    std::printf("question: which part of the step grows with processes, the compute (F, B) or the '.' gaps\n"
                "between them? If ranks 0-1 and 2-3 were on two machines, which message would cross the\n"
                "network, how would its cost change with the activation size, and why could the timelines\n"
                "no longer be put on one axis by reading one clock?\n");
    std::printf("answer: docs/answers.md, section \"13 processes\"\n");
    return 0;
}
