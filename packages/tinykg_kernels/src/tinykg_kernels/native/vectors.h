// What the native sources share: GCC/Clang vector types of 16 lanes (whatever the CPU's vector
// width: -march=native picks the instructions) and unaligned loads and stores of them.

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

}  // namespace tinykg
