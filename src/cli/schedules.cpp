// src/cli/schedules.cpp — the schedules by their --schedule names (train, schedule, bench-pipeline).
#include <stdexcept>
#include <string>

#include "src/cli/commands.hpp"

namespace pt {

// The chunks per rank a schedule takes when --chunks is not given: the V shape has two.
int default_chunks(const std::string& name) {
    return name == "zbv" || name == "dualpipev" || name == "v-half" || name == "v-min" ? 2 : 1;
}

namespace {
const char* const kScheduleNames =
    "gpipe, 1f1b, interleaved, looped-bfs, zb-h1, zb-h2, interleaved-zb, zbv, v-half, v-min, dualpipev or auto";
}  // namespace

bool takes_chunks(const std::string& name) {
    return name == "interleaved" || name == "interleaved-zb" || name == "looped-bfs";
}

// interleaved, interleaved-zb and looped-bfs without --chunks would silently be their V = 1 case.
void require_chunks(const std::string& name, bool given) {
    if (takes_chunks(name) && !given)
        throw std::runtime_error("--chunks: " + name + " needs --chunks V, its chunks per rank (V = 1 is plain " +
                                 (name == "looped-bfs" ? "gpipe" : name == "interleaved" ? "1f1b" : "zb-h1") + ")");
}

// Every schedule but auto (which needs costs: plan_auto). An unknown name is an error naming `flag`.
pp::Schedule make_schedule(const std::string& name, int P, int M, int V, const char* flag) {
    bool chunked = takes_chunks(name);
    if (default_chunks(name) == 2 && V != 2)
        throw std::runtime_error("--chunks: " + name + " holds 2 chunks per rank (the V shape), got " + std::to_string(V));
    if (!chunked && default_chunks(name) == 1 && V != 1)
        throw std::runtime_error("--chunks: only interleaved, interleaved-zb and looped-bfs take chunks (" + name + " has " +
                                 std::to_string(default_chunks(name)) + ")");
    if (name == "gpipe") return pp::gpipe(P, M);
    if (name == "1f1b") return pp::one_f_one_b(P, M);
    if (name == "interleaved") return pp::interleaved(P, M, V);
    if (name == "looped-bfs") return pp::looped_bfs(P, M, V);
    if (name == "zb-h1") return pp::zero_bubble_h1(P, M);
    if (name == "zb-h2") return pp::zero_bubble_h2(P, M);
    if (name == "interleaved-zb") return pp::interleaved_zero_bubble(P, M, V);
    if (name == "zbv") return pp::zbv(P, M);
    if (name == "v-half") return pp::v_half(P, M);
    if (name == "v-min") return pp::v_min(P, M);
    if (name == "dualpipev") return pp::dualpipev(P, M);
    throw std::runtime_error(std::string(flag) + ": expected " + kScheduleNames + ", got \"" + name + "\"");
}

}  // namespace pt
