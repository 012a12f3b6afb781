// src/io.hpp — whole-file reads and atomic writes, with one-line errors naming the file.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace pt {

std::string read_file(const std::string& path);
// Lines separated by LF only (CR, VT, U+2028 … belong to a line); a final line without LF
// counts, a trailing LF does not start another one.
std::vector<std::string> split_lines(const std::string& data);
std::vector<std::string> read_lines(const std::string& path);

// Write <path>.tmp.<pid>, fsync, rename over path, fsync the directory: a crash at any point
// leaves either the old file or the complete new one. On failure nothing is left behind.
using Chunk = std::pair<const void*, size_t>;
void write_chunks_atomic(const std::string& path, const std::vector<Chunk>& chunks);
void write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace pt
