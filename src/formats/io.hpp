// src/formats/io.hpp — whole-file reads and atomic writes, with one-line errors naming the file.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pt {

// Throws std::runtime_error("<path>: <what>[: strerror(err)]"), cut to 1000 characters and
// printable(): one line of valid UTF-8, whatever the path or a quoted file content holds.
[[noreturn]] void fail(const std::string& path, const std::string& what, int err = 0);
// text with every byte that is not part of valid UTF-8, and every control character (C0, DEL,
// C1), written as \xNN: safe to print on a terminal, and on one line.
std::string printable(std::string_view text);

// A descriptor open for reading on a regular file, or fail(path, "not a regular file"): a FIFO,
// a device (/dev/zero never ends) or a socket is refused before a byte is read, so no loader
// waits on one. A directory fails with "is a directory, expected a file". The caller closes it.
int open_regular(const std::string& path, uint64_t* size = nullptr);
// A regular file's bytes (open_regular), read into a buffer of its size; a file that shrinks
// while it is read is an error.
std::string read_file(const std::string& path);
std::vector<uint8_t> read_bytes(const std::string& path);
// Lines separated by LF only (CR, VT, U+2028 … belong to a line); a final line without LF
// counts, a trailing LF does not start another one.
std::vector<std::string> split_lines(const std::string& data);
std::vector<std::string> read_lines(const std::string& path);
// Before a long run: a file that `flag` asks to be written later can be, as far as it can be
// told now (not a directory, its directory exists). Throws "<flag>: <path>: <what>".
void check_output_path(const std::string& path, const std::string& flag);   // and that its directory is writable
void check_writable_dir(const std::string& dir, const std::string& flag);   // makes and removes a file there
// dir/name, where name is a plain file name a directory's index or manifest lists: refused
// (fail(dir/name, ...)) when it is a symbolic link whose target lies outside dir, or leads
// nowhere, so that no loader reads, or prints a byte of, a file that is not the directory's.
// One exception: Hugging Face's cache, whose snapshots/REV/NAME links point at ../../blobs/.
void check_inside(const std::string& dir, const std::string& name);
// fail(path, "not a regular file ...") where path is a FIFO, a device or a socket: outputs are new
// files renamed into place (the rename would replace the node: as root, /dev/null) or opened with
// O_TRUNC (a FIFO blocks). A symbolic link there is replaced, never followed; a directory is the caller's.
void refuse_special_output(const std::string& path);
// Opens path for writing (appending, or truncated), creating it: a symbolic link planted there is
// never followed (it is removed first, and O_NOFOLLOW refuses one put back in between).
std::FILE* open_output(const std::string& path, bool append);
// Every field between separators, empty ones included: "a,,b," is {"a", "", "b", ""}.
std::vector<std::string> split(std::string_view s, char sep);
// Whether s is written as a plain decimal number: digits, a sign, a point, an exponent (strtod also
// takes leading spaces, hexadecimal, "inf" and "nan", so " 2" passed where "2 " failed).
bool plain_decimal(std::string_view s);
// The fields of a comma-separated list as numbers, each in [0, max]; empty if any field is not one.
std::vector<double> numbers(std::string_view s, double max);

// Write <path>.tmp.<pid>, fsync, rename over path, fsync the directory: a crash at any point
// leaves either the old file or the complete new one. On failure nothing is left behind.
using Chunk = std::pair<const void*, size_t>;
void write_chunks_atomic(const std::string& path, const std::vector<Chunk>& chunks);
void write_file_atomic(const std::string& path, const std::string& contents);
// Makes the entries of dir (creations, renames, removals) durable ("" is the current directory).
void fsync_dir(const std::string& dir);

}  // namespace pt
