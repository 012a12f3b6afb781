#include "src/args.hpp"

#include <cmath>
#include <stdexcept>

namespace pt {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
           const std::set<std::string>& switches) {
    for (size_t i = 0; i < argv.size(); i++) {
        const std::string& a = argv[i];
        if (a.rfind("--", 0) != 0 || a == "--") {
            positional_.push_back(a);
        } else if (valued.count(a)) {
            if (i + 1 >= argv.size()) throw std::runtime_error(a + ": expected a value");
            values_[a] = argv[++i];   // the last one wins, so wrapper scripts can override defaults
        } else if (switches.count(a)) {
            switches_on_.insert(a);
        } else {
            std::string known;
            for (const auto& s : valued) known += " " + s;
            for (const auto& s : switches) known += " " + s;
            throw std::runtime_error(a + ": unknown flag (known:" + known + ")");
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

long long Args::integer(const std::string& flag, long long fallback, long long min, long long max) const {
    auto it = values_.find(flag);
    if (it == values_.end()) return fallback;
    size_t used = 0;
    long long v = 0;
    try {
        v = std::stoll(it->second, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != it->second.size() || it->second.empty())
        throw std::runtime_error(flag + ": expected an integer, got \"" + it->second + "\"");
    if (v < min || v > max)
        throw std::runtime_error(flag + ": must be between " + std::to_string(min) + " and " + std::to_string(max) +
                                 ", got " + it->second);
    return v;
}

double Args::real(const std::string& flag, double fallback) const {
    auto it = values_.find(flag);
    if (it == values_.end()) return fallback;
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(it->second, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != it->second.size() || it->second.empty() || !std::isfinite(v))
        throw std::runtime_error(flag + ": expected a number, got \"" + it->second + "\"");
    return v;
}

}  // namespace pt
