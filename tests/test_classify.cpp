// Fine-tuning a sequence classifier through the pipeline: dev accuracy rises well above
// chance, the saved classifier reloads and scores the same, and starting from a pre-trained
// model directory works for any schedule.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "src/formats/config_json.hpp"
#include "src/formats/safetensors.hpp"
#include "tests/cli_util.hpp"
#include "tests/model_diff.hpp"

using namespace test;

namespace {
const std::string kTrain = fixture("classify/train.tsv"), kDev = fixture("classify/dev.tsv");
const std::string kFlags = " --task classify --labels 2 --data " + kTrain + " --eval " + kDev +
                           " --batch 16 --micro-batches 2 --seq 32 --lr 2e-3 --seed 1 ";
}  // namespace

TEST_CASE("a 2-stage pipeline fine-tunes a sentiment classifier above chance; eval agrees") {
    std::string out = temp_dir("cls");
    Run r = run_cli("train --preset tiny --stages 2 --schedule 1f1b --steps 60 --out " + out + kFlags);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    double acc = std::atof(value_after(r.out, "accuracy ").c_str());
    CAPTURE(r.out);
    CHECK(acc >= 0.75);   // 20 balanced dev examples: chance is 0.5
    CHECK(r.out.find("  eval | loss") != std::string::npos);   // progress reports dev accuracy
    pt::ModelConfig cfg = pt::config_from_json_file(out + "/config.json");
    CHECK(cfg.num_labels == 2);
    Run e = run_cli("eval --model " + out + " --data " + kDev + " --seq 32");
    REQUIRE_MESSAGE(e.code == 0, e.out);
    CHECK(value_after(e.out, "accuracy ") == value_after(r.out, "accuracy "));
    CHECK(value_after(e.out, "eval loss ") == value_after(r.out, "eval loss "));
    Run lm = run_cli("eval --model " + out + " --data " + kDev + " --seq 32 --objective mlm");   // accepted, ignored
    CHECK(lm.code == 1);
    CHECK(lm.out.find("--objective: " + out + " is a classifier (num_labels 2)") != std::string::npos);
    // classify: one line per dev text, whose top labels score the eval's accuracy.
    Run c = run_cli("classify --model " + out + " --seq 32 --file " + kDev);
    REQUIRE_MESSAGE(c.code == 0, c.out);
    std::vector<std::string> labels;   // the dev file's label column
    {
        std::ifstream dev(kDev);
        std::string line;
        std::getline(dev, line);
        while (std::getline(dev, line))
            if (!line.empty()) labels.push_back(line.substr(0, line.find('\t')));
    }
    std::istringstream lines(c.out);
    std::string line;
    size_t n = 0, right = 0;
    for (; std::getline(lines, line); n++) {
        CHECK(line.find(" | LABEL_") != std::string::npos);
        if (n < labels.size()) right += line.rfind("LABEL_" + labels[n] + " |", 0) == 0;
    }
    CHECK(n == labels.size());
    CHECK(double(right) / double(n) == doctest::Approx(acc).epsilon(1e-9));
    Run one = run_cli("classify --model " + out + " 这家酒店很好");
    CHECK(one.code == 0);
    CHECK(one.out.find(" 这家酒店很好\n") != std::string::npos);
    // Several texts: a line each, in order (the help says "per text").
    Run two = run_cli("classify --model " + out + " 这家酒店很好 房间很脏");
    CHECK_MESSAGE(two.code == 0, two.out);
    CHECK(two.out.find(" 这家酒店很好\n") < two.out.find(" 房间很脏\n"));
    CHECK(two.out.find(" 房间很脏\n") != std::string::npos);
    Run none = run_cli("classify --model " + out);
    CHECK(none.code != 0);
    CHECK(none.out.find("no TEXT and no --file") != std::string::npos);
    Run both = run_cli("classify --model " + out + " 这家酒店很好 --file " + kDev);
    CHECK(both.code != 0);
    CHECK(both.out.find("texts or --file, not both") != std::string::npos);
    // --file without a text_a header: a text per line (blank ones skipped), as on the command line.
    std::ofstream(out + "/plain.txt") << "这家酒店很好\n\n房间很脏\n";
    Run plain = run_cli("classify --model " + out + " --file " + out + "/plain.txt");
    CHECK(plain.code == 0);
    CHECK(plain.out == two.out);
    // A TSV row of another width than its header, or a file without a text: one line naming it.
    std::ofstream(out + "/wide.tsv") << "label\ttext_a\n1\t好\textra\n";
    Run wide = run_cli("classify --model " + out + " --file " + out + "/wide.tsv");
    CHECK(wide.code != 0);
    CHECK(wide.out == "pipetrain classify: " + out + "/wide.tsv: line 2: 3 columns, the header has 2\n");
    // A TSV with text_b: pairs, encoded as training encodes them. text_b was dropped: both rows
    // printed the probabilities of 这家酒店很好 alone.
    std::ofstream(out + "/pairs.tsv") << "label\ttext_a\ttext_b\n1\t这家酒店很好\t房间很脏\n1\t这家酒店很好\t\n";
    Run pairs = run_cli("classify --model " + out + " --file " + out + "/pairs.tsv");
    REQUIRE_MESSAGE(pairs.code == 0, pairs.out);
    const size_t cut = pairs.out.find('\n');
    const std::string with_b = pairs.out.substr(0, cut), alone = pairs.out.substr(cut + 1);
    CHECK(with_b.find(" | 这家酒店很好 | 房间很脏") != std::string::npos);
    CHECK(alone == one.out);   // an empty text_b: the text alone
    CHECK(with_b.substr(0, with_b.find(" | 这家")) != alone.substr(0, alone.find(" | 这家")));   // other probabilities
    // An empty TEXT, a blank line, a text past --seq (cut silently before; now said on stderr).
    Run blank = run_cli("classify --model " + out + " 这家酒店很好 '  '");
    CHECK(blank.code == 1);
    CHECK(blank.out.find("TEXT 2: empty: nothing to classify") != std::string::npos);
    std::ofstream(out + "/blank.txt") << "这家酒店很好\n  \t\n房间很脏\n";
    CHECK(run_cli("classify --model " + out + " --file " + out + "/blank.txt").out == two.out);
    Run cut8 = run_cli("classify --model " + out + " --seq 8 这家酒店很好房间很脏");
    CHECK(cut8.code == 0);
    CHECK(cut8.out.find("note: TEXT 1: 12 tokens with [CLS] and [SEP], cut to --seq 8 (the longer text first)") != std::string::npos);
    CHECK(one.out.find("note:") == std::string::npos);
    {   // id2label keys that name no label were passed over (LABEL_n printed)
        const std::string config = read_file(out + "/config.json");
        std::string bad = config;
        bad.replace(bad.find("\"1\": \"LABEL_1\""), 16, "\"one\": \"LABEL_1\"");
        std::ofstream(out + "/config.json") << bad;
        std::filesystem::remove(out + "/pipetrain_manifest.json");   // edited by hand
        Run named = run_cli("classify --model " + out + " 这家酒店很好");
        CHECK(named.code == 1);
        CHECK(named.out.find("config.json: \"id2label\": \"one\": expected label numbers 0 to 1, each with a name") != std::string::npos);
        std::ofstream(out + "/config.json") << config;
    }
    std::ofstream(out + "/empty.txt") << "\n\n";
    Run empty = run_cli("classify --model " + out + " --file " + out + "/empty.txt");
    CHECK(empty.code != 0);
    CHECK(empty.out == "pipetrain classify: " + out + "/empty.txt: no text to classify\n");
    // Without its head (pooler and classifier) the classifier is not evaluated: a random head
    // scored 0.5 and said nothing.
    pt::st::File f = pt::st::read(out + "/model.safetensors");
    pt::st::Writer w;
    for (const pt::st::TensorInfo& t : f.tensors)
        if (t.name.rfind("classifier.", 0) != 0 && t.name.rfind("ernie.pooler.", 0) != 0)
            w.add(t.name, t.dtype, t.shape, f.data.data() + t.begin, t.end - t.begin);
    w.write(out + "/model.safetensors");
    std::filesystem::remove(out + "/pipetrain_manifest.json");   // edited by hand, as by another tool: not sealed
    Run headless = run_cli("eval --model " + out + " --data " + kDev + " --seq 32");
    CHECK(headless.code != 0);
    CHECK(headless.out.find("an evaluation of freshly initialised weights would mean nothing") != std::string::npos);
}

TEST_CASE("fine-tuning starts from a model directory and gives the same bits for every schedule") {
    // A pre-trained (MLM) model on the same text, then the classifier head on top of it.
    std::string base = temp_dir("base");
    Run pre = run_cli("train --preset tiny --data " + kTrain + " --out " + base + " --steps 5 --batch 8 --seq 32");
    REQUIRE_MESSAGE(pre.code == 0, pre.out);
    std::string reference;
    int n = 0;
    for (std::string sched : {"--stages 1", "--stages 2 --schedule zb-h1", "--stages 3 --schedule gpipe --recompute full"}) {
        std::string out = temp_dir("ft" + std::to_string(n++));
        Run r = run_cli("train --model " + base + " --steps 3 --out " + out + " " + sched + kFlags);
        REQUIRE_MESSAGE(r.code == 0, r.out);
        CHECK(r.out.find("no classifier.weight, classifier.bias; keeping their initial values") != std::string::npos);
        if (reference.empty()) reference = out + "/model.safetensors";
        CHECK_MESSAGE(model_difference(out + "/model.safetensors", reference) == "", sched << " against --stages 1");
    }
}

TEST_CASE("a classifier fine-tuned from a causal model attends both ways") {
    // The base's config.json says is_decoder; the classifier must not inherit the causal mask,
    // which would hide the text from [CLS]: the default gives the bits of --objective mlm.
    std::string base = temp_dir("causal-base");
    Run pre = run_cli("train --preset tiny --data " + kTrain + " --out " + base + " --steps 2 --batch 8 --seq 32 --objective causal");
    REQUIRE_MESSAGE(pre.code == 0, pre.out);
    REQUIRE(pt::config_from_json_file(base + "/config.json").is_decoder);
    std::string a = temp_dir("ft-default"), b = temp_dir("ft-mlm");
    Run ra = run_cli("train --model " + base + " --steps 2 --out " + a + kFlags);
    Run rb = run_cli("train --model " + base + " --steps 2 --objective mlm --out " + b + kFlags);
    REQUIRE_MESSAGE(ra.code == 0, ra.out);
    REQUIRE_MESSAGE(rb.code == 0, rb.out);
    CHECK(model_difference(a + "/model.safetensors", b + "/model.safetensors") == "");
    CHECK(!pt::config_from_json_file(a + "/config.json").is_decoder);
    Run bad = run_cli("train --model " + base + " --steps 2 --objective causal --out " + temp_dir("ft-bad") + kFlags);
    CHECK(bad.code != 0);
    CHECK(bad.out.find("--objective causal: a classifier reads [CLS]") != std::string::npos);
}

TEST_CASE("classification input errors are one line") {
    std::string out = temp_dir("clsbad");
    std::string bad_tsv = out + "/bad.tsv";
    {
        std::ofstream f(bad_tsv);
        f << "label\ttext_a\n1\t很好\n7\t很差\n";
    }
    Run r = run_cli("train --preset tiny --task classify --labels 2 --data " + bad_tsv + " --out " + out + "/m");
    CHECK(r.code != 0);
    CHECK(r.out.find("line 3") != std::string::npos);
    Run nolabels = run_cli("train --preset tiny --task classify --data " + kTrain + " --out " + out + "/m");
    CHECK(nolabels.code != 0);
    CHECK(nolabels.out.find("--labels") != std::string::npos);
    // A header named twice is ambiguous: refused (the last "label" column was used).
    std::ofstream(out + "/dup.tsv") << "label\ttext_a\tlabel\n1\t很好\tx\n";
    Run dup = run_cli("train --preset tiny --task classify --labels 2 --data " + out + "/dup.tsv --out " + out + "/m");
    CHECK(dup.out.find("header: column \"label\" appears twice") != std::string::npos);
    // A label is a whole integer: "1x" is not read as 1.
    std::ofstream(out + "/suffix.tsv") << "label\ttext_a\n1\t很好\n1x\t很差\n";
    Run suffix = run_cli("train --preset tiny --task classify --labels 2 --data " + out + "/suffix.tsv --out " + out + "/m");
    CHECK(suffix.code != 0);
    CHECK(suffix.out.find(out + "/suffix.tsv: line 3: label \"1x\" is not an integer") != std::string::npos);
}

TEST_CASE("a TSV saved as \"UTF-8 with BOM\" and CRLF, blank lines included, reads as the plain one") {
    std::string out = temp_dir("clsbom");
    std::string plain, windows = "\xEF\xBB\xBF";
    for (const char* row : {"label\ttext_a", "1\t很好，值得一去", "0\t太差了", "", "1\t不错"}) {
        if (*row) plain += std::string(row) + "\n";
        windows += std::string(row) + "\r\n";
    }
    std::ofstream(out + "/plain.tsv") << plain;
    std::ofstream(out + "/windows.tsv") << windows;
    const std::string flags = " --preset tiny --task classify --labels 2 --batch 2 --seq 16 --steps 2 --seed 3";
    Run a = run_cli("train" + flags + " --data " + out + "/plain.tsv --out " + out + "/a");
    Run b = run_cli("train" + flags + " --data " + out + "/windows.tsv --out " + out + "/b");
    REQUIRE_MESSAGE(a.code == 0, a.out);
    REQUIRE_MESSAGE(b.code == 0, b.out);   // "header must name the columns", then "1 columns" at the blank line
    CHECK(model_difference(out + "/a/model.safetensors", out + "/b/model.safetensors") == "");
}

TEST_CASE("--partition time times a classifier on valid labels (it used to feed token ids as labels)") {
    Run r = run_cli("train --preset tiny --stages 2 --partition time --steps 1 --out " + temp_dir("cls-time") + kFlags);
    CHECK_MESSAGE(r.code == 0, r.out);
}
