#include "run/coordinator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include "common/digest.h"
#include "common/env.h"
#include "common/torch_compat.h"

namespace scdino::run {

namespace {

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string Text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

}  // namespace

StatusOr<ListeningSocket> ListenOn(const std::string& host, int64_t port) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    return Status::Unavailable("rendezvous: cannot resolve " + host + " (the address the other ranks connect to): " +
                               ::gai_strerror(rc));
  }
  // IPv4 first: where a name has both, peers commonly reach it over IPv4.
  std::vector<addrinfo*> order;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) order.push_back(a);
  std::stable_partition(order.begin(), order.end(), [](const addrinfo* a) { return a->ai_family == AF_INET; });
  std::string why = "no address";
  for (addrinfo* a : order) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      ListeningSocket l;
      l.fd = fd;
      char text[INET6_ADDRSTRLEN] = {};
      if (a->ai_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
        l.loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
        ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      } else {
        const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
        l.loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
        ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
      }
      l.address = text;
      ::freeaddrinfo(found);
      return l;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return Status::Unavailable("rendezvous: cannot listen on " + where + ": " + why);
}

std::string AttemptPrefix(const std::string& secret, const std::string& attempt) {
  return HmacSha256Hex(secret, "scdino-rendezvous\n" + attempt).substr(0, 32);
}

std::shared_ptr<Coordinator> Coordinator::Single() { return std::shared_ptr<Coordinator>(new Coordinator()); }

std::shared_ptr<Coordinator> Coordinator::OverStore(c10::intrusive_ptr<c10d::Store> store, int64_t rank,
                                                    int64_t world_size, std::chrono::milliseconds timeout) {
  std::shared_ptr<Coordinator> c(new Coordinator());
  c->raw_ = store;
  // The process group built over the same store uses its own keys.
  c->store_ = c10::make_intrusive<c10d::PrefixStore>("scdino", store);
  c->rank_ = rank;
  c->world_size_ = world_size;
  c->timeout_ = timeout;
  return c;
}

StatusOr<std::shared_ptr<Coordinator>> Coordinator::Connect(const LaunchInfo& launch,
                                                            std::chrono::milliseconds timeout,
                                                            const std::string& secret) {
  if (launch.world_size <= 1 && launch.source != "torchrun") {
    auto c = Single();
    c->timeout_ = timeout;
    return c;
  }
  if (secret.size() < 16) {
    return Status::InvalidArgument("rendezvous: the job's secret is missing or shorter than 16 characters");
  }
  if (const std::string w = EphemeralPortWarning(launch.master_port); !w.empty() && launch.local_rank == 0) {
    std::cerr << "scdino: warning: " << w << "\n";
  }
  c10d::TCPStoreOptions so = compat::TcpStoreOptions();
  so.port = static_cast<uint16_t>(launch.master_port);
  so.isServer = launch.rank == 0;
  so.numWorkers = static_cast<size_t>(launch.world_size);
  so.timeout = timeout;
  if (so.isServer && compat::kStoreTakesListeningSocket) {
    auto l = ListenOn(launch.master_addr, launch.master_port);
    if (!l.ok()) return l.status();
    if (l->loopback && launch.local_world_size < launch.world_size) {
      // The other nodes know this node by another address than its own
      // name gives here (a Debian /etc/hosts maps it to 127.0.1.1).
      ::close(l->fd);
      std::cerr << "scdino: warning: rendezvous: " << launch.master_addr << " is " << l->address
                << " (loopback) on this node, but the job's ranks span several nodes: the store listens on every "
                   "interface; set MASTER_ADDR to this node's cluster address to listen there alone\n";
    } else {
      compat::SetStoreListeningSocket(so, l->fd);  // the store owns it from here on
    }
  } else if (so.isServer) {
    std::cerr << "scdino: rendezvous: LibTorch " << TORCH_VERSION << "'s store listens on every interface (port "
              << launch.master_port << "); the job's keys are under its secret\n";
  }
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, so);
    // Every rank's secret must be rank 0's. A run directory that is not the
    // same directory on every node (node-local, or a mount one node lacks)
    // gives each node a secret of its own, and the ranks would wait for keys
    // that never come: said at once instead. Each rank's mark is keyed by
    // the secret, this attempt and the rank, so neither a mark nor a key
    // name reveals the secret, and a process that took the port cannot
    // answer rank 0's mark by replaying another rank's.
    const auto mark = [&](int64_t rank) {
      return HmacSha256Hex(secret, "scdino-rundir\n" + launch.attempt + "\nrank " + std::to_string(rank)).substr(0, 32);
    };
    store->set("scdino-rundir/" + std::to_string(launch.rank), Bytes(mark(launch.rank)));
    if (launch.rank != 0) {
      store->wait({"scdino-rundir/0"}, timeout);
      if (Text(store->get("scdino-rundir/0")) != mark(0)) {
        return Status::FailedPrecondition(
            "rank " + std::to_string(launch.rank) + " on " + ThisHostName() + ": the process serving the rendezvous at " +
            launch.master_addr + ":" + std::to_string(launch.master_port) +
            " does not hold this run's rendezvous.secret: either this node's run directory is not the one rank 0 "
            "uses (the run directory must be the same directory on every node of the job, on a file system they "
            "all share, not node-local storage such as /tmp; set meta.output_dir accordingly), or another process "
            "holds the port");
      }
    }
    // Every key of the job under a prefix of this attempt alone: what a
    // listener on the port could learn is worth one failed attempt.
    auto job = c10::make_intrusive<c10d::PrefixStore>("scdino-job-" + AttemptPrefix(secret, launch.attempt), store);
    return OverStore(job, launch.rank, launch.world_size, timeout);
  } catch (const std::exception& e) {
    return Status::Unavailable("rank " + std::to_string(launch.rank) + " of " + std::to_string(launch.world_size) +
                               ": rendezvous at " + launch.master_addr + ":" + std::to_string(launch.master_port) +
                               " failed within " + std::to_string(timeout.count() / 1000) + " s: " + e.what());
  }
}

Status Coordinator::RankZeroFirst(const std::string& name, const std::function<Status()>& work) {
  return RankZeroDecides(name, [&]() -> StatusOr<std::string> {
           if (auto s = work(); !s.ok()) return s;
           return std::string();
         })
      .status();
}

StatusOr<std::string> Coordinator::RankZeroDecides(const std::string& name,
                                                   const std::function<StatusOr<std::string>()>& decide) {
  const auto run = [&]() -> StatusOr<std::string> {
    try {
      return decide();
    } catch (const std::exception& e) {
      return Status::Internal(e.what());
    }
  };
  if (!store_) return run();
  const std::string key = "rank0/" + name;
  if (rank_ == 0) {
    auto d = run();
    store_->set(key, Bytes(d.ok() ? "ok:" + *d : "error:" + d.status().ToString()));
    return d;
  }
  try {
    store_->wait({key}, timeout_);
    const std::string outcome = Text(store_->get(key));
    if (outcome.rfind("ok:", 0) == 0) return outcome.substr(3);
    return Status::Aborted("rank 0 failed at '" + name + "' (" + outcome.substr(6) + "); rank " +
                           std::to_string(rank_) + " stops too");
  } catch (const std::exception& e) {
    return Status::Unavailable("rank " + std::to_string(rank_) + " waited " + std::to_string(timeout_.count() / 1000) +
                               " s for rank 0 to finish '" + name + "': " + e.what());
  }
}

void Coordinator::Publish(const RunRequests& r) {
  if (rank_ != 0) return;
  if (r.pause == published_.pause && r.stop == published_.stop) return;
  published_ = r;
  if (store_) store_->set("requests", Bytes(std::string(r.pause ? "p" : "-") + (r.stop ? "s" : "-")));
}

RunRequests Coordinator::Latest() {
  if (rank_ == 0 || !store_) return published_;
  RunRequests r;
  try {
    if (!store_->check({"requests"})) return r;
    const std::string v = Text(store_->get("requests"));
    r.pause = v.size() == 2 && v[0] == 'p';
    r.stop = v.size() == 2 && v[1] == 's';
  } catch (const std::exception&) {
    // Rank 0's store is gone: rank 0 ended or died; a stop is the safe answer.
    r.stop = true;
  }
  return r;
}

std::vector<double> Coordinator::Sum(std::vector<double> values) {
  if (world_size_ > 1) {
    TORCH_CHECK(sum_, "Coordinator::Sum with ", world_size_, " ranks needs the trainer's all-reduce (set_sum)");
    sum_(values);
  }
  return values;
}

Status Coordinator::ExchangeHosts(const std::string& host) {
  hosts_.assign(static_cast<size_t>(world_size_), "");
  hosts_[static_cast<size_t>(rank_)] = host;
  if (!store_) return Status::Ok();
  try {
    store_->set("host/" + std::to_string(rank_), Bytes(host));
    for (int64_t r = 0; r < world_size_; ++r) {
      const std::string key = "host/" + std::to_string(r);
      store_->wait({key}, timeout_);
      hosts_[static_cast<size_t>(r)] = Text(store_->get(key));
    }
  } catch (const std::exception& e) {
    return Status::Unavailable("rank " + std::to_string(rank_) + " waited " + std::to_string(timeout_.count() / 1000) +
                               " s for the other ranks to name their nodes: " + e.what());
  }
  return Status::Ok();
}

std::vector<int64_t> Coordinator::RollCall(std::chrono::milliseconds wait) {
  if (!store_ || world_size_ <= 1) return {};
  std::vector<int64_t> missing;
  try {
    store_->set("rollcall/" + std::to_string(rank_), Bytes("here"));
    const auto deadline = std::chrono::steady_clock::now() + wait;
    do {
      missing.clear();
      for (int64_t r = 0; r < world_size_; ++r) {
        if (!store_->check({"rollcall/" + std::to_string(r)})) missing.push_back(r);
      }
      if (missing.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (std::chrono::steady_clock::now() < deadline);
  } catch (const std::exception&) {
    return {0};  // the store's server is gone with rank 0
  }
  return missing;
}

std::string Coordinator::DescribeRanks(const std::vector<int64_t>& ranks) const {
  // Grouped by node, in rank order.
  std::vector<std::pair<std::string, std::vector<int64_t>>> nodes;
  for (int64_t r : ranks) {
    const std::string host = r >= 0 && r < static_cast<int64_t>(hosts_.size()) ? hosts_[static_cast<size_t>(r)] : "";
    auto it = std::find_if(nodes.begin(), nodes.end(), [&](const auto& n) { return n.first == host; });
    if (it == nodes.end()) {
      nodes.push_back({host, {r}});
    } else {
      it->second.push_back(r);
    }
  }
  std::string out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i > 0) out += i + 1 == nodes.size() ? " and " : ", ";
    std::string list;
    for (size_t k = 0; k < nodes[i].second.size(); ++k) list += (k ? ", " : "") + std::to_string(nodes[i].second[k]);
    const std::string which = (nodes[i].second.size() > 1 ? "ranks " : "rank ") + list;
    out += nodes[i].first.empty() ? which : nodes[i].first + " (" + which + ")";
  }
  return out;
}

std::vector<double> AgreementToVector(const Agreement& a) {
  return {a.stop_by_api ? 1.0 : 0.0, a.stop_by_signal ? 1.0 : 0.0, a.pause ? 1.0 : 0.0,
          a.checkpoint_by_api ? 1.0 : 0.0, a.checkpoint_by_time ? 1.0 : 0.0};
}

Agreement AgreementFromSums(const std::vector<double>& v) {
  Agreement a;
  a.stop_by_api = v.at(0) > 0;
  a.stop_by_signal = v.at(1) > 0;
  a.pause = v.at(2) > 0;
  a.checkpoint_by_api = v.at(3) > 0;
  a.checkpoint_by_time = v.at(4) > 0;
  return a;
}

Agreement Coordinator::Agree(const Agreement& local) { return AgreementFromSums(Sum(AgreementToVector(local))); }

}  // namespace scdino::run
