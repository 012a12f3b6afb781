// Training on a GPU against the CPU, through the CLI: fp32 within 1e-5 relative after 3 steps,
// bf16 within 1e-2, two GPU runs bitwise identical, and a 4-stage pipeline sharing one GPU
// (device-to-device copies) equal to one GPU stage, bit for bit. Without a GPU the whole file
// is skipped (exit code 77, reported by ctest as "Skipped").
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "src/device.hpp"
#include "tests/cli_util.hpp"
#ifdef PIPETRAIN_NCCL
#include "src/nccl_comm.hpp"
#endif

using namespace test;

namespace {

struct Result {
    double loss = 0, eval = 0;
    std::string model;   // the bytes of model.safetensors
};

Result train(const std::string& name, const std::string& flags) {
    std::string out = temp_dir(name);
    Run r = run_cli("train --preset tiny --data " + fixture("text/sample_zh.txt") + " --out " + out +
                    " --steps 3 --batch 8 --micro-batches 4 --seq 32 --seed 11 --dropout 0.1 --lr 1e-3 " + flags);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    return {std::atof(value_after(r.out, "final loss ").c_str()), std::atof(value_after(r.out, "eval loss ").c_str()),
            read_file(out + "/model.safetensors")};
}

double rel(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

}  // namespace

TEST_CASE("fp32 on the GPU matches the CPU within 1e-5 after 3 steps") {
    for (std::string layout : {"--stages 1", "--stages 4 --schedule 1f1b", "--stages 2 --schedule zb-h1 --recompute full",
                               "--stages 2 --dp 2 --micro-batches 2"}) {
        CAPTURE(layout);
        Result cpu = train("cpu", layout), gpu = train("gpu", layout + " --device cuda");
        CHECK(rel(gpu.loss, cpu.loss) < 1e-5);
        CHECK(rel(gpu.eval, cpu.eval) < 1e-5);
    }
}

TEST_CASE("bf16 on the GPU is within 1e-2 of the CPU fp32 run") {
    Result cpu = train("cpu", "--stages 2"), gpu = train("gpu", "--stages 2 --device cuda --dtype bf16");
    CHECK(rel(gpu.loss, cpu.loss) < 1e-2);
    CHECK(rel(gpu.eval, cpu.eval) < 1e-2);
}

TEST_CASE("two GPU runs with the same seed are bitwise identical; pipeline = one stage, bitwise") {
    Result a = train("a", "--stages 4 --device cuda"), b = train("b", "--stages 4 --device cuda");
    CHECK(a.model == b.model);
    Result one = train("one", "--stages 1 --device cuda");
    CHECK(one.model == a.model);
    Result nccl = train("nccl", "--stages 2 --device cuda");   // NCCL when there are 2 GPUs
    CHECK(nccl.model == train("one2", "--stages 1 --device cuda").model);
}

TEST_CASE("a head size above 128 on a GPU is a one-line error, not a wrong result") {
    pt::set_device(pt::Device{true, 0});
    const int B = 1, T = 2, NH = 1, HS = 160;   // the flash kernels keep a head of <= 128 channels
    pt::Buf q(size_t(B) * T * HS), out(size_t(B) * T * HS), lse(size_t(B) * NH * T);
    std::string error;
    try {
        pt::dev::attention_forward_flash(out.data(), lse.data(), q.data(), q.data(), q.data(), nullptr, false, 0.0f,
                                         ops::DropoutKey{}, B, T, NH, HS);
    } catch (const std::runtime_error& e) {
        error = e.what();
    }
    CHECK(error.find("head size 160") != std::string::npos);
    CHECK(error.find('\n') == std::string::npos);
    pt::set_device(pt::Device{});
}

#ifdef PIPETRAIN_NCCL
// ncclCommInitRank waits, with no timeout, for every member of a new communicator: a rank that
// dies before its first all-reduce would leave the others there forever. They meet on the host
// first, where the abort reaches them.
TEST_CASE("NCCL: a rank that fails before its first all-reduce aborts the others, named") {
    if (pt::cuda_device_count() < 2) {
        MESSAGE("skipped: needs two GPUs");
        return;
    }
    pt::NcclWorld world({0, 1}, 30.0);
    std::string reason, rank0_error;
    try {
        pt::run_ranks(world.host(), [&](int rank) {
            pt::set_device(pt::Device{true, rank});
            pt::NcclComm comm(world, rank);
            if (rank == 1) throw std::runtime_error("injected failure");
            pt::Buf grads(16);
            try {
                comm.allreduce_sum(grads.data(), grads.size(), {0, 1});
            } catch (const std::exception& e) {
                rank0_error = e.what();
                throw;
            }
        });
    } catch (const std::exception& e) {
        reason = e.what();
    }
    CHECK(reason == "rank 1: injected failure");
    CHECK(rank0_error.find("aborted: rank 1: injected failure") != std::string::npos);
    pt::set_device(pt::Device{});
}
#endif

int main(int argc, char** argv) {
    if (pt::cuda_device_count() == 0) {
        std::printf("skipped: no CUDA device\n");
        return 77;
    }
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
