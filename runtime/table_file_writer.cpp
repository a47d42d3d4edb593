// The .embt writer: temporary file in the target folder, space reserved up front, rows filled in
// place through a shared writable mapping, header written last, fsync, rename, fsync of the folder.
#include "embedrt/table_file_writer.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "byte_io.hpp"
#include "checksum.hpp"
#include "layout.hpp"
#include "embedrt/mapped_file.hpp"
#include "errno_message.hpp"
#include "utf8.hpp"
#include "metadata_codec.hpp"

namespace embedrt {

using detail::checked_add;
using detail::checked_align_up;
using detail::checked_mul;
using detail::errno_message;
using detail::store_le;
namespace hdr = detail::header;
namespace ent = detail::entry;

namespace {

// Temporaries of writers in progress, readable from a signal handler: fixed slots, the path
// written before the slot is published, no allocation or lock on the handler's side.
struct UnfinishedOutput {
  std::atomic<bool> used{false};
  std::atomic<bool> published{false};
  char path[4096] = {};
};
std::array<UnfinishedOutput, 64> g_unfinished;

// A slot holding `path`, or -1 when the path is too long or all slots are taken (that output is
// then only removed by the writer itself, not on a signal).
int remember_unfinished(const std::string& path) noexcept {
  if (path.size() >= sizeof(UnfinishedOutput::path)) return -1;
  for (std::size_t i = 0; i < g_unfinished.size(); ++i) {
    bool free = false;
    if (!g_unfinished[i].used.compare_exchange_strong(free, true)) continue;
    std::memcpy(g_unfinished[i].path, path.c_str(), path.size() + 1);
    g_unfinished[i].published.store(true, std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
}

void forget_unfinished(int slot) noexcept {
  if (slot < 0) return;
  g_unfinished[static_cast<std::size_t>(slot)].published.store(false, std::memory_order_release);
  g_unfinished[static_cast<std::size_t>(slot)].used.store(false, std::memory_order_release);
}

// Replacing a device, a FIFO or a folder is never what a user meant (`-o /dev/null --force`).
std::optional<Error> not_replaceable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return std::nullopt;
  return Error(ErrorCode::kInvalidArgument, "'" + path + "' exists and is not a regular file; only regular files are replaced",
               {.file = path});
}

}  // namespace

void remove_unfinished_outputs() noexcept {
  for (UnfinishedOutput& output : g_unfinished) {
    if (output.published.load(std::memory_order_acquire)) ::unlink(output.path);
  }
}

struct TableFileWriter::Impl {
  std::string target;
  std::string temporary;
  WriteOptions options;
  std::vector<TableSpec> specs;
  std::vector<std::uint64_t> strides;
  std::vector<std::uint64_t> offsets;
  std::vector<std::byte> metadata;
  FormatVersion version;
  std::uint64_t front_end = 0;
  std::uint64_t size = 0;
  int fd = -1;
  std::byte* map = nullptr;
  bool committed = false;

  ~Impl() { discard(); }
  int pending_slot = -1;  // in the registry of unfinished outputs

  void unmap_and_close() noexcept {
    if (map != nullptr) ::munmap(map, size);
    map = nullptr;
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  void discard() noexcept {
    unmap_and_close();
    forget_unfinished(pending_slot);
    pending_slot = -1;
    if (!committed && !temporary.empty()) ::unlink(temporary.c_str());
    temporary.clear();
  }
  Error io_error(const std::string& what, int e) const {
    return Error(e == ENOSPC || e == EDQUOT ? ErrorCode::kNoSpace : ErrorCode::kIo,
                 what + ": " + errno_message(e));
  }
  void write_front_matter() noexcept;
};

namespace {

std::string folder_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Status validate_specs(const std::vector<TableSpec>& specs) {
  if (specs.size() > detail::kMaxTables) {
    return Error(ErrorCode::kInvalidArgument,
                 std::to_string(specs.size()) + " tables, the format allows 65536");
  }
  std::set<std::string> names;
  std::set<Role> roles;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const TableSpec& s = specs[i];
    const std::string where = "table " + std::to_string(i) + " ('" + s.name + "')";
    if (s.name.empty() || s.name.size() > kMaxNameBytes || s.name.find('\0') != std::string::npos) {
      return Error(ErrorCode::kInvalidArgument,
                   where + ": name must be 1 to 63 bytes without NUL");
    }
    if (!detail::valid_utf8(s.name)) return Error(ErrorCode::kInvalidArgument, where + ": name is not valid UTF-8");
    if (!names.insert(s.name).second) {
      return Error(ErrorCode::kInvalidArgument, where + ": duplicate name");
    }
    if (s.role != Role::kOther && !roles.insert(s.role).second) {
      return Error(ErrorCode::kInvalidArgument,
                   where + ": a second table with role " + std::string(role_name(s.role)));
    }
    if (s.rows == 0 || s.dim == 0 || s.dim > kMaxDim) {
      return Error(ErrorCode::kInvalidArgument,
                   where + ": shape [" + std::to_string(s.rows) + ", " + std::to_string(s.dim) +
                       "] needs rows >= 1 and 1 <= dim <= 2^24");
    }
    if (dtype_name(s.dtype) == "unknown") {
      return Error(ErrorCode::kInvalidArgument, where + ": unknown dtype");
    }
  }
  return {};
}

}  // namespace

Result<TableFileWriter> TableFileWriter::begin(const std::string& path, std::vector<TableSpec> tables,
                                               Metadata metadata, const WriteOptions& options) {
  if (Status s = validate_specs(tables); !s) return std::move(s).error();
  auto impl = std::make_unique<Impl>();
  impl->target = path;
  impl->options = options;
  impl->specs = std::move(tables);
  for (const auto& [key, value] : metadata.extra) {
    if (!detail::valid_metadata_key(key)) {
      return Error(ErrorCode::kInvalidArgument, "metadata key '" + key + "' is not 1-255 bytes of [a-z0-9._]");
    }
    if (const auto* text = std::get_if<std::string>(&value); text && !detail::valid_utf8(*text)) {
      return Error(ErrorCode::kInvalidArgument, "metadata key '" + key + "': value is not valid UTF-8");
    }
  }
  for (const std::string* text : {&metadata.family, &metadata.source_files, &metadata.source_dtype}) {
    if (!detail::valid_utf8(*text)) return Error(ErrorCode::kInvalidArgument, "metadata string is not valid UTF-8");
  }
  // Output rules become keys (outputs.<name>.<rule>): names must be valid, and each other output
  // must name its token table, or the reader would refuse the file (FORMAT.md 5).
  if (!is_valid_output_name(metadata.name)) {
    return Error(ErrorCode::kInvalidArgument, "output name '" + metadata.name + "' is not 1 to 63 bytes of [a-z0-9_]");
  }
  for (const OutputRules& o : metadata.outputs) {
    if (!is_valid_output_name(o.name)) {
      return Error(ErrorCode::kInvalidArgument, "output name '" + o.name + "' is not 1 to 63 bytes of [a-z0-9_]");
    }
    if (o.token_table.empty() || o.name == metadata.name) {
      return Error(ErrorCode::kInvalidArgument, "output '" + o.name + "' " +
                                                    (o.token_table.empty() ? "names no token table" : "has the primary output's name"));
    }
  }
  impl->metadata = detail::encode_metadata(metadata);
  // The lowest version that expresses the file: its rules' and its tables' dtypes' (FORMAT.md 8).
  impl->version = metadata.required_version();
  for (const TableSpec& spec : impl->specs) impl->version = std::max(impl->version, dtype_version(spec.dtype));
  if (impl->metadata.size() > detail::kMaxMetadataSize) {
    return Error(ErrorCode::kInvalidArgument, "metadata is larger than 16 MiB");
  }

  // Layout (FORMAT.md section 2).
  impl->front_end = hdr::kSize + impl->specs.size() * ent::kSize + impl->metadata.size();
  std::uint64_t cursor = impl->front_end;
  for (const TableSpec& s : impl->specs) {
    const std::uint64_t stride = default_row_stride(s.dtype, s.dim);
    const auto offset = checked_align_up(cursor, kTableAlignment);
    const auto bytes = checked_mul(s.rows, stride);
    const auto end = offset && bytes ? checked_add(*offset, *bytes) : std::nullopt;
    if (!end) {
      return Error(ErrorCode::kInvalidArgument, "table '" + s.name + "': [" +
                                                    std::to_string(s.rows) + ", " +
                                                    std::to_string(s.dim) + "] is too large");
    }
    impl->strides.push_back(stride);
    impl->offsets.push_back(*offset);
    cursor = *end;
  }
  const auto total = checked_add(cursor, detail::kFooterSize);
  if (!total || *total > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())) {
    return Error(ErrorCode::kInvalidArgument, "the file would be too large");
  }
  impl->size = *total;

  if (auto refused = not_replaceable(path)) return std::move(*refused);
  if (!options.overwrite && ::access(path.c_str(), F_OK) == 0) {
    return Error(ErrorCode::kAlreadyExists, "'" + path + "' exists (set `overwrite` to replace it)");
  }

  std::string temporary = folder_of(path) + "/." + base_of(path) + ".tmp.XXXXXX";
  impl->fd = ::mkostemp(temporary.data(), O_CLOEXEC);
  if (impl->fd < 0) {
    return impl->io_error("cannot create a temporary file in '" + folder_of(path) + "'", errno);
  }
  impl->temporary = temporary;
  impl->pending_slot = remember_unfinished(temporary);
  ::fchmod(impl->fd, 0644);

  // Reserve every block now: a full disk fails here, not as SIGBUS while filling the mapping.
  if (int e = ::posix_fallocate(impl->fd, 0, static_cast<off_t>(impl->size)); e != 0) {
    return impl->io_error("cannot reserve " + std::to_string(impl->size) + " bytes for '" + path + "'", e);
  }
  void* map = ::mmap(nullptr, impl->size, PROT_READ | PROT_WRITE, MAP_SHARED, impl->fd, 0);
  if (map == MAP_FAILED) {
    return impl->io_error("cannot map the temporary file for '" + path + "'", errno);
  }
#ifdef MADV_HUGEPAGE
  // The file's pages are made in the page cache as the mapping is filled: in 2 MiB folios with
  // this hint, which readers then map with one TLB entry each (see map_shared_in_huge_pages).
  ::madvise(map, impl->size, MADV_HUGEPAGE);
#endif
  impl->map = static_cast<std::byte*>(map);
  return TableFileWriter(std::move(impl));
}

TableFileWriter::TableFileWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TableFileWriter::TableFileWriter(TableFileWriter&&) noexcept = default;
TableFileWriter& TableFileWriter::operator=(TableFileWriter&&) noexcept = default;
TableFileWriter::~TableFileWriter() = default;

std::size_t TableFileWriter::table_count() const noexcept { return impl_->specs.size(); }
const TableSpec& TableFileWriter::spec(std::size_t table) const noexcept { return impl_->specs[table]; }
std::uint64_t TableFileWriter::row_stride(std::size_t table) const noexcept { return impl_->strides[table]; }

std::span<std::byte> TableFileWriter::row(std::size_t table, std::uint64_t r) noexcept {
  const TableSpec& s = impl_->specs[table];
  return {impl_->map + impl_->offsets[table] + r * impl_->strides[table], row_bytes(s.dtype, s.dim)};
}

std::span<float> TableFileWriter::row_f32(std::size_t table, std::uint64_t r) noexcept {
  const auto bytes = row(table, r);
  return {reinterpret_cast<float*>(bytes.data()), bytes.size() / sizeof(float)};
}

void TableFileWriter::Impl::write_front_matter() noexcept {
  std::byte* h = map;
  std::memcpy(h, detail::kMagic.data(), detail::kMagic.size());
  store_le<std::uint16_t>(h + hdr::kVersionMajor, version.major);
  store_le<std::uint16_t>(h + hdr::kVersionMinor, version.minor);
  store_le<std::uint32_t>(h + hdr::kHeaderSize, hdr::kSize);
  store_le<std::uint64_t>(h + hdr::kFileSize, size);
  store_le<std::uint32_t>(h + hdr::kTableCount, static_cast<std::uint32_t>(specs.size()));
  store_le<std::uint32_t>(h + hdr::kEntrySize, ent::kSize);
  store_le<std::uint64_t>(h + hdr::kDirectoryOffset, hdr::kSize);
  const std::uint64_t metadata_offset = hdr::kSize + specs.size() * ent::kSize;
  store_le<std::uint64_t>(h + hdr::kMetadataOffset, metadata_offset);
  store_le<std::uint64_t>(h + hdr::kMetadataSize, metadata.size());

  for (std::size_t i = 0; i < specs.size(); ++i) {
    std::byte* e = h + hdr::kSize + i * ent::kSize;
    const TableSpec& s = specs[i];
    std::memcpy(e + ent::kName, s.name.data(), s.name.size());
    store_le<std::uint32_t>(e + ent::kRole, static_cast<std::uint32_t>(s.role));
    store_le<std::uint32_t>(e + ent::kDType, static_cast<std::uint32_t>(s.dtype));
    store_le<std::uint64_t>(e + ent::kRows, s.rows);
    store_le<std::uint64_t>(e + ent::kDim, s.dim);
    store_le<std::uint64_t>(e + ent::kRowStride, strides[i]);
    store_le<std::uint64_t>(e + ent::kOffset, offsets[i]);
    const std::uint64_t bytes = s.rows * strides[i];
    store_le<std::uint64_t>(e + ent::kDataSize, bytes);
    store_le<std::uint64_t>(e + ent::kChecksum, detail::checksum_mapped({map + offsets[i], bytes}));
  }
  std::memcpy(h + metadata_offset, metadata.data(), metadata.size());
  std::memcpy(map + size - detail::kFooterSize, detail::kFooter.data(), detail::kFooterSize);
  // The checksum covers everything above, so it is computed last.
  const std::span<const std::byte> file(map, size);
  store_le<std::uint64_t>(h + hdr::kChecksum,
                          detail::checksum2(file.subspan(0, hdr::kChecksum),
                                            file.subspan(hdr::kSize, front_end - hdr::kSize)));
}

Status TableFileWriter::commit() {
  Impl& w = *impl_;
  if (w.committed || w.map == nullptr) {
    return Error(ErrorCode::kInvalidArgument, "commit() called twice for '" + w.target + "'");
  }
  w.write_front_matter();
  if (w.options.sync) {
    if (::msync(w.map, w.size, MS_SYNC) != 0) return w.io_error("cannot write '" + w.target + "'", errno);
  }
  ::munmap(w.map, w.size);
  w.map = nullptr;
  if (w.options.sync && ::fsync(w.fd) != 0) {
    return w.io_error("cannot flush '" + w.target + "' to disk", errno);
  }
  if (::close(w.fd) != 0) {
    w.fd = -1;
    return w.io_error("cannot close the temporary file for '" + w.target + "'", errno);
  }
  w.fd = -1;

  if (auto refused = not_replaceable(w.target)) return std::move(*refused);  // it may have appeared since begin()
  int renamed;
  if (w.options.overwrite) {
    renamed = ::rename(w.temporary.c_str(), w.target.c_str());
  } else {
    // Refuse to replace a target that appeared since begin(), atomically.
    renamed = ::renameat2(AT_FDCWD, w.temporary.c_str(), AT_FDCWD, w.target.c_str(), RENAME_NOREPLACE);
    if (renamed != 0 && errno == EEXIST) {
      return Error(ErrorCode::kAlreadyExists, "'" + w.target + "' exists (set `overwrite` to replace it)");
    }
  }
  if (renamed != 0) return w.io_error("cannot rename the temporary file to '" + w.target + "'", errno);
  w.committed = true;
  w.temporary.clear();
  forget_unfinished(w.pending_slot);
  w.pending_slot = -1;

  if (w.options.sync) {
    const std::string folder = folder_of(w.target);
    const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      const int rc = ::fsync(dir);
      const int e = errno;
      ::close(dir);
      if (rc != 0) return w.io_error("cannot flush folder '" + folder + "'", e);
    }
  }
  return {};
}

Status write_table_file(const std::string& path, std::span<const TableData> tables,
                        const Metadata& metadata, const WriteOptions& options) {
  std::vector<TableSpec> specs;
  for (const TableData& t : tables) {
    const auto expected = checked_mul(t.spec.rows, row_bytes(t.spec.dtype, t.spec.dim));
    if (!expected || t.data.size() != *expected) {
      return Error(ErrorCode::kInvalidArgument,
                   "table '" + t.spec.name + "': " + std::to_string(t.data.size()) +
                       " data bytes, expected rows x row_bytes = " +
                       (expected ? std::to_string(*expected) : std::string("(overflow)")));
    }
    specs.push_back(t.spec);
  }
  auto writer = TableFileWriter::begin(path, std::move(specs), metadata, options);
  if (!writer) return std::move(writer).error();
  for (std::size_t i = 0; i < tables.size(); ++i) {
    const std::uint64_t stride = row_bytes(tables[i].spec.dtype, tables[i].spec.dim);
    for (std::uint64_t r = 0; r < tables[i].spec.rows; ++r) {
      std::memcpy(writer->row(i, r).data(), tables[i].data.data() + r * stride, stride);
    }
  }
  return writer->commit();
}

}  // namespace embedrt
