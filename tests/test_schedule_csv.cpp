// PyTorch's pipeline-schedule CSV (src/cli/schedule_csv.*): every schedule of ours survives export
// and import; PyTorch 2.11's own files (tests/fixtures/torch_schedules/) import, validate and
// simulate, and differ from ours of the same name exactly where the README says; a bad file gets
// one line naming file, line and column; a schedule from a file trains to one device's bits.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "pipeline_lab.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/schedule_csv.hpp"
#include "src/formats/io.hpp"
#include "src/formats/safetensors.hpp"
#include "tests/cli_util.hpp"

using namespace test;

namespace {

const std::string kTorch = fixture("torch_schedules/");

// Ours by PyTorch's class name, with its chunks per rank.
const std::map<std::string, std::pair<std::string, int>> kOurs = {
    {"ScheduleGPipe", {"gpipe", 1}},          {"Schedule1F1B", {"1f1b", 1}},
    {"ScheduleInterleaved1F1B", {"interleaved", 2}}, {"ScheduleLoopedBFS", {"looped-bfs", 2}},
    {"ScheduleInterleavedZeroBubble", {"interleaved-zb", 2}}, {"ScheduleZBVZeroBubble", {"zbv", 2}},
    {"ScheduleDualPipeV", {"dualpipev", 2}}};

pt::CsvSchedule torch_file(const std::string& cls, int P, int M, const std::string& suffix = "") {
    return pt::read_schedule_csv(kTorch + cls + "_P" + std::to_string(P) + "_M" + std::to_string(M) + suffix + ".csv");
}

pp::Schedule ours(const std::string& cls, int P, int M) {
    const auto& [name, V] = kOurs.at(cls);
    return pt::make_schedule(name, P, M, V);
}

// What `pipetrain schedule` charges: a chunk 1/V of a stage's unit costs.
double makespan(const pp::Schedule& s, int V) { return pp::simulate(s, pp::Costs{1.0 / V, 1.0 / V, 1.0 / V, 0}).makespan; }

std::vector<pp::Action> sorted(std::vector<pp::Action> v) {
    std::sort(v.begin(), v.end(), [](const pp::Action& a, const pp::Action& b) {
        return std::make_tuple(a.chunk, int(a.op), a.microbatch) < std::make_tuple(b.chunk, int(b.op), b.microbatch);
    });
    return v;
}

std::string error_of_csv(const std::string& text, const pt::CsvExpect& expect = {}) {
    return error_of([&] { pt::parse_schedule_csv(text, "bad.csv", expect); });
}

// "" when every tensor holds the same bits, else the first that does not.
std::string first_difference(const std::string& a_path, const std::string& b_path) {
    pt::st::File a = pt::st::read(a_path), b = pt::st::read(b_path);
    if (a.tensors.size() != b.tensors.size()) return "different tensor lists";
    for (const auto& t : a.tensors) {
        std::vector<float> x = a.to_f32(t.name), y = b.to_f32(t.name);
        if (x.size() != y.size() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0) return t.name;
    }
    return "";
}

}  // namespace

TEST_CASE("every built-in schedule, exported and imported again, is the same schedule") {
    const std::vector<std::pair<std::string, int>> names = {{"gpipe", 1}, {"1f1b", 1}, {"interleaved", 2},
                                                            {"looped-bfs", 2}, {"zb-h1", 1}, {"zb-h2", 1},
                                                            {"interleaved-zb", 2}, {"zbv", 2}, {"dualpipev", 2},
                                                            {"v-half", 2}, {"v-min", 2}};
    int overlapped = 0, checked = 0;
    for (const auto& [name, V] : names)
        for (int P : {2, 4})
            for (int M : {4, 8}) {
                INFO(name << " P=" << P << " M=" << M);
                if (name == "dualpipev" && M < 2 * P) {   // DualPipeV needs M >= 2P
                    CHECK_THROWS(pt::make_schedule(name, P, M, V));
                    continue;
                }
                pp::Schedule s = pt::make_schedule(name, P, M, V);
                std::string csv = pt::schedule_csv(s);
                pt::CsvSchedule back = pt::parse_schedule_csv(csv, name + ".csv");
                CHECK(back.schedule == s);   // actions, chunks, overlapped flags and placement
                CHECK(back.M == M);
                CHECK(back.V == V);
                CHECK(pt::schedule_csv(back.schedule) == csv);
                for (const auto& rank : s)
                    for (const pp::Action& a : rank) overlapped += a.overlapped;
                checked++;
            }
    CHECK(checked == 43);
    CHECK(overlapped > 0);   // DualPipeV's F&B pairs went through the file
    // The V placement is written as PyTorch numbers it: rank 0 holds stages 0 and 2P-1.
    CHECK(pt::schedule_csv(pp::zbv(2, 4)).substr(0, 12) == "0F0,0F1,0F2,");
    CHECK(pt::schedule_csv(pp::zbv(2, 4)).find("3F0,3I0,3W0") != std::string::npos);
}

TEST_CASE("every PyTorch fixture imports, validates and simulates; Schedule1F1B's numbering is refused") {
    nlohmann::json manifest = nlohmann::json::parse(read_file(kTorch + "manifest.json"));
    int imported = 0, refused = 0;
    for (const auto& e : manifest.at("entries")) {
        std::string cls = e.at("class");
        int P = e.at("P"), M = e.at("M");
        if (e.at("status") == "refused") {   // DualPipeV at P = 4, M = 4: PyTorch wrote no file
            CHECK(cls == "ScheduleDualPipeV");
            CHECK(e.at("error").at("message").get<std::string>().find("at least as many microbatches as stages") !=
                  std::string::npos);
            refused++;
            continue;
        }
        for (const auto& file : e.at("files")) {
            std::string path = kTorch + file.get<std::string>();
            INFO(path);
            if (cls == "Schedule1F1B") {   // its last rank runs the forwards of micro-batches 1 .. M
                std::string cell = std::to_string(P - 1) + "F" + std::to_string(M);
                int column = 2 * M - 1;    // F1,B0,F2,B1,...: F<M> is the second last cell
                CHECK(error_of([&] { pt::read_schedule_csv(path); }) ==
                      path + ":" + std::to_string(P) + ":" + std::to_string(column) + ": " + cell + ": micro-batch " +
                          std::to_string(M) + " out of range: stage 0 runs the forwards of micro-batches 0 to " +
                          std::to_string(M - 1) + " only");
                refused++;
                continue;
            }
            pt::CsvSchedule s = pt::read_schedule_csv(path);
            CHECK(int(s.schedule.size()) == P);
            CHECK(s.M == M);
            CHECK(s.V == e.at("stages_per_rank").get<int>());
            CHECK(s.schedule.placement == (e.at("placement") == "v" ? pp::Placement::vee : pp::Placement::loop));
            pp::Layout layout{P, s.V, s.schedule.placement};
            for (const auto& [stage, rank] : e.at("stage_to_rank").items()) CHECK(layout.rank(std::stoi(stage)) == rank.get<int>());
            CHECK(pp::simulate(s.schedule).makespan > 0);
            imported++;
        }
    }
    CHECK(imported == 46);   // 23 shapes, compute-only and lowered
    CHECK(refused == 5);     // 4 Schedule1F1B files, 1 DualPipeV shape PyTorch refused
}

TEST_CASE("a lowered file is its compute-only file: the transfers, UNSHARD, RESHARD and REDUCE_GRAD are dropped") {
    for (const auto& entry : kOurs) {
        const std::string& cls = entry.first;
        if (cls == "Schedule1F1B") continue;   // no lowered file: PyTorch's lowering refused its numbering
        for (auto [P, M] : {std::pair{2, 4}, {2, 8}, {4, 4}, {4, 8}}) {
            if (cls == "ScheduleDualPipeV" && P == 4 && M == 4) continue;
            INFO(cls << " P=" << P << " M=" << M);
            CHECK(torch_file(cls, P, M).schedule == torch_file(cls, P, M, "_lowered").schedule);
        }
    }
}

TEST_CASE("PyTorch's classes against ours of the same name") {
    const std::vector<std::pair<int, int>> shapes = {{2, 4}, {2, 8}, {4, 4}, {4, 8}};
    for (auto [P, M] : shapes) {
        INFO("P=" << P << " M=" << M);
        // The same action lists, rank by rank.
        for (const char* cls : {"ScheduleGPipe", "ScheduleInterleaved1F1B"}) CHECK(torch_file(cls, P, M).schedule == ours(cls, P, M));
        if (M >= 2 * P) CHECK(torch_file("ScheduleDualPipeV", P, M).schedule == ours("ScheduleDualPipeV", P, M));
        // Schedule1F1B: the last rank's forwards numbered 1 .. M; numbered 0 .. M-1 they are our 1F1B.
        std::string text = read_file(kTorch + "Schedule1F1B_P" + std::to_string(P) + "_M" + std::to_string(M) + ".csv");
        size_t last = text.rfind('\n', text.size() - 3) + 1;
        std::string row = text.substr(last), fixed;
        for (const std::string& cell : pt::split(row.substr(0, row.find('\r')), ',')) {
            size_t f = cell.find('F');
            fixed += (fixed.empty() ? "" : ",") + (f == std::string::npos ? cell : cell.substr(0, f + 1) + std::to_string(std::stoi(cell.substr(f + 1)) - 1));
        }
        CHECK(pt::parse_schedule_csv(text.substr(0, last) + fixed + "\r\n", "1f1b.csv").schedule == ours("Schedule1F1B", P, M));
        // ScheduleLoopedBFS: each chunk's backwards in decreasing micro-batch order, ours increasing; same cost.
        pp::Schedule bfs = torch_file("ScheduleLoopedBFS", P, M).schedule, mine = ours("ScheduleLoopedBFS", P, M);
        CHECK(bfs != mine);
        for (int r = 0; r < P; r++) {   // runs of M actions: F of chunk 0, F of chunk 1, B of chunk 1, B of chunk 0
            CHECK(bfs[r][size_t(2 * M)].microbatch == M - 1);   // the first backward: the last micro-batch
            for (int i = 2 * M; i < 4 * M; i += M) std::reverse(bfs[r].begin() + i, bfs[r].begin() + i + M);
        }
        CHECK(bfs == mine);
        CHECK(makespan(torch_file("ScheduleLoopedBFS", P, M).schedule, 2) == makespan(mine, 2));
    }
}

TEST_CASE("ZB-V and interleaved zero bubble: PyTorch's orders and ours") {
    // ScheduleZBVZeroBubble is ours where M >= 2P - 1. Below (P = 4, M = 4) PyTorch plans 2P - 1
    // micro-batches and drops the extra ones, which leaves its cooldown I, W, I, W; ours runs the
    // Is first and the Ws after, half a unit sooner, with the same peak stashes.
    for (auto [P, M] : {std::pair{2, 4}, {2, 8}, {4, 8}}) CHECK(torch_file("ScheduleZBVZeroBubble", P, M).schedule == ours("ScheduleZBVZeroBubble", P, M));
    pp::Schedule zbv = torch_file("ScheduleZBVZeroBubble", 4, 4).schedule, mine = ours("ScheduleZBVZeroBubble", 4, 4);
    CHECK(zbv[0] == mine[0]);
    for (int r = 1; r < 4; r++) {
        CHECK(zbv[r] != mine[r]);
        CHECK(sorted(zbv[r]) == sorted(mine[r]));
        size_t last_f = 0, first_diff = 0;
        while (zbv[r][first_diff] == mine[r][first_diff]) first_diff++;
        for (size_t i = 0; i < zbv[r].size(); i++)
            if (zbv[r][i].op == pp::Op::F) last_f = i;
        CHECK(first_diff > last_f);   // they part in the cooldown
    }
    CHECK(makespan(zbv, 2) == 15.0);
    CHECK(makespan(mine, 2) == 14.5);
    CHECK(pp::simulate(zbv).peak_live == pp::simulate(mine).peak_live);
    // ScheduleInterleavedZeroBubble: the same actions per rank, but rank r warms up with (V-1)P + P-r
    // forwards before its first I, ours (Megatron's) with (V-1)P + 2(P-1-r) + 1: PyTorch's holds
    // fewer stashes, and under pipetrain's unbuffered sends takes longer.
    for (auto [P, M] : {std::pair{2, 4}, {2, 8}, {4, 4}, {4, 8}}) {
        INFO("P=" << P << " M=" << M);
        pp::Schedule izb = torch_file("ScheduleInterleavedZeroBubble", P, M).schedule;
        pp::Schedule our = ours("ScheduleInterleavedZeroBubble", P, M);
        for (int r = 0; r < P; r++) {
            CHECK(sorted(izb[r]) == sorted(our[r]));
            auto warmup = [](const std::vector<pp::Action>& v) {
                return std::find_if(v.begin(), v.end(), [](const pp::Action& a) { return a.op != pp::Op::F; }) - v.begin();
            };
            CHECK(warmup(izb[r]) == std::min(P + P - r, 2 * M));
            CHECK(warmup(our[r]) == std::min(P + 2 * (P - 1 - r) + 1, 2 * M));
        }
        pp::SimResult theirs = pp::simulate(izb, pp::Costs{0.5, 0.5, 0.5, 0}), mine2 = pp::simulate(our, pp::Costs{0.5, 0.5, 0.5, 0});
        CHECK(theirs.makespan > mine2.makespan);
        for (int r = 0; r < P; r++) CHECK(theirs.peak_live[r] <= mine2.peak_live[r]);
    }
    CHECK(makespan(torch_file("ScheduleInterleavedZeroBubble", 2, 8).schedule, 2) == 31.0);
    CHECK(makespan(ours("ScheduleInterleavedZeroBubble", 2, 8), 2) == 24.5);
}

TEST_CASE("a bad file: one line naming the file, line and column, and what is wrong") {
    CHECK(error_of_csv("0F0,0X1\n") ==
          "bad.csv:1:2: 0X1: unknown action: expected <stage><F|B|I|W><micro-batch> (0F1, 1I3), a lowered one (0SEND_F1, "
          "1RECV_B0, 0UNSHARD, 0RESHARD, 0REDUCE_GRAD) or (0F3;3B1)OVERLAP_F_B");
    CHECK(error_of_csv("0F0,(0F1;0W0)OVERLAP_F_B\n").rfind("bad.csv:1:2: (0F1;0W0)OVERLAP_F_B: unknown action: an overlapped pair", 0) == 0);
    CHECK(error_of_csv("0F,0B0\n").rfind("bad.csv:1:1: 0F: unknown action", 0) == 0);   // F needs its micro-batch
    // Stage out of range: beyond --chunks, or beyond what a rank can hold.
    CHECK(error_of_csv("0F0,2F0,0B0\n", {0, 0, 2, ""}) == "bad.csv:1:2: 2F0: stage out of range: 1 rank × 2 chunks hold stages 0 to 1 (--chunks)");
    CHECK(error_of_csv("0F0,99999999999F0\n") ==
          "bad.csv:1:2: 99999999999F0: stage out of range: 1 rank × 128 chunks hold stages 0 to 127 (at most 128 chunks per rank)");
    // A stage on a line (rank) that does not hold it.
    CHECK(error_of_csv("0F0,0B0\n1F0,1B0\n0F0\n") ==
          "bad.csv:3:1: 0F0: stage 0 is on rank 0 in the loop placement (rank r holds stages c*P + r), not on rank 2 (line 3), "
          "nor does the V placement (rank r holds stages r and 2P-1-r) fit");
    CHECK(error_of_csv("0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n", {0, 0, 0, "loop"}) ==
          "bad.csv:1:2: 3F0: stage 3 is on rank 1 in the loop placement (rank r holds stages c*P + r), not on rank 0 (line 1) "
          "(--placement loop)");
    CHECK(error_of_csv("0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n").empty());   // the V placement, inferred
    // Micro-batches: out of range, run twice, missing.
    CHECK(error_of_csv("0F0,0F1,0B0,0B1\n", {0, 1, 0, ""}) == "bad.csv:1:2: 0F1: micro-batch 1 out of range: --micro-batches 1 (0 to 0)");
    CHECK(error_of_csv("0F0,0F0,0B0\n") == "bad.csv:1:2: 0F0: micro-batch 0 runs F on stage 0 twice (first at line 1, column 1)");
    CHECK(error_of_csv("0F0,0F1,0B0\n") == "bad.csv:1:4: micro-batch 1 missing: stage 0 (rank 0, this line) never runs 0B1 (or I and W)");
    CHECK(error_of_csv("0F0,0I0\n") == "bad.csv:1:3: micro-batch 0 missing: stage 0 (rank 0, this line) never runs 0W0");
    CHECK(error_of_csv("0F0,0B0\n1B0\n") == "bad.csv:2:2: micro-batch 0 missing: stage 1 (rank 1, this line) never runs 1F0");
    // Order and deadlock: pp::validate's words, at the action's cell.
    CHECK(error_of_csv("0F0,0B0\n1F0,1W0,1I0\n") == "bad.csv:2:2: 1W0: rank 1, action BW0: needs BI0 before BW0");
    CHECK(error_of_csv("0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n") ==
          "bad.csv:1:2: 0B0: deadlock: rank 0 (before B0) waits in {recv B0 from rank 1}; rank 1 (before F1) waits in {recv F1 from rank 0}");
    // Lowered files: the transfers must match what the compute actions do.
    CHECK(error_of_csv("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0\n") == "bad.csv:1:2: 0SEND_F0: no 1RECV_F0 in the file to match it");
    CHECK(error_of_csv("0SEND_F0,0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n") ==
          "bad.csv:1:1: 0SEND_F0: sends before 0F0 runs on this line");
    CHECK(error_of_csv("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n") ==
          "bad.csv:2:2: 1RECV_F0: receives after 1F0 runs on this line");
    // Counts: --stages against the lines.
    CHECK(error_of_csv("0F0,0B0\n", {2, 0, 0, ""}) == "bad.csv: 1 line (one per rank), but --stages 2");
    // Accepted before, or said wrong: a pair whose B needs its own F (simulated overlapped, a makespan
    // below F + B), a transfer twice (one with nothing to match it), a micro-batch number past the
    // limits (said as 1000000000, "0 to 4194304"), more rows than ranks, a V placement of one stage a
    // rank (the simulation's "rank 0: missing F0.1", naming no file).
    CHECK(error_of_csv("(0F0;0B0)OVERLAP_F_B\n") ==
          "bad.csv:1:1: (0F0;0B0)OVERLAP_F_B: an overlapped pair of one micro-batch on one stage: its backward needs its forward's output");
    CHECK(error_of_csv("0F0,(0F1;0B0)OVERLAP_F_B,0B1\n").empty());
    CHECK(error_of_csv("0F0,0SEND_F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n") ==
          "bad.csv:1:3: 0SEND_F0: the same transfer twice (first at line 1, column 2)");
    CHECK(error_of_csv("0F0,0F99999999999999999999\n") ==
          "bad.csv:1:2: 0F99999999999999999999: micro-batch number too large: at most 4096 micro-batches, as --micro-batches");
    CHECK(error_of_csv("0F0,0F4096,0B0,0B4096\n") == "bad.csv:1:2: 0F4096: micro-batch 4096: at most 4096 micro-batches, as --micro-batches");
    std::string rows;
    for (int r = 0; r < 65; r++) rows += std::to_string(r) + "F0\n";
    CHECK(error_of_csv(rows) == "bad.csv: 65 rows: at most 64 ranks, as --stages");
    CHECK(error_of_csv("0F0,0B0\n1F0,1B0\n", {0, 0, 0, "v"}) ==
          "bad.csv: --placement v: 2 stages on 2 ranks, one a rank; the V holds two a rank (4 stages)");
}

TEST_CASE("pipetrain schedule --import / --export, and their errors on one line") {
    std::string dir = temp_dir("csv_cli");
    Run r = run_cli("schedule --schedule dualpipev --stages 2 --micro-batches 4 --export " + dir + "/ours.csv");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    CHECK(read_file(dir + "/ours.csv") == pt::schedule_csv(pp::dualpipev(2, 4)));
    CHECK(read_file(dir + "/ours.csv") == read_file(kTorch + "ScheduleDualPipeV_P2_M4.csv"));   // byte for byte
    r = run_cli("schedule --import " + kTorch + "ScheduleZBVZeroBubble_P2_M4_lowered.csv");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    CHECK(r.out.find("makespan 12.50 | bubble 4.0%") != std::string::npos);
    std::string bad = dir + "/bad.csv";
    std::ofstream(bad) << "0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n";
    r = run_cli("schedule --import " + bad);
    CHECK(r.code != 0);
    CHECK(r.out == "pipetrain schedule: " + bad + ":1:2: 0B0: deadlock: rank 0 (before B0) waits in {recv B0 from rank 1}; "
                   "rank 1 (before F1) waits in {recv F1 from rank 0}\n");
    r = run_cli("schedule --import " + bad + " --schedule zbv");
    CHECK(r.out == "pipetrain schedule: --schedule: not with --import (the file is the schedule)\n");
    r = run_cli("schedule --import " + kTorch + "ScheduleGPipe_P2_M4.csv --stages 4");
    CHECK(r.out.find("ScheduleGPipe_P2_M4.csv: 2 lines (one per rank), but --stages 4") != std::string::npos);
}

TEST_CASE("train --schedule-file: PyTorch's schedules train to one device's bits") {
    const std::string common = " --preset tiny --data " + fixture("text/sample_zh.txt") +
                               " --steps 3 --seq 16 --seed 7 --dropout 0.1 --batch 8 --micro-batches 4 ";
    auto train = [&](const std::string& name, const std::string& args) {
        std::string out = temp_dir(name);
        Run r = run_cli("train" + common + args + " --out " + out);
        INFO(args);
        REQUIRE_MESSAGE(r.code == 0, r.out);
        return out + "/model.safetensors";
    };
    std::string reference = train("csv_ref", "--stages 1");
    // ZB-V and DualPipeV (V placement, BI/BW, overlapped pairs); looped BFS with PyTorch's decreasing
    // backward order (at M = 4 the exact reverse builds the mirror of the gradients' pairwise tree,
    // ((g3 + g2) + (g1 + g0)), the same bits by commutativity; another order would not be).
    for (const char* file : {"ScheduleZBVZeroBubble_P2_M4.csv", "ScheduleDualPipeV_P2_M4_lowered.csv",
                             "ScheduleLoopedBFS_P2_M4.csv", "ScheduleInterleavedZeroBubble_P2_M4.csv"}) {
        std::string model = train(std::string("csv_") + file, "--stages 2 --schedule-file " + kTorch + file);
        CHECK_MESSAGE(first_difference(reference, model) == "", file << " against one device");
    }
    // Without --micro-batches, the file's M (4) is the run's: the same run.
    std::string inferred = temp_dir("csv_inferred");
    Run r = run_cli("train" + common.substr(0, common.find("--micro-batches")) + "--stages 2 --schedule-file " + kTorch +
                    "ScheduleZBVZeroBubble_P2_M4.csv --out " + inferred);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    CHECK(r.out.find("4 micro-batches") != std::string::npos);
    CHECK(first_difference(reference, inferred + "/model.safetensors") == "");
    // The comparison can fail: another seed changes the bits.
    std::string other = train("csv_seed", "--stages 2 --seed 8 --schedule-file " + kTorch + "ScheduleZBVZeroBubble_P2_M4.csv");
    CHECK(first_difference(reference, other) != "");
    r = run_cli("train" + common + "--stages 2 --schedule zbv --schedule-file " + kTorch + "ScheduleZBVZeroBubble_P2_M4.csv --out " +
                    temp_dir("csv_both"));
    CHECK(r.out.find("--schedule-file: not with --schedule (the file is the schedule)") != std::string::npos);
    r = run_cli("train" + common.substr(0, common.find("--micro-batches")) + "--micro-batches 2 --stages 2 --schedule-file " + kTorch +
                "ScheduleZBVZeroBubble_P2_M4.csv --out " + temp_dir("csv_m"));
    CHECK(r.out.find("ScheduleZBVZeroBubble_P2_M4.csv:1:3: 0F2: micro-batch 2 out of range: --micro-batches 2 (0 to 1)") !=
          std::string::npos);
}
