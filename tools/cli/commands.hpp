// Subcommands of the `embedrt` tool. Each registers its options on the app and returns the
// function that runs it; a run returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "exit_codes.hpp"

namespace embedrt::cli {

using Runner = std::function<int()>;


Runner add_inspect_command(CLI::App& app);
Runner add_verify_command(CLI::App& app);
Runner add_embed_command(CLI::App& app);
Runner add_pool_command(CLI::App& app);
Runner add_convert_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);

}  // namespace embedrt::cli
