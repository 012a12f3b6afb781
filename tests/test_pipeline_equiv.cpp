// Parallel equals serial: training through P stages with any schedule and any recompute policy
// gives the same bits as one device; D data-parallel replicas equal one replica with D times
// the micro-batches up to rounding; 1F1B bounds the activation memory that GPipe lets grow.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline_lab.hpp"
#include "src/formats/safetensors.hpp"
#include "tests/cli_util.hpp"

using namespace test;

namespace {

const std::string kSample = fixture("text/sample_zh.txt");
const std::string kCommon = " --preset tiny --data " + kSample + " --steps 3 --seq 16 --seed 7 --dropout 0.1 ";

std::string train(const std::string& name, const std::string& args, int batch = 8, const std::string& preset = "tiny") {
    std::string out = temp_dir(name);
    Run r = run_cli("train" + kCommon + " --preset " + preset + " --batch " + std::to_string(batch) + " --out " + out + " " + args);
    INFO(args);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    return out + "/model.safetensors";
}

// "" when equal, else the first differing tensor and element. With rel_tol > 0, elements may
// differ by rel_tol times the largest magnitude in the whole file: relative to the model, not
// to each tensor, because some tensors (the key biases, whose true gradient is zero) hold only
// rounding noise that Adam scales up to a full step.
std::string first_difference(const std::string& a_path, const std::string& b_path, double rel_tol) {
    pt::st::File a = pt::st::read(a_path), b = pt::st::read(b_path);
    if (a.tensors.size() != b.tensors.size()) return "different tensor lists";
    double max_abs = 0;
    for (const auto& t : a.tensors)
        for (float v : a.to_f32(t.name)) max_abs = std::max(max_abs, double(std::fabs(v)));
    for (const auto& t : a.tensors) {
        std::vector<float> x = a.to_f32(t.name), y = b.to_f32(t.name);
        for (size_t i = 0; i < x.size(); i++) {
            bool same = rel_tol == 0 ? std::memcmp(&x[i], &y[i], sizeof(float)) == 0
                                     : std::fabs(double(x[i]) - y[i]) <= rel_tol * max_abs;
            if (!same) {
                std::ostringstream s;
                s.precision(9);
                s << t.name << "[" << i << "]: " << x[i] << " vs " << y[i];
                return s.str();
            }
        }
    }
    return "";
}

// The loss of each step, as metrics.jsonl beside MODEL holds it (full precision).
std::vector<double> losses(const std::string& model) {
    std::istringstream in(read_file(model.substr(0, model.rfind('/')) + "/metrics.jsonl"));
    std::vector<double> v;
    for (std::string line; std::getline(in, line);) v.push_back(nlohmann::json::parse(line).at("loss").get<double>());
    return v;
}

std::vector<double> peak_stash(const std::string& out) {
    std::vector<double> v;
    std::istringstream in(out.substr(out.rfind("peak stash bytes per stage:") + 27));
    double x;
    while (in >> x) v.push_back(x);
    return v;
}

}  // namespace

TEST_CASE("P in {1,2,4} x every schedule x recompute gives bitwise-identical parameters") {
    // The reference is one device (P = 1), so a bug of one schedule is blamed on that schedule.
    std::string reference = train("ref", "--stages 1 --micro-batches 4");
    struct Config { int P; std::string schedule; int V; };
    std::vector<Config> grid = {{1, "1f1b", 1},        {1, "zb-h1", 1},       {1, "interleaved", 3},
                                {2, "gpipe", 1},       {2, "1f1b", 1},        {2, "interleaved", 2},
                                {2, "interleaved", 3}, {2, "zb-h1", 1},       {4, "gpipe", 1},
                                {4, "1f1b", 1},        {4, "interleaved", 1}, {4, "zb-h1", 1}};
    int n = 0;
    for (const Config& c : grid)
        for (const char* recompute : {"none", "full"}) {
            std::string args = "--stages " + std::to_string(c.P) + " --micro-batches 4 --schedule " + c.schedule +
                               " --chunks " + std::to_string(c.V) + " --recompute " + recompute;
            std::string model = train("grid" + std::to_string(n++), args);
            CHECK_MESSAGE(first_difference(reference, model, 0) == "", args << " against one device (P = 1)");   // bit for bit
            CHECK_MESSAGE(losses(model) == losses(reference), args << ": the losses printed");   // recomputing counts no loss twice
        }
}

// The schedules of issues #18 and #34. P = 4 with two chunks per rank needs 8 virtual stages: the small
// preset (6 blocks, embedding and head) has 8 layers, the tiny one 6.
TEST_CASE("looped BFS, interleaved ZB, ZB-H2, ZB-V, V-Half, V-Min, DualPipeV and auto: the bits of one device") {
    for (int P : {2, 4}) {
        std::string preset = P == 2 ? "tiny" : "small";
        int M = 2 * P;
        std::string mb = " --micro-batches " + std::to_string(M);
        std::string reference = train("ref18_" + preset, "--stages 1" + mb, 8, preset);   // one device
        int n = 0;
        for (const char* schedule : {"looped-bfs --chunks 2", "interleaved-zb --chunks 2", "zb-h2", "zbv", "v-half", "v-min", "dualpipev", "auto"})
            for (const char* recompute : {"none", "full"}) {
                std::string args = "--stages " + std::to_string(P) + mb + " --schedule " + schedule + " --recompute " + recompute;
                std::string model = train("new" + std::to_string(P) + "_" + std::to_string(n++), args, 8, preset);
                CHECK_MESSAGE(first_difference(reference, model, 0) == "",
                              args << " (" << preset << ") against one device (P = 1)");   // bit for bit
            }
    }
}

TEST_CASE("ZB-V and DualPipeV hold, stage by stage, the stashes the simulator predicts") {
    auto measured = [&](const std::string& name, const std::string& args, int batch, const std::string& preset) {
        std::string out = temp_dir(name);
        Run r = run_cli("train" + kCommon + " --preset " + preset + " --batch " + std::to_string(batch) + " --out " + out +
                        " " + args);
        REQUIRE_MESSAGE(r.code == 0, r.out);
        std::vector<int> v;
        std::istringstream in(r.out.substr(r.out.rfind("(micro-batch, chunk):") + 21));
        int x;
        while (in >> x) v.push_back(x);
        return v;
    };
    struct Case { std::string schedule; int P, M; std::string preset; };
    for (const Case& c : std::vector<Case>{{"zbv", 4, 5, "small"}, {"zbv", 4, 8, "small"}, {"zbv", 2, 3, "tiny"},
                                           {"dualpipev", 4, 8, "small"}, {"dualpipev", 2, 5, "tiny"}}) {
        CAPTURE(c.schedule);
        CAPTURE(c.P);
        CAPTURE(c.M);
        pp::Schedule s = c.schedule == "zbv" ? pp::zbv(c.P, c.M) : pp::dualpipev(c.P, c.M);
        std::vector<int> predicted = pp::simulate(s).peak_live;
        CHECK(measured(c.schedule + std::to_string(c.P) + "_" + std::to_string(c.M),
                       "--stages " + std::to_string(c.P) + " --micro-batches " + std::to_string(c.M) + " --schedule " +
                           c.schedule, 2 * c.M, c.preset) == predicted);
    }
}

TEST_CASE("the comparison can fail: a different seed or M changes the bits") {
    std::string a = train("m4", "--stages 2 --micro-batches 4");
    std::string b = train("m2", "--stages 2 --micro-batches 2");
    CHECK(first_difference(a, b, 0) != "");   // M changes the summation order
}

// The same global batch in the same 4 micro-batches of 2 rows, cut into P stages × D replicas of
// 4/D micro-batches each: every micro-batch's gradient is summed in one pairwise tree over the
// global micro-batch index (src/pairwise.hpp), which the replicas and the all-reduce complete, so
// the parameters, the gradients and the loss are one device's bits. (Before the tree, D = 2 was
// within 1e-6 only: replicas summed their halves in a row, then the halves.)
TEST_CASE("any P x D with the same micro-batches gives one device's bits: parameters, gradients, loss") {
    auto loss = [](const std::string& model) {
        std::string m = read_file(model.substr(0, model.rfind('/')) + "/metrics.jsonl");
        return m.substr(m.rfind("\"loss\":"), 30);
    };
    std::string one = train("pd1x1", "--stages 1 --micro-batches 4");
    int n = 0;
    for (const char* layout : {"--stages 1 --dp 4 --micro-batches 1", "--stages 2 --dp 2 --micro-batches 2 --schedule 1f1b",
                               "--stages 4 --dp 1 --micro-batches 4 --schedule zb-h1", "--stages 1 --dp 2 --micro-batches 2",
                               "--stages 2 --dp 2 --micro-batches 2 --schedule interleaved --chunks 2 --recompute full",
                               "--stages 2 --dp 4 --micro-batches 1 --schedule gpipe"}) {
        std::string model = train("pd" + std::to_string(n++), layout);
        CHECK_MESSAGE(first_difference(one, model, 0) == "", layout << " against one device");
        CHECK_MESSAGE(loss(one) == loss(model), layout << ": the last step's loss in metrics.jsonl");
    }
    std::string g1 = temp_dir("dpg1") + "/g.safetensors", g2 = temp_dir("dpg2") + "/g.safetensors";
    train("dpg1run", "--stages 2 --micro-batches 4 --dump-grads " + g1);
    train("dpg2run", "--stages 2 --micro-batches 1 --dp 4 --dump-grads " + g2);
    CHECK(first_difference(g1, g2, 0) == "");
    // --zero 1: each replica sums only the tensors it updates; the dump held replica 0's own
    // partial gradients for the rest (65 of 76 tensors differed).
    for (const char* zero : {"--stages 2 --micro-batches 1 --dp 4 --zero 1", "--stages 1 --micro-batches 2 --dp 2 --zero 1"}) {
        std::string gz = temp_dir("dpgz") + "/g.safetensors";
        train("dpgzrun", std::string(zero) + " --dump-grads " + gz);
        CHECK_MESSAGE(first_difference(g1, gz, 0) == "", zero);
    }
    // The comparison can fail: a replica that lost its gradient, or other micro-batches.
    CHECK(first_difference(one, train("dp1m2", "--stages 2 --micro-batches 2", 4), 1e-6) != "");
    CHECK(first_difference(one, train("dp2m1", "--stages 1 --dp 2 --micro-batches 1"), 0) != "");   // 2 of 4 rows
}

// ZeRO-1: each parameter tensor is updated by one replica, which alone keeps its AdamW moments; the
// gradient sums, the norm and the update are the same arithmetic, so the bits of --zero 0, and a
// replica that skipped its share of the update or of the gather would change them.
TEST_CASE("--zero 1 gives the bits of --zero 0 (D = 2, 4), each rank holding its share of the moments") {
    std::string one = train("z_ref", "--stages 1 --micro-batches 4");
    int n = 0;
    for (const char* layout : {"--stages 1 --dp 2 --micro-batches 2", "--stages 2 --dp 2 --micro-batches 2 --schedule zb-h1",
                               "--stages 1 --dp 4 --micro-batches 1 --recompute full"})
        CHECK_MESSAGE(first_difference(one, train("z" + std::to_string(n++), std::string(layout) + " --zero 1"), 0) == "", layout);
    auto moments = [](const std::string& zero) {   // "AdamW moments per rank, bytes ...: a b c d"
        Run r = run_cli("train" + kCommon + " --batch 8 --stages 2 --dp 2 --micro-batches 2 --zero " + zero + " --out " + temp_dir("zm"));
        REQUIRE_MESSAGE(r.code == 0, r.out);
        size_t line = r.out.find("AdamW moments per rank"), end = r.out.find('\n', line);
        std::istringstream in(r.out.substr(r.out.rfind(':', end) + 1, end - r.out.rfind(':', end)));
        std::vector<double> v;
        for (double x; v.size() < 4 && in >> x;) v.push_back(x);
        REQUIRE(v.size() == 4);   // ranks 0 1 (replica 0), 2 3 (replica 1)
        return v;
    };
    std::vector<double> full = moments("0"), shared = moments("1");
    for (int p : {0, 1}) {
        INFO("stage " << p << ": replica 0 " << shared[p] << ", replica 1 " << shared[2 + p] << " bytes of " << full[p]);
        CHECK(shared[p] + shared[2 + p] == full[p]);   // every tensor's moments on exactly one replica
        CHECK(std::max(shared[p], shared[2 + p]) < 0.65 * full[p]);
    }
}

// Overlap: each layer's data-parallel sum starts on a thread of its rank as soon as the layer's last
// weight gradient of the step exists. A sum started before the gradient was final, or a layer
// summed twice or not at all, would change the bits.
TEST_CASE("--dp-overlap 1 gives the bits of --dp-overlap 0, and the trace shows the sums beside the backward") {
    int n = 0;
    for (const char* layout : {"--stages 1 --dp 2 --micro-batches 2", "--stages 2 --dp 2 --micro-batches 2 --schedule 1f1b",
                               "--stages 2 --dp 2 --micro-batches 4 --schedule zb-h1",
                               "--stages 2 --dp 2 --micro-batches 2 --schedule interleaved --chunks 2 --recompute full",
                               "--stages 2 --dp 4 --micro-batches 1 --schedule gpipe", "--stages 2 --dp 2 --micro-batches 2 --zero 1"}) {
        std::string at_end = train("ov0_" + std::to_string(n), std::string(layout) + " --dp-overlap 0");
        std::string beside = train("ov1_" + std::to_string(n++), std::string(layout) + " --dp-overlap 1");
        CHECK_MESSAGE(first_difference(at_end, beside, 0) == "", layout);
    }
    std::string dir = temp_dir("ovtrace");
    Run r = run_cli("train" + kCommon + " --batch 8 --stages 2 --dp 2 --micro-batches 2 --out " + dir + " --trace " + dir + "/t.json");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    auto events = nlohmann::json::parse(read_file(dir + "/t.json")).at("traceEvents");
    for (int rank = 0; rank < 4; rank++) {
        int sums = 0;
        double first_sum = 1e300, last_backward = 0;
        for (const auto& e : events) {
            if (e.value("pid", -1) != rank || e.value("ph", "") != "X") continue;
            if (e.value("tid", -1) == 100000 + rank && e.value("name", "") == "dp sum") sums++, first_sum = std::min(first_sum, e.value("ts", 0.0));
            std::string cat = e.value("cat", "");
            if (e.value("tid", -1) == rank && (cat == "B" || cat == "BW"))
                last_backward = std::max(last_backward, e.value("ts", 0.0) + e.value("dur", 0.0));
        }
        INFO("rank " << rank);
        CHECK(sums >= 2);   // one per layer of the stage, and each stage holds two at least
        CHECK(first_sum < last_backward);   // the first layer's sum ran while the backward went on
    }
    CHECK(r.out.find("data-parallel") == std::string::npos);   // the sums stay out of the ASCII chart
    Run plot = run_cli("plot " + dir + " --out " + dir + "/plots");   // and out of the plotted timeline
    CHECK_MESSAGE(plot.code == 0, plot.out);
    Run off = run_cli("train" + kCommon + " --batch 8 --stages 2 --dp 2 --micro-batches 2 --dp-overlap 0 --out " + dir +
                      "/off --trace " + dir + "/off.json");
    REQUIRE_MESSAGE(off.code == 0, off.out);
    CHECK(read_file(dir + "/off.json").find("\"dp sum\"") == std::string::npos);
}

// Bitwise needs each replica's M to be a power of two (its micro-batches then form one subtree
// of the global tree); otherwise the replicas agree with one device to rounding.
TEST_CASE("D = 2 replicas of M = 3 micro-batches equal one device's 6 within 1e-6, not bitwise") {
    std::string one = train("pd6", "--stages 1 --micro-batches 6", 12);
    std::string two = train("pd2x3", "--stages 2 --dp 2 --micro-batches 3", 12);
    CHECK(first_difference(one, two, 1e-6) == "");
    CHECK(first_difference(one, two, 0) != "");
    CHECK(first_difference(one, train("pd3x2", "--stages 1 --dp 3 --micro-batches 2", 12), 0) == "");   // 6 = (4) + (2)
}

// Recompute on replica d rebuilds micro-batch m with the dropout masks its forward drew, whose
// key is the global index d*M + m: the same bits as keeping the stash, on every replica.
TEST_CASE("D = 2 replicas with --recompute full give the bits of D = 2 without it (dropout on)") {
    for (std::string layout : {"--stages 1 --micro-batches 2 --dp 2", "--stages 2 --micro-batches 2 --dp 2 --schedule 1f1b"}) {
        std::string kept = train("dp_keep", layout + " --recompute none");
        std::string recomputed = train("dp_recompute", layout + " --recompute full");
        CHECK_MESSAGE(first_difference(kept, recomputed, 0) == "", layout << ": --recompute full against none");
    }
}

TEST_CASE("activation memory: 1F1B bounds what GPipe stashes, recompute keeps only inputs") {
    auto run = [&](const std::string& name, const std::string& args) {
        std::string out = temp_dir(name);
        Run r = run_cli("train --preset tiny --data " + kSample + " --steps 1 --batch 32 --seq 16 --seed 7 --out " + out +
                        " --stages 4 --micro-batches 16 --partition params " + args);   // one split for all: compared per stage
        REQUIRE_MESSAGE(r.code == 0, r.out);
        return peak_stash(r.out);
    };
    std::vector<double> gpipe = run("mem_gpipe", "--schedule gpipe");
    std::vector<double> f1b = run("mem_1f1b", "--schedule 1f1b");
    std::vector<double> gpipe_rc = run("mem_gpipe_rc", "--schedule gpipe --recompute full");
    REQUIRE(gpipe.size() == 4);
    REQUIRE(f1b.size() == 4);
    // Stage 0 of 1F1B holds at most P = 4 of the M = 16 micro-batches.
    CHECK(f1b[0] <= (4.0 / 16 + 0.05) * gpipe[0]);
    for (int s = 0; s < 4; s++) CHECK(f1b[s] <= gpipe[s]);
    // Recompute: 16 stage inputs (2 rows x 16 tokens x 64 channels x 4 bytes each) plus one
    // micro-batch's activations while it is recomputed, far below the full stash.
    double input_bytes = 2 * 16 * 64 * 4;
    CHECK(gpipe_rc[1] >= 16 * input_bytes);
    CHECK(gpipe_rc[1] < 0.25 * gpipe[1]);
}
