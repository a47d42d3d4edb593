#include "roofline.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "roofline_kernels.hpp"

namespace embedrt::perf {

namespace {

// The units that prefetch into L2, where this build compiled them (as the library's L2 kernels);
// nullptr for any other ISA.
const RooflineKernels* prefetch_l2_roofline(Isa isa) noexcept {
  switch (isa) {
#if EMBEDRT_PREFETCH_L2_KERNELS && EMBEDRT_BUILT_avx2
    case Isa::kAvx2: return &avx2_l2_roofline();
#endif
#if EMBEDRT_PREFETCH_L2_KERNELS && EMBEDRT_BUILT_avx512
    case Isa::kAvx512: return &avx512_l2_roofline();
#endif
#if EMBEDRT_PREFETCH_L2_KERNELS && EMBEDRT_BUILT_avx512bf16
    case Isa::kAvx512Bf16: return &avx512bf16_l2_roofline();
#endif
    default: return nullptr;
  }
}

}  // namespace

bool has_prefetch_l2_roofline(Isa isa) noexcept { return prefetch_l2_roofline(isa) != nullptr; }

// As the library's kernels_for: only the units this build compiled (cmake/KernelIsas.cmake).
const RooflineKernels& roofline_kernels(Isa isa, PrefetchLevel level) noexcept {
  if (level == PrefetchLevel::kL2) {
    if (const RooflineKernels* l2 = prefetch_l2_roofline(isa)) return *l2;
  }
  switch (isa) {
    case Isa::kScalar: return scalar_roofline();
#if EMBEDRT_BUILT_sse42
    case Isa::kSse42: return sse42_roofline();
#endif
#if EMBEDRT_BUILT_avx2
    case Isa::kAvx2: return avx2_roofline();
#endif
#if EMBEDRT_BUILT_avx512
    case Isa::kAvx512: return avx512_roofline();
#endif
#if EMBEDRT_BUILT_avx512bf16
    case Isa::kAvx512Bf16: return avx512bf16_roofline();
#endif
    default: break;
  }
  return scalar_roofline();
}

namespace {

// Page-aligned bytes, every page written once so that no call pays a first-touch fault. Values
// are 0x3c bytes: normal floats in every dtype (no denormal slow paths), int8 scales included.
struct Buffer {
  explicit Buffer(std::uint64_t bytes) : data(new (std::align_val_t{4096}) std::byte[bytes]), size(bytes) {
    std::memset(data, 0x3c, bytes);
  }
  ~Buffer() { operator delete[](data, std::align_val_t{4096}); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::byte* data;
  std::uint64_t size;
};

}  // namespace

struct StreamRoofline::Impl {
  Isa isa;
  StreamCase c;
  StreamRows kernel = nullptr;
  BagRows bag_kernel = nullptr;
  std::uint64_t out_rows = 0;  // per call: tokens, or tokens / bag
  std::uint64_t rows = 0;  // table rows in the buffer: a multiple of c.tokens
  std::uint64_t out_row = 0;
  std::unique_ptr<Buffer> table;
  std::vector<std::unique_ptr<Buffer>> outputs;
  std::uint64_t next_row = 0, next_out = 0;
  bool plans_differ = false;
};

StreamRoofline::StreamRoofline(Isa isa, const StreamCase& c) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.isa = isa;
  m.c = c;
  if (m.c.stride == 0) m.c.stride = default_row_stride(c.table, c.dim);
  if (m.c.tokens == 0) m.c.tokens = 1;
  if (m.c.out_sets == 0) m.c.out_sets = 1;
  if (m.c.bag == 0) m.c.bag = 1;
  if (m.c.tokens % m.c.bag != 0) throw std::invalid_argument("StreamRoofline: tokens is not a multiple of bag");
  m.out_rows = m.c.tokens / m.c.bag;
  m.kernel = roofline_kernels(isa).get_stream(c.table, c.out);
  m.bag_kernel = roofline_kernels(isa).get_bag(c.table, c.out);
  m.plans_differ = m.c.bag > 1 && c.dim > roofline_kernels(isa).bag_register_values;
  if (m.kernel == nullptr || m.bag_kernel == nullptr) {
    throw std::invalid_argument("StreamRoofline: no roofline for table dtype " + std::string(dtype_name(c.table)));
  }
  const std::uint64_t per_call = m.c.tokens * m.c.stride;
  const std::uint64_t calls = (c.min_table_bytes + per_call - 1) / per_call;
  m.rows = (calls ? calls : 1) * m.c.tokens;
  m.out_row = c.dim * output_element_bytes(c.out);
  m.table = std::make_unique<Buffer>(m.rows * m.c.stride);
  for (std::uint64_t k = 0; k < m.c.out_sets; ++k) m.outputs.push_back(std::make_unique<Buffer>(m.out_rows * m.out_row));
}

StreamRoofline::~StreamRoofline() = default;

void StreamRoofline::call(tbb::task_arena& arena) {
  Impl& m = *impl_;
  RowStream a;
  a.table = m.table->data + m.next_row * m.c.stride;
  a.stride = m.c.stride;
  a.dim = m.c.dim;
  a.params_offset = row_params_offset(m.c.table, m.c.dim);
  a.out = m.outputs[m.next_out]->data;
  a.stream = m.c.stream;
  a.prefetch_ahead = m.c.prefetch_ahead;
  m.next_row = (m.next_row + m.c.tokens) % m.rows;
  m.next_out = (m.next_out + 1) % m.c.out_sets;
  if (m.c.bag > 1) {
    call_bags(arena, a);
    return;
  }
  const std::uint64_t n = m.c.tokens;
  const std::uint64_t grain = std::max<std::uint64_t>(1, (128u << 10) / m.out_row);
  if (n * m.out_row <= (256u << 10)) {  // as the Embedder: small calls stay on the calling thread
    m.kernel(a, 0, n);
    return;
  }
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, n, grain),
                      [&](const tbb::blocked_range<std::uint64_t>& r) { m.kernel(a, r.begin(), r.end()); },
                      tbb::simple_partitioner());
  });
}

// Bags split over threads by the rows they read (~128 KiB a chunk), each thread pooling into its
// own f32 scratch row; calls reading up to 256 KiB stay on the calling thread.
void StreamRoofline::call_bags(tbb::task_arena& arena, const RowStream& rows) {
  Impl& m = *impl_;
  BagStream a;
  a.rows = rows;
  a.bag = m.c.bag;
  a.mean = m.c.mean;
  a.plan = m.c.bag_plan;
  const auto run = [&](std::uint64_t begin, std::uint64_t end) {
    thread_local std::vector<float> scratch;
    if (scratch.size() < m.c.dim) scratch.resize(m.c.dim);
    BagStream mine = a;
    mine.scratch = scratch.data();
    m.bag_kernel(mine, begin, end);
  };
  const std::uint64_t bag_bytes = m.c.bag * m.c.stride;
  if (m.out_rows * bag_bytes <= (256u << 10)) {
    run(0, m.out_rows);
    return;
  }
  const std::uint64_t grain = std::max<std::uint64_t>(1, (128u << 10) / bag_bytes);
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, m.out_rows, grain),
                      [&](const tbb::blocked_range<std::uint64_t>& r) { run(r.begin(), r.end()); },
                      tbb::simple_partitioner());
  });
}

void StreamRoofline::set_bag_plan(BagPlan plan) noexcept { impl_->c.bag_plan = plan; }
void StreamRoofline::set_prefetch_ahead(std::uint64_t bytes) noexcept { impl_->c.prefetch_ahead = bytes; }
void StreamRoofline::set_prefetch_level(PrefetchLevel level) noexcept {
  Impl& m = *impl_;
  m.kernel = roofline_kernels(m.isa, level).get_stream(m.c.table, m.c.out);  // (same dtypes: never null)
  m.bag_kernel = roofline_kernels(m.isa, level).get_bag(m.c.table, m.c.out);
}
bool StreamRoofline::bag_plans_differ() const noexcept { return impl_->plans_differ; }

std::uint64_t StreamRoofline::table_bytes() const noexcept { return impl_->rows * impl_->c.stride; }
std::uint64_t StreamRoofline::output_bytes() const noexcept { return impl_->out_rows * impl_->out_row; }
std::uint64_t StreamRoofline::bytes_per_call() const noexcept {
  return impl_->c.tokens * row_bytes(impl_->c.table, impl_->c.dim) + output_bytes();
}
std::uint64_t StreamRoofline::bytes_per_token() const noexcept {
  return row_bytes(impl_->c.table, impl_->c.dim) + impl_->out_row;
}

}  // namespace embedrt::perf
