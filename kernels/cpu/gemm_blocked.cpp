// kernels/cpu/gemm_blocked.cpp — the CPU speed track's GEMM: a cache-blocked kernel with three
// register-tile micro-kernels (plain C++, AVX2 + FMA, AVX-512; the last two also read A in place
// for blocks of few columns, where packing it would not pay), bit-equal to gemm_naive
// (kernels/cpu/gemm.cpp, the specification) on any shape and thread count: it computes the same
// chain per output (kernels/cpu/gemm_chain.hpp) and only visits the outputs in another order.
#include "kernels/ops.hpp"
#include "kernels/cpu/gemm_chain.hpp"
#include "kernels/cpu/gemm_reuse.hpp"
#include "kernels/cpu/parallel.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PT_X86 1
#include <immintrin.h>
#endif

namespace ops {

namespace {

using chain::finish;

// ---- micro-kernels ----------------------------------------------------------------------------
// Each advances an MR x NR tile of C (row stride ldc) by kc steps of the chain, reading a packed
// strip of A (Ap[k][r], MR floats per k) and of B (Bp[k][c], NR floats per k). `load` = false
// starts the chain at 0 (the first slice of K), true continues it from the floats in c.
// The in-place form reads op(A) where it lies instead, element (r, k) of the strip at
// A[r * rs + k * ks] (an (M, K) A: rs = K, ks = 1; a (K, M) A: rs = 1, ks = M), for `rows` <= MR
// rows: the same chain on the same floats, so the same bits (block says when it pays).
// `end`, when not null, is the chain's end for alpha = 1 done in registers after the last slice of
// K: out = acc, plus C's old value (add_old: beta = 1), plus the bias, in finish()'s order (1 * x is
// x), stored to `out` instead of c: between the last fma and C the floats stay in registers, where
// a pass over the block after read them back. bench-gemm, 3 rounds alternated, the family-26 EPYC,
// 2 threads: 2048 x 1024 x 256 nt with a bias 276-283 -> 334-355 GFLOP/s, 2048 x 768 x 256 nt
// 275-285 -> 305-352, 256 x 256 x 2048 tn adding (beta 1) 254-269 -> 278-305, the other `small`
// shapes level; 1 thread level. `small`'s step: 2 threads 4% faster in 4 of 5 rounds, 1 thread level.
struct End {
    float* out;          // this tile's place in C
    int ld;              // C's row stride
    bool add_old;        // C's old values are added (beta = 1)
    const float* bias;   // this tile's NR bias values, or null
};
using TileFn = void (*)(int kc, const float* Ap, const float* Bp, float* c, int ldc, bool load, const End* end);
using TileInPlaceFn = void (*)(int rows, int kc, const float* A, int64_t rs, int64_t ks, const float* Bp, float* c,
                               int ldc, bool load, const End* end);

// v1 plain C++: the tile in a local array; GCC vectorises the j loop with fma instructions
// where the target has them (with -march=native), and std::fma is still exact where it has not.
constexpr int kPlainMR = 6, kPlainNR = 32;
void tile_plain(int kc, const float* Ap, const float* Bp, float* c, int ldc, bool load, const End* end) {
    float t[kPlainMR][kPlainNR];
    for (int i = 0; i < kPlainMR; i++)
        for (int j = 0; j < kPlainNR; j++) t[i][j] = load ? c[i * ldc + j] : 0.0f;
    for (int k = 0; k < kc; k++, Ap += kPlainMR, Bp += kPlainNR)
        for (int i = 0; i < kPlainMR; i++)
            for (int j = 0; j < kPlainNR; j++) t[i][j] = std::fma(Ap[i], Bp[j], t[i][j]);
    if (end) c = end->out, ldc = end->ld;
    for (int i = 0; i < kPlainMR; i++)
        for (int j = 0; j < kPlainNR; j++) {
            float r = t[i][j];
            if (end && end->add_old) r += c[i * ldc + j];
            if (end && end->bias) r += end->bias[j];
            c[i * ldc + j] = r;
        }
}

#ifdef PT_X86
// v2 AVX2 + FMA: 6 rows x 2 vectors of 8 = 12 accumulators of the 16 ymm registers, plus the
// two B vectors and the broadcast A value (the classic Haswell tile).
// R <= 6 rows, A at strides (rs, ks): inlined with the packed strides (1, 6) as constants for tile_avx2.
constexpr int kAvx2MR = 6, kAvx2NR = 16;
template <int R>
__attribute__((target("avx2,fma"), always_inline)) inline void avx2_tile(int kc, const float* A, int64_t rs, int64_t ks,
                                                                          const float* Bp, float* c, int ldc, bool load,
                                                                          const End* end) {
    __m256 t[R][2];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
        for (int v = 0; v < 2; v++) t[i][v] = load ? _mm256_loadu_ps(c + i * ldc + 8 * v) : _mm256_setzero_ps();
    for (int k = 0; k < kc; k++, A += ks, Bp += kAvx2NR) {
        const __m256 b0 = _mm256_loadu_ps(Bp), b1 = _mm256_loadu_ps(Bp + 8);
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            const __m256 a = _mm256_broadcast_ss(A + i * rs);
            t[i][0] = _mm256_fmadd_ps(a, b0, t[i][0]);
            t[i][1] = _mm256_fmadd_ps(a, b1, t[i][1]);
        }
    }
    if (end) c = end->out, ldc = end->ld;
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
        for (int v = 0; v < 2; v++) {
            if (end && end->add_old) t[i][v] = _mm256_add_ps(t[i][v], _mm256_loadu_ps(c + i * ldc + 8 * v));
            if (end && end->bias) t[i][v] = _mm256_add_ps(t[i][v], _mm256_loadu_ps(end->bias + 8 * v));
            _mm256_storeu_ps(c + i * ldc + 8 * v, t[i][v]);
        }
}
__attribute__((target("avx2,fma"))) void tile_avx2(int kc, const float* Ap, const float* Bp, float* c, int ldc, bool load,
                                                   const End* end) {
    avx2_tile<kAvx2MR>(kc, Ap, 1, kAvx2MR, Bp, c, ldc, load, end);
}
template <int R>
__attribute__((target("avx2,fma"))) void avx2_in_place_rows(int kc, const float* A, int64_t rs, int64_t ks, const float* Bp,
                                                            float* c, int ldc, bool load, const End* end) {
    avx2_tile<R>(kc, A, rs, ks, Bp, c, ldc, load, end);
}

// v3 AVX-512: 14 rows x 2 vectors of 16 = 28 accumulators of the 32 zmm registers, plus the two
// B vectors and the broadcast A value. Twice the lanes of AVX2 and twice the registers: each k
// step loads 2 vectors of B and 14 scalars of A for 28 fmas, enough to keep two FMA pipes busy.
// (12 rows measured ~10% slower here: fewer fmas per load.)
// R < 14 rows: the last strip of an M that 14 does not divide (M = 256: 18 strips and 4 rows)
// computes and stores only its R rows (the strip is still packed 14 wide, zero-padded).
constexpr int kAvx512MR = 14, kAvx512NR = 32;
template <int R>   // R <= 14 rows, A at strides (rs, ks): inlined with the packed strides (1, 14) as constants
__attribute__((target("avx512f"), always_inline)) inline void avx512_tile(int kc, const float* A, int64_t rs, int64_t ks,
                                                                           const float* Bp, float* c, int ldc, bool load,
                                                                           const End* end) {
    __m512 t[R > 0 ? R : 1][2];
#pragma GCC unroll 14
    for (int i = 0; i < R; i++)
        for (int v = 0; v < 2; v++) t[i][v] = load ? _mm512_loadu_ps(c + i * ldc + 16 * v) : _mm512_setzero_ps();
    for (int k = 0; k < kc; k++, A += ks, Bp += kAvx512NR) {
        const __m512 b0 = _mm512_loadu_ps(Bp), b1 = _mm512_loadu_ps(Bp + 16);
#pragma GCC unroll 14
        for (int i = 0; i < R; i++) {
            const __m512 a = _mm512_set1_ps(A[i * rs]);
            t[i][0] = _mm512_fmadd_ps(a, b0, t[i][0]);
            t[i][1] = _mm512_fmadd_ps(a, b1, t[i][1]);
        }
    }
    if (end) c = end->out, ldc = end->ld;
#pragma GCC unroll 14
    for (int i = 0; i < R; i++)
        for (int v = 0; v < 2; v++) {
            if (end && end->add_old) t[i][v] = _mm512_add_ps(t[i][v], _mm512_loadu_ps(c + i * ldc + 16 * v));
            if (end && end->bias) t[i][v] = _mm512_add_ps(t[i][v], _mm512_loadu_ps(end->bias + 16 * v));
            _mm512_storeu_ps(c + i * ldc + 16 * v, t[i][v]);
        }
}
template <int R>
__attribute__((target("avx512f"))) void tile_avx512_rows(int kc, const float* Ap, const float* Bp, float* c, int ldc,
                                                         bool load, const End* end) {
    avx512_tile<R>(kc, Ap, 1, kAvx512MR, Bp, c, ldc, load, end);
}
template <int R>
__attribute__((target("avx512f"))) void avx512_in_place_rows(int kc, const float* A, int64_t rs, int64_t ks,
                                                             const float* Bp, float* c, int ldc, bool load, const End* end) {
    avx512_tile<R>(kc, A, rs, ks, Bp, c, ldc, load, end);
}
constexpr auto tile_avx512 = tile_avx512_rows<kAvx512MR>;

template <int... R>
constexpr std::array<TileFn, sizeof...(R)> avx512_tiles(std::integer_sequence<int, R...>) {
    return {tile_avx512_rows<R>...};
}
void tile_avx512_part(int rows, int kc, const float* Ap, const float* Bp, float* c, int ldc, bool load, const End* end) {
    static constexpr auto by_rows = avx512_tiles(std::make_integer_sequence<int, kAvx512MR>());
    by_rows[rows](kc, Ap, Bp, c, ldc, load, end);
}

// The in-place tiles by their rows, 1 to MR.
using InPlaceRowsFn = void (*)(int kc, const float* A, int64_t rs, int64_t ks, const float* Bp, float* c, int ldc, bool load,
                               const End* end);
template <int... R>
constexpr std::array<InPlaceRowsFn, sizeof...(R)> avx2_in_place_tiles(std::integer_sequence<int, R...>) {
    return {avx2_in_place_rows<R + 1>...};
}
template <int... R>
constexpr std::array<InPlaceRowsFn, sizeof...(R)> avx512_in_place_tiles(std::integer_sequence<int, R...>) {
    return {avx512_in_place_rows<R + 1>...};
}
void tile_avx2_in_place(int rows, int kc, const float* A, int64_t rs, int64_t ks, const float* Bp, float* c, int ldc,
                        bool load, const End* end) {
    static constexpr auto by_rows = avx2_in_place_tiles(std::make_integer_sequence<int, kAvx2MR>());
    by_rows[rows - 1](kc, A, rs, ks, Bp, c, ldc, load, end);
}
void tile_avx512_in_place(int rows, int kc, const float* A, int64_t rs, int64_t ks, const float* Bp, float* c, int ldc,
                          bool load, const End* end) {
    static constexpr auto by_rows = avx512_in_place_tiles(std::make_integer_sequence<int, kAvx512MR>());
    by_rows[rows - 1](kc, A, rs, ks, Bp, c, ldc, load, end);
}
#endif

// ---- packing A --------------------------------------------------------------------------------
// op(A)[i0:i0+mc, p0:p0+kc] as strips of MR rows, k-major inside a strip (Ap[strip][k][r]); the
// last strip is zero-padded. Each source row or column is read contiguously.
void pack_a(float* Ap, const float* A, int MR, int i0, int mc, int p0, int kc, int M, int K, bool transA) {
    if (transA) {   // A is (K, M): each k's row of the block read once, left to right, into every strip
        for (int k = 0; k < kc; k++) {
            const float* a = A + (size_t)(p0 + k) * M + i0;
            for (int s = 0; s < mc; s += MR) {
                float* dst = Ap + (size_t)s * kc + (size_t)k * MR;   // strip s / MR starts at Ap + s * kc
                const int rows = std::min(MR, mc - s);
                for (int r = 0; r < rows; r++) dst[r] = a[s + r];
                for (int r = rows; r < MR; r++) dst[r] = 0.0f;
            }
        }
        return;
    }
    for (int s = 0; s < mc; s += MR, Ap += (size_t)MR * kc) {
        const int rows = std::min(MR, mc - s);
        for (int r = 0; r < rows; r++) {   // A is (M, K): row r along k
            const float* a = A + (size_t)(i0 + s + r) * K + p0;
            for (int k = 0; k < kc; k++) Ap[(size_t)k * MR + r] = a[k];
        }
        for (int r = rows; r < MR; r++)
            for (int k = 0; k < kc; k++) Ap[(size_t)k * MR + r] = 0.0f;
    }
}

#ifdef PT_X86
// The same packing with AVX-512, for the 14-row strips of tile_avx512. Stored one float at a
// time, an (M, K) A cost as much as 14% of a 1024^3 GEMM (perf): each float went to its own
// place 56 bytes from the last. Here 16 k of 14 rows are loaded as 14 vectors, transposed in
// registers (16 x 16, rows 14 and 15 zero) and stored as 16 runs of 14 floats. A (K, M) A is one
// masked load and store of 14 floats per k. Edge strips and the k left over take pack_a's path.
// (GCC 12's intrinsics pass an undefined vector as the unused merge source of these shuffles, and
// -Wmaybe-uninitialized mistakes it for ours.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"), always_inline)) inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {   // lane L of t[i]: r[i][4L], r[i+1][4L], r[i][4L+1], r[i+1][4L+1]
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {   // lane L of r[i + c]: rows i..i+3 at column 4L + c
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {   // gather lane L of r[c], r[4+c], r[8+c], r[12+c]: column 4L + c
        const __m512 a = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), b = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
        const __m512 e = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88), f = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
        t[c] = _mm512_shuffle_f32x4(a, e, 0x88);        // column c
        t[8 + c] = _mm512_shuffle_f32x4(a, e, 0xDD);    // column 8 + c
        t[4 + c] = _mm512_shuffle_f32x4(b, f, 0x88);    // column 4 + c
        t[12 + c] = _mm512_shuffle_f32x4(b, f, 0xDD);   // column 12 + c
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

__attribute__((target("avx512f"))) void pack_a_avx512(float* Ap, const float* A, int MR, int i0, int mc, int p0,
                                                      int kc, int M, int K, bool transA) {
    const __mmask16 lanes = (1u << kAvx512MR) - 1;
    const int full = mc / kAvx512MR * kAvx512MR;   // rows in whole strips
    if (transA) {   // each k's row of the block read once, left to right, into every strip (strip s at Ap + s * kc)
        // Strip by strip instead, the block's k rows (M apart: 4 KiB at M = 1024) were read down a
        // column 14 floats wide, a cache line of each row at a time: 18% of 1024 x 256 x 2048 tn (a
        // weight gradient) went to packing, and bench-gemm ran it at 131-135 GFLOP/s, now 151-154.
        for (int k = 0; k < kc; k++) {
            const float* row = A + (size_t)(p0 + k) * M + i0;
            for (int s = 0; s < full; s += kAvx512MR)
                _mm512_mask_storeu_ps(Ap + (size_t)s * kc + (size_t)k * kAvx512MR, lanes, _mm512_maskz_loadu_ps(lanes, row + s));
        }
        if (full < mc) pack_a(Ap + (size_t)full * kc, A, MR, i0 + full, mc - full, p0, kc, M, K, transA);
        return;
    }
    for (int s = 0; s < full; s += kAvx512MR, Ap += (size_t)kAvx512MR * kc) {
        const float* a = A + (size_t)(i0 + s) * K + p0;
        int k = 0;
        for (; k + 16 <= kc; k += 16) {
            __m512 r[16] = {};   // rows 14 and 15 stay zero
            for (int i = 0; i < kAvx512MR; i++) r[i] = _mm512_loadu_ps(a + (size_t)i * K + k);
            transpose16(r);
            for (int j = 0; j < 16; j++) _mm512_mask_storeu_ps(Ap + (size_t)(k + j) * kAvx512MR, lanes, r[j]);
        }
        for (; k < kc; k++)
            for (int i = 0; i < kAvx512MR; i++) Ap[(size_t)k * kAvx512MR + i] = a[(size_t)i * K + k];
    }
    if (full < mc) pack_a(Ap, A, MR, i0 + full, mc - full, p0, kc, M, K, transA);
}

// A whole 32-column strip of op(B) from an (N, K) B (a layer's weight, y = x W^T): 16 k of 16 rows
// of B loaded as 16 vectors, transposed in registers, stored as 16 runs of 16 floats. Stored one
// float at a time, each 128 bytes from the last, this packing was 7% of a step in micro-batches
// of 2 rows (perf; every micro-batch packs every weight again).
__attribute__((target("avx512f"))) void pack_bt_avx512(float* Bp, const float* B, int p0, int kc, int j, int K) {
    int k = 0;
    for (; k + 16 <= kc; k += 16)
        for (int c0 = 0; c0 < kAvx512NR; c0 += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(B + (size_t)(j + c0 + i) * K + p0 + k);
            transpose16(r);
            for (int i = 0; i < 16; i++) _mm512_storeu_ps(Bp + (size_t)(k + i) * kAvx512NR + c0, r[i]);
        }
    for (; k < kc; k++)
        for (int c = 0; c < kAvx512NR; c++) Bp[(size_t)k * kAvx512NR + c] = B[(size_t)(j + c) * K + p0 + k];
}
#pragma GCC diagnostic pop
#endif

using PackFn = void (*)(float* Ap, const float* A, int MR, int i0, int mc, int p0, int kc, int M, int K, bool transA);
using PackBtFn = void (*)(float* Bp, const float* B, int p0, int kc, int j, int K);   // a whole strip, B (N, K)
using TilePartFn = void (*)(int rows, int kc, const float* Ap, const float* Bp, float* c, int ldc, bool load, const End* end);
struct Kernel {
    GemmKernel id;
    const char* name;
    int MR, NR;
    TileFn tile;
    PackFn pack_a;
    PackBtFn pack_bt;     // null: pack_b_strip's loop
    TilePartFn tile_part;   // rows < MR of a tile; null: all MR rows, into a local tile
    TileInPlaceFn tile_in_place;   // null: A is always packed
};

const Kernel& kernel_of(GemmKernel k) {
    static const Kernel plain{GemmKernel::plain, "plain", kPlainMR, kPlainNR, tile_plain, pack_a, nullptr, nullptr, nullptr};
#ifdef PT_X86
    static const Kernel avx2{GemmKernel::avx2, "avx2", kAvx2MR, kAvx2NR, tile_avx2, pack_a, nullptr, nullptr, tile_avx2_in_place};
    static const Kernel avx512{GemmKernel::avx512, "avx512", kAvx512MR, kAvx512NR, tile_avx512, pack_a_avx512, pack_bt_avx512,
                                   tile_avx512_part, tile_avx512_in_place};
    if (k == GemmKernel::avx512) return avx512;
    if (k == GemmKernel::avx2) return avx2;
#endif
    return plain;
}

GemmKernel best_kernel() {
    for (GemmKernel k : {GemmKernel::avx512, GemmKernel::avx2})
        if (gemm_kernel_runs(k)) return k;
    return GemmKernel::plain;
}

// The kernel ops::gemm uses: PIPETRAIN_GEMM=plain|avx2|avx512 if set, else the best one.
GemmKernel initial_kernel() {
    const char* env = std::getenv("PIPETRAIN_GEMM");
    if (!env || !*env) return best_kernel();
    for (GemmKernel k : {GemmKernel::plain, GemmKernel::avx2, GemmKernel::avx512})
        if (std::string(env) == kernel_of(k).name && gemm_kernel_runs(k)) return k;
    throw std::runtime_error(std::string("PIPETRAIN_GEMM: expected plain, avx2 or avx512 (one this CPU runs), got \"") +
                             env + "\"");
}
std::atomic<GemmKernel>& chosen() {
    static std::atomic<GemmKernel> k{initial_kernel()};
    return k;
}

// ---- packing ----------------------------------------------------------------------------------
// Cache blocks: K in slices of KC (a packed B strip, KC x NR, stays in L1; an A block, MC x KC,
// in L2), C in blocks of at most MC rows x NCB columns, one block per task of the thread pool.
// MC_MAX 256 (an A block of 256 KiB) rather than 168: fewer blocks, each packing its A and reading
// B strips once. Xeon (2 MiB L2), bench-gemm against the build before, 3 rounds alternated: 2
// threads +0-6% at 9 of the 10 `small` shapes (256x1024x2048 tn 0.93 -> 0.99 of OpenBLAS), 1 thread
// within ±2%. Not measured on a 512 KiB L2 (the EPYC), where the block still fits.
// KC 256 rather than 192 (a B strip of 24 KiB, leaving the L1 more room beside a strip of A): on the
// family-26 EPYC (48 KiB L1), 3 rounds alternated, 192 ran the K = 256 shapes in two slices and
// 2048 x 1024 x 256 nn and nt 6-12% slower on 2 threads (388 -> 351 GFLOP/s), the rest level or up to 5% slower.
// NCB_MAX 512 rather than 256: with 256 (N = 1024 in four blocks of columns, not two) 256 x 1024 x 2048 tn,
// 2048 x 1024 x 256 nn and nt and 1024^3 ran level on 2 threads (the family-26 EPYC, 3 rounds alternated).
constexpr int KC = 256, MC_MAX = 256, NCB_MAX = 512;
constexpr int kInPlaceCols = 128;   // a block this narrow reads op(A) in place (see block)
constexpr int kInPlaceRowsT = 256;   // and a (K, M) A with M this small, at any width

// Whether a block of nc columns reads op(A) in place instead of packing it. A block of at most 128
// columns does: a strip of A packed (0.6-0.85 of a tile) would serve too few tiles to repay it.
// 1 thread, against packing, AVX-512 (4 strips of 32): 2048 x 64 x 256 nt 1.08x, 128 x 64 x 128
// nn 1.25x, an attention head's 128 x 16 x 128 (tiny) 1.55x; AVX2 (8 strips of 16): 1.12-1.37x,
// 128 x 16 x 128 2.1x. At 256 columns: within ±5% either way, so not there. A (K, M) A (a weight
// gradient's dout^T) is also read in place by wider blocks where M <= 256: each k's MR floats lie
// side by side as in a packed strip, and its rows are at most 1 KiB apart. Wider M is packed: from
// rows 4 KiB apart (M = 1024) the k steps of a strip fall in one set of an 8-way L1 (Zen 4, 32 KiB),
// and 1024 x 256 x 2048 tn ran 84-88 GFLOP/s in place against 96-103 packed (1 thread; 2 threads
// 163-174 -> 173-196), 2048 x 2048 x 256 tn 94-96 -> 99-102, the MLM head's 8000 x 256 x 327 tn
// 91-94 -> 97-98, 312 x 1248 x 2048 tn 91 -> 89 (2 threads 168-182 -> 188); AVX2 level or better at
// each (1248 x 312 x 2048 tn 84 -> 92). The EPYC of family 26 (48 KiB, 12-way L1) had run
// 1024 x 256 x 2048 tn 5% faster in place (187-192 against 172-186), and 256 x 1024 x 2048 tn
// (M = 256, still in place) 166-186 against 164-169: the rule costs that machine that 5% there.
bool reads_a_in_place(const Kernel& kn, int nc, int M, bool transA) {
    if (!kn.tile_in_place) return false;
    return nc <= kInPlaceCols || (transA && M <= kInPlaceRowsT);
}

// A buffer of floats aligned to 64 bytes, kept per thread between calls (no allocation per GEMM).
float* scratch(std::vector<float>& v, size_t n) {
    if (v.size() < n + 16) v.resize(n + 16);
    return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t(63));
}

// op(B)[p0:p0+kc, j:j+NR] as one strip (Bp[k][c]), zero-padded past column N.
void pack_b_strip(const Kernel& kn, float* Bp, const float* B, int p0, int kc, int j, int N, int K, bool transB) {
    const int NR = kn.NR, cols = std::min(NR, N - j);
    if (transB && cols == NR && kn.pack_bt) return kn.pack_bt(Bp, B, p0, kc, j, K);
    if (cols < NR) std::fill(Bp, Bp + (size_t)kc * NR, 0.0f);
    if (!transB) {   // B is (K, N): row p0 + k holds the strip's NR values contiguously
        // A whole strip's rows copied with a size the compiler knows (a few vector moves, not a call
        // to memcpy for each 128 bytes: small, 8 micro-batches, 1 thread: memcpy was 3% of a step).
        auto rows = [&](auto n) {
            for (int k = 0; k < kc; k++) std::memcpy(Bp + (size_t)k * NR, B + (size_t)(p0 + k) * N + j, n * sizeof(float));
        };
        if (cols == 32) return rows(std::integral_constant<int, 32>());
        if (cols == 16) return rows(std::integral_constant<int, 16>());
        return rows(cols);
    }
    for (int c = 0; c < cols; c++) {   // B is (N, K): column c of the strip is row j + c of B
        const float* b = B + (size_t)(j + c) * K + p0;
        for (int k = 0; k < kc; k++) Bp[(size_t)k * NR + c] = b[k];
    }
}

// All of op(B), packed once per call and shared by the blocks of rows: slice p0 (kc rows) starts
// at p0 * Npad, and its strip s at p0 * Npad + s * kc * NR.
void pack_b(const Kernel& kn, float* Bp, const float* B, int N, int K, bool transB) {
    const int NR = kn.NR, strips = (N + NR - 1) / NR, Npad = strips * NR;
    parallel_for((int64_t)strips, 4, [&](int64_t s0, int64_t s1) {
        for (int p0 = 0; p0 < K; p0 += KC) {
            const int kc = std::min(KC, K - p0);
            for (int64_t s = s0; s < s1; s++)
                pack_b_strip(kn, Bp + (size_t)p0 * Npad + s * kc * NR, B, p0, kc, int(s) * NR, N, K, transB);
        }
    });
}

// One block of C, rows [i0, i0+mc) x columns [j0, j0+nc), through every slice of K. The chain's
// partial sums live in C itself where one slice makes them whole and beta == 0 (C's old values are
// never needed), else in `acc`, the thread's own: between slices C's rows would be written and read
// again, N floats apart (4 KiB at N = 1024: a tile's rows in one set of L1), and, where a thread's
// block sits beside another's, the cache line across their edge (C need not start on a line) would
// pass between the two cores at every slice. bench-gemm (beta 0), the family-26 EPYC, two builds
// alternated, 3 rounds: 1024^3 311-329 -> 359-377 GFLOP/s on 2 threads, 173-191 -> 190-198 on 1;
// 256 x 256 x 2048 tn 337-356 -> 352-376 on 2; the other shapes with K > 256 within the noise (the
// shapes with K <= 256, whose code is unchanged, moved by up to 8% either way in the same rounds).
// Fetching ahead, measured and not kept (the family-26 EPYC; small's step on 2 threads level, 4-5
// rounds alternated): each tile's lines of C fetched for writing when its last slice starts (a
// harness writing 16 different Cs in turn, 2048 x 1024 x 256 nt on 2 threads: 310-324 -> 323-351
// GFLOP/s, but not the step), and the next slice's A and the next strip's B fetched into L2 a few
// lines per tile (operands cycled past the caches: within the noise).
// Tiles cut by the edge of C run on a local MR x NR tile and copy back what is inside.
// Bp: all of op(B), packed by pack_b; or null, and then each strip is packed here from B just
// before its tiles use it (a block that alone uses its columns: see gemm).
void block(const Kernel& kn, float* C, const float* A, const float* Bp, const float* B, bool transB, const float* bias,
           int i0, int mc, int j0, int nc, int M, int N, int K, bool transA, float alpha, float beta) {
    thread_local std::vector<float> a_buf, acc_buf, strip_buf;
    const int MR = kn.MR, NR = kn.NR, Npad = (N + NR - 1) / NR * NR;
    const bool in_place = reads_a_in_place(kn, nc, M, transA);
    const int64_t rs = transA ? 1 : K, ks = transA ? M : 1;   // op(A)(r, k) at A[r * rs + k * ks]
    float* Ap = in_place ? nullptr : scratch(a_buf, (size_t)(mc + MR) * KC);
    const bool in_c = beta == 0.0f && K <= KC;
    const int ldt = in_c ? N : (nc + NR - 1) / NR * NR;   // row stride of the partial sums
    float* T = in_c ? C + (size_t)i0 * N + j0 : scratch(acc_buf, (size_t)((mc + MR - 1) / MR * MR) * ldt);
    float edge[32 * 32];
    // The chain's end: where alpha is 1 and beta 0 or 1, each tile's as its last slice of K leaves it
    // (End in the registers of a tile that lies whole in C; finish_tile after the others, at C's edges);
    // else one pass over the block at the end.
    const bool in_registers = alpha == 1.0f && (beta == 0.0f || beta == 1.0f);
    const bool nothing_left = in_c && alpha == 1.0f && !bias;   // 1 * acc is acc
    auto finish_tile = [&](int is, int js, int rows, int cols) {
        for (int i = 0; i < rows; i++) {
            float* c = C + (size_t)(i0 + is + i) * N + j0 + js;
            const float* t = T + (size_t)(is + i) * ldt + js;
            for (int j = 0; j < cols; j++) c[j] = finish(t[j], c[j], bias, j0 + js + j, alpha, beta);
        }
    };
    for (int p0 = 0; p0 < K; p0 += KC) {
        const int kc = std::min(KC, K - p0);
        const bool end_here = p0 + kc == K && in_registers && !nothing_left;
        if (!in_place) kn.pack_a(Ap, A, MR, i0, mc, p0, kc, M, K, transA);
        for (int js = 0; js < nc; js += NR) {
            const float* b = nullptr;   // (kc, NR): this strip of op(B)
            if (Bp) {
                b = Bp + (size_t)p0 * Npad + (size_t)(j0 + js) / NR * kc * NR;
            } else {
                float* own = scratch(strip_buf, (size_t)KC * NR);
                pack_b_strip(kn, own, B, p0, kc, j0 + js, N, K, transB);
                b = own;
            }
            for (int is = 0; is < mc; is += MR) {
                float* t = T + (size_t)is * ldt + js;
                const int rows = std::min(MR, mc - is), cols = std::min(NR, nc - js);
                auto run = [&](float* dst, int ld, const End* end) {
                    if (in_place) kn.tile_in_place(rows, kc, A + (i0 + is) * rs + p0 * ks, rs, ks, b, dst, ld, p0 > 0, end);
                    else if (rows < MR && kn.tile_part) kn.tile_part(rows, kc, Ap + (size_t)is * kc, b, dst, ld, p0 > 0, end);
                    else kn.tile(kc, Ap + (size_t)is * kc, b, dst, ld, p0 > 0, end);
                };
                // the tile writes only C's own rows and columns (acc, for beta != 0, has whole tiles)
                const bool whole = (rows == MR || kn.tile_part || in_place) && cols == NR;
                if (whole && end_here) {
                    const End end{C + (size_t)(i0 + is) * N + j0 + js, N, beta != 0.0f, bias ? bias + j0 + js : nullptr};
                    run(t, ldt, &end);
                    continue;
                }
                if (!in_c || whole) {
                    run(t, ldt, nullptr);
                } else {   // in C, whole in one slice: the tile starts from zeros, nothing to copy in
                    run(edge, NR, nullptr);
                    for (int i = 0; i < rows; i++) std::memcpy(t + (size_t)i * ldt, edge + i * NR, cols * 4);
                }
                if (end_here) finish_tile(is, js, rows, cols);
            }
        }
    }
    if (nothing_left || in_registers) return;
    finish_tile(0, 0, mc, nc);
}

// How C is cut into blocks, one task each, the tasks numbered row by row or column by column
// (threads take runs of consecutive tasks: [n t / T, n (t+1) / T)).
struct Cut {
    int MC, NCB, rows_b, cols_b;   // block rows and columns (whole MR and NR strips); blocks each way
    bool by_column;
    int row_of(int64_t t) const { return int(by_column ? t % rows_b : t / cols_b); }
    int col_of(int64_t t) const { return int(by_column ? t / rows_b : t % cols_b); }
};

// Rows into at least ceil(M / MC_MAX) parts, columns into at least ceil(N / NCB_MAX) (the cache
// blocks), and of the cuts with up to twice as many parts each way and either numbering, the one
// whose busiest thread has the least work (then the fewest blocks). The first cut that fits was
// up to 20% off on 2 threads (256 rows: one thread 10 strips, the other 9). Work counts tiles, and
// a tile's worth for each strip of A a block packs: a block packs its rows' A, again for every
// block of columns (perf: a strip's packing costs 0.6-0.85 of a tile). Counting tiles alone,
// 256 x 256 x 2048 (tn) on 2 threads became two blocks of columns each packing all of A, 6% slower
// than two blocks of rows. Packing all of A once per call, shared like B, was slower still: a
// block's A is then no longer fresh in L2.
// Where M fits one block (M <= MC_MAX), a block narrow enough to read A in place packs nothing, and
// is counted so: 256 x 256 x 2048 tn on 2 threads then becomes two blocks of 128 columns, each
// thread with half the tiles and half of B to pack, where two blocks of rows gave one thread 10
// strips and the other 9 and had each pack all of B: alternated, 4 rounds, 227-278 GFLOP/s before,
// 250-289 after (another window: 244 and 314); 1 thread 157 -> 175 with two blocks (now one
// again: reads_a_in_place reads a (K, M) A in place at any width, so no cut saves packing); the
// attention's 128 x 128 x 64 nt and 128 x 64 x 128 nn on 2 threads +5-10%. Not for more rows: there
// each block of columns reads all its rows' A from memory again (2048 x 256 x 1024 nt, 2 threads,
// two blocks of 128 columns in place: 0.85-0.9x).
Cut cut_blocks(const Kernel& kn, int M, int N, bool transA, int threads) {
    const int MR = kn.MR, NR = kn.NR;
    const int ms = (M + MR - 1) / MR, ns = (N + NR - 1) / NR;   // strips each way
    const int mb0 = (M + MC_MAX - 1) / MC_MAX, nb0 = (N + NCB_MAX - 1) / NCB_MAX;
    Cut best{};
    int64_t best_load = -1;
    // At most 64 more parts each way: every candidate walks all its blocks, so up to twice as many
    // made the search quadratic in M (a 20,000,000 x 1 x 1 product took 89 s); past 64 blocks a
    // thread's share is within 1/64 of even anyway. Up to 16,384 rows or 32,768 columns (every
    // shape of small and ERNIE-base but the latter's vocabulary) the search is as before.
    for (int mb = mb0; mb <= std::min({2 * mb0, ms, mb0 + 64}); mb++)
        for (int nb = nb0; nb <= std::min({2 * nb0, ns, nb0 + 64}); nb++)
            for (bool by_column : {false, true}) {
                const int sm = (ms + mb - 1) / mb, sn = (ns + nb - 1) / nb;   // strips a block
                Cut c{sm * MR, sn * NR, (ms + sm - 1) / sm, (ns + sn - 1) / sn, by_column};
                const int64_t tasks = (int64_t)c.rows_b * c.cols_b, T = std::max<int64_t>(1, std::min<int64_t>(threads, tasks));
                int64_t load = 0;   // the busiest thread's work, in tiles
                for (int64_t p = 0; p < T; p++) {
                    int64_t work = 0;
                    for (int64_t t = tasks * p / T; t < tasks * (p + 1) / T; t++) {
                        const int64_t rows = std::min(sm, ms - c.row_of(t) * sm), cols = std::min(sn, ns - c.col_of(t) * sn);
                        const int nc = std::min(int(cols) * NR, N - c.col_of(t) * sn * NR);   // as gemm cuts it
                        // its tiles, and packing its strips of A, about a tile each (or, past MC_MAX rows,
                        // reading them in place from memory again)
                        const bool fetches_a = M > MC_MAX || !reads_a_in_place(kn, nc, M, transA);
                        work += rows * cols + (fetches_a ? rows : 0);
                    }
                    load = std::max(load, work);
                }
                if (best_load < 0 || load < best_load ||
                    (load == best_load && tasks < (int64_t)best.rows_b * best.cols_b)) {
                    best = c;
                    best_load = load;
                }
            }
    return best;
}

}  // namespace

bool gemm_kernel_runs(GemmKernel k) {
    if (k == GemmKernel::plain) return true;
#ifdef PT_X86
    if (k == GemmKernel::avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (k == GemmKernel::avx512) return __builtin_cpu_supports("avx512f");
#endif
    return false;
}
const char* gemm_kernel_name(GemmKernel k) { return kernel_of(k).name; }
GemmKernel gemm_kernel() { return chosen().load(); }
void set_gemm_kernel(GemmKernel k) {
    if (!gemm_kernel_runs(k))
        throw std::runtime_error(std::string("set_gemm_kernel: this CPU has no ") + gemm_kernel_name(k));
    chosen() = k;
}

// ---- packings of constant weights, reused (gemm_reuse.hpp) -------------------------------------
namespace {
struct Packing {   // op(B) as pack_b lays it out
    const float* B;
    int N, K;
    bool transB;
    GemmKernel kernel;
    std::vector<float> data;
    bool fresh;   // packed from B's current values (false: stale, repack before use)
};
struct Reuse {
    bool on = false;
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;   // [start, end) of the constant weights
    std::vector<Packing> packings;
};
thread_local Reuse t_reuse;

bool constant(const Reuse& r, const float* B, size_t floats) {
    const uintptr_t s = reinterpret_cast<uintptr_t>(B), e = s + floats * sizeof(float);
    for (const auto& [lo, hi] : r.ranges)
        if (s >= lo && e <= hi) return true;
    return false;
}

// This thread's packing of op(B) when B is a constant weight (packed on its first use in the
// scope); null otherwise.
const float* reused_b(const Kernel& kn, const float* B, int N, int K, bool transB) {
    Reuse& r = t_reuse;
    if (!r.on || !constant(r, B, (size_t)N * K)) return nullptr;
    Packing* hit = nullptr;
    for (Packing& p : r.packings)
        if (p.B == B && p.N == N && p.K == K && p.transB == transB && p.kernel == kn.id) hit = &p;
    if (!hit) hit = &r.packings.emplace_back(Packing{B, N, K, transB, kn.id, {}, false});
    float* packed = scratch(hit->data, (size_t)K * ((N + kn.NR - 1) / kn.NR * kn.NR));
    if (!hit->fresh) pack_b(kn, packed, B, N, K, transB), hit->fresh = true;
    return packed;
}
}  // namespace

ConstantWeights::ConstantWeights(std::vector<std::pair<const void*, size_t>> ranges, Packings after) : after_(after) {
    Reuse& r = t_reuse;
    if (r.on) throw std::logic_error("ops::ConstantWeights: one is already alive on this thread");
    r.ranges.clear();
    for (const auto& [p, bytes] : ranges)
        r.ranges.push_back({reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + bytes});
    // Packings of weights no longer here (moved, freed) are dropped; the others wait, stale.
    r.packings.erase(std::remove_if(r.packings.begin(), r.packings.end(),
                                    [&](const Packing& p) { return !constant(r, p.B, (size_t)p.N * p.K); }),
                     r.packings.end());
    r.on = !r.ranges.empty();
}
ConstantWeights::~ConstantWeights() {
    t_reuse.on = false;
    if (after_ == Packings::freed) t_reuse.packings.clear();
    for (Packing& p : t_reuse.packings) p.fresh = false;   // the optimizer may now change the weights
}
size_t packed_weight_bytes() {
    size_t bytes = 0;
    for (const Packing& p : t_reuse.packings) bytes += p.data.capacity() * sizeof(float);
    return bytes;
}

void gemm(float* C, const float* A, const float* B, const float* bias,
          int M, int N, int K, bool transA, bool transB, float alpha, float beta) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {   // an empty chain: acc = 0
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) C[(size_t)m * N + n] = finish(0.0f, C[(size_t)m * N + n], bias, n, alpha, beta);
        return;
    }
    const Kernel& kn = kernel_of(gemm_kernel());
    const Cut cut = cut_blocks(kn, M, N, transA, num_threads());
    // With one block of rows, each strip of op(B) serves one block only: the block packs it where
    // it uses it (32 KiB, still in cache for its tiles), instead of all of B going to memory packed
    // and coming back (an MLM head: 38 rows against 8 MB of vocabulary, 1.2x faster). With two, B
    // is read twice but never written: small's MLM head (327 rows; 8 MB of B) 327 x 256 x 8000 nn
    // +5-10% on 1 thread and +16% on 2, 327 x 8000 x 256 nt level and +10%; a step +1.4-3.1% on 1
    // thread, +1.5-2.5% on 2 (3 rounds). Three blocks (600 rows): within the noise, so not there.
    const float* Bp = reused_b(kn, B, N, K, transB);
    if (!Bp && cut.rows_b > 2) {
        thread_local std::vector<float> b_buf;
        float* packed = scratch(b_buf, (size_t)K * ((N + kn.NR - 1) / kn.NR * kn.NR));
        pack_b(kn, packed, B, N, K, transB);
        Bp = packed;
    }
    parallel_for((int64_t)cut.rows_b * cut.cols_b, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; t++) {
            const int i0 = cut.row_of(t) * cut.MC, j0 = cut.col_of(t) * cut.NCB;
            block(kn, C, A, Bp, B, transB, bias, i0, std::min(cut.MC, M - i0), j0, std::min(cut.NCB, N - j0), M, N, K,
                  transA, alpha, beta);
        }
    });
}

}  // namespace ops
