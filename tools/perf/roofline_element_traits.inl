// Element-by-element Traits for roofline_body.inl, shared by the portable and the SSE4.2 builds
// (each includes it inside its own namespace, compiled with its own flags).

struct Traits {
  using V = float;
  static constexpr std::uint64_t kWidth = 1;
  static constexpr bool kCanStream = false;
  static V load_f32(const std::byte* p) { V v; __builtin_memcpy(&v, p, 4); return v; }
  static V load_f16(const std::byte* p) { std::uint16_t h; __builtin_memcpy(&h, p, 2); return f16_to_f32(h); }
  static V load_bf16(const std::byte* p) { std::uint16_t h; __builtin_memcpy(&h, p, 2); return bf16_to_f32(h); }
  static V load_i8(const std::byte* p) { return static_cast<float>(static_cast<std::int8_t>(*p)); }
  static V load_u4(const std::byte* p, bool odd) {
    const auto pair = static_cast<unsigned>(*p);
    return static_cast<float>(odd ? pair >> 4 : pair & 15u);
  }
  static void store_f32(std::byte* p, V v, bool) { __builtin_memcpy(p, &v, 4); }
  static void store_f16(std::byte* p, V v, bool) { const std::uint16_t h = f32_to_f16(v); __builtin_memcpy(p, &h, 2); }
  static void store_bf16(std::byte* p, V v, bool) { const std::uint16_t h = f32_to_bf16(v); __builtin_memcpy(p, &h, 2); }
  static void fence() {}
  static void prefetch(const std::byte* p) { __builtin_prefetch(p); }
};
