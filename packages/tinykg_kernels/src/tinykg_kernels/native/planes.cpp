// Fused element-wise passes that write or read a 1-bit mask in the plane layout (`planes.py`), for
// `native.py`: KGAT's LeakyReLU pair and dropout, forward and backward.
//
// A mask of n elements (n a multiple of 8 here) takes k = n / 8 bytes: element i sits in byte
// i % k at bit i / k, so byte m gathers elements m, m + k, ..., m + 7k: eight contiguous streams,
// read 16 lanes at a time. The values are torch's bit for bit: each is the same single IEEE
// operation (a select, a product, a sum) as the torch op it replaces.

#include <cstdint>
#include <cstring>

#include "vectors.h"

namespace {

using tinykg::greater;
using tinykg::load;
using tinykg::not_equal;
using tinykg::select;
using tinykg::store;
using tinykg::vb16;
using tinykg::vf16;
using tinykg::vi16;

inline vf16 leaky(vf16 x, float slope) { return select(greater(x, 0.0f), x, x * slope); }

// Lanes whose bit `plane` of `bytes` is set: -1, else 0.
inline vi16 bit_set(vi16 bytes, int plane) { return -((bytes >> plane) & 1); }

inline float leaky(float x, float slope) { return x > 0.0f ? x : x * slope; }

}  // namespace

extern "C" {

// out = LeakyReLU(a) + LeakyReLU(b); mask_a, mask_b = plane-packed a > 0, b > 0.
void tinykg_leaky_pair(const float* a, const float* b, int64_t n, float slope, float* out,
                       uint8_t* mask_a, uint8_t* mask_b) {
  const int64_t k = n / 8;
  int64_t m = 0;
  for (; m + 16 <= k; m += 16) {
    vi16 bits_a = vi16{}, bits_b = vi16{};
    for (int plane = 0; plane < 8; ++plane) {
      const int64_t i = plane * k + m;
      const vf16 x = load<vf16>(a + i), y = load<vf16>(b + i);
      store(out + i, leaky(x, slope) + leaky(y, slope));
      bits_a |= greater(x, 0.0f) & (1 << plane);
      bits_b |= greater(y, 0.0f) & (1 << plane);
    }
    store(mask_a + m, __builtin_convertvector(bits_a, vb16));
    store(mask_b + m, __builtin_convertvector(bits_b, vb16));
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
  for (; m + 16 <= k; m += 16) {
    const vi16 bytes_a = __builtin_convertvector(load<vb16>(mask_a + m), vi16);
    const vi16 bytes_b = __builtin_convertvector(load<vb16>(mask_b + m), vi16);
    for (int plane = 0; plane < 8; ++plane) {
      const int64_t i = plane * k + m;
      const vf16 g = load<vf16>(grad + i);
      const vf16 scaled = g * slope;
      store(grad_a + i, select(bit_set(bytes_a, plane), g, scaled));
      store(grad_b + i, select(bit_set(bytes_b, plane), g, scaled));
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

// out = x * (noise * scale); kept = plane-packed noise != 0. (scale 1: noise is dropout's scaled
// noise; else the bare 0/1 draws and scale the kept value: the same products.)
void tinykg_dropout_apply(const float* x, const float* noise, int64_t n, float scale, float* out,
                          uint8_t* kept) {
  const int64_t k = n / 8;
  int64_t m = 0;
  for (; m + 16 <= k; m += 16) {
    vi16 bits = vi16{};
    for (int plane = 0; plane < 8; ++plane) {
      const int64_t i = plane * k + m;
      const vf16 draw = load<vf16>(noise + i);
      store(out + i, load<vf16>(x + i) * (draw * scale));
      bits |= not_equal(draw, 0.0f) & (1 << plane);
    }
    store(kept + m, __builtin_convertvector(bits, vb16));
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
  for (; m + 16 <= k; m += 16) {
    const vi16 bytes = __builtin_convertvector(load<vb16>(kept + m), vi16);
    for (int plane = 0; plane < 8; ++plane) {
      const int64_t i = plane * k + m;
      const vf16 factor = select(bit_set(bytes, plane), vf16{} + kept_value, vf16{});
      store(grad_x + i, load<vf16>(grad + i) * factor);
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
