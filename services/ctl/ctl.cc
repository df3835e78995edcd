#include "ctl/ctl.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <variant>

#include "common/cli.h"
#include "common/env.h"
#include "control/client.h"
#include "control/endpoint.h"
#include "control/token.h"
#include "run/learning_verdict.h"
#include "scdino/v1/control.grpc.pb.h"

namespace scdino::ctl {

namespace {

// printf into a string.
std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), format, again);
  va_end(again);
  out.resize(static_cast<size_t>(std::max(n, 0)));
  return out;
}

// "name        value\n": the table's row.
std::string Row(const char* name, const std::string& value) { return Format("%-12s%s\n", name, value.c_str()); }

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

int ExitFor(const grpc::Status& s, const std::string& target, std::ostream& err) {
  err << "scdinoctl: " << target << ": " << s.error_message() << "\n";
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED: return kUnreachable;
    case grpc::StatusCode::UNAUTHENTICATED: return kUnauthenticated;
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::UNIMPLEMENTED: return kNotFound;
    case grpc::StatusCode::FAILED_PRECONDITION: return kRefused;
    default: return kFailed;
  }
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string StateName(v1::RunState s) {
  std::string n = v1::RunState_Name(s);
  return n.rfind("RUN_STATE_", 0) == 0 ? n.substr(10) : n;
}

std::string Time(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The trainer's rows: loss, schedule, checkpoint, health, learning check,
// recoveries, non-finite steps.
std::string TrainerRows(const v1::TrainerStatus& t) {
  std::string out = Row("loss", Format("%.5f", t.loss()));
  out += Row("schedule", Format("lr %.3g, weight decay %.3g, teacher temp %.3g, momentum %.5f", t.learning_rate(),
                                t.weight_decay(), t.teacher_temperature(), t.teacher_momentum()));
  out += Row("checkpoint", Format("%s (%s)", t.last_checkpoint().empty() ? "-" : t.last_checkpoint().c_str(),
                                  Time(t.last_checkpoint_unix_ms()).c_str()));
  if (t.has_health()) {
    const auto& h = t.health();
    out += Row("health", Format("%s; teacher entropy %.3f (%.2f of ln K), KL %.3f, batch entropy %.3f, center norm "
                                "%.3g, CLS std %.3g",
                                h.collapse().empty() ? "not judged yet (first epoch)" : h.collapse().c_str(),
                                h.teacher_entropy(), h.teacher_entropy_ratio(), h.student_teacher_kl(),
                                h.teacher_batch_entropy(), h.center_norm(), h.backbone_cls_std()));
  }
  if (t.learning().epoch() > 0) {
    const auto& l = t.learning();
    // A trainer before the raw-pixel baseline sends no verdict: judged
    // here against the random ViT alone.
    LearningScores s;
    s.trained = l.knn_top1();
    s.random = l.random_knn_top1();
    s.pixels = l.verdict().empty() ? -1.0 : l.pixels_knn_top1();
    s.margin = l.margin();
    std::string line = Format("epoch %lld: teacher %.3f, random ViT %.3f (%+.3f)", static_cast<long long>(l.epoch()),
                              s.trained, s.random, s.trained - s.random);
    if (s.pixels >= 0) line += Format(", raw pixels %.3f (%+.3f)", s.pixels, s.trained - s.pixels);
    const auto v = JudgeLearning(s);
    line += v.learned == Learned::kYes  ? ": learned so far"
            : v.learned == Learned::kNo ? ": not learned so far"
                                        : ": cannot tell (a baseline is right on every image)";
    out += Row("learning", line);
  }
  if (t.recoveries().count() > 0) {
    out += Row("recoveries", Format("%lld of %lld; last: %s", static_cast<long long>(t.recoveries().count()),
                                    static_cast<long long>(t.recoveries().max()), t.recoveries().last().c_str()));
  }
  if (t.nonfinite_steps() > 0) out += Row("nonfinite", std::to_string(t.nonfinite_steps()));
  return out;
}

// The server to call and its token: from the run directory's endpoint
// file, or --target with --token-file. An exit code when neither works.
// `quiet`: no message when the run directory has no endpoint yet.
std::variant<control::ClientTarget, int> ResolveTarget(const Options& o, std::ostream& err, bool quiet = false) {
  control::ClientTarget t;
  if (!o.run_dir.empty()) {
    auto r = control::ResolveRun(o.run_dir, o.service, o.token_file);
    if (!r.ok()) {
      if (quiet && r.status().code() == StatusCode::kNotFound) return kNotFound;
      err << "scdinoctl: " << r.status().message() << "\n";
      return r.status().code() == StatusCode::kNotFound ? kNotFound : kFailed;
    }
    t = *r;
    if (!t.plaintext_warning.empty()) err << "scdinoctl: warning: " << t.plaintext_warning << "\n";
  } else {
    if (o.token_file.empty()) {
      err << "scdinoctl: --target needs --token-file (the run's control.token)\n";
      return kBadArguments;
    }
    auto token = control::ReadToken(o.token_file);
    if (!token.ok()) {
      err << "scdinoctl: " << token.status().message() << "\n";
      return token.status().code() == StatusCode::kNotFound ? kNotFound : kFailed;
    }
    t.target = o.target;
    t.token = *token;
    t.tls = o.tls;
    t.tls_name = o.tls_name;
  }
  t.tls_ca_file = o.tls_ca;
  return t;
}

StatusOr<bool> JobQueued(const std::string& job);

std::string ExitText(const control::ServiceEnded& e) {
  return e.exit_code >= 0 ? " (exit " + std::to_string(e.exit_code) + ")" : "";
}

// How long watch waits for a run to start: with --job, as long as Slurm
// lists that job (pending, held, or running what comes before the service:
// the staging, the preflight); else up to --wait seconds.
class StartWait {
 public:
  explicit StartWait(const Options& o)
      : o_(o),
        deadline_(std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.wait * 1000))) {}
  bool waiting() const { return o_.command == "watch" && (o_.wait > 0 || !o_.job.empty()); }
  std::string what() const {
    return o_.job.empty() ? "up to " + Format("%g", o_.wait) + " s" : "while Slurm job " + o_.job + " is queued";
  }
  // Whether to look again; false once the deadline passed or the job left
  // the queue (job_gone()). A busy slurmctld is asked again, 5 times.
  bool More() {
    if (o_.job.empty()) return std::chrono::steady_clock::now() < deadline_;
    auto queued = JobQueued(o_.job);
    if (!queued.ok()) {
      trouble_ = queued.status().message();
      return ++failed_asks_ < 5;
    }
    failed_asks_ = 0;
    gone_ = !*queued;
    return *queued;
  }
  bool job_gone() const { return gone_; }
  // Why Slurm could not be asked, after 5 failed asks.
  std::string trouble() const { return failed_asks_ >= 5 ? trouble_ : ""; }

 private:
  const Options& o_;
  std::chrono::steady_clock::time_point deadline_;
  int failed_asks_ = 0;
  bool gone_ = false;
  std::string trouble_;
};

// watch --job, the job no longer queued: how the service's last life
// ended (its end record), or that it never started in the job.
int LeftTheQueue(const Options& o, std::ostream& err) {
  auto ended = control::ReadEnded(o.run_dir, o.service);
  if (ended.ok()) {
    const std::time_t at = static_cast<std::time_t>(ended->end_unix_ms / 1000);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&at));
    err << "scdinoctl: Slurm job " << o.job << " is no longer queued; the " << o.service << " of " << o.run_dir
        << " ended " << ended->state << ExitText(*ended) << " at " << when
        << (ended->slurm_job_id.empty() ? "" : " in Slurm job " + ended->slurm_job_id)
        << (ended->error.empty() ? "" : ": " + ended->error) << "\n";
    return ended->state == "FAILED" ? kFailed : kOk;
  }
  err << "scdinoctl: Slurm job " << o.job << " left the queue and the " << o.service << " of "
      << (o.run_dir.empty() ? o.target : o.run_dir)
      << " never started in it (or was killed before it wrote its end record): see the job's log\n";
  return kFailed;
}

// The service's end record, when it ended at `since_unix_ms` or later
// (one look).
std::optional<control::ServiceEnded> EndRecordSince(const Options& o, int64_t since_unix_ms) {
  auto ended = control::ReadEnded(o.run_dir, o.service);
  if (ended.ok() && ended->end_unix_ms >= since_unix_ms) return *ended;
  return std::nullopt;
}

// The run's target once it answers: at once, or with watch --wait or
// --job, once its endpoint file is there and its server accepts a
// connection (a job still in the queue, or a service still starting).
// `since_unix_ms`: an end record from then on is this run's (0: from now).
std::variant<control::ClientTarget, int> TargetWhenAnswering(const Options& o, std::ostream& err,
                                                             int64_t since_unix_ms = 0) {
  StartWait wait(o);
  if (!wait.waiting()) return ResolveTarget(o, err);
  err << "scdinoctl: waiting " << wait.what() << " for the run in " << (o.run_dir.empty() ? o.target : o.run_dir)
      << " to start\n";
  const int64_t began_unix_ms = since_unix_ms > 0 ? since_unix_ms : NowUnixMs();
  for (bool last = false;; last = !wait.More()) {
    if (last && wait.job_gone()) {
      // It may have started and ended since the look above.
      if (!EndRecordSince(o, began_unix_ms)) return LeftTheQueue(o, err);
    }
    if (last && !wait.trouble().empty()) {
      err << "scdinoctl: cannot ask Slurm about job " << o.job << ": " << wait.trouble() << "\n";
    }
    if (!o.run_dir.empty()) {
      // A file's combinations whose runs started while waiting on their top folder.
      if (const auto all = o.combination.empty() ? CombinationsOf(o.run_dir) : std::vector<std::string>{};
          !all.empty()) {
        err << "scdinoctl: " << o.run_dir << " holds the runs of " << all.size() << " channel combinations ("
            << Joined(all) << "): name one with --combination NAME\n";
        return kBadArguments;
      }
      // A run that started and ended between two looks leaves its end record.
      if (const auto ended = EndRecordSince(o, began_unix_ms)) {
        err << "scdinoctl: the " << o.service << " of " << o.run_dir << " ended " << ended->state << ExitText(*ended)
            << (ended->error.empty() ? "" : ": " + ended->error) << "\n";
        return ended->state == "FAILED" ? kFailed : kOk;
      }
    }
    auto resolved = ResolveTarget(o, err, /*quiet=*/!last);
    if (const auto* t = std::get_if<control::ClientTarget>(&resolved)) {
      auto channel = control::OpenChannel(*t);
      if (channel.ok() &&
          (last || (*channel)->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(2)))) {
        return resolved;
      }
    } else if (last || std::get<int>(resolved) != kNotFound) {
      return resolved;
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
}

// One connection to the service: its stubs, a context for each call, and
// where answers and messages go.
struct Connection {
  const Options& o;
  control::ClientTarget t;
  std::shared_ptr<grpc::Channel> channel;
  std::ostream& out;
  std::ostream& err;
  std::unique_ptr<v1::Control::Stub> control = v1::Control::NewStub(channel);
  std::unique_ptr<v1::Trainer::Stub> trainer = v1::Trainer::NewStub(channel);

  void Prepare(grpc::ClientContext& ctx, bool deadline) const {
    control::AddToken(&ctx, t.token);
    if (deadline) ctx.set_deadline(Deadline());
  }
  std::chrono::system_clock::time_point Deadline() const {
    return std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.timeout * 1000));
  }
  int Fail(const grpc::Status& s) const { return ExitFor(s, t.target, err); }
};

int ShowStatus(const Connection& c) {
  grpc::ClientContext ctx;
  c.Prepare(ctx, true);
  v1::Status s;
  auto st = c.control->GetStatus(&ctx, v1::GetStatusRequest(), &s);
  if (!st.ok()) return c.Fail(st);
  c.out << (c.o.json ? Json(s) + "\n" : StatusTable(s));
  return kOk;
}

// What Watch returns when a stream that had answered broke (its server
// went away), or when the life it found ended before its stream answered:
// WatchThroughRequeues tells the life's end from it, and the user is told
// kUnreachable when it cannot.
constexpr int kStreamLost = -3;

// `since_unix_ms`: when the watch, or the life it waited for, began.
int Watch(const Connection& c, int64_t since_unix_ms) {
  // Found, then gone before its stream answered: a life that ended in
  // between (a stop signal at its start) has written its end record since.
  auto ended_before_answering = [&] { return !c.o.run_dir.empty() && EndRecordSince(c.o, since_unix_ms); };
  // The first message has to come within the timeout; then no deadline.
  grpc::ClientContext ctx;
  c.Prepare(ctx, false);
  if (!c.channel->WaitForConnected(c.Deadline())) {
    if (ended_before_answering()) return kStreamLost;
    c.err << "scdinoctl: " << c.t.target << ": not reachable within " << c.o.timeout << " s\n";
    return kUnreachable;
  }
  v1::WatchStatusRequest req;
  req.set_interval_ms(c.o.interval_ms);
  auto reader = c.control->WatchStatus(&ctx, req);
  v1::Status s;
  bool streamed = false;
  while (reader->Read(&s)) {
    streamed = true;
    c.out << (c.o.json ? Json(s) + "\n" : StatusLine(s, NowUnixMs())) << std::flush;
  }
  auto st = reader->Finish();
  if (!st.ok()) {
    if (!streamed && st.error_code() == grpc::StatusCode::UNAVAILABLE && ended_before_answering()) return kStreamLost;
    const int code = c.Fail(st);
    return streamed && code == kUnreachable ? kStreamLost : code;
  }
  return s.state() == v1::RUN_STATE_FAILED ? kFailed : kOk;
}

// pause, resume or stop.
int Request(const Connection& c, const std::string& command) {
  grpc::ClientContext ctx;
  c.Prepare(ctx, true);
  v1::ControlReply reply;
  grpc::Status st;
  if (command == "pause") st = c.control->Pause(&ctx, v1::PauseRequest(), &reply);
  if (command == "resume") st = c.control->Resume(&ctx, v1::ResumeRequest(), &reply);
  if (command == "stop") st = c.control->Stop(&ctx, v1::StopRequest(), &reply);
  if (!st.ok()) return c.Fail(st);
  c.out << (c.o.json ? Json(reply) : command + ": requested; the run is " + StateName(reply.state())) << "\n";
  return kOk;
}

int SaveCheckpoint(const Connection& c) {
  grpc::ClientContext ctx;
  c.Prepare(ctx, true);
  v1::SaveCheckpointReply reply;
  auto st = c.trainer->SaveCheckpoint(&ctx, v1::SaveCheckpointRequest(), &reply);
  if (!st.ok()) return c.Fail(st);
  c.out << (c.o.json ? Json(reply) : reply.path() + " (iteration " + std::to_string(reply.iteration()) + ")") << "\n";
  return kOk;
}

int ListCheckpoints(const Connection& c) {
  grpc::ClientContext ctx;
  c.Prepare(ctx, true);
  v1::ListCheckpointsReply reply;
  auto st = c.trainer->ListCheckpoints(&ctx, v1::ListCheckpointsRequest(), &reply);
  if (!st.ok()) return c.Fail(st);
  if (c.o.json) {
    c.out << Json(reply) << "\n";
    return kOk;
  }
  c.out << Format("%-10s %-6s %-10s %-20s %s\n", "ITERATION", "EPOCH", "SIZE_MB", "WRITTEN", "PATH");
  for (const auto& cp : reply.checkpoints()) {
    c.out << Format("%-10lld %-6lld %-10.1f %-20s %s\n", static_cast<long long>(cp.iteration()),
                    static_cast<long long>(cp.epoch()), static_cast<double>(cp.size_bytes()) / 1e6,
                    Time(cp.modified_unix_ms()).c_str(), cp.path().c_str());
  }
  return kOk;
}

int RotateToken(const Options& o, std::ostream& out, std::ostream& err) {
  if (o.run_dir.empty()) {
    err << "scdinoctl: rotate-token needs --run-dir DIR\n";
    return kBadArguments;
  }
  auto services = control::RotateToken(o.run_dir, o.token_file);
  if (!services.ok()) {
    err << "scdinoctl: " << services.status().message() << "\n";
    return services.status().code() == StatusCode::kNotFound ? kNotFound : kFailed;
  }
  out << "rotate-token: new token in " << (o.token_file.empty() ? o.run_dir + "/control.token" : o.token_file);
  for (const auto& name : *services) out << (&name == &services->front() ? "; endpoint of " : ", ") << name;
  out << (services->empty() ? "; no service of the run is running" : " signed with it") << "\n";
  return kOk;
}

// A channel combination's run, as `status` on the file's top folder lists
// it: the state its service reports, or its end record, or why neither.
struct CombinationState {
  std::string name, run_dir, state, detail;
  std::optional<v1::Status> status;
};

std::string ProgressText(const v1::Progress& p) {
  if (p.iterations() <= 0) {
    return Format("%lld/%lld items", static_cast<long long>(p.items_done()), static_cast<long long>(p.items_total()));
  }
  return Format("epoch %lld/%lld, iteration %lld/%lld (%.1f%%)", static_cast<long long>(p.epoch() + 1),
                static_cast<long long>(p.epochs()), static_cast<long long>(p.iteration()),
                static_cast<long long>(p.iterations()),
                100.0 * static_cast<double>(p.iteration()) / static_cast<double>(p.iterations()));
}

CombinationState StateOf(const Options& o, const std::string& name) {
  CombinationState c;
  c.name = name;
  c.run_dir = (std::filesystem::path(o.run_dir) / name).string();
  auto target = control::ResolveRun(c.run_dir, o.service, o.token_file);
  if (target.ok()) {
    target->tls_ca_file = o.tls_ca;
    auto channel = control::OpenChannel(*target);
    if (!channel.ok()) {
      c.state = "UNREACHABLE";
      c.detail = channel.status().message();
      return c;
    }
    grpc::ClientContext ctx;
    control::AddToken(&ctx, target->token);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(o.timeout * 1000)));
    v1::Status s;
    const grpc::Status st = v1::Control::NewStub(*channel)->GetStatus(&ctx, v1::GetStatusRequest(), &s);
    if (!st.ok()) {
      c.state = "UNREACHABLE";
      c.detail = target->target + ": " + st.error_message();
      return c;
    }
    c.state = StateName(s.state());
    c.detail = ProgressText(s.progress());
    if (s.has_trainer()) c.detail += Format(", loss %.5f", s.trainer().loss());
    if (!s.error().empty()) c.detail += ": " + s.error();
    c.status = s;
    return c;
  }
  auto ended = control::ReadEnded(c.run_dir, o.service);
  if (ended.ok()) {
    c.state = ended->state;
    if (ended->exit_code >= 0) c.detail = "exit " + std::to_string(ended->exit_code);
    if (!ended->slurm_job_id.empty()) {
      c.detail += (c.detail.empty() ? "" : ", ") + std::string("Slurm job ") + ended->slurm_job_id;
    }
    if (!ended->error.empty()) c.detail += (c.detail.empty() ? "" : ": ") + ended->error;
    return c;
  }
  std::error_code ec;
  const bool has_endpoint = std::filesystem::exists(control::EndpointPath(c.run_dir, o.service), ec);
  c.state = has_endpoint ? "GONE" : "NOT RUNNING";
  c.detail = has_endpoint || target.status().code() != StatusCode::kNotFound
                 ? target.status().message()
                 : "no " + o.service + " endpoint or end record: not started, or ended without its record (killed)";
  return c;
}

// `status --run-dir TOP` where TOP holds a run per channel combination.
int ListCombinations(const Options& o, const std::vector<std::string>& names, std::ostream& out) {
  if (!o.json) out << Format("%-40s %-12s %s\n", "COMBINATION", "STATE", "PROGRESS");
  for (const auto& name : names) {
    const CombinationState c = StateOf(o, name);
    if (!o.json) {
      out << Format("%-40s %-12s %s\n", c.name.c_str(), c.state.c_str(), c.detail.c_str());
      continue;
    }
    nlohmann::json j = {{"combination", c.name}, {"run_dir", c.run_dir}, {"state", c.state}, {"detail", c.detail}};
    j["status"] = c.status ? nlohmann::json::parse(Json(*c.status)) : nlohmann::json();
    out << j.dump() << "\n";
  }
  return kOk;
}

// --combination NAME under --run-dir: its folder, or the channel names
// the folder ends with. With watch --wait, a combination whose task is
// still queued (no folder yet) is waited for.
std::variant<std::string, int> CombinationDir(Options* o, std::ostream& err) {
  StartWait wait(*o);
  for (;;) {
    const auto all = CombinationsOf(o->run_dir);
    std::vector<std::string> matches;
    for (const auto& c : all) {
      const std::string tail = "_channel_" + o->combination;
      if (c == o->combination ||
          (c.size() > tail.size() && c.compare(c.size() - tail.size(), tail.size(), tail) == 0)) {
        matches.push_back(c);
      }
    }
    if (matches.size() == 1) return (std::filesystem::path(o->run_dir) / matches[0]).string();
    if (matches.size() > 1) {
      err << "scdinoctl: --combination " << o->combination << " names " << matches.size() << " runs in "
          << o->run_dir << " (" << Joined(matches) << "): give the folder's whole name\n";
      return kBadArguments;
    }
    if (!wait.waiting() || !wait.More()) {
      if (wait.job_gone()) {
        err << "scdinoctl: Slurm job " << o->job << " left the queue and no run of combination " << o->combination
            << " started in " << o->run_dir << ": see the job's log\n";
        return kFailed;
      }
      err << "scdinoctl: no combination " << o->combination << " in " << o->run_dir << "; "
          << (all.empty() ? "it holds no combination's run (none started yet, or it is not <output_dir>/<name_of_run> "
                            "of a file with several combinations)"
                          : "its combinations: " + Joined(all))
          << "\n";
      return kNotFound;
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
}

// The command on one connection to the run's service.
int Call(const Options& o, std::ostream& out, std::ostream& err, int64_t since_unix_ms = 0) {
  auto resolved = TargetWhenAnswering(o, err, since_unix_ms);
  if (const int* code = std::get_if<int>(&resolved)) return *code;
  const auto& t = std::get<control::ClientTarget>(resolved);
  auto channel = control::OpenChannel(t);
  if (!channel.ok()) {
    err << "scdinoctl: " << channel.status().message() << "\n";
    return kFailed;
  }
  const Connection c{o, t, *channel, out, err};
  if (o.command == "status") return ShowStatus(c);
  if (o.command == "watch") return Watch(c, since_unix_ms);
  if (o.command == "pause" || o.command == "resume" || o.command == "stop") return Request(c, o.command);
  if (o.command == "checkpoint") return SaveCheckpoint(c);
  return ListCheckpoints(c);
}

// Whether Slurm still lists job `job` in a state it runs or starts again
// from (pending, requeued, running, completing, ...): finished jobs are
// listed only under the user's SQUEUE_STATES, as COMPLETED, FAILED, ...,
// and read as gone; lines that are not a state (warnings) are left out. An
// error when squeue cannot say (NotFound: it is not on the PATH).
// SCDINO_SQUEUE names the program to ask instead of squeue: in the image
// on a login node, the relay to the node's own Slurm client that
// deploy/slurm/scdinoctl.sh sets up (the image has none).
StatusOr<bool> JobQueued(const std::string& job) {
  if (job.empty() || job.find_first_not_of("0123456789_") != std::string::npos) {
    return Status::InvalidArgument("\"" + job + "\" is not a Slurm job id");
  }
  const char* relay = std::getenv("SCDINO_SQUEUE");
  std::string program = "squeue";
  if (relay && *relay) {
    program = relay;
    if (program.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._+-") !=
        std::string::npos) {
      return Status::InvalidArgument("SCDINO_SQUEUE: expected a program's path (letters, digits, / . _ + -), got \"" +
                                     program + "\"");
    }
  }
  FILE* p = ::popen((program + " -h -o %T -j " + job + " 2>&1").c_str(), "r");
  if (!p) return Status::IOError("cannot run squeue");
  std::string text;
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  const int status = ::pclose(p);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 127) {
    return Status::NotFound(relay && *relay ? "SCDINO_SQUEUE=" + program + ": no such program"
                                            : "squeue is not on this node's PATH");
  }
  static const std::set<std::string> kFinished = {"COMPLETED", "FAILED",        "CANCELLED", "TIMEOUT",
                                                  "NODE_FAIL", "PREEMPTED",     "BOOT_FAIL", "DEADLINE",
                                                  "REVOKED",   "OUT_OF_MEMORY"};
  bool listed = false;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    line.erase(0, line.find_first_not_of(" \t"));
    line.erase(line.find_last_not_of(" \t\r") + 1);
    const bool state = !line.empty() && line.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == std::string::npos;
    if (state && !kFinished.count(line)) listed = true;
  }
  // A job Slurm has forgotten: "Invalid job id specified".
  if (code != 0 && text.find("Invalid job id") == std::string::npos) return Status::IOError("squeue: " + text);
  return listed;
}

// The service's end record once it is there (written as its stream ends),
// if it ended after `since_unix_ms`: waited for up to 10 s. With `life`
// (its endpoint file, as read when its stream broke), no longer once that
// process is seen gone, after one last look (a next life, which may start
// and end within those 10 s, writes a record that is not this life's).
std::optional<control::ServiceEnded> EndedSince(const Options& o, int64_t since_unix_ms,
                                                const control::Endpoint* life = nullptr) {
  const std::string here = life ? ThisHostName() : "";
  for (int i = 0; i < 50; ++i) {
    const bool gone = life && control::EndpointProcessState(*life, here) == control::ProcessState::kGone;
    if (auto ended = EndRecordSince(o, since_unix_ms)) return ended;
    if (gone) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return std::nullopt;
}

// After a life that did not complete, inside a Slurm job that may requeue
// it (its end record's `requeue` is not "never"): while the job is still in
// the queue, its next life, which has started (its endpoint file, from
// start_unix_ms) or has already ended too (a new end record: a short life
// between two looks). Neither when the job left the queue without one, or
// Slurm cannot be asked (said).
struct NextLife {
  bool started = false;
  int64_t start_unix_ms = 0;
  std::optional<control::ServiceEnded> ended;
};

NextLife NextLifeOf(const Options& o, const control::ServiceEnded& last, std::ostream& err) {
  if (last.requeue == "never") return {};  // the batch scripts end the job with it
  // Without squeue (a container without Slurm's client), a code the batch
  // scripts always requeue is waited for up to --wait seconds.
  const bool always = last.requeue == "always";
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.wait * 1000));
  bool said = false;
  int failed_asks = 0;
  for (;;) {
    auto e = control::ReadEndpoint(o.run_dir, o.service);
    if (e.ok() && e->start_unix_ms > last.end_unix_ms) return {true, e->start_unix_ms, std::nullopt};
    auto again = control::ReadEnded(o.run_dir, o.service);
    if (again.ok() && again->end_unix_ms > last.end_unix_ms) return {false, 0, *again};
    auto queued = JobQueued(last.slurm_job_id);
    // A busy slurmctld ("Socket timed out"): asked again a few times.
    if (!queued.ok() && queued.status().code() != StatusCode::kNotFound && ++failed_asks < 5) {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      continue;
    }
    if (queued.ok()) failed_asks = 0;
    if (!queued.ok() && always && o.wait > 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        err << "scdinoctl: Slurm job " << last.slurm_job_id << " did not start again within " << o.wait << " s\n";
        return {};
      }
      if (!said) {
        err << "scdinoctl: the " << o.service << " of " << o.run_dir << " ended " << last.state << ExitText(last)
            << ", which the batch scripts requeue; " << queued.status().message() << ": waiting up to " << o.wait
            << " s (--wait) for its next start\n";
        said = true;
      }
      std::this_thread::sleep_for(std::chrono::seconds(2));
      continue;
    }
    if (!queued.ok()) {
      err << "scdinoctl: not following Slurm job " << last.slurm_job_id << " through a requeue: "
          << queued.status().message() << (always ? " (watch --wait SECONDS waits for it)" : "") << "\n";
      return {};
    }
    if (!*queued) {
      // It may have started and ended since the look above.
      again = control::ReadEnded(o.run_dir, o.service);
      if (again.ok() && again->end_unix_ms > last.end_unix_ms) return {false, 0, *again};
      if (said) err << "scdinoctl: Slurm job " << last.slurm_job_id << " left the queue without starting again\n";
      return {};
    }
    if (!said) {
      err << "scdinoctl: the " << o.service << " of " << o.run_dir << " ended " << last.state << ExitText(last)
          << "; Slurm job " << last.slurm_job_id << " is still queued: waiting for its next start\n";
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
}

// A life whose server went away without writing its end record (SIGKILL,
// out of memory, a lost node; an NCCL peer lost: _Exit): told as an end,
// KILLED, at the life's start (a later start or end record is a next
// life's), in the Slurm job its endpoint file names, else --job's.
// Nothing when there is no job to follow.
std::optional<control::ServiceEnded> KilledLife(const Options& o, const control::Endpoint& life) {
  control::ServiceEnded killed;
  killed.service = o.service;
  killed.state = "KILLED";
  killed.end_unix_ms = life.start_unix_ms;
  killed.slurm_job_id = life.slurm_job_id.empty() ? o.job : life.slurm_job_id;
  if (killed.slurm_job_id.empty()) return std::nullopt;
  return killed;
}

// watch: each life of the run until one completes, or fails or stops for
// good (its Slurm job no longer queued). The exit code is the last life's,
// and 1 when a life the batch scripts requeue was never followed by another
// (the run did not finish).
// `since_unix_ms`: when the watch began, before it waited for a queued
// combination's folder (a run that started and ended in that wait is this
// watch's too).
int WatchThroughRequeues(Options o, std::ostream& out, std::ostream& err, int64_t since_unix_ms) {
  int64_t since = since_unix_ms;
  int code = Call(o, out, err, since);
  for (;;) {
    const bool lost = code == kStreamLost;
    if (lost) code = kUnreachable;
    if (o.run_dir.empty() || (code != kOk && code != kFailed && !lost)) return code;
    std::optional<control::ServiceEnded> ended;
    bool killed = false;
    if (lost) {
      // The stream broke. As its life ended: its end record says how. Else
      // killed before it wrote one.
      auto e = control::ReadEndpoint(o.run_dir, o.service);
      ended = EndedSince(o, since, e.ok() ? &*e : nullptr);
      if (ended) {
        err << "scdinoctl: the " << o.service << " of " << o.run_dir << " ended " << ended->state << ExitText(*ended)
            << (ended->error.empty() ? "" : ": " + ended->error) << "\n";
        code = ended->state == "FAILED" ? kFailed : kOk;
      } else {
        killed = true;
        if (e.ok()) ended = KilledLife(o, *e);
        if (!ended) return code;
        err << "scdinoctl: the " << o.service << " of " << o.run_dir
            << " went away without its end record (killed: SIGKILL, out of memory, a lost node or peer)\n";
      }
    } else {
      ended = EndedSince(o, since);
    }
    if (!ended || ended->state == "COMPLETED" || ended->slurm_job_id.empty()) return code;
    const NextLife next = NextLifeOf(o, *ended, err);
    if (next.ended) {
      err << "scdinoctl: the " << o.service << " of " << o.run_dir << " started again and ended "
          << next.ended->state << ExitText(*next.ended)
          << (next.ended->error.empty() ? "" : ": " + next.ended->error) << "\n";
      code = next.ended->state == "FAILED" ? kFailed : kOk;
      since = next.ended->end_unix_ms;
      continue;
    }
    if (!next.started && killed) {
      // Gone from the queue: the run did not finish. Slurm not asked: unknown.
      auto queued = JobQueued(ended->slurm_job_id);
      if (!queued.ok() || *queued) return code;
      err << "scdinoctl: Slurm job " << ended->slurm_job_id << " left the queue without starting the " << o.service
          << " again: see the job's log\n";
      return kFailed;
    }
    if (!next.started) return ended->requeue == "always" ? kFailed : code;
    since = next.start_unix_ms;
    o.wait = std::max(o.wait, 60.0);  // the new life's server, starting
    code = Call(o, out, err, since);
  }
}

}  // namespace

std::vector<std::string> CombinationsOf(const std::string& top) {
  namespace fs = std::filesystem;
  auto holds_run = [](const fs::path& d) {
    std::error_code ec;
    return fs::exists(d / "control.token", ec) || fs::is_directory(d / "endpoints", ec) ||
           fs::exists(d / "checkpoint.safetensors", ec);
  };
  std::vector<std::string> out;
  if (holds_run(top)) return out;
  std::error_code ec;
  for (fs::directory_iterator it(top, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec) && holds_run(it->path())) out.push_back(it->path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string Duration(double s) {
  if (s <= 0) return "-";
  const long x = static_cast<long>(s + 0.5);
  if (x >= 3600) return Format("%ldh%02ldm", x / 3600, (x / 60) % 60);
  if (x >= 60) return Format("%ldm%02lds", x / 60, x % 60);
  return Format("%lds", x);
}

std::string Stage(const v1::Progress& p) {
  if (p.stage_finished()) {
    return Format("%s: %lld %s, done", p.stage().c_str(), static_cast<long long>(p.stage_done()),
                  p.stage_unit().c_str());
  }
  std::string out = p.stage() + ": " + p.stage_unit() + " " + std::to_string(p.stage_done());
  if (p.stage_total() > 0) {
    out += Format("/%lld (%.0f%%)", static_cast<long long>(p.stage_total()),
                  std::floor(100.0 * static_cast<double>(p.stage_done()) / static_cast<double>(p.stage_total())));
  }
  if (p.stage_per_second() > 0) out += Format(", %.2f %s/s", p.stage_per_second(), p.stage_unit().c_str());
  if (p.stage_eta_seconds() > 0) out += ", ETA " + Duration(p.stage_eta_seconds());
  return out;
}

std::string StatusTable(const v1::Status& s) {
  const auto& p = s.progress();
  const auto& r = s.run();
  std::string service = v1::ServiceKind_Name(s.service());
  service = service.substr(service.rfind('_') + 1);
  for (auto& c : service) c = static_cast<char>(std::tolower(c));
  std::string out = Row("service", service);
  out += Row("run", r.run_id() + " (" + r.run_dir() + ")");
  out += Row("state", StateName(s.state()) + (s.error().empty() ? "" : ": " + s.error()));
  out += Row("progress", ProgressText(p));
  out += Row("speed", Format("%.1f items/s, ETA %s", p.items_per_second(), Duration(p.eta_seconds()).c_str()));
  if (!p.stage().empty()) out += Row("stage", Stage(p));
  if (s.has_trainer()) out += TrainerRows(s.trainer());
  out += Row("host", Format("%s pid %lld, world size %lld, started %s", r.host().c_str(), static_cast<long long>(r.pid()),
                            static_cast<long long>(r.world_size()), Time(r.start_unix_ms()).c_str()));
  if (!r.slurm_job_id().empty()) out += Row("slurm", "job " + r.slurm_job_id() + " step " + r.slurm_step_id());
  out += Row("version", r.version());
  return out;
}

std::string StatusLine(const v1::Status& s, int64_t now_unix_ms) {
  const auto& p = s.progress();
  std::string out = Format("%s %-10s it %lld/%lld epoch %lld/%lld %.1f items/s ETA %s", Time(now_unix_ms).c_str(),
                           StateName(s.state()).c_str(), static_cast<long long>(p.iteration()),
                           static_cast<long long>(p.iterations()), static_cast<long long>(p.epoch() + 1),
                           static_cast<long long>(p.epochs()), p.items_per_second(), Duration(p.eta_seconds()).c_str());
  if (s.has_trainer()) out += Format(" loss %.5f", s.trainer().loss());
  if (!p.stage().empty() && !p.stage_finished()) out += " [" + Stage(p) + "]";
  if (!s.error().empty()) out += " error: " + s.error();
  return out + "\n";
}

std::optional<int> ParseCommandLine(int argc, const char* const* argv, Options* o, std::ostream& out,
                                    std::ostream& err) {
  cli::App app("scdinoctl",
               "Status and steering of a running scdino service through its control API (docs/control.md).\n"
               "Exit codes: 0 ok, 1 failed, 2 bad arguments, 3 unreachable, 4 unauthenticated,\n"
               "5 not found, 6 refused (the run cannot do that now).");
  app->require_subcommand(1);
  // Options may follow the command, as in `scdinoctl status --run-dir runs/x`.
  app->fallthrough();
  app->add_option("--run-dir", o->run_dir, "the run directory (endpoint file and control.token found there)")
      ->type_name("DIR");
  app->add_option("--combination", o->combination,
                  "with --run-dir <output_dir>/<name_of_run> of a file with several channel combinations: the "
                  "combination's run, by its folder or the channel names it ends with (status without it lists "
                  "them all)")
      ->type_name("NAME");
  app->add_option("--service", o->service, "which service of the run")
      ->check(CLI::IsMember({"trainer", "features", "eval"}));
  app->add_option("--target", o->target, "a server address instead of --run-dir")->type_name("HOST:PORT");
  app->add_option("--token-file", o->token_file,
                  "the run's control token (with --target; with --run-dir when it is not <run_dir>/control.token)")
      ->type_name("FILE");
  app->add_flag("--tls", o->tls, "use TLS (with --target)");
  app->add_option("--tls-ca", o->tls_ca, "PEM roots to trust for TLS (with --target: the run's tls_cert)")
      ->type_name("FILE");
  app->add_option("--tls-name", o->tls_name,
                  "the name the server's certificate is issued to (with --target: the endpoint file's tls_name)")
      ->type_name("NAME");
  app->add_flag("--json", o->json, "JSON instead of tables (one object per line for watch)");
  app->add_option("--timeout", o->timeout, "seconds to wait for an answer")
      ->check(CLI::NonNegativeNumber)
      ->default_str("10; checkpoint: 600");
  app->add_subcommand("status", "the run's state, progress, speed and last values");
  app->add_subcommand("watch", "status on every change until the run ends (Ctrl-C to leave)")
      ->add_option("--interval-ms", o->interval_ms, "also print every N ms when nothing changed")
      ->check(CLI::NonNegativeNumber);
  app->get_subcommand("watch")
      ->add_option("--wait", o->wait,
                   "wait up to SECONDS for the run to start and answer (a job still in the queue); 0: not")
      ->type_name("SECONDS")
      ->check(CLI::NonNegativeNumber);
  app->get_subcommand("watch")
      ->add_option("--job", o->job,
                   "the Slurm job the run is in (JOBID, or ARRAYID_TASK): wait as long as Slurm lists it; once it "
                   "left the queue, say how the run ended (needs squeue on this node)")
      ->type_name("JOBID")
      ->check([](const std::string& v) {
        const auto u = v.find('_');
        const auto digits = [](const std::string& d) {
          return !d.empty() && d.find_first_not_of("0123456789") == std::string::npos;
        };
        return digits(v.substr(0, u)) && (u == std::string::npos || digits(v.substr(u + 1)))
                   ? std::string()
                   : "expected a Slurm job id (123) or array task (123_4), got \"" + v + "\"";
      });
  app->add_subcommand("pause", "pause at the next step boundary");
  app->add_subcommand("resume", "continue a paused run");
  app->add_subcommand("stop", "finish the step, write a checkpoint, exit");
  app->add_subcommand("checkpoint", "write a checkpoint now and print its path (trainer)");
  app->add_subcommand("checkpoints", "list the run's checkpoints (trainer)");
  app->add_subcommand("rotate-token",
                      "replace the run's token by a new one (with --run-dir); the running services take it at the next "
                      "call, and the old token is refused from then on");
  if (auto code = app.Parse(argc, argv, out, err)) return *code == 0 ? kOk : kBadArguments;
  o->command = app->get_subcommands().front()->get_name();
  if (o->run_dir.empty() == o->target.empty()) {
    err << "scdinoctl: give either --run-dir DIR or --target HOST:PORT (with --token-file)\n";
    return kBadArguments;
  }
  if (!o->job.empty() && o->run_dir.empty()) {
    err << "scdinoctl: watch --job needs --run-dir: the run's end record says how it ended\n";
    return kBadArguments;
  }
  if (!o->combination.empty() && o->run_dir.empty()) {
    err << "scdinoctl: --combination needs --run-dir <output_dir>/<name_of_run>\n";
    return kBadArguments;
  }
  if (o->timeout < 0) o->timeout = o->command == "checkpoint" ? 600 : 10;
  return std::nullopt;
}

int Run(const Options& given, std::ostream& out, std::ostream& err) {
  const int64_t began_unix_ms = NowUnixMs();
  Options o = given;
  std::error_code ec;
  bool job_gone = false;
  if (!o.job.empty()) {
    // Slurm is asked first: a node without squeue is told so, and a job
    // already gone is answered from the run's end record.
    auto queued = JobQueued(o.job);
    if (!queued.ok() && (queued.status().code() == StatusCode::kNotFound ||
                         queued.status().code() == StatusCode::kInvalidArgument)) {
      err << "scdinoctl: watch --job " << o.job << ": " << queued.status().message()
          << " (run the watch where Slurm's client is, or use --wait SECONDS)\n";
      return kBadArguments;
    }
    job_gone = queued.ok() && !*queued;
    if (job_gone && !std::filesystem::is_directory(o.run_dir, ec)) return LeftTheQueue(o, err);
  }
  if (!o.run_dir.empty() && !std::filesystem::is_directory(o.run_dir, ec) &&
      !(o.command == "watch" && (o.wait > 0 || !o.job.empty()))) {
    err << "scdinoctl: --run-dir " << o.run_dir << ": no such directory (a run's <output_dir>/<name_of_run>, or a "
        << "combination's folder under it; for a job still queued, watch --wait SECONDS waits for it)\n";
    return kBadArguments;
  }
  if (!o.combination.empty()) {
    const auto began = std::chrono::steady_clock::now();
    auto dir = CombinationDir(&o, err);
    if (const int* code = std::get_if<int>(&dir)) return *code;
    o.run_dir = std::get<std::string>(dir);
    // What is left of --wait, in whole seconds as the user gave it (they are printed).
    o.wait = std::max(0.0, std::ceil(o.wait - std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count()));
  } else if (!o.run_dir.empty()) {
    if (const auto all = CombinationsOf(o.run_dir); !all.empty()) {
      if (o.command == "status") return ListCombinations(o, all, out);
      err << "scdinoctl: " << o.run_dir << " holds the runs of " << all.size() << " channel combinations ("
          << Joined(all) << "): name one with --combination NAME (scdinoctl status --run-dir " << o.run_dir
          << " lists them)\n";
      return kBadArguments;
    }
  }
  if (o.command == "rotate-token") return RotateToken(o, out, err);
  if (o.command == "watch") return job_gone ? LeftTheQueue(o, err) : WatchThroughRequeues(o, out, err, began_unix_ms);
  return Call(o, out, err);
}

}  // namespace scdino::ctl
