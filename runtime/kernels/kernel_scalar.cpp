// The portable build of the kernel: one float at a time, baseline flags.
#include "kernels/kernel_prelude.hpp"

namespace embedrt::kernels::scalar {

struct Traits {
  using V = float;
  static constexpr std::uint64_t kWidth = 1;
  static constexpr bool kCanStream = false;
  // Whether fma is one instruction: Bag::with_combine (bag_body.inl) then takes it for unweighted rows too.
  static constexpr bool kHasFma = false;
  static V load_f32(const std::byte* p) { V v; std::memcpy(&v, p, 4); return v; }
  static V load_f16(const std::byte* p) { std::uint16_t h; std::memcpy(&h, p, 2); return f16_to_f32(h); }
  static float f16_one(std::uint16_t h) { return f16_to_f32(h); }
  static V load_bf16(const std::byte* p) { std::uint16_t h; std::memcpy(&h, p, 2); return bf16_to_f32(h); }
  static V load_i8(const std::byte* p) { return static_cast<float>(static_cast<std::int8_t>(*p)); }
  // (The one-element build reads int4 codes nibble by nibble in load<>; this names the low one.)
  static V load_u4(const std::byte* p, bool odd) {
    return static_cast<float>(odd ? static_cast<unsigned>(*p) >> 4 : static_cast<unsigned>(*p) & 0xfu);
  }
  static void store_f32(std::byte* p, V v, bool) { std::memcpy(p, &v, 4); }
  static void store_f16(std::byte* p, V v, bool) { const std::uint16_t h = f32_to_f16(v); std::memcpy(p, &h, 2); }
  static void store_bf16(std::byte* p, V v, bool) { const std::uint16_t h = f32_to_bf16(v); std::memcpy(p, &h, 2); }
  static float hsum(V v) { return v; }
  // fma correctly rounded (a libm call without FMA hardware); max as the reference: x > acc ? x : acc.
  static V fma(V w, V x, V acc) { return __builtin_fmaf(w, x, acc); }
  static V max_keep(V x, V acc) { return x > acc ? x : acc; }
  static void fence() {}
  static void prefetch(const std::byte* p) { __builtin_prefetch(p); }
};

#include "kernels/kernel_body.inl"

}  // namespace embedrt::kernels::scalar

namespace embedrt::kernels {
const KernelTable& scalar_kernels() { return scalar::kTable; }
}  // namespace embedrt::kernels
