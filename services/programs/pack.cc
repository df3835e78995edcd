// scdino-pack: packs the data set a config names into shard files and an
// index (data/packed.h), on 1..N Slurm tasks (each writes its share of the
// shards; the last to finish writes the index), resumable; or, with
// --stage, copies the packed set the config names to node-local storage,
// verified, once per node (deploy/slurm/train.sbatch runs it).
#include <cstdlib>
#include <iostream>
#include <string>

#include "common/env.h"
#include "common/files.h"
#include "common/progress.h"
#include "common/prom_text.h"
#include "config/config.h"
#include "data/packed.h"
#include "plan/source.h"
#include "process/command_line.h"
#include "process/exit_codes.h"
#include "process/signals.h"
#include "programs/mains.h"

namespace scdino::programs::pack_main {

namespace {

using namespace scdino;           // NOLINT: a main
using namespace scdino::process;  // NOLINT: the exit codes, CommandLine

int Fail(const Status& s) {
  std::cerr << "scdino-pack: " << s.message() << "\n";
  return s.code() == StatusCode::kAborted ? kExitPreempted : ExitCodeFor(s);
}

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}

// --stage DIR: the packed set the config names, copied to node-local DIR
// once per node and verified (or a verified copy reused); node_exporter's
// textfile says how long it took.
int Stage(const run::RunConfig& config, const std::string& config_path, const std::string& stage_to) {
  if (config.scdino.data_source != "folder" || !data::IsPackedSet(config.meta.dataset_dir)) {
    std::cerr << "scdino-pack: " << config_path << ": the data set is not a packed set: nothing to stage\n";
    return kExitCompleted;
  }
  auto set = data::PackedSet::Shared(config.meta.dataset_dir);
  if (!set.ok()) return Fail(set.status());
  std::cerr << "scdino-pack: staging " << config.meta.dataset_dir << " (" << ((*set)->total_bytes() >> 20)
            << " MiB) to " << stage_to << " on " << ThisHostName() << "\n";
  ProgressLog progress(&std::cerr, "scdino-pack: staging", "MiB");
  auto r = data::StagePackedSet(**set, stage_to, StopSignalReceived, config.scdino.stage_keep,
                                [&](int64_t done, int64_t total) { progress.Report(done >> 20, total >> 20); });
  if (!r.ok()) return Fail(r.status());
  std::cerr << "scdino-pack: " << (r->reused ? "reused the verified copy " : "staged and verified ") << r->dir
            << ": " << (r->bytes >> 20) << " MiB in " << r->seconds << " s on " << ThisHostName() << "\n";
  for (const auto& old : r->evicted) {
    std::cerr << "scdino-pack: removed the older staged copy " << old << " (scdino.stage_keep: "
              << config.scdino.stage_keep << ")\n";
  }
  const char* job = std::getenv("SLURM_JOB_ID");
  const PromLabels labels = {{"slurm_job_id", job ? job : ""}, {"node", ThisHostName()}};
  PromText prom;
  prom.Gauge("scdino_pack_staging_seconds", "Seconds the last staging of a packed data set to node-local storage took.");
  prom.Sample("scdino_pack_staging_seconds", labels, r->seconds);
  prom.Gauge("scdino_pack_staging_bytes", "Bytes of the packed data set staged on this node.");
  prom.Sample("scdino_pack_staging_bytes", labels, static_cast<double>(r->bytes));
  prom.Gauge("scdino_pack_staging_reused", "1 when a verified staged copy was reused.");
  prom.Sample("scdino_pack_staging_reused", labels, r->reused ? 1 : 0);
  WriteTextfile(TextfileDir(), "scdino-stage.prom", prom.str(), "scdino-pack");
  std::cout << r->dir << "\n";
  return kExitCompleted;
}

// Packs the config's data set (this task's share of it) with `o`'s sizes
// and seed; the task's rank and the stop and progress hooks are set here.
int Pack(const run::RunConfig& config, const std::string& config_path, data::PackOptions o) {
  if (config.scdino.data_source == "synthetic") {
    return Fail(Status::InvalidArgument(config_path + ": scdino.data_source is synthetic: nothing to pack"));
  }
  if (data::IsPackedSet(config.meta.dataset_dir) && config.scdino.data_source == "folder") {
    return Fail(Status::InvalidArgument(config.meta.dataset_dir + " (meta.dataset_dir) is already a packed set"));
  }
  auto dataset = run::IndexDataset(config);
  if (!dataset.ok()) return Fail(dataset.status());
  for (const auto& why : dataset->skipped) std::cerr << "scdino-pack: skipping " << why << "\n";
  // The tasks of this srun step (in a batch script outside srun, one).
  o.world_size = std::max<int64_t>(1, EnvInt("SLURM_STEP_NUM_TASKS", 1));
  o.rank = o.world_size > 1 ? EnvInt("SLURM_PROCID", 0) : 0;
  o.folder_depth_for_labels = config.scdino.data_source == "folder" ? config.meta.folder_depth_for_labels : 0;
  o.should_stop = StopSignalReceived;
  o.log = [&](const std::string& line) { std::cerr << "scdino-pack: [" << o.rank << "] " << line << "\n"; };
  ProgressLog progress(&std::cerr, "scdino-pack: [" + std::to_string(o.rank) + "] packing", "images");
  o.on_progress = [&](int64_t done, int64_t total) { progress.Report(done, total); };
  auto r = data::PackDataset(*dataset, o);
  if (!r.ok()) return Fail(r.status());
  std::cerr << "scdino-pack: [" << o.rank << "] " << r->shards_written << " shard(s) written (" << r->images
            << " images, " << (r->bytes >> 20) << " MiB), " << r->shards_reused << " already there";
  if (r->finished) {
    std::cerr << "; " << o.out << " is complete: point meta.dataset_dir at it\n";
  } else {
    std::cerr << "; " << r->shards_of_others << " shard(s) left to other tasks, the last to finish writes "
              << o.out << "/pack.json\n";
  }
  return kExitCompleted;
}

}  // namespace

int Main(int argc, char** argv) {
  InstallStopSignals("scdino-pack", "stopping after the current image");
  std::string out, stage_to;
  int64_t shard_mb = 256, shard_images = 0, block = 256, seed = 0;
  CommandLine cl("scdino-pack",
                 "Packs the data set of a config (meta.dataset_dir or scdino.index_csv) into a few large shard files "
                 "and an index that every scdino service reads in place of the folders (point meta.dataset_dir at "
                 "--out). Run on N Slurm tasks to pack in parallel; a rerun resumes. With --stage, copies the packed "
                 "set the config names to node-local storage (once per node), verified (docs/data.md#packed-data-"
                 "sets).\n" +
                     ExitCodesHelp("scdino-pack"));
  cl.app().add_option("--out", out, "the packed set's directory")->type_name("DIR");
  cl.app().add_option("--shard-mb", shard_mb, "about this many MiB per shard (default 256)")->check(CLI::PositiveNumber);
  cl.app().add_option("--shard-images", shard_images, "images per shard instead (rounded down to whole blocks)")
      ->check(CLI::PositiveNumber);
  cl.app().add_option("--block", block, "images per read block (default 256)")->check(CLI::PositiveNumber);
  cl.app().add_option("--seed", seed, "seed of the pack order (default 0)")->check(CLI::NonNegativeNumber);
  cl.app().add_option("--stage", stage_to,
                      "instead of packing: copy the packed set meta.dataset_dir names into DIR/<fingerprint>, or "
                      "reuse a verified copy there")->type_name("DIR");
  if (auto code = cl.Parse(argc, argv)) return *code;
  const auto& config = cl.config();
  cl.ConfigureCpu();

  if (!stage_to.empty()) return Stage(config, cl.config_path(), stage_to);

  if (out.empty()) return Fail(Status::InvalidArgument("--out DIR is required (or --stage DIR)"));
  data::PackOptions o;
  o.out = out;
  o.shard_mb = shard_mb;
  o.shard_images = shard_images;
  o.block_samples = block;
  o.seed = static_cast<uint64_t>(seed);
  return Pack(config, cl.config_path(), o);
}

}  // namespace scdino::programs::pack_main
