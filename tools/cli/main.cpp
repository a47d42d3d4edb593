// `embedrt`: inspect, verify and run .embt embedding tables.
#include <csignal>
#include <cstdio>
#include <exception>
#include <new>

#include "commands.hpp"
#include "embedrt/fault_guard.hpp"
#include "embedrt/format.hpp"
#include "embedrt/isa.hpp"
#include "embedrt/table_file_writer.hpp"
#include "embedrt/version.hpp"

namespace {

// SIGINT or SIGTERM in the middle of a conversion: remove its temporary file, then die of the
// signal as usual (exit status 130 or 143 in a shell). `serve` replaces this handler with its own
// graceful drain.
extern "C" void on_interrupt(int signal) {
  embedrt::remove_unfinished_outputs();
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace embedrt::cli;
  ::signal(SIGINT, on_interrupt);
  ::signal(SIGTERM, on_interrupt);
  // A model file truncated while a command reads it (a served model overwritten with cp) is an
  // error of that command, not a SIGBUS crash.
  if (embedrt::Status s = embedrt::install_fault_guard(); !s) {
    std::fprintf(stderr, "embedrt: warning: %s\n", s.error().message().c_str());
  }
  CLI::App app{"embedrt: token embeddings at memory-bus speed", "embedrt"};
  app.require_subcommand(1);
  const auto isa = embedrt::default_isa();
  const std::string chosen_isa = isa ? std::string(embedrt::isa_name(*isa)) : "none (" + isa.error().message() + ")";
  std::string supported;
  for (embedrt::Isa each : embedrt::supported_isas()) supported += " " + std::string(embedrt::isa_name(each));
  app.set_version_flag("-V,--version", std::string("embedrt ") + embedrt::version() + " (format " +
                                           std::to_string(embedrt::kFormatVersionMajor) + "." +
                                           std::to_string(embedrt::kFormatVersionMinor) + ", isa " +
                                           chosen_isa +
                                           "; supported:" + supported + ")");

  const Runner inspect = add_inspect_command(app);
  const Runner verify = add_verify_command(app);
  const Runner embed = add_embed_command(app);
  const Runner pool = add_pool_command(app);
  const Runner convert = add_convert_command(app);
  const Runner bench = add_bench_command(app);
  const Runner serve = add_serve_command(app);

  // CLI11 would only say "a subcommand is required"; name the word it did not know.
  const auto known = [&app](const std::string& word) {
    return !app.get_subcommands([&word](CLI::App* sub) { return sub->get_name() == word; }).empty();
  };
  if (argc > 1 && argv[1][0] != '-' && !known(argv[1])) {
    std::fprintf(stderr, "embedrt: error: unknown command '%s'\nRun 'embedrt --help' for usage.\n",
                 argv[1]);
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "embedrt: error: %s\nRun 'embedrt --help' for usage.\n", e.what());
    return kExitUsage;
  }
  // The library returns errors as values; what can still throw here is memory running out (a
  // table or a request too large for this machine): a message and exit 1, never an abort.
  try {
    if (app.got_subcommand("inspect")) return inspect();
    if (app.got_subcommand("verify")) return verify();
    if (app.got_subcommand("embed")) return embed();
    if (app.got_subcommand("pool")) return pool();
    if (app.got_subcommand("convert")) return convert();
    if (app.got_subcommand("bench")) return bench();
    if (app.got_subcommand("serve")) return serve();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "embedrt: error: out of memory\n");
    return kExitFailure;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embedrt: error: %s\n", e.what());
    return kExitFailure;
  }
  return kExitUsage;
}
