// Fused element-wise passes that write or read a 1-bit mask in the plane layout (`planes.py`), for
// `native.py`: KGAT's LeakyReLU pair and dropout, forward and backward.
//
// A mask of n elements (n a multiple of 8 here) takes k = n / 8 bytes: element i sits in byte
// i % k at bit i / k, so byte m gathers elements m, m + k, ..., m + 7k: eight contiguous streams,
// read as many lanes at a time as the CPU compares in one instruction (`tinykg::kNativeLanes`;
// wider vectors compile to scalar comparisons on GCC 12). The values are torch's bit for bit: each
// is the same single IEEE operation (a select, a product, a sum) as the torch op it replaces.

#include <cstdint>
#include <cstring>

#include "vectors.h"

namespace {

using tinykg::kNativeLanes;
using tinykg::load;
using tinykg::store;
using tinykg::vbn;
using tinykg::vfn;
using tinykg::vin;

inline vfn leaky(vfn x, float slope) { return x > 0.0f ? x : x * slope; }

// Lanes whose bit `plane` of `bytes` is set: -1, else 0.
inline vin bit_set(vin bytes, int plane) { return -((bytes >> plane) & 1); }

inline float leaky(float x, float slope) { return x > 0.0f ? x : x * slope; }

}  // namespace

extern "C" {

// out = LeakyReLU(a) + LeakyReLU(b); mask_a, mask_b = plane-packed a > 0, b > 0.
void tinykg_leaky_pair(const float* a, const float* b, int64_t n, float slope, float* out,
                       uint8_t* mask_a, uint8_t* mask_b) {
  const int64_t k = n / 8;
  int64_t m = 0;
  for (; m + kNativeLanes <= k; m += kNativeLanes) {
    vin bits_a = vin{}, bits_b = vin{};
    for (int plane = 0; plane < 8; ++plane) {
      const int64_t i = plane * k + m;
      const vfn x = load<vfn>(a + i), y = load<vfn>(b + i);
      store(out + i, leaky(x, slope) + leaky(y, slope));
      bits_a |= (x > 0.0f) & (1 << plane);
      bits_b |= (y > 0.0f) & (1 << plane);
    }
    store(mask_a + m, __builtin_convertvector(bits_a, vbn));
    store(mask_b + m, __builtin_convertvector(bits_b, vbn));
  }
  for (; m < k; ++m) {
    int bits_a = 0, bits_b = 0;
    for (int plane = 0; plane < 8; ++plane) {
      const int64_t i = plane * k + m;
      out[i] = leaky(a[i], slope) + leaky(b[i], slope);
      bits_a |= (a[i] > 0.0f) << plane;
      bits_b |= (b[i] > 0.0f) << plane;
    }
    mask_a[m] = static_cast<uint8_t>(bits_a);
    mask_b[m] = static_cast<uint8_t>(bits_b);
  }
}

// grad_a = grad where a > 0 else grad * slope (from mask_a), grad_b likewise.
void tinykg_leaky_pair_backward(const float* grad, const uint8_t* mask_a, const uint8_t* mask_b,
                                int64_t n, float slope, float* grad_a, float* grad_b) {
  const int64_t k = n / 8;
  int64_t m = 0;
  for (; m + kNativeLanes <= k; m += kNativeLanes) {
    const vin bytes_a = __builtin_convertvector(load<vbn>(mask_a + m), vin);
    const vin bytes_b = __builtin_convertvector(load<vbn>(mask_b + m), vin);
    for (int plane = 0; plane < 8; ++plane) {
      const int64_t i = plane * k + m;
      const vfn g = load<vfn>(grad + i);
      const vfn scaled = g * slope;
      store(grad_a + i, bit_set(bytes_a, plane) ? g : scaled);
      store(grad_b + i, bit_set(bytes_b, plane) ? g : scaled);
    }
  }
  for (; m < k; ++m) {
    for (int plane = 0; plane < 8; ++plane) {
      const int64_t i = plane * k + m;
      const float g = grad[i];
      grad_a[i] = (mask_a[m] >> plane) & 1 ? g : g * slope;
      grad_b[i] = (mask_b[m] >> plane) & 1 ? g : g * slope;
    }
  }
}

// `tinykg_leaky_pair_backward` for elements start .. start + count of a tensor whose masks hold
// k bytes per plane (a block of rows of a whole-graph gradient): grad, grad_a, grad_b hold only
// those elements. Each plane the block crosses is a contiguous run of mask bytes.
void tinykg_leaky_pair_backward_range(const float* grad, const uint8_t* mask_a,
                                      const uint8_t* mask_b, int64_t k, int64_t start,
                                      int64_t count, float slope, float* grad_a, float* grad_b) {
  const int64_t stop = start + count;
  for (int64_t i = start; i < stop;) {
    const int plane = static_cast<int>(i / k);
    const int64_t end = stop < (plane + 1) * k ? stop : (plane + 1) * k;
    const int64_t n = end - i, offset = i - start;
    const uint8_t* bytes_a = mask_a + (i - plane * k);
    const uint8_t* bytes_b = mask_b + (i - plane * k);
    const float* g = grad + offset;
    float* out_a = grad_a + offset;
    float* out_b = grad_b + offset;
    int64_t j = 0;
    for (; j + kNativeLanes <= n; j += kNativeLanes) {
      const vfn value = load<vfn>(g + j);
      const vfn scaled = value * slope;
      const vin mask_bytes_a = __builtin_convertvector(load<vbn>(bytes_a + j), vin);
      const vin mask_bytes_b = __builtin_convertvector(load<vbn>(bytes_b + j), vin);
      store(out_a + j, bit_set(mask_bytes_a, plane) ? value : scaled);
      store(out_b + j, bit_set(mask_bytes_b, plane) ? value : scaled);
    }
    for (; j < n; ++j) {
      out_a[j] = (bytes_a[j] >> plane) & 1 ? g[j] : g[j] * slope;
      out_b[j] = (bytes_b[j] >> plane) & 1 ? g[j] : g[j] * slope;
    }
    i = end;
  }
}

// out = x * (noise * scale); kept = plane-packed noise != 0. (scale 1: noise is dropout's scaled
// noise; else the bare 0/1 draws and scale the kept value: the same products.)
void tinykg_dropout_apply(const float* x, const float* noise, int64_t n, float scale, float* out,
                          uint8_t* kept) {
  const int64_t k = n / 8;
  int64_t m = 0;
  for (; m + kNativeLanes <= k; m += kNativeLanes) {
    vin bits = vin{};
    for (int plane = 0; plane < 8; ++plane) {
      const int64_t i = plane * k + m;
      const vfn draw = load<vfn>(noise + i);
      store(out + i, load<vfn>(x + i) * (draw * scale));
      bits |= (draw != 0.0f) & (1 << plane);
    }
    store(kept + m, __builtin_convertvector(bits, vbn));
  }
  for (; m < k; ++m) {
    int bits = 0;
    for (int plane = 0; plane < 8; ++plane) {
      const int64_t i = plane * k + m;
      out[i] = x[i] * (noise[i] * scale);
      bits |= (noise[i] != 0.0f) << plane;
    }
    kept[m] = static_cast<uint8_t>(bits);
  }
}

// grad_x = grad * (kept_value where kept else 0).
void tinykg_dropout_backward(const float* grad, const uint8_t* kept, int64_t n, float kept_value,
                             float* grad_x) {
  const int64_t k = n / 8;
  int64_t m = 0;
  for (; m + kNativeLanes <= k; m += kNativeLanes) {
    const vin bytes = __builtin_convertvector(load<vbn>(kept + m), vin);
    for (int plane = 0; plane < 8; ++plane) {
      const int64_t i = plane * k + m;
      const vfn factor = bit_set(bytes, plane) ? vfn{} + kept_value : vfn{};
      store(grad_x + i, load<vfn>(grad + i) * factor);
    }
  }
  for (; m < k; ++m) {
    for (int plane = 0; plane < 8; ++plane) {
      const int64_t i = plane * k + m;
      grad_x[i] = grad[i] * ((kept[m] >> plane) & 1 ? kept_value : 0.0f);
    }
  }
}

}  // extern "C"
