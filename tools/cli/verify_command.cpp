#include <cstdio>
#include <memory>
#include <string>

#include "commands.hpp"
#include "embedrt/table_file.hpp"
#include "text_format.hpp"

namespace embedrt::cli {

Runner add_verify_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("verify", "Check every checksum of an .embt file");
  auto path = std::make_shared<std::string>();
  cmd->add_option("FILE", *path, "the .embt file")->required();
  return [path]() {
    auto file = TableFile::open(*path);
    if (!file) return report(file.error());
    if (Status s = file->verify(); !s) return report(s.error());
    std::printf("%s: OK (%zu tables, header and data checksums match)\n", path->c_str(),
                file->tables().size());
    return kExitOk;
  };
}

}  // namespace embedrt::cli
