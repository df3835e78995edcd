// Data-pipeline benchmark: images/s of reading, decoding, preprocessing and
// augmenting (scDINO's multi-crop recipe) a class-folder TIFF data set
// through the FileLoader on the CPU. Prints one JSON line.
//
//   scdino-bench-data --data DIR [--batch 32] [--batches 20] [--threads 2]
//     [--loader-threads 2] [--global 224] [--local 96] [--local-crops 8]
//     [--cache 0]
#include <chrono>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/bench_flags.h"
#include "data/loader.h"
#include "run/environment.h"

int main(int argc, char** argv) {
  const scdino::bench::Flags a(argc, argv, "scdino-bench-data", "Images/s of the file loader and multi-crop augmentation (docs/performance.md).",
                               {{"data", ""}, {"batch", "32"}, {"batches", "20"}, {"threads", "2"},
                                {"loader-threads", "2"}, {"global", "224"}, {"local", "96"}, {"local-crops", "8"},
                                {"cache", "0"}});
  auto num = [&](const char* k) { return a.num(k); };
  const int threads = scdino::run::ConfigureCpu(num("threads"));
  auto dataset = scdino::data::IndexFolder(a.str("data"));
  if (!dataset.ok()) {
    std::cerr << dataset.status().ToString() << "\n";
    return 2;
  }
  scdino::data::LoaderOptions o;
  o.sampler.batch_size = num("batch");
  o.crops.global_size = num("global");
  o.crops.local_size = num("local");
  o.crops.local_crops_number = num("local-crops");
  o.threads = static_cast<int>(num("loader-threads"));
  o.cache = num("cache") != 0;
  const int64_t channels = 5;
  o.crops.mean.assign(channels, 0.5);
  o.crops.std.assign(channels, 0.25);
  scdino::data::FileLoader loader(*dataset, o);
  const int64_t want = num("batches");
  int64_t images = 0, batches = 0, epoch = 0;
  const auto t0 = std::chrono::steady_clock::now();
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
  nlohmann::json r = {{"benchmark", "data_pipeline"}, {"pipeline", "scdino"},
                      {"images", images},             {"seconds", secs},
                      {"images_per_s", images / secs}, {"waiting_on_decode_s", waited}, {"threads", threads},
                      {"loader_threads", num("loader-threads")}, {"batch", num("batch")},
                      {"crops", "2x" + a.str("global") + " + " + a.str("local-crops") + "x" + a.str("local")}};
  std::cout << r.dump() << std::endl;
  return 0;
}
