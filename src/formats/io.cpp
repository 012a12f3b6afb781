#include "src/formats/io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
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
    for (char& c : msg)
        if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    throw std::runtime_error(msg);
}

std::string read_file(const std::string& path) {
    Fd in{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (in.fd < 0) fail(path, "cannot open", errno);
    struct stat st;
    if (::fstat(in.fd, &st) != 0) fail(path, "cannot stat", errno);
    if (S_ISDIR(st.st_mode)) fail(path, "is a directory, expected a file", 0);
    // A pipe or a terminal ends when its writer is done; /dev/zero never does, so what is not a
    // regular file is read up to a bound.
    const size_t limit = S_ISREG(st.st_mode) ? SIZE_MAX : size_t(256) << 20;
    std::string data;
    char buf[1 << 16];
    for (;;) {
        ssize_t n = ::read(in.fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail(path, "cannot read", errno);
        if (n == 0) return data;
        data.append(buf, size_t(n));
        if (data.size() > limit) fail(path, "more than 256 MiB from a pipe or a device (use a regular file)", 0);
    }
}

std::vector<uint8_t> read_bytes(const std::string& path) {
    Fd in{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};   // a FIFO fails below, not here
    if (in.fd < 0) fail(path, "cannot open", errno);
    struct stat st;
    if (::fstat(in.fd, &st) != 0) fail(path, "cannot stat", errno);
    if (!S_ISREG(st.st_mode)) fail(path, "not a regular file", 0);
    std::vector<uint8_t> bytes(size_t(st.st_size));
    for (size_t done = 0; done < bytes.size();) {
        ssize_t got = ::read(in.fd, bytes.data() + done, bytes.size() - done);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) fail(path, "cannot read", errno);
        if (got == 0)
            fail(path, "file shrank while reading (" + std::to_string(done) + " of " + std::to_string(bytes.size()) +
                           " bytes)", 0);
        done += size_t(got);
    }
    return bytes;
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

std::vector<std::string> split_lines(const std::string& data) {
    if (data.empty()) return {};
    return split(std::string_view(data).substr(0, data.size() - (data.back() == '\n')), '\n');
}

std::vector<std::string> read_lines(const std::string& path) { return split_lines(read_file(path)); }

void check_output_path(const std::string& path, const std::string& flag) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec)) throw std::runtime_error(flag + ": " + path + " is a directory, expected a file path");
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
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    auto fail_io = [&](const std::string& what, int err) {
        ::unlink(tmp.c_str());
        fail(path, what, err);
    };
    Fd out{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)};
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
