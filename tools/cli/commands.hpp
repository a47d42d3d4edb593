// Subcommands of the `embedrt` tool. Each registers its options on the app and returns the
// function that runs it; a run returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace embedrt::cli {

using Runner = std::function<int()>;

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the input or the system refused (bad file, I/O error)
inline constexpr int kExitUsage = 2;    // the command line itself is wrong

Runner add_inspect_command(CLI::App& app);
Runner add_verify_command(CLI::App& app);
Runner add_embed_command(CLI::App& app);
Runner add_convert_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);

}  // namespace embedrt::cli
