#include "presets.hpp"

#include <algorithm>
#include <cmath>

namespace embedrt::import {
namespace {

struct Family {
  const char* name;
  std::vector<const char*> token, position, segment, norm_weight, norm_bias;
  std::uint64_t position_offset = 0;
  bool scale_by_sqrt_dim = false;
  double norm_epsilon = 1e-5;
  bool needs_position = false;
};

// Names are matched as suffixes at a '.' boundary, so prefixes such as "transformer.", "bert.",
// "model._orig_mod." (nanoGPT + torch.compile) or a --key-less nested checkpoint all match.
const std::vector<Family>& families() {
  static const std::vector<Family> all = {
      {"gpt2", {"wte.weight"}, {"wpe.weight"}, {}, {}, {}, 0, false, 1e-5, true},
      {"bert", {"embeddings.word_embeddings.weight"}, {"embeddings.position_embeddings.weight"},
       {"embeddings.token_type_embeddings.weight"}, {"embeddings.LayerNorm.weight", "embeddings.LayerNorm.gamma"},
       {"embeddings.LayerNorm.bias", "embeddings.LayerNorm.beta"}, 0, false, 1e-12, true},
      {"roberta", {"embeddings.word_embeddings.weight"}, {"embeddings.position_embeddings.weight"},
       {"embeddings.token_type_embeddings.weight"}, {"embeddings.LayerNorm.weight", "embeddings.LayerNorm.gamma"},
       {"embeddings.LayerNorm.bias", "embeddings.LayerNorm.beta"}, 2, false, 1e-5, true},
      {"opt", {"decoder.embed_tokens.weight"}, {"decoder.embed_positions.weight"}, {}, {}, {}, 2, false, 1e-5, true},
      {"llama", {"model.embed_tokens.weight", "tok_embeddings.weight"}, {}, {}, {}, {}, 0, false, 1e-5, false},
      {"gemma", {"model.embed_tokens.weight"}, {}, {}, {}, {}, 0, true, 1e-5, false},
      {"t5", {"shared.weight"}, {}, {}, {}, {}, 0, false, 1e-5, false},
  };
  return all;
}

bool matches(const std::string& name, std::string_view suffix) {
  if (name == suffix) return true;
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         name[name.size() - suffix.size() - 1] == '.';
}

std::vector<const SourceTensor*> find_all(const std::vector<SourceTensor>& tensors,
                                          const std::vector<const char*>& suffixes) {
  std::vector<const SourceTensor*> found;
  for (const SourceTensor& t : tensors) {
    for (const char* s : suffixes) {
      if (matches(t.name, s)) {
        found.push_back(&t);
        break;
      }
    }
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

const Family* family_named(const std::string& name) {
  for (const Family& f : families()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// Detects the family from the token table's name, then refines look-alikes.
Result<const Family*> detect(const std::vector<SourceTensor>& tensors, std::string& explanation) {
  std::vector<std::pair<const Family*, std::vector<const SourceTensor*>>> hits;
  for (const char* base : {"gpt2", "bert", "opt", "llama", "t5"}) {
    const Family* f = family_named(base);
    auto found = find_all(tensors, f->token);
    if (!found.empty()) hits.emplace_back(f, std::move(found));
  }
  if (hits.empty()) {
    return Error(ErrorCode::kNotFound, "no known model family found (gpt2, bert, roberta, opt, llama, gemma, t5); "
                                       "name the tables with --token/--position. 2-D tensors seen:" + candidate_list(tensors));
  }
  if (hits.size() > 1) {
    std::string list;
    for (const auto& [f, found] : hits) list += "\n  " + std::string(f->name) + ": " + found[0]->name;
    return Error(ErrorCode::kInvalidArgument, "the input matches several model families; choose with --preset:" + list);
  }
  const Family* f = hits[0].first;
  const SourceTensor* token = hits[0].second[0];
  explanation = "detected " + std::string(f->name) + " from '" + token->name + "'";
  if (std::string(f->name) == "bert") {
    const auto segment = find_all(tensors, f->segment);
    const bool named_roberta = token->name.find("roberta.") != std::string::npos;
    const bool shaped_roberta = segment.size() == 1 && segment[0]->shape.size() == 2 && segment[0]->shape[0] == 1;
    if (named_roberta || shaped_roberta) {
      explanation += named_roberta ? " (roberta: 'roberta.' prefix)" : " (roberta: a single token type)";
      return family_named("roberta");
    }
  }
  if (std::string(f->name) == "llama" && token->shape.size() == 2 && token->shape[0] >= 256000) {
    explanation += " (gemma: vocabulary of " + std::to_string(token->shape[0]) + " >= 256000)";
    return family_named("gemma");
  }
  return f;
}

}  // namespace

Result<ModelPlan> plan_model(const std::vector<SourceTensor>& tensors, const std::string& preset,
                             const TableOverrides& overrides) {
  ModelPlan plan;
  const Family* family = nullptr;
  if (preset == "auto") {
    if (overrides.token.empty()) {
      auto detected = detect(tensors, plan.explanation);
      if (!detected) return std::move(detected).error();
      family = *detected;
    } else {
      plan.explanation = "custom tables named on the command line";
    }
  } else {
    family = family_named(preset);
    if (family == nullptr) return Error(ErrorCode::kInvalidArgument, "unknown preset '" + preset + "'");
    plan.explanation = "preset " + preset;
  }
  plan.family = family ? family->name : "custom";

  // One table per role: an explicit name wins, else the family's suffixes must match exactly one.
  const auto choose = [&](Role role, const std::string& explicit_name,
                          const std::vector<const char*>* suffixes) -> Result<const SourceTensor*> {
    if (!explicit_name.empty()) {
      for (const SourceTensor& t : tensors) {
        if (t.name == explicit_name) return &t;
      }
      return Error(ErrorCode::kNotFound, "no tensor named '" + explicit_name + "' (for the " +
                                             std::string(role_name(role)) + " table); 2-D tensors seen:" + candidate_list(tensors));
    }
    if (suffixes == nullptr || suffixes->empty()) return static_cast<const SourceTensor*>(nullptr);
    const auto found = find_all(tensors, *suffixes);
    if (found.size() > 1) {
      std::string list;
      for (const SourceTensor* t : found) list += "\n  " + t->name;
      return Error(ErrorCode::kInvalidArgument, "several candidates for the " + std::string(role_name(role)) +
                                                    " table; name one with --" + std::string(role == Role::kToken ? "token" : role == Role::kPosition ? "position" : role == Role::kSegment ? "segment" : role == Role::kNormWeight ? "norm-weight" : "norm-bias") +
                                                    " or narrow with --key:" + list);
    }
    return found.empty() ? nullptr : found[0];
  };
  struct RoleSpec {
    Role role;
    const std::string& name;
    const std::vector<const char*>* suffixes;
  };
  const RoleSpec specs[] = {
      {Role::kToken, overrides.token, family ? &family->token : nullptr},
      {Role::kPosition, overrides.position, family ? &family->position : nullptr},
      {Role::kSegment, overrides.segment, family ? &family->segment : nullptr},
      {Role::kNormWeight, overrides.norm_weight, family ? &family->norm_weight : nullptr},
      {Role::kNormBias, overrides.norm_bias, family ? &family->norm_bias : nullptr},
  };
  for (const RoleSpec& spec : specs) {
    auto chosen = choose(spec.role, spec.name, spec.suffixes);
    if (!chosen) return std::move(chosen).error();
    if (*chosen != nullptr) plan.tables.push_back({spec.role, *chosen});
  }

  const auto table = [&plan](Role role) -> const SourceTensor* {
    for (const ChosenTable& c : plan.tables) {
      if (c.role == role) return c.tensor;
    }
    return nullptr;
  };
  const SourceTensor* token = table(Role::kToken);
  if (token == nullptr) {
    return Error(ErrorCode::kNotFound, "no token table found for preset '" + plan.family + "'; 2-D tensors seen:" +
                                           candidate_list(tensors));
  }
  if (family && family->needs_position && table(Role::kPosition) == nullptr) {
    std::string expected;
    for (const char* s : family->position) expected += std::string(expected.empty() ? "" : " or ") + "'" + s + "'";
    return Error(ErrorCode::kNotFound, plan.family + " needs a position table (" + expected +
                                           "); name it with --position. 2-D tensors seen:" + candidate_list(tensors));
  }
  // Shapes and dtypes: 2-D floating tables of one width; LayerNorm vectors of that width.
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
    if (t.shape.back() != token->shape[1]) {
      return Error(ErrorCode::kInvalidArgument, what + " has width " + std::to_string(t.shape.back()) +
                                                    ", the token table has " + std::to_string(token->shape[1]));
    }
  }
  if (table(Role::kNormBias) != nullptr && table(Role::kNormWeight) == nullptr) {
    return Error(ErrorCode::kInvalidArgument, "a LayerNorm bias without a LayerNorm weight");
  }

  Metadata& m = plan.metadata;
  m.family = plan.family;
  const std::uint64_t dim = static_cast<std::uint64_t>(token->shape[1]);
  m.position_offset = family ? family->position_offset : 0;
  m.output_scale = family && family->scale_by_sqrt_dim ? std::sqrt(static_cast<double>(dim)) : 1.0;
  m.norm_epsilon = overrides.norm_epsilon.value_or(family ? family->norm_epsilon : 1e-5);
  if (const SourceTensor* position = table(Role::kPosition)) {
    m.position_kind = PositionKind::kLearned;
    const auto rows = static_cast<std::uint64_t>(position->shape[0]);
    if (rows <= m.position_offset) {
      return Error(ErrorCode::kInvalidArgument, "position table '" + position->name + "' has " + std::to_string(rows) +
                                                    " rows, not more than the position offset " + std::to_string(m.position_offset));
    }
    m.context_length = rows - m.position_offset;
  }
  return plan;
}

Status add_sinusoidal_positions(ModelPlan& plan, std::uint64_t context) {
  for (const ChosenTable& c : plan.tables) {
    if (c.role == Role::kPosition) {
      return Error(ErrorCode::kInvalidArgument, "--positions sinusoidal: the input already has a position table ('" +
                                                    c.tensor->name + "')");
    }
  }
  if (context == 0) return Error(ErrorCode::kInvalidArgument, "--positions sinusoidal needs --context N (N >= 1)");
  plan.sinusoidal_context = context;
  plan.metadata.position_kind = PositionKind::kSinusoidal;
  plan.metadata.position_offset = 0;
  plan.metadata.context_length = context;
  return {};
}

}  // namespace embedrt::import
