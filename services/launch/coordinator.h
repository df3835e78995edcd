// How the ranks of one job step meet, for every multi-rank service: a
// key-value store served by rank 0 at the launch's rendezvous address (c10d's
// TCPStore; one process needs none). Through it rank 0 shares what every
// rank needs before the others go on (ShareOutcome, ShareDecision: the
// plan, the channel statistics, classes.json), passes on its control
// requests to ranks that do not step together (Publish / Latest:
// scdino-features), and the ranks of a training step agree on what to do
// next (Agree, over the trainer's all-reduce, so every rank stops, pauses
// or checkpoints at the same step).
//
// Thread-compatible: one thread of each rank uses its Coordinator.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "run/run_control.h"
#include "common/status.h"
#include "launch/launch.h"

namespace scdino::run {

/// What the ranks decide together at a step boundary. Each flag is set when
/// any rank sets it.
struct Agreement {
  bool stop_by_api = false;     ///< rank 0's control API asked to stop
  bool stop_by_signal = false;  ///< a rank got SIGTERM/SIGUSR1/SIGINT
  bool pause = false;           ///< rank 0's control API asked to pause
  bool checkpoint_by_api = false;
  bool checkpoint_by_time = false;  ///< rank 0's checkpoint interval elapsed
  bool stop() const { return stop_by_api || stop_by_signal; }
};

/// The flags as numbers, for an exchange with other values (the trainer's
/// per-step all-reduce); each is 1 when set, and a sum > 0 means "any rank".
constexpr int kAgreementSize = 5;
std::vector<double> AgreementToVector(const Agreement& a);
Agreement AgreementFromSums(const std::vector<double>& sums);

/// The prefix of every rendezvous key of one attempt (LaunchInfo::attempt)
/// of a run: HMAC-SHA256 of the attempt keyed by the run's secret, 32 hex
/// digits. Another attempt (a requeue, another step) has another prefix.
std::string AttemptPrefix(const std::string& secret, const std::string& attempt);

/// A socket bound to the address `host` resolves to (the first that binds)
/// at `port`, listening: rank 0's store then listens where the other ranks
/// connect, not on every interface. `loopback` says whether that address
/// is a loopback one. AlreadyExists when another socket holds the port (the
/// rendezvous then moves to its next port), else Unavailable; both name the
/// host, the port and the system's reason.
struct ListeningSocket {
  int fd = -1;
  bool loopback = false;
  std::string address;  ///< numeric, as bound
};
/// With listen = false the socket is bound only (whether the port is free),
/// so no connection reaches it.
StatusOr<ListeningSocket> ListenOn(const std::string& host, int64_t port, bool listen = true);

class Coordinator {
 public:
  /// A process alone: nothing to meet; its own outcome is every rank's.
  static std::shared_ptr<Coordinator> Single();
  /// Rendezvous at launch.master_addr:master_port (rank 0 serves the store);
  /// Unavailable names the address and the timeout when it fails. World
  /// size 1 needs no store. Every key of the job (ours and the process
  /// group's) lives under a prefix made of `secret` (RendezvousSecret): the
  /// store has no authentication, and c10d's store protocol cannot list
  /// keys, so a process outside the job that connects to the port can
  /// neither read, write nor wait on a key the job uses. Where LibTorch
  /// lets rank 0 hand the store a socket (2.2 on), the store listens on the
  /// address of launch.master_addr alone (ListenOn); a name that resolves
  /// to loopback on rank 0's node in a job over several nodes, and LibTorch
  /// 1.13, listen on every interface (rank 0 says which).
  /// `stopped` (may be null) is asked while the ranks wait for each
  /// other: once it says so, Unavailable ("stopped by a signal during the
  /// rendezvous"; exit 1, since nothing was saved), within seconds.
  static StatusOr<std::shared_ptr<Coordinator>> Connect(const LaunchInfo& launch, std::chrono::milliseconds timeout,
                                                        const std::string& secret,
                                                        const std::function<bool()>& stopped = nullptr);
  /// Over an existing store (tests run ranks as threads on a HashStore).
  static std::shared_ptr<Coordinator> OverStore(c10::intrusive_ptr<c10d::Store> store, int64_t rank,
                                                int64_t world_size, std::chrono::milliseconds timeout);

  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }
  bool is_rank_zero() const { return rank_ == 0; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  /// The port the rendezvous met on (the first of the attempt's sequence
  /// that rank 0 could serve); 0 without one.
  int64_t port() const { return port_; }
  /// The raw store (for a process group over the same rendezvous); null
  /// for a single process.
  const c10::intrusive_ptr<c10d::Store>& store() const { return raw_; }

  /// Rank 0 decides, every rank follows: rank 0 runs `decide` and every
  /// rank returns its outcome (the value, or rank 0's error), so that what
  /// one node reads from a shared or node-local file system (a file there
  /// or not, NFS's cached view) is never decided per rank. Each `name` is
  /// used once per run of the step.
  StatusOr<std::string> RankZeroDecides(const std::string& name, const std::function<StatusOr<std::string>()>& decide);
  /// RankZeroDecides for a caller that has decided already: rank 0 passes
  /// its outcome (the value or its error), publishes it and returns it;
  /// every other rank ignores `outcome`, waits for rank 0's (up to the
  /// timeout) and returns it. Each `name` is used once per run of the step.
  StatusOr<std::string> ShareDecision(const std::string& name, StatusOr<std::string> outcome);
  /// Rank 0 has done the work every rank needs and passes its `outcome`;
  /// every other rank waits (up to the timeout) for it and returns it: OK,
  /// or an error saying rank 0 failed and why (their own `outcome` is
  /// ignored). Each `name` is used once per run of the step.
  Status ShareOutcome(const std::string& name, const Status& outcome);

  /// Rank 0: its control requests, for ranks that do not step together.
  void Publish(const RunRequests& r);
  /// The other ranks: rank 0's latest requests, without waiting (none yet:
  /// nothing requested). On rank 0: what it published.
  RunRequests Latest();

  /// Sums a vector of doubles over ranks in place (the trainer's
  /// all-reduce); Agree needs it when there are several ranks.
  using SumOverRanks = std::function<void(std::vector<double>&)>;
  void set_sum(SumOverRanks sum) { sum_ = std::move(sum); }
  /// Every rank calls it at the same step boundary with its own view; each
  /// flag of the result is set when any rank set it.
  Agreement Agree(const Agreement& local);
  /// Sums over ranks (identity for one process).
  std::vector<double> Sum(std::vector<double> values);

  /// Every rank tells the others its node (`host`) and keeps the table, so
  /// that a rank left alone can name the node of a peer it lost. Talks to
  /// the ranks (each waits up to the timeout for the others).
  Status ExchangeHosts(const std::string& host);
  /// rank -> node, after ExchangeHosts (empty before).
  const std::vector<std::string>& hosts() const { return hosts_; }
  /// After a collective failed on every rank still running: which ranks are
  /// gone. Each rank that can still reach the store signs in and waits
  /// `wait` for the others; those that did not sign in are returned (none:
  /// every rank is there, the failure was something else). When the store
  /// cannot be reached, its server (rank 0, on its node) is the one lost:
  /// {0}. Called once per process (after the failure that ends it).
  std::vector<int64_t> RollCall(std::chrono::milliseconds wait);
  /// "node2 (ranks 2, 3)", "node1 (rank 0) and node2 (rank 3)": the nodes of
  /// `ranks` from the hosts table ("rank 3" where it is unknown).
  std::string DescribeRanks(const std::vector<int64_t>& ranks) const;

 private:
  Coordinator() = default;
  c10::intrusive_ptr<c10d::Store> raw_, store_;  // store_: our keys, under a prefix
  int64_t rank_ = 0, world_size_ = 1, port_ = 0;
  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
  SumOverRanks sum_;
  RunRequests published_;
  std::vector<std::string> hosts_;
};

}  // namespace scdino::run
