// src/cli/args.hpp — the CLI's flag parser: --name value pairs, boolean flags, positionals.
// Every mistake is a one-line error naming the flag and what was expected.
#pragma once
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace pt {

// The name in `known` nearest to `word` within two edits ("--step" for "--steps", "trian" for
// "train"), or "" when none is that close.
std::string nearest_name(const std::string& word, const std::vector<std::string>& known);

// The width of the terminal that stdout (or else stderr) shows, asked of the terminal itself; then
// $COLUMNS (bash sets it without exporting it, so a program rarely sees it); then 100.
int terminal_columns();

// "1 stage", "4 stages", "1 micro-batch": a count with its noun, in the singular for one.
// The lesson's parse functions name the quantity ("unknown preset ..."); the CLI adds the flag:
// for_flag("--preset", [&] { return ModelConfig::preset(name); }) throws "--preset: unknown ...".
template <class Parse>
auto for_flag(const char* flag, Parse&& parse) -> decltype(parse()) {
    try {
        return parse();
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string(flag) + ": " + e.what());
    }
}

inline std::string count_of(long long n, const std::string& noun, const std::string& plural = "") {
    return std::to_string(n) + " " + (n == 1 ? noun : plural.empty() ? noun + "s" : plural);
}

class Args {
 public:
    // `valued` lists the flags that take a value, `switches` the ones that do not. A command
    // without positional arguments rejects any; one with them (take_positional) checks them itself.
    // A flag given twice takes its last value, so wrapper scripts can override their defaults.
    Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
         const std::set<std::string>& switches = {}, bool take_positional = false);
    bool has(const std::string& flag) const;
    std::string str(const std::string& flag, const std::string& fallback = "") const;
    std::string required(const std::string& flag) const;
    long long integer(const std::string& flag, long long fallback, long long min = 0,
                      long long max = 1LL << 40) const;
    double real(const std::string& flag, double fallback, double min = -HUGE_VAL, double max = HUGE_VAL) const;
    const std::vector<std::string>& positional() const { return positional_; }
    // Gives `flag` this value unless the command line gave it one (e.g. from a saved run).
    void set_default(const std::string& flag, const std::string& value) { values_.emplace(flag, value); }

 private:
    std::map<std::string, std::string> values_;
    std::set<std::string> switches_on_;
    std::vector<std::string> positional_;
};

}  // namespace pt
