#include "src/formats/io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

namespace pt {

namespace {
struct Fd {   // closes on scope exit, so every early throw releases the descriptor
    int fd;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};
}  // namespace

void fail(const std::string& path, const std::string& what, int err) {
    std::string msg = path + ": " + what + (err ? std::string(": ") + std::strerror(err) : "");
    if (msg.size() > 1000) msg = msg.substr(0, 1000) + "...";
    throw std::runtime_error(printable(msg));
}

namespace {
// The length of the valid UTF-8 sequence at s[i] (1-4), or 0: no overlong forms, no surrogates,
// nothing above U+10FFFF.
size_t utf8_length(std::string_view s, size_t i) {
    const auto at = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
    const unsigned c = at(i);
    if (c < 0x80) return 1;
    const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (n == 0 || c > 0xF4) return 0;
    for (size_t k = 1; k < n; k++)
        if ((at(i + k) & 0xC0) != 0x80) return 0;
    const unsigned c1 = at(i + 1);
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
        return 0;   // overlong, a surrogate, or past U+10FFFF
    return n;
}
}  // namespace

std::string printable(std::string_view text) {
    std::string out;
    char hex[8];
    for (size_t i = 0; i < text.size();) {
        const size_t n = utf8_length(text, i);
        const unsigned c = static_cast<unsigned char>(text[i]);
        const bool control = n == 1 ? (c < 0x20 || c == 0x7F) : n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0;
        if (n == 0 || control) {   // the bytes themselves, each as \xNN
            for (size_t k = 0; k < std::max<size_t>(n, 1); k++)
                std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(text[i + k])), out += hex;
            i += std::max<size_t>(n, 1);
        } else {
            out.append(text.substr(i, n)), i += n;
        }
    }
    return out;
}

int open_regular(const std::string& path, uint64_t* size) {
    // O_NONBLOCK: opening a FIFO without a writer returns at once instead of waiting for one.
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fail(path, "cannot open", errno);
    Fd guard{fd};
    struct stat st;
    if (::fstat(fd, &st) != 0) fail(path, "cannot stat", errno);
    if (S_ISDIR(st.st_mode)) fail(path, "is a directory, expected a file", 0);
    if (!S_ISREG(st.st_mode)) fail(path, "not a regular file", 0);
    int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) fail(path, "cannot read", errno);
    if (size) *size = uint64_t(st.st_size);
    guard.fd = -1;
    return fd;
}

namespace {
template <typename Bytes>
Bytes read_regular(const std::string& path) {
    uint64_t size = 0;
    Fd in{open_regular(path, &size)};
    if (size > SIZE_MAX / 2) fail(path, "too large to read (" + std::to_string(size) + " bytes)", 0);
    Bytes bytes(size_t(size), 0);
    for (size_t done = 0; done < bytes.size();) {
        ssize_t got = ::read(in.fd, reinterpret_cast<char*>(&bytes[0]) + done, bytes.size() - done);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) fail(path, "cannot read", errno);
        if (got == 0)
            fail(path, "file shrank while reading (" + std::to_string(done) + " of " + std::to_string(bytes.size()) +
                           " bytes)", 0);
        done += size_t(got);
    }
    return bytes;
}
}  // namespace

std::string read_file(const std::string& path) { return read_regular<std::string>(path); }
std::vector<uint8_t> read_bytes(const std::string& path) { return read_regular<std::vector<uint8_t>>(path); }

namespace {
bool inside(const std::filesystem::path& p, const std::filesystem::path& root) {
    auto r = root.begin(), q = p.begin();
    for (; r != root.end(); ++r, ++q)
        if (q == p.end() || *q != *r) return false;
    return true;
}
}  // namespace

void check_inside(const std::string& dir, const std::string& name) {
    namespace fs = std::filesystem;
    const std::string path = dir + "/" + name;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return;   // missing: the caller says so
    std::error_code ec;
    const fs::path target = fs::canonical(path, ec);
    if (ec) fail(path, "a symbolic link that leads nowhere (" + ec.message() + ")");
    const fs::path root = fs::canonical(dir, ec);
    if (ec) fail(dir, "cannot resolve the directory (" + ec.message() + ")");
    if (inside(target, root)) return;
    if (root.parent_path().filename() == "snapshots" && inside(target, root.parent_path().parent_path() / "blobs"))
        return;   // ~/.cache/huggingface/hub/models--X/snapshots/REV/NAME -> ../../blobs/SHA
    fail(path, "a symbolic link to " + target.string() + ", outside " + dir +
                   " (a file its index or manifest names must be inside it)");
}

void refuse_special_output(const std::string& path) {
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode) && !S_ISDIR(st.st_mode))
        fail(path, "not a regular file (a FIFO, a device or a socket): an output is written as a new file and renamed into place");
}

std::FILE* open_output(const std::string& path, bool append) {
    refuse_special_output(path);   // a FIFO would block the open; a device would be written, or replaced
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode) && ::unlink(path.c_str()) != 0)
        fail(path, "cannot remove the symbolic link there", errno);
    const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (append ? O_APPEND : O_TRUNC);
    int fd = ::open(path.c_str(), flags, 0666);
    if (fd < 0) fail(path, append ? "cannot open for appending" : "cannot create", errno);
    std::FILE* f = ::fdopen(fd, append ? "a" : "w");
    if (!f) {
        int err = errno;
        ::close(fd);
        fail(path, "cannot open", err);
    }
    return f;
}

std::vector<std::string> split(std::string_view s, char sep) {
    std::vector<std::string> out;
    for (size_t start = 0;;) {
        size_t end = s.find(sep, start);
        out.emplace_back(s.substr(start, end - start));   // npos - start: to the end
        if (end == s.npos) return out;
        start = end + 1;
    }
}

bool plain_decimal(std::string_view s) {
    return !s.empty() && s.find_first_not_of("0123456789+-.eE") == std::string_view::npos;
}

std::vector<double> numbers(std::string_view s, double max) {
    std::vector<double> out;
    for (const std::string& x : split(s, ',')) {
        char* end = nullptr;
        double v = std::strtod(x.c_str(), &end);
        if (!plain_decimal(x) || *end != '\0' || !(v >= 0 && v <= max)) return {};
        out.push_back(v);
    }
    return out;
}

std::vector<std::string> split_lines(const std::string& data) {
    if (data.empty()) return {};
    return split(std::string_view(data).substr(0, data.size() - (data.back() == '\n')), '\n');
}

std::vector<std::string> read_lines(const std::string& path) { return split_lines(read_file(path)); }

void check_output_path(const std::string& path, const std::string& flag) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec)) throw std::runtime_error(flag + ": " + path + " is a directory, expected a file path");
    try {
        refuse_special_output(path);
    } catch (const std::exception& e) {
        throw std::runtime_error(flag + ": " + e.what());
    }
    fs::path parent = fs::path(path).parent_path();
    if (!parent.empty() && !fs::is_directory(parent, ec))
        throw std::runtime_error(flag + ": " + path + ": the directory " + parent.string() + " does not exist");
    check_writable_dir(parent.empty() ? "." : parent.string(), flag);
}

// A file made there: permissions, a read-only mount or a full quota show now, before a run whose
// output would be lost at its end. Unnamed (O_TMPFILE), so a kill leaves nothing behind; where
// the file system cannot, a named one, removed at once.
void check_writable_dir(const std::string& dir, const std::string& flag) {
    int fd = -1;
#ifdef O_TMPFILE
    fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    bool unsupported = fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL);
#else
    bool unsupported = true;
#endif
    const std::string probe = dir + "/.pipetrain-probe." + std::to_string(::getpid());
    if (unsupported) fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) throw std::runtime_error(flag + ": cannot write in " + dir + " (" + std::strerror(errno) + ")");
    ::close(fd);
    if (unsupported) ::unlink(probe.c_str());
}

void write_chunks_atomic(const std::string& path, const std::vector<Chunk>& chunks) {
    refuse_special_output(path);   // the rename would replace the node itself (as root: /dev/null)
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    auto fail_io = [&](const std::string& what, int err) {
        ::unlink(tmp.c_str());
        fail(path, what, err);
    };
    ::unlink(tmp.c_str());   // a leftover (or a planted link) of that name: ours is made fresh, never followed
    Fd out{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666)};
    if (out.fd < 0) fail_io("cannot create temporary file " + tmp, errno);
    for (const auto& [data, size] : chunks) {
        const char* p = static_cast<const char*>(data);
        for (size_t done = 0; done < size;) {
            ssize_t n = ::write(out.fd, p + done, size - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) fail_io("cannot write " + tmp, n < 0 ? errno : EIO);
            done += size_t(n);
        }
    }
    if (::fsync(out.fd) != 0) fail_io("cannot fsync " + tmp, errno);
    const int fd = out.fd;
    out.fd = -1;
    if (::close(fd) != 0) fail_io("cannot close " + tmp, errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0) fail_io("cannot rename " + tmp + " to it", errno);
    // The rename itself is only durable once the directory entry is on disk.
    fsync_dir(std::filesystem::path(path).parent_path().string());
}

void fsync_dir(const std::string& dir) {
    Fd d{::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
    if (d.fd < 0 || ::fsync(d.fd) != 0) fail(dir.empty() ? "." : dir, "cannot fsync the directory", errno);
}

void write_file_atomic(const std::string& path, const std::string& contents) {
    write_chunks_atomic(path, {{contents.data(), contents.size()}});
}

}  // namespace pt
