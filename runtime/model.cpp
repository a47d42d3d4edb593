#include "embedrt/model.hpp"

#include <limits>

namespace embedrt {
namespace {

Status check_width(const std::string& path, const TableView* table, std::uint64_t dim) {
  if (table != nullptr && table->dim != dim) {
    return Error(ErrorCode::kMalformed, "'" + path + "': " + std::string(role_name(table->role)) +
                                            " table '" + table->name + "' has dim " +
                                            std::to_string(table->dim) + ", the token table has " +
                                            std::to_string(dim));
  }
  return {};
}

Status check_norm(const std::string& path, const TableView* table) {
  if (table != nullptr && (table->rows != 1 || table->dtype != DType::kF32)) {
    return Error(ErrorCode::kMalformed, "'" + path + "': " + std::string(role_name(table->role)) +
                                            " table '" + table->name + "' must be one f32 row, is [" +
                                            std::to_string(table->rows) + ", " +
                                            std::to_string(table->dim) + "] " +
                                            std::string(dtype_name(table->dtype)));
  }
  return {};
}

}  // namespace

Result<Model> Model::open(const std::string& path, const OpenOptions& options) {
  auto file = TableFile::open(path, options);
  if (!file) return std::move(file).error();
  return from_file(std::move(*file));
}

Result<Model> Model::from_file(TableFile file) {
  Model m(std::move(file));
  const std::string& path = m.file_.path();
  m.token_ = m.file_.find(Role::kToken);
  if (m.token_ == nullptr) {
    return Error(ErrorCode::kNotFound, "'" + path + "': no table has the role 'token'");
  }
  m.position_ = m.file_.find(Role::kPosition);
  m.segment_ = m.file_.find(Role::kSegment);
  m.norm_weight_ = m.file_.find(Role::kNormWeight);
  m.norm_bias_ = m.file_.find(Role::kNormBias);
  const std::uint64_t dim = m.token_->dim;
  for (const TableView* t : {m.position_, m.segment_, m.norm_weight_, m.norm_bias_}) {
    if (Status s = check_width(path, t, dim); !s) return std::move(s).error();
  }
  for (const TableView* t : {m.norm_weight_, m.norm_bias_}) {
    if (Status s = check_norm(path, t); !s) return std::move(s).error();
  }
  if (m.norm_bias_ != nullptr && m.norm_weight_ == nullptr) {
    return Error(ErrorCode::kMalformed, "'" + path + "': a norm_bias table without a norm_weight table");
  }

  const Metadata& meta = m.metadata();
  const bool has_position = m.position_ != nullptr;
  if (has_position != (meta.position_kind != PositionKind::kNone)) {
    return Error(ErrorCode::kMalformed,
                 "'" + path + "': position.kind is '" +
                     std::string(position_kind_name(meta.position_kind)) + "' but the file " +
                     (has_position ? "has" : "has no") + " position table");
  }
  if (has_position) {
    if (meta.position_offset >= m.position_->rows) {
      return Error(ErrorCode::kMalformed, "'" + path + "': position.offset " +
                                              std::to_string(meta.position_offset) +
                                              " leaves no row of the position table (" +
                                              std::to_string(m.position_->rows) + " rows)");
    }
    if (meta.context_length > m.position_->rows - meta.position_offset) {
      return Error(ErrorCode::kMalformed,
                   "'" + path + "': context_length " + std::to_string(meta.context_length) +
                       " exceeds the position table's " + std::to_string(m.position_->rows) +
                       " rows minus position.offset " + std::to_string(meta.position_offset));
    }
  }
  if (meta.padding_id >= 0 && (!has_position || meta.position_offset == 0)) {
    return Error(ErrorCode::kMalformed, "'" + path + "': position.padding_id " + std::to_string(meta.padding_id) +
                                            " needs a position table and a position.offset of at least 1 "
                                            "(pad tokens take row position.offset - 1)");
  }
  return m;
}

std::uint64_t Model::max_positions() const noexcept {
  if (position_ == nullptr) return std::numeric_limits<std::uint64_t>::max();
  return position_->rows - metadata().position_offset;
}

}  // namespace embedrt
