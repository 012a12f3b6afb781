// src/cli/schedule_csv.cpp — PyTorch's schedule CSV: read (checked cell by cell, the lowered
// actions dropped, then pp::validate), and written (compute only).
#include "src/cli/schedule_csv.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

#include "pipeline_lab.hpp"
#include "src/cli/args.hpp"
#include "src/formats/io.hpp"

namespace pt {

namespace {

// PyTorch's computation types (torch.distributed.pipelining.schedules._ComputationType).
enum class Kind { F, I, W, B, send_f, recv_f, send_b, recv_b, unshard, reshard, reduce_grad };
const std::pair<const char*, Kind> kKinds[] = {
    {"F", Kind::F}, {"I", Kind::I}, {"W", Kind::W}, {"B", Kind::B}, {"SEND_F", Kind::send_f},
    {"RECV_F", Kind::recv_f}, {"SEND_B", Kind::send_b}, {"RECV_B", Kind::recv_b}, {"UNSHARD", Kind::unshard},
    {"RESHARD", Kind::reshard}, {"REDUCE_GRAD", Kind::reduce_grad}};
bool is_compute(Kind k) { return k <= Kind::B; }
bool takes_microbatch(Kind k) { return k < Kind::unshard; }   // the others name a stage alone
const char* kind_name(Kind k) {
    for (const auto& [text, kind] : kKinds)
        if (kind == k) return text;
    return "?";
}

// One action of the file, and where it stands (line and column from 1; an OVERLAP_F_B cell holds two).
struct Cell {
    Kind kind = Kind::F;
    int stage = 0, mb = -1;     // mb -1: none (UNSHARD, RESHARD, REDUCE_GRAD)
    bool overlapped = false;    // the backward of an OVERLAP_F_B pair
    int line = 0, column = 0;
    std::string text;           // the cell as written
};

struct File {
    std::string name;
    std::vector<std::vector<Cell>> rows;   // [rank]: its actions, idle cells left out
    std::vector<int> cells;                // [rank]: how many cells the line has, idle ones included
};

// Numbers this large are out of every range; 10 digits and more are clamped here, not wrapped.
constexpr int kHuge = 1000000000;

std::string where(const std::string& name, int line, int column, const std::string& text) {
    return name + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + (text.empty() ? "" : text + ": ");
}
[[noreturn]] void fail_at(const std::string& name, const Cell& c, const std::string& what) {
    throw std::runtime_error(printable(where(name, c.line, c.column, c.text) + what));
}

std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// The digits at s[*at...] as a number (kHuge when longer than 9), -1 when there are none.
int digits(const std::string& s, size_t* at) {
    size_t from = *at;
    long long v = 0;
    while (*at < s.size() && s[*at] >= '0' && s[*at] <= '9') v = std::min<long long>(v * 10 + (s[(*at)++] - '0'), kHuge);
    return *at == from ? -1 : int(v);
}

// "3F1", "0UNSHARD", "1SEND_F2": PyTorch's [stage][type][micro-batch]; false when it is none.
bool parse_action(const std::string& s, Cell* c) {
    size_t at = 0;
    c->stage = digits(s, &at);
    size_t type = at;
    while (at < s.size() && ((s[at] >= 'A' && s[at] <= 'Z') || s[at] == '_')) at++;
    std::string name = s.substr(type, at - type);
    c->mb = digits(s, &at);
    if (c->stage < 0 || at != s.size()) return false;
    for (const auto& [text, kind] : kKinds)
        if (name == text) {
            c->kind = kind;
            return takes_microbatch(kind) == (c->mb >= 0);
        }
    return false;
}

// A cell into `row`: nothing for an idle one, two actions for an overlapped pair.
void parse_cell(const std::string& name, const std::string& text, int line, int column, std::vector<Cell>& row) {
    Cell c;
    c.text = trim(text), c.line = line, c.column = column;
    if (c.text.empty()) return;
    const std::string overlap = ")OVERLAP_F_B";
    size_t n = c.text.size();
    if (c.text[0] == '(' && n > overlap.size() && c.text.compare(n - overlap.size(), overlap.size(), overlap) == 0) {
        std::string pair = c.text.substr(1, n - 1 - overlap.size());
        size_t semi = pair.find(';');
        Cell f = c, b = c;
        if (semi == std::string::npos || !parse_action(pair.substr(0, semi), &f) || !parse_action(pair.substr(semi + 1), &b) ||
            f.kind != Kind::F || (b.kind != Kind::B && b.kind != Kind::I))
            fail_at(name, c, "unknown action: an overlapped pair is (<stage>F<micro-batch>;<stage>B<micro-batch>)OVERLAP_F_B"
                             " (B or I)");
        if (f.stage == b.stage && f.mb == b.mb)   // simulated overlapped, it ran in less than F + B
            fail_at(name, c, "an overlapped pair of one micro-batch on one stage: its backward needs its forward's output");
        b.overlapped = true;
        row.push_back(f), row.push_back(b);
        return;
    }
    if (!parse_action(c.text, &c))
        fail_at(name, c, "unknown action: expected <stage><F|B|I|W><micro-batch> (0F1, 1I3), a lowered one (0SEND_F1, "
                         "1RECV_B0, 0UNSHARD, 0RESHARD, 0REDUCE_GRAD) or (0F3;3B1)OVERLAP_F_B");
    row.push_back(c);
}

File parse_rows(const std::string& text, const std::string& name) {
    std::vector<std::string> lines = split_lines(text);
    for (std::string& l : lines)
        if (!l.empty() && l.back() == '\r') l.pop_back();   // csv.writer ends lines in CRLF
    while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();
    if (lines.empty()) throw std::runtime_error(name + ": no rows: expected one row of actions per rank");
    if (lines.size() > 64) throw std::runtime_error(name + ": " + std::to_string(lines.size()) + " rows: at most 64 ranks, as --stages");
    File f{name, std::vector<std::vector<Cell>>(lines.size()), {}};
    for (size_t r = 0; r < lines.size(); r++) {
        std::vector<std::string> cells = split(lines[r], ',');
        f.cells.push_back(int(cells.size()));
        for (size_t k = 0; k < cells.size(); k++) parse_cell(name, cells[k], int(r) + 1, int(k) + 1, f.rows[r]);
    }
    return f;
}

// The first cell (in file order) whose stage `layout` does not put on its line's rank; null if none.
const Cell* misplaced(const File& f, const pp::Layout& layout) {
    for (size_t r = 0; r < f.rows.size(); r++)
        for (const Cell& c : f.rows[r])
            if (layout.rank(c.stage) != int(r)) return &c;
    return nullptr;
}

std::string placement_rule(const pp::Layout& l) {
    return l.placement == pp::Placement::loop ? "the loop placement (rank r holds stages c*P + r)"
                                               : "the V placement (rank r holds stages r and 2P-1-r)";
}

[[noreturn]] void fail_misplaced(const File& f, const Cell& c, const pp::Layout& l, const std::string& also) {
    fail_at(f.name, c, "stage " + std::to_string(c.stage) + " is on rank " + std::to_string(l.rank(c.stage)) + " in " +
                           placement_rule(l) + ", not on rank " + std::to_string(c.line - 1) + " (line " +
                           std::to_string(c.line) + ")" + also);
}

// Ranks, chunks and placement: P is the number of lines, V = S / P from the largest stage, the
// placement the one given or the one every cell fits (loop first: with V = 1 they are the same).
pp::Layout choose_layout(const File& f, const CsvExpect& e) {
    int P = int(f.rows.size()), top = -1;
    if (e.P > 0 && e.P != P)
        throw std::runtime_error(f.name + ": " + count_of(P, "line") + " (one per rank), but --stages " + std::to_string(e.P));
    int V = e.V > 0 ? e.V : pp::kMaxChunks;
    for (const auto& row : f.rows)
        for (const Cell& c : row) {
            if (c.stage >= P * V)
                fail_at(f.name, c, "stage out of range: " + count_of(P, "rank") + " × " + count_of(V, "chunk") +
                                       " hold stages 0 to " + std::to_string(P * V - 1) +
                                       (e.V > 0 ? " (--chunks)" : " (at most 128 chunks per rank)"));
            top = std::max(top, c.stage);
        }
    if (top < 0) throw std::runtime_error(f.name + ": no actions: every cell is empty");
    if (e.V == 0) V = top / P + 1;
    pp::Layout loop{P, V, pp::Placement::loop}, vee{P, V, pp::Placement::vee};
    if (!e.placement.empty()) {
        pp::Layout given = e.placement == "v" ? vee : loop;
        if (e.placement == "v" && V == 1)   // the V holds two stages a rank; the simulation then failed, naming no file
            throw std::runtime_error(f.name + ": --placement v: " + std::to_string(top + 1) + " stages on " + count_of(P, "rank") +
                                     ", one a rank; the V holds two a rank (" + std::to_string(2 * P) + " stages)");
        if (const Cell* c = misplaced(f, given)) fail_misplaced(f, *c, given, " (--placement " + e.placement + ")");
        return given;
    }
    const Cell* a = misplaced(f, loop);
    if (!a) return loop;
    const Cell* b = misplaced(f, vee);
    if (!b) return vee;
    bool later = std::make_pair(b->line, b->column) > std::make_pair(a->line, a->column);   // the one that fits longer
    fail_misplaced(f, later ? *b : *a, later ? vee : loop, ", nor does " + placement_rule(later ? loop : vee) + " fit");
}

// M: given, or one more than the largest micro-batch the first stage runs forward (where micro-batches enter).
int count_microbatches(const File& f, int given) {
    if (given > 0) return given;
    int M = 0;
    for (const auto& row : f.rows)
        for (const Cell& c : row)
            if (c.kind == Kind::F && c.stage == 0) M = std::max(M, std::min(c.mb, 1 << 22) + 1);
    if (M == 0) throw std::runtime_error(f.name + ": stage 0 runs no forward: no micro-batch enters the pipeline");
    return M;
}

std::string cell_name(int stage, Kind k, int mb) { return std::to_string(stage) + kind_name(k) + std::to_string(mb); }

// Every micro-batch in range, and each (stage, micro-batch) runs F and B, or I and W, once each.
void check_microbatches(const File& f, const pp::Layout& layout, int M, bool given) {
    std::map<std::tuple<int, Kind, int>, const Cell*> first;   // (stage, kind, micro-batch)
    for (const auto& row : f.rows)
        for (const Cell& c : row) {
            if (c.mb >= 4096)   // digits() caps a longer number at kHuge: said "too large", not as kHuge
                fail_at(f.name, c, "micro-batch " + (c.mb >= kHuge ? "number too large" : std::to_string(c.mb)) +
                                       ": at most 4096 micro-batches, as --micro-batches");
            if (c.mb >= M)
                fail_at(f.name, c, "micro-batch " + std::to_string(c.mb) + " out of range: " +
                                       (given ? "--micro-batches " + std::to_string(M) + " (0 to " + std::to_string(M - 1) + ")"
                                              : "stage 0 runs the forwards of micro-batches 0 to " + std::to_string(M - 1) +
                                                    " only"));
            if (!is_compute(c.kind)) continue;
            auto [it, fresh] = first.emplace(std::make_tuple(c.stage, c.kind, c.mb), &c);
            if (!fresh)
                fail_at(f.name, c, "micro-batch " + std::to_string(c.mb) + " runs " + kind_name(c.kind) + " on stage " +
                                       std::to_string(c.stage) + " twice (first at line " + std::to_string(it->second->line) +
                                       ", column " + std::to_string(it->second->column) + ")");
        }
    auto has = [&](int s, Kind k, int mb) { return first.count(std::make_tuple(s, k, mb)) > 0; };
    for (int s = 0; s < layout.P * layout.V; s++)
        for (int mb = 0; mb < M; mb++) {
            bool i = has(s, Kind::I, mb), w = has(s, Kind::W, mb);
            std::string missing = !has(s, Kind::F, mb) ? cell_name(s, Kind::F, mb)
                                  : !has(s, Kind::B, mb) && !i && !w ? cell_name(s, Kind::B, mb) + " (or I and W)"
                                  : i != w ? cell_name(s, i ? Kind::W : Kind::I, mb) : "";
            int r = layout.rank(s);
            if (!missing.empty())
                throw std::runtime_error(printable(where(f.name, r + 1, f.cells[r] + 1, "") + "micro-batch " + std::to_string(mb) +
                                                   " missing: stage " + std::to_string(s) + " (rank " + std::to_string(r) +
                                                   ", this line) never runs " + missing));
        }
}

// A lowered file's transfers: a send follows its action on the line and a receive precedes it,
// the peer stage is on another rank, and the other end is in the file. UNSHARD, RESHARD and
// REDUCE_GRAD only need their stage on the line (choose_layout saw to it).
void check_transfers(const File& f, const pp::Layout& layout) {
    std::map<std::tuple<Kind, int, int>, const Cell*> posted;   // (kind, stage, micro-batch) of every transfer
    for (const auto& row : f.rows)
        for (const Cell& c : row)
            if (!is_compute(c.kind) && takes_microbatch(c.kind)) {
                auto [it, fresh] = posted.emplace(std::make_tuple(c.kind, c.stage, c.mb), &c);
                if (!fresh)   // one of the two would have nothing to match it
                    fail_at(f.name, c, "the same transfer twice (first at line " + std::to_string(it->second->line) + ", column " +
                                           std::to_string(it->second->column) + ")");
            }
    for (size_t r = 0; r < f.rows.size(); r++) {
        std::set<std::tuple<bool, int, int>> done;   // (backward?, stage, micro-batch) run so far on this line
        for (const Cell& c : f.rows[r]) {
            if (is_compute(c.kind)) done.insert({c.kind != Kind::F, c.stage, c.mb});
            if (is_compute(c.kind) || !takes_microbatch(c.kind)) continue;
            bool forward = c.kind == Kind::send_f || c.kind == Kind::recv_f, send = c.kind == Kind::send_f || c.kind == Kind::send_b;
            int peer = c.stage + (forward == send ? 1 : -1);   // SEND_F and RECV_B: the next stage
            Kind other = send ? (forward ? Kind::recv_f : Kind::recv_b) : (forward ? Kind::send_f : Kind::send_b);
            std::string action = std::to_string(c.stage) + (forward ? "F" : "B or I") + std::to_string(c.mb);
            if (peer < 0 || peer >= layout.P * layout.V)
                fail_at(f.name, c, "no stage " + std::to_string(peer) + " to " + (send ? "send to" : "receive from"));
            if (layout.rank(peer) == int(r))
                fail_at(f.name, c, "stage " + std::to_string(peer) + " is on this rank too: nothing to transfer");
            if (send != done.count({!forward, c.stage, c.mb}))
                fail_at(f.name, c, std::string(send ? "sends before " : "receives after ") + action + " runs on this line");
            if (!posted.count(std::make_tuple(other, peer, c.mb)))
                fail_at(f.name, c, "no " + cell_name(peer, other, c.mb) + " in the file to match it");
        }
    }
}

pp::Action to_action(const Cell& c, const pp::Layout& layout) {
    pp::Op op = c.kind == Kind::F ? pp::Op::F : c.kind == Kind::I ? pp::Op::BI : c.kind == Kind::W ? pp::Op::BW : pp::Op::B;
    return {op, c.mb, layout.chunk(c.stage), c.overlapped};
}

pp::Schedule to_schedule(const File& f, const pp::Layout& layout) {
    pp::Schedule s(f.rows.size());
    s.placement = layout.placement;
    for (size_t r = 0; r < f.rows.size(); r++)
        for (const Cell& c : f.rows[r])
            if (is_compute(c.kind)) s[r].push_back(to_action(c, layout));   // pipetrain derives its own transfers
    return s;
}

// pp::validate names a rank and an action ("rank 1, action F3.1: ...", "rank 1 (before F3.1) waits
// ..."): its message, after the file, and the line, column and cell of that action where found.
[[noreturn]] void fail_validate(const File& f, const pp::Layout& layout, const std::string& what) {
    size_t at = what.find("rank ");
    size_t r = at == std::string::npos ? f.rows.size() : size_t(std::atoi(what.c_str() + at + 5));
    if (r >= f.rows.size()) throw std::runtime_error(printable(f.name + ": " + what));
    std::string rank = "rank " + std::to_string(r);
    for (const Cell& c : f.rows[r]) {
        if (!is_compute(c.kind)) continue;
        std::string label = pp::to_string(to_action(c, layout), layout.V > 1);
        if (what.find(rank + ", action " + label + ":") != std::string::npos ||
            what.find(rank + " (before " + label + ")") != std::string::npos)
            fail_at(f.name, c, what);
    }
    throw std::runtime_error(printable(f.name + ":" + std::to_string(r + 1) + ": " + what));
}

std::string csv_cell(const pp::Action& a, int rank, const pp::Layout& layout) {
    const char* op = a.op == pp::Op::F ? "F" : a.op == pp::Op::B ? "B" : a.op == pp::Op::BI ? "I" : "W";
    return std::to_string(layout.stage(rank, a.chunk)) + op + std::to_string(a.microbatch);
}

}  // namespace

CsvSchedule parse_schedule_csv(const std::string& text, const std::string& name, const CsvExpect& expect) {
    if (!expect.placement.empty() && expect.placement != "loop" && expect.placement != "v")
        throw std::runtime_error("--placement: expected loop or v, got \"" + expect.placement + "\"");
    File f = parse_rows(text, name);
    pp::Layout layout = choose_layout(f, expect);
    CsvSchedule out;
    out.V = layout.V;
    out.M = count_microbatches(f, expect.M);
    check_microbatches(f, layout, out.M, expect.M > 0);
    check_transfers(f, layout);
    out.schedule = to_schedule(f, layout);
    try {   // the order of each line, and the transfers (late sends where needed) run to the end
        pp::validate(out.schedule, out.M, out.V, pp::plan_for(out.schedule, out.V));
    } catch (const std::runtime_error& e) {
        fail_validate(f, layout, e.what());
    }
    return out;
}

CsvSchedule read_schedule_csv(const std::string& path, const CsvExpect& expect) {
    return parse_schedule_csv(read_file(path), path, expect);
}

std::string schedule_csv(const pp::Schedule& schedule) {
    int V = 1;
    for (const auto& actions : schedule)
        for (const pp::Action& a : actions) V = std::max(V, a.chunk + 1);
    pp::Layout layout{int(schedule.size()), V, schedule.placement};
    std::string out;
    for (size_t r = 0; r < schedule.size(); r++) {
        const std::vector<pp::Action>& actions = schedule[r];
        std::string line;
        for (size_t i = 0; i < actions.size(); i++) {
            std::string cell = csv_cell(actions[i], int(r), layout);
            if (actions[i].op == pp::Op::F && i + 1 < actions.size() && actions[i + 1].overlapped)   // DualPipe's F&B
                cell = "(" + cell + ";" + csv_cell(actions[++i], int(r), layout) + ")OVERLAP_F_B";
            line += (line.empty() ? "" : ",") + cell;
        }
        out += line + "\r\n";
    }
    return out;
}

}  // namespace pt
