// A model file truncated under its mapping: with the fault guard, an error of the call that read
// it; never a crash, never zeros handed back as embeddings.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "embedrt/embedder.hpp"
#include "embedrt/embedrt.hpp"
#include "support/temp_dir.hpp"

using namespace embedrt;
using embedrt::test::TempDir;

namespace {

// A table large enough that its rows sit on pages past the header (the first page survives a
// truncation to 4096 bytes only partly).
void write_model(const std::string& path, std::uint64_t vocab, std::uint64_t dim) {
  std::vector<float> tok(vocab * dim);
  for (std::size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<float>(i % 97) * 0.25f;
  const TableData tables[] = {{{"tok", Role::kToken, DType::kF32, vocab, dim}, std::as_bytes(std::span(tok))}};
  REQUIRE(write_table_file(path, tables, Metadata{}));
}

void truncate_file(const std::string& path, off_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, size) == 0);
  ::close(fd);
}

}  // namespace

TEST_CASE("a model truncated under its mapping: embed and verify fail with an error naming the file") {
  REQUIRE(install_fault_guard());
  REQUIRE(fault_guard_installed());
  TempDir dir;
  const std::string path = dir.file("m.embt");
  const std::uint64_t vocab = 4096, dim = 64;  // 1 MiB of rows
  write_model(path, vocab, dim);
  auto model = Model::open(path);
  REQUIRE(model);
  auto embedder = Embedder::create(*model);
  REQUIRE(embedder);
  std::vector<std::int64_t> ids = {1, 2000, 4095};
  std::vector<float> out(ids.size() * dim);
  EmbedRequest request;
  request.ids = ids;
  REQUIRE(embedder->embed(request, OutputSpan(out)));
  CHECK(model->file().lost_pages() == 0);

  SUBCASE("truncated to nothing") { truncate_file(path, 0); }
  SUBCASE("truncated mid-table") { truncate_file(path, 256 * 1024); }

  const Status s = embedder->embed(request, OutputSpan(out));
  REQUIRE_FALSE(s);
  CHECK(s.error().code() == ErrorCode::kIo);
  CHECK(s.error().message().find("truncated or rewritten in place while mapped") != std::string::npos);
  CHECK(s.error().context().file == path);
  CHECK(model->file().lost_pages() > 0);
  // Once damaged, always refused, even for rows on pages that survived.
  std::vector<std::int64_t> first = {0};
  std::vector<float> one(dim);
  EmbedRequest small;
  small.ids = first;
  CHECK_FALSE(embedder->embed(small, OutputSpan(one)));
  const Status verified = model->file().verify();
  REQUIRE_FALSE(verified);
  CHECK(verified.error().message().find("truncated or rewritten in place") != std::string::npos);
}

TEST_CASE("a verify that meets a truncated file reports the damage, not a checksum") {
  REQUIRE(install_fault_guard());
  TempDir dir;
  const std::string path = dir.file("v.embt");
  write_model(path, 2048, 32);
  auto file = TableFile::open(path);
  REQUIRE(file);
  truncate_file(path, 4096);
  const Status s = file->verify();
  REQUIRE_FALSE(s);
  CHECK(s.error().code() == ErrorCode::kIo);
  CHECK(file->lost_pages() > 0);
}

TEST_CASE("many mappings open and closed: the guard's slots are reused") {
  REQUIRE(install_fault_guard());
  TempDir dir;
  const std::string path = dir.file("r.embt");
  write_model(path, 16, 8);
  for (int i = 0; i < 3000; ++i) {  // more than the registry holds at once
    auto file = TableFile::open(path);
    REQUIRE(file);
    CHECK(file->lost_pages() == 0);
  }
}

// Which sanitizer instruments this build: GCC says so with __SANITIZE_*__, clang with __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define EMBEDRT_UNDER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define EMBEDRT_UNDER_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMBEDRT_UNDER_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define EMBEDRT_UNDER_TSAN 1
#endif
#endif

#if !defined(EMBEDRT_UNDER_TSAN)
// (ThreadSanitizer does not support fork in a process with threads running.)
TEST_CASE("a SIGBUS outside embedrt's mappings still kills the process") {
  REQUIRE(install_fault_guard());
  TempDir dir;
  const std::string path = dir.file("other.bin");
  {
    std::vector<char> bytes(65536, 'x');
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
    std::fclose(f);
  }
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Raw system calls only: a mapping embedrt knows nothing about.
    const int fd = ::open(path.c_str(), O_RDWR);
    auto* p = static_cast<volatile char*>(::mmap(nullptr, 65536, PROT_READ, MAP_SHARED, fd, 0));
    if (fd < 0 || p == MAP_FAILED || ::ftruncate(fd, 0) != 0) ::_exit(3);
    const char c = p[32768];  // SIGBUS
    ::_exit(c == 0 ? 4 : 5);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS;
#if defined(EMBEDRT_UNDER_ASAN)
  // AddressSanitizer installed a SIGBUS handler before the guard: the guard passes the fault on
  // to it, and it reports and exits non-zero. Either way the child never read past the fault
  // (exit 4 or 5) and never failed its setup (3).
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  CHECK((killed || (code != -1 && code != 0 && code != 3 && code != 4 && code != 5)));
#else
  CHECK(killed);
#endif
}
#endif
