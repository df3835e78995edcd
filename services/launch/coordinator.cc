#include "launch/coordinator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
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

StatusOr<ListeningSocket> ListenOn(const std::string& host, int64_t port, bool listen) {
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
  bool in_use = false;
  for (addrinfo* a : order) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && (!listen || ::listen(fd, SOMAXCONN) == 0)) {
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
    in_use = in_use || errno == EADDRINUSE;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  const std::string m = "rendezvous: cannot listen on " + where + ": " + why;
  return in_use ? Status::AlreadyExists(m) : Status::Unavailable(m);
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

namespace {

using Clock = std::chrono::steady_clock;

// The store's server (LibTorch's classic one: one thread for every client)
// reads a message with blocking reads, so a client that sends part of one
// and stops would hold it for ever, and every rank with it. Its sockets are
// made with a bound on each read and write: they inherit it from the
// listening socket (Linux copies socket options on accept), a read past it
// fails, and the server drops that client and goes on. The listening
// socket is found among this process's descriptors, as LibTorch 1.13's
// store makes its own.
constexpr int kStoreReadBoundSeconds = 10;

void BoundStoreReads(int64_t port) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    int listening = 0;
    socklen_t n = sizeof listening;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &n) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    const int bound = addr.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                      : addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                                   : -1;
    if (bound != port) continue;
    const timeval bound_time{kStoreReadBoundSeconds, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound_time, sizeof bound_time);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound_time, sizeof bound_time);
  }
}

// A socket connected to host:port within `wait` (blocking from then on),
// or -1: nothing accepts connections there.
int ConnectWithin(const std::string& host, int64_t port, std::chrono::milliseconds wait) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  int connected = -1;
  for (addrinfo* a = found; a != nullptr && connected < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    bool ok = false;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof(err);
      ok = ::poll(&p, 1, static_cast<int>(wait.count())) == 1 &&
           ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    if (ok) {
      connected = fd;
    } else {
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  return connected;
}

// Whether a c10d TCPStore serves host:port, asked within `wait` in the
// store's own protocol (LibTorch 2.x: a VALIDATE with its magic number,
// then a CHECK of one key, answered by one byte, 0 or 1). LibTorch 2.x's
// store client waits without a bound for its first answer, so a process
// that accepts and never answers would hold a rank for ever: it is asked
// here first. LibTorch 1.13's client is bounded by its timeout, and its
// protocol has no VALIDATE: there, accepting is enough.
bool ServesAStore(const std::string& host, int64_t port, std::chrono::milliseconds wait) {
  const int fd = ConnectWithin(host, port, wait);
  if (fd < 0) return false;
  bool store = true;
  if (compat::kStoreTakesListeningSocket) {
    constexpr uint8_t kValidate = 0, kCheck = 5;
    constexpr uint32_t kMagic = 0x3C85F7CE;
    const std::string key = "/scdino-attempt";
    std::string query;
    const auto put = [&](const auto& v) { query.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    put(kValidate);
    put(kMagic);
    put(kCheck);
    put(static_cast<uint64_t>(1));
    put(static_cast<uint64_t>(key.size()));
    query += key;
    store = ::send(fd, query.data(), query.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(query.size());
    pollfd p{fd, POLLIN, 0};
    uint8_t answer = 255;
    store = store && ::poll(&p, 1, static_cast<int>(wait.count())) == 1 && ::recv(fd, &answer, 1, 0) == 1 &&
            answer <= 1;
  }
  ::close(fd);
  return store;
}

std::string PortList(const std::vector<int64_t>& ports) {
  std::string out;
  for (size_t i = 0; i < ports.size(); ++i) out += (i ? ", " : "") + std::to_string(ports[i]);
  return out;
}

}  // namespace

namespace {

// What every rank of one attempt derives alike: the ports, its marks and
// their names, the attempt's id. Each rank's mark is keyed by the secret,
// this attempt and the rank, so neither a mark nor a key name reveals the
// secret, and a process that took a port cannot answer with a mark it
// heard. A run directory that is not the same directory on every node
// (node-local, or a mount one node lacks) gives each node a secret of its
// own: said at once. The marks live under a name only holders of the
// secret can know: the store authenticates nobody, and a mark forged at a
// public name (another user on the node, who can reach the port) would
// otherwise end rank 0.
struct Meeting {
  const LaunchInfo& launch;
  std::chrono::milliseconds timeout;
  const std::function<bool()>& stopped;
  std::vector<int64_t> ports;
  std::string secret, marks, attempt_id, rank_text;

  std::string Mark(int64_t rank) const {
    return HmacSha256Hex(secret, "scdino-rundir\n" + launch.attempt + "\nrank " + std::to_string(rank)).substr(0, 32);
  }
  std::string MarkKey(int64_t rank) const { return marks + "/" + std::to_string(rank); }
  bool Stopped() const { return stopped && stopped(); }
  // Unavailable (exit 1), not Aborted (75, "progress saved"): nothing was
  // done, and a step cancelled because a peer failed must end with that
  // peer's code (srun reports the highest), not a requeue. A job-wide
  // signal (preemption, the time limit) still requeues it (deploy/slurm/lib.sh).
  Status StoppedStatus() const {
    return Status::Unavailable(rank_text + ": stopped by a signal during the rendezvous at " + launch.master_addr +
                               "; nothing was done yet");
  }
  c10d::TCPStoreOptions StoreOptions() const {
    c10d::TCPStoreOptions so = compat::TcpStoreOptions();
    so.numWorkers = static_cast<size_t>(launch.world_size);
    so.waitWorkers = false;  // rank 0 waits for the ranks' marks instead, and checks them
    return so;
  }
};

struct Met {
  c10::intrusive_ptr<c10d::TCPStore> store;
  int64_t port = 0;
};

// Rank 0: each rank's mark, checked as it comes; a wrong one (only a holder
// of the name could write it) is removed with a warning and waited for
// again, never a reason to end. Asked every 100 ms (a check is answered at
// once; a timed-out wait would leave its answer on the connection), so a
// stop signal ends the wait.
Status AwaitMarks(const Meeting& m, c10d::Store& store, int64_t port) {
  const auto deadline = Clock::now() + m.timeout;
  for (int64_t r = 1; r < m.launch.world_size; ++r) {
    while (true) {
      if (m.Stopped()) return m.StoppedStatus();
      if (store.check({m.MarkKey(r)})) {
        if (Text(store.get(m.MarkKey(r))) == m.Mark(r)) break;
        std::cerr << "scdino: warning: rendezvous: a mark for rank " << r << " at " << m.launch.master_addr << ":"
                  << port << " is not this run's (a process without the run's secret wrote it): ignored\n";
        store.deleteKey(m.MarkKey(r));
        continue;
      }
      if (Clock::now() >= deadline) {
        std::string missing;
        int64_t n = 0;
        for (int64_t q = r; q < m.launch.world_size; ++q) {
          if (q > r && store.check({m.MarkKey(q)})) continue;
          missing += (n++ ? ", " : "") + std::to_string(q);
        }
        return Status::Unavailable("rank 0: rank" + std::string(n > 1 ? "s " : " ") + missing + " of " +
                                   std::to_string(m.launch.world_size) + " did not join the rendezvous at " +
                                   m.launch.master_addr + ":" + std::to_string(port) + " within " +
                                   std::to_string(m.timeout.count() / 1000) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  return Status::Ok();
}

// Rank 0 serves the store on the first port of the sequence this node can
// bind: another process holding one (a user's, another job's) moves the
// rendezvous, not ends it.
StatusOr<Met> Serve(const Meeting& m) {
  const auto& ports = m.ports;
  c10d::TCPStoreOptions so = m.StoreOptions();
  for (size_t k = 0; k < ports.size(); ++k) {
    so.port = static_cast<uint16_t>(ports[k]);
    so.isServer = true;
    so.timeout = m.timeout;
    // LibTorch 1.13's store binds the port itself: there, only whether it
    // can be bound is asked (a socket that listened, even briefly, would
    // take the other ranks' connections and reset them on close).
    auto l = ListenOn(m.launch.master_addr, ports[k], compat::kStoreTakesListeningSocket);
    if (!l.ok() && l.status().code() == StatusCode::kAlreadyExists && k + 1 < ports.size()) {
      std::cerr << "scdino: rendezvous: port " << ports[k] << " is taken on " << ThisHostName()
                << " by another process; serving on " << ports[k + 1]
                << ", the next port of this attempt's sequence (every rank derives it)\n";
      continue;
    }
    if (!l.ok()) {
      return Status::Unavailable(l.status().message() + (ports.size() > 1 ? " (every port of this attempt's sequence, " +
                                                                                PortList(ports) + ", is taken)"
                                                                          : std::string()));
    }
    if (!compat::kStoreTakesListeningSocket) {
      ::close(l->fd);  // LibTorch 1.13's store binds the port itself (on every interface)
      std::cerr << "scdino: rendezvous: LibTorch " << TORCH_VERSION << "'s store listens on every interface (port "
                << ports[k] << "); the job's keys are under its secret\n";
    } else if (l->loopback && m.launch.local_world_size < m.launch.world_size) {
      // The other nodes know this node by another address than its own
      // name gives here (a Debian /etc/hosts maps it to 127.0.1.1).
      ::close(l->fd);
      std::cerr << "scdino: warning: rendezvous: " << m.launch.master_addr << " is " << l->address
                << " (loopback) on this node, but the job's ranks span several nodes: the store listens on every "
                   "interface; set MASTER_ADDR to this node's cluster address to listen there alone\n";
    } else {
      compat::SetStoreListeningSocket(so, l->fd);  // the store owns it from here on
    }
    try {
      auto store = c10::make_intrusive<c10d::TCPStore>(m.launch.master_addr, so);
      // A sender that stops mid-message no longer holds the store's one
      // server thread: its connection is dropped after a bound.
      BoundStoreReads(ports[k]);
      // Rank 0's mark first, then which attempt this store serves (no
      // secret in it): a rank that finds this attempt here but not the
      // mark under its name holds another secret (another run directory)
      // and says so at once; a rank of another attempt moves on.
      store->set(m.MarkKey(0), Bytes(m.Mark(0)));
      store->set("scdino-attempt", Bytes(m.attempt_id));
      if (auto s = AwaitMarks(m, *store, ports[k]); !s.ok()) return s;
      return Met{store, ports[k]};
    } catch (const std::exception& e) {
      return Status::Unavailable(m.rank_text + ": rendezvous at " + m.launch.master_addr + ":" +
                                 std::to_string(ports[k]) + " failed within " +
                                 std::to_string(m.timeout.count() / 1000) + " s: " + e.what());
    }
  }
  return Status::Unavailable("rendezvous: no port to serve on");  // not reached: the last port returns above
}

// The other ranks try the ports in order until one serves rank 0's mark: a
// port nothing listens on (rank 0 not there yet, or elsewhere), a process
// that is not a store, or another run's store is passed by, and nothing of
// this rank is sent before rank 0's mark is proven.
StatusOr<Met> Join(const Meeting& m) {
  const auto& ports = m.ports;
  c10d::TCPStoreOptions so = m.StoreOptions();
  const auto deadline = Clock::now() + m.timeout;
  const auto step = std::chrono::milliseconds(10000);
  Status last = Status::Unavailable(m.rank_text + ": nothing served the rendezvous at " + m.launch.master_addr +
                                    " on this attempt's ports (" + PortList(ports) + ") within " +
                                    std::to_string(m.timeout.count() / 1000) + " s: rank 0 never started, or failed");
  while (Clock::now() < deadline) {
    for (int64_t port : ports) {
      if (m.Stopped()) return m.StoppedStatus();
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      if (!ServesAStore(m.launch.master_addr, port, std::min(left, std::chrono::milliseconds(2000)))) continue;
      so.port = static_cast<uint16_t>(port);
      so.isServer = false;
      so.timeout = std::min(left, step);
      try {
        auto store = c10::make_intrusive<c10d::TCPStore>(m.launch.master_addr, so);
        store->wait({"scdino-attempt"}, std::min(left, step));
        const bool ours = Text(store->get("scdino-attempt")) == m.attempt_id;
        if (!ours) continue;  // another run's store (or another attempt's)
        if (!store->check({m.MarkKey(0)}) || Text(store->get(m.MarkKey(0))) != m.Mark(0)) {
          return Status::FailedPrecondition(
              "rank " + std::to_string(m.launch.rank) + " on " + ThisHostName() +
              ": the process serving the rendezvous at " + m.launch.master_addr + ":" + std::to_string(port) +
              " does not hold this run's rendezvous.secret: either this node's run directory is not the one rank 0 "
              "uses (the run directory must be the same directory on every node of the job, on a file system they "
              "all share, not node-local storage such as /tmp; set meta.output_dir accordingly), or another process "
              "holds the port");  // this attempt's store, with another secret: waiting cannot help
        }
        store->set(m.MarkKey(m.launch.rank), Bytes(m.Mark(m.launch.rank)));
        store->setTimeout(m.timeout);  // the probe's short one no longer
        return Met{store, port};
      } catch (const std::exception& e) {
        last = Status::Unavailable(m.rank_text + ": rendezvous at " + m.launch.master_addr + ":" +
                                   std::to_string(port) + " failed within " +
                                   std::to_string(m.timeout.count() / 1000) + " s: " + e.what());
      }
    }
    if (m.Stopped()) return m.StoppedStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return last;
}

}  // namespace

StatusOr<std::shared_ptr<Coordinator>> Coordinator::Connect(const LaunchInfo& launch,
                                                            std::chrono::milliseconds timeout,
                                                            const std::string& secret,
                                                            const std::function<bool()>& stopped) {
  if (launch.world_size <= 1 && launch.source != "torchrun") {
    auto c = Single();
    c->timeout_ = timeout;
    return c;
  }
  if (secret.size() < 16) {
    return Status::InvalidArgument("rendezvous: the job's secret is missing or shorter than 16 characters");
  }
  const Meeting m{launch,
                  timeout,
                  stopped,
                  launch.port_candidates.empty() ? std::vector<int64_t>{launch.master_port} : launch.port_candidates,
                  secret,
                  "scdino-marks-" + HmacSha256Hex(secret, "scdino-marks\n" + launch.attempt).substr(0, 32),
                  Sha256Hex("scdino-attempt\n" + launch.attempt).substr(0, 32),
                  "rank " + std::to_string(launch.rank) + " of " + std::to_string(launch.world_size)};
  if (const std::string w = EphemeralPortWarning(m.ports[0]); !w.empty() && launch.local_rank == 0) {
    std::cerr << "scdino: warning: " << w << "\n";
  }
  auto met = launch.rank == 0 ? Serve(m) : Join(m);
  if (!met.ok()) return met.status();
  // Every key of the job under a prefix of this attempt alone: what a
  // listener on the port could learn is worth one failed attempt.
  auto job = c10::make_intrusive<c10d::PrefixStore>("scdino-job-" + AttemptPrefix(secret, launch.attempt), met->store);
  auto c = OverStore(job, launch.rank, launch.world_size, timeout);
  c->port_ = met->port;
  return c;
}

StatusOr<std::string> Coordinator::RankZeroDecides(const std::string& name,
                                                   const std::function<StatusOr<std::string>()>& decide) {
  StatusOr<std::string> outcome = std::string();
  if (rank_ == 0) {
    try {
      outcome = decide();
    } catch (const std::exception& e) {
      outcome = Status::Internal(e.what());
    }
  }
  return ShareDecision(name, std::move(outcome));
}

Status Coordinator::ShareOutcome(const std::string& name, const Status& outcome) {
  return ShareDecision(name, outcome.ok() ? StatusOr<std::string>(std::string()) : StatusOr<std::string>(outcome))
      .status();
}

StatusOr<std::string> Coordinator::ShareDecision(const std::string& name, StatusOr<std::string> outcome) {
  if (!store_) return outcome;
  const std::string key = "rank0/" + name;
  if (rank_ == 0) {
    store_->set(key, Bytes(outcome.ok() ? "ok:" + *outcome : "error:" + outcome.status().ToString()));
    return outcome;
  }
  try {
    store_->wait({key}, timeout_);
    const std::string got = Text(store_->get(key));
    if (got.rfind("ok:", 0) == 0) return got.substr(3);
    return Status::Aborted("rank 0 failed at '" + name + "' (" + got.substr(6) + "); rank " +
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
