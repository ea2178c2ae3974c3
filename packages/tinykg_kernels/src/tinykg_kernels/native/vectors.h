// What the native sources share: GCC/Clang vector types of 16 lanes (the codec's layout) and of
// the CPU's own width (`kNativeLanes`, for hot loops), helpers that compare 16 lanes in pieces of
// that width, and unaligned loads and stores.

#pragma once

#include <cstdint>
#include <cstring>

namespace tinykg {

constexpr int kLanes = 16;
typedef float vf16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));
typedef uint32_t vu16 __attribute__((vector_size(64)));
typedef uint8_t vb16 __attribute__((vector_size(16)));

template <typename V, typename T>
inline V load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

template <typename T, typename V>
inline void store(T* p, V v) {
  std::memcpy(p, &v, sizeof(V));
}

// GCC (12) splits the arithmetic of a vector wider than the CPU's into native pieces, but compiles
// a comparison or a `?:` of one element by element (scalar code, 5-10x slower), and keeps arrays
// of them in memory. Hot loops therefore use vectors of the CPU's own width (vfn, vin, vun, vbn);
// 16-lane code compares in such pieces (`less`, `greater`, ...) and selects with bit operations.
// kNativeLanes: the 4-byte lanes the CPU compares in one instruction.
#if defined(__AVX512F__)
constexpr int kNativeLanes = 16;
#elif defined(__AVX__)
constexpr int kNativeLanes = 8;
#else
constexpr int kNativeLanes = 4;
#endif
typedef float vfn __attribute__((vector_size(kNativeLanes * 4)));
typedef int32_t vin __attribute__((vector_size(kNativeLanes * 4)));
typedef uint32_t vun __attribute__((vector_size(kNativeLanes * 4)));
typedef uint8_t vbn __attribute__((vector_size(kNativeLanes)));

// `f(a, b)` of 16 lanes, computed kNativeLanes lanes at a time (R: the result's 16-lane type).
// Split and joined with shuffles, which stay in registers.
template <typename R, typename V, typename F>
inline R piecewise(V a, V b, F f) {
  static_assert(sizeof(R) == sizeof(V), "16 lanes of 4 bytes in and out");
  if constexpr (kNativeLanes == 16) {
    return reinterpret_cast<R>(f(a, b));
  } else if constexpr (kNativeLanes == 8) {
    const auto low = f(__builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7),
                       __builtin_shufflevector(b, b, 0, 1, 2, 3, 4, 5, 6, 7));
    const auto high = f(__builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15),
                        __builtin_shufflevector(b, b, 8, 9, 10, 11, 12, 13, 14, 15));
    return reinterpret_cast<R>(
        __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  } else {
#define TINYKG_QUARTER(v, q) __builtin_shufflevector(v, v, 4 * q, 4 * q + 1, 4 * q + 2, 4 * q + 3)
    const auto r0 = f(TINYKG_QUARTER(a, 0), TINYKG_QUARTER(b, 0));
    const auto r1 = f(TINYKG_QUARTER(a, 1), TINYKG_QUARTER(b, 1));
    const auto r2 = f(TINYKG_QUARTER(a, 2), TINYKG_QUARTER(b, 2));
    const auto r3 = f(TINYKG_QUARTER(a, 3), TINYKG_QUARTER(b, 3));
#undef TINYKG_QUARTER
    return reinterpret_cast<R>(__builtin_shufflevector(
        __builtin_shufflevector(r0, r1, 0, 1, 2, 3, 4, 5, 6, 7),
        __builtin_shufflevector(r2, r3, 0, 1, 2, 3, 4, 5, 6, 7), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
        11, 12, 13, 14, 15));
  }
}

// Lane-wise comparisons of 16 lanes (b a vector or a scalar): -1 or 0 per lane, int32.
template <typename V, typename S>
inline vi16 less(V a, S b) {
  return piecewise<vi16>(a, V{} + b, [](auto x, auto y) { return x < y; });
}
template <typename V, typename S>
inline vi16 greater(V a, S b) {
  return piecewise<vi16>(a, V{} + b, [](auto x, auto y) { return x > y; });
}
template <typename V, typename S>
inline vi16 equal(V a, S b) {
  return piecewise<vi16>(a, V{} + b, [](auto x, auto y) { return x == y; });
}
template <typename V, typename S>
inline vi16 not_equal(V a, S b) {
  return piecewise<vi16>(a, V{} + b, [](auto x, auto y) { return x != y; });
}
inline vi16 is_nan(vf16 v) { return not_equal(v, v); }

// `mask ? x : y` lane by lane, for a mask of -1 or 0 per lane (a comparison's).
template <typename V>
inline V select(vi16 mask, V x, V y) {
  return reinterpret_cast<V>((mask & reinterpret_cast<vi16>(x)) |
                             (~mask & reinterpret_cast<vi16>(y)));
}

}  // namespace tinykg
