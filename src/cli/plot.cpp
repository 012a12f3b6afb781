// src/cli/plot.cpp — what `train` keeps of a run (metrics.jsonl, schedule.json, counters in the
// trace) and `pipetrain plot`, which turns them into standalone SVG pictures:
//   loss.svg        train loss per step, eval loss as points
//   throughput.svg  tokens per second: each step's mean since the run (or its resume) started
//   timeline.svg    the measured timeline of the run's --trace (its last step), and under it the
//                   same schedule simulated (pp::simulate) with each rank's measured mean F, B,
//                   BI, BW times and free transfers: where the two differ, communication or
//                   noise cost the time. Without a trace, only the simulation, with unit costs.
//                   Transfers are hatched, waiting for a peer left blank like idle time.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "src/cli/args.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/svg.hpp"
#include "src/formats/io.hpp"
#include "src/formats/json.hpp"

namespace pt {

// ---- metrics.jsonl ---------------------------------------------------------------------------
// One JSON object per line, one line per step of rank 0:
//   step        the step, counted from 1
//   loss        mean loss of the step's global batch (train)
//   lr          the learning rate the step used
//   grad_norm   global gradient norm, before clipping
//   tok_per_s   tokens per second since the run (or the resume) started
//   bubble      1 - (compute of all ranks) / (P * slowest rank's step time), replica 0
//   ranks       one object per pipeline rank of replica 0: busy_us (F, B, BI, BW), wait_us (in
//               send/recv groups: waiting plus transfer), span_us (the step's wall time),
//               peak_stash_bytes, peak_stashes, lent_us (of its waiting, the time it ran pieces of
//               other ranks' kernels: ranks as threads on the CPU, kernels/cpu/threads.cpp),
//               helped_us (the time other threads ran pieces of its kernels: waiting ranks, or
//               under MPI its process's helper thread on a waiting process's core)
//   eval        on steps with an evaluation (--eval-every, and the last step): {loss, accuracy}
//               for a classifier, {loss, ppl} for a language model

namespace {

nlohmann::json record_json(const StepRecord& r) {
    auto us = [](double x) { return std::round(x * 10) / 10; };   // 0.1 µs is below the clock's noise
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankStep& k : r.ranks)
        ranks.push_back({{"busy_us", us(k.busy_us)}, {"wait_us", us(k.comm_us)}, {"span_us", us(k.span_us)},
                         {"peak_stash_bytes", k.stash_bytes}, {"peak_stashes", int(k.stashes)},
                         {"lent_us", us(k.lent_us)}, {"helped_us", us(k.helped_us)}});
    auto finite = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
    nlohmann::json j = {{"step", r.step}, {"loss", finite(r.loss)}, {"lr", r.lr}, {"grad_norm", finite(r.grad_norm)},
                        {"tok_per_s", r.tok_per_s}, {"bubble", r.bubble}, {"ranks", ranks}};
    if (r.eval)
        j["eval"] = {{"loss", finite(r.eval_loss)}, {r.classifier ? "accuracy" : "ppl", finite(r.eval_metric)}};
    return j;
}

}  // namespace

// A fresh run truncates the log in place rather than through write_file_atomic: a kill there
// would leave a metrics.jsonl.tmp.<pid> that no recovery (recover_dir) knows to remove, and an
// empty log is all a fresh run has to lose. A resume rewrites the kept lines atomically: those it
// would lose.
void MetricsLog::open(const std::string& path, bool resume, int start_step) {
    path_ = path;
    struct stat st;   // a symbolic link planted there is not our log: neither read nor followed
    if (resume && ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {   // the lines up to the checkpoint's step
        std::string kept;
        for (const std::string& line : read_lines(path)) {
            nlohmann::json j = nlohmann::json::parse(line, nullptr, false);   // a torn last line is dropped
            if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int>() <= start_step)
                kept += line + "\n";
        }
        write_file_atomic(path, kept);
    }
    f_ = open_output(path, resume);
}

void MetricsLog::append(const StepRecord& r) {
    if (!f_) return;
    std::string line = record_json(r).dump() + "\n";
    // Flushed each step: a crashed run keeps every step it finished (no fsync: a step is cheap).
    if (std::fputs(line.c_str(), f_) < 0 || std::fflush(f_) != 0) fail(path_, "cannot append a line", errno);
}

MetricsLog::~MetricsLog() {
    if (f_) std::fclose(f_);
}

void discard_run_notes(const std::string& out) {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out, ec)) {
        std::string name = e.path().filename().string();
        if (name != "metrics.jsonl" && name != "schedule.json") return;
    }
    fs::remove(out + "/metrics.jsonl", ec), fs::remove(out + "/schedule.json", ec);
}

// ---- schedule.json -------------------------------------------------------------------------------

void write_schedule_json(const std::string& path, const std::string& name, const pp::Schedule& s, int M, int V,
                         const std::string& trace) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& actions : s) {
        nlohmann::json list = nlohmann::json::array();
        for (const pp::Action& a : actions) list.push_back(pp::to_string(a, true) + (a.overlapped ? "+" : ""));
        ranks.push_back(list);
    }
    nlohmann::json j = {{"schedule", name}, {"P", int(s.size())}, {"M", M}, {"V", V},
                        {"placement", s.placement == pp::Placement::vee ? "vee" : "loop"}, {"actions", ranks}};
    // The trace's path relative to OUT: a copy of both still finds it, and so do runs that differ
    // only in where they write (threads and processes write the same schedule.json).
    namespace fs = std::filesystem;
    if (!trace.empty())
        j["trace"] = fs::absolute(trace).lexically_normal().lexically_relative(fs::absolute(fs::path(path).parent_path()).lexically_normal()).string();
    // Written in place, as the metrics log is (see MetricsLog::open): a kill may leave it short,
    // which plot refuses by name and the next run rewrites.
    std::string text = j.dump(1) + "\n";
    std::FILE* f = open_output(path, false);
    bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if ((std::fclose(f) != 0) | !ok) fail(path, "cannot write", errno);
}

namespace {

// "F3", "F3.1", "BI0.0", "B2.1+" (overlapped) as an action (pp::to_string's names; no chunk:
// chunk 0); false if it is not one.
bool parse_action(const std::string& text, pp::Action* a) {
    static const std::pair<const char*, pp::Op> ops[] = {{"BI", pp::Op::BI}, {"BW", pp::Op::BW}, {"F", pp::Op::F}, {"B", pp::Op::B}};
    for (const auto& [name, op] : ops) {
        size_t n = std::strlen(name);
        if (text.compare(0, n, name) != 0) continue;
        int mb = -1, chunk = 0, used = 0, fields = std::sscanf(text.c_str() + n, "%d%n.%d%n", &mb, &used, &chunk, &used);
        if (fields < 1 || mb < 0 || chunk < 0 || !std::isdigit(static_cast<unsigned char>(text[n]))) return false;
        std::string rest = text.substr(n + size_t(used));
        if (!rest.empty() && rest != "+") return false;
        *a = {op, mb, chunk, rest == "+"};
        return true;
    }
    return false;
}

pp::Schedule read_schedule_json(const std::string& path, std::string* name, int* V, std::string* trace) {
    nlohmann::json j = parse_json(read_file(path), path);
    try {
        pp::Schedule s;
        for (const auto& list : j.at("actions")) {
            s.emplace_back();
            for (const auto& text : list) {
                pp::Action a{pp::Op::F, 0, 0};
                if (!parse_action(text.get<std::string>(), &a)) throw std::runtime_error("no action: " + text.dump());
                s.back().push_back(a);
            }
        }
        s.placement = j.at("placement").get<std::string>() == "vee" ? pp::Placement::vee : pp::Placement::loop;
        *name = j.at("schedule").get<std::string>(), *V = j.at("V").get<int>();
        *trace = j.value("trace", "");
        if (int(s.size()) != j.at("P").get<int>() || s.empty()) throw std::runtime_error("\"actions\" needs one list per rank (P)");
        pp::validate(s, 0, *V, pp::plan_for(s, *V));
        return s;
    } catch (const std::exception& e) {
        fail(path, std::string("not a schedule of pipetrain train (") + e.what() + ")");
    }
}

}  // namespace

// ---- trace counters --------------------------------------------------------------------------

std::string with_trace_counters(const std::string& trace, const std::vector<pp::Event>& events, double loss,
                                const std::vector<RankStep>& ranks) {
    std::string counters;
    auto counter = [&](const std::string& name, int pid, double ts, const nlohmann::json& args) {
        nlohmann::json c = {{"name", name}, {"ph", "C"}, {"pid", pid}, {"tid", pid}, {"ts", ts}, {"args", args}};
        counters += ",\n" + c.dump();
    };
    // The trace holds one step, so one point: Perfetto draws a counter's value on until its next
    // point, so this one at the step's start covers the step.
    counter("loss", 0, 0, {{"loss", std::isfinite(loss) ? loss : 0.0}});
    // Live stashes over the step: one more at the end of each F, one fewer at the end of each
    // (micro-batch, chunk)'s last backward (B, or BW), as pp::simulate counts them.
    for (int r = 0; r < int(ranks.size()); r++) {
        std::vector<std::pair<double, int>> changes;
        for (const pp::Event& e : events)
            if (e.rank == r && !e.comm)
                if (int d = e.action.op == pp::Op::F ? 1 : e.action.op == pp::Op::BI ? 0 : -1) changes.push_back({e.end, d});
        std::stable_sort(changes.begin(), changes.end(), [](auto& x, auto& y) { return x.first < y.first; });
        double per_stash = ranks[r].stashes > 0 ? ranks[r].stash_bytes / ranks[r].stashes : 0.0;
        int live = 0;
        counter("stash", r, 0, {{"stashes", 0}, {"bytes", 0}});
        for (const auto& [t, d] : changes) {
            live = std::max(0, live + d);
            counter("stash", r, t, {{"stashes", live}, {"bytes", live * per_stash}});
        }
    }
    return with_trace_events(trace, counters);
}

bool is_dp_sum(const pp::Event& e) { return e.comm && e.detail.rfind("data-parallel sum", 0) == 0; }

std::string with_trace_events(const std::string& trace, const std::string& more) {
    // pp::chrome_trace ends "\n]}\n": `more` goes before the "]", after a comma if events came first.
    size_t close = trace.rfind(']');
    if (close == std::string::npos || more.empty()) return trace;
    size_t open = trace.find('[');
    bool empty = trace.find_first_not_of(" \n", open + 1) == close;
    return trace.substr(0, close) + (empty ? more.substr(2) : more) + "\n" + trace.substr(close);
}

std::string with_dp_sums(const std::string& trace, const std::vector<pp::Event>& sums, const std::vector<double>& moment_bytes) {
    std::string more;   // ordered_json: the keys in pp::chrome_trace's order, which readers may rely on
    auto add = [&](const nlohmann::ordered_json& e) { more += ",\n" + e.dump(); };
    std::vector<int> lanes;   // a track of its own beside each rank's, as the sums run beside its backward
    for (const pp::Event& e : sums) {
        if (std::find(lanes.begin(), lanes.end(), e.rank) == lanes.end()) {
            lanes.push_back(e.rank);
            add({{"name", "thread_name"}, {"ph", "M"}, {"pid", e.rank}, {"tid", kSumLane + e.rank},
                 {"args", {{"name", "rank " + std::to_string(e.rank) + ": data-parallel sums"}}}});
        }
        add({{"name", "dp sum"}, {"cat", "comm"}, {"ph", "X"}, {"pid", e.rank}, {"tid", kSumLane + e.rank},
             {"ts", e.start}, {"dur", e.end - e.start}, {"args", {{"detail", e.detail}}}});
    }
    for (size_t r = 0; r < moment_bytes.size(); r++)   // constant over the run: one point at its start
        add({{"name", "AdamW moments"}, {"ph", "C"}, {"pid", int(r)}, {"tid", int(r)}, {"ts", 0}, {"args", {{"bytes", moment_bytes[r]}}}});
    return with_trace_events(trace, more);
}

// ---- compute against communication -------------------------------------------------------------

std::string rank_time_report(const std::vector<RankStep>& ranks) {
    std::string out;
    char line[256];
    for (size_t r = 0; r < ranks.size(); r++) {
        const RankStep& k = ranks[r];
        // A group that waits for nobody takes about the shortest group's time: that much of each
        // is counted as transfer, the rest as waiting for the peer (an estimate: the timeline
        // records a group's time, not how it splits).
        double transfer = std::min(k.comm_us, k.groups * k.comm_min_us), wait = k.comm_us - transfer;
        double idle = std::max(0.0, k.span_us - k.busy_us - k.comm_us);
        std::snprintf(line, sizeof line,
                      "  rank %zu: compute %.2f ms | waiting %.2f ms | transfer %.2f ms (%d groups) | idle %.2f ms | "
                      "bubble %.1f%%",
                      r, k.busy_us / 1e3, wait / 1e3, transfer / 1e3, int(k.groups), idle / 1e3,
                      k.span_us > 0 ? 100 * (1 - k.busy_us / k.span_us) : 0.0);
        out += line;
        // A rank run as a thread lends its core while it waits (kernels/cpu/threads.cpp).
        if (k.lent_us > 0) {
            std::snprintf(line, sizeof line, " | lent: ran other ranks' kernel pieces %.2f ms", k.lent_us / 1e3);
            out += line;
        }
        if (k.helped_us > 0) {   // by waiting ranks, or under MPI by its process's helper thread
            std::snprintf(line, sizeof line, " | helped: its kernel pieces run by others %.2f ms", k.helped_us / 1e3);
            out += line;
        }
        out += "\n";
    }
    return out;
}

// ---- pictures ------------------------------------------------------------------------------------

namespace {

const char* op_colour(pp::Op op) {
    switch (op) {
        case pp::Op::F: return "#4e79a7";
        case pp::Op::B: return "#59a14f";
        case pp::Op::BI: return "#f28e2b";
        case pp::Op::BW: return "#b07aa1";
    }
    return "#999999";
}

constexpr double kLeft = 70, kRight = 20, kWidth = 900, kRow = 26;
// Odd chunks (the V shape's way back, a loop's second round) are drawn lighter.
const std::string kOddChunk = "fill-opacity=\"0.55\"";

// An x axis at height y for times 0..end, ticks labelled in units of `per` µs (1000: ms), and its
// name under them.
void x_axis(Svg& svg, double y, double x0, double x1, double end, double per, const std::string& label) {
    svg.line(x0, y, x1, y, "#333333");
    double scale = end > 0 ? (x1 - x0) / end : 0;
    for (double t : nice_ticks(0, end / per, 8)) {
        double x = x0 + t * per * scale;
        svg.line(x, y, x, y + 4, "#333333");
        svg.text(x, y + 15, svg_number(t), 10, "middle");
    }
    svg.text((x0 + x1) / 2, y + 30, label, 11, "middle", "class=\"axis-label\"");
}

// µs read as ms from 2 ms on: ticks 2, 4 rather than 2000, 4000. Returns µs per tick unit, and the label.
std::pair<double, std::string> time_unit(double end, const std::string& label) {
    const std::string us = "time (µs";
    if (end < 2000 || label.compare(0, us.size(), us) != 0) return {1, label};
    return {1000, "time (ms" + label.substr(us.size())};
}

// How much of each of a rank's groups moved data: what simulate recorded, else (measured) the
// rank's shortest group, as rank_time_report estimates it (a group that waits for nobody takes
// about that long; the rest of a longer one is waiting for the peer).
std::vector<double> transfer_of(const std::vector<pp::Event>& events) {
    std::map<int, double> shortest;
    for (const pp::Event& e : events)
        if (e.comm && e.transfer < 0 && e.rank >= 0)
            shortest[e.rank] = shortest.count(e.rank) ? std::min(shortest[e.rank], e.end - e.start) : e.end - e.start;
    std::vector<double> transfer;
    for (const pp::Event& e : events)
        transfer.push_back(!e.comm ? 0.0 : e.transfer >= 0 ? e.transfer : shortest[e.rank]);
    return transfer;
}

struct Drawn {
    double y = 0;                          // under the panel
    bool odd_chunks = false, transfers = false;   // light shades, hatching
};

// An action's box, filled by op, lighter on odd chunks, named where the box holds the name (or
// the micro-batch alone).
void action_box(Svg& svg, const pp::Event& e, bool chunks, double x, double w, double top) {
    svg.rect(x, top, w, kRow - 4, op_colour(e.action.op),
             std::string("class=\"action ") + pp::op_name(e.action.op) + "\" stroke=\"white\" stroke-width=\"0.5\"" +
                 (e.action.chunk % 2 ? " " + kOddChunk : ""));
    for (const std::string& label : {pp::to_string(e.action, chunks), std::to_string(e.action.microbatch)})
        if (w >= 6.0 * label.size() + 4) {
            svg.text(x + w / 2, top + kRow / 2 + 2, label, 10, "middle", "fill=\"white\"");
            break;
        }
}

// One panel of the timeline: rows of actions, and of each send/recv group the part that moved
// data hatched; waiting for a peer is left blank, as idle is. `end`: the time at the right edge,
// the same for both panels, so that their lengths compare.
Drawn draw_timeline(Svg& svg, const std::vector<pp::Event>& events, double y, const std::string& title,
                    const std::string& unit, double end) {
    int P = 0;
    for (const pp::Event& e : events) P = std::max(P, e.rank + 1);
    double x0 = kLeft, x1 = kWidth - kRight, scale = end > 0 ? (x1 - x0) / end : 0;
    svg.raw("<g class=\"panel\">");   // one group a panel: a reader (and the tests) can tell measured from simulated
    svg.text(x0, y + 14, title, 13, "start", "font-weight=\"bold\"");
    y += 24;
    for (int r = 0; r < P; r++) {
        double top = y + r * kRow;
        svg.text(x0 - 8, top + kRow / 2 + 4, "rank " + std::to_string(r), 11, "end");
        svg.rect(x0, top, x1 - x0, kRow - 4, "#f4f4f4");
    }
    Drawn drawn;
    bool chunks = pp::names_chunks(events);
    std::vector<double> transfer = transfer_of(events);
    for (size_t i = 0; i < events.size(); i++) {
        const pp::Event& e = events[i];
        if (e.rank < 0) continue;
        double top = y + e.rank * kRow, moved = std::min(transfer[i], e.end - e.start);
        if (!e.comm) {
            action_box(svg, e, chunks, x0 + e.start * scale, std::max(0.5, (e.end - e.start) * scale), top);
            drawn.odd_chunks = drawn.odd_chunks || e.action.chunk % 2;
        } else if (moved > 0) {   // the transfer ends the group: first the rank waits, then data moves
            svg.rect(x0 + (e.end - moved) * scale, top + 4, std::max(0.5, moved * scale), kRow - 12, "url(#hatch)", "class=\"comm\"");
            drawn.transfers = true;
        }
    }
    y += P * kRow;
    auto [per, label] = time_unit(end, unit);
    x_axis(svg, y, x0, x1, end, per, label);
    svg.raw("</g>");
    drawn.y = y + 40;
    return drawn;
}

// A swatch for every shade the panels drew (an op's colour, lighter on odd chunks), what blank
// and hatching mean, and how actions are named.
void legend(Svg& svg, double y, bool odd_chunks, bool transfers) {
    double x = kLeft;
    const std::pair<pp::Op, const char*> items[] = {
        {pp::Op::F, "F forward"}, {pp::Op::B, "B backward"}, {pp::Op::BI, "BI input grad"}, {pp::Op::BW, "BW weight grad"}};
    for (const auto& [op, text] : items) {
        svg.rect(x, y, 14, 12, op_colour(op), "class=\"legend\"");
        if (odd_chunks) svg.rect(x + 16, y, 14, 12, op_colour(op), "class=\"legend\" " + kOddChunk);
        svg.text(x + (odd_chunks ? 34 : 18), y + 10, text, 11);
        x += odd_chunks ? 140 : 120;
    }
    svg.text(x, y + 10, odd_chunks ? "F3.1 = micro-batch 3 on chunk 1" : "F3 = micro-batch 3", 11);
    x = kLeft, y += 18;
    svg.rect(x, y, 14, 12, "#f4f4f4", "class=\"legend\" stroke=\"#cccccc\"");
    svg.text(x + 18, y + 10, "idle, or waiting for a peer", 11);
    if (transfers) {
        svg.rect(x + 200, y, 14, 12, "url(#hatch)", "class=\"legend\"");
        svg.text(x + 218, y + 10, "transfer (measured: about the rank's shortest send/recv group)", 11);
    }
    if (odd_chunks) svg.text(x + 620, y + 10, "lighter: odd chunks", 11);
}

const char* kHatch =
    "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
    "<rect width=\"6\" height=\"6\" fill=\"#fde2e2\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#d62728\" "
    "stroke-width=\"2\"/></pattern></defs>";

int rows_of(const std::vector<pp::Event>& events) {
    int P = 0;
    for (const pp::Event& e : events) P = std::max(P, e.rank + 1);
    return P;
}

}  // namespace

std::string timeline_svg(const std::vector<pp::Event>& measured, const std::string& title,
                         const std::vector<pp::Event>* simulated, const std::string& simulated_title, const std::string& axis) {
    auto panel = [](const std::vector<pp::Event>& events) { return 24 + rows_of(events) * kRow + 40; };
    const double top = 50;   // under the legend's two lines
    Svg svg(kWidth, top + panel(measured) + (simulated ? panel(*simulated) : 0) + 10);
    svg.raw(kHatch);
    double end = 0;
    for (const pp::Event& e : measured) end = std::max(end, e.end);
    if (simulated)
        for (const pp::Event& e : *simulated) end = std::max(end, e.end);
    Drawn first = draw_timeline(svg, measured, top, title, axis, end), second;
    if (simulated) second = draw_timeline(svg, *simulated, first.y, simulated_title, "time (µs, simulated)", end);
    legend(svg, 10, first.odd_chunks || second.odd_chunks, first.transfers || second.transfers);
    return svg.str();
}

namespace {

struct Series {
    std::vector<double> x, y;
    std::string name, colour;
    bool points = false;   // dots, not a line
};

// A line chart with both axes ticked and labelled.
std::string line_chart(const std::string& title, const std::string& xlabel, const std::string& ylabel,
                       const std::vector<Series>& series) {
    const double W = 720, H = 420, x0 = 80, x1 = W - 20, y0 = H - 60, y1 = 40;
    double xlo = 1e300, xhi = -1e300, ylo = 1e300, yhi = -1e300;
    for (const Series& s : series)
        for (size_t i = 0; i < s.x.size(); i++)
            if (std::isfinite(s.y[i]))
                xlo = std::min(xlo, s.x[i]), xhi = std::max(xhi, s.x[i]), ylo = std::min(ylo, s.y[i]), yhi = std::max(yhi, s.y[i]);
    if (xlo > xhi) xlo = 0, xhi = 1, ylo = 0, yhi = 1;   // nothing finite to draw: empty axes
    if (xhi == xlo) xlo -= 1, xhi += 1;
    double pad = yhi > ylo ? 0.05 * (yhi - ylo) : std::max(1e-3, std::fabs(yhi) * 0.05);
    ylo -= pad, yhi += pad;
    // The data stops short of the axes' ends by more than a dot's radius: a point on the last step
    // (the final evaluation) stays whole.
    const double inset = 8;
    auto X = [&](double v) { return x0 + inset + (v - xlo) * (x1 - x0 - 2 * inset) / (xhi - xlo); };
    auto Y = [&](double v) { return y0 - (v - ylo) * (y0 - y1) / (yhi - ylo); };
    Svg svg(W, H);
    svg.text(W / 2, 22, title, 14, "middle", "font-weight=\"bold\"");
    svg.line(x0, y0, x1, y0, "#333333"), svg.line(x0, y0, x0, y1, "#333333");
    for (double t : nice_ticks(xlo, xhi, 8))
        if (t == std::floor(t))   // steps are whole numbers
            svg.line(X(t), y0, X(t), y0 + 4, "#333333"), svg.text(X(t), y0 + 16, svg_number(t), 10, "middle");
    for (double t : nice_ticks(ylo, yhi, 6)) {
        svg.line(x0 - 4, Y(t), x0, Y(t), "#333333"), svg.line(x0, Y(t), x1, Y(t), "#eeeeee");
        char b[32];
        std::snprintf(b, sizeof b, "%.4g", t);
        svg.text(x0 - 7, Y(t) + 3, b, 10, "end");
    }
    svg.text((x0 + x1) / 2, H - 20, xlabel, 12, "middle", "class=\"axis-label\"");
    svg.text(18, (y0 + y1) / 2, ylabel, 12, "middle", "class=\"axis-label\" transform=\"rotate(-90 18 " + svg_number((y0 + y1) / 2) + ")\"");
    double lx = x1 - 150;
    for (size_t k = 0; k < series.size(); k++) {
        const Series& s = series[k];
        std::vector<double> xs, ys;
        for (size_t i = 0; i < s.x.size(); i++)
            if (std::isfinite(s.y[i])) xs.push_back(X(s.x[i])), ys.push_back(Y(s.y[i]));
        if (s.points) for (size_t i = 0; i < xs.size(); i++) svg.circle(xs[i], ys[i], 3.5, s.colour);
        else svg.polyline(xs, ys, s.colour);
        svg.rect(lx, y1 + 4 + 16 * double(k), 12, 10, s.colour, "class=\"legend\"");
        svg.text(lx + 16, y1 + 13 + 16 * double(k), s.name, 11);
    }
    return svg.str();
}

// metrics.jsonl: every line an object with the keys the trainer writes (see the top of this file).
std::vector<nlohmann::json> read_metrics(const std::string& path) {
    std::vector<nlohmann::json> lines;
    std::vector<std::string> text = read_lines(path);
    for (size_t i = 0; i < text.size(); i++) {
        std::string where = path + ":" + std::to_string(i + 1);
        nlohmann::json j = parse_json(text[i], where);
        for (const char* key : {"step", "loss", "tok_per_s"})
            if (!j.is_object() || !j.contains(key) || !(j[key].is_number() || j[key].is_null()))
                fail(where, std::string("expected a step of pipetrain train, with a number \"") + key + "\"");
        lines.push_back(std::move(j));
    }
    if (lines.empty()) fail(path, "no step (an empty metrics log)");
    return lines;
}

double number_or_nan(const nlohmann::json& j) { return j.is_number() ? j.get<double>() : NAN; }

// The measured timeline of a Chrome trace that pp::chrome_trace wrote ("X" events; counters and
// metadata are skipped).
std::vector<pp::Event> read_trace(const std::string& path) {
    nlohmann::json j = parse_json(read_file(path), path);
    if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
        fail(path, "not a Chrome trace of pipetrain (no \"traceEvents\" array)");
    std::vector<pp::Event> events;
    size_t k = 0;
    for (const auto& e : j["traceEvents"]) {
        k++;
        if (!e.is_object() || e.value("ph", nlohmann::json()) != "X") continue;   // value(k, ""): a type_error where "ph" is no string
        if (e.contains("tid") && e.contains("pid") && e["tid"] != e["pid"]) continue;   // a rank's data-parallel sums
        try {
            pp::Event ev;
            ev.rank = e.at("pid").get<int>(), ev.start = e.at("ts").get<double>(), ev.end = ev.start + e.at("dur").get<double>();
            std::string name = e.at("name").get<std::string>();
            ev.comm = name == "comm";
            if (ev.comm && e.contains("args") && e["args"].is_object() && e["args"].contains("transfer"))
                ev.transfer = e["args"]["transfer"].get<double>();   // a simulated trace's (pipetrain schedule --trace)
            if (!ev.comm && !parse_action(name, &ev.action)) throw std::runtime_error("name " + e.at("name").dump() + " is no action");
            if (ev.rank < 0 || ev.rank > 4096 || !(ev.end >= ev.start) || !std::isfinite(ev.end))
                throw std::runtime_error("rank or time out of range");
            events.push_back(std::move(ev));
        } catch (const std::exception& ex) {
            fail(path, "event " + std::to_string(k) + ": " + ex.what());
        }
    }
    if (events.empty()) fail(path, "no timeline event (\"ph\":\"X\")");
    return events;
}

// Each rank's mean measured time of F, BI, BW (a full B is counted half BI, half BW).
std::vector<pp::Costs> measured_costs(const std::vector<pp::Event>& events, int P) {
    std::vector<std::array<double, 4>> sum(P, {0, 0, 0, 0}), n(P, {0, 0, 0, 0});
    for (const pp::Event& e : events)
        if (!e.comm && e.rank < P) sum[e.rank][int(e.action.op)] += e.end - e.start, n[e.rank][int(e.action.op)]++;
    std::vector<pp::Costs> costs(P);
    for (int r = 0; r < P; r++) {
        auto mean = [&](pp::Op op, double fallback) { int i = int(op); return n[r][i] ? sum[r][i] / n[r][i] : fallback; };
        double f = mean(pp::Op::F, 1), b = mean(pp::Op::B, 2 * f);
        costs[r] = {f, mean(pp::Op::BI, b / 2), mean(pp::Op::BW, b / 2), 0};
    }
    return costs;
}

}  // namespace

// ---- pipetrain plot -------------------------------------------------------------------------

int plot_main(const std::vector<std::string>& argv) {
    Args a(argv, {"--metrics", "--trace", "--schedule", "--out"}, {}, true);
    if (a.positional().size() > 1) throw std::runtime_error("plot: expected one run directory, got " + std::to_string(a.positional().size()));
    std::string run = a.positional().empty() ? "" : a.positional()[0];
    if (run.empty() && !a.has("--metrics") && !a.has("--trace"))
        throw std::runtime_error("plot: give a run directory (pipetrain plot OUT) or --metrics F.jsonl / --trace F.json");
    if (!run.empty() && !std::filesystem::is_directory(run)) throw std::runtime_error(run + ": not a directory (the --out of pipetrain train)");
    std::string out = a.str("--out", run);
    if (out.empty()) throw std::runtime_error("--out: required without a run directory");
    std::string metrics = a.str("--metrics", run.empty() ? "" : run + "/metrics.jsonl");
    std::string sched_path = a.str("--schedule", run.empty() ? "" : run + "/schedule.json");
    std::string trace = a.str("--trace");

    // Everything is read and drawn first, then written: a bad input leaves no picture behind.
    std::vector<std::pair<std::string, std::string>> files;
    if (!metrics.empty()) {
        Series loss{{}, {}, "train loss", "#4e79a7"}, eval{{}, {}, "eval loss", "#e15759", true}, tok{{}, {}, "tokens/s, running mean", "#59a14f"};
        for (const nlohmann::json& j : read_metrics(metrics)) {
            double step = j["step"].get<double>();
            loss.x.push_back(step), loss.y.push_back(number_or_nan(j["loss"]));
            tok.x.push_back(step), tok.y.push_back(number_or_nan(j["tok_per_s"]));
            if (j.contains("eval") && j["eval"].is_object() && j["eval"].contains("loss"))
                eval.x.push_back(step), eval.y.push_back(number_or_nan(j["eval"]["loss"]));
        }
        std::vector<Series> curves = {loss};
        if (!eval.x.empty()) curves.push_back(eval);
        files.push_back({"loss.svg", line_chart("loss", "step", "loss", curves)});
        // tok_per_s is the trainer's mean since the run (or its resume) started, not each step's own
        files.push_back({"throughput.svg", line_chart("throughput: the mean since the run started (or resumed)", "step",
                                                      "tokens per second, mean since the start", {tok})});
    }
    std::string name;
    int V = 1;
    pp::Schedule sched;
    bool have_sched = !sched_path.empty() && (a.has("--schedule") || std::filesystem::exists(sched_path));
    std::string recorded_trace;
    if (have_sched) sched = read_schedule_json(sched_path, &name, &V, &recorded_trace);
    if (!recorded_trace.empty()) recorded_trace = (std::filesystem::path(sched_path).parent_path() / recorded_trace).string();
    if (trace.empty() && !recorded_trace.empty() && std::filesystem::exists(recorded_trace)) trace = recorded_trace;
    if (!trace.empty()) {
        std::vector<pp::Event> measured = read_trace(trace);
        std::vector<pp::Event> simulated;
        if (have_sched) simulated = pp::simulate(sched, measured_costs(measured, int(sched.size())), V).events;
        files.push_back({"timeline.svg",
                         timeline_svg(measured, "measured: the last step (" + trace + ")", have_sched ? &simulated : nullptr,
                                      "simulated: " + name + " with each rank's measured mean F, B, BI, BW times, free transfers")});
    } else if (have_sched) {
        std::vector<pp::Event> simulated = pp::simulate(sched, pp::Costs{}, V).events;
        files.push_back({"timeline.svg", timeline_svg(simulated, "simulated: " + name + " with unit costs (no --trace was recorded)",
                                                      nullptr, "", "time (cost units)")});
    }
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    if (ec) throw std::runtime_error("--out: cannot create " + out + " (" + ec.message() + ")");
    for (const auto& [file, svg] : files) {
        write_file_atomic(out + "/" + file, svg);
        std::printf("wrote %s/%s\n", out.c_str(), file.c_str());
    }
    return 0;
}

}  // namespace pt
