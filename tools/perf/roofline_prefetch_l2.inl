// Included by a roofline unit compiled a second time as its L2 unit (roofline_<unit>_l2.cpp
// defines EMBEDRT_ROOFLINE_PREFETCH_L2): the same kernels with every software prefetch going only
// as far as L2 (prefetcht1), as the library's PrefetchLevel::kL2 kernels do
// (runtime/kernels/prefetch_l2_kernels.inl). A roofline is the best a gather of the same bytes
// could do, and on a machine whose random reads reward L2 prefetches the library's bags ran past
// a roofline that only had prefetcht0 (f32 256 bags at 111%). A unit of its own rather than a
// second set beside the first: adding code to the unit moved its fastest way by 13%
// (docs/BENCHMARKS.md, session 48), while this way the L1 unit compiles to the same machine code as before.
template <typename Base>
struct PrefetchIntoL2 : Base {
  static void prefetch(const std::byte* p) { __builtin_prefetch(p, 0, 2); }  // prefetcht1
};
