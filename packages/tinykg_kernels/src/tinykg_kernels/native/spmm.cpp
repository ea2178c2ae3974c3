// A sparse CSR matrix times a dense float32 matrix, for `native.csr_matmul`, and the transposed
// product of a block of its rows added into a dense matrix, for `native.csr_transposed_add`.
//
// out[i] = sum over the row's entries k (in order) of values[k] * x[col[k]]: each output row kept
// in vector registers while its entries stream by (rows of 16, 32, 48 or 64 floats; any other
// width runs a plain loop). One core per call, sequential sums: deterministic. Against torch's CSR
// product on the CPU: `benchmarks.bench_kernels` (section kernels-cpu).

#include <cstdint>
#include <cstring>

#include "vectors.h"

namespace {

using tinykg::kNativeLanes;
using tinykg::load;
using tinykg::store;
using tinykg::vfn;

template <typename Index, int C>
void rows_in_registers(const Index* crow, const Index* col, const float* values, const float* x,
                       int64_t n_rows, float* out) {
  constexpr int64_t kWidth = 16 * C;
  constexpr int kVectors = kWidth / kNativeLanes;  // of the CPU's width: 16-lane ones spill
  for (int64_t i = 0; i < n_rows; ++i) {
    vfn acc[kVectors];
    for (int c = 0; c < kVectors; ++c) acc[c] = vfn{};
    for (Index k = crow[i]; k < crow[i + 1]; ++k) {
      const float v = values[k];
      const float* row = x + static_cast<int64_t>(col[k]) * kWidth;
      for (int c = 0; c < kVectors; ++c) acc[c] += v * load<vfn>(row + kNativeLanes * c);
    }
    for (int c = 0; c < kVectors; ++c) store(out + i * kWidth + kNativeLanes * c, acc[c]);
  }
}

template <typename Index>
void rows_in_memory(const Index* crow, const Index* col, const float* values, const float* x,
                    int64_t n_rows, int64_t width, float* out) {
  for (int64_t i = 0; i < n_rows; ++i) {
    float* o = out + i * width;
    for (int64_t c = 0; c < width; ++c) o[c] = 0.0f;
    for (Index k = crow[i]; k < crow[i + 1]; ++k) {
      const float v = values[k];
      const float* row = x + static_cast<int64_t>(col[k]) * width;
      for (int64_t c = 0; c < width; ++c) o[c] += v * row[c];
    }
  }
}

template <typename Index>
void csr_matmul(const Index* crow, const Index* col, const float* values, const float* x,
                int64_t n_rows, int64_t width, float* out) {
  switch (width) {
    case 16: return rows_in_registers<Index, 1>(crow, col, values, x, n_rows, out);
    case 32: return rows_in_registers<Index, 2>(crow, col, values, x, n_rows, out);
    case 48: return rows_in_registers<Index, 3>(crow, col, values, x, n_rows, out);
    case 64: return rows_in_registers<Index, 4>(crow, col, values, x, n_rows, out);
    default: return rows_in_memory<Index>(crow, col, values, x, n_rows, width, out);
  }
}

// out[col[k]] += values[k] * x[i] for the rows i of a block and their entries k, in order: the
// transposed product A[rows]^T @ x added into out. Rows of 16, 32, 48 or 64 floats in vector
// registers (any other width a plain loop); one core, in order: deterministic.
template <typename Index, int C>
void scatter_in_registers(const Index* crow, const Index* col, const float* values, const float* x,
                          int64_t n_rows, float* out) {
  constexpr int64_t kWidth = 16 * C;
  constexpr int kVectors = kWidth / kNativeLanes;
  for (int64_t i = 0; i < n_rows; ++i) {
    vfn row[kVectors];
    for (int c = 0; c < kVectors; ++c) row[c] = load<vfn>(x + i * kWidth + kNativeLanes * c);
    for (Index k = crow[i]; k < crow[i + 1]; ++k) {
      const float v = values[k];
      float* target = out + static_cast<int64_t>(col[k]) * kWidth;
      for (int c = 0; c < kVectors; ++c) {
        float* lane = target + kNativeLanes * c;
        store(lane, load<vfn>(lane) + v * row[c]);
      }
    }
  }
}

template <typename Index>
void scatter_in_memory(const Index* crow, const Index* col, const float* values, const float* x,
                       int64_t n_rows, int64_t width, float* out) {
  for (int64_t i = 0; i < n_rows; ++i) {
    const float* row = x + i * width;
    for (Index k = crow[i]; k < crow[i + 1]; ++k) {
      const float v = values[k];
      float* target = out + static_cast<int64_t>(col[k]) * width;
      for (int64_t c = 0; c < width; ++c) target[c] += v * row[c];
    }
  }
}

template <typename Index>
void csr_transposed_add(const Index* crow, const Index* col, const float* values, const float* x,
                        int64_t n_rows, int64_t width, float* out) {
  switch (width) {
    case 16: return scatter_in_registers<Index, 1>(crow, col, values, x, n_rows, out);
    case 32: return scatter_in_registers<Index, 2>(crow, col, values, x, n_rows, out);
    case 48: return scatter_in_registers<Index, 3>(crow, col, values, x, n_rows, out);
    case 64: return scatter_in_registers<Index, 4>(crow, col, values, x, n_rows, out);
    default: return scatter_in_memory<Index>(crow, col, values, x, n_rows, width, out);
  }
}

}  // namespace

extern "C" {

// `out [n_rows, width] = A @ x` for A in CSR (int32 row pointers and columns), x [*, width].
void tinykg_csr_matmul_i32(const int32_t* crow, const int32_t* col, const float* values,
                           const float* x, int64_t n_rows, int64_t width, float* out) {
  csr_matmul<int32_t>(crow, col, values, x, n_rows, width, out);
}

// The same with int64 row pointers and columns.
void tinykg_csr_matmul_i64(const int64_t* crow, const int64_t* col, const float* values,
                           const float* x, int64_t n_rows, int64_t width, float* out) {
  csr_matmul<int64_t>(crow, col, values, x, n_rows, width, out);
}

// `out [*, width] += A[rows]^T @ x` for the block's rows of A in CSR (`crow` the block's n_rows + 1
// row pointers into the whole `col` and `values`), x [n_rows, width].
void tinykg_csr_transposed_add_i32(const int32_t* crow, const int32_t* col, const float* values,
                                   const float* x, int64_t n_rows, int64_t width, float* out) {
  csr_transposed_add<int32_t>(crow, col, values, x, n_rows, width, out);
}

// The same with int64 row pointers and columns.
void tinykg_csr_transposed_add_i64(const int64_t* crow, const int64_t* col, const float* values,
                                   const float* x, int64_t n_rows, int64_t width, float* out) {
  csr_transposed_add<int64_t>(crow, col, values, x, n_rows, width, out);
}

}  // extern "C"
