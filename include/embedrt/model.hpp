// A Model is an opened .embt file whose tables have been checked to fit together (FORMAT.md
// section 7): one or more outputs, each a token table with optional position / segment tables of
// its width, optional LayerNorm weight and bias, and its rules (scales, positions, shape, ...).
// Output 0, the primary output, finds its tables by role; the others name theirs (1.2).
//
// Thread safety: immutable; share one Model between any number of threads. It keeps the mapping
// alive, so TableView and OutputInfo pointers obtained from it stay valid as long as the Model
// (or a copy) does.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "embedrt/error.hpp"
#include "embedrt/format.hpp"
#include "embedrt/table_file.hpp"

namespace embedrt {

// One output of a model: its tables, resolved, and its rules.
struct OutputInfo {
  std::string name;
  const OutputRules* rules = nullptr;  // scales, positions, shape, id rule, pooling defaults
  const TableView* token = nullptr;
  const TableView* position = nullptr;         // nullptr if none
  const TableView* segment = nullptr;          // nullptr if none
  const TableView* norm_weight = nullptr;      // nullptr if none
  const TableView* norm_bias = nullptr;        // nullptr if none
  const TableView* pooling_weights = nullptr;  // f32 [1, vocab]: a weight per id; nullptr if none
  const TableView* id_map = nullptr;           // int32 [1, vocab]: id -> token row (2.0); nullptr if none
  std::vector<std::uint64_t> token_shape;      // the shape of one token's output; product == dim()

  std::uint64_t dim() const noexcept { return token->dim; }
  // Ids accepted: the id map's entries, or the token table's rows.
  std::uint64_t vocab_size() const noexcept { return id_map ? id_map->dim : token->rows; }
  // The token row of an id in [0, vocab_size()) (through the id map; its entries are checked by
  // the Embedder before use).
  std::int64_t row_of(std::uint64_t id) const noexcept;
  // Positions accepted: position rows minus the position offset (no limit without a table).
  std::uint64_t max_positions() const noexcept;
};

class Model {
 public:
  static Result<Model> open(const std::string& path, const OpenOptions& options = {});
  static Result<Model> from_file(TableFile file);

  const TableFile& file() const noexcept { return file_; }
  const Metadata& metadata() const noexcept { return file_.metadata(); }

  // Every output, the primary one first.
  std::span<const OutputInfo> outputs() const noexcept { return outputs_; }
  // The output with this name, or nullptr.
  const OutputInfo* find_output(std::string_view name) const noexcept;

  // The primary output's tables and sizes (output 0).
  const TableView& token() const noexcept { return *outputs_[0].token; }
  const TableView* position() const noexcept { return outputs_[0].position; }
  const TableView* segment() const noexcept { return outputs_[0].segment; }
  const TableView* norm_weight() const noexcept { return outputs_[0].norm_weight; }
  const TableView* norm_bias() const noexcept { return outputs_[0].norm_bias; }
  std::uint64_t dim() const noexcept { return outputs_[0].dim(); }
  std::uint64_t vocab_size() const noexcept { return outputs_[0].vocab_size(); }
  std::uint64_t max_positions() const noexcept { return outputs_[0].max_positions(); }

 private:
  explicit Model(TableFile file) : file_(std::move(file)) {}
  TableFile file_;
  std::vector<OutputInfo> outputs_;
};

}  // namespace embedrt
