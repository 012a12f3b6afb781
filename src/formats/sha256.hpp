// src/formats/sha256.hpp — SHA-256 (FIPS 180-4), for the manifests that seal the directories pipetrain
// writes. The same digests as `sha256sum`, so a user can check a checkpoint without pipetrain.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace pt {

// Whether whole blocks go through the CPU's SHA instructions (set at start-up when the CPU has
// them; tests turn it off to check the plain version against the same digests).
extern bool sha256_sha_ni;

class Sha256 {
 public:
    Sha256();
    void update(const void* data, size_t n);
    std::string hex();   // the digest as 64 lowercase hex digits; ends the hash

 private:
    void block(const uint8_t* p);   // one 64-byte block into state_
    uint32_t state_[8];
    uint8_t buf_[64];
    size_t used_ = 0;     // bytes in buf_
    uint64_t total_ = 0;  // bytes hashed
};

// The digest of a file's bytes, read in pieces (a checkpoint can be gigabytes); `size` receives
// the number of bytes read. Throws "<path>: ..." when it cannot be read.
std::string sha256_file(const std::string& path, uint64_t* size = nullptr);

}  // namespace pt
