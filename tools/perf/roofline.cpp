#include "roofline.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

#include <cstring>
#include <vector>

#include "roofline_kernels.hpp"

namespace embedrt::perf {

const RooflineKernels& roofline_kernels(Isa isa) noexcept {
  switch (isa) {
    case Isa::kScalar: return scalar_roofline();
    case Isa::kSse42: return sse42_roofline();
    case Isa::kAvx2: return avx2_roofline();
    case Isa::kAvx512: return avx512_roofline();
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
  StreamCase c;
  StreamRows kernel;
  std::uint64_t rows = 0;  // table rows in the buffer: a multiple of c.tokens
  std::uint64_t out_row = 0;
  std::unique_ptr<Buffer> table;
  std::vector<std::unique_ptr<Buffer>> outputs;
  std::uint64_t next_row = 0, next_out = 0;
};

StreamRoofline::StreamRoofline(Isa isa, const StreamCase& c) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.c = c;
  if (m.c.stride == 0) m.c.stride = default_row_stride(c.table, c.dim);
  if (m.c.tokens == 0) m.c.tokens = 1;
  if (m.c.out_sets == 0) m.c.out_sets = 1;
  m.kernel = roofline_kernels(isa).get_stream(c.table, c.out);
  const std::uint64_t per_call = m.c.tokens * m.c.stride;
  const std::uint64_t calls = (c.min_table_bytes + per_call - 1) / per_call;
  m.rows = (calls ? calls : 1) * m.c.tokens;
  m.out_row = c.dim * output_element_bytes(c.out);
  m.table = std::make_unique<Buffer>(m.rows * m.c.stride);
  for (std::uint64_t k = 0; k < m.c.out_sets; ++k) m.outputs.push_back(std::make_unique<Buffer>(m.c.tokens * m.out_row));
}

StreamRoofline::~StreamRoofline() = default;

void StreamRoofline::call(tbb::task_arena& arena) {
  Impl& m = *impl_;
  RowStream a;
  a.table = m.table->data + m.next_row * m.c.stride;
  a.stride = m.c.stride;
  a.dim = m.c.dim;
  a.params_offset = int8_params_offset(m.c.dim);
  a.out = m.outputs[m.next_out]->data;
  a.stream = m.c.stream;
  m.next_row = (m.next_row + m.c.tokens) % m.rows;
  m.next_out = (m.next_out + 1) % m.c.out_sets;
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

std::uint64_t StreamRoofline::table_bytes() const noexcept { return impl_->rows * impl_->c.stride; }
std::uint64_t StreamRoofline::output_bytes() const noexcept { return impl_->c.tokens * impl_->out_row; }
std::uint64_t StreamRoofline::bytes_per_token() const noexcept {
  return row_bytes(impl_->c.table, impl_->c.dim) + impl_->out_row;
}

}  // namespace embedrt::perf
