#include "embedrt/model.hpp"

#include <cstring>
#include <limits>
#include <tuple>

#include "checked_math.hpp"
#include "output_rule_keys.hpp"

namespace embedrt {
namespace {

// Resolves one output's tables and checks the model rules of FORMAT.md section 7 for it. The
// primary output finds its tables by role and its messages keep their 1.0 wording; other outputs
// find theirs by name, and their messages start with the output's name.
class OutputResolver {
 public:
  OutputResolver(const TableFile& file, const OutputRules& rules, bool primary)
      : file_(file), rules_(rules), primary_(primary),
        prefix_("'" + file.path() + "': " + (primary ? std::string() : "output '" + rules.name + "': ")) {}

  Result<OutputInfo> resolve() {
    OutputInfo o;
    o.name = rules_.name;
    o.rules = &rules_;
    if (primary_) {
      o.token = file_.find(Role::kToken);
      if (o.token == nullptr) return Error(ErrorCode::kNotFound, prefix_ + "no table has the role 'token'");
      o.position = file_.find(Role::kPosition);
      o.segment = file_.find(Role::kSegment);
      o.norm_weight = file_.find(Role::kNormWeight);
      o.norm_bias = file_.find(Role::kNormBias);
    } else {
      for (auto [table, name, key] : {std::tuple{&o.token, &rules_.token_table, "token"},
                                      std::tuple{&o.position, &rules_.position_table, "position"},
                                      std::tuple{&o.segment, &rules_.segment_table, "segment"},
                                      std::tuple{&o.norm_weight, &rules_.norm_weight_table, "norm_weight"},
                                      std::tuple{&o.norm_bias, &rules_.norm_bias_table, "norm_bias"}}) {
        auto found = named(*name, key);
        if (!found) return std::move(found).error();
        *table = *found;
      }
    }
    auto weights = named(rules_.pooling_weights_table, "pooling.weights");
    if (!weights) return std::move(weights).error();
    o.pooling_weights = *weights;
    auto id_map = named(rules_.id_map_table, "ids.map");
    if (!id_map) return std::move(id_map).error();
    o.id_map = *id_map;
    for (const TableView* t : {o.token, o.position, o.segment, o.norm_weight, o.norm_bias}) {
      if (t != nullptr && !is_value_dtype(t->dtype)) {
        return malformed(what(t) + " is " + std::string(dtype_name(t->dtype)) + ", which holds no embedding values");
      }
    }
    if (const TableView* m = o.id_map; m != nullptr && (m->rows != 1 || m->dtype != DType::kInt32)) {
      return malformed("ids.map table '" + m->name + "' must be one int32 row (an entry per id), is [" +
                       std::to_string(m->rows) + ", " + std::to_string(m->dim) + "] " + std::string(dtype_name(m->dtype)));
    }

    const std::uint64_t dim = o.token->dim;
    for (const TableView* t : {o.position, o.segment, o.norm_weight, o.norm_bias}) {
      if (t != nullptr && t->dim != dim) {
        return malformed(what(t) + " has dim " + std::to_string(t->dim) + ", the token table has " + std::to_string(dim));
      }
    }
    for (const TableView* t : {o.norm_weight, o.norm_bias}) {
      if (t != nullptr && (t->rows != 1 || t->dtype != DType::kF32)) {
        return malformed(what(t) + " must be one f32 row, is [" + std::to_string(t->rows) + ", " + std::to_string(t->dim) +
                         "] " + std::string(dtype_name(t->dtype)));
      }
    }
    if (o.norm_bias != nullptr && o.norm_weight == nullptr) {
      return malformed("a norm_bias table without a norm_weight table");
    }
    if (const TableView* w = o.pooling_weights; w != nullptr && (w->rows != 1 || w->dim != o.vocab_size() || w->dtype != DType::kF32)) {
      return malformed("pooling.weights table '" + w->name + "' must be [1, " + std::to_string(o.vocab_size()) +
                       "] f32 (a weight per id), is [" + std::to_string(w->rows) + ", " + std::to_string(w->dim) + "] " +
                       std::string(dtype_name(w->dtype)));
    }
    if (Status s = check_positions(o.position); !s) return std::move(s).error();

    o.token_shape = rules_.shape.empty() ? std::vector<std::uint64_t>{dim} : rules_.shape;
    std::uint64_t elements = 1;
    for (std::uint64_t n : o.token_shape) {
      const auto product = detail::checked_mul(elements, n);
      elements = product ? *product : 0;
    }
    if (elements != dim) {
      return malformed("shape [" + detail::shape_text(o.token_shape) + "] does not hold one token's " + std::to_string(dim) +
                       " values (the token table's dim)");
    }
    return o;
  }

 private:
  Error malformed(const std::string& message) const { return Error(ErrorCode::kMalformed, prefix_ + message); }

  std::string what(const TableView* t) const { return std::string(role_name(t->role)) + " table '" + t->name + "'"; }

  // The table a rule names (nullptr for an empty name).
  Result<const TableView*> named(const std::string& name, const char* rule) const {
    if (name.empty()) return static_cast<const TableView*>(nullptr);
    const TableView* t = file_.find(name);
    if (t == nullptr) {
      const std::string key = primary_ ? std::string(rule) : "outputs." + rules_.name + "." + rule;
      return Error(ErrorCode::kNotFound, prefix_ + key + " names table '" + name + "', which the file does not have");
    }
    return t;
  }

  Status check_positions(const TableView* position) const {
    const bool has_position = position != nullptr;
    if (primary_ && has_position != (rules_.position_kind != PositionKind::kNone)) {
      return malformed("position.kind is '" + std::string(position_kind_name(rules_.position_kind)) + "' but the file " +
                       (has_position ? "has" : "has no") + " position table");
    }
    if (has_position) {
      if (rules_.position_offset >= position->rows) {
        return malformed("position.offset " + std::to_string(rules_.position_offset) +
                         " leaves no row of the position table (" + std::to_string(position->rows) + " rows)");
      }
      if (rules_.context_length > position->rows - rules_.position_offset) {
        return malformed("context_length " + std::to_string(rules_.context_length) + " exceeds the position table's " +
                         std::to_string(position->rows) + " rows minus position.offset " +
                         std::to_string(rules_.position_offset));
      }
    }
    if (rules_.padding_id >= 0 && (!has_position || rules_.position_offset == 0)) {
      return malformed("position.padding_id " + std::to_string(rules_.padding_id) +
                       " needs a position table and a position.offset of at least 1 (pad tokens take row "
                       "position.offset - 1)");
    }
    return {};
  }

  const TableFile& file_;
  const OutputRules& rules_;
  bool primary_;
  std::string prefix_;
};

}  // namespace

std::int64_t OutputInfo::row_of(std::uint64_t id) const noexcept {
  if (id_map == nullptr) return static_cast<std::int64_t>(id);
  std::int32_t row;
  std::memcpy(&row, id_map->bytes.data() + 4 * id, 4);
  return row;
}

std::uint64_t OutputInfo::max_positions() const noexcept {
  if (position == nullptr) return std::numeric_limits<std::uint64_t>::max();
  return position->rows - rules->position_offset;
}

Result<Model> Model::open(const std::string& path, const OpenOptions& options) {
  auto file = TableFile::open(path, options);
  if (!file) return std::move(file).error();
  return from_file(std::move(*file));
}

Result<Model> Model::from_file(TableFile file) {
  Model m(std::move(file));
  const Metadata& meta = m.file_.metadata();
  auto primary = OutputResolver(m.file_, meta.primary(), true).resolve();
  if (!primary) return std::move(primary).error();
  m.outputs_.push_back(std::move(*primary));
  for (const OutputRules& rules : meta.outputs) {
    auto output = OutputResolver(m.file_, rules, false).resolve();
    if (!output) return std::move(output).error();
    m.outputs_.push_back(std::move(*output));
  }
  return m;
}

const OutputInfo* Model::find_output(std::string_view name) const noexcept {
  for (const OutputInfo& o : outputs_) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

}  // namespace embedrt
