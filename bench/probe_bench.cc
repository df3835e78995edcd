// Linear probe benchmark: scdino-eval's probe (eval/linear_probe.h: C chosen
// on a stratified validation part of the training rows, then refitted on all
// of them) on features saved as .npy by bench/probe_vs_sklearn.py, which
// runs scikit-learn's LogisticRegression on the same rows. Prints one JSON
// line.
//
//   scdino-bench-probe --dir DIR [--c-grid 0.01,0.1,1,10,100,1000] [--threads 0]
//     DIR: x_train.npy (float32 [n, d]), y_train.npy (int64 [n]), x_test.npy, y_test.npy
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench_flags.h"
#include "common/npy.h"
#include "eval/linear_probe.h"
#include "launch/environment.h"

int main(int argc, char** argv) {
  const scdino::bench::Flags a(argc, argv, "scdino-bench-probe",
                               "Seconds and top-1 of the linear probe (docs/performance.md).",
                               {{"dir", "", "directory with x_train.npy, y_train.npy, x_test.npy, y_test.npy (bench/probe_vs_sklearn.py writes them)"},
                                {"c-grid", "0.01,0.1,1,10,100,1000", "inverse regularisation strengths tried, comma-separated (scdino.evaluation.linear_probe_c)"},
                                {"threads", "0", "intra-op threads (0: all cores)"}});
  const int threads = scdino::run::ConfigureCpu(a.num("threads"));
  auto read = [&](const char* name) {
    auto t = scdino::ReadNpy(a.str("dir") + "/" + name);
    if (!t.ok()) {
      std::cerr << "scdino-bench-probe: " << t.status().ToString() << "\n";
      std::exit(2);
    }
    return *t;
  };
  const auto x_train = read("x_train.npy"), y_train = read("y_train.npy"), x_test = read("x_test.npy"),
             y_test = read("y_test.npy");
  scdino::eval::LinearProbeOptions o;
  o.c_grid.clear();
  std::stringstream grid(a.str("c-grid"));
  for (std::string c; std::getline(grid, c, ',');) o.c_grid.push_back(std::stod(c));
  const int64_t classes = y_train.max().item<int64_t>() + 1;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = scdino::eval::LinearProbe(x_train, y_train, x_test, classes, o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) {
    std::cerr << "scdino-bench-probe: " << r.status().ToString() << "\n";
    return 1;
  }
  const auto predicted = torch::tensor(r->predicted, torch::kInt64);
  const double top1 = predicted.eq(y_test).to(torch::kFloat64).mean().item<double>();
  nlohmann::json out = {{"benchmark", "linear_probe"},
                        {"train", x_train.size(0)},
                        {"test", x_test.size(0)},
                        {"dim", x_train.size(1)},
                        {"classes", classes},
                        {"threads", threads},
                        {"seconds", secs},
                        {"top1", top1},
                        {"c", r->c},
                        {"grid", r->grid},
                        {"validation", r->validation},
                        {"final_iterations", r->iterations}};
  std::cout << out.dump() << "\n";
  return 0;
}
