// Subcommands of the `embedrt` tool. Each registers its options on the app and returns the
// function that runs it; a run returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "embedrt/embedder.hpp"
#include "embedrt/table_file.hpp"
#include "exit_codes.hpp"

namespace embedrt::cli {

using Runner = std::function<int()>;

// --residency (and --lock-in-memory where `lock` is wanted): how the model's bytes are held
// (embedrt::Residency); one definition for embed, bench and serve.
inline void add_open_options(CLI::App* cmd, OpenOptions& options, bool lock) {
  cmd->add_option_function<std::string>(
         "--residency", [&options](const std::string& name) { options.residency = parse_residency(name).value(); },
         "how the model is held in memory: mmap (shared, faulted in lazily), populate (shared, read at open) or "
         "copy (private, huge pages, immune to the file changing); default " +
             std::string(residency_name(options.residency)))
      ->check(CLI::IsMember({"mmap", "populate", "copy"}));
  if (lock) cmd->add_flag("--lock-in-memory", options.lock_in_memory, "mlock the model's bytes (needs RLIMIT_MEMLOCK)");
}

// The spellings of an enum's values, for CLI::IsMember (its usage error lists them).
template <typename Enum, std::string_view (*name)(Enum) noexcept>
std::vector<std::string> names_of(std::initializer_list<Enum> values) {
  std::vector<std::string> names;
  for (Enum value : values) names.emplace_back(name(value));
  return names;
}

// --prefetch-level auto|l1|l2 (EmbedderOptions::prefetch_level); one definition for bench and serve.
inline void add_prefetch_level_option(CLI::App* cmd, PrefetchLevel& level) {
  cmd->add_option_function<std::string>(
         "--prefetch-level", [&level](const std::string& name) { level = parse_prefetch_level(name).value(); },
         "where the rows of a table larger than half the last-level cache are prefetched: auto (default: the "
         "level this machine measures faster, once per process), l1 or l2 (docs/BENCHMARKS.md: Choosing the prefetch level)")
      ->check(CLI::IsMember(names_of<PrefetchLevel, prefetch_level_name>(
          {PrefetchLevel::kAuto, PrefetchLevel::kL1, PrefetchLevel::kL2})));
}

// --min-rows-ahead N (EmbedderOptions::min_rows_ahead); one definition for bench and serve.
inline void add_min_rows_ahead_option(CLI::App* cmd, std::optional<std::uint64_t>& rows) {
  cmd->add_option("--min-rows-ahead", rows,
                  "the fewest rows ahead that rows of up to 1 KiB of a table larger than half the last-level cache "
                  "are prefetched, 4-256 (default: the calibration's under --prefetch-level auto, else 4)")
      ->check(CLI::Range(std::uint64_t{4}, std::uint64_t{256}));
}

// --nontemporal auto|always|never (EmbedderOptions::nontemporal).
inline void add_nontemporal_option(CLI::App* cmd, NonTemporal& mode) {
  cmd->add_option_function<std::string>(
         "--nontemporal", [&mode](const std::string& name) { mode = parse_nontemporal(name).value(); },
         "streaming stores: auto (by output size), always or never")
      ->check(CLI::IsMember(names_of<NonTemporal, nontemporal_name>(
          {NonTemporal::kAuto, NonTemporal::kAlways, NonTemporal::kNever})));
}

Runner add_inspect_command(CLI::App& app);
Runner add_verify_command(CLI::App& app);
Runner add_embed_command(CLI::App& app);
Runner add_pool_command(CLI::App& app);
Runner add_convert_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);

}  // namespace embedrt::cli
