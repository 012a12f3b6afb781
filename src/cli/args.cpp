#include "src/cli/args.hpp"
#include "src/formats/io.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace pt {

namespace {
// Levenshtein: the fewest insertions, deletions and substitutions that turn a into b.
size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); j++) row[j] = j;
    for (size_t i = 1; i <= a.size(); i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); j++) {
            size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
            diagonal = up;
        }
    }
    return row[b.size()];
}
}  // namespace

int terminal_columns() {
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
        winsize size{};
        if (isatty(fd) && ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
    }
    const char* columns = std::getenv("COLUMNS");   // atoi wrapped 99999999999 into gigabytes of chart
    const long n = columns ? std::strtol(columns, nullptr, 10) : 0;
    return n > 0 ? int(std::min(n, 1000L)) : 100;
}

std::string nearest_name(const std::string& word, const std::vector<std::string>& known) {
    std::string nearest;
    size_t best = 3;
    for (const std::string& k : known) {
        size_t d = edit_distance(word, k);
        if (d < best) best = d, nearest = k;
    }
    return nearest;
}

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
           const std::set<std::string>& switches, bool take_positional) {
    for (size_t i = 0; i < argv.size(); i++) {
        const std::string& a = argv[i];
        if (a == "--" && take_positional) {   // the end of the flags: "tokenize --vocab V -- --ids"
            positional_.insert(positional_.end(), argv.begin() + long(i) + 1, argv.end());
            break;
        }
        if (a.rfind("--", 0) != 0 || a == "--") {
            if (!take_positional) throw std::runtime_error("\"" + a + "\": unexpected argument (this command takes flags only)");
            positional_.push_back(a);
        } else if (valued.count(a)) {
            // "--seed --out DIR" is a forgotten value, not a seed called "--out".
            if (i + 1 >= argv.size() || argv[i + 1].empty() || valued.count(argv[i + 1]) || switches.count(argv[i + 1]))
                throw std::runtime_error(a + ": expected a value");
            values_[a] = argv[++i];   // the last one wins, so wrapper scripts can override defaults
        } else if (switches.count(a)) {
            switches_on_.insert(a);
        } else {
            std::vector<std::string> names(valued.begin(), valued.end());
            names.insert(names.end(), switches.begin(), switches.end());
            std::string known, nearest = nearest_name(a, names);
            for (const std::string& s : names) known += " " + s;
            throw std::runtime_error(a + ": unknown flag" + (nearest.empty() ? "" : "; did you mean " + nearest + "?") +
                                     " (known:" + known + ")");
        }
    }
}

bool Args::has(const std::string& flag) const { return values_.count(flag) || switches_on_.count(flag); }

std::string Args::str(const std::string& flag, const std::string& fallback) const {
    auto it = values_.find(flag);
    return it == values_.end() ? fallback : it->second;
}

std::string Args::required(const std::string& flag) const {
    auto it = values_.find(flag);
    if (it == values_.end()) throw std::runtime_error(flag + ": required");
    return it->second;
}

// strtoll/strtod must read the whole value ("12x" is not 12, "" is not 0) and stay in range.
long long Args::integer(const std::string& flag, long long fallback, long long min, long long max) const {
    auto it = values_.find(flag);
    if (it == values_.end()) return fallback;
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (!plain_decimal(it->second) || it->second.find_first_of(".eE") != std::string::npos || *end != '\0' || errno == ERANGE)
        throw std::runtime_error(flag + ": expected an integer, got \"" + it->second + "\"");
    if (v < min || v > max)
        throw std::runtime_error(flag + ": must be between " + std::to_string(min) + " and " + std::to_string(max) +
                                 ", got " + it->second);
    return v;
}

double Args::real(const std::string& flag, double fallback, double min, double max) const {
    auto it = values_.find(flag);
    if (it == values_.end()) return fallback;
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(it->second.c_str(), &end);
    if (!plain_decimal(it->second) || *end != '\0' || errno == ERANGE || !std::isfinite(v))
        throw std::runtime_error(flag + ": expected a number, got \"" + it->second + "\"");
    if (v < min || v > max) {
        char range[96];
        if (max == HUGE_VAL) std::snprintf(range, sizeof range, "at least %g", min);
        else std::snprintf(range, sizeof range, "between %g and %g", min, max);
        throw std::runtime_error(flag + ": must be " + range + ", got " + it->second);
    }
    return v;
}

}  // namespace pt
