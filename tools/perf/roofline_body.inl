// The roofline kernels, written once and compiled once per ISA (like runtime/kernels/
// kernel_body.inl, whose loads, conversions and stores these mirror, but written independently so
// that a change to the library's kernels never moves the yardstick they are measured against; the
// AVX2 unit takes the kernel's Traits, its loads and stores as intrinsics, since 2d1293b).
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

// The lines of `bytes` of rows `r.prefetch_ahead` bytes past `rows` (RowStream::prefetch_ahead).
// Past the table's end these are addresses of no row: a prefetch never faults. Called per row of a
// stream, per bag, and per row or group of 8 rows in the row plans (add_group, outside its vector
// loop), never inside pool_block's row loop: a test there, even when it prefetched nothing, cost
// the bags of f16 256 rows 10-25% (GCC's code for the loop changed).
inline void prefetch_ahead(const std::byte* rows, std::uint64_t bytes, const RowStream& r) {
  if (r.prefetch_ahead == 0) return;
  for (std::uint64_t k = 0; k < bytes; k += 64) Traits::prefetch(rows + r.prefetch_ahead + k);
}

template <DType TD, OutputDType OD>
void stream_rows(const RowStream& a, std::uint64_t begin, std::uint64_t end) {
  const std::uint64_t out_row = a.dim * out_size(OD);
  const bool stream = a.stream && Traits::kCanStream && reinterpret_cast<std::uintptr_t>(a.out) % out_size(OD) == 0;
  for (std::uint64_t r = begin; r < end; ++r) {
    prefetch_ahead(a.table + r * a.stride, a.stride, a);
    convert_row<TD, OD>(a.table + r * a.stride, a.out + r * out_row, a.dim, a.params_offset, stream);
  }
  if (stream) Traits::fence();
}

// A bag pooled and stored: every element 0 + row 0 + row 1 + ... in row order, then / n for a
// mean, as the reference, converted to the output dtype and stored once. Rows are read in order,
// each once (in column blocks, once a block), sums start from zero in registers and the result is
// stored where it goes:
// a row of at most kBagBlock vectors is summed in registers (a count fixed at compile time, so
// they stay there); a wider one by the BagStream's plan (roofline_kernels.hpp). The library's
// kernel pools bags these ways too (runtime/kernels/bag_body.inl), so the two differ in where
// the rows are, not in the work per row: a roofline that added each row to zeroed sums and copied
// them out (as this one did) ran below the kernel itself, 0.6-0.7x of it (f32 dims 64 and 768,
// bags of 8, a 32 MiB-L3 Zen 5). Measured there (1 thread, 0.5 s a plan, one run; other runs move
// these by up to 20%, see 9e88c98): f32 768 bags of 8 / 128
// 9.3 / 10.8 M rows/s a row at a time, 10.3 / 14.7 in groups, 7.7 / 14.2 in column blocks; f16 768
// bags of 8 16.9 / 15.5 / 9.1; int8 768 bags of 8 23.9 / 15.3 / 14.5, of 128 27.0 / 18.7 / 23.5.
constexpr std::uint64_t kBagBlock = Traits::kWidth == 16 ? 16 : 8;  // of the 32 / 16 vector registers
constexpr std::uint64_t kBagGroup = 8;
// BagPlan::kColumnTiles: the kernel's int8 blocks (kBlockPassVectors, 24 of AVX-512's 32 registers,
// 12 of 16) and tiles (kBlockPassDistance rows).
constexpr std::uint64_t kTileBlock = Traits::kWidth == 16 ? 24 : 12;
constexpr std::uint64_t kTileRows = 12;

// Where column j of a row starts (a quantized row's codes first).
template <DType TD>
constexpr std::uint64_t column_bytes(std::uint64_t j) {
  return TD == DType::kF32 ? 4 * j : TD == DType::kF16 || TD == DType::kBF16 ? 2 * j : TD == DType::kInt8Rowwise ? j : j / 2;
}

// Rows [from, to) of a bag of `count`, vectors [j / W, j / W + kVectors), summed in registers
// onto the bag's sums so far (`sums`; none before the first row) and kept there, or stored where
// they go when `to` ends the bag. A whole bag at once (from 0 to count) needs no `sums`.
// kPrefetchesRows: BagPlan::kColumnTiles' prefetches, below; for rows that fit the registers and
// column blocks the lines come from bag_rows, outside this loop (prefetch_ahead says why).
template <std::uint64_t kVectors, DType TD, OutputDType OD, bool kPrefetchesRows>
inline void pool_block(const std::byte* first, const RowStream& r, std::uint64_t from, std::uint64_t to,
                       std::uint64_t count, bool mean, std::uint64_t j, float* sums, std::byte* out) {
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  // Unrolled whole, so the sums stay in registers (GCC left 24 of them on the stack otherwise).
  static_assert(kVectors <= 32, "the unroll pragmas below");
  auto* bytes = reinterpret_cast<std::byte*>(sums);
  V acc[kVectors];
#pragma GCC unroll 32
  for (std::uint64_t v = 0; v < kVectors; ++v) acc[v] = from == 0 ? V(0.0f) : Traits::load_f32(bytes + 4 * (j + v * W));
  // Column tiles: as each row's block is read, the lines of this block's columns the prefetch
  // distance further on, and with the first block the rest of the row's stride past the blocks
  // (the tail's columns, a quantized row's scale and bias, which the first block reads, the
  // padding): every line of the table once, a block at a time, as the kernel's passes prefetch
  // theirs. (A whole tile's lines at once, or a bag's, filled the core's miss buffers: int8 768
  // bags 0.6-0.7x as fast; without the rest of the stride, the 13th line of those rows, 0.75x;
  // with it from the last block, 0.95x.)
  const std::uint64_t lines_from = column_bytes<TD>(j) / 64 * 64, lines_to = column_bytes<TD>(j + kVectors * W);
  const std::uint64_t rest_from = j == 0 ? column_bytes<TD>(r.dim / W * W) / 64 * 64 : r.stride;
  for (std::uint64_t k = from; k < to; ++k) {
    const std::byte* row = first + k * r.stride;
    if constexpr (kPrefetchesRows) {
      if (r.prefetch_ahead != 0) {
        for (std::uint64_t l = lines_from; l < lines_to; l += 64) Traits::prefetch(row + r.prefetch_ahead + l);
        for (std::uint64_t l = rest_from; l < r.stride; l += 64) Traits::prefetch(row + r.prefetch_ahead + l);
      }
    }
    float s, b;
    quantization<TD>(row, r.params_offset, s, b);
    const V vs(s), vb(b);
#pragma GCC unroll 32
    for (std::uint64_t v = 0; v < kVectors; ++v) acc[v] = acc[v] + load<TD>(row, j + v * W, vs, vb);
  }
  if (to == count) {
    const V n(static_cast<float>(count));
#pragma GCC unroll 32
    for (std::uint64_t v = 0; v < kVectors; ++v) store<OD>(out, j + v * W, mean ? acc[v] / n : acc[v], false);
  } else {
#pragma GCC unroll 32
    for (std::uint64_t v = 0; v < kVectors; ++v) Traits::store_f32(bytes + 4 * (j + v * W), acc[v], false);
  }
}

// pool_block of `vectors` (1 to sizeof...(kMinusOne)) vectors.
template <DType TD, OutputDType OD, bool kPrefetchesRows, std::size_t... kMinusOne>
inline void pool_block_of(std::uint64_t vectors, const std::byte* first, const RowStream& r, std::uint64_t from,
                          std::uint64_t to, std::uint64_t count, bool mean, std::uint64_t j, float* sums,
                          std::byte* out, std::index_sequence<kMinusOne...>) {
  (void)((vectors == kMinusOne + 1
              ? (pool_block<kMinusOne + 1, TD, OD, kPrefetchesRows>(first, r, from, to, count, mean, j, sums, out), true)
              : false) ||
         ...);
}

// Rows [k, k + kRows) of a wide bag added to `sums`, vectors [0, vectors), the lines of these rows
// the prefetch distance further on prefetched first, as the kernel's pool_rows prefetches per row.
// Against the whole bag's lines at its top (third 32 MiB-L3 Zen 5, 1 thread, outputs rotating
// through 4x the LLC, the roofline's best way, 4 alternating runs, M rows/s before -> after): f16
// 768 bags of 8 17.0-18.1 -> 17.7-19.2, of 128 19.7-20.9 -> 20.6-25.1; f16 512 bags of 32 30.3 ->
// 30.8-33.3; f32 512 bags of 32 15.8-17.2 -> 16.6-19.8; f32 768 bags of 32 and 128 alike (10.4-13.6).
template <std::uint64_t kRows, DType TD, OutputDType OD>
inline void add_group(const std::byte* first, const RowStream& r, std::uint64_t k, std::uint64_t count, bool mean,
                      std::uint64_t vectors, float* sums, std::byte* out) {
  using V = typename Traits::V;
  constexpr std::uint64_t W = Traits::kWidth;
  const std::byte* rows[kRows];
  V vs[kRows], vb[kRows];
  prefetch_ahead(first + k * r.stride, kRows * r.stride, r);
  for (std::uint64_t g = 0; g < kRows; ++g) {
    rows[g] = first + (k + g) * r.stride;
    float s, b;
    quantization<TD>(rows[g], r.params_offset, s, b);
    vs[g] = V(s);
    vb[g] = V(b);
  }
  auto* bytes = reinterpret_cast<std::byte*>(sums);
  const bool firsts = k == 0, lasts = k + kRows == count;
  const V n(static_cast<float>(count));
  for (std::uint64_t v = 0; v < vectors; ++v) {
    V acc = firsts ? V(0.0f) : Traits::load_f32(bytes + 4 * v * W);
    for (std::uint64_t g = 0; g < kRows; ++g) acc = acc + load<TD>(rows[g], v * W, vs[g], vb[g]);
    if (lasts) {
      store<OD>(out, v * W, mean ? acc / n : acc, false);
    } else {
      Traits::store_f32(bytes + 4 * v * W, acc, false);
    }
  }
}

// Whether a bag of rows of `dim` values is pooled in a plan that prefetches its own rows: column
// tiles (pool_block), rows at a time and row groups (add_group). Rows that fit the registers are
// pooled there whatever the plan, and column blocks read every row once a block: for these the
// bag's lines come at its top (bag_rows).
inline bool prefetches_own_rows(BagPlan plan, std::uint64_t dim) {
  return plan != BagPlan::kColumnBlocks && dim / Traits::kWidth > kBagBlock;
}

// Bag of `count` rows from `first` into the output row `out`; `sums` holds dim floats.
template <DType TD, OutputDType OD>
inline void pool_bag(const std::byte* first, const RowStream& r, std::uint64_t count, bool mean, BagPlan plan,
                     float* sums, std::byte* out) {
  constexpr std::uint64_t W = Traits::kWidth;
  const std::uint64_t body_end = r.dim / W * W;
  const std::uint64_t vectors = body_end / W;
  constexpr auto kBlocks = std::make_index_sequence<kBagBlock>();
  if (vectors <= kBagBlock) {
    pool_block_of<TD, OD, false>(vectors, first, r, 0, count, count, mean, 0, nullptr, out, kBlocks);
  } else if (plan == BagPlan::kColumnBlocks) {
    std::uint64_t v = 0;
    for (; v + kBagBlock <= vectors; v += kBagBlock) {
      pool_block<kBagBlock, TD, OD, false>(first, r, 0, count, count, mean, v * W, nullptr, out);
    }
    if (v < vectors) pool_block_of<TD, OD, false>(vectors - v, first, r, 0, count, count, mean, v * W, nullptr, out, kBlocks);
  } else if (plan == BagPlan::kColumnTiles) {
    for (std::uint64_t from = 0; from < count;) {
      const std::uint64_t to = count - from > kTileRows ? from + kTileRows : count;
      std::uint64_t v = 0;
      for (; v + kTileBlock <= vectors; v += kTileBlock) {
        pool_block<kTileBlock, TD, OD, true>(first, r, from, to, count, mean, v * W, sums, out);
      }
      if (v < vectors) {
        pool_block_of<TD, OD, true>(vectors - v, first, r, from, to, count, mean, v * W, sums, out,
                                    std::make_index_sequence<kTileBlock - 1>());
      }
      from = to;
    }
  } else {
    std::uint64_t k = 0;
    if (plan == BagPlan::kRowGroups) {
      for (; k + kBagGroup <= count; k += kBagGroup) {
        add_group<kBagGroup, TD, OD>(first, r, k, count, mean, vectors, sums, out);
      }
    }
    for (; k < count; ++k) add_group<1, TD, OD>(first, r, k, count, mean, vectors, sums, out);
  }
  for (std::uint64_t j = body_end; j < r.dim; ++j) {
    float acc = 0.0f;
    for (std::uint64_t k = 0; k < count; ++k) {
      const std::byte* row = first + k * r.stride;
      float s, b;
      quantization<TD>(row, r.params_offset, s, b);
      acc = acc + load_one<TD>(row, j, s, b);
    }
    store_one<OD>(out, j, mean ? acc / static_cast<float>(count) : acc);
  }
}

template <DType TD, OutputDType OD>
void bag_rows(const BagStream& a, std::uint64_t begin, std::uint64_t end) {
  const RowStream& r = a.rows;
  const std::uint64_t out_row = r.dim * out_size(OD);
  const bool stream = r.stream && Traits::kCanStream && reinterpret_cast<std::uintptr_t>(r.out) % out_size(OD) == 0;
  auto* scratch = reinterpret_cast<std::byte*>(a.scratch);
  for (std::uint64_t b = begin; b < end; ++b) {
    const std::byte* first = r.table + b * a.bag * r.stride;
    std::byte* out = r.out + b * out_row;
    // The bag's lines the prefetch distance further on, unless its plan takes them a group of
    // rows or a block of a row at a time, as the kernel's loops prefetch theirs.
    if (!prefetches_own_rows(a.plan, r.dim)) prefetch_ahead(first, a.bag * r.stride, r);
    if (stream) {  // pooled into the scratch row, then streamed out from the first aligned vector (convert_row)
      pool_bag<TD, OutputDType::kF32>(first, r, a.bag, a.mean, a.plan, a.scratch, scratch);
      convert_row<DType::kF32, OD>(scratch, out, r.dim, 0, true);
    } else {
      pool_bag<TD, OD>(first, r, a.bag, a.mean, a.plan, a.scratch, out);
    }
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
                                   EMBEDRT_ROOFLINE_ROWS(bag_for), kBagBlock * Traits::kWidth + Traits::kWidth - 1};

#undef EMBEDRT_ROOFLINE_ROWS
