#include <filesystem>
#include <memory>

#include "commands.hpp"
#include "server.hpp"

namespace embedrt::cli {

Runner add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over HTTP (KServe v2 / Open Inference Protocol)");
  auto options = std::make_shared<serve::ServerOptions>();
  cmd->add_option("MODEL", options->model_path, "the .embt model")->required();
  cmd->add_option("--name", options->name, "model name in URLs (default: the file's stem)");
  cmd->add_option("--host", options->host, "address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", options->port, "port (default 8080)");
  cmd->add_option("--threads", options->threads, "HTTP worker threads (default 8)");
  cmd->add_option("--max-batch-tokens", options->max_batch_tokens, "largest batch x length accepted (default 65536)");
  cmd->add_option("--max-body-bytes", options->max_body_bytes, "largest request body (default 64 MiB)");
  return [options]() {
    if (options->name.empty()) options->name = std::filesystem::path(options->model_path).stem().string();
    return serve::run_server(*options);
  };
}

}  // namespace embedrt::cli
