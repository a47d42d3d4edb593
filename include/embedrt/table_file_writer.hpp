// Atomic creation of an .embt file.
//
// The writer creates a temporary file next to the target, reserves its whole size (so a full disk
// fails before any data is written), and maps it; the caller fills each table's rows in place,
// streaming from wherever the data comes from; commit() computes the checksums, writes the
// header, flushes the file, renames it over the target and flushes the folder. Until commit()
// succeeds the target is untouched, and a writer destroyed without a commit removes its
// temporary file.
//
// Thread safety: one writer belongs to one thread, but different threads may fill the rows of
// different tables (or disjoint rows of one table) between begin() and commit().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "embedrt/error.hpp"
#include "embedrt/format.hpp"

namespace embedrt {

struct TableSpec {
  std::string name;
  Role role = Role::kOther;
  DType dtype = DType::kF32;
  std::uint64_t rows = 0;
  std::uint64_t dim = 0;
};

struct WriteOptions {
  bool overwrite = false;  // replace an existing target
  bool sync = true;        // fsync file and folder (off only for scratch files in tests)
};

class TableFileWriter {
 public:
  // Validates the specs (names, shapes, duplicate roles, sizes) and creates the temporary file.
  static Result<TableFileWriter> begin(const std::string& path, std::vector<TableSpec> tables,
                                       Metadata metadata, const WriteOptions& options = {});

  TableFileWriter(TableFileWriter&&) noexcept;
  TableFileWriter& operator=(TableFileWriter&&) noexcept;
  ~TableFileWriter();  // removes the temporary file unless commit() succeeded

  std::size_t table_count() const noexcept;
  const TableSpec& spec(std::size_t table) const noexcept;
  std::uint64_t row_stride(std::size_t table) const noexcept;

  // Writable bytes of one row: row_bytes(dtype, dim) long, zero-filled, 64-byte aligned.
  std::span<std::byte> row(std::size_t table, std::uint64_t row) noexcept;
  // Convenience for f32 tables.
  std::span<float> row_f32(std::size_t table, std::uint64_t row) noexcept;

  Status commit();

 private:
  struct Impl;
  explicit TableFileWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A table held in memory, for small files and tests: row-major, rows * row_bytes bytes.
struct TableData {
  TableSpec spec;
  std::span<const std::byte> data;
};

Status write_table_file(const std::string& path, std::span<const TableData> tables,
                        const Metadata& metadata, const WriteOptions& options = {});

// Removes the temporary files of every writer still in progress, so a program interrupted
// mid-write leaves nothing behind. Async-signal-safe (it only calls unlink on paths recorded
// when each temporary was created): meant for a SIGINT/SIGTERM handler, which then re-raises the
// signal. The embedrt CLI installs such a handler.
void remove_unfinished_outputs() noexcept;

}  // namespace embedrt
