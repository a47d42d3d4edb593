// The roofline kernels, written once and compiled once per ISA (like runtime/kernels/
// kernel_body.inl, whose loads, conversions and stores these mirror, but written independently so
// that a change to the library's kernels never moves the yardstick they are measured against).
// The including unit defines `Traits`: V, kWidth, load_f32/f16/bf16/i8, load_u4 (kWidth 4-bit
// codes from the low nibble of p[0], or from its high nibble when `odd`; or dequantize_u4, the
// codes times scale plus bias in one step), store_f32/f16/bf16
// (stream or not), fence, prefetch. Everything here has internal linkage.

namespace {

// Traits that dequantize 4-bit codes in one step (AVX-512: by lookup) have dequantize_u4.
template <typename T>
concept HasDequantizeU4 = requires(const std::byte* p, typename T::V v) { T::dequantize_u4(p, false, v, v); };

template <DType TD, typename T = Traits>
inline typename T::V load(const std::byte* row, std::uint64_t j, typename T::V scale, typename T::V bias) {
  if constexpr (TD == DType::kF32) return Traits::load_f32(row + 4 * j);
  if constexpr (TD == DType::kF16) return Traits::load_f16(row + 2 * j);
  if constexpr (TD == DType::kBF16) return Traits::load_bf16(row + 2 * j);
  if constexpr (TD == DType::kInt8Rowwise) return Traits::load_i8(row + j) * scale + bias;
  if constexpr (TD == DType::kInt4Rowwise) {
    if constexpr (HasDequantizeU4<T>) return T::dequantize_u4(row + j / 2, (j & 1) != 0, scale, bias);
    else return T::load_u4(row + j / 2, (j & 1) != 0) * scale + bias;
  }
}

template <OutputDType OD>
inline void store(std::byte* out, std::uint64_t j, typename Traits::V v, bool stream) {
  if constexpr (OD == OutputDType::kF32) Traits::store_f32(out + 4 * j, v, stream);
  if constexpr (OD == OutputDType::kBF16) Traits::store_bf16(out + 2 * j, v, stream);
  if constexpr (OD == OutputDType::kF16) Traits::store_f16(out + 2 * j, v, stream);
}

// Scalar element j (row tails).
template <DType TD>
inline float load_one(const std::byte* row, std::uint64_t j, float scale, float bias) {
  if constexpr (TD == DType::kF32) {
    float v;
    __builtin_memcpy(&v, row + 4 * j, 4);
    return v;
  } else if constexpr (TD == DType::kInt8Rowwise) {
    return static_cast<float>(static_cast<std::int8_t>(row[j])) * scale + bias;
  } else if constexpr (TD == DType::kInt4Rowwise) {
    const auto pair = static_cast<unsigned>(row[j / 2]);
    return static_cast<float>((j & 1) ? pair >> 4 : pair & 15u) * scale + bias;
  } else {
    std::uint16_t h;
    __builtin_memcpy(&h, row + 2 * j, 2);
    return TD == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
}

template <OutputDType OD>
inline void store_one(std::byte* out, std::uint64_t j, float v) {
  if constexpr (OD == OutputDType::kF32) {
    __builtin_memcpy(out + 4 * j, &v, 4);
  } else {
    const std::uint16_t h = OD == OutputDType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
    __builtin_memcpy(out + 2 * j, &h, 2);
  }
}

constexpr std::uint64_t out_size(OutputDType od) { return od == OutputDType::kF32 ? 4 : 2; }

template <DType TD>
inline void quantization(const std::byte* row, std::uint64_t params_offset, float& scale, float& bias) {
  scale = 1.0f;
  bias = 0.0f;
  if constexpr (TD == DType::kInt8Rowwise) {
    __builtin_memcpy(&scale, row + params_offset, 4);
    __builtin_memcpy(&bias, row + params_offset + 4, 4);
  }
  if constexpr (TD == DType::kInt4Rowwise) {  // f16 scale and bias
    std::uint16_t h[2];
    __builtin_memcpy(h, row + params_offset, 4);
    scale = f16_to_f32(h[0]);
    bias = f16_to_f32(h[1]);
  }
}

// out row = convert(table row), vector body from the first vector-aligned output element when
// streaming (as a streaming store needs), scalar head and tail.
template <DType TD, OutputDType OD>
inline void convert_row(const std::byte* row, std::byte* out, std::uint64_t dim, std::uint64_t params_offset,
                        bool stream) {
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  float s, b;
  quantization<TD>(row, params_offset, s, b);
  std::uint64_t head = 0;
  if (stream) {
    constexpr std::uint64_t kVectorBytes = W * out_size(OD);
    const auto misalignment = reinterpret_cast<std::uintptr_t>(out) % kVectorBytes;
    head = misalignment ? (kVectorBytes - misalignment) / out_size(OD) : 0;
    if (head > dim) head = dim;
  }
  const std::uint64_t body_end = head + (dim - head) / W * W;
  for (std::uint64_t j = 0; j < head; ++j) store_one<OD>(out, j, load_one<TD>(row, j, s, b));
  const V vs(s), vb(b);
  for (std::uint64_t j = head; j < body_end; j += W) store<OD>(out, j, load<TD>(row, j, vs, vb), stream);
  for (std::uint64_t j = body_end; j < dim; ++j) store_one<OD>(out, j, load_one<TD>(row, j, s, b));
}

template <DType TD, OutputDType OD>
void stream_rows(const RowStream& a, std::uint64_t begin, std::uint64_t end) {
  const std::uint64_t out_row = a.dim * out_size(OD);
  const bool stream = a.stream && Traits::kCanStream && reinterpret_cast<std::uintptr_t>(a.out) % out_size(OD) == 0;
  for (std::uint64_t r = begin; r < end; ++r) {
    convert_row<TD, OD>(a.table + r * a.stride, a.out + r * out_row, a.dim, a.params_offset, stream);
  }
  if (stream) Traits::fence();
}

// A bag pooled into the f32 row `pooled`: every element 0 + row 0 + row 1 + ... in row order,
// then / n for a mean, as the reference. Rows are read whole and in order, each once. A row
// that fits in the accumulator registers (kBagBlock vectors) is summed there, so no sum waits
// on a store and reload from row to row; a wider row is added into `pooled` (in L1) row after
// row, which keeps each row's read sequential (summing a block of columns over all the rows
// first would read every row in strided pieces).
constexpr std::uint64_t kBagBlock = Traits::kWidth == 16 ? 16 : 8;  // of the 32 / 16 vector registers

template <DType TD>
inline void pool_bag(const std::byte* first, const RowStream& r, std::uint64_t count, bool mean, float* pooled) {
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  const std::uint64_t body_end = r.dim / W * W;
  const std::uint64_t vectors = body_end / W;
  auto* bytes = reinterpret_cast<std::byte*>(pooled);
  const V n(static_cast<float>(count));
  if (vectors <= kBagBlock) {
    V acc[kBagBlock];
    for (std::uint64_t v = 0; v < kBagBlock; ++v) acc[v] = V(0.0f);
    for (std::uint64_t k = 0; k < count; ++k) {
      const std::byte* row = first + k * r.stride;
      float s, b;
      quantization<TD>(row, r.params_offset, s, b);
      const V vs(s), vb(b);
      for (std::uint64_t v = 0; v < kBagBlock; ++v) {
        if (v < vectors) acc[v] = acc[v] + load<TD>(row, v * W, vs, vb);
      }
    }
    for (std::uint64_t v = 0; v < vectors; ++v) Traits::store_f32(bytes + 4 * v * W, mean ? acc[v] / n : acc[v], false);
  } else {
    for (std::uint64_t j = 0; j < body_end; j += W) Traits::store_f32(bytes + 4 * j, V(0.0f), false);
    for (std::uint64_t k = 0; k < count; ++k) {
      const std::byte* row = first + k * r.stride;
      float s, b;
      quantization<TD>(row, r.params_offset, s, b);
      const V vs(s), vb(b);
      for (std::uint64_t j = 0; j < body_end; j += W) {
        Traits::store_f32(bytes + 4 * j, Traits::load_f32(bytes + 4 * j) + load<TD>(row, j, vs, vb), false);
      }
    }
    if (mean) {
      for (std::uint64_t j = 0; j < body_end; j += W) Traits::store_f32(bytes + 4 * j, Traits::load_f32(bytes + 4 * j) / n, false);
    }
  }
  for (std::uint64_t j = body_end; j < r.dim; ++j) {
    float acc = 0.0f;
    for (std::uint64_t k = 0; k < count; ++k) {
      const std::byte* row = first + k * r.stride;
      float s, b;
      quantization<TD>(row, r.params_offset, s, b);
      acc = acc + load_one<TD>(row, j, s, b);
    }
    pooled[j] = mean ? acc / static_cast<float>(count) : acc;
  }
}

template <DType TD, OutputDType OD>
void bag_rows(const BagStream& a, std::uint64_t begin, std::uint64_t end) {
  const RowStream& r = a.rows;
  const std::uint64_t out_row = r.dim * out_size(OD);
  const bool stream = r.stream && Traits::kCanStream && reinterpret_cast<std::uintptr_t>(r.out) % out_size(OD) == 0;
  for (std::uint64_t b = begin; b < end; ++b) {
    pool_bag<TD>(r.table + b * a.bag * r.stride, r, a.bag, a.mean, a.scratch);
    convert_row<DType::kF32, OD>(reinterpret_cast<const std::byte*>(a.scratch), r.out + b * out_row, r.dim, 0, stream);
  }
  if (stream) Traits::fence();
}

template <DType TD, OutputDType OD>
void decode_limit(const DecodeRow& a) {
  for (std::uint64_t k = 0; k < a.row_bytes; k += 64) Traits::prefetch(a.token + k);
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  float s, b, ps = 1.0f, pb = 0.0f;
  quantization<TD>(a.token, a.params_offset, s, b);
  if (a.position) quantization<TD>(a.position, a.params_offset, ps, pb);
  const std::uint64_t body_end = a.dim / W * W;
  const V vs(s), vb(b), vps(ps), vpb(pb);
  for (std::uint64_t j = 0; j < body_end; j += W) {
    V x = load<TD>(a.token, j, vs, vb);
    if (a.position) x = x + load<TD>(a.position, j, vps, vpb);
    store<OD>(a.out, j, x, false);
  }
  for (std::uint64_t j = body_end; j < a.dim; ++j) {
    float x = load_one<TD>(a.token, j, s, b);
    if (a.position) x = x + load_one<TD>(a.position, j, ps, pb);
    store_one<OD>(a.out, j, x);
  }
}

template <DType TD>
constexpr std::array<StreamRows, 3> stream_for() {
  return {&stream_rows<TD, OutputDType::kF32>, &stream_rows<TD, OutputDType::kBF16>,
          &stream_rows<TD, OutputDType::kF16>};
}
template <DType TD>
constexpr std::array<DecodeLimit, 3> decode_for() {
  return {&decode_limit<TD, OutputDType::kF32>, &decode_limit<TD, OutputDType::kBF16>,
          &decode_limit<TD, OutputDType::kF16>};
}
template <DType TD>
constexpr std::array<BagRows, 3> bag_for() {
  return {&bag_rows<TD, OutputDType::kF32>, &bag_rows<TD, OutputDType::kBF16>, &bag_rows<TD, OutputDType::kF16>};
}

// Rows in the order of kRooflineDTypes.
#define EMBEDRT_ROOFLINE_ROWS(make)                                                                             \
  {{make<DType::kF32>()[0], make<DType::kF32>()[1], make<DType::kF32>()[2]},                                    \
   {make<DType::kF16>()[0], make<DType::kF16>()[1], make<DType::kF16>()[2]},                                    \
   {make<DType::kBF16>()[0], make<DType::kBF16>()[1], make<DType::kBF16>()[2]},                                 \
   {make<DType::kInt8Rowwise>()[0], make<DType::kInt8Rowwise>()[1], make<DType::kInt8Rowwise>()[2]},            \
   {make<DType::kInt4Rowwise>()[0], make<DType::kInt4Rowwise>()[1], make<DType::kInt4Rowwise>()[2]}}

}  // namespace

const RooflineKernels kRoofline = {EMBEDRT_ROOFLINE_ROWS(stream_for), EMBEDRT_ROOFLINE_ROWS(decode_for),
                                   EMBEDRT_ROOFLINE_ROWS(bag_for)};

#undef EMBEDRT_ROOFLINE_ROWS
