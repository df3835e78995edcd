#include "process/checkpoint_follower.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#ifdef SCDINO_WITH_SERVICES
#include <grpcpp/grpcpp.h>

#include "control/client.h"
#include "control/endpoint.h"
#include "scdino/v1/control.grpc.pb.h"
#endif

namespace scdino::process {

bool IsFollowedCheckpoint(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  return name != "checkpoint.safetensors" && name.rfind("checkpoint", 0) == 0 &&
         name.size() > std::string(".safetensors").size() &&
         name.compare(name.size() - 12, 12, ".safetensors") == 0;
}

#ifdef SCDINO_WITH_SERVICES

namespace {

namespace v1 = ::scdino::v1;
using Clock = std::chrono::steady_clock;

// How long one status stream of the follower lives before it is watched
// again: a stream that stopped delivering (a server stuck while its
// connection, and so keepalive, lives) is noticed within it.
constexpr auto kWatchDeadline = std::chrono::minutes(2);

RunState FromName(const std::string& s) {
  if (s == "COMPLETED") return RunState::kCompleted;
  if (s == "STOPPED") return RunState::kStopped;
  return RunState::kFailed;
}

RunState FromProto(v1::RunState s) {
  switch (s) {
    case v1::RUN_STATE_COMPLETED: return RunState::kCompleted;
    case v1::RUN_STATE_FAILED: return RunState::kFailed;
    case v1::RUN_STATE_STOPPED: return RunState::kStopped;
    default: return RunState::kRunning;
  }
}

}  // namespace

struct CheckpointFollower::Impl {
  FollowOptions o;
  std::set<std::string> returned;
  std::unique_ptr<v1::Control::Stub> control;
  std::unique_ptr<v1::Trainer::Stub> trainer;
  std::string token;
  // Retrying: when the trainer was last reached (or the follower began),
  // the next pause, and what was said last.
  Clock::time_point last_contact = Clock::now();
  std::chrono::milliseconds pause{0};
  std::string last_said;

  bool Stopping() const { return o.should_stop && o.should_stop(); }

  void Log(const std::string& m) {
    if (o.log && m != last_said) *o.log << o.program << ": " << m << "\n";
    last_said = m;
  }

  // The followed checkpoints of `all` not returned yet, marked returned.
  std::vector<CheckpointEntry> Fresh(const std::vector<CheckpointEntry>& all) {
    std::vector<CheckpointEntry> out;
    for (const auto& c : all) {
      if (IsFollowedCheckpoint(c.path) && returned.insert(c.path).second) out.push_back(c);
    }
    return out;
  }

  void Disconnect() {
    control.reset();
    trainer.reset();
  }

  // Waits before the next attempt, growing the pause; false once it is
  // time to give up or to stop.
  bool Backoff(const std::string& why) {
    Disconnect();
    pause = pause.count() == 0 ? o.first_retry : std::min(o.max_retry, pause * 2);
    const auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - last_contact);
    Log("waiting for the trainer (" + why + "); next try in " + std::to_string((pause.count() + 999) / 1000) +
        " s, " + std::to_string(waited.count()) + " s without an answer so far");
    if (Clock::now() - last_contact > o.give_up) return false;
    const auto until = Clock::now() + pause;
    while (Clock::now() < until) {
      if (Stopping()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return true;
  }

  void Reached() {
    if (pause.count() > 0) Log("reached the trainer again");
    pause = std::chrono::milliseconds(0);
    last_contact = Clock::now();
  }

  // What a part of Next() came to: go on to the next part, go round again
  // (after a pause), return what it set, or the token was refused.
  enum class Turn { kOn, kAgain, kReturn, kRefused };
  std::string why;  ///< the last failure, for GiveUp and a refusal

  Status GiveUp(const std::string& reason) const {
    if (Stopping()) return Status::Aborted("stopped while waiting for the trainer");
    return Status::Unavailable("the trainer of " + o.run_dir + " stayed unreachable for " +
                               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(o.give_up).count()) +
                               " s (" + reason + ")");
  }

  // The trainer's endpoint, and stubs on it; without one, the end record
  // (an ended run) or a pause before the next try.
  Turn Connect(StatusOr<FollowEvent>* out) {
    auto target = control::ResolveRun(o.run_dir, "trainer", o.token_file);
    if (!target.ok()) {
      if (target.status().code() != StatusCode::kNotFound) {
        *out = target.status();
        return Turn::kReturn;
      }
      // No endpoint: ended (its record says how), or not started yet.
      if (auto ended = control::ReadEnded(o.run_dir, "trainer"); ended.ok()) {
        FollowEvent e;
        e.checkpoints = Fresh(ListCheckpointFiles(o.run_dir));
        e.ended = true;
        e.final_state = FromName(ended->state);
        e.error = ended->error;
        *out = e;
        return Turn::kReturn;
      } else if (ended.status().code() != StatusCode::kNotFound) {
        *out = ended.status();
        return Turn::kReturn;
      }
      if (Backoff(target.status().message())) return Turn::kAgain;
      *out = GiveUp(target.status().message());
      return Turn::kReturn;
    }
    auto channel = control::OpenChannel(*target);
    if (!channel.ok()) {
      *out = channel.status();
      return Turn::kReturn;
    }
    control = v1::Control::NewStub(*channel);
    trainer = v1::Trainer::NewStub(*channel);
    token = target->token;
    return Turn::kOn;
  }

  // The trainer's checkpoints now, and their file names.
  Turn List(std::vector<CheckpointEntry>* all, std::set<std::string>* listed) {
    v1::ListCheckpointsReply list;
    grpc::ClientContext ctx;
    control::AddToken(&ctx, token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto st = trainer->ListCheckpoints(&ctx, v1::ListCheckpointsRequest(), &list);
    if (!st.ok()) {
      why = st.error_message();
      if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
          st.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
        return Turn::kRefused;
      }
      return Backoff(why) ? Turn::kAgain : Turn::kReturn;
    }
    Reached();
    for (const auto& c : list.checkpoints()) {
      all->push_back({c.path(), c.iteration(), c.epoch(), c.size_bytes(), c.modified_unix_ms()});
      listed->insert(std::filesystem::path(c.path()).filename().string());
    }
    return Turn::kOn;
  }

  // Nothing new: watches until a checkpoint is written (kAgain) or the run
  // ends (kReturn with the event). Statuses come at least every second, so
  // stops are seen within one.
  Turn Watch(const std::set<std::string>& listed, StatusOr<FollowEvent>* out) {
    grpc::ClientContext ctx;
    control::AddToken(&ctx, token);
    // A deadline besides the channel's keepalive (kWatchDeadline).
    ctx.set_deadline(std::chrono::system_clock::now() + kWatchDeadline);
    v1::WatchStatusRequest req;
    req.set_interval_ms(1000);
    auto reader = control->WatchStatus(&ctx, req);
    v1::Status s;
    bool first = true, changed = false, stopped = false;
    std::string seen_path;
    int64_t seen_ms = 0;
    while (reader->Read(&s)) {
      Reached();
      if (Stopping()) {
        stopped = true;
        ctx.TryCancel();
        break;
      }
      // A checkpoint written since the list, or after the first status.
      const std::string& path = s.trainer().last_checkpoint();
      if (first) {
        seen_path = path;
        seen_ms = s.trainer().last_checkpoint_unix_ms();
        changed = !path.empty() && IsFollowedCheckpoint(path) &&
                  !listed.count(std::filesystem::path(path).filename().string());
      } else {
        changed = path != seen_path || s.trainer().last_checkpoint_unix_ms() != seen_ms;
      }
      first = false;
      if (changed) {
        ctx.TryCancel();
        break;
      }
      if (FromProto(s.state()) != RunState::kRunning) break;  // final: the stream ends
    }
    const grpc::Status st = reader->Finish();
    if (stopped) {
      *out = Status::Aborted("stopped while following the trainer");
      return Turn::kReturn;
    }
    if (changed) return Turn::kAgain;
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && !Stopping()) return Turn::kAgain;  // watched again
    if (!first && FromProto(s.state()) != RunState::kRunning) {
      FollowEvent e;
      e.checkpoints = Fresh(ListCheckpointFiles(o.run_dir));
      e.ended = true;
      e.final_state = FromProto(s.state());
      e.error = s.error();
      *out = e;
      return Turn::kReturn;
    }
    // The stream broke without a final state: the trainer died or is
    // restarting.
    why = st.ok() ? "the status stream ended early" : st.error_message();
    if (Backoff(why)) return Turn::kAgain;
    *out = GiveUp(why);
    return Turn::kReturn;
  }
};

CheckpointFollower::CheckpointFollower(FollowOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->o = std::move(options);
}

CheckpointFollower::~CheckpointFollower() = default;

StatusOr<FollowEvent> CheckpointFollower::Next() {
  Impl& m = *impl_;
  using Turn = Impl::Turn;
  while (true) {
    if (m.Stopping()) return Status::Aborted("stopped while following the trainer");
    StatusOr<FollowEvent> out = Status::Internal("no event");
    Turn t = m.control ? Turn::kOn : m.Connect(&out);
    if (t == Turn::kReturn) return out;
    if (t == Turn::kAgain) continue;
    std::vector<CheckpointEntry> all;
    std::set<std::string> listed;
    t = m.List(&all, &listed);
    if (t == Turn::kReturn) return m.GiveUp(m.why);
    if (t == Turn::kAgain) continue;
    if (t == Turn::kRefused) return Status::FailedPrecondition("the trainer refused the run's token: " + m.why);
    FollowEvent e;
    e.checkpoints = m.Fresh(all);
    if (!e.checkpoints.empty()) return e;
    if (m.Watch(listed, &out) == Turn::kReturn) return out;
  }
}

#else  // !SCDINO_WITH_SERVICES

struct CheckpointFollower::Impl {};
CheckpointFollower::CheckpointFollower(FollowOptions) {}
CheckpointFollower::~CheckpointFollower() = default;
StatusOr<FollowEvent> CheckpointFollower::Next() {
  return Status::FailedPrecondition("built without the control API (SCDINO_WITH_SERVICES=OFF): cannot follow a trainer");
}

#endif

Status FollowCheckpoints(FollowOptions options, const std::function<Status(const CheckpointEntry&)>& each) {
  std::ostream* log = options.log;
  const std::string program = options.program;
  const std::string run_dir = options.run_dir;
  CheckpointFollower follower(std::move(options));
  if (log) *log << program << ": following the trainer of " << run_dir << "\n";
  while (true) {
    auto event = follower.Next();
    if (!event.ok()) return event.status();
    for (const auto& c : event->checkpoints) {
      if (log) *log << program << ": checkpoint " << c.path << " (epoch " << c.epoch << ", iteration " << c.iteration << ")\n";
      if (auto s = each(c); !s.ok()) return s;
    }
    if (event->ended) {
      if (log) {
        *log << program << ": the trainer ended " << RunStateName(event->final_state)
             << (event->error.empty() ? "" : " (" + event->error + ")") << "; nothing more to follow\n";
      }
      return Status::Ok();
    }
  }
}

}  // namespace scdino::process
