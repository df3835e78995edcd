// Data-pipeline benchmark: images/s of reading, decoding, preprocessing and
// augmenting (scDINO's multi-crop recipe) a class-folder TIFF data set or a
// packed set (scdino-pack) through the FileLoader on the CPU. Prints one
// JSON line.
//
//   scdino-bench-data --data DIR [--batch 32] [--batches 20] [--threads 2]
//     [--loader-threads 2] [--global 224] [--local 96] [--local-crops 8]
//     [--cache 0] [--shuffle auto|global|blocks] [--shuffle-buffer 4096]
//     [--drop-caches 0]
// --batches 0: one whole epoch. The data set is indexed (a folder walk or
// the packed index) after the caches are dropped; index_seconds reports it.
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/bench_flags.h"
#include "data/loader.h"
#include "launch/environment.h"

int main(int argc, char** argv) {
  const scdino::bench::Flags a(argc, argv, "scdino-bench-data", "Images/s of the file loader and multi-crop augmentation (docs/performance.md).",
                               {{"data", "", "the data set: an image folder or a packed set (scdino-pack)"},
                                {"batch", "32", "images a batch"},
                                {"batches", "20", "batches to time (0: one epoch)"},
                                {"threads", "2", "intra-op threads"},
                                {"loader-threads", "2", "loader threads (scdino.num_workers)"},
                                {"global", "224", "global crop size, px"},
                                {"local", "96", "local crop size, px"},
                                {"local-crops", "8", "local crops an image"},
                                {"cache", "0", "1: keep decoded images in memory after the first epoch"},
                                {"shuffle", "auto", "global, blocks, or auto (blocks for a packed set)"},
                                {"shuffle-buffer", "4096", "images in the block shuffle buffer"},
                                {"drop-caches", "0", "1: drop the page cache first (root), as a node's first epoch meets it"}});
  auto num = [&](const char* k) { return a.num(k); };
  const int threads = scdino::run::ConfigureCpu(num("threads"));
  // A cold page cache (root only): what the first epoch on a node meets.
  if (num("drop-caches") != 0) {
    ::sync();
    std::ofstream drop("/proc/sys/vm/drop_caches");
    if (!(drop << "3\n") || !drop.flush()) {
      std::cerr << "--drop-caches 1: cannot write /proc/sys/vm/drop_caches (needs root)\n";
      return 2;
    }
  }
  const auto t_index = std::chrono::steady_clock::now();
  scdino::data::LoaderOptions o;
  const bool packed = scdino::data::IsPackedSet(a.str("data"));
  auto dataset = [&]() -> scdino::StatusOr<scdino::data::Dataset> {
    if (!packed) return scdino::data::IndexFolder(a.str("data"));
    auto set = scdino::data::PackedSet::Shared(a.str("data"));
    if (!set.ok()) return set.status();
    return scdino::data::DatasetOf(*set);
  }();
  if (!dataset.ok()) {
    std::cerr << dataset.status().ToString() << "\n";
    return 2;
  }
  const std::string shuffle = a.str("shuffle") == "auto" ? (packed ? "blocks" : "global") : a.str("shuffle");
  if (shuffle == "blocks") {
    if (!packed) {
      std::cerr << "--shuffle blocks needs a packed set\n";
      return 2;
    }
    scdino::data::UseBlockShuffle(*dataset->packed, num("shuffle-buffer"), &o.sampler);
  }
  o.sampler.batch_size = num("batch");
  o.crops.global_size = num("global");
  o.crops.local_size = num("local");
  o.crops.local_crops_number = num("local-crops");
  o.threads = static_cast<int>(num("loader-threads"));
  o.cache = num("cache") != 0;
  const int64_t channels = 5;
  o.crops.mean.assign(channels, 0.5);
  o.crops.std.assign(channels, 0.25);
  const auto t_open = std::chrono::steady_clock::now();
  scdino::data::FileLoader loader(*dataset, o);
  const int64_t want = num("batches") > 0 ? num("batches") : loader.batches_per_epoch();
  int64_t images = 0, batches = 0, epoch = 0;
  const auto t0 = t_open;
  while (batches < want) {
    loader.StartEpoch(epoch++, 0);
    while (batches < want) {
      auto b = loader.Next();
      if (!b) break;
      images += b->indices.size(0);
      ++batches;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double waited = loader.queue_wait_seconds();
  const double index_secs = std::chrono::duration<double>(t_open - t_index).count();
  nlohmann::json r = {{"index_seconds", index_secs}, {"images_per_s_with_index", images / (secs + index_secs)},{"benchmark", "data_pipeline"}, {"pipeline", "scdino"},
                      {"images", images},             {"seconds", secs},
                      {"images_per_s", images / secs}, {"waiting_on_decode_s", waited}, {"threads", threads},
                      {"loader_threads", num("loader-threads")}, {"batch", num("batch")},
                      {"crops", "2x" + a.str("global") + " + " + a.str("local-crops") + "x" + a.str("local")},
                      {"source", packed ? "packed" : "folders"}, {"shuffle", shuffle},
                      {"cold_cache", num("drop-caches") != 0}, {"dataset_images", static_cast<int64_t>(dataset->entries.size())}};
  std::cout << r.dump() << std::endl;
  return 0;
}
