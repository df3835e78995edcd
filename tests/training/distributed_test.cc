#include "training/distributed.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <iostream>
#include <mutex>
#include <thread>

#include "model/dino.h"
#include "support/test_support.h"

namespace scdino::training {
namespace {

using scdino::testing::AllClose;

model::DinoOptions Tiny() {
  model::DinoOptions o;
  o.vit = model::VitOptions().in_chans(3).patch_size(8).img_size(16).embed_dim(32).depth(2).num_heads(2);
  o.out_dim = 64;
  o.head_hidden_dim = 32;
  o.head_bottleneck_dim = 16;
  o.local_crops_number = 2;
  o.epochs = 3;
  return o;
}

std::vector<torch::Tensor> Crops(int64_t step, int64_t batch) {
  torch::manual_seed(100 + step);
  return {torch::randn({batch, 3, 16, 16}), torch::randn({batch, 3, 16, 16}), torch::randn({batch, 3, 8, 8}),
          torch::randn({batch, 3, 8, 8})};
}

model::StepInput Input(std::vector<torch::Tensor> crops, int64_t step) {
  model::StepInput in;
  in.crops = std::move(crops);
  in.epoch = step;  // epoch 0 freezes the last layer, later epochs train it
  in.lr = 1e-3;
  in.weight_decay = 0.04;
  in.momentum = 0.99;
  return in;
}

// Two Gloo ranks (threads of this process, talking over TCP), each with half
// of the global batch, end with the weights, teacher and center of one
// process that takes the whole batch.
void ExpectTwoRanksEqualOneProcess(const model::DinoOptions& options) {
  torch::manual_seed(0);
  model::Dino init(options);
  const TensorMap start = init.TeacherWeights();
  const int64_t B = 4, steps = 3;

  model::Dino single(options);
  ASSERT_TRUE(single.LoadWeights(start, "start").ok());
  std::vector<TensorMap> single_grads;
  for (int64_t s = 0; s < steps; ++s) {
    single.Step(Input(Crops(s, B), s));  // Crops reseeds: the same crops as below
    TensorMap g;
    for (const auto& p : single.trainable()) {
      if (p.param.grad().defined()) g[p.name] = p.param.grad().clone();
    }
    single_grads.push_back(g);
  }

  // The global random generator is shared by threads: crops are made first.
  std::vector<std::vector<torch::Tensor>> all_crops;
  for (int64_t s = 0; s < steps; ++s) all_crops.push_back(Crops(s, B));
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::unique_ptr<model::Dino>> ranks(2);
  std::vector<std::vector<TensorMap>> rank_grads(2);
  std::vector<int64_t> buckets(2);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      torch::set_num_threads(1);
      DistributedOptions opts;
      opts.bucket_bytes = 64 << 10;  // several buckets for this small model
      auto coll = Collective::Create(store, r, 2, opts, torch::kCPU);
      ranks[r] = std::make_unique<model::Dino>(options);
      auto& dino = *ranks[r];
      ThrowIfError(dino.LoadWeights(start, "start"));
      GradientAllReducer reducer(coll, &dino.student_flat(), opts.bucket_bytes);
      buckets[r] = reducer.buckets();
      model::StepHooks hooks;
      hooks.after_backward = [&] { reducer.Finish(); };
      hooks.sum_over_ranks = [coll](torch::Tensor& t) { coll->AllReduceSum(t); };
      hooks.step_exchange = hooks.sum_over_ranks;
      for (int64_t s = 0; s < steps; ++s) {
        std::vector<torch::Tensor> half;
        for (const auto& c : all_crops[s]) half.push_back(c.slice(0, r * B / 2, (r + 1) * B / 2));
        dino.Step(Input(half, s), hooks);
        TensorMap g;
        for (const auto& p : dino.trainable()) {
          if (p.param.grad().defined()) g[p.name] = p.param.grad().clone();
        }
        rank_grads[r].push_back(g);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(buckets[0], 2);

  // Gradients after all-reduce, clipping and the freeze: the same on both
  // ranks and equal to the whole-batch gradients up to float32 summation
  // order (tolerance 1e-5 relative to each tensor's largest element).
  for (int64_t s = 0; s < steps; ++s) {
    ASSERT_EQ(rank_grads[0][s].size(), single_grads[s].size());
    for (const auto& [name, g] : single_grads[s]) {
      EXPECT_TRUE(rank_grads[0][s].at(name).equal(rank_grads[1][s].at(name))) << name;
      const double scale = g.abs().max().item<double>();
      EXPECT_TRUE(AllClose(rank_grads[0][s].at(name), g, 1e-4, 1e-5 * scale + 1e-12)) << "step " << s << " " << name;
    }
  }
  // Weights, teacher and center: the ranks agree exactly; against the single
  // process the weights agree to 1e-5 (three AdamW steps of lr 1e-3, Adam
  // normalises each gradient element, so noise-level gradient elements, like
  // the mathematically zero key bias, move by up to lr either way).
  const auto a = ranks[0]->StateDict(), b = ranks[1]->StateDict(), one = single.StateDict();
  for (const auto& [name, t] : one) {
    if (name.rfind("optimizer.", 0) == 0) continue;
    EXPECT_TRUE(a.at(name).equal(b.at(name))) << name;
    const double tol = name.find("attn.qkv.bias") != std::string::npos ? 7e-3 : 1e-5;
    EXPECT_TRUE(AllClose(a.at(name), t, 0, tol)) << name;
  }
  EXPECT_TRUE(AllClose(ranks[0]->loss->center, single.loss->center, 1e-5, 1e-7)) << "center";
}

TEST(Distributed, TwoRanksWithHalfBatchesEqualOneProcessWithTheWholeBatch) { ExpectTwoRanksEqualOneProcess(Tiny()); }

// Sinkhorn-Knopp's equipartition is over the global batch: its sums go
// through the ranks' exchange, so half batches on two ranks still give the
// whole batch's targets. (KoLeo is per rank, as DINOv2's, and left out.)
TEST(Distributed, SinkhornKnoppTargetsOfTwoRanksAreThoseOfTheWholeBatch) {
  auto o = Tiny();
  o.centering = model::TeacherCentering::kSinkhornKnopp;
  o.teacher_temp = o.warmup_teacher_temp = 0.02;
  ExpectTwoRanksEqualOneProcess(o);
}

TEST(Distributed, APeerThatNeverComesFailsWithinTheTimeout) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  DistributedOptions opts;
  opts.timeout = std::chrono::milliseconds(1500);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    auto coll = Collective::Create(store, 0, 2, opts, torch::kCPU);
    auto t = torch::ones({4});
    coll->AllReduceSum(t);
    FAIL() << "expected a timeout";
  } catch (const std::exception& e) {
    // The wait is the configured one, not a default (Gloo's is 30 min), and
    // the error says what happened and which setting bounds it.
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(secs, 1.0) << e.what();
    EXPECT_LT(secs, 8.0) << e.what();
    EXPECT_NE(std::string(e.what()).find("did not form within 1500 ms (scdino.distributed_timeout_s)"),
              std::string::npos)
        << e.what();
  }
}

// Two parameters of one size, each its own bucket.
struct TwoParams : torch::nn::Module {
  TwoParams() {
    a = register_parameter("a", torch::zeros({8}));
    b = register_parameter("b", torch::zeros({8}));
  }
  torch::Tensor a, b;
};

// Backward completes the buckets in a different order on each rank (the
// autograd engine runs the later-made branch first); the launches must
// still pair bucket with bucket, or each rank's sums mix the parameters.
TEST(GradientAllReducer, BucketsPairAcrossRanksWhateverOrderBackwardCompletesThem) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<torch::Tensor> grads(2);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      torch::set_num_threads(1);
      DistributedOptions opts;
      auto coll = Collective::Create(store, r, 2, opts, torch::kCPU);
      TwoParams m;
      model::FlatParameters flat(m);
      flat.ZeroGrads();
      auto a = m.named_parameters()["a"], b = m.named_parameters()["b"];
      GradientAllReducer reducer(coll, &flat, /*bucket_bytes=*/8 * 4);
      EXPECT_EQ(reducer.buckets(), 2);
      // Rank r's gradient of a is 1 + r, of b 10 + r: the means are 1.5 and 10.5.
      const auto xa = torch::full({8}, 1.0 + static_cast<double>(r));
      const auto xb = torch::full({8}, 10.0 + static_cast<double>(r));
      torch::Tensor loss;
      if (r == 0) {
        auto ya = (xa * a).sum();
        auto yb = (xb * b).sum();
        loss = ya + yb;
      } else {
        auto yb = (xb * b).sum();
        auto ya = (xa * a).sum();
        loss = yb + ya;
      }
      loss.backward();
      reducer.Finish();
      grads[r] = torch::stack({a.grad(), b.grad()}).clone();
      coll->Shutdown();
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(grads[r].defined());
    EXPECT_TRUE(grads[r][0].equal(torch::full({8}, 1.5))) << "a: " << grads[r][0];
    EXPECT_TRUE(grads[r][1].equal(torch::full({8}, 10.5))) << "b: " << grads[r][1];
  }
}

// A rank that fails while a collective is in flight (its peer gone, or
// never joining) ends at once: the failure path aborts the group instead of
// waiting for work that never completes (Gloo's destructor would wait out
// its timeout; NCCL's shutdown, since LibTorch 2.6, for ever).
TEST(Collective, DestroyedOnAFailurePathItEndsAtOnceWithACollectiveInFlight) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  DistributedOptions opts;
  opts.timeout = std::chrono::seconds(60);
  std::vector<std::shared_ptr<Collective>> colls(2);
  {
    std::vector<std::thread> make;
    for (int64_t r = 0; r < 2; ++r) {
      make.emplace_back([&, r] { colls[r] = Collective::Create(store, r, 2, opts, torch::kCPU); });
    }
    for (auto& t : make) t.join();
  }
  auto t = torch::ones({4});
  auto work = colls[0]->AllReduceSumAsync(t);  // rank 1 never joins
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  colls[0].reset();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 5.0) << "the failure path waited for a collective that never completes";
  colls[1]->Shutdown();
}

// The watchdog's thread is set up first (on a GPU: the group's device made
// current there), before it looks at any work.
TEST(CollectiveWatchdog, ItsThreadIsSetUpBeforeItWatches) {
  std::mutex mu;
  std::thread::id started;
  bool watched_after_start = false;
  {
    CollectiveWatchdog watchdog(
        std::chrono::milliseconds(100), [](const std::string&) {},
        [&] {
          std::lock_guard<std::mutex> l(mu);
          started = std::this_thread::get_id();
        });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::lock_guard<std::mutex> l(mu);
    watched_after_start = started != std::thread::id();
  }
  EXPECT_TRUE(watched_after_start);
  EXPECT_NE(started, std::this_thread::get_id());
}

// The process group of the device under test at world size 1 (NCCL on a
// GPU, Gloo on the CPU): it forms, sums (a world of one leaves the values),
// and its abort ends it at once. scripts/gpu-first-contact.sh runs it with
// SCDINO_TEST_DEVICE=cuda: NCCL's first contact with the lent GPU.
TEST(DeviceCheck, AOneRankProcessGroupFormsSumsAndAborts) {
  const torch::Device device = scdino::testing::TestDevice();
  auto store = c10::make_intrusive<c10d::HashStore>();
  DistributedOptions opts;
  opts.timeout = std::chrono::seconds(60);
  auto coll = Collective::Create(store, 0, 1, opts, device);
  std::cout << "device " << device << ": process group " << coll->backend() << std::endl;
  EXPECT_STREQ(coll->backend(), device.is_cuda() ? "nccl" : "gloo");
  auto t = torch::arange(1024, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  coll->AllReduceSum(t);
  EXPECT_TRUE(t.cpu().equal(torch::arange(1024, torch::kFloat32)));
  auto host = torch::ones({3});  // a CPU tensor through the group's device
  coll->AllReduceSum(host);
  EXPECT_TRUE(host.equal(torch::ones({3})));
  const auto t0 = std::chrono::steady_clock::now();
  coll->Abort();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

// NCCL work is waited on the GPU stream, never by the host; the watchdog
// bounds it. A real all-reduce that never completes (rank 1 of two Gloo
// ranks does not join it in time) is reported once, after the timeout and
// not before; completed work is dropped without a word.
TEST(CollectiveWatchdog, ACollectiveThatNeverCompletesIsReportedOnceAfterTheTimeout) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  DistributedOptions opts;
  opts.timeout = std::chrono::seconds(60);  // Gloo's own: far later than the watchdog's
  std::vector<std::shared_ptr<Collective>> colls(2);
  {
    std::vector<std::thread> make;
    for (int64_t r = 0; r < 2; ++r) {
      make.emplace_back([&, r] { colls[r] = Collective::Create(store, r, 2, opts, torch::kCPU); });
    }
    for (auto& t : make) t.join();
  }
  std::mutex mu;
  std::vector<std::pair<std::string, std::chrono::steady_clock::time_point>> reports;
  const auto start = std::chrono::steady_clock::now();
  CollectiveWatchdog watchdog(std::chrono::milliseconds(400), [&](const std::string& what) {
    std::lock_guard<std::mutex> l(mu);
    reports.emplace_back(what, std::chrono::steady_clock::now());
  });
  auto t0 = torch::ones({4});
  auto work = colls[0]->AllReduceSumAsync(t0);
  watchdog.Watch(work, "the step's exchange");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  {
    std::lock_guard<std::mutex> l(mu);
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_EQ(reports[0].first, "the step's exchange");
    EXPECT_GE(reports[0].second - start, std::chrono::milliseconds(400));
  }
  EXPECT_FALSE(work->isCompleted());
  EXPECT_EQ(watchdog.in_flight(), 0u);
  // Rank 1 joins: both complete, and completed work is never reported.
  auto t1 = torch::ones({4});
  colls[1]->AllReduceSum(t1);
  colls[0]->Wait(work);
  EXPECT_TRUE(t0.equal(torch::full({4}, 2.0)));
  auto t2 = torch::ones({4}), t3 = torch::ones({4});
  std::thread other([&] { colls[1]->AllReduceSum(t3); });
  auto done = colls[0]->AllReduceSumAsync(t2);
  watchdog.Watch(done, "a finished all-reduce");
  colls[0]->Wait(done);
  other.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(reports.size(), 1u);
}

// What the watchdog hands the main's reaction on a GPU (the exit code is the
// main's: process::ExitForLostPeer, tests/process/exit_codes_test.cc): the
// rank, the collective, the timeout and the lost peer.
TEST(CollectiveWatchdog, ALostPeerIsNamedWithTheRankTheCollectiveAndTheTimeout) {
  EXPECT_EQ(LostCollectiveMessage(1, 4, std::chrono::milliseconds(300000), "an all-reduce",
                                  "lost contact with node2 (rank 3)"),
            "rank 1 of 4: an all-reduce did not complete within 300000 ms (scdino.distributed_timeout_s): lost "
            "contact with node2 (rank 3)");
}

}  // namespace
}  // namespace scdino::training
