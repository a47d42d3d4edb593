// The `embedrt` tool as a user runs it: exit codes, stdout, stderr.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "embedrt/embedrt.hpp"
#include "roofline_kernels.hpp"
#include "support/raw_file.hpp"
#include "support/temp_dir.hpp"

using namespace embedrt;
using embedrt::test::TempDir;

namespace {

struct Run {
  int exit_code;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Run run_cli(const TempDir& dir, const std::string& args) {
  const std::string out = dir.file("stdout"), err = dir.file("stderr");
  const std::string command = std::string("'") + EMBEDRT_CLI_PATH + "' " + args + " >'" + out + "' 2>'" + err + "'";
  const int status = std::system(command.c_str());
  REQUIRE(WIFEXITED(status));
  return {WEXITSTATUS(status), slurp(out), slurp(err)};
}

// tok[r][j] = r + j / 10 and pos[p][j] = p * 100: decimals that need several digits in float.
struct Gpt2Like {
  static constexpr std::uint64_t kVocab = 12, kContext = 6, kDim = 3;
  std::vector<float> tok, pos;
  Gpt2Like() : tok(kVocab * kDim), pos(kContext * kDim) {
    for (std::uint64_t r = 0; r < kVocab; ++r)
      for (std::uint64_t j = 0; j < kDim; ++j) tok[r * kDim + j] = static_cast<float>(r) + static_cast<float>(j) / 10.0f;
    for (std::uint64_t p = 0; p < kContext; ++p)
      for (std::uint64_t j = 0; j < kDim; ++j) pos[p * kDim + j] = static_cast<float>(p) * 100.0f + 0.1f;
  }
  std::string write(const TempDir& dir) const {
    const TableData tables[] = {
        {{"wte", Role::kToken, DType::kF32, kVocab, kDim}, std::as_bytes(std::span(tok))},
        {{"wpe", Role::kPosition, DType::kF32, kContext, kDim}, std::as_bytes(std::span(pos))},
    };
    Metadata meta;
    meta.family = "gpt2";
    meta.context_length = kContext;
    meta.position_kind = PositionKind::kLearned;
    const std::string path = dir.file("gpt2.embt");
    REQUIRE(write_table_file(path, tables, meta));
    return path;
  }
};

}  // namespace

TEST_CASE("help, version and usage errors") {
  TempDir dir;
  Run r = run_cli(dir, "--help");
  CHECK(r.exit_code == 0);
  for (const char* sub : {"inspect", "verify", "embed"}) CHECK(r.out.find(sub) != std::string::npos);
  r = run_cli(dir, "--version");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find(std::string("embedrt ") + EMBEDRT_VERSION_STRING) != std::string::npos);
  r = run_cli(dir, "");
  CHECK(r.exit_code == 2);
  r = run_cli(dir, "frobnicate");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("frobnicate") != std::string::npos);
  r = run_cli(dir, "embed");
  CHECK(r.exit_code == 2);
}

TEST_CASE("inspect and verify a good file") {
  TempDir dir;
  const std::string path = Gpt2Like().write(dir);
  Run r = run_cli(dir, "inspect " + path);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("wte") != std::string::npos);
  CHECK(r.out.find("gpt2") != std::string::npos);
  r = run_cli(dir, "inspect --json " + path);
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["format"] == "1.0");
  CHECK(doc["metadata"]["model.family"] == "gpt2");
  CHECK(doc["metadata"]["context_length"] == 6);
  REQUIRE(doc["tables"].size() == 2);
  CHECK(doc["tables"][0]["name"] == "wte");
  CHECK(doc["tables"][0]["role"] == "token");
  CHECK(doc["tables"][0]["dtype"] == "f32");
  CHECK(doc["tables"][0]["shape"] == nlohmann::json::array({12, 3}));
  CHECK(doc["tables"][1]["offset"].get<std::uint64_t>() % 4096 == 0);
  r = run_cli(dir, "verify " + path);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("OK") != std::string::npos);
}

TEST_CASE("inspect and verify report bad files on stderr with exit 3") {
  TempDir dir;
  const std::string path = Gpt2Like().write(dir);
  Run r = run_cli(dir, "inspect " + dir.file("missing.embt"));
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("missing.embt") != std::string::npos);
  CHECK(r.out.empty());

  test::RawFile raw{test::read_file(path)};
  raw.bytes[raw.get<std::uint64_t>(test::RawFile::entry(1) + test::field::kOffset) + 3] ^= 1;
  const std::string damaged = dir.file("damaged.embt");
  test::write_file(damaged, raw.bytes);
  r = run_cli(dir, "verify " + damaged);
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("table 'wpe': data checksum") != std::string::npos);

  raw.bytes.resize(raw.bytes.size() - 100);
  test::write_file(damaged, raw.bytes);
  r = run_cli(dir, "inspect " + damaged);
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("truncated") != std::string::npos);
}

TEST_CASE("embed --json prints round-trip floats equal to token + position") {
  TempDir dir;
  const Gpt2Like model;
  const std::string path = model.write(dir);
  const std::vector<std::int64_t> ids = {3, 1, 4, 1, 5, 9};
  Run r = run_cli(dir, "embed " + path + " --ids 3,1,4,1,5,9 --batch 2 --start 1 --json");
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["shape"] == nlohmann::json::array({2, 3, 3}));
  const auto& data = doc["data"];
  REQUIRE(data.size() == ids.size() * 3);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::size_t position = 1 + i % 3;
    for (std::size_t j = 0; j < 3; ++j) {
      const float expected = model.tok[static_cast<std::size_t>(ids[i]) * 3 + j] + model.pos[position * 3 + j];
      CHECK(static_cast<float>(data[i * 3 + j].get<double>()) == expected);
    }
  }
  r = run_cli(dir, "embed " + path + " --ids 2");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("shape [1, 1, 3]") != std::string::npos);
  r = run_cli(dir, "embed " + path + " --ids '' --batch 2 --json");
  CHECK(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["shape"] == nlohmann::json::array({2, 0, 3}));
}

TEST_CASE("embed errors name what is wrong and print nothing on stdout") {
  TempDir dir;
  const std::string path = Gpt2Like().write(dir);
  struct Case {
    std::string args;
    int exit_code;
    std::string needle;
  };
  const Case cases[] = {
      {"--ids 1,2,99", 2, "sequence 0, position 2: id 99 is out of range [0, 12)"},
      {"--ids 1,-5 --batch 2", 2, "sequence 1, position 0: id -5 is out of range [0, 12)"},
      {"--ids 1,2,3 --start 4", 2, "sequence 0, position 2: position 6 is past the limit of 6 positions"},
      {"--ids 1,x,3", 2, "--ids: item 1 ('x') is not a 64-bit integer"},
      {"--ids 1,,3", 2, "item 1 ('')"},
      {"--ids 99999999999999999999", 2, "is not a 64-bit integer"},
      {"--ids 1,2,3 --batch 2", 2, "do not split into --batch 2"},
      {"--ids 1 --batch 0", 2, "--batch: Value 0 not in range"},
      {"--ids 1 --batch -1", 2, "--batch"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    Run r = run_cli(dir, "embed " + path + " " + c.args);
    CHECK(r.exit_code == c.exit_code);
    CHECK(r.err.find(c.needle) != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("--residency: every mode embeds the same numbers; an unknown one is a usage error") {
  TempDir dir;
  const std::string path = Gpt2Like().write(dir);
  const Run mmap = run_cli(dir, "embed " + path + " --ids 3,1,4,1 --json");
  REQUIRE(mmap.exit_code == 0);
  for (const char* mode : {"mmap", "populate", "copy"}) {
    CAPTURE(mode);
    const Run r = run_cli(dir, "embed " + path + " --ids 3,1,4,1 --json --residency " + mode);
    CHECK(r.exit_code == 0);
    CHECK(r.out == mmap.out);
  }
  const Run bad = run_cli(dir, "embed " + path + " --ids 1 --residency huge");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("huge") != std::string::npos);
  CHECK(bad.out.empty());
}

TEST_CASE("bench: sizes against the LLC, the case's roofline, cold decode beside its limit, residency figures") {
  TempDir dir;
  const std::string path = Gpt2Like().write(dir);
  Run r = run_cli(dir, "bench " + path + " --batch 2 --seq 3 --seconds 0.01 --json --residency copy");
  REQUIRE(r.exit_code == 0);
  auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["mode"] == "gather");
  CHECK(doc["llc"]["bytes"].get<std::uint64_t>() > 0);
  CHECK(doc["sizes"]["regime"] == "cache");
  // 8 id sets of 6 ids over 12 rows of 64 bytes: 11.8 distinct rows expected, fewer than the table's 12.
  CHECK(doc["sizes"]["touched_bytes"].get<std::uint64_t>() > 11 * 64);
  CHECK(doc["sizes"]["touched_bytes"].get<std::uint64_t>() < 12 * 64);
  CHECK(doc["residency"]["mode"] == "copy");
  CHECK(doc["residency"]["table_rss"].get<std::uint64_t>() > 0);
  CHECK(doc["tokens_per_second"].get<double>() > 0);

  r = run_cli(dir, "bench --synthetic 1000x64 --dtype int8 --roofline --batch 2 --seq 8 --out-dtype bf16 --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  doc = nlohmann::json::parse(r.out);
  CHECK(doc["mode"] == "roofline");
  // Every way it tried, prefetching into L2 too where this build has such kernels for the ISA
  // (which ISAs have them: test_perf_tools).
  const bool l2_ways = perf::has_prefetch_l2_roofline(parse_isa(doc["isa"].get<std::string>()).value());
  CHECK(doc["prefetch_levels_tried"] ==
        (l2_ways ? nlohmann::json::array({"l1", "l2"}) : nlohmann::json::array({"l1"})));
  // none; each distance further on, per level
  const std::size_t distances = std::size(perf::kPrefetchAheadBytes) - 1;
  CHECK(doc["ways_tokens_per_second"].size() == 1 + distances * (l2_ways ? 2 : 1));
  CHECK(doc["ways_tokens_per_second"].contains(doc["way"].get<std::string>()));
  CHECK(doc["prefetch_level"] == (doc["prefetch_ahead_bytes"] == 0 ? "none" : doc["way"].get<std::string>().ends_with("into L2") ? "l2" : "l1"));
  CHECK(doc["nontemporal"] == false);  // --nontemporal auto, an output far below the LLC
  CHECK(doc["table_dtype"] == "int8");
  CHECK(doc["out_dtype"] == "bf16");
  CHECK(doc["row_stride"] == 128);  // align_up(64 codes + scale + bias, 64)
  CHECK(doc["sizes"]["table_vs_llc"].get<double>() >= 4.0);
  CHECK(doc["sizes"]["touched_bytes"] == doc["sizes"]["table_bytes"]);  // a roofline streams every row

  r = run_cli(dir, "bench " + path + " --batch 1 --seq 1 --evict --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  doc = nlohmann::json::parse(r.out);
  CHECK(doc["mode"] == "decode_cold");
  CHECK(doc["embedrt_ns"]["p50"].get<double>() > 0);
  CHECK(doc["limit_ns"]["p50"].get<double>() > 0);

  const std::string kept = dir.file("synthetic.embt");
  r = run_cli(dir, "bench --synthetic 500x16 --dtype bf16 --positions 8 --synthetic-file " + kept + " --batch 1 --seq 8 --seconds 0.01");
  CHECK(r.exit_code == 0);
  CHECK(std::filesystem::exists(kept));
  r = run_cli(dir, "bench --synthetic 500x32 --synthetic-file " + kept + " --seconds 0.01");  // another shape: refused
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("500x16") != std::string::npos);

  // int4 tables: generated, gathered, and their roofline (rows of 32 code bytes + f16 scale and bias).
  r = run_cli(dir, "bench --synthetic 1000x64 --dtype int4 --batch 2 --seq 8 --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  doc = nlohmann::json::parse(r.out);
  CHECK(doc["table_dtype"] == "int4");
  CHECK(doc["bytes_per_token"].get<double>() == 36 + 64 * 4);
  r = run_cli(dir, "bench --synthetic 1000x64 --dtype int4 --roofline --batch 2 --seq 8 --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  doc = nlohmann::json::parse(r.out);
  CHECK(doc["table_dtype"] == "int4");
  CHECK(doc["row_stride"] == 64);
  CHECK(doc["bytes_per_token"].get<double>() == 36 + 64 * 4);
  r = run_cli(dir, "bench --synthetic 1000x64 --dtype int32 --seconds 0.01");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("int4") != std::string::npos);

  // Usage errors: --evict on more than one token, no model, a model and --synthetic.
  for (const std::string& args : {path + " --batch 2 --seq 1 --evict", std::string(), path + " --synthetic 10x10"}) {
    CAPTURE(args);
    r = run_cli(dir, "bench " + args + " --seconds 0.01");
    CHECK(r.exit_code == 2);
    CHECK_FALSE(r.err.empty());
  }
}

TEST_CASE("bench: several outputs in one call, bags, and cold decode with and without prefetch") {
  TempDir dir;
  // Two outputs (the second's ids past its 500 rows read row 0, as Gemma 3n's per-layer table):
  // both rows in and both outputs out per token.
  Run r = run_cli(dir, "bench --synthetic 1000x64 --second-output 500x96 --batch 2 --seq 4 --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["outputs"] == nlohmann::json::array({"embeddings", "second"}));
  CHECK(doc["bytes_per_token"].get<double>() == (64 + 96) * 4 * 2);
  CHECK(doc["sizes"]["output_bytes_per_call"] == 8 * (64 + 96) * 4);
  r = run_cli(dir, "bench --synthetic 1000x64 --second-output 500x96 --output second --out-dtype bf16 --batch 2 --seq 4 --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  doc = nlohmann::json::parse(r.out);
  CHECK(doc["outputs"] == nlohmann::json::array({"second"}));
  CHECK(doc["bytes_per_token"].get<double>() == 96 * 4 + 96 * 2);
  r = run_cli(dir, "bench --synthetic 1000x64 --second-output 500x96 --roofline --batch 2 --seq 4 --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  doc = nlohmann::json::parse(r.out);
  CHECK(doc["outputs"].size() == 2);
  CHECK(doc["bytes_per_token"].get<double>() == (64 + 96) * 4 * 2);
  // Gemma 3n E2B's roofline (no model written): 2048 + 7680 bf16 values in and out per token.
  r = run_cli(dir, "bench --synthetic-gemma3n e2b --roofline --batch 1 --seq 16 --out-dtype bf16 --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  doc = nlohmann::json::parse(r.out);
  CHECK(doc["bytes_per_token"].get<double>() == (2048 + 7680) * 2 * 2);
  CHECK(doc["outputs"][1]["name"] == "per_layer_inputs");

  // Cold decode of both outputs, with the prefetched variant beside it.
  r = run_cli(dir, "bench --synthetic 1000x64 --second-output 500x96 --batch 1 --seq 1 --evict --prefetch-ahead 1 --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  doc = nlohmann::json::parse(r.out);
  CHECK(doc["mode"] == "decode_cold");
  CHECK(doc["prefetched_ns"]["p50"].get<double>() > 0);
  CHECK(doc["rows_cold_ns"]["p50"].get<double>() > 0);
  CHECK(doc["prefetch_call_ns"]["p50"].get<double>() > 0);
  CHECK(doc["limit_ns"]["p50"].get<double>() > 0);

  // Bags: 2 x 8 ids in bags of 4 -> 4 pooled rows a call; the roofline reads every row and writes one per bag.
  r = run_cli(dir, "bench --synthetic 1000x64 --bag 4 --batch 2 --seq 8 --pooling mean --normalize --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  doc = nlohmann::json::parse(r.out);
  CHECK(doc["mode"] == "bags");
  CHECK(doc["bags_per_call"] == 4);
  CHECK(doc["pooling"] == "mean");
  CHECK(doc["normalize"] == true);
  CHECK(doc["bytes_per_token"].get<double>() == 64 * 4 + 64 * 4 / 4.0);
  r = run_cli(dir, "bench --synthetic 1000x64 --dtype int8 --bag 4 --batch 2 --seq 8 --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["pooling"] == "sum");  // no pooling default in the model: sum
  doc = nlohmann::json::parse(r.out);
  CHECK(doc["prefetch_level"] == "auto");  // the default, resolved per table: this one is in the cache
  CHECK(doc["prefetch_level_used"] == "l1");
  CHECK(doc["prefetch_calibration"]["l1_gbs"].is_number());
  CHECK((doc["prefetch_calibration"]["level"] == "l1" || doc["prefetch_calibration"]["level"] == "l2"));
  CHECK((doc["prefetch_calibration"]["min_rows_ahead"] == 4 || doc["prefetch_calibration"]["min_rows_ahead"] == 32));
  CHECK(doc["min_rows_ahead_used"] == 4);  // the table is in the cache: the calibration's distance is not its
  r = run_cli(dir, "bench --synthetic 1000x64 --dtype int8 --bag 4 --batch 2 --seq 8 --prefetch-level l2 --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  doc = nlohmann::json::parse(r.out);
  CHECK(doc["prefetch_level"] == "l2");
  CHECK(doc["prefetch_level_used"] == "l1");
  CHECK_FALSE(doc.contains("prefetch_calibration"));
  r = run_cli(dir, "bench --synthetic 1000x64 --bag 4 --batch 2 --seq 8 --prefetch-level l3 --seconds 0.01");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("--prefetch-level") != std::string::npos);
  CHECK(r.err.find("l3 not in {auto,l1,l2}") != std::string::npos);
  r = run_cli(dir, "bench --synthetic 1000x64 --batch 2 --seq 8 --nontemporal sometimes --seconds 0.01");
  CHECK(r.exit_code == 2);  // a usage error, naming the value and the choices
  CHECK(r.err.find("sometimes not in {auto,always,never}") != std::string::npos);
  r = run_cli(dir, "bench --synthetic 1000x64 --batch 2 --seq 8 --nontemporal always --seconds 0.01 --json");
  CHECK(r.exit_code == 0);
  // The roofline streams as told (its JSON says whether it did; without the option it did not, above).
  r = run_cli(dir, "bench --synthetic 1000x64 --batch 2 --seq 8 --nontemporal always --roofline --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["nontemporal"] == true);
  r = run_cli(dir, "bench --synthetic 1000x64 --dtype int4 --bag 4 --weights --batch 2 --seq 8 --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["weights"] == true);
  r = run_cli(dir, "bench --synthetic 1000x64 --bag 4 --weights --pooling max --batch 2 --seq 8 --seconds 0.01");
  CHECK(r.exit_code != 0);  // weights pool with sum or mean only: the embedder's error, not a crash
  CHECK(r.err.find("weights pool with mode sum or mean, not max") != std::string::npos);
  r = run_cli(dir, "bench --synthetic 1000x64 --weights --batch 2 --seq 8 --seconds 0.01");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("give --bag N") != std::string::npos);
  r = run_cli(dir, "bench --synthetic 1000x64 --bag 4 --roofline --batch 2 --seq 8 --seconds 0.01 --json");
  REQUIRE(r.exit_code == 0);
  doc = nlohmann::json::parse(r.out);
  CHECK(doc["bag"] == 4);
  CHECK(doc["bytes_per_token"].get<double>() == 64 * 4 + 64 * 4 / 4.0);

  // Refusals, each naming what is wrong.
  const std::pair<std::string, std::string> refused[] = {
      {"--synthetic 1000x64 --bag 3 --seq 8", "does not divide --seq 8"},
      {"--synthetic 1000x64 --pooling mean", "give --bag"},
      {"--synthetic 1000x64 --bag 4 --seq 8 --pooling median", "median"},
      {"--synthetic 1000x64 --second-output 500x96 --bag 4 --seq 8 --output embeddings --output second", "one --output"},
      {"--synthetic 1000x64 --output nope", "embeddings"},
      {"--synthetic 1000x64 --output embeddings --output embeddings", "twice"},
      {"--synthetic 1000x64 --batch 1 --seq 1 --prefetch-ahead 1", "--evict"},
      {"--synthetic 1000x64 --second-output 500", "--second-output '500'"},
      {"--synthetic-gemma3n e3b --roofline", "e3b"},
      {"--synthetic 10x10 --synthetic-gemma3n e2b", "one of them"},
  };
  for (const auto& [args_binding, message] : refused) {
    const std::string& args = args_binding;  // (clang 14's CAPTURE cannot name a structured binding)
    CAPTURE(args);
    r = run_cli(dir, "bench " + args + " --seconds 0.01");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(message) != std::string::npos);
  }
}
