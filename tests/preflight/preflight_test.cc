// The preflight's parts: nccl-tests' bus bandwidth, the sweep's sizes, a
// real Gloo all-reduce sweep between two ranks (threads over one store),
// the gathering of every rank's checks on rank 0, whole-file reads, free
// space, nvidia-smi's ECC answer, and the verdict naming node and figure.
#include "preflight/preflight.h"

#include <gtest/gtest.h>

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <filesystem>
#include <fstream>
#include <thread>

#include "support/test_support.h"

namespace scdino::preflight {
namespace {

TEST(BusBandwidth, IsTheAlgorithmBandwidthTimesTheRingShare) {
  EXPECT_DOUBLE_EQ(BusBandwidth(10.0, 2), 10.0);
  EXPECT_DOUBLE_EQ(BusBandwidth(10.0, 4), 15.0);
  EXPECT_DOUBLE_EQ(BusBandwidth(10.0, 8), 17.5);
  EXPECT_DOUBLE_EQ(BusBandwidth(10.0, 1), 0.0);
}

TEST(SweepSizes, GoFromTheSmallestToTheLargestByTheFactor) {
  EXPECT_EQ(SweepSizes(8, 256 << 20, 8),
            (std::vector<int64_t>{8, 64, 512, 4096, 32768, 262144, 2097152, 16777216, 134217728, 268435456}));
  EXPECT_EQ(SweepSizes(8, 8, 2), (std::vector<int64_t>{8}));
  EXPECT_EQ(SweepSizes(6, 30, 2), (std::vector<int64_t>{4, 8, 16, 28}));  // whole float32 elements
}

// Two ranks measure the same rows; every all-reduce really summed (the
// verdict tensor proves the group works), and bandwidth follows size.
TEST(AllReduceSweep, TwoGlooRanksMeasureEverySize) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<StatusOr<std::vector<SweepRow>>> rows(2, Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      torch::set_num_threads(1);
      auto coll = training::Collective::Create(store, r, 2, {}, torch::kCPU);
      rows[r] = AllReduceSweep(*coll, {8, 4096, 1 << 20}, 5, 0.2, torch::kCPU);
      auto one = torch::ones({3});
      coll->AllReduceSum(one);
      EXPECT_TRUE(one.eq(2).all().item<bool>());
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : rows) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->size(), 3u);
    for (const auto& row : *r) {
      EXPECT_GE(row.iterations, 1);
      EXPECT_LE(row.iterations, 5);
      EXPECT_GT(row.seconds, 0.0);
      EXPECT_DOUBLE_EQ(row.busbw_gbps, row.algbw_gbps);  // 2 ranks: 2 (n - 1) / n = 1
    }
    EXPECT_GT(r->back().algbw_gbps, r->front().algbw_gbps);
  }
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*rows[1])[i].iterations, (*rows[0])[i].iterations) << "the ranks disagree on the iterations of size " << i;
  }
  const std::string table = SweepTable(*rows[0], 2, "gloo");
  EXPECT_NE(table.find("# all-reduce (sum, float) over 2 ranks, gloo"), std::string::npos) << table;
  EXPECT_NE(table.find("      1048576       262144  float"), std::string::npos) << table;
}

TEST(AllReduceSweep, AStopEndsItBetweenSizes) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto coll = training::Collective::Create(store, 0, 1, {}, torch::kCPU);
  auto r = AllReduceSweep(*coll, {8, 64}, 2, 0.1, torch::kCPU, [] { return true; });
  ASSERT_EQ(r.status().code(), StatusCode::kAborted);
  EXPECT_NE(r.status().message().find("0 of 2 sizes measured"), std::string::npos) << r.status().message();
}

TEST(GatherOnRankZero, RankZeroGetsEveryRanksChecksInOrder) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<StatusOr<std::vector<RankChecks>>> got(3, Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto c = run::Coordinator::OverStore(store, r, 3, std::chrono::seconds(20));
      RankChecks mine;
      mine.rank = r;
      mine.node = "node" + std::to_string(r / 2);
      mine.free_gb = 10.0 * static_cast<double>(r);
      mine.reads = r == 2;
      mine.read.files = 7;
      mine.read.bytes = 7000000;
      mine.read.seconds = 2.0;
      got[r] = GatherOnRankZero(*c, mine);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  ASSERT_EQ(got[0]->size(), 3u);
  for (int64_t r = 0; r < 3; ++r) {
    EXPECT_EQ((*got[0])[r].rank, r);
    EXPECT_DOUBLE_EQ((*got[0])[r].free_gb, 10.0 * static_cast<double>(r));
  }
  EXPECT_TRUE((*got[0])[2].reads);
  EXPECT_DOUBLE_EQ((*got[0])[2].read.mbps(), 3.5);
  ASSERT_TRUE(got[1].ok()) << got[1].status().ToString();
  EXPECT_EQ(got[1]->size(), 1u);  // the others get their own back
}

TEST(ReadThroughput, ReadsWholeFilesAndNamesOneItCannotRead) {
  scdino::testing::ScratchDir d;
  std::vector<std::string> paths;
  for (int i = 0; i < 10; ++i) {
    paths.push_back(d.file("f" + std::to_string(i)));
    std::ofstream(paths.back(), std::ios::binary) << std::string(3000 + i, 'x');
  }
  auto r = ReadThroughput(paths, 5);
  EXPECT_EQ(r.files, 5);
  EXPECT_EQ(r.bytes, 3000 + 3002 + 3004 + 3006 + 3008);  // every second file: spread over the list
  EXPECT_TRUE(r.error.empty());
  paths[4] = d.file("gone");
  auto bad = ReadThroughput(paths, 5);
  EXPECT_EQ(bad.error, d.file("gone") + ": cannot be read");
}

TEST(FreeGigabytes, AskTheFileSystemOfTheNearestExistingFolder) {
  scdino::testing::ScratchDir d;
  const double here = FreeGigabytes(d.path());
  EXPECT_GT(here, 0.0);
  EXPECT_NEAR(FreeGigabytes(d.file("not/yet/made")), here, 1.0);
}

// A stand-in nvidia-smi that answers as the real one does for a GPU with
// ECC (a count) and without (N/A), or fails.
TEST(EccErrors, ReadsNvidiaSmisAnswer) {
  scdino::testing::ScratchDir d;
  auto smi = [&](const std::string& name, const std::string& body) {
    const std::string path = d.file(name);
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0755);
    return path;
  };
  EXPECT_EQ(EccErrors(smi("ecc", "case \"$*\" in *'-i 3'*) echo 2 ;; *) echo 0 ;; esac"), 3), 2);
  EXPECT_EQ(EccErrors(d.file("ecc"), 1), 0);
  EXPECT_EQ(EccErrors(smi("na", "echo '[N/A]'"), 0), -1);
  EXPECT_EQ(EccErrors(smi("fails", "exit 9"), 0), -1);
  EXPECT_EQ(EccErrors(d.file("no-such-command"), 0), -1);
  // Asked from a thread that blocks SIGTERM (every service thread does), the
  // child still takes it: it answers 1 where SIGTERM (bit 14) is blocked.
  sigset_t term, was;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &was), 0);
  const int64_t blocked = EccErrors(
      smi("mask", "blk=$(awk '/^SigBlk/ {print $2}' /proc/$$/status); echo $(( (0x$blk >> 14) & 1 ))"), 0);
  pthread_sigmask(SIG_SETMASK, &was, nullptr);
  EXPECT_EQ(blocked, 0) << "nvidia-smi was started with SIGTERM blocked";
}

TEST(Judge, NamesTheNodeTheFigureAndTheKey) {
  std::vector<SweepRow> sweep{{8, 10, 120e-6, 0.0, 0.0}, {1 << 20, 10, 1e-3, 1.048576, 1.048576}};
  RankChecks a;
  a.rank = 0;
  a.node = "gpu-st-1";
  a.run_dir = "/fsx/runs/r";
  a.free_gb = 500;
  a.reads = true;
  a.read = {100, 50000000, 1.0, ""};
  RankChecks b = a;
  b.rank = 1;
  b.node = "gpu-st-2";
  b.free_gb = 0.5;
  b.read.seconds = 10.0;
  b.device = "cuda:0";
  // Bound to its own GPU, as lib.sh's --gpus-per-task=1 does: one visible
  // among 4 tasks of the node is right, not a failure.
  b.gpus_visible = 1;
  b.tasks_on_node = 4;
  b.gpu_job = true;
  b.gpu = "2";
  b.gpu_free_gb = 2.0;
  b.ecc_errors = 3;
  run::PreflightConfig t;
  EXPECT_EQ(Judge(sweep, {a}, t), std::vector<std::string>{});  // the defaults: only free space (1 GB) judged
  t.min_busbw_gbps = 20;
  t.max_latency_us = 100;
  t.min_read_mbps = 10;
  t.min_gpu_free_gb = 40;
  const auto f = Judge(sweep, {a, b}, t);
  const std::vector<std::string> expected{
      "all-reduce over gpu-st-1, gpu-st-2: bus bandwidth 1.049 GB/s at 1048576 B is below "
      "scdino.preflight.min_busbw_gbps 20.000",
      "all-reduce: 8 B take 120.0 us, above scdino.preflight.max_latency_us 100.0",
      "gpu-st-2 (rank 1): 0.50 GB free in /fsx/runs/r, below scdino.preflight.min_free_gb 1.00",
      "gpu-st-2 (rank 1): reads the data set at 5.0 MB/s (100 files), below scdino.preflight.min_read_mbps 10.0",
      "gpu-st-2 (rank 1): 2.00 GB free on cuda:0, below scdino.preflight.min_gpu_free_gb 40.00",
      "gpu-st-2 (rank 1): cuda:0 reports 3 uncorrected ECC error(s)"};
  ASSERT_EQ(f.size(), expected.size()) << ::testing::PrintToString(f);
  for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(f[i].rfind(expected[i], 0), 0u) << f[i];
  const auto report = Report(sweep, {a, b}, f, t, 2, "gloo");
  EXPECT_FALSE(report["passed"].get<bool>());
  EXPECT_EQ(report["ranks"][1]["node"], "gpu-st-2");
  EXPECT_EQ(report["all_reduce"][1]["bytes"], 1 << 20);
  const std::string prom = PrometheusText(sweep, {a, b}, f, "77");
  EXPECT_NE(prom.find("scdino_preflight_passed{slurm_job_id=\"77\"} 0"), std::string::npos) << prom;
  EXPECT_NE(prom.find("scdino_preflight_allreduce_busbw_bytes_per_second{slurm_job_id=\"77\",size_bytes=\"1048576\"} 1048576000\n"),
            std::string::npos)
      << prom;
  EXPECT_NE(prom.find("scdino_preflight_read_bytes_per_second{slurm_job_id=\"77\",node=\"gpu-st-2\"} 5000000\n"),
            std::string::npos)
      << prom;
}

// Every task of a GPU job bound to a GPU of its own passes; two tasks of a
// node on one GPU, and a task given none, are named with node, task, rank
// and GPU.
TEST(Judge, OneGpuPerTaskPassesASharedOrMissingOneIsNamed) {
  auto task = [](const std::string& node, int64_t rank, int64_t local, const std::string& gpu) {
    RankChecks c;
    c.node = node;
    c.rank = rank;
    c.local_rank = local;
    c.tasks_on_node = 2;
    c.gpu_job = true;
    c.gpu = gpu;
    return c;
  };
  run::PreflightConfig t;
  t.min_free_gb = 0;
  const std::vector<RankChecks> good{task("node1", 0, 0, "0"), task("node1", 1, 1, "1"), task("node2", 2, 0, "0"),
                                     task("node2", 3, 1, "1")};
  EXPECT_EQ(Judge({}, good, t), std::vector<std::string>{});
  auto shared = good;
  shared[3].gpu = "0";
  shared[0].gpu = "";
  EXPECT_EQ(Judge({}, shared, t),
            (std::vector<std::string>{"GPU binding: node1: task 0 (rank 0): no GPU, in a job with GPUs",
                                      "GPU binding: node2: tasks 0 and 1 (ranks 2 and 3) are both bound to GPU 0: "
                                      "each task needs its own (srun --gpus-per-task=1)"}));
  auto refused = good;
  refused[1].gpu = "";
  refused[1].binding_error = "this task (local rank 1) was given no GPU";
  EXPECT_EQ(Judge({}, refused, t),
            std::vector<std::string>{"GPU binding: node1: task 1 (rank 1): this task (local rank 1) was given no GPU"});
  // A CPU job: no GPU anywhere is right.
  auto cpu = good;
  for (auto& c : cpu) {
    c.gpu_job = false;
    c.gpu = "";
  }
  EXPECT_EQ(Judge({}, cpu, t), std::vector<std::string>{});
}

// NCCL's own words (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET, as NCCL
// 2.18-2.22 write them): which network it took. On a node whose IB
// transport did not load, NET/IB finds no device and NCCL takes sockets.
const char* kNcclOverIb =
    "gpu01:1041:1041 [0] NCCL INFO Bootstrap : Using ib0:10.10.0.11<0>\n"
    "gpu01:1041:1041 [0] NCCL INFO NCCL version 2.22.3+cuda12.4\n"
    "gpu01:1041:1098 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.10.0.11<0>\n"
    "gpu01:1041:1098 [0] NCCL INFO Using network IB\n"
    "gpu01:1041:1098 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0\n";
const char* kNcclFellBackToSockets =
    "gpu02:2203:2203 [0] NCCL INFO Bootstrap : Using ib0:10.10.0.12<0>\n"
    "gpu02:2203:2203 [0] NCCL INFO NCCL version 2.22.3+cuda12.4\n"
    "gpu02:2203:2260 [0] NCCL INFO Failed to open libibverbs.so[.1]\n"
    "gpu02:2203:2260 [0] NCCL INFO NET/Socket : Using [0]ib0:10.10.0.12<0> [1]eth0:192.168.1.12<0>\n"
    "gpu02:2203:2260 [0] NCCL INFO Using network Socket\n"
    "gpu02:2203:2260 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0\n";
const char* kNcclOverEfa =
    "p5-1:3101:3101 [0] NCCL INFO NET/OFI Using aws-ofi-nccl 1.9.1\n"
    "p5-1:3101:3101 [0] NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)\n"
    "p5-1:3101:3101 [0] NCCL INFO Using network Libfabric\n";

TEST(NcclNetwork, ReadsTheNetworkNcclTookFromItsLog) {
  EXPECT_EQ(NcclNetwork(kNcclOverIb), "IB");
  EXPECT_EQ(NcclNetwork(kNcclFellBackToSockets), "Socket");
  EXPECT_EQ(NcclNetwork(kNcclOverEfa), "Libfabric");
  EXPECT_EQ(NcclNetwork("gpu01:1:1 [0] NCCL INFO Using network AWS Libfabric\r\n"), "AWS Libfabric");
  EXPECT_EQ(NcclNetwork(""), "");
  EXPECT_EQ(NcclNetwork("gpu01:1041:1041 [0] NCCL INFO NCCL version 2.22.3+cuda12.4\n"), "");
}

TEST(InfinibandDevices, ListsTheKernelsDevicesOrNone) {
  scdino::testing::ScratchDir dir;
  for (const char* d : {"mlx5_1", "mlx5_0"}) std::filesystem::create_directories(dir.path() + "/ib/" + d);
  EXPECT_EQ(InfinibandDevices(dir.path() + "/ib"), (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  EXPECT_TRUE(InfinibandDevices(dir.path() + "/absent").empty());
}

// A node with InfiniBand devices whose NCCL took sockets is named, once,
// whatever its rank count; IB, EFA and a node without IB devices are not.
TEST(FabricWarnings, NameTheNodeWhoseNcclFellBackToSocketsBesideInfiniband) {
  auto rank = [](const std::string& node, int64_t r, const char* log, std::vector<std::string> ib) {
    RankChecks c;
    c.node = node;
    c.rank = r;
    c.nccl_network = NcclNetwork(log);
    c.ib_devices = std::move(ib);
    return c;
  };
  const std::vector<std::string> ib{"mlx5_0", "mlx5_1"};
  const std::vector<RankChecks> ranks{rank("gpu01", 0, kNcclOverIb, ib), rank("gpu01", 1, kNcclOverIb, ib),
                                      rank("gpu02", 2, kNcclFellBackToSockets, ib),
                                      rank("gpu02", 3, kNcclFellBackToSockets, ib),
                                      rank("cpu07", 4, kNcclFellBackToSockets, {}), rank("p5-1", 5, kNcclOverEfa, {})};
  const auto w = FabricWarnings(ranks);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("node gpu02 has InfiniBand device(s) mlx5_0, mlx5_1 but NCCL uses TCP sockets (rank 2"),
            std::string::npos)
      << w[0];
  EXPECT_NE(w[0].find("rdma-core"), std::string::npos) << w[0];
  // The warning reaches the report, beside a pass.
  const auto report = Report({}, ranks, {}, run::PreflightConfig{}, 6, "nccl", w);
  EXPECT_TRUE(report.at("passed").get<bool>());
  EXPECT_EQ(report.at("warnings").size(), 1u);
  EXPECT_EQ(RankChecksFromJson(ToJson(ranks[2])).nccl_network, "Socket");
  EXPECT_EQ(RankChecksFromJson(ToJson(ranks[2])).ib_devices, ib);
}

}  // namespace
}  // namespace scdino::preflight
