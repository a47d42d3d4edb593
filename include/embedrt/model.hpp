// A Model is an opened .embt file whose tables have been checked to fit together: a token table,
// optional position / segment tables of the same width, optional LayerNorm weight and bias.
//
// Thread safety: immutable; share one Model between any number of threads. It keeps the mapping
// alive, so TableView pointers obtained from it stay valid as long as the Model (or a copy) does.
#pragma once

#include <cstdint>
#include <string>

#include "embedrt/error.hpp"
#include "embedrt/format.hpp"
#include "embedrt/table_file.hpp"

namespace embedrt {

class Model {
 public:
  static Result<Model> open(const std::string& path, const OpenOptions& options = {});
  static Result<Model> from_file(TableFile file);

  const TableFile& file() const noexcept { return file_; }
  const Metadata& metadata() const noexcept { return file_.metadata(); }

  const TableView& token() const noexcept { return *token_; }
  const TableView* position() const noexcept { return position_; }      // nullptr if none
  const TableView* segment() const noexcept { return segment_; }        // nullptr if none
  const TableView* norm_weight() const noexcept { return norm_weight_; }  // nullptr if none
  const TableView* norm_bias() const noexcept { return norm_bias_; }      // nullptr if none

  std::uint64_t dim() const noexcept { return token_->dim; }
  std::uint64_t vocab_size() const noexcept { return token_->rows; }
  // Positions accepted: position rows minus the position offset (no limit without a table).
  std::uint64_t max_positions() const noexcept;

 private:
  explicit Model(TableFile file) : file_(std::move(file)) {}
  TableFile file_;
  const TableView* token_ = nullptr;
  const TableView* position_ = nullptr;
  const TableView* segment_ = nullptr;
  const TableView* norm_weight_ = nullptr;
  const TableView* norm_bias_ = nullptr;
};

}  // namespace embedrt
