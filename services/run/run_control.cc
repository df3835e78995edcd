#include "run/run_control.h"

namespace scdino {

const char* RunStateName(RunState s) {
  switch (s) {
    case RunState::kStarting: return "STARTING";
    case RunState::kRunning: return "RUNNING";
    case RunState::kPausing: return "PAUSING";
    case RunState::kPaused: return "PAUSED";
    case RunState::kCheckpointing: return "CHECKPOINTING";
    case RunState::kStopping: return "STOPPING";
    case RunState::kCompleted: return "COMPLETED";
    case RunState::kFailed: return "FAILED";
    case RunState::kStopped: return "STOPPED";
  }
  return "UNKNOWN";
}

void RunControl::Update(const std::function<void(RunStatus&)>& change) {
  std::vector<std::promise<StatusOr<CheckpointResult>>> orphaned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    change(status_);
    // A loop that reports RUNNING while a pause waits for its boundary is
    // pausing; one still running after a Resume came first is running.
    if (requests_.pause && status_.state == RunState::kRunning) status_.state = RunState::kPausing;
    if (!requests_.pause && status_.state == RunState::kPausing) status_.state = RunState::kRunning;
    ++status_.revision;
    // A run that ended owes its waiting callers an answer.
    if (IsFinal(status_.state)) orphaned.swap(checkpoint_waiters_);
  }
  changed_.notify_all();
  for (auto& p : orphaned) p.set_value(Status::Aborted("the run ended before the checkpoint was written"));
}

RunRequests RunControl::Requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

void RunControl::CompleteCheckpoints(const StatusOr<std::string>& result, int64_t iteration) {
  std::vector<std::promise<StatusOr<CheckpointResult>>> waiters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiters.swap(checkpoint_waiters_);
    requests_.checkpoint = false;
  }
  for (auto& p : waiters) {
    if (result.ok()) {
      p.set_value(CheckpointResult{*result, iteration});
    } else {
      p.set_value(result.status());
    }
  }
}

void RunControl::WaitForRequest(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const RunRequests before = requests_;
  changed_.wait_for(lock, timeout, [&] {
    return requests_.pause != before.pause || requests_.stop != before.stop ||
           requests_.checkpoint != before.checkpoint;
  });
}

namespace {
Status Refused(const RunStatus& s, const char* what) {
  return Status::FailedPrecondition(std::string("cannot ") + what + ": the run is " + RunStateName(s.state));
}
}  // namespace

Status RunControl::Pause() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (IsFinal(status_.state)) return Refused(status_, "pause");
    requests_.pause = true;
    if (status_.state == RunState::kRunning) {
      status_.state = RunState::kPausing;
      ++status_.revision;
    }
  }
  changed_.notify_all();
  return Status::Ok();
}

Status RunControl::Resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (IsFinal(status_.state)) return Refused(status_, "resume");
    requests_.pause = false;
    if (status_.state == RunState::kPausing) {
      status_.state = RunState::kRunning;
      ++status_.revision;
    }
  }
  changed_.notify_all();
  return Status::Ok();
}

Status RunControl::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (IsFinal(status_.state)) return Refused(status_, "stop");
    requests_.stop = true;
  }
  changed_.notify_all();
  return Status::Ok();
}

StatusOr<std::future<StatusOr<RunControl::CheckpointResult>>> RunControl::RequestCheckpoint() {
  std::future<StatusOr<CheckpointResult>> f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (IsFinal(status_.state)) return Refused(status_, "checkpoint");
    checkpoint_waiters_.emplace_back();
    f = checkpoint_waiters_.back().get_future();
    requests_.checkpoint = true;
  }
  changed_.notify_all();
  return f;
}

RunStatus RunControl::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

RunStatus RunControl::WaitForChange(int64_t after, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return status_.revision > after; });
  return status_;
}

bool RunControl::HoldWhilePaused(const std::function<bool()>& stop_also) {
  auto stopping = [&] { return Requests().stop || (stop_also && stop_also()); };
  if (Requests().pause && !stopping()) {
    Update([](RunStatus& s) { s.state = RunState::kPaused; });
    while (Requests().pause && !stopping()) WaitForRequest(std::chrono::milliseconds(200));
    if (!stopping()) Update([](RunStatus& s) { s.state = RunState::kRunning; });
  }
  if (!stopping()) return false;
  Update([](RunStatus& s) { s.state = RunState::kStopping; });
  return true;
}

}  // namespace scdino
