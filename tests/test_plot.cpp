// What `train` keeps of a run (OUT/metrics.jsonl, OUT/schedule.json, counters in --trace) and the
// SVG pictures `pipetrain plot` and `pipetrain schedule --svg` draw from them.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/cli_util.hpp"

using namespace test;
namespace fs = std::filesystem;

namespace {

const std::string kSample = fixture("text/sample_zh.txt");
const std::string kRun = "train --preset tiny --data " + kSample + " --stages 2 --micro-batches 4 --batch 8 --seq 16";

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) n++;
    return n;
}

// A minimal XML well-formedness check: one root element, every tag closed in order, attributes
// name="value" (or '…') without '<' in the value, text without a raw '<' and '&' only in entities.
// Returns "" or what is wrong, and where.
std::string xml_problem(const std::string& x) {
    std::vector<std::string> open;
    size_t i = 0, roots = 0;
    auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' || c == '.'; };
    auto where = [&](const std::string& what) { return what + " at byte " + std::to_string(i); };
    if (x.compare(0, 5, "<?xml") == 0) {
        i = x.find("?>");
        if (i == std::string::npos) return "unterminated <?xml";
        i += 2;
    }
    while (i < x.size()) {
        if (x[i] != '<') {
            if (x[i] == '&') {
                size_t semi = x.find(';', i);
                std::string ent = semi == std::string::npos ? "" : x.substr(i, semi - i + 1);
                if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;") return where("bad entity");
            }
            if (open.empty() && !std::isspace(static_cast<unsigned char>(x[i]))) return where("text outside the root");
            i++;
            continue;
        }
        bool closing = x[i + 1] == '/';
        i += closing ? 2 : 1;
        size_t n0 = i;
        while (i < x.size() && name_char(x[i])) i++;
        std::string name = x.substr(n0, i - n0);
        if (name.empty()) return where("a tag without a name");
        if (closing) {
            if (open.empty() || open.back() != name) return where("</" + name + "> closes " + (open.empty() ? "nothing" : open.back()));
            open.pop_back();
            if (i >= x.size() || x[i] != '>') return where("</" + name + " not closed by >");
            i++;
            continue;
        }
        if (open.empty() && ++roots > 1) return where("a second root element");
        for (;;) {   // attributes
            while (i < x.size() && std::isspace(static_cast<unsigned char>(x[i]))) i++;
            if (i >= x.size()) return where("unterminated <" + name);
            if (x[i] == '>') { open.push_back(name), i++; break; }
            if (x.compare(i, 2, "/>") == 0) { i += 2; break; }
            size_t a0 = i;
            while (i < x.size() && name_char(x[i])) i++;
            if (i == a0 || i >= x.size() || x[i] != '=') return where("attribute without =\"value\" in <" + name);
            char q = x[++i];
            if (q != '"' && q != '\'') return where("unquoted attribute in <" + name);
            size_t end = x.find(q, i + 1);
            if (end == std::string::npos) return where("unterminated attribute value");
            if (x.substr(i + 1, end - i - 1).find('<') != std::string::npos) return where("'<' in an attribute value");
            i = end + 1;
        }
    }
    if (!open.empty()) return "<" + open.back() + "> never closed";
    return roots == 1 ? "" : "no root element";
}

// The timeline actions of a Chrome trace (its "X" events that are not transfers).
size_t trace_actions(const std::string& path) {
    nlohmann::json j = nlohmann::json::parse(read_file(path));
    size_t n = 0;
    for (const auto& e : j["traceEvents"]) n += e["ph"] == "X" && e["name"] != "comm";
    return n;
}

// The attributes of each <svg_tag ...> element of `svg` (the writer puts one element on a line).
std::vector<std::map<std::string, std::string>> elements(const std::string& svg, const std::string& tag) {
    static const std::regex attr("([a-z0-9-]+)=\"([^\"]*)\"");
    std::vector<std::map<std::string, std::string>> out;
    for (const std::string& line : lines_of(svg)) {
        if (line.rfind("<" + tag + " ", 0) != 0) continue;
        out.emplace_back();
        for (std::sregex_iterator m(line.begin(), line.end(), attr), end; m != end; ++m) out.back()[(*m)[1]] = (*m)[2];
    }
    return out;
}

// A shade: a fill and its opacity ("" when opaque).
std::set<std::pair<std::string, std::string>> shades(const std::string& svg, const std::string& class_prefix) {
    std::set<std::pair<std::string, std::string>> out;
    for (auto& r : elements(svg, "rect"))
        if (r["class"].rfind(class_prefix, 0) == 0) out.insert({r["fill"], r["fill-opacity"]});
    return out;
}

// The timeline's panels (measured, then simulated), each from its <g class="panel"> to its </g>.
std::vector<std::string> panels(const std::string& svg) {
    std::vector<std::string> out;
    for (size_t at = svg.find("<g class=\"panel\">"); at != std::string::npos; at = svg.find("<g class=\"panel\">", at + 1))
        out.push_back(svg.substr(at, svg.find("</g>", at) - at));
    return out;
}

// Renders with rsvg-convert where it is installed (librsvg2-bin); says it skipped otherwise.
void check_renders(const std::string& svg) {
    if (run_command("command -v rsvg-convert").code != 0) {
        MESSAGE("skipped: rsvg-convert is not on PATH (Debian librsvg2-bin), " << svg << " not rendered");
        return;
    }
    Run r = run_command("rsvg-convert -o " + svg + ".png " + svg);
    CAPTURE(r.out);
    CHECK(r.code == 0);
    CHECK(fs::file_size(svg + ".png") > 0);
}

}  // namespace

TEST_CASE("metrics.jsonl: one line per step with the keys; eval on the evaluation steps; resume appends") {
    std::string dir = temp_dir("metrics"), out = dir + "/o";
    Run r = run_cli(kRun + " --steps 4 --eval-every 2 --save-every 2 --out " + out);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    std::vector<std::string> lines = lines_of(read_file(out + "/metrics.jsonl"));
    REQUIRE(lines.size() == 4);
    for (size_t i = 0; i < lines.size(); i++) {
        CAPTURE(lines[i]);
        nlohmann::json j = nlohmann::json::parse(lines[i]);
        CHECK(j["step"] == int(i + 1));
        for (const char* key : {"loss", "lr", "grad_norm", "tok_per_s", "bubble"}) CHECK(j[key].is_number());
        REQUIRE(j["ranks"].size() == 2);
        for (const auto& k : j["ranks"]) {
            for (const char* key : {"busy_us", "wait_us", "span_us", "peak_stash_bytes", "peak_stashes", "lent_us", "helped_us"})
                CHECK(k[key].is_number());
            CHECK(k["helped_us"].get<double>() >= 0);
            CHECK(k["busy_us"].get<double>() > 0);
            CHECK(k["lent_us"].get<double>() <= k["wait_us"].get<double>() + 1);   // lent while it waited
            CHECK(k["busy_us"].get<double>() + k["wait_us"].get<double>() <= k["span_us"].get<double>() * 1.001);
        }
        // --eval-every 2 evaluates after step 2; the final evaluation belongs to the last step.
        CHECK(j.contains("eval") == (i == 1 || i == 3));
        if (j.contains("eval")) CHECK(j["eval"]["ppl"].get<double>() > 1);
    }
    // The loss logged is the loss printed.
    CHECK(r.out.find("step 4/4 | loss " + std::string(nlohmann::json::parse(lines[3])["loss"].dump()).substr(0, 5)) != std::string::npos);
    // The per-rank compute/communication summary, after the run and at each evaluation.
    CHECK(count(r.out, "rank 1: compute ") == 2);
    CHECK(r.out.find("waiting ") != std::string::npos);

    // A resume from checkpoint-2 into the same OUT keeps steps 1-2 and logs 3-4 again: each step once.
    r = run_cli("train --resume " + out + "/checkpoint-2 --data " + kSample + " --stages 2 --steps 4 --out " + out);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    lines = lines_of(read_file(out + "/metrics.jsonl"));
    REQUIRE(lines.size() == 4);
    for (size_t i = 0; i < lines.size(); i++) CHECK(nlohmann::json::parse(lines[i])["step"] == int(i + 1));

    // A fresh run into an existing OUT (--overwrite: it holds a model) starts a new log.
    r = run_cli(kRun + " --steps 3 --out " + out + " --overwrite");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    CHECK(lines_of(read_file(out + "/metrics.jsonl")).size() == 3);
    // A run that fails before saving anything leaves no OUT (the log does not keep it).
    Run nan = run_cli("train --preset tiny --data " + kSample + " --steps 5 --lr 1e30 --out " + dir + "/nan");
    CHECK(nan.code != 0);
    CHECK(!fs::exists(dir + "/nan"));
    fs::remove_all(dir);
}

TEST_CASE("metrics.jsonl of a classifier: eval holds loss and accuracy") {
    std::string dir = temp_dir("metrics_classify");
    Run r = run_cli("train --preset tiny --stages 2 --steps 4 --eval-every 2 --task classify --labels 2 --data " +
                    fixture("classify/train.tsv") + " --eval " + fixture("classify/dev.tsv") +
                    " --batch 8 --micro-batches 2 --seq 32 --out " + dir + "/o");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    std::vector<std::string> lines = lines_of(read_file(dir + "/o/metrics.jsonl"));
    REQUIRE(lines.size() == 4);
    nlohmann::json last = nlohmann::json::parse(lines[3]);
    REQUIRE(last.contains("eval"));
    double acc = last["eval"]["accuracy"].get<double>();
    CHECK((acc >= 0 && acc <= 1));
    CHECK(!last["eval"].contains("ppl"));
    // The accuracy logged is the one the run printed at the end.
    char printed[32];
    std::snprintf(printed, sizeof printed, "accuracy %.4f", acc);
    CHECK(r.out.find(printed) != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("trace: counter events for the loss and each rank's stash") {
    std::string dir = temp_dir("counters");
    Run r = run_cli(kRun + " --steps 2 --trace " + dir + "/t.json --out " + dir + "/o");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    nlohmann::json j = nlohmann::json::parse(read_file(dir + "/t.json"));   // still valid JSON
    int loss = 0, stash[2] = {0, 0}, peak[2] = {0, 0};
    for (const auto& e : j["traceEvents"]) {
        if (e["ph"] != "C") continue;
        if (e["name"] == "loss") {
            loss++;
            CHECK(e["pid"] == 0);
            CHECK(e["args"]["loss"].get<double>() > 0);
        }
        if (e["name"] == "stash") {
            int p = e["pid"].get<int>();
            REQUIRE((p == 0 || p == 1));
            stash[p]++, peak[p] = std::max(peak[p], e["args"]["stashes"].get<int>());
        }
    }
    CHECK(loss == 1);   // the trace holds one step: one point
    // Actions are named as the chart names them (one chunk: no ".0"); compute events say their
    // micro-batch and chunk, and their layers as the detail (it was an empty "detail").
    std::set<std::string> names;
    for (const auto& e : j["traceEvents"]) {
        if (e["ph"] != "X") continue;
        names.insert(e["name"].get<std::string>());
        CAPTURE(e.dump());
        const nlohmann::json& args = e["args"];   // value(): a missing key is a failed check, not an abort
        if (e["name"] == "comm") {
            CHECK(args.value("detail", "").find(" rank ") != std::string::npos);
        } else {
            CHECK(args.value("microbatch", -1) >= 0);
            CHECK(args.value("chunk", -1) == 0);
            CHECK(args.value("detail", "").rfind("layers ", 0) == 0);
        }
    }
    CHECK(names == std::set<std::string>{"F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3", "comm"});
    // 1F1B on 2 ranks: rank 0 holds two stashes at once, rank 1 one; each F and B moves the count.
    CHECK(stash[0] == 1 + 2 * 4);
    CHECK(stash[1] == 1 + 2 * 4);
    CHECK(peak[0] == 2);
    CHECK(peak[1] == 1);
    fs::remove_all(dir);
}

TEST_CASE("plot OUT: loss, throughput and timeline SVGs, well-formed, with what they should show") {
    std::string dir = temp_dir("plot"), out = dir + "/o";
    Run r = run_cli(kRun + " --steps 4 --eval-every 2 --trace " + dir + "/t.json --out " + out);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    Run p = run_cli("plot " + out);
    REQUIRE_MESSAGE(p.code == 0, p.out);
    for (const char* f : {"loss.svg", "throughput.svg", "timeline.svg"}) {
        std::string svg = read_file(out + "/" + f);
        std::string file = f;
        CAPTURE(file);
        CHECK(xml_problem(svg) == "");
        CHECK(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\"") != std::string::npos);
        check_renders(out + "/" + f);
    }
    std::string loss = read_file(out + "/loss.svg");
    CHECK(count(loss, "<polyline") == 1);
    CHECK(count(loss, "<circle") == 2);   // eval after step 2 and the final one
    CHECK(loss.find(">step</text>") != std::string::npos);
    CHECK(loss.find(">loss</text>") != std::string::npos);
    // The eval dot on the last step stays whole: every dot lies inside the x axis (the first line).
    double axis_end = std::stod(elements(loss, "line").at(0)["x2"]);
    for (auto& c : elements(loss, "circle")) CHECK(std::stod(c["cx"]) + std::stod(c["r"]) < axis_end);
    // The trainer's tok_per_s is a mean since the start; the picture says so.
    std::string tput = read_file(out + "/throughput.svg");
    CHECK(tput.find(">tokens per second, mean since the start</text>") != std::string::npos);
    CHECK(tput.find(">tokens/s, running mean</text>") != std::string::npos);
    std::string tl = read_file(out + "/timeline.svg");
    // A box per action of the trace, measured and again simulated; transfers hatched; the legend.
    size_t actions = trace_actions(dir + "/t.json");
    CHECK(actions == 2 * 4 * 2);   // 2 ranks × 4 micro-batches × (F, B)
    CHECK(count(tl, "class=\"action ") == 2 * actions);
    // Measured groups hatch their transfer; the simulation's transfers are free: no hatching there.
    std::vector<std::string> two = panels(tl);
    REQUIRE(two.size() == 2);
    CHECK(count(two[0], "class=\"comm\"") > 0);
    CHECK(count(two[1], "class=\"comm\"") == 0);
    CHECK(tl.find("<pattern id=\"hatch\"") != std::string::npos);
    for (const char* text : {">F forward<", ">B backward<", ">BI input grad<", ">BW weight grad<", ">rank 1<", ">time (",
                             ">simulated: 1f1b", ">idle, or waiting for a peer<", ">F3 = micro-batch 3<"})
        CHECK_MESSAGE(tl.find(text) != std::string::npos, text);
    for (const auto& shade : shades(tl, "action ")) CHECK(shades(tl, "legend").count(shade) == 1);

    // --metrics, --trace, --out: the same pictures elsewhere; a trace alone gives the timeline alone.
    p = run_cli("plot --metrics " + out + "/metrics.jsonl --out " + dir + "/pics");
    REQUIRE_MESSAGE(p.code == 0, p.out);
    CHECK(fs::exists(dir + "/pics/loss.svg"));
    CHECK(!fs::exists(dir + "/pics/timeline.svg"));
    p = run_cli("plot --trace " + dir + "/t.json --out " + dir + "/tl");
    REQUIRE_MESSAGE(p.code == 0, p.out);
    CHECK(count(read_file(dir + "/tl/timeline.svg"), "class=\"action ") == actions);
    // The trace's name is in the title: XML's special characters in it are escaped.
    fs::copy_file(dir + "/t.json", dir + "/a&b <c>'.json");
    p = run_cli("plot --trace \"" + dir + "/a&b <c>'.json\" --out " + dir + "/odd");
    REQUIRE_MESSAGE(p.code == 0, p.out);
    std::string odd = read_file(dir + "/odd/timeline.svg");
    CHECK(xml_problem(odd) == "");
    CHECK(odd.find("a&amp;b &lt;c&gt;&apos;.json") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("schedule --svg: the simulated chart, a box per action") {
    std::string dir = temp_dir("schedule_svg");
    Run r = run_cli("schedule --stages 4 --micro-batches 8 --schedule zbv --svg " + dir + "/s.svg --trace " + dir + "/s.json");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    std::string svg = read_file(dir + "/s.svg");
    CHECK(xml_problem(svg) == "");
    CHECK(count(svg, "class=\"action ") == trace_actions(dir + "/s.json"));
    CHECK(count(svg, "class=\"action BW\"") == 4 * 8 * 2);   // ZB-V: every (micro-batch, chunk) has its BW
    CHECK(svg.find(">rank 3<") != std::string::npos);
    check_renders(dir + "/s.svg");
    fs::remove_all(dir);
}

// --trace was written before --svg failed (exit 1, a trace left behind): every output is checked first.
TEST_CASE("schedule --trace --svg --export: one that cannot be written, and none is") {
    const std::string dir = temp_dir("schedule_outputs");
    Run r = run_cli("schedule --trace " + dir + "/t.json --svg " + dir + "/no/such/s.svg --export " + dir + "/e.csv");
    CHECK(r.code == 1);
    CHECK(r.out.find("--svg: " + dir + "/no/such/s.svg: the directory " + dir + "/no/such does not exist") != std::string::npos);
    CHECK(std::filesystem::is_empty(dir));
}

TEST_CASE("schedule --svg: a legend swatch per shade; hatching only where transfers cost time") {
    std::string dir = temp_dir("schedule_shades");
    // Free transfers (the default costs): ranks wait for each other, and that is drawn as idle.
    Run r = run_cli("schedule --stages 4 --micro-batches 8 --schedule zbv --svg " + dir + "/free.svg");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    std::string free = read_file(dir + "/free.svg");
    auto drawn = shades(free, "action "), listed = shades(free, "legend");
    CHECK(drawn.size() == 2 * 3);   // F, BI, BW, each dark (chunk 0) and light (chunk 1)
    for (const auto& shade : drawn) CHECK_MESSAGE(listed.count(shade) == 1, shade.first << " " << shade.second);
    CHECK(count(free, "class=\"comm\"") == 0);
    CHECK(free.find("url(#hatch)") == std::string::npos);
    CHECK(free.find(">lighter: odd chunks<") != std::string::npos);
    CHECK(free.find(">F3.1 = micro-batch 3 on chunk 1<") != std::string::npos);
    // Transfers of 0.5: each hatched box is one transfer long, whatever the rank waited before it.
    r = run_cli("schedule --stages 4 --micro-batches 8 --schedule 1f1b --costs 1,1,1,0.5 --svg " + dir + "/paid.svg");
    REQUIRE_MESSAGE(r.code == 0, r.out);
    double makespan = std::stod(r.out.substr(r.out.find("makespan ") + 9));
    std::string paid = read_file(dir + "/paid.svg");
    auto hatched = elements(paid, "rect");
    hatched.erase(std::remove_if(hatched.begin(), hatched.end(), [](auto& e) { return e["class"] != "comm"; }), hatched.end());
    CHECK(hatched.size() > 0);
    for (auto& h : hatched) CHECK(std::stod(h["width"]) == doctest::Approx(0.5 * 810 / makespan).epsilon(0.01));
    CHECK(shades(paid, "legend").count({"url(#hatch)", ""}) == 1);
    fs::remove_all(dir);
}

TEST_CASE("plot --trace: a long wait is not drawn as a transfer; µs read as ms") {
    std::string dir = temp_dir("plot_wait");
    // Rank 0 has a 10 µs group (its transfer, about) and a 30 ms one (mostly waiting); old-style
    // names with the chunk still read.
    auto x = [](const char* name, int pid, double ts, double dur) {
        return nlohmann::json{{"name", name}, {"ph", "X"}, {"pid", pid}, {"tid", pid}, {"ts", ts}, {"dur", dur}};
    };
    nlohmann::json trace = {{"traceEvents",
                             {x("F0", 0, 0, 1000), x("comm", 0, 1000, 10), x("comm", 0, 1010, 30000), x("B0", 0, 31010, 8990),
                              x("comm", 1, 0, 1500), x("F0.0", 1, 1500, 3500), x("B0.0", 1, 5000, 25000), x("comm", 1, 30000, 10)}}};
    std::ofstream(dir + "/t.json") << trace.dump();
    Run p = run_cli("plot --trace " + dir + "/t.json --out " + dir + "/o");
    REQUIRE_MESSAGE(p.code == 0, p.out);
    std::string tl = read_file(dir + "/o/timeline.svg");
    CHECK(xml_problem(tl) == "");
    CHECK(count(tl, "class=\"action ") == 4);
    int hatched = 0;
    for (auto& r : elements(tl, "rect"))
        if (r["class"] == "comm") {
            hatched++;
            CHECK(std::stod(r["width"]) < 1);   // 10 µs of 40 ms: under a pixel
        }
    CHECK(hatched == 4);
    CHECK(tl.find(">time (ms)<") != std::string::npos);
    CHECK(tl.find(">20<") != std::string::npos);
    CHECK(tl.find(">20000<") == std::string::npos);
    check_renders(dir + "/o/timeline.svg");
    fs::remove_all(dir);
}

TEST_CASE("plot: bad inputs are one-line errors naming the file, and write nothing") {
    std::string dir = temp_dir("plot_bad");
    std::ofstream(dir + "/bad.jsonl") << "{\"step\":1,\"loss\":2,\"tok_per_s\":3}\n{\"step\":2,\"loss\":\n";
    std::ofstream(dir + "/nokey.jsonl") << "{\"step\":1}\n";
    std::ofstream(dir + "/empty.jsonl") << "";
    std::ofstream(dir + "/bad.json") << "{\"traceEvents\": [";
    std::ofstream(dir + "/other.json") << "{\"events\": []}";
    std::ofstream(dir + "/good.jsonl") << "{\"step\":1,\"loss\":2,\"tok_per_s\":3}\n";
    std::ofstream(dir + "/sched.json") << "{\"schedule\":\"1f1b\",\"P\":2,\"M\":1,\"V\":1,\"placement\":\"loop\",\"actions\":[[\"F0.0\"],[\"X\"]]}";
    std::ofstream(dir + "/name.json") << "{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"Q1\",\"pid\":0,\"ts\":0,\"dur\":1}]}";
    // "ph" of another type is not a complete event (the JSON library's type_error escaped, no file named).
    std::ofstream(dir + "/ph.json") << "{\"traceEvents\": [{\"ph\":5,\"name\":\"F0\",\"pid\":0,\"ts\":0,\"dur\":1}]}";
    struct Case { std::string args, needle; };
    const std::vector<Case> cases = {
        {"--metrics " + dir + "/missing.jsonl", dir + "/missing.jsonl"},
        {"--metrics " + dir + "/bad.jsonl", dir + "/bad.jsonl:2: not valid JSON"},
        {"--metrics " + dir + "/nokey.jsonl", dir + "/nokey.jsonl:1: expected a step of pipetrain train, with a number \"loss\""},
        {"--metrics " + dir + "/empty.jsonl", dir + "/empty.jsonl: no step"},
        {"--trace " + dir + "/bad.json", dir + "/bad.json: not valid JSON"},
        {"--trace " + dir + "/other.json", dir + "/other.json: not a Chrome trace"},
        {"--trace " + dir + "/name.json", dir + "/name.json: event 1: name \"Q1\" is no action"},
        {"--trace " + dir + "/ph.json", dir + "/ph.json: "},
        {"--metrics " + dir + "/nokey.jsonl --trace " + dir + "/t.json", dir + "/nokey.jsonl:1"},
        {"--metrics " + dir + "/good.jsonl --schedule " + dir + "/sched.json", dir + "/sched.json: not a schedule of pipetrain train"},
        {dir + "/nowhere", dir + "/nowhere: not a directory"},
        {"", "plot: give a run directory"},
    };
    for (const Case& c : cases) {
        Run r = run_cli("plot " + c.args + (c.args.rfind("--", 0) == 0 ? " --out " + dir + "/pics" : ""));
        CAPTURE(c.args);
        CAPTURE(r.out);
        CHECK(r.code != 0);
        CHECK(r.out.find(c.needle) != std::string::npos);
        CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
        CHECK(!fs::exists(dir + "/pics/loss.svg"));
        CHECK(!fs::exists(dir + "/pics/timeline.svg"));
    }
    // A good metrics log with a bad trace writes neither picture.
    Run r = run_cli("plot --metrics " + dir + "/good.jsonl --trace " + dir + "/bad.json --out " + dir + "/pics");
    CHECK(r.code != 0);
    CHECK(!fs::exists(dir + "/pics/loss.svg"));
    fs::remove_all(dir);
}

TEST_CASE("the well-formedness checker itself refuses what it should") {
    CHECK(xml_problem("<svg><rect x=\"1\"/></svg>") == "");
    CHECK(xml_problem("<svg><rect x=\"1\"></svg>") != "");
    CHECK(xml_problem("<svg><rect x=1/></svg>") != "");
    CHECK(xml_problem("<svg><text>a < b</text></svg>") != "");
    CHECK(xml_problem("<svg><text>a & b</text></svg>") != "");
    CHECK(xml_problem("<svg/><svg/>") != "");
    CHECK(xml_problem("<svg>") != "");
}

// The test helpers' own contract, here because this program is quick to run again: temp_dir's
// directories go when the program exits (a full ctest run used to leave gigabytes in /tmp).
TEST_CASE("helper for the next case: a directory from temp_dir with a file in it" * doctest::skip()) {
    std::ofstream(temp_dir("left_behind") + "/f.txt") << "x";
}

TEST_CASE("temp_dir's directories are removed when the test program exits; PIPETRAIN_KEEP_TEST_DIRS=1 keeps them") {
    const std::string exe = fs::read_symlink("/proc/self/exe").string(), root = temp_dir("tmpdir_root");
    const std::string helper = " --no-skip -tc='helper for the next case*'";
    for (bool keep : {false, true}) {
        const std::string tmp = root + (keep ? "/kept" : "/removed");
        fs::create_directories(tmp);
        Run r = run_command("TMPDIR=" + tmp + (keep ? " PIPETRAIN_KEEP_TEST_DIRS=1 " : " ") + exe + helper);
        REQUIRE_MESSAGE(r.code == 0, r.out);
        CHECK(r.out.find("1 passed") != std::string::npos);   // the helper ran, and made its directory
        size_t left = 0, files = 0;
        for (const auto& e : fs::recursive_directory_iterator(tmp)) (e.is_directory() ? left : files)++;
        CAPTURE(keep);
        CHECK(left == (keep ? 1 : 0));
        CHECK(files == (keep ? 1 : 0));
    }
}
