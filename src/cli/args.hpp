// src/cli/args.hpp — the CLI's flag parser: --name value pairs, boolean flags, positionals.
// Every mistake is a one-line error naming the flag and what was expected.
#pragma once
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace pt {

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
