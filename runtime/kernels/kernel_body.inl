// The embedding kernel, written once and compiled once per ISA. Each per-ISA translation unit
// includes this file inside its own namespace, after defining `Traits`:
//   V                       the vector type (xsimd batch, or float for the scalar build)
//   kWidth                  floats per vector
//   load_f32/f16/bf16/i8    decode kWidth table elements to a V
//   store_f32/f16/bf16      encode a V into kWidth output elements (store_f32 can stream)
//   hsum, fence, prefetch
// Everything here is a template or has internal linkage, so no symbol can leak between ISAs.
//
// Arithmetic order matches the reference path exactly (token * token_scale + segment + position, then scale,
// each a rounded f32 operation; int8 as q * scale + bias), so f32 results are bit-identical
// across ISAs and with the reference. Only the fused LayerNorm differs (f32 statistics here,
// double in the reference).

namespace {

inline float load_float(const std::byte* p) noexcept {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
inline std::uint16_t load_u16(const std::byte* p) noexcept {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void store_u16(std::byte* p, std::uint16_t v) noexcept { std::memcpy(p, &v, 2); }

inline std::uint64_t id_at(RawIds ids, std::uint64_t i) noexcept {
  return ids.wide ? static_cast<std::uint64_t>(static_cast<const std::int64_t*>(ids.data)[i])
                  : static_cast<std::uint64_t>(static_cast<const std::int32_t*>(ids.data)[i]);
}

// Walks tokens [begin, end) in order and yields the position-table row of each.
// Padding-aware models (RoBERTa and kin) give a pad token row position_offset - 1 and count only
// the other tokens, so a cursor starting mid-sequence first counts the non-pads before it.
class PositionCursor {
 public:
  PositionCursor(const KernelArgs& a, std::uint64_t begin) : a_(a), i_(begin) {
    if (a.position == nullptr || !a.position_ids.empty()) return;
    std::uint64_t first = 0;  // the first token of the sequence holding `begin`
    if (a.offsets != nullptr) {
      // The last sequence whose first token is <= begin (binary search, no std:: helpers here).
      std::uint64_t lo = 0, hi = a.sequences;
      while (lo < hi) {
        const std::uint64_t mid = (lo + hi + 1) / 2;
        if (a.offsets[mid] <= begin) lo = mid; else hi = mid - 1;
      }
      seq_ = lo;
      seq_end_ = a.offsets[seq_ + 1];
      first = a.offsets[seq_];
    } else {
      seq_ = a.length ? begin / a.length : 0;
      first = seq_ * a.length;
    }
    t_ = begin - first;
    if (a.padding_id >= 0) {
      for (std::uint64_t k = first; k < begin; ++k) nonpad_ += is_pad(k) ? 0 : 1;
    }
  }

  // Row for token i_, then advances to i_ + 1.
  std::uint64_t next() noexcept {
    if (!a_.position_ids.empty()) return id_at(a_.position_ids, i_++) + a_.position_offset;
    if (a_.offsets != nullptr) {
      while (i_ >= seq_end_) {  // move to the sequence holding i_ (skipping empty ones)
        ++seq_;
        seq_end_ = a_.offsets[seq_ + 1];
        t_ = 0;
        nonpad_ = 0;
      }
    } else if (t_ == a_.length) {
      ++seq_;
      t_ = 0;
      nonpad_ = 0;
    }
    const std::uint64_t start = a_.starts != nullptr ? a_.starts[seq_] : a_.start;
    if (a_.padding_id >= 0) {
      const bool pad = is_pad(i_);
      ++i_;
      ++t_;
      return pad ? a_.position_offset - 1 : start + nonpad_++ + a_.position_offset;
    }
    ++i_;
    return start + t_++ + a_.position_offset;
  }

 private:
  bool is_pad(std::uint64_t k) const noexcept {
    return id_at(a_.ids, k) == static_cast<std::uint64_t>(a_.padding_id);
  }
  const KernelArgs& a_;
  std::uint64_t i_;
  std::uint64_t seq_ = 0, seq_end_ = 0, t_ = 0, nonpad_ = 0;
};

// Distance, in tokens, at which the next rows are prefetched. Measured on the GPT-2 shape
// (embedrt bench, ids rotated over 8 batches): 2 gave 2.0-2.1 M tokens/s on one thread and
// 4.0-4.4 M on two; 4: 2.07/4.08; 6: 1.95/3.95; 10: 1.81/3.81; none: 1.9/3.8. Farther
// prefetches of whole rows overflow the core's miss buffers and evict rows still in use.
constexpr std::uint64_t kPrefetchBytes = 2 * 3072;  // two f32 rows of dim 768

// The same bytes in flight whatever the row size: narrower rows are prefetched more rows ahead.
inline std::uint64_t prefetch_distance(std::uint64_t table_row_bytes) {
  return std::max<std::uint64_t>(1, kPrefetchBytes / std::max<std::uint64_t>(1, table_row_bytes));
}

template <DType TD>
inline typename Traits::V load(const std::byte* row, std::uint64_t j, float q_scale, float q_bias) {
  if constexpr (TD == DType::kF32) return Traits::load_f32(row + 4 * j);
  if constexpr (TD == DType::kF16) return Traits::load_f16(row + 2 * j);
  if constexpr (TD == DType::kBF16) return Traits::load_bf16(row + 2 * j);
  if constexpr (TD == DType::kInt8Rowwise) {
    return Traits::load_i8(row + j) * typename Traits::V(q_scale) + typename Traits::V(q_bias);
  }
}

template <DType TD>
inline float load_one(const std::byte* row, std::uint64_t j, float q_scale, float q_bias) {
  if constexpr (TD == DType::kF32) return load_float(row + 4 * j);
  if constexpr (TD == DType::kF16) return f16_to_f32(load_u16(row + 2 * j));
  if constexpr (TD == DType::kBF16) return bf16_to_f32(load_u16(row + 2 * j));
  if constexpr (TD == DType::kInt8Rowwise) {
    return static_cast<float>(static_cast<std::int8_t>(row[j])) * q_scale + q_bias;
  }
}

template <OutputDType OD>
inline void store(std::byte* out, std::uint64_t j, typename Traits::V v, bool stream) {
  if constexpr (OD == OutputDType::kF32) Traits::store_f32(out + 4 * j, v, stream);
  if constexpr (OD == OutputDType::kF16) Traits::store_f16(out + 2 * j, v, stream);
  if constexpr (OD == OutputDType::kBF16) Traits::store_bf16(out + 2 * j, v, stream);
}

template <OutputDType OD>
inline void store_one(std::byte* out, std::uint64_t j, float v) {
  if constexpr (OD == OutputDType::kF32) std::memcpy(out + 4 * j, &v, 4);
  if constexpr (OD == OutputDType::kF16) store_u16(out + 2 * j, f32_to_f16(v));
  if constexpr (OD == OutputDType::kBF16) store_u16(out + 2 * j, f32_to_bf16(v));
}

// int8 rows carry their scale and bias after the codes.
template <DType TD>
inline void row_quantization(const std::byte* row, std::uint64_t dim, float& scale, float& bias) {
  if constexpr (TD == DType::kInt8Rowwise) {
    const std::uint64_t tail = (dim + 3) & ~std::uint64_t{3};
    scale = load_float(row + tail);
    bias = load_float(row + tail + 4);
  } else {
    scale = 1.0f;
    bias = 0.0f;
  }
}

constexpr std::uint64_t out_size(OutputDType od) { return od == OutputDType::kF32 ? 4 : 2; }

template <DType TD>
inline void prefetch_row(const std::byte* row, std::uint64_t bytes) {
  for (std::uint64_t k = 0; k < bytes; k += 64) Traits::prefetch(row + k);
}

// Rows without LayerNorm: one pass. The vector body starts at `head`, the first element whose
// output address is vector-aligned when streaming (stores that bypass the cache need it), else 0;
// elements before it and after the last full vector take the scalar path, with identical rounding.
template <DType TD, OutputDType OD>
inline void embed_row(const KernelArgs& a, const std::byte* tok, const std::byte* seg, const std::byte* pos,
                      std::byte* out, bool stream) {
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  const std::uint64_t dim = a.dim;
  constexpr std::uint64_t kVectorBytes = W * out_size(OD);  // output bytes one vector store writes
  std::uint64_t head = 0;
  if (stream) {
    const auto misalignment = reinterpret_cast<std::uintptr_t>(out) % kVectorBytes;
    head = std::min<std::uint64_t>(dim, misalignment ? (kVectorBytes - misalignment) / out_size(OD) : 0);
  }
  const std::uint64_t body_end = head + (dim - head) / W * W;
  float ts, tb, ss = 1, sb = 0, ps = 1, pb = 0;
  row_quantization<TD>(tok, dim, ts, tb);
  if (seg) row_quantization<TD>(seg, dim, ss, sb);
  if (pos) row_quantization<TD>(pos, dim, ps, pb);
  const bool scaled = a.scale != 1.0f;
  const bool token_scaled = a.token_scale != 1.0f;
  const auto scalar = [&](std::uint64_t j) {
    float x = load_one<TD>(tok, j, ts, tb);
    if (token_scaled) x = x * a.token_scale;
    if (seg) x = x + load_one<TD>(seg, j, ss, sb);
    if (pos) x = x + load_one<TD>(pos, j, ps, pb);
    if (scaled) x = x * a.scale;
    store_one<OD>(out, j, x);
  };
  for (std::uint64_t j = 0; j < head; ++j) scalar(j);
  const V scale(a.scale);
  const V token_scale(a.token_scale);
  for (std::uint64_t j = head; j < body_end; j += W) {
    V x = load<TD>(tok, j, ts, tb);
    if (token_scaled) x = x * token_scale;
    if (seg) x = x + load<TD>(seg, j, ss, sb);
    if (pos) x = x + load<TD>(pos, j, ps, pb);
    if (scaled) x = x * scale;
    store<OD>(out, j, x, stream);
  }
  for (std::uint64_t j = body_end; j < dim; ++j) scalar(j);
}

// Rows with LayerNorm: the tables are read once into a cache-resident staging row, statistics
// come from that row, and the normalized result is written once.
template <DType TD, OutputDType OD>
inline void embed_row_norm(const KernelArgs& a, const std::byte* tok, const std::byte* seg, const std::byte* pos,
                           std::byte* out, float* stage) {
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  const std::uint64_t dim = a.dim, body = dim - dim % W;
  float ts, tb, ss = 1, sb = 0, ps = 1, pb = 0;
  row_quantization<TD>(tok, dim, ts, tb);
  if (seg) row_quantization<TD>(seg, dim, ss, sb);
  if (pos) row_quantization<TD>(pos, dim, ps, pb);
  const bool scaled = a.scale != 1.0f;
  const bool token_scaled = a.token_scale != 1.0f;
  V sum(0.0f);
  float tail_sum = 0;
  for (std::uint64_t j = 0; j < body; j += W) {
    V x = load<TD>(tok, j, ts, tb);
    if (token_scaled) x = x * V(a.token_scale);
    if (seg) x = x + load<TD>(seg, j, ss, sb);
    if (pos) x = x + load<TD>(pos, j, ps, pb);
    if (scaled) x = x * V(a.scale);
    Traits::store_f32(reinterpret_cast<std::byte*>(stage + j), x, false);
    sum = sum + x;
  }
  for (std::uint64_t j = body; j < dim; ++j) {
    float x = load_one<TD>(tok, j, ts, tb);
    if (token_scaled) x = x * a.token_scale;
    if (seg) x = x + load_one<TD>(seg, j, ss, sb);
    if (pos) x = x + load_one<TD>(pos, j, ps, pb);
    if (scaled) x = x * a.scale;
    stage[j] = x;
    tail_sum += x;
  }
  const float mean = (Traits::hsum(sum) + tail_sum) / static_cast<float>(dim);
  const V vmean(mean);
  V squares(0.0f);
  float tail_squares = 0;
  for (std::uint64_t j = 0; j < body; j += W) {
    const V d = Traits::load_f32(reinterpret_cast<const std::byte*>(stage + j)) - vmean;
    squares = squares + d * d;
  }
  for (std::uint64_t j = body; j < dim; ++j) tail_squares += (stage[j] - mean) * (stage[j] - mean);
  const float variance = (Traits::hsum(squares) + tail_squares) / static_cast<float>(dim);
  const float inverse = 1.0f / std::sqrt(variance + a.epsilon);
  const V vinverse(inverse);
  const std::byte* w = reinterpret_cast<const std::byte*>(a.norm_weight);
  const std::byte* b = reinterpret_cast<const std::byte*>(a.norm_bias);
  for (std::uint64_t j = 0; j < body; j += W) {
    V y = (Traits::load_f32(reinterpret_cast<const std::byte*>(stage + j)) - vmean) * vinverse *
          Traits::load_f32(w + 4 * j);
    if (b) y = y + Traits::load_f32(b + 4 * j);
    store<OD>(out, j, y, false);
  }
  for (std::uint64_t j = body; j < dim; ++j) {
    float y = (stage[j] - mean) * inverse * a.norm_weight[j];
    if (b) y += a.norm_bias[j];
    store_one<OD>(out, j, y);
  }
}

template <DType TD, OutputDType OD, bool kNorm>
void embed_tokens(const KernelArgs& a, std::uint64_t begin, std::uint64_t end) {
  const std::uint64_t dim = a.dim;
  const std::uint64_t out_row_bytes = dim * out_size(OD);
  const std::uint64_t table_row_bytes = row_bytes(TD, dim);  // out of line, baseline: safe from any ISA unit
  std::byte* out = static_cast<std::byte*>(a.out) + begin * out_row_bytes;
  // Streaming (non-temporal) stores; each row peels to vector alignment, which needs the output
  // aligned to its element size.
  const bool stream = !kNorm && a.nontemporal && Traits::kCanStream &&
                      reinterpret_cast<std::uintptr_t>(out) % out_size(OD) == 0;
  // The LayerNorm staging row lives on the stack: no allocation on the hot path.
  alignas(64) float stage[kNorm ? kMaxNormDim : 1];
  PositionCursor positions(a, begin);
  const std::uint64_t distance = prefetch_distance(table_row_bytes);
  for (std::uint64_t i = begin; i < end; ++i, out += out_row_bytes) {
    if (i + distance < end) {
      const std::uint64_t ahead = id_at(a.ids, i + distance);
      prefetch_row<TD>(a.token + ahead * a.token_stride, table_row_bytes);
    }
    const std::byte* tok = a.token + id_at(a.ids, i) * a.token_stride;
    const std::byte* seg = nullptr;
    if (a.segment != nullptr) {
      seg = a.segment + (a.segment_ids.empty() ? 0 : id_at(a.segment_ids, i)) * a.segment_stride;
    }
    const std::byte* pos = a.position != nullptr ? a.position + positions.next() * a.position_stride : nullptr;
    if constexpr (kNorm) {
      embed_row_norm<TD, OD>(a, tok, seg, pos, out, stage);
    } else {
      embed_row<TD, OD>(a, tok, seg, pos, out, stream);
    }
  }
  if (stream) Traits::fence();
}

template <DType TD, OutputDType OD>
void embed_range(const KernelArgs& a, std::uint64_t begin, std::uint64_t end) {
  if (a.norm_weight != nullptr) {
    embed_tokens<TD, OD, true>(a, begin, end);
  } else {
    embed_tokens<TD, OD, false>(a, begin, end);
  }
}

template <DType TD>
constexpr std::array<RangeKernel, 3> kernels_for() {
  return {&embed_range<TD, OutputDType::kF32>, &embed_range<TD, OutputDType::kBF16>,
          &embed_range<TD, OutputDType::kF16>};
}

}  // namespace

// The table this ISA exports.
const KernelTable kTable = {{
    {kernels_for<DType::kF32>()[0], kernels_for<DType::kF32>()[1], kernels_for<DType::kF32>()[2]},
    {kernels_for<DType::kF16>()[0], kernels_for<DType::kF16>()[1], kernels_for<DType::kF16>()[2]},
    {kernels_for<DType::kBF16>()[0], kernels_for<DType::kBF16>()[1], kernels_for<DType::kBF16>()[2]},
    {kernels_for<DType::kInt8Rowwise>()[0], kernels_for<DType::kInt8Rowwise>()[1], kernels_for<DType::kInt8Rowwise>()[2]},
}};
