// scdino-export: a checkpoint's teacher (or student) backbone for PyTorch
// users, under DINO's names: a .pth state dict that DINO's and scDINO's
// vision_transformer.py load with strict=True, or a .safetensors file
// (features/export.h, docs/eval.md).
#include <iostream>
#include <string>

#include "common/cli.h"
#include "config/config.h"
#include "features/export.h"
#include "process/exit_codes.h"
#include "programs/mains.h"

namespace scdino::programs::export_main {

int Main(int argc, char** argv) {
  using namespace scdino::process;
  std::string checkpoint, out;
  scdino::features::ExportOptions options;
  // The checkpoint's recorded config is read here, at the edge.
  options.channels_of_config = scdino::run::NamedChannelsOf;
  scdino::cli::App app("scdino-export",
                       "A checkpoint's ViT backbone as a PyTorch state dict (.pth) or .safetensors under DINO's "
                       "names (docs/eval.md).\n" +
                           ExitCodesHelp("scdino-export"));
  app->add_option("--checkpoint", checkpoint, "an scdino checkpoint (.safetensors)")->required()->type_name("FILE");
  app->add_option("--out", out, "FILE.pth (FILE.pth.json beside it holds the metadata) or FILE.safetensors")
      ->required()
      ->type_name("FILE");
  app->add_option("--key", options.key, "which network: teacher or student")->check(CLI::IsMember({"teacher", "student"}));
  app->add_flag("--force", options.force, "replace existing output files");
  if (auto code = app.Parse(argc, argv)) return *code;

  auto result = scdino::features::ExportBackbone(checkpoint, out, options);
  if (!result.ok()) {
    std::cerr << "scdino-export: " << result.status().message() << "\n";
    return ExitCodeFor(result.status());
  }
  const auto& m = result->metadata;
  std::cerr << "scdino-export: the " << options.key << " backbone of " << checkpoint;
  if (m.count("iteration")) std::cerr << " (iteration " << m.at("iteration") << ")";
  std::cerr << ": " << m.at("arch") << ", patch " << m.at("patch_size") << ", " << m.at("in_chans") << " channels";
  if (m.count("channels")) std::cerr << " " << m.at("channels");
  std::cerr << ", " << result->tensors << " tensors, " << result->parameters << " parameters -> " << result->out
            << " (" << result->bytes << " bytes)";
  if (!result->metadata_path.empty()) std::cerr << ", metadata in " << result->metadata_path;
  std::cerr << "\nLoad it in Python:\n";
  std::cout << result->python;
  return kExitCompleted;
}

}  // namespace scdino::programs::export_main
