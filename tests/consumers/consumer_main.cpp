// A downstream program: writes a tiny model, embeds a batch with it, checks the result.
#include <embedrt/embedrt.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string path = argv[1];
  std::vector<float> tok = {0, 1, 10, 11, 20, 21}, pos = {100, 200, 300, 400};
  const embedrt::TableData tables[] = {
      {{"tok", embedrt::Role::kToken, embedrt::DType::kF32, 3, 2}, std::as_bytes(std::span(tok))},
      {{"pos", embedrt::Role::kPosition, embedrt::DType::kF32, 2, 2}, std::as_bytes(std::span(pos))},
  };
  embedrt::Metadata meta;
  meta.position_kind = embedrt::PositionKind::kLearned;
  if (auto s = embedrt::write_table_file(path, tables, meta, {.overwrite = true}); !s) {
    std::fprintf(stderr, "%s\n", s.error().message().c_str());
    return 1;
  }
  auto model = embedrt::Model::open(path);
  if (!model) {
    std::fprintf(stderr, "%s\n", model.error().message().c_str());
    return 1;
  }
  const std::vector<std::int64_t> ids = {2, 0};
  std::vector<float> out(4);
  if (auto s = embedrt::reference_embed(*model, ids, 1, 0, out); !s) return 1;
  const std::vector<float> expected = {120, 221, 300, 401};
  std::printf("embedrt %s: %s\n", embedrt::version(), out == expected ? "ok" : "WRONG");
  return out == expected ? 0 : 1;
}
