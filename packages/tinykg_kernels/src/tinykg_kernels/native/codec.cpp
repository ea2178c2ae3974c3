// The codec's float32 CPU loops in plain C++ (no torch headers), for `native.py`.
//
// The same IEEE float32 steps as `reference.quantize` / `reference.dequantize` with the noise of
// `counter_noise`, so the results are the reference's bit for bit: built with -O3 -march=native and
// -ffp-contract=off (no fused multiply-adds: every product and sum rounds as torch's do). One pass
// over the input per call, the group parameters computed in the same loop, the codes packed in
// registers, the arithmetic in vectors of the CPU's width: inductor's fused loop for the same math
// is slower (its vector-mask selects and a scalar packing loop; `benchmarks.bench_kernels`, section
// kernels-cpu).
//
// Parameters are stored as bfloat16 bits (the default for float32 activations); other parameter
// dtypes stay on the compiled (inductor) path.

#include <cstdint>
#include <cstring>
#include <utility>

#include "vectors.h"

namespace {

constexpr float kSmallestNormal = 1.17549435082228750797e-38f;
constexpr uint16_t kBfloat16Nan = 0x7FC0;  // torch's bfloat16 NaN (float('nan') converted)

using tinykg::equal;
using tinykg::greater;
using tinykg::is_nan;
using tinykg::kLanes;
using tinykg::kNativeLanes;
using tinykg::less;
using tinykg::load;
using tinykg::not_equal;
using tinykg::select;
using tinykg::store;
using tinykg::vb16;
using tinykg::vbn;
using tinykg::vfn;
using tinykg::vin;
using tinykg::vun;
using tinykg::vf16;
using tinykg::vi16;
using tinykg::vu16;

// narrower vectors for packing and unpacking codes
typedef int32_t vi8 __attribute__((vector_size(32)));
typedef int32_t vi4 __attribute__((vector_size(16)));
typedef int32_t vi2 __attribute__((vector_size(8)));
typedef uint8_t vb8 __attribute__((vector_size(8)));
typedef uint8_t vb4 __attribute__((vector_size(4)));
typedef uint8_t vb2 __attribute__((vector_size(2)));

// Neighbouring lanes merged: lane 2i | lane 2i+1 << shift (packing), and split back (unpacking).
inline vi8 merge(vi16 v, int shift) {
  return __builtin_shufflevector(v, v, 0, 2, 4, 6, 8, 10, 12, 14) |
         (__builtin_shufflevector(v, v, 1, 3, 5, 7, 9, 11, 13, 15) << shift);
}
inline vi4 merge(vi8 v, int shift) {
  return __builtin_shufflevector(v, v, 0, 2, 4, 6) |
         (__builtin_shufflevector(v, v, 1, 3, 5, 7) << shift);
}
inline vi2 merge(vi4 v, int shift) {
  return __builtin_shufflevector(v, v, 0, 2) | (__builtin_shufflevector(v, v, 1, 3) << shift);
}
inline vi16 split(vi8 v, int shift, int mask) {
  return __builtin_shufflevector(v & mask, v >> shift, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6,
                                 14, 7, 15);
}
inline vi8 split(vi4 v, int shift, int mask) {
  return __builtin_shufflevector(v & mask, v >> shift, 0, 4, 1, 5, 2, 6, 3, 7);
}
inline vi4 split(vi2 v, int shift, int mask) {
  return __builtin_shufflevector(v & mask, v >> shift, 0, 2, 1, 3);
}

// 16 codes (int32 lanes < 2**BITS) packed into 2 * BITS bytes at `out`.
template <int BITS>
inline void pack16(vi16 codes, uint8_t* out) {
  if constexpr (BITS == 8) {
    store(out, __builtin_convertvector(codes, vb16));
  } else if constexpr (BITS == 4) {
    store(out, __builtin_convertvector(merge(codes, 4), vb8));
  } else if constexpr (BITS == 2) {
    store(out, __builtin_convertvector(merge(merge(codes, 2), 4), vb4));
  } else {
    store(out, __builtin_convertvector(merge(merge(merge(codes, 1), 2), 4), vb2));
  }
}

// The 16 codes packed in the 2 * BITS bytes at `in`, as int32 lanes.
template <int BITS>
inline vi16 unpack16(const uint8_t* in) {
  if constexpr (BITS == 8) {
    return __builtin_convertvector(load<vb16>(in), vi16);
  } else if constexpr (BITS == 4) {
    return split(__builtin_convertvector(load<vb8>(in), vi8), 4, 0xF);
  } else if constexpr (BITS == 2) {
    return split(split(__builtin_convertvector(load<vb4>(in), vi4), 4, 0xF), 2, 0x3);
  } else {
    return split(split(split(__builtin_convertvector(load<vb2>(in), vi2), 4, 0xF), 2, 0x3), 1, 0x1);
  }
}

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bool is_finite(float f) { return (bits_of(f) & 0x7F800000u) != 0x7F800000u; }

// `reference._round_directed_bfloat16_bits`: float32 -> the bfloat16 value towards +inf (`up`) or
// -inf, kept in float32. NaN stays NaN.
inline float round_bfloat16(float v, bool up) {
  if (v != v) return v;
  const uint32_t b = bits_of(v);
  const uint32_t towards_zero = b & 0xFFFF0000u;
  const uint32_t away_from_zero = (b + 0xFFFFu) & 0xFFFF0000u;
  const bool negative = static_cast<int32_t>(b) < 0;
  return float_of(up == negative ? towards_zero : away_from_zero);
}

inline float bfloat16_value(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

// `counter_noise`: lowbias32 of (index + k1) ^ k0, top 24 bits as a float in [0, 1).
inline float counter_noise(uint32_t index, uint32_t k0, uint32_t k1) {
  uint32_t h = (index + k1) ^ k0;
  h ^= h >> 16;
  h *= 0x7FEB352Du;
  h ^= h >> 15;
  h *= 0x846CA68Bu;
  h ^= h >> 16;
  return static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
}

// A group's first `whole` values (a multiple of 16) in 16 lanes, lane i taking elements i, i + 16,
// ..., then folded in halves down to the CPU's width (lane i with i + 8 where that is 8 lanes):
// the start of `group_range`'s fixed order. NaN is skipped, and marked in `nan_seen`.
inline void lane_ranges(const float* x, int64_t whole, vfn* lo_out, vfn* hi_out, vin* nan_seen) {
  constexpr int kParts = kLanes / kNativeLanes;
  vfn lo[kParts], hi[kParts];
  for (int p = 0; p < kParts; ++p) {
    lo[p] = vfn{} + __builtin_inff();
    hi[p] = vfn{} - __builtin_inff();
  }
  for (int64_t j = 0; j < whole; j += kLanes) {
    for (int p = 0; p < kParts; ++p) {
      const vfn v = load<vfn>(x + j + p * kNativeLanes);
      lo[p] = v < lo[p] ? v : lo[p];
      hi[p] = v > hi[p] ? v : hi[p];
      *nan_seen |= v != v;
    }
  }
  for (int half = kParts / 2; half > 0; half /= 2) {  // lane i with lane i + half * width
    for (int p = 0; p < half; ++p) {
      lo[p] = lo[p + half] < lo[p] ? lo[p + half] : lo[p];
      hi[p] = hi[p + half] > hi[p] ? hi[p + half] : hi[p];
    }
  }
  *lo_out = lo[0];
  *hi_out = hi[0];
}

// Min and max of a group (NaN skipped) and whether it holds a NaN. Lane i of 16 takes elements
// i, i + 16, ..., then the lanes fold in halves (i with i + 8, then + 4, + 2, + 1): a fixed order,
// which decides the sign of a zero minimum. The 16 lanes are kept as vectors of the CPU's width.
void group_range(const float* x, int64_t n, float* lo_out, float* hi_out, bool* has_nan) {
  const int64_t whole = n / kLanes * kLanes;
  vfn lo, hi;
  vin nan_seen = vin{};
  lane_ranges(x, whole, &lo, &hi, &nan_seen);
  float lanes_lo[kNativeLanes], lanes_hi[kNativeLanes];
  store(lanes_lo, lo);
  store(lanes_hi, hi);
  for (int width = kNativeLanes / 2; width > 0; width /= 2) {  // then within the vector
    for (int i = 0; i < width; ++i) {
      lanes_lo[i] = lanes_lo[i + width] < lanes_lo[i] ? lanes_lo[i + width] : lanes_lo[i];
      lanes_hi[i] = lanes_hi[i + width] > lanes_hi[i] ? lanes_hi[i + width] : lanes_hi[i];
    }
  }
  float l = lanes_lo[0], h = lanes_hi[0];
  bool any_nan = false;
  for (int i = 0; i < kNativeLanes; ++i) any_nan |= nan_seen[i] != 0;
  for (int64_t j = whole; j < n; ++j) {
    const float v = x[j];
    l = v < l ? v : l;
    h = v > h ? v : h;
    any_nan |= v != v;
  }
  *lo_out = l;
  *hi_out = h;
  *has_nan = any_nan;
}

// kNativeLanes lanes of the 2 kNativeLanes of (v, w), read as runs of W lanes in pairs: the first
// run of each pair (UPPER false) or the second. Lane i is lane (i / W) * 2W + i % W (+ W).
template <int W, bool UPPER, size_t... I>
inline vfn runs_of(vfn v, vfn w, std::index_sequence<I...>) {
  return __builtin_shufflevector(
      v, w, static_cast<int>((I / W) * 2 * W + I % W + (UPPER ? W : 0))...);
}

// One step of `group_range`'s fold within a vector, for the groups of 2 W vectors at once: lane i
// of a group with its lane i + W (the lower kept on ties, as there), into W vectors.
template <int W>
inline void fold_level(vfn* lo, vfn* hi) {
  constexpr auto lanes = std::make_index_sequence<kNativeLanes>{};
  for (int m = 0; m < W; ++m) {
    const vfn lo_a = runs_of<W, false>(lo[2 * m], lo[2 * m + 1], lanes);
    const vfn lo_b = runs_of<W, true>(lo[2 * m], lo[2 * m + 1], lanes);
    const vfn hi_a = runs_of<W, false>(hi[2 * m], hi[2 * m + 1], lanes);
    const vfn hi_b = runs_of<W, true>(hi[2 * m], hi[2 * m + 1], lanes);
    lo[m] = lo_b < lo_a ? lo_b : lo_a;
    hi[m] = hi_b > hi_a ? hi_b : hi_a;
  }
}

// `fold_level` for W, W / 2, ... 1: lane k of lo[0] / hi[0] is then group k's.
template <int W>
inline void fold_levels(vfn* lo, vfn* hi) {
  if constexpr (W >= 1) {
    fold_level<W>(lo, hi);
    fold_levels<W / 2>(lo, hi);
  }
}

// The ranges of kNativeLanes whole groups (group_len a multiple of 16) with no scalar fold: each
// group's 16 lanes accumulated and folded down to one vector (`lane_ranges`), then the
// groups' lanes folded in its halves (lane i with i + kNativeLanes / 2, then ... + 1), the lanes of
// 2, 4, ... groups sharing a vector, so lane k of `lo` / `hi` is group k's `group_range`, the sign
// of a zero minimum included. Returns false, with nothing written, when some value is NaN (those
// take `group_range`, which flags it). `group_range`'s scalar fold of 64-value groups took a fifth
// of a 2-bit quantize on an AVX2 CPU (perf, 8-lane vectors), as much as their codes on AVX-512.
bool block_ranges(const float* x, int64_t group_len, vfn* lo_out, vfn* hi_out) {
  vfn lo[kNativeLanes], hi[kNativeLanes];
  vin nan_seen = vin{};
  for (int k = 0; k < kNativeLanes; ++k) {
    lane_ranges(x + k * group_len, group_len, &lo[k], &hi[k], &nan_seen);
  }
  bool any_nan = false;
  for (int i = 0; i < kNativeLanes; ++i) any_nan |= nan_seen[i] != 0;
  if (any_nan) return false;
  fold_levels<kNativeLanes / 2>(lo, hi);
  *lo_out = lo[0];
  *hi_out = hi[0];
  return true;
}

struct NormalTable {
  float level[4];
  float inverse_width[3];
};

// The codes of kNativeLanes elements (flat indices first_index ..), as int32 lanes.
template <bool NORMAL, bool STOCHASTIC>
inline vin encode_part(vfn x, uint32_t first_index, float zero, float inverse, float top,
                       const NormalTable& table, uint32_t k0, uint32_t k1) {
  const vfn t = (x - zero) * inverse;
  vfn u = vfn{} + 0.5f;
  if constexpr (STOCHASTIC) {
    vun lane;
    for (int i = 0; i < kNativeLanes; ++i) lane[i] = i;
    vun h = ((first_index + lane) + k1) ^ k0;
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    u = __builtin_convertvector(h >> 8, vfn) * (1.0f / 16777216.0f);
  }
  if constexpr (NORMAL) {
    const vin above_1 = t >= table.level[1], above_2 = t >= table.level[2];  // -1 or 0
    const vfn level = above_2 ? vfn{} + table.level[2]
                              : (above_1 ? vfn{} + table.level[1] : vfn{} + table.level[0]);
    const vfn width = above_2 ? vfn{} + table.inverse_width[2]
                              : (above_1 ? vfn{} + table.inverse_width[1]
                                         : vfn{} + table.inverse_width[0]);
    const vfn p_up = (t - level) * width;
    return -(above_1 + above_2 + (u < p_up));
  } else {
    vfn c = t + u;
    c = c > 0.0f ? c : vfn{};  // floor, then clamp to [0, top] = truncate after the clamp
    c = c < top ? c : vfn{} + top;
    return __builtin_convertvector(c, vin);
  }
}

// The codes of 16 elements (flat indices first_index ..), as int32 lanes: computed in vectors of
// the CPU's width (16-lane comparisons and selects compile to scalar code without AVX-512).
template <bool NORMAL, bool STOCHASTIC>
inline vi16 encode16(const float* x, uint32_t first_index, float zero, float inverse, float top,
                     const NormalTable& table, uint32_t k0, uint32_t k1) {
  vi16 codes;
  for (int p = 0; p < kLanes; p += kNativeLanes) {
    const vin part = encode_part<NORMAL, STOCHASTIC>(load<vfn>(x + p), first_index + p, zero,
                                                     inverse, top, table, k0, k1);
    std::memcpy(reinterpret_cast<int32_t*>(&codes) + p, &part, sizeof(part));
  }
  return codes;
}

// `round_bfloat16` of 16 lanes.
inline vf16 round_bfloat16(vf16 v, bool up) {
  const vu16 b = reinterpret_cast<vu16>(v);
  const vu16 towards_zero = b & 0xFFFF0000u;
  const vu16 away_from_zero = (b + 0xFFFFu) & 0xFFFF0000u;
  const vi16 negative = less(reinterpret_cast<vi16>(b), 0);
  const vu16 rounded = up ? select(negative, towards_zero, away_from_zero)
                          : select(negative, away_from_zero, towards_zero);
  return reinterpret_cast<vf16>(select(is_nan(v), b, rounded));  // NaN stays NaN
}

inline vi16 is_finite(vf16 v) {
  return not_equal(reinterpret_cast<vi16>(v) & 0x7F800000, 0x7F800000);
}

// The low byte of each of kNativeLanes int32 lanes, in order: one byte shuffle (a conversion to
// a byte vector compiles to one extract per lane). Chosen by the same test as kNativeLanes.
inline vbn low_bytes(vin v) {
  typedef uint8_t vbytes __attribute__((vector_size(kNativeLanes * 4)));
  const vbytes b = reinterpret_cast<vbytes>(v);
#if defined(__AVX512F__)
  return __builtin_shufflevector(b, b, 0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60);
#elif defined(__AVX__)
  return __builtin_shufflevector(b, b, 0, 4, 8, 12, 16, 20, 24, 28);
#else
  return __builtin_shufflevector(b, b, 0, 4, 8, 12);
#endif
}

// kNativeLanes codes (int32 lanes < 2**BITS) packed into kNativeLanes * BITS / 8 bytes at `out`,
// in registers: the codes narrowed to bytes and read as 64-bit words; in each word, the codes of
// one packed byte (8 / BITS bytes, code k at bit 8k) are shifted together into its low bits (code k
// to bit BITS * k). The 16-lane `pack16` went through the stack and packed the lanes one by one.
template <int BITS>
inline void pack_native(vin codes, uint8_t* out) {
  static_assert(kNativeLanes * BITS % 8 == 0, "whole bytes per native vector");
  const vbn bytes = low_bytes(codes);
  if constexpr (BITS == 8) {
    store(out, bytes);
  } else if constexpr (kNativeLanes == 16) {  // both 64-bit words shifted at once, in a vector
    typedef uint64_t vwords __attribute__((vector_size(16)));
    constexpr int kPerByte = 8 / BITS;
    const vwords words = reinterpret_cast<vwords>(bytes);
    vwords merged = words;
    for (int k = 1; k < kPerByte; ++k) merged |= words >> (k * (8 - BITS));
    const vb16 packed = reinterpret_cast<vb16>(merged);  // byte kPerByte * b of each word
    if constexpr (BITS == 4) {
      store(out, __builtin_shufflevector(packed, packed, 0, 2, 4, 6, 8, 10, 12, 14));
    } else if constexpr (BITS == 2) {
      store(out, __builtin_shufflevector(packed, packed, 0, 4, 8, 12));
    } else {
      store(out, __builtin_shufflevector(packed, packed, 0, 8));
    }
  } else {
    constexpr int kChunk = kNativeLanes < 8 ? kNativeLanes : 8;  // bytes per word read
    constexpr int kPerByte = 8 / BITS;                           // codes (bytes) per packed byte
    for (int c = 0; c < kNativeLanes; c += kChunk) {
      uint64_t word = 0;
      std::memcpy(&word, reinterpret_cast<const uint8_t*>(&bytes) + c, kChunk);
      uint64_t merged = word;
      for (int k = 1; k < kPerByte; ++k) merged |= word >> (k * (8 - BITS));
      for (int b = 0; b < kChunk / kPerByte; ++b) {
        out[c / kPerByte + b] = static_cast<uint8_t>(merged >> (8 * kPerByte * b));
      }
    }
  }
}

// A group's codes LANES at a time: `pack(codes(x, j), out)` for the LANES elements at `x` (flat
// index j in the group); a last part shorter than LANES (still whole bytes) goes through the same
// lanes from a zero-padded copy.
template <int LANES, int BITS, typename Codes, typename Pack>
inline void encode_in_parts(const float* row, int64_t group_len, uint8_t* out, Codes codes,
                            Pack pack) {
  int64_t j = 0;
  for (; j + LANES <= group_len; j += LANES) pack(codes(row + j, j), out + j * BITS / 8);
  if (j < group_len) {
    const int64_t n = group_len - j;
    float part[LANES] = {};
    uint8_t bytes[LANES * BITS / 8];
    std::memcpy(part, row + j, n * sizeof(float));
    pack(codes(part, j), bytes);
    std::memcpy(out + j * BITS / 8, bytes, n * BITS / 8);
  }
}

// One group's codes, packed, from its zero and 1 / scale: a vector of the CPU's width at a time
// where it holds whole bytes of codes (always but at 1 bit with 4 lanes), else 16 lanes at a time.
template <int BITS, bool NORMAL, bool STOCHASTIC>
void encode_group(const float* row, int64_t group_len, uint32_t first, float zero, float inverse,
                  const NormalTable& table, uint32_t k0, uint32_t k1, uint8_t* out) {
  constexpr float kTop = (1 << BITS) - 1;
  if constexpr (kNativeLanes * BITS % 8 == 0) {
    const auto codes = [&](const float* x, int64_t j) {
      return encode_part<NORMAL, STOCHASTIC>(load<vfn>(x), first + static_cast<uint32_t>(j), zero,
                                             inverse, kTop, table, k0, k1);
    };
    encode_in_parts<kNativeLanes, BITS>(row, group_len, out, codes,
                                        [](vin c, uint8_t* o) { pack_native<BITS>(c, o); });
  } else {
    const auto codes = [&](const float* x, int64_t j) {
      return encode16<NORMAL, STOCHASTIC>(x, first + j, zero, inverse, kTop, table, k0, k1);
    };
    encode_in_parts<kLanes, BITS>(row, group_len, out, codes,
                                  [](vi16 c, uint8_t* o) { pack16<BITS>(c, o); });
  }
}

// Groups 16 at a time: each one's range, then the parameters of all 16 in vector lanes (their
// rounding, checks and reciprocal cost a group as much as its codes when done one by one), then
// each one's codes.
template <int BITS, bool NORMAL, bool STOCHASTIC>
void quantize_groups(const float* x, int64_t n_groups, int64_t group_len, const NormalTable& table,
                     uint32_t k0, uint32_t k1, uint8_t* packed, uint16_t* zero_out,
                     uint16_t* scale_out, uint8_t* bad_out) {
  constexpr int kSteps = NORMAL ? 1 : (1 << BITS) - 1;
  const float inverse_steps = static_cast<float>(1.0 / kSteps);
  const int64_t bytes_per_group = group_len * BITS / 8;
  for (int64_t g0 = 0; g0 < n_groups; g0 += kLanes) {
    const int count = n_groups - g0 < kLanes ? static_cast<int>(n_groups - g0) : kLanes;
    vf16 lo = vf16{}, hi = vf16{};
    vi16 has_nan = vi16{};
    bool ranged = count == kLanes && group_len % kLanes == 0;
    for (int part = 0; ranged && part < kLanes; part += kNativeLanes) {  // kNativeLanes at a time
      vfn l, h;
      ranged = block_ranges(x + (g0 + part) * group_len, group_len, &l, &h);
      if (ranged) {
        std::memcpy(reinterpret_cast<float*>(&lo) + part, &l, sizeof(l));
        std::memcpy(reinterpret_cast<float*>(&hi) + part, &h, sizeof(h));
      }
    }
    for (int k = 0; k < count && !ranged; ++k) {
      float l, h;
      bool nan;
      group_range(x + (g0 + k) * group_len, group_len, &l, &h, &nan);
      lo[k] = l;
      hi[k] = h;
      has_nan[k] = nan ? -1 : 0;
    }
    const vf16 zero = round_bfloat16(lo, false);
    vf16 raw = (hi - zero) * inverse_steps;
    raw = select(greater(raw, 0.0f),
                 select(greater(raw, kSmallestNormal), raw, vf16{} + kSmallestNormal), vf16{});
    const vf16 scale = round_bfloat16(raw, true);
    const vi16 bad =
        has_nan | ~(is_finite(lo) & is_finite(hi) & is_finite(zero) & is_finite(scale));
    const vf16 inverse = select(greater(scale, 0.0f), 1.0f / scale, vf16{});
    const vu16 zero_bits = reinterpret_cast<vu16>(zero) >> 16;
    const vu16 scale_bits = reinterpret_cast<vu16>(scale) >> 16;
    for (int k = 0; k < count; ++k) {
      const int64_t g = g0 + k;
      uint8_t* out = packed + g * bytes_per_group;
      bad_out[g] = bad[k] != 0;
      if (bad[k] != 0) {
        zero_out[g] = scale_out[g] = kBfloat16Nan;
        std::memset(out, 0, bytes_per_group);
        continue;
      }
      zero_out[g] = static_cast<uint16_t>(zero_bits[k]);
      scale_out[g] = static_cast<uint16_t>(scale_bits[k]);
      encode_group<BITS, NORMAL, STOCHASTIC>(x + g * group_len, group_len,
                                             static_cast<uint32_t>(g * group_len), zero[k],
                                             inverse[k], table, k0, k1, out);
    }
  }
}

// One group's values from its packed codes, kNativeLanes at a time where their codes fit one
// 32-bit word (always at 1, 2 and 4 bits with 8 lanes): the word broadcast to every lane, each lane
// shifted to its code (a variable shift per lane), then the same float steps as `unpack16`'s lanes
// (which 1 bit on a CPU of 4 lanes still takes).
// A last part shorter than a vector goes through the same lanes from a zero-padded copy.
template <int BITS, bool NORMAL>
void dequantize_row(const uint8_t* in, int64_t group_len, float zero, float scale,
                    const float* levels, float* values) {
  static_assert(kNativeLanes * BITS <= 32 && kNativeLanes * BITS % 8 == 0,
                "a vector's codes in whole bytes of one 32-bit word");
  constexpr int kBytes = kNativeLanes * BITS / 8;
  vun shifts;
  for (int i = 0; i < kNativeLanes; ++i) shifts[i] = i * BITS;
  const auto decoded = [&](const uint8_t* bytes) {
    uint32_t word = 0;
    std::memcpy(&word, bytes, kBytes);
    const vin code = reinterpret_cast<vin>(((vun{} + word) >> shifts) & ((1u << BITS) - 1));
    vfn level;
    if constexpr (NORMAL) {  // selects rather than a gather: they vectorize
      level = code < 2 ? (code == 0 ? vfn{} + levels[0] : vfn{} + levels[1])
                       : (code == 2 ? vfn{} + levels[2] : vfn{} + levels[3]);
    } else {
      level = __builtin_convertvector(code, vfn);
    }
    return level * scale + zero;
  };
  int64_t j = 0;
  for (; j + kNativeLanes <= group_len; j += kNativeLanes) {
    store(values + j, decoded(in + j * BITS / 8));
  }
  if (j < group_len) {
    const int64_t n = group_len - j;
    uint8_t bytes[kBytes] = {};
    float part[kNativeLanes];
    std::memcpy(bytes, in + j * BITS / 8, n * BITS / 8);
    store(part, decoded(bytes));
    std::memcpy(values + j, part, n * sizeof(float));
  }
}

template <int BITS, bool NORMAL>
void dequantize_groups(const uint8_t* packed, const uint16_t* zero_bits,
                       const uint16_t* scale_bits, int64_t n_groups, int64_t group_len,
                       const float* levels, float* out) {
  const int64_t bytes_per_group = group_len * BITS / 8;
  for (int64_t g = 0; g < n_groups; ++g) {
    const float zero = bfloat16_value(zero_bits[g]);
    const float scale = bfloat16_value(scale_bits[g]);
    const uint8_t* in = packed + g * bytes_per_group;
    float* values = out + g * group_len;
    if constexpr (BITS == 8 && !NORMAL) {  // a plain loop: GCC vectorizes it better than lanes
      for (int64_t j = 0; j < group_len; ++j) values[j] = static_cast<float>(in[j]) * scale + zero;
      continue;
    }
    if constexpr (kNativeLanes * BITS <= 32 && kNativeLanes * BITS % 8 == 0) {
      dequantize_row<BITS, NORMAL>(in, group_len, zero, scale, levels, values);
      continue;
    }
    const auto decoded = [&](const uint8_t* bytes) {
      const vi16 code = unpack16<BITS>(bytes);
      vf16 level;
      if constexpr (NORMAL) {  // selects rather than a gather: they vectorize
        level = select(less(code, 2),
                       select(equal(code, 0), vf16{} + levels[0], vf16{} + levels[1]),
                       select(equal(code, 2), vf16{} + levels[2], vf16{} + levels[3]));
      } else {
        level = __builtin_convertvector(code, vf16);
      }
      return level * scale + zero;
    };
    int64_t j = 0;
    for (; j + kLanes <= group_len; j += kLanes) store(values + j, decoded(in + j * BITS / 8));
    if (j < group_len) {  // a last part shorter than 16 (whole bytes), from a zero-padded copy
      const int64_t n = group_len - j;
      uint8_t bytes[2 * BITS] = {};
      float part[kLanes];
      std::memcpy(bytes, in + j * BITS / 8, n * BITS / 8);
      store(part, decoded(bytes));
      std::memcpy(values + j, part, n * sizeof(float));
    }
  }
}

}  // namespace

extern "C" {

// Quantizes `n_groups` full groups of `group_len` float32 values (group_len a multiple of
// 8 / bits): packed codes [n_groups, group_len * bits / 8], the bfloat16 bits of each group's
// zero and scale, and a bad flag per group (NaN/Inf or an overflowing range: NaN parameters, codes
// 0). `normal_table`: 4 levels then 3 inverse widths (2 bits, normal scheme), or null (uniform).
// `stochastic`: counter noise under keys (k0, k1); else round to nearest. Returns 0, or -1 for an
// unsupported width.
int tinykg_quantize_bf16(const float* x, int64_t n_groups, int64_t group_len, int bits,
                         const float* normal_table, int stochastic, int32_t k0, int32_t k1,
                         uint8_t* packed, uint16_t* zero_out, uint16_t* scale_out,
                         uint8_t* bad_out) {
  NormalTable table{};
  if (normal_table != nullptr) {
    std::memcpy(table.level, normal_table, sizeof(table.level));
    std::memcpy(table.inverse_width, normal_table + 4, sizeof(table.inverse_width));
  }
  const uint32_t u0 = static_cast<uint32_t>(k0), u1 = static_cast<uint32_t>(k1);
#define TINYKG_QUANTIZE(B, N, S) \
  quantize_groups<B, N, S>(x, n_groups, group_len, table, u0, u1, packed, zero_out, scale_out, \
                           bad_out)
  const bool normal = normal_table != nullptr;
  if (normal && bits != 2) return -1;
  if (normal) {
    stochastic ? TINYKG_QUANTIZE(2, true, true) : TINYKG_QUANTIZE(2, true, false);
  } else if (bits == 8) {
    stochastic ? TINYKG_QUANTIZE(8, false, true) : TINYKG_QUANTIZE(8, false, false);
  } else if (bits == 4) {
    stochastic ? TINYKG_QUANTIZE(4, false, true) : TINYKG_QUANTIZE(4, false, false);
  } else if (bits == 2) {
    stochastic ? TINYKG_QUANTIZE(2, false, true) : TINYKG_QUANTIZE(2, false, false);
  } else if (bits == 1) {
    stochastic ? TINYKG_QUANTIZE(1, false, true) : TINYKG_QUANTIZE(1, false, false);
  } else {
    return -1;
  }
#undef TINYKG_QUANTIZE
  return 0;
}

// Dequantizes full groups to float32: zero + level * scale (two roundings, as the reference), the
// level being the code, or `normal_levels[code]` (2 bits, normal scheme; null for uniform).
int tinykg_dequantize_bf16(const uint8_t* packed, const uint16_t* zero_bits,
                           const uint16_t* scale_bits, int64_t n_groups, int64_t group_len,
                           int bits, const float* normal_levels, float* out) {
#define TINYKG_DEQUANTIZE(B, N) \
  dequantize_groups<B, N>(packed, zero_bits, scale_bits, n_groups, group_len, normal_levels, out)
  if (normal_levels != nullptr) {
    if (bits != 2) return -1;
    TINYKG_DEQUANTIZE(2, true);
  } else if (bits == 8) {
    TINYKG_DEQUANTIZE(8, false);
  } else if (bits == 4) {
    TINYKG_DEQUANTIZE(4, false);
  } else if (bits == 2) {
    TINYKG_DEQUANTIZE(2, false);
  } else if (bits == 1) {
    TINYKG_DEQUANTIZE(1, false);
  } else {
    return -1;
  }
#undef TINYKG_DEQUANTIZE
  return 0;
}

// Per row of `n_rows` rows of `row_len` float32 values: 1 where some value is nonzero (x != 0: -0.0
// counts as zero, NaN as nonzero, so the bits but the sign ORed together), else 0, into `live`;
// returns the number of all-zero rows. Plain loops: GCC vectorizes the rows' ORs.
int64_t tinykg_live_rows(const float* __restrict x, int64_t n_rows, int64_t row_len,
                         uint8_t* __restrict live) {
  for (int64_t i = 0; i < n_rows; ++i) {
    uint32_t any = 0;
    for (int64_t j = 0; j < row_len; ++j) any |= bits_of(x[i * row_len + j]);
    live[i] = (any << 1) != 0;
  }
  int64_t dead = 0;
  for (int64_t i = 0; i < n_rows; ++i) dead += live[i] == 0;
  return dead;
}

}  // extern "C"
