// What the native sources share: GCC/Clang vector types of 16 lanes (whatever the CPU's vector
// width: -march=native picks the instructions) and unaligned loads and stores of them.

#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

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

// Lane-wise comparisons and selects. GCC (12) splits the arithmetic of a vector wider than the
// CPU's into native pieces, but compiles a comparison or a `?:` of one element by element
// (scalar code, 5-10x slower): on a CPU without 512-bit vectors these compare in pieces of the
// widest vector it has, and select with bit operations, which split well.
#if defined(__AVX512F__)
constexpr int kCompareLanes = 16;
#elif defined(__AVX__)
constexpr int kCompareLanes = 8;
#else
constexpr int kCompareLanes = 4;
#endif

// The lane-wise mask (-1 or 0 per lane, int32) of `compare(a, b)`, compared kCompareLanes at a time.
template <typename V, typename Compare>
inline vi16 compare_lanes(V a, V b, Compare compare) {
  using Lane = std::remove_cv_t<std::remove_reference_t<decltype(a[0])>>;
  typedef Lane Piece __attribute__((vector_size(kCompareLanes * sizeof(Lane))));
  vi16 out;
  for (int k = 0; k < kLanes; k += kCompareLanes) {
    Piece x, y;
    std::memcpy(&x, reinterpret_cast<const Lane*>(&a) + k, sizeof(Piece));
    std::memcpy(&y, reinterpret_cast<const Lane*>(&b) + k, sizeof(Piece));
    const auto mask = compare(x, y);
    std::memcpy(reinterpret_cast<int32_t*>(&out) + k, &mask, sizeof(mask));
  }
  return out;
}

template <typename V, typename S>
inline vi16 less(V a, S b) {
  return compare_lanes(a, V{} + b, [](auto x, auto y) { return x < y; });
}
template <typename V, typename S>
inline vi16 greater(V a, S b) {
  return compare_lanes(a, V{} + b, [](auto x, auto y) { return x > y; });
}
template <typename V, typename S>
inline vi16 greater_equal(V a, S b) {
  return compare_lanes(a, V{} + b, [](auto x, auto y) { return x >= y; });
}
template <typename V, typename S>
inline vi16 equal(V a, S b) {
  return compare_lanes(a, V{} + b, [](auto x, auto y) { return x == y; });
}
template <typename V, typename S>
inline vi16 not_equal(V a, S b) {
  return compare_lanes(a, V{} + b, [](auto x, auto y) { return x != y; });
}
inline vi16 is_nan(vf16 v) { return not_equal(v, v); }

// `mask ? x : y` lane by lane, for a mask of -1 or 0 per lane (a comparison's).
template <typename V>
inline V select(vi16 mask, V x, V y) {
  return reinterpret_cast<V>((mask & reinterpret_cast<vi16>(x)) |
                             (~mask & reinterpret_cast<vi16>(y)));
}

}  // namespace tinykg
