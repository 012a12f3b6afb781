// src/formats/io.hpp — whole-file reads and atomic writes, with one-line errors naming the file.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pt {

// Throws std::runtime_error("<path>: <what>[: strerror(err)]"), cut to 1000 characters and with
// control characters made spaces: one line, whatever the path or a quoted file content holds.
[[noreturn]] void fail(const std::string& path, const std::string& what, int err = 0);

// A file's bytes; a directory is an error, and so are more than 256 MiB from a pipe or a
// device (/dev/zero never ends).
std::string read_file(const std::string& path);
// A regular file's bytes, read into a buffer of its size; a FIFO or a directory is an error
// (not a hang), and so is a file that shrinks while it is read.
std::vector<uint8_t> read_bytes(const std::string& path);
// Lines separated by LF only (CR, VT, U+2028 … belong to a line); a final line without LF
// counts, a trailing LF does not start another one.
std::vector<std::string> split_lines(const std::string& data);
std::vector<std::string> read_lines(const std::string& path);
// Before a long run: a file that `flag` asks to be written later can be, as far as it can be
// told now (not a directory, its directory exists). Throws "<flag>: <path>: <what>".
void check_output_path(const std::string& path, const std::string& flag);   // and that its directory is writable
void check_writable_dir(const std::string& dir, const std::string& flag);   // makes and removes a file there
// Every field between separators, empty ones included: "a,,b," is {"a", "", "b", ""}.
std::vector<std::string> split(std::string_view s, char sep);

// Write <path>.tmp.<pid>, fsync, rename over path, fsync the directory: a crash at any point
// leaves either the old file or the complete new one. On failure nothing is left behind.
using Chunk = std::pair<const void*, size_t>;
void write_chunks_atomic(const std::string& path, const std::vector<Chunk>& chunks);
void write_file_atomic(const std::string& path, const std::string& contents);
// Makes the entries of dir (creations, renames, removals) durable ("" is the current directory).
void fsync_dir(const std::string& dir);

}  // namespace pt
