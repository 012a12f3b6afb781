// src/formats/trainer_state.hpp — trainer_state.json, what a checkpoint records for an exact resume:
// {"step": N, "seed": ..., "batch": ..., ...}, the settings that decide the bits, under the names
// of their flags. Its keys become the defaults of those flags on --resume, so it may hold these
// and no others: a "trace" would become --trace's default and overwrite any file.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace pt {

// The keys a trainer state may hold, "step" first.
extern const char* const kTrainerStateKeys[15];

// Parses and checks it: an object of the known keys, strings for "objective" and "save-format",
// numbers for the rest, "step" an integer in [0, 2^30]. Errors are one line naming `path`.
nlohmann::json parse_trainer_state(const std::string& text, const std::string& path);

}  // namespace pt
