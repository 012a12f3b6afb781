// src/device.hpp — where arrays live and which kernels run: the CPU or a CUDA GPU.
//
// Every thread has a current device, the CPU unless it says otherwise. A pipeline stage's
// thread selects its GPU (and its own stream on it) once; from then on every Array it allocates
// lives on that GPU and every op in `dev::` runs the CUDA kernel on that stream. This file is
// the one place that chooses between kernels/cpu and kernels/cuda: the model calls dev::gemm,
// never ops::gemm or ops::cuda::gemm.
//
// In a build without CUDA, or on a machine without a GPU, only the CPU exists and asking for a
// GPU is a one-line error.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/cpu/parallel.hpp"

namespace pt {

struct Device {
    bool cuda = false;
    int index = 0;   // GPU number
    std::string name() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }
    bool operator==(const Device& o) const { return cuda == o.cuda && (!cuda || index == o.index); }
};
// cpu | cuda | cuda:N, throws naming --device; must_exist: and the GPU is on this machine
Device parse_device(const std::string& s, bool must_exist = true);
int cuda_device_count();                     // 0 when built without CUDA or no GPU is visible

// This thread's device. `stream` numbers the thread's stream on a GPU: stages sharing one GPU
// use different streams, so one stage's kernels can run while another waits for a message.
void set_device(Device d, int stream = 0);
Device current_device();
void synchronize();                          // waits for the work queued on this thread's stream
void* current_stream();                      // this thread's cudaStream_t (null on the CPU)
Device device_of(const void* p);             // where a pointer points (host memory: cpu)

// Byte copies in any direction (host or device on either side), queued on this thread's stream.
// A copy that involves host memory has finished when the call returns.
void copy_bytes(void* dst, const void* src, size_t bytes);
// A 64-bit fingerprint of `bytes` bytes (a multiple of 4) on any device. Each 4-byte word steps a
// bijection of the running value, so two arrays that differ in a single word never share it.
uint64_t fingerprint(const void* data, size_t bytes);

namespace detail {   // used by Array
void* alloc(size_t bytes, Device d, void** stream);
void release(void* p, void* stream, int device);
void zero(void* p, size_t bytes);
}  // namespace detail

// A contiguous array of T on one device, owned: what std::vector<T> is on the CPU. On the CPU it
// IS a std::vector (host code may index it); on a GPU only its data() pointer is usable, by
// kernels and copies. Copies of an Array are deep and stay on the same device.
template <typename T>
class Array {
    static_assert(std::is_trivially_copyable<T>::value, "Array: its bytes are zeroed and copied as bytes");

 public:
    Array() = default;
    explicit Array(size_t n, Device d = current_device()) { zeros(n, d); }
    Array(const Array& o) { assign(o.data(), o.size(), o.device_); }
    Array(Array&& o) noexcept { swap(o); }
    Array& operator=(const Array& o) {
        if (this != &o) assign(o.data(), o.size(), o.device_);
        return *this;
    }
    Array& operator=(Array&& o) noexcept {
        swap(o);
        return *this;
    }
    ~Array() { clear(); }

    // n zeros (the old contents are dropped).
    void zeros(size_t n, Device d = current_device()) {
        reserve(n, d);
        if (device_.cuda) detail::zero(ptr_, n * sizeof(T));
        else host_.resize(n), zero();
    }
    void zero() {   // zeros in place, the storage kept (a reused buffer); zero bytes are a T's zero
        if (device_.cuda) detail::zero(ptr_, n_ * sizeof(T));
        else if (!host_.empty()) ops::zero_bytes(host_.data(), host_.size() * sizeof(T));
    }
    // n elements whose contents the caller is about to overwrite: no zeros written (a forward's
    // outputs; zeroing them was ~5% of a CPU step).
    void resize(size_t n, Device d = current_device()) {
        reserve(n, d);
        if (!device_.cuda) host_.resize(n);
    }
    // n elements copied from src, which may be host or device memory.
    void assign(const T* src, size_t n, Device d = current_device()) {
        reserve(n, d);
        if (device_.cuda) copy_bytes(ptr_, src, n * sizeof(T));
        else if (device_of(src).cuda) host_.resize(n), copy_bytes(host_.data(), src, n * sizeof(T));
        else host_.resize(n), ops::copy_bytes_apart(host_.data(), src, n * sizeof(T));
    }
    void assign(const std::vector<T>& v, Device d = current_device()) { assign(v.data(), v.size(), d); }
    std::vector<T> host() const {   // a host copy of the contents
        if (!device_.cuda) return std::vector<T>(host_.begin(), host_.end());
        std::vector<T> v(n_);
        copy_bytes(v.data(), ptr_, n_ * sizeof(T));
        return v;
    }
    void clear() {
        if (ptr_) detail::release(ptr_, stream_, device_.index);
        ptr_ = nullptr, stream_ = nullptr, n_ = 0;
        host_.clear(), host_.shrink_to_fit();
    }
    void swap(Array& o) noexcept {
        std::swap(ptr_, o.ptr_), std::swap(stream_, o.stream_), std::swap(n_, o.n_);
        std::swap(device_, o.device_), host_.swap(o.host_);
    }

    T* data() { return device_.cuda ? ptr_ : host_.data(); }
    const T* data() const { return device_.cuda ? ptr_ : host_.data(); }
    size_t size() const { return device_.cuda ? n_ : host_.size(); }
    bool empty() const { return size() == 0; }
    Device device() const { return device_; }
    // Host access, CPU arrays only (the model's host-side code runs on the CPU device).
    T& operator[](size_t i) { return host_[i]; }
    const T& operator[](size_t i) const { return host_[i]; }
    auto begin() { return host_.begin(); }
    auto end() { return host_.end(); }
    bool operator==(const Array& o) const { return host() == o.host(); }

 private:
    void reserve(size_t n, Device d) {   // storage for n elements on d (contents undefined)
        if (d.cuda && d == device_ && n == n_ && ptr_) return;
        clear();
        device_ = d;
        if (d.cuda) n_ = n, ptr_ = n ? static_cast<T*>(detail::alloc(n * sizeof(T), d, &stream_)) : nullptr;
    }
    // Host storage. Its allocator leaves new elements uninitialised (resize), so only zeros()
    // writes zeros.
    struct NoInit : std::allocator<T> {
        template <typename U> struct rebind { using other = typename Array<U>::NoInit; };
        template <typename U, typename... A> void construct(U* p, A&&... a) {
            if constexpr (sizeof...(A) == 0) ::new (static_cast<void*>(p)) U;
            else ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
        }
    };
    std::vector<T, NoInit> host_;
    T* ptr_ = nullptr;          // device storage
    void* stream_ = nullptr;    // the stream it was allocated on (and is freed on)
    size_t n_ = 0;
    Device device_;
};
using Buf = Array<float>;

// Moves an array to device d: a copy there, then the old storage is freed.
template <typename T>
void move_to(Array<T>& a, Device d) {
    if (a.device() == d) return;
    Array<T> b;
    b.assign(a.data(), a.size(), d);
    a.swap(b);
}

// ---- time per op -----------------------------------------------------------------------------
// With PIPETRAIN_PROFILE=1 in the environment, every dev:: call adds its wall time to its op's
// total (all threads together), and the floating-point operations of its products (GEMMs and the
// attention's; 0 for other ops); op_profile() reads the totals, slowest first. On a GPU a call's
// time is its launch, not its run: the breakdown is meant for the CPU.
struct OpTime {
    const char* name;
    double seconds;
    long long calls;
    double flops;
};
bool op_profiling();
std::vector<OpTime> op_profile();

// ---- the ops of kernels/ops.inc on this thread's device ------------------------------------
// Same names, arguments and semantics (dev::gemm, dev::layernorm_forward, ...); every pointer
// must be on the current device. On a GPU, the flash attention kernels throw for HS > 128.
namespace dev {
using ops::DropoutKey;
#define OP(ret, name, params, args) ret name params;
#include "kernels/ops.inc"
#undef OP
}  // namespace dev

}  // namespace pt
