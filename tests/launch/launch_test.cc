#include "launch/launch.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <map>

#include "common/env.h"
#include "support/test_support.h"

namespace scdino::run {
namespace {

using Env = std::map<std::string, std::string>;

StatusOr<LaunchInfo> From(const Env& env) {
  return LaunchFromEnv([&](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Hostlist, ExpandsSlurmNotation) {
  auto h = ExpandHostlist("gpu-st-[1-4,7],login1");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*h, (std::vector<std::string>{"gpu-st-1", "gpu-st-2", "gpu-st-3", "gpu-st-4", "gpu-st-7", "login1"}));
  EXPECT_EQ(*ExpandHostlist("n[08-11]-ib"), (std::vector<std::string>{"n08-ib", "n09-ib", "n10-ib", "n11-ib"}));
  EXPECT_EQ(*ExpandHostlist("a[1-2]b[3,5]"), (std::vector<std::string>{"a1b3", "a1b5", "a2b3", "a2b5"}));
  EXPECT_EQ(*ExpandHostlist("single"), std::vector<std::string>{"single"});
  EXPECT_EQ(ExpandHostlist("ip-10-0-[0-1]-[5]")->size(), 2u);
  for (const char* bad : {"n[1-", "n]", "n[]", "n[3-1]", "n[a-b]", "a,,b", ""}) {
    auto r = ExpandHostlist(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos) << r.status().message();
    }
  }
}

TEST(Launch, SingleProcessWhenNothingIsSet) {
  auto l = From({});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->source, "single");
  EXPECT_EQ(l->world_size, 1);
}

TEST(Launch, FromSlurm) {
  auto l = From({{"SLURM_PROCID", "5"},
                 {"SLURM_NTASKS", "8"},
                 {"SLURM_LOCALID", "1"},
                 {"SLURM_JOB_ID", "123456"},
                 {"SLURM_STEP_NODELIST", "gpu-st-[3-4]"},
                 {"SLURM_JOB_NODELIST", "gpu-st-[1-4]"}});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->source, "slurm");
  EXPECT_EQ(l->rank, 5);
  EXPECT_EQ(l->world_size, 8);
  EXPECT_EQ(l->local_rank, 1);
  EXPECT_EQ(l->master_addr, "gpu-st-3");
  EXPECT_EQ(l->master_port, PortForJob(123456));
  EXPECT_EQ(l->port_candidates.size(), static_cast<size_t>(kRendezvousPorts));
  EXPECT_EQ(l->port_candidates[0], l->master_port);
  EXPECT_EQ(l->local_world_size, 2) << "local rank 1: at least 2 ranks on this node";
  EXPECT_EQ(l->attempt, "slurm job 123456 step 0 restart 0 at gpu-st-3:" + std::to_string(PortForJob(123456)));
}

// Slurm's own containers (srun --container=BUNDLE) give a task the step's
// variables only: one task per node, the rank is this host's place in the
// step's node list.
TEST(Launch, InSlurmsOwnContainerTheRankIsTheNodesPlace) {
  const std::string here = ThisHostName();
  Env env = {{"SLURM_CONTAINER", "/shared/bundles/scdino"}, {"SLURM_STEP_NUM_TASKS", "3"},
             {"SLURM_STEP_NODELIST", "zz-other1,zz-other2," + here},
             {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"}, {"SLURM_JOB_ID", "77"}};
  auto l = From(env);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->source, "slurm");
  EXPECT_EQ(l->rank, 2);
  EXPECT_EQ(l->world_size, 3);
  EXPECT_EQ(l->local_rank, 0);
  EXPECT_EQ(l->local_world_size, 1);
  EXPECT_EQ(l->master_addr, "zz-other1");
  // Two tasks a node cannot be told apart: refused, saying why.
  env["SLURM_STEP_NUM_TASKS"] = "6";
  auto two = From(env);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("6 tasks on 3 nodes"), std::string::npos) << two.status().message();
  // A host not in the list is named.
  env["SLURM_STEP_NUM_TASKS"] = "2";
  env["SLURM_STEP_NODELIST"] = "zz-other[1-2]";
  auto away = From(env);
  ASSERT_FALSE(away.ok());
  EXPECT_NE(away.status().message().find(here + ", is not in SLURM_STEP_NODELIST (zz-other[1-2])"), std::string::npos)
      << away.status().message();
  // Where Slurm does give the task's variables, they win.
  env["SLURM_PROCID"] = "1";
  env["SLURM_NTASKS"] = "2";
  auto given = From(env);
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(given->rank, 1);
}

// Each attempt of a run is told apart (its rendezvous keys are under a
// prefix of its own): a requeue counts up SLURM_RESTART_COUNT, torchrun
// its restarts.
TEST(Launch, EveryAttemptOfARunIsToldApart) {
  const Env first{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "1"}};
  Env requeued = first;
  requeued["SLURM_RESTART_COUNT"] = "1";
  EXPECT_EQ(From(first)->attempt, "slurm job 77 step 1 restart 0 at 127.0.0.1:" + std::to_string(PortForJob(77, 1)));
  EXPECT_EQ(From(requeued)->attempt,
            "slurm job 77 step 1 restart 1 at 127.0.0.1:" + std::to_string(PortForJob(77, 1, 1)));
  const Env torchrun{{"RANK", "0"},        {"WORLD_SIZE", "2"}, {"TORCHELASTIC_RUN_ID", "abc"},
                     {"MASTER_PORT", "29600"}, {"TORCHELASTIC_RESTART_COUNT", "2"}};
  EXPECT_EQ(From(torchrun)->attempt, "torchrun run abc restart 2 at 127.0.0.1:29600");
}

// Derived ports stay below the default ephemeral range (32768-60999), where
// an outgoing connection could hold them, and depend on the job and step
// (and restart) alone: every node computes the same port however its own range is set
// (a rank reading its node's range once disagreed with the others and the
// rendezvous timed out). A port inside the node's range is named with the
// range and the fix.
TEST(Launch, RendezvousPortsAreAFunctionOfTheJobAloneAndStayOutOfTheDefaultEphemeralRange) {
  for (int64_t job = 0; job < 30000; job += 7) {
    for (int64_t step = 0; step < 3; ++step) {
      const int64_t p = PortForJob(job, step);
      ASSERT_TRUE(p >= 20000 && p < 32000) << "job " << job << " step " << step << ": port " << p;
    }
  }
  scdino::testing::ScratchDir d;
  std::ofstream(d.file("range")) << "32768\t60999\n";
  EXPECT_EQ(EphemeralPortWarning(29500, d.file("range")), "");
  auto l = From({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "4242"}});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->master_port, PortForJob(4242));
  const std::string w = EphemeralPortWarning(40000, d.file("range"));
  EXPECT_NE(w.find("rendezvous port 40000 lies in this node's ephemeral port range 32768-60999"), std::string::npos)
      << w;
  EXPECT_NE(w.find("set MASTER_PORT below 32768"), std::string::npos) << w;
  EXPECT_EQ(EphemeralPortWarning(40000, d.file("no-such-file")), "");
  // A node tuned to a lower range is warned, not given another port.
  std::ofstream(d.file("low")) << "10000\t60999\n";
  EXPECT_NE(EphemeralPortWarning(PortForJob(4242), d.file("low")).find("lies in this node's ephemeral port range"),
            std::string::npos);
}

// The ports of an attempt: the same list on every node, distinct, out of
// the ports scdino must never take (torchrun's, Slurm's own, from
// slurm.conf), other ports for a requeue, and no systematic collision
// between jobs: not at 12,000 ids apart, not on torchrun's 29500 (today's
// job 9,500 mod 12,000 took it), and over many jobs as often as chance.
TEST(Launch, RendezvousPortsSkipReservedPortsAndDifferByJobStepAndRestart) {
  scdino::testing::ScratchDir d;
  std::ofstream(d.file("slurm.conf")) << "ClusterName=t\n SlurmctldPort = 21000-21003 # ha\nSlurmdPort=21010\n"
                                        << "srunportrange=20000-25999\n";
  const auto reserved = ReservedPorts(d.file("slurm.conf"));
  std::set<int64_t> first;
  int64_t shared = 0;
  for (int64_t job = 0; job < 24000; job += 3) {
    const auto ports = RendezvousPorts(job, 0, 0, reserved);
    ASSERT_EQ(ports.size(), static_cast<size_t>(kRendezvousPorts));
    EXPECT_EQ(std::set<int64_t>(ports.begin(), ports.end()).size(), ports.size()) << "job " << job;
    for (int64_t p : ports) {
      ASSERT_TRUE(p >= 26000 && p < 32000 && p != 29500 && p != 29400) << "job " << job << ": port " << p;
    }
    EXPECT_EQ(ports, RendezvousPorts(job, 0, 0, reserved)) << "the same list on every node";
    EXPECT_NE(ports[0], RendezvousPorts(job, 0, 1, reserved)[0]) << "a requeue of job " << job << " takes another port";
    EXPECT_NE(ports[0], RendezvousPorts(job, 1, 0, reserved)[0]) << "step 1 of job " << job;
    if (!first.insert(ports[0]).second) ++shared;
  }
  for (int64_t job : {9500, 21500, 33500}) EXPECT_NE(PortForJob(job), 29500);
  EXPECT_NE(RendezvousPorts(100, 0, 0, {}), RendezvousPorts(12100, 0, 0, {})) << "jobs 12,000 apart";
  // 8,000 jobs over 6,000 ports: a first port shared by chance only.
  EXPECT_LT(shared, 4000);
  // Without slurm.conf: torchrun's ports and Slurm's defaults.
  const auto defaults = ReservedPorts(d.file("none.conf"));
  EXPECT_EQ(defaults, (std::vector<PortRange>{{29500, 29500}, {29400, 29400}, {6817, 6817}, {6818, 6818}}));
  // MASTER_PORT given: that port alone.
  auto l = From({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "5"}, {"MASTER_PORT", "23456"}});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->port_candidates, std::vector<int64_t>{23456});
}

// Two steps of one job (a trainer and an evaluator following it) meet at
// different ports; the tasks of one node are counted for the GPU check.
TEST(Launch, StepsOfAJobGetTheirOwnPortAndNodesTheirTaskCount) {
  auto base = Env{{"SLURM_PROCID", "3"},      {"SLURM_NTASKS", "6"},
                  {"SLURM_LOCALID", "0"},     {"SLURM_JOB_ID", "77"},
                  {"SLURM_NODEID", "1"},      {"SLURM_STEP_TASKS_PER_NODE", "3(x2)"},
                  {"SLURM_STEP_ID", "0"}};
  auto first = From(base);
  base["SLURM_STEP_ID"] = "1";
  auto second = From(base);
  ASSERT_TRUE(first.ok() && second.ok()) << first.status().ToString() << second.status().ToString();
  EXPECT_NE(first->master_port, second->master_port);
  EXPECT_EQ(first->local_world_size, 3);
  base["SLURM_STEP_ID"] = "batch";
  EXPECT_EQ(From(base)->master_port, first->master_port);
  EXPECT_EQ(*ExpandTasksPerNode("2(x3),1"), (std::vector<int64_t>{2, 2, 2, 1}));
  EXPECT_FALSE(ExpandTasksPerNode("2(x").ok());
  base["SLURM_STEP_TASKS_PER_NODE"] = "x";
  EXPECT_FALSE(From(base).ok());
}

// torchrun inside a Slurm job (one task a node, torchrun starting the
// node's ranks) sets TORCHELASTIC_RUN_ID: its variables win there.
TEST(Launch, TorchrunVariablesWinWhereTorchrunSetThem) {
  auto l = From({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.1.2.3"},
                 {"MASTER_PORT", "29600"}, {"TORCHELASTIC_RUN_ID", "j7"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->source, "torchrun");
  EXPECT_EQ(l->rank, 1);
  EXPECT_EQ(l->master_addr, "10.1.2.3");
  EXPECT_EQ(l->master_port, 29600);
  EXPECT_TRUE(l->notes.empty());
}

// A RANK and WORLD_SIZE left in the submitting shell reach every task of a
// step (sbatch exports the environment): taken, they made a 4-rank job four
// one-rank runs writing one run directory. Inside a step Slurm's variables
// win and the leaked ones are named; ones that agree (Enroot's PyTorch hook
// sets them from Slurm's) are said nothing of.
TEST(Launch, InsideASlurmStepSlurmsVariablesWinOverALeakedRank) {
  Env env{{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}, {"SLURM_JOB_ID", "88"},
          {"RANK", "0"},         {"WORLD_SIZE", "1"},   {"MASTER_ADDR", "127.0.0.1"}};
  auto l = From(env);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->source, "slurm");
  EXPECT_EQ(l->rank, 3);
  EXPECT_EQ(l->world_size, 4);
  ASSERT_EQ(l->notes.size(), 2u);
  EXPECT_NE(l->notes[0].find("RANK=0 in the environment is ignored: this is a Slurm step, where SLURM_PROCID=3"),
            std::string::npos)
      << l->notes[0];
  EXPECT_NE(l->notes[1].find("WORLD_SIZE=1 in the environment is ignored"), std::string::npos) << l->notes[1];
  env["RANK"] = "3", env["WORLD_SIZE"] = "4", env["LOCAL_RANK"] = "1";
  auto agreeing = From(env);
  ASSERT_TRUE(agreeing.ok());
  EXPECT_EQ(agreeing->source, "slurm");
  EXPECT_TRUE(agreeing->notes.empty());
  // Outside a step, RANK and WORLD_SIZE are a launch of their own.
  auto plain = From({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29600"}});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->source, "torchrun");
  EXPECT_EQ(plain->rank, 1);
}

// An SrunPortRange over the whole rendezvous range leaves no port: refused
// naming the ranges and the fix (the first candidate of an empty list was
// read: every service crashed without a word). MASTER_PORT still works.
TEST(Launch, AnSrunPortRangeThatLeavesNoPortIsRefusedNamingIt) {
  scdino::testing::ScratchDir d;
  std::ofstream(d.file("slurm.conf")) << "SlurmctldPort=6817\nSrunPortRange=20000-31999\n";
  Env env{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "5"}, {"SLURM_CONF", d.file("slurm.conf")}};
  auto l = From(env);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("no rendezvous port is left in 20000-31999: " + d.file("slurm.conf") +
                                      " reserves"),
            std::string::npos)
      << l.status().message();
  EXPECT_NE(l.status().message().find("29500, 29400, 20000-31999, 6817, 6818 for torchrun and Slurm, and its "
                                      "SrunPortRange covers the whole rendezvous range"),
            std::string::npos)
      << l.status().message();
  env["MASTER_PORT"] = "40100";
  auto given = From(env);
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(given->master_port, 40100);
  std::ofstream(d.file("slurm.conf")) << "SrunPortRange=20000-31990\n";
  env.erase("MASTER_PORT");
  auto narrow = From(env);
  ASSERT_TRUE(narrow.ok()) << narrow.status().ToString();
  EXPECT_GE(narrow->master_port, 31991);
}

TEST(Launch, BadValuesNameTheVariable) {
  auto a = From({{"RANK", "x"}, {"WORLD_SIZE", "2"}});
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("RANK: expected an integer >= 0, got 'x'"), std::string::npos);
  auto b = From({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(b.status().message().find("rank 2 is not below the world size 2"), std::string::npos);
  auto c = From({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[1-"}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("SLURM_JOB_NODELIST"), std::string::npos);
}

}  // namespace
}  // namespace scdino::run
