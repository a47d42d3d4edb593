// plan_model: chooses a recipe (from config.json, a preset, or tensor names when they fit one
// computation), finds its tables, checks them against the config, and fills the metadata.
// Whatever it cannot settle it refuses, naming what it saw and what would settle it.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "embedrt/half.hpp"
#include "embedrt/import.hpp"
#include "model_config.hpp"
#include "recipe_table.hpp"

namespace embedrt::import {
namespace {

bool matches(const std::string& name, std::string_view suffix) {
  if (name == suffix) return true;
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         name[name.size() - suffix.size() - 1] == '.';
}

std::vector<const SourceTensor*> find_suffix(const std::vector<SourceTensor>& tensors, std::string_view suffix) {
  std::vector<const SourceTensor*> found;
  for (const SourceTensor& t : tensors) {
    if (matches(t.name, suffix)) found.push_back(&t);
  }
  return found;
}

std::string candidate_list(const std::vector<SourceTensor>& tensors) {
  std::string list;
  std::size_t shown = 0;
  for (const SourceTensor& t : tensors) {
    if (t.shape.size() != 2) continue;
    if (shown++ == 25) {
      list += "\n  ...";
      break;
    }
    list += "\n  " + t.name + " " + std::string(source_dtype_name(t.dtype)) + " " + shape_string(t.shape);
  }
  return list.empty() ? " (none: no 2-D tensor in the input)" : list;
}

std::string joined(const Names& names, std::string_view separator = ", ") {
  std::string out;
  for (std::string_view n : names) out += std::string(out.empty() ? "" : separator) + std::string(n);
  return out;
}

std::string recipe_list() {
  std::string out;
  for (const Recipe& r : recipes()) out += std::string(out.empty() ? "" : ", ") + std::string(r.name);
  return out;
}

const Recipe* recipe_named(std::string_view name) {
  for (const Recipe& r : recipes()) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

const Recipe* recipe_for_model_type(std::string_view model_type) {
  for (const Recipe& r : recipes()) {
    if (std::find(r.model_types.begin(), r.model_types.end(), model_type) != r.model_types.end()) return &r;
  }
  return nullptr;
}

// The first suffix (in preference order) that names exactly one tensor. Several tensors for the
// preferred suffix is an ambiguity the user settles with an explicit name.
Result<const SourceTensor*> find_table(const std::vector<SourceTensor>& tensors, const Names& suffixes, Role role) {
  for (std::string_view suffix : suffixes) {
    const auto found = find_suffix(tensors, suffix);
    if (found.size() == 1) return found[0];
    if (found.size() > 1) {
      std::string list;
      for (const SourceTensor* t : found) list += "\n  " + t->name;
      return Error(ErrorCode::kInvalidArgument, "several candidates for the " + std::string(role_name(role)) +
                                                    " table ('" + std::string(suffix) +
                                                    "'); name one explicitly (`overrides." + std::string(role_name(role)) +
                                                    "`) or narrow with `key`:" + list);
    }
  }
  return static_cast<const SourceTensor*>(nullptr);
}

const SourceTensor* find_exact(const std::vector<SourceTensor>& tensors, const std::string& name) {
  for (const SourceTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// What a recipe computes, to tell when several recipes that fit a checkpoint's names agree.
struct Computation {
  PositionRule positions;
  std::uint64_t offset;
  ScaleRule scale;
  bool norm, segment;
  bool operator==(const Computation&) const = default;
};

Computation computation_of(const Recipe& r) {
  return {r.positions, r.position_offset, r.scale, !r.norm_weight.empty(), !r.segment.empty()};
}

// How many of a recipe's tables a checkpoint has (token included), or 0 if it lacks the token
// or a table the recipe always needs.
std::size_t name_fit(const Recipe& r, const std::vector<SourceTensor>& tensors) {
  const auto present = [&](const Names& names) {
    return std::any_of(names.begin(), names.end(), [&](std::string_view s) { return !find_suffix(tensors, s).empty(); });
  };
  if (!present(r.token)) return 0;
  std::size_t n = 1;
  for (const Names* names : {&r.position, &r.segment, &r.norm_weight}) {
    if (names->empty()) continue;
    const bool optional = names == &r.segment || (names == &r.position && !r.positions_if.empty());
    if (present(*names)) {
      ++n;
    } else if (!optional) {
      return 0;
    }
  }
  for (const ExtraOutput& o : r.extra_outputs) {
    if (!present(o.token)) return 0;
    ++n;
  }
  return n;
}

bool has_prefix(const std::vector<SourceTensor>& tensors, std::string_view prefix) {
  const std::string p = std::string(prefix) + ".";
  return std::any_of(tensors.begin(), tensors.end(), [&](const SourceTensor& t) { return t.name.rfind(p, 0) == 0; });
}

// Without config.json: the recipes whose tables are all present and that use the most of them;
// if they do not all compute the same thing, the weight-name prefix (transformers'
// base_model_prefix) may settle it; otherwise the checkpoint is ambiguous and refused.
Result<const Recipe*> detect_from_names(const std::vector<SourceTensor>& tensors, std::string& evidence,
                                        bool pooling_given) {
  std::size_t best = 0;
  std::vector<const Recipe*> fits;
  for (const Recipe& r : recipes()) {
    // Recipes that names cannot tell apart from others (a bare "weight") are chosen by name, or,
    // for a pooled table, when pooling is given and nothing else fits.
    if (!r.detect_by_names) continue;
    const std::size_t n = name_fit(r, tensors);
    if (n == 0 || n < best) continue;
    if (n > best) fits.clear();
    best = n;
    fits.push_back(&r);
  }
  if (fits.empty() && pooling_given) {
    for (const Recipe& r : recipes()) {
      if (r.needs_pooling && name_fit(r, tensors) > 0) fits.push_back(&r);
    }
  }
  if (fits.empty()) {
    for (const Recipe& r : recipes()) {
      if (r.needs_pooling && name_fit(r, tensors) > 0) {
        return Error(ErrorCode::kNotFound, "no config.json, and the tensor names fit only " + std::string(r.name) + " (" +
                                               std::string(r.rules) + "), which needs the `pooling` its bags were "
                                               "trained with (sum, mean or max)", {.field = "pooling"});
      }
    }
    return Error(ErrorCode::kNotFound, "no config.json and no known model family in the tensor names (" +
                                           recipe_list() +
                                           "); put the model's config.json beside it (`config_path`), choose a `preset`, "
                                           "or name the tables (`overrides.token`, `overrides.position`). 2-D tensors seen:" +
                                           candidate_list(tensors));
  }
  const auto all_agree = [](const std::vector<const Recipe*>& rs) {
    return std::all_of(rs.begin(), rs.end(), [&](const Recipe* r) { return computation_of(*r) == computation_of(*rs[0]); });
  };
  std::string prefix_note;
  if (!all_agree(fits)) {
    std::vector<const Recipe*> prefixed;
    for (const Recipe* r : fits) {
      // A prefix only counts when it is specific (not "model" or "transformer", which many share).
      for (std::string_view p : r->name_prefixes) {
        if (p != "model" && p != "transformer" && has_prefix(tensors, p)) {
          prefixed.push_back(r);
          prefix_note = " and the weight prefix '" + std::string(p) + ".'";
          break;
        }
      }
    }
    if (!prefixed.empty() && all_agree(prefixed)) fits = prefixed;
  }
  if (!all_agree(fits)) {
    std::string list;
    for (const Recipe* r : fits) list += "\n  " + std::string(r->name) + ": " + std::string(r->rules);
    return Error(ErrorCode::kUnsupported,
                 "no config.json, and the tensor names fit several families that compute different embeddings:" +
                     list + "\nput the model's config.json beside the checkpoint (or name it with `config_path`), or choose a `preset`");
  }
  const Recipe* chosen = fits[0];
  const auto token = find_table(tensors, chosen->token, Role::kToken);
  evidence = "no config.json; tensor names" + prefix_note + " (token table '" +
             (token && *token ? (*token)->name : std::string("?")) + "')";
  if (fits.size() > 1) {
    Names names;
    for (const Recipe* r : fits) names.push_back(r->name);
    evidence += " fit " + joined(names) + ", which compute the same";
  }
  return chosen;
}

template <typename T>
Result<T> value_or(Result<std::optional<T>> value, T fallback) {
  if (!value) return std::move(value).error();
  return value->value_or(fallback);
}

Error config_mismatch(const ModelConfig& config, const std::string& what) {
  return Error(ErrorCode::kMalformed, "'" + config.path() + "' contradicts the tensors: " + what +
                                                "; check that config.json belongs to these weights (`config_path` names "
                                                "another, `ignore_config` plans from tensor names)");
}

double round_scale(double scale, DType dtype) {
  switch (dtype) {
    case DType::kBF16: return bf16_to_f32(f32_to_bf16(static_cast<float>(scale)));
    case DType::kF16: return f16_to_f32(f32_to_f16(static_cast<float>(scale)));
    default: return static_cast<float>(scale);
  }
}

std::string format_number(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

PlannedScale sqrt_scale(ScaleRule rule, std::uint64_t width) {
  return {rule == ScaleRule::kSqrtWidthInTableDType ? ScaleRounding::kTableDType : ScaleRounding::kF32,
          std::sqrt(static_cast<double>(width))};
}

// Finds an extra output's table, checks it against the config, and adds its table, rules and
// scale to the plan. Its shape and scale come only from config.json, so the config is required.
Status plan_extra_output(ModelPlan& plan, const ExtraOutput& extra, const std::vector<SourceTensor>& tensors,
                         const ModelConfig* config) {
  auto found = find_table(tensors, extra.token, Role::kOther);
  if (!found) return std::move(found).error();
  if (*found == nullptr) {
    return Error(ErrorCode::kNotFound, plan.family + " has an output '" + std::string(extra.name) +
                                           "' from a table named like '" + joined(extra.token, "' or '") +
                                           "', which the checkpoint does not have. 2-D tensors seen:" +
                                           candidate_list(tensors));
  }
  const SourceTensor& t = **found;
  if (!is_floating(t.dtype) || t.shape.size() != 2 || t.shape[0] <= 0 || t.shape[1] <= 0) {
    return Error(ErrorCode::kInvalidArgument, "table '" + t.name + "' of output '" + std::string(extra.name) + "' is " +
                                                  std::string(source_dtype_name(t.dtype)) + " " + shape_string(t.shape) +
                                                  ", expected a float [rows, dim] table");
  }
  if (config == nullptr) {
    return Error(ErrorCode::kInvalidArgument, plan.family + " needs its config.json: the shape of output '" +
                                                  std::string(extra.name) + "' comes from " + joined(extra.shape_keys) +
                                                  " (`config_path` names it)");
  }
  const auto number = [&](std::string_view key) -> Result<std::uint64_t> {
    auto v = config->u64(key);
    if (!v) return std::move(v).error();
    if (!*v || **v == 0) {
      return Error(ErrorCode::kMalformed, "'" + config->path() + "' has no positive " + std::string(key) + ", which output '" +
                                              std::string(extra.name) + "' needs");
    }
    return **v;
  };
  const auto rows = static_cast<std::uint64_t>(t.shape[0]), width = static_cast<std::uint64_t>(t.shape[1]);
  if (!extra.rows_key.empty()) {
    auto declared = number(extra.rows_key);
    if (!declared) return std::move(declared).error();
    if (*declared != rows) {
      return config_mismatch(*config, std::string(extra.rows_key) + " is " + std::to_string(*declared) + " but table '" +
                                          t.name + "' has " + std::to_string(rows) + " rows");
    }
  }
  OutputRules rules;
  rules.name = std::string(extra.name);
  rules.out_of_range = extra.out_of_range;
  std::uint64_t elements = 1;
  for (std::string_view key : extra.shape_keys) {
    auto n = number(key);
    if (!n) return std::move(n).error();
    rules.shape.push_back(*n);
    elements = *n != 0 && elements > UINT64_MAX / *n ? 0 : elements * *n;
  }
  if (!extra.shape_keys.empty() && elements != width) {
    return config_mismatch(*config, joined(extra.shape_keys, " x ") + " is " + std::to_string(elements) + " but table '" +
                                        t.name + "' is " + std::to_string(width) + " wide");
  }
  PlannedScale scale;
  if (extra.scale != ScaleRule::kNone) {
    auto scale_width = number(extra.scale_width_key);
    if (!scale_width) return std::move(scale_width).error();
    scale = sqrt_scale(extra.scale, *scale_width);
  }
  plan.metadata.outputs.push_back(std::move(rules));
  plan.token_scales.push_back(scale);
  plan.tables.push_back({Role::kOther, &t, nullptr, plan.metadata.outputs.size()});
  plan.explanation += "; output '" + std::string(extra.name) + "' from '" + t.name + "'";
  return {};
}

// A 1-D tensor seen as one row [1, n] (pooling weights and id maps are single-row tables).
const SourceTensor& as_row(ModelPlan& plan, const SourceTensor& t) {
  SourceTensor& row = plan.views.emplace_back(t);
  row.shape = {1, t.shape[0]};
  row.strides = {t.shape[0] * t.strides[0], t.strides[0]};
  return row;
}

// The primary output's pooling defaults (FORMAT.md 1.2): the options given, else config.json's
// keys the recipe names, else the recipe's own; and its per-token weights table, if the model has one.
Status plan_pooling(ModelPlan& plan, const Recipe* recipe, const PlanOptions& options,
                    const std::vector<SourceTensor>& tensors, const ModelConfig* config) {
  OutputRules& rules = plan.metadata;
  if (recipe != nullptr) {
    rules.pooling = recipe->pooling;
    if (config != nullptr && !recipe->pooling_key.empty()) {
      auto named = config->string(recipe->pooling_key);
      if (!named) return std::move(named).error();
      if (*named) {
        const auto mode = parse_pooling_mode(**named);
        if (!mode || *mode == PoolingMode::kNone) {
          return Error(ErrorCode::kUnsupported, "'" + config->path() + "': " + std::string(recipe->pooling_key) + " '" +
                                                    **named + "' is not a pooling embedrt computes (sum, mean, max)");
        }
        rules.pooling = *mode;
      }
    }
    if (config != nullptr && !recipe->normalize_key.empty()) {
      auto normalize = config->boolean(recipe->normalize_key);
      if (!normalize) return std::move(normalize).error();
      rules.normalize = normalize->value_or(false);
    }
  }
  if (options.pooling) rules.pooling = *options.pooling;
  if (options.normalize) rules.normalize = *options.normalize;
  if (recipe != nullptr && recipe->needs_pooling && rules.pooling == PoolingMode::kNone) {
    return Error(ErrorCode::kInvalidArgument, plan.family + ": the checkpoint does not say how its bags were pooled; "
                                                  "give `pooling` (sum, mean or max)", {.field = "pooling"});
  }
  if (recipe == nullptr) return {};
  const SourceTensor& token = *plan.tables[0].tensor;
  // An id map (model2vec's vocabulary quantization): ids index it, its entries index the rows.
  auto map = find_table(tensors, recipe->id_map, Role::kOther);
  if (!map) return std::move(map).error();
  std::int64_t vocab = token.shape[0];
  if (*map != nullptr) {
    const SourceTensor& m = **map;
    const bool integer = m.dtype == SourceDType::kI32 || m.dtype == SourceDType::kI64;
    if (!integer || m.shape.size() != 1 || m.shape[0] <= 0) {
      return Error(ErrorCode::kInvalidArgument, "id map '" + m.name + "' is " + std::string(source_dtype_name(m.dtype)) +
                                                    " " + shape_string(m.shape) + ", expected integers, one per id");
    }
    vocab = m.shape[0];
    plan.tables.push_back({Role::kOther, &as_row(plan, m), nullptr, 0, ChosenTable::Use::kIdMap});
    plan.explanation += "; id map '" + m.name + "' (" + std::to_string(vocab) + " ids onto " +
                        std::to_string(token.shape[0]) + " rows)";
  }
  auto weights = find_table(tensors, recipe->pooling_weights, Role::kOther);
  if (!weights) return std::move(weights).error();
  if (*weights == nullptr) return {};
  const SourceTensor& w = **weights;
  if (!is_floating(w.dtype) || w.shape.size() != 1 || w.shape[0] != vocab) {
    return Error(ErrorCode::kInvalidArgument, "weights '" + w.name + "' are " + std::string(source_dtype_name(w.dtype)) +
                                                  " " + shape_string(w.shape) + ", expected one float per id ([" +
                                                  std::to_string(vocab) + "])");
  }
  plan.tables.push_back({Role::kOther, &as_row(plan, w), nullptr, 0, ChosenTable::Use::kPoolingWeights});
  plan.explanation += "; per-id weights '" + w.name + "'";
  return {};
}

}  // namespace

std::vector<std::string> recipe_names() {
  std::vector<std::string> names;
  for (const Recipe& r : recipes()) names.emplace_back(r.name);
  return names;
}

Result<ModelPlan> plan_model(const Checkpoint& checkpoint, const PlanOptions& options) {
  const std::vector<SourceTensor>& tensors = checkpoint.tensors;
  const TableOverrides& overrides = options.overrides;
  ModelPlan plan;
  std::optional<ModelConfig> config;
  if (!checkpoint.config_json.empty()) {
    auto parsed = ModelConfig::parse(checkpoint.config_json, checkpoint.config_path);
    if (!parsed) return std::move(parsed).error();
    config = std::move(*parsed);
  }

  // 1. The recipe.
  const Recipe* recipe = nullptr;
  std::string evidence;
  const Recipe* from_config = nullptr;
  if (config) {
    const std::string& type = config->model_type();
    if (type.empty()) {
      return Error(ErrorCode::kInvalidArgument, "'" + config->path() + "' has no model_type; choose a `preset` (" +
                                                    recipe_list() + ") or set `ignore_config`");
    }
    from_config = recipe_for_model_type(type);
    if (from_config == nullptr && !config->text_model_type().empty()) {
      from_config = recipe_for_model_type(config->text_model_type());
    }
    std::string archs;
    for (const std::string& a : config->architectures()) archs += (archs.empty() ? "" : ", ") + a;
    evidence = "'" + config->path() + "': model_type '" + type + "'" +
               (config->text_model_type().empty() ? "" : ", text_config.model_type '" + config->text_model_type() + "'") +
               (archs.empty() ? "" : ", architectures [" + archs + "]");
    if (from_config == nullptr && options.preset == "auto" && overrides.token.empty()) {
      return Error(ErrorCode::kUnsupported,
                   "model_type '" + type + "' (" + evidence + ") has no recipe; embedrt knows " + recipe_list() +
                       ". Converting it needs the tables named (`overrides.token`, `overrides.position`, `overrides.segment`, "
                       "`overrides.norm_weight`) and `ignore_config` (you then vouch for the computation)");
    }
  }
  if (options.preset != "auto") {
    recipe = recipe_named(options.preset);
    if (recipe == nullptr) {
      return Error(ErrorCode::kInvalidArgument, "unknown preset '" + options.preset + "'; known: auto, " + recipe_list());
    }
    if (from_config != nullptr && from_config != recipe) {
      return Error(ErrorCode::kInvalidArgument,
                   "`preset` " + options.preset + " contradicts " + evidence + " (recipe '" +
                       std::string(from_config->name) + "'); drop the `preset`, or set `ignore_config` to override the config");
    }
    evidence = from_config ? evidence : "preset " + options.preset;
  } else if (from_config != nullptr) {
    recipe = from_config;
  } else if (!config && overrides.token.empty()) {
    auto detected = detect_from_names(tensors, evidence, options.pooling.has_value());
    if (!detected) return std::move(detected).error();
    recipe = *detected;
  }
  if (recipe == nullptr) evidence = "custom tables named on the command line";
  plan.family = recipe ? std::string(recipe->name) : "custom";
  plan.explanation = evidence;

  // 2. Config values the recipe reads (absent config: the recipe's defaults).
  const auto cfg_bool = [&](std::string_view key, bool fallback) -> Result<bool> {
    if (!config || key.empty()) return fallback;
    return value_or(config->boolean(key), fallback);
  };
  bool use_positions = recipe != nullptr && recipe->positions != PositionRule::kNone;
  if (recipe != nullptr && !recipe->positions_if.empty()) {
    auto enabled = cfg_bool(recipe->positions_if, true);
    if (!enabled) return std::move(enabled).error();
    use_positions = *enabled;
  }
  if (config && use_positions) {
    auto kind = config->string("position_embedding_type");
    if (!kind) return std::move(kind).error();
    if (*kind && **kind != "absolute") {
      return Error(ErrorCode::kUnsupported, "'" + config->path() + "': position_embedding_type '" + **kind +
                                                "': relative positions live in the attention layers, not in a table "
                                                "embedrt can add; not supported");
    }
  }
  bool use_segment = recipe != nullptr && !recipe->segment.empty();
  if (config && use_segment) {
    auto types = config->u64("type_vocab_size");
    if (!types) return std::move(types).error();
    if (*types && **types == 0) use_segment = false;
  }

  // 3. The tables: explicit names win, else the recipe's suffixes.
  struct RoleSpec {
    Role role;
    const std::string& name;
    const Names* suffixes;
  };
  const Names none;
  const RoleSpec specs[] = {
      {Role::kToken, overrides.token, recipe ? &recipe->token : &none},
      {Role::kPosition, overrides.position, recipe && use_positions ? &recipe->position : &none},
      {Role::kSegment, overrides.segment, recipe && use_segment ? &recipe->segment : &none},
      {Role::kNormWeight, overrides.norm_weight, recipe ? &recipe->norm_weight : &none},
      {Role::kNormBias, overrides.norm_bias, recipe ? &recipe->norm_bias : &none},
  };
  for (const RoleSpec& spec : specs) {
    const SourceTensor* chosen = nullptr;
    if (!spec.name.empty()) {
      chosen = find_exact(tensors, spec.name);
      if (chosen == nullptr) {
        return Error(ErrorCode::kNotFound, "no tensor named '" + spec.name + "' (for the " +
                                               std::string(role_name(spec.role)) + " table); 2-D tensors seen:" +
                                               candidate_list(tensors));
      }
    } else {
      auto found = find_table(tensors, *spec.suffixes, spec.role);
      if (!found) return std::move(found).error();
      chosen = *found;
    }
    if (chosen != nullptr) plan.tables.push_back({spec.role, chosen});
  }
  const auto table = [&plan](Role role) -> ChosenTable* {
    for (ChosenTable& c : plan.tables) {
      if (c.role == role) return &c;
    }
    return nullptr;
  };
  ChosenTable* token_choice = table(Role::kToken);
  if (token_choice == nullptr && recipe != nullptr && config) {
    // Tied weights saved under the output projection's name only.
    auto tied = cfg_bool("tie_word_embeddings", true);
    if (!tied) return std::move(tied).error();
    if (*tied) {
      auto head = find_table(tensors, {"lm_head.weight"}, Role::kToken);
      if (!head) return std::move(head).error();
      if (*head != nullptr) {
        plan.tables.insert(plan.tables.begin(), {Role::kToken, *head});
        token_choice = &plan.tables.front();
        plan.explanation += "; token table from the tied '" + (*head)->name + "'";
      }
    }
  }
  if (token_choice == nullptr) {
    return Error(ErrorCode::kNotFound, "no token table for " + plan.family + " (expected a tensor named like '" +
                                           (recipe ? joined(recipe->token, "' or '") : std::string("?")) +
                                           "'; name it with `overrides.token`). 2-D tensors seen:" + candidate_list(tensors));
  }
  if (recipe != nullptr && use_positions && table(Role::kPosition) == nullptr) {
    return Error(ErrorCode::kNotFound, plan.family + " needs a position table (a tensor named like '" +
                                           joined(recipe->position, "' or '") +
                                           "'); name it with `overrides.position`. 2-D tensors seen:" + candidate_list(tensors));
  }
  if (recipe != nullptr && !recipe->norm_weight.empty() && table(Role::kNormWeight) == nullptr) {
    return Error(ErrorCode::kNotFound, plan.family + " needs its embedding LayerNorm (a tensor named like '" +
                                           joined(recipe->norm_weight, "' or '") +
                                           "'); name it with `overrides.norm_weight`. 2-D tensors seen:" + candidate_list(tensors));
  }
  const SourceTensor& token = *token_choice->tensor;

  // 4. Dtypes and shapes.
  for (const ChosenTable& c : plan.tables) {
    const SourceTensor& t = *c.tensor;
    const std::string what = std::string(role_name(c.role)) + " table '" + t.name + "'";
    if (!is_floating(t.dtype)) {
      return Error(ErrorCode::kInvalidArgument, what + " has dtype " + std::string(source_dtype_name(t.dtype)) +
                                                    "; an embedding table needs float32, float16, bfloat16 or float64");
    }
    const bool norm = c.role == Role::kNormWeight || c.role == Role::kNormBias;
    const bool shape_ok = norm ? (t.shape.size() == 1 || (t.shape.size() == 2 && t.shape[0] == 1))
                               : t.shape.size() == 2 && t.shape[0] > 0 && t.shape[1] > 0;
    if (!shape_ok) {
      return Error(ErrorCode::kInvalidArgument, what + " has shape " + shape_string(t.shape) + ", expected " +
                                                    (norm ? "[dim]" : "[rows, dim]"));
    }
  }
  if (table(Role::kNormBias) != nullptr && table(Role::kNormWeight) == nullptr) {
    return Error(ErrorCode::kInvalidArgument, "a LayerNorm bias without a LayerNorm weight");
  }

  // 5. A linear map applied to every token row (OPT-350m's project_in) is folded into the table.
  std::uint64_t width = static_cast<std::uint64_t>(token.shape[1]);
  if (recipe != nullptr && !recipe->projection.empty()) {
    auto projection = find_table(tensors, {recipe->projection}, Role::kOther);
    if (!projection) return std::move(projection).error();
    if (*projection != nullptr) {
      const SourceTensor& w = **projection;
      if (!is_floating(w.dtype) || w.shape.size() != 2 || static_cast<std::uint64_t>(w.shape[1]) != width) {
        return Error(ErrorCode::kInvalidArgument, "projection '" + w.name + "' is " + std::string(source_dtype_name(w.dtype)) +
                                                      " " + shape_string(w.shape) + ", expected a float [hidden, " +
                                                      std::to_string(width) + "] matrix");
      }
      token_choice->projection = &w;
      width = static_cast<std::uint64_t>(w.shape[0]);
      plan.explanation += "; '" + w.name + "' folded into the token table (E @ W^T in f64)";
      plan.metadata.extra["recipe.projection"] = w.name + " folded into " + token.name + " (E @ W^T computed in f64)";
    }
  }
  for (const ChosenTable& c : plan.tables) {
    if (c.role == Role::kToken || c.output != 0) continue;
    if (static_cast<std::uint64_t>(c.tensor->shape.back()) != width) {
      return Error(ErrorCode::kInvalidArgument, std::string(role_name(c.role)) + " table '" + c.tensor->name +
                                                    "' has width " + std::to_string(c.tensor->shape.back()) +
                                                    ", the token table" + (token_choice->projection ? " (projected)" : "") +
                                                    " has " + std::to_string(width));
    }
  }

  // 6. The config must describe these tensors.
  if (config && recipe != nullptr) {
    auto vocab = config->u64("vocab_size");
    if (!vocab) return std::move(vocab).error();
    if (*vocab && **vocab != static_cast<std::uint64_t>(token.shape[0])) {
      return config_mismatch(*config, "vocab_size is " + std::to_string(**vocab) + " but token table '" + token.name +
                                          "' has " + std::to_string(token.shape[0]) + " rows");
    }
    for (std::string_view key : recipe->width_keys) {
      auto declared = config->u64(key);
      if (!declared) return std::move(declared).error();
      if (!*declared) continue;
      const auto actual = static_cast<std::uint64_t>(token.shape[1]);
      if (**declared != actual) {
        return config_mismatch(*config, std::string(key) + " is " + std::to_string(**declared) + " but token table '" +
                                            token.name + "' is " + std::to_string(actual) + " wide");
      }
      break;
    }
    if (const ChosenTable* position = table(Role::kPosition)) {
      for (std::string_view key : recipe->rows_keys) {
        auto declared = config->u64(key);
        if (!declared) return std::move(declared).error();
        if (!*declared) continue;
        const auto rows = static_cast<std::uint64_t>(position->tensor->shape[0]);
        if (**declared + recipe->rows_extra != rows) {
          return config_mismatch(*config, std::string(key) + " is " + std::to_string(**declared) +
                                              (recipe->rows_extra ? " (+ " + std::to_string(recipe->rows_extra) + ")" : "") +
                                              " but position table '" + position->tensor->name + "' has " +
                                              std::to_string(rows) + " rows");
        }
        break;
      }
    }
    if (recipe->name == "deberta_v2") {
      auto embedding = config->u64("embedding_size");
      auto hidden = config->u64("hidden_size");
      if (!embedding) return std::move(embedding).error();
      if (!hidden) return std::move(hidden).error();
      if (*embedding && *hidden && **embedding != **hidden) {
        return Error(ErrorCode::kUnsupported, "'" + config->path() + "': embedding_size " + std::to_string(**embedding) +
                                                  " != hidden_size " + std::to_string(**hidden) +
                                                  ": DeBERTa-v2 projects the summed embeddings before its LayerNorm, "
                                                  "which cannot be folded into the tables exactly; not supported");
      }
    }
  }

  // 6b. Multimodal soft tokens (Gemma 3n's wrapper): the token table stops where they begin.
  if (recipe != nullptr && config && !recipe->text_vocab_keys.empty()) {
    std::optional<std::uint64_t> limit;
    std::string limit_key;
    for (std::string_view key : recipe->text_vocab_keys) {
      auto offset = config->u64(key);
      if (!offset) return std::move(offset).error();
      if (*offset && (!limit || **offset < *limit)) limit = **offset, limit_key = std::string(key);
    }
    const auto rows = static_cast<std::uint64_t>(token.shape[0]);
    if (limit && *limit == 0) return config_mismatch(*config, limit_key + " is 0: no id would be a text token");
    if (limit && *limit < rows) {
      SourceTensor& text_rows = plan.views.emplace_back(token);
      text_rows.shape[0] = static_cast<std::int64_t>(*limit);
      token_choice->tensor = &text_rows;
      plan.explanation += "; ids from " + std::to_string(*limit) + " (" + limit_key + ") are multimodal soft tokens "
                          "embedded by other towers: the token table keeps the " + std::to_string(*limit) + " text rows";
    }
  }

  // 7. Outputs of their own tables (Gemma 3n's per-layer inputs): table, rows, shape and scale
  // from the config, which must describe the table.
  if (recipe != nullptr) {
    for (const ExtraOutput& extra : recipe->extra_outputs) {
      if (Status s = plan_extra_output(plan, extra, tensors, config ? &*config : nullptr); !s) return std::move(s).error();
    }
    if (!recipe->output_name.empty()) plan.metadata.name = std::string(recipe->output_name);
  }
  if (Status s = plan_pooling(plan, recipe, options, tensors, config ? &*config : nullptr); !s) {
    return std::move(s).error();
  }

  // 8. Metadata: the recipe's rules with the config's numbers.
  Metadata& m = plan.metadata;
  m.family = plan.family;
  plan.source_dtype = token.dtype;
  m.source_dtype = std::string(source_dtype_name(token.dtype));
  for (const std::string& f : checkpoint.files) m.source_files += (m.source_files.empty() ? "" : "\n") + f;
  if (!checkpoint.config_path.empty()) m.source_files += "\n" + checkpoint.config_path;
  if (const ChosenTable* position = table(Role::kPosition)) {
    m.position_kind = PositionKind::kLearned;
    const auto rows = static_cast<std::uint64_t>(position->tensor->shape[0]);
    if (recipe != nullptr && recipe->positions == PositionRule::kPaddingAware) {
      auto pad = config ? config->i64("pad_token_id") : Result<std::optional<std::int64_t>>(std::optional<std::int64_t>{});
      if (!pad) return std::move(pad).error();
      const std::int64_t padding = pad->value_or(static_cast<std::int64_t>(recipe->default_padding_id));
      if (padding < 0 || static_cast<std::uint64_t>(padding) >= static_cast<std::uint64_t>(token.shape[0])) {
        return Error(ErrorCode::kInvalidArgument, "pad_token_id " + std::to_string(padding) + " is not a row of token table '" +
                                                      token.name + "' (" + std::to_string(token.shape[0]) + " rows)");
      }
      m.padding_id = padding;
      m.position_offset = static_cast<std::uint64_t>(padding) + 1;
      if (!pad->has_value()) plan.explanation += "; pad_token_id " + std::to_string(padding) + " (recipe default)";
    } else {
      m.position_offset = recipe ? recipe->position_offset : 0;
    }
    if (rows <= m.position_offset) {
      return Error(ErrorCode::kInvalidArgument, "position table '" + position->tensor->name + "' has " +
                                                    std::to_string(rows) + " rows, not more than the position offset " +
                                                    std::to_string(m.position_offset));
    }
    m.context_length = rows - m.position_offset;
  }
  if (recipe != nullptr && table(Role::kNormWeight) != nullptr) {
    m.norm_epsilon = recipe->default_epsilon;
    for (std::string_view key : recipe->epsilon_keys) {
      if (!config) break;
      auto eps = config->f64(key);
      if (!eps) return std::move(eps).error();
      if (*eps) {
        m.norm_epsilon = **eps;
        break;
      }
    }
  }
  if (overrides.norm_epsilon) m.norm_epsilon = *overrides.norm_epsilon;
  if (recipe != nullptr && recipe->scale != ScaleRule::kNone) {
    auto enabled = recipe->scale_if.empty() ? Result<bool>(true) : cfg_bool(recipe->scale_if, false);
    if (!enabled) return std::move(enabled).error();
    if (*enabled) plan.token_scales[0] = sqrt_scale(recipe->scale, width);
  }
  if (recipe != nullptr) {
    m.extra["recipe.name"] = std::string(recipe->name);
    m.extra["recipe.rules"] = std::string(recipe->rules);
  }
  m.extra["recipe.evidence"] = plan.explanation;
  if (config) {
    m.extra["config.model_type"] = config->model_type();
    std::string archs;
    for (const std::string& a : config->architectures()) archs += (archs.empty() ? "" : ",") + a;
    if (!archs.empty()) m.extra["config.architectures"] = archs;
    for (const auto& [key, value] : config->values_read()) m.extra[key] = value;
  }
  return plan;
}

DType table_dtype(const ModelPlan& plan, const ConvertOptions& options) noexcept {
  if (options.dtype) return *options.dtype;
  switch (plan.source_dtype) {
    case SourceDType::kBF16: return DType::kBF16;
    case SourceDType::kF16: return DType::kF16;
    default: return DType::kF32;
  }
}

// The token scale of an output as the model applies it, for the table dtype chosen (see ScaleRounding).
double applied_token_scale(const ModelPlan& plan, std::size_t output, DType dtype) {
  const PlannedScale& scale = plan.token_scales[output];
  switch (scale.rounding) {
    case ScaleRounding::kNone: return 1.0;
    case ScaleRounding::kF32: return static_cast<float>(scale.exact);
    case ScaleRounding::kTableDType: {
      // int8 and int4 tables keep the checkpoint's rounding (the model they approximate).
      DType rounding = dtype;
      if (dtype == DType::kInt8Rowwise || dtype == DType::kInt4Rowwise) {
        rounding = plan.source_dtype == SourceDType::kBF16 ? DType::kBF16
                   : plan.source_dtype == SourceDType::kF16 ? DType::kF16 : DType::kF32;
      }
      return round_scale(scale.exact, rounding);
    }
  }
  return 1.0;
}

std::string describe_token_scale(const ModelPlan& plan, std::size_t output, DType dtype) {
  const double exact = plan.token_scales[output].exact;
  const double applied = applied_token_scale(plan, output, dtype);
  // The scale is sqrt of an integer width: print the width, not its float round trip.
  return "sqrt(" + format_number(std::round(exact * exact)) + ") = " + format_number(exact) + ", applied as " +
         format_number(applied);
}

Status add_sinusoidal_positions(ModelPlan& plan, std::uint64_t context) {
  for (const ChosenTable& c : plan.tables) {
    if (c.role == Role::kPosition) {
      return Error(ErrorCode::kInvalidArgument, "sinusoidal positions: the input already has a position table ('" +
                                                    c.tensor->name + "')");
    }
  }
  if (context == 0) return Error(ErrorCode::kInvalidArgument, "sinusoidal positions need a `context` of at least 1 row");
  plan.sinusoidal_context = context;
  plan.metadata.position_kind = PositionKind::kSinusoidal;
  plan.metadata.position_offset = 0;
  plan.metadata.context_length = context;
  return {};
}

}  // namespace embedrt::import
