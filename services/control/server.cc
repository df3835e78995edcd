#include "control/server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <mutex>
#include <tuple>

#include "common/files.h"
#include "control/reflection.h"
#include "control/token.h"
#include "scdino/v1/control.grpc.pb.h"

namespace scdino::control {

namespace v1 = ::scdino::v1;

grpc::Status ToGrpcStatus(const Status& s) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (s.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case StatusCode::kAlreadyExists: code = grpc::StatusCode::ALREADY_EXISTS; break;
    case StatusCode::kFailedPrecondition: code = grpc::StatusCode::FAILED_PRECONDITION; break;
    case StatusCode::kIOError: code = grpc::StatusCode::INTERNAL; break;
    case StatusCode::kDataLoss: code = grpc::StatusCode::DATA_LOSS; break;
    case StatusCode::kUnavailable: code = grpc::StatusCode::UNAVAILABLE; break;
    case StatusCode::kAborted: code = grpc::StatusCode::ABORTED; break;
    case StatusCode::kInternal: code = grpc::StatusCode::INTERNAL; break;
    case StatusCode::kDiverged: code = grpc::StatusCode::ABORTED; break;
    case StatusCode::kNoSpace: code = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case StatusCode::kPeerLost: code = grpc::StatusCode::UNAVAILABLE; break;
  }
  return grpc::Status(code, s.message());
}

namespace {

v1::RunState ToProto(RunState s) {
  switch (s) {
    case RunState::kStarting: return v1::RUN_STATE_STARTING;
    case RunState::kRunning: return v1::RUN_STATE_RUNNING;
    case RunState::kPausing: return v1::RUN_STATE_PAUSING;
    case RunState::kPaused: return v1::RUN_STATE_PAUSED;
    case RunState::kCheckpointing: return v1::RUN_STATE_CHECKPOINTING;
    case RunState::kStopping: return v1::RUN_STATE_STOPPING;
    case RunState::kCompleted: return v1::RUN_STATE_COMPLETED;
    case RunState::kFailed: return v1::RUN_STATE_FAILED;
    case RunState::kStopped: return v1::RUN_STATE_STOPPED;
  }
  return v1::RUN_STATE_UNSPECIFIED;
}

v1::ServiceKind KindOf(const std::string& service) {
  if (service == "trainer") return v1::SERVICE_KIND_TRAINER;
  if (service == "features") return v1::SERVICE_KIND_FEATURES;
  if (service == "eval") return v1::SERVICE_KIND_EVAL;
  return v1::SERVICE_KIND_UNSPECIFIED;
}

}  // namespace

// Both generated services over one RunControl; the shared token check.
class ControlServer::Impl {
 public:
  Impl(const ServerOptions& o, RunControl* control, std::shared_ptr<std::atomic<int64_t>> refused)
      : o_(o),
        control_(control),
        refused_(std::move(refused)),
        control_service_(this),
        trainer_service_(this),
        reflection_service_(ServiceNames(o.service),
                            [this](grpc::ServerContext* ctx) { return Authorize(ctx, "ServerReflectionInfo"); }) {}

  // What reflection lists: the services this server registers.
  static std::vector<std::string> ServiceNames(const std::string& service) {
    std::vector<std::string> names{"scdino.v1.Control"};
    if (service == "trainer") names.push_back("scdino.v1.Trainer");
    names.push_back("grpc.health.v1.Health");
    names.push_back("grpc.reflection.v1alpha.ServerReflection");
    return names;
  }

  void Log(const std::string& line) {
    if (o_.log) {
      o_.log(line);
    } else {
      std::cerr << line << "\n";
    }
  }

  // At most refused_log_burst lines per window; the count of the others is
  // logged with the first line of a later window.
  void LogRefused(const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - window_start_ >= o_.refused_log_window) {
      if (suppressed_ > 0) {
        Log("scdino-" + o_.service + ": control: " + std::to_string(suppressed_) +
            " more refused calls were not logged");
      }
      window_start_ = now;
      logged_in_window_ = 0;
      suppressed_ = 0;
    }
    if (logged_in_window_ < o_.refused_log_burst) {
      ++logged_in_window_;
      Log(line + (logged_in_window_ == o_.refused_log_burst ? " (further refusals are only counted until the window ends)" : ""));
    } else {
      ++suppressed_;
    }
  }

  grpc::Status Authorize(grpc::ServerContext* ctx, const char* method) {
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    const char* why = "no authorization metadata";
    if (it != md.end()) {
      const std::string value(it->second.data(), it->second.size());
      const std::string prefix = "Bearer ";
      if (value.rfind(prefix, 0) == 0) {
        const std::string presented = value.substr(prefix.size());
        // The file is looked at on every call (one stat): after a rotation
        // the previous token is refused at once, even by a caller who never
        // learnt the new one.
        ReloadToken();
        const std::string token = Token();
        if (token.empty()) {
          why = "the run's token file is missing or unusable";
        } else if (TokensEqual(presented, token)) {
          return grpc::Status::OK;
        } else {
          why = "wrong token";
        }
      } else {
        why = "wrong token";
      }
    }
    refused_->fetch_add(1);
    if (o_.on_unauthenticated) o_.on_unauthenticated();
    LogRefused("scdino-" + o_.service + ": control: refused " + method + " from " + ctx->peer() + ": " + why);
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing or wrong token: send 'authorization: Bearer <token>' with the content of the run's "
                        "control.token");
  }

  std::string Token() {
    std::lock_guard<std::mutex> lock(token_mu_);
    return token_;
  }

  // Reads the token file again when it changed since it was last read
  // (another inode, size or modification time: an atomic replacement). A
  // token file that is gone or cannot be read (removed, replaced by a
  // symlink or another user's file, made readable by others) leaves no
  // valid token: every call is refused until a good file is back, and the
  // refusal is logged once, when it starts.
  void ReloadToken() {
    if (o_.token_file.empty()) return;
    struct stat st {};
    std::lock_guard<std::mutex> lock(token_mu_);
    if (::lstat(o_.token_file.c_str(), &st) != 0) {
      Unusable(o_.token_file + ": " + std::strerror(errno));
      return;
    }
    const auto stamp = std::make_tuple(st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    if (stamp == token_stamp_ && !token_.empty()) return;
    auto fresh = ReadToken(o_.token_file);
    if (!fresh.ok()) {
      Unusable(fresh.status().message());
      return;
    }
    token_stamp_ = stamp;
    if (*fresh == token_) return;
    const bool was_unusable = token_.empty();
    token_ = *fresh;
    Log("scdino-" + o_.service + ": control: " +
        (was_unusable ? "the run's token file is readable again (" + o_.token_file + "); calls with its token are served"
                      : "the run's token was replaced (" + o_.token_file + "); the previous one is refused from now on"));
  }

  // Called under token_mu_.
  void Unusable(const std::string& why) {
    token_stamp_ = {};
    if (token_.empty()) return;  // said already
    token_.clear();
    Log("scdino-" + o_.service + ": control: the run's token file cannot be used (" + why +
        "): every call is refused until a valid token file (0600, yours) is back; scdinoctl rotate-token --run-dir " +
        o_.run_dir + " writes one");
  }

  void Fill(const RunStatus& s, v1::Status* out) const {
    out->set_service(KindOf(o_.service));
    out->set_state(ToProto(s.state));
    out->set_error(s.error);
    out->set_revision(s.revision);
    auto* p = out->mutable_progress();
    p->set_epoch(s.epoch);
    p->set_epochs(s.epochs);
    p->set_iteration(s.iteration);
    p->set_iterations(s.iterations);
    p->set_items_done(s.items_done);
    p->set_items_total(s.items_total);
    p->set_items_per_second(s.items_per_second);
    p->set_eta_seconds(s.eta_seconds);
    p->set_stage(s.stage);
    p->set_stage_unit(s.stage_unit);
    p->set_stage_done(s.stage_done);
    p->set_stage_total(s.stage_total);
    p->set_stage_per_second(s.stage_per_second);
    p->set_stage_eta_seconds(s.stage_eta_seconds);
    p->set_stage_finished(s.stage_finished);
    if (o_.service == "trainer") {
      auto* t = out->mutable_trainer();
      t->set_loss(s.trainer.loss);
      t->set_learning_rate(s.trainer.learning_rate);
      t->set_weight_decay(s.trainer.weight_decay);
      t->set_teacher_temperature(s.trainer.teacher_temperature);
      t->set_teacher_momentum(s.trainer.teacher_momentum);
      t->set_last_checkpoint(s.trainer.last_checkpoint);
      t->set_last_checkpoint_unix_ms(s.trainer.last_checkpoint_unix_ms);
      t->set_nonfinite_steps(s.trainer.nonfinite_steps);
      auto* h = t->mutable_health();
      h->set_teacher_entropy(s.trainer.teacher_entropy);
      h->set_teacher_entropy_ratio(s.trainer.teacher_entropy_ratio);
      h->set_student_teacher_kl(s.trainer.student_teacher_kl);
      h->set_teacher_batch_entropy(s.trainer.teacher_batch_entropy);
      h->set_center_norm(s.trainer.center_norm);
      h->set_backbone_cls_std(s.trainer.backbone_cls_std);
      h->set_collapse(s.trainer.collapse);
      auto* l = t->mutable_learning();
      l->set_epoch(s.trainer.learning_check_epoch);
      l->set_knn_top1(s.trainer.knn_top1);
      l->set_random_knn_top1(s.trainer.knn_random_top1);
      l->set_pixels_knn_top1(s.trainer.knn_pixels_top1);
      l->set_margin(s.trainer.learning_margin);
      l->set_verdict(s.trainer.learning_verdict);
      auto* r = t->mutable_recoveries();
      r->set_count(s.trainer.recoveries);
      r->set_max(s.trainer.max_recoveries);
      r->set_last(s.trainer.last_recovery);
    }
    auto* r = out->mutable_run();
    r->set_run_id(o_.run_id);
    r->set_run_dir(o_.run_dir);
    r->set_slurm_job_id(o_.slurm_job_id);
    r->set_slurm_step_id(o_.slurm_step_id);
    r->set_world_size(o_.world_size);
    r->set_version(SCDINO_VERSION);
    r->set_host(o_.host);
    r->set_pid(::getpid());
    r->set_start_unix_ms(o_.start_unix_ms);
  }

  class ControlService final : public v1::Control::Service {
   public:
    explicit ControlService(Impl* impl) : impl_(impl) {}
    grpc::Status GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest*, v1::Status* out) override {
      if (auto a = impl_->Authorize(ctx, "GetStatus"); !a.ok()) return a;
      impl_->Fill(impl_->control_->Snapshot(), out);
      return grpc::Status::OK;
    }
    grpc::Status WatchStatus(grpc::ServerContext* ctx, const v1::WatchStatusRequest* req,
                             grpc::ServerWriter<v1::Status>* writer) override {
      if (auto a = impl_->Authorize(ctx, "WatchStatus"); !a.ok()) return a;
      if (req->interval_ms() < 0) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "interval_ms must be >= 0");
      }
      // Each stream holds one of the server's threads while it lasts: past
      // the cap, refused at once, so that a flood of idle streams leaves
      // threads for the short calls (status, pause, stop).
      struct Slot {
        std::atomic<int>& n;
        ~Slot() { --n; }
      } slot{impl_->watches_};
      if (++impl_->watches_ > kMaxWatchStreams) {
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            "too many WatchStatus streams on this process (at most " + std::to_string(kMaxWatchStreams) +
                                "): close some, or poll GetStatus");
      }
      // Wake at least every 200 ms to notice a cancelled call or a shutdown.
      const auto tick = std::chrono::milliseconds(200);
      const auto interval = std::chrono::milliseconds(req->interval_ms());
      RunStatus s = impl_->control_->Snapshot();
      auto last_sent = std::chrono::steady_clock::now();
      int64_t sent_revision = -1;
      while (!ctx->IsCancelled() && !impl_->shutting_down_.load()) {
        if (s.revision != sent_revision ||
            (interval.count() > 0 && std::chrono::steady_clock::now() - last_sent >= interval)) {
          v1::Status msg;
          impl_->Fill(s, &msg);
          if (!writer->Write(msg)) break;
          sent_revision = s.revision;
          last_sent = std::chrono::steady_clock::now();
          if (IsFinal(s.state)) break;
        }
        auto wait = tick;
        if (interval.count() > 0) wait = std::min(tick, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                            interval - (std::chrono::steady_clock::now() - last_sent)));
        s = impl_->control_->WaitForChange(sent_revision, std::max(wait, std::chrono::milliseconds(1)));
      }
      return grpc::Status::OK;
    }
    grpc::Status Pause(grpc::ServerContext* ctx, const v1::PauseRequest*, v1::ControlReply* out) override {
      return Request(ctx, "Pause", &RunControl::Pause, out);
    }
    grpc::Status Resume(grpc::ServerContext* ctx, const v1::ResumeRequest*, v1::ControlReply* out) override {
      return Request(ctx, "Resume", &RunControl::Resume, out);
    }
    grpc::Status Stop(grpc::ServerContext* ctx, const v1::StopRequest*, v1::ControlReply* out) override {
      return Request(ctx, "Stop", &RunControl::Stop, out);
    }

   private:
    grpc::Status Request(grpc::ServerContext* ctx, const char* name, Status (RunControl::*fn)(),
                         v1::ControlReply* out) {
      if (auto a = impl_->Authorize(ctx, name); !a.ok()) return a;
      if (auto s = (impl_->control_->*fn)(); !s.ok()) return ToGrpcStatus(s);
      impl_->Log("scdino-" + impl_->o_.service + ": control: " + name + " from " + ctx->peer());
      out->set_state(ToProto(impl_->control_->Snapshot().state));
      return grpc::Status::OK;
    }
    Impl* impl_;
  };

  class TrainerService final : public v1::Trainer::Service {
   public:
    explicit TrainerService(Impl* impl) : impl_(impl) {}
    grpc::Status SaveCheckpoint(grpc::ServerContext* ctx, const v1::SaveCheckpointRequest*,
                                v1::SaveCheckpointReply* out) override {
      if (auto a = impl_->Authorize(ctx, "SaveCheckpoint"); !a.ok()) return a;
      auto f = impl_->control_->RequestCheckpoint();
      if (!f.ok()) return ToGrpcStatus(f.status());
      // The loop answers at its next step boundary; give up with the caller.
      while (f->wait_for(std::chrono::milliseconds(200)) != std::future_status::ready) {
        if (ctx->IsCancelled() || impl_->shutting_down_.load()) {
          return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled before the checkpoint was written");
        }
      }
      auto r = f->get();
      if (!r.ok()) return ToGrpcStatus(r.status());
      out->set_path(r->path);
      out->set_iteration(r->iteration);
      return grpc::Status::OK;
    }
    grpc::Status ListCheckpoints(grpc::ServerContext* ctx, const v1::ListCheckpointsRequest*,
                                 v1::ListCheckpointsReply* out) override {
      if (auto a = impl_->Authorize(ctx, "ListCheckpoints"); !a.ok()) return a;
      for (const auto& e : ListCheckpointFiles(impl_->o_.run_dir)) {
        auto* c = out->add_checkpoints();
        c->set_path(e.path);
        c->set_iteration(e.iteration);
        c->set_epoch(e.epoch);
        c->set_size_bytes(e.size_bytes);
        c->set_modified_unix_ms(e.modified_unix_ms);
      }
      return grpc::Status::OK;
    }

   private:
    Impl* impl_;
  };

  ServerOptions o_;
  std::mutex token_mu_;
  std::string token_ = o_.token;
  std::tuple<ino_t, off_t, time_t, long> token_stamp_{};
  RunControl* control_;
  std::shared_ptr<std::atomic<int64_t>> refused_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<int> watches_{0};
  std::mutex log_mu_;
  std::chrono::steady_clock::time_point window_start_ = std::chrono::steady_clock::now();
  int logged_in_window_ = 0;
  int64_t suppressed_ = 0;
  ControlService control_service_;
  TrainerService trainer_service_;
  ReflectionService reflection_service_;
};

StatusOr<std::unique_ptr<ControlServer>> ControlServer::Start(ServerOptions options, RunControl* control) {
  if (options.token.empty()) return Status::InvalidArgument("control server: a token is required");
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return Status::InvalidArgument("control TLS needs both a certificate and a key file (tls_cert_file, tls_key_file)");
  }
  std::unique_ptr<ControlServer> server(new ControlServer());
  server->options_ = options;
  server->impl_ = std::make_unique<Impl>(options, control, server->refused_);

  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!options.tls_cert_file.empty()) {
    auto cert = ReadFile(options.tls_cert_file);
    if (!cert.ok()) return cert.status();
    auto key = ReadFile(options.tls_key_file);
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default, which would let two runs share a
  // fixed port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Bounded: the synchronous server gives each call a thread, so the
  // threads are capped (a call past the cap is refused RESOURCE_EXHAUSTED
  // by gRPC, never a thread the process cannot make), as are one
  // connection's concurrent streams; idle peers are found by keepalive
  // pings, and clients' pings (scdinoctl's, the follower's) are allowed.
  grpc::ResourceQuota quota("scdino-control");
  quota.SetMaxThreads(kMaxServerThreads);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxStreamsPerConnection);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddListeningPort(options.listen_address, creds, &server->port_);
  builder.RegisterService(&server->impl_->control_service_);
  if (options.service == "trainer") builder.RegisterService(&server->impl_->trainer_service_);
  builder.RegisterService(&server->impl_->reflection_service_);
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0) {
    return Status::Unavailable("control server: cannot listen on " + options.listen_address +
                               " (address in use or not an address of this host?)");
  }
  auto* health = server->server_->GetHealthCheckService();
  health->SetServingStatus("", true);
  health->SetServingStatus("scdino.v1.Control", true);
  if (options.service == "trainer") health->SetServingStatus("scdino.v1.Trainer", true);
  return server;
}

void ControlServer::StopServing() {
  if (!server_) return;
  // Every service NOT_SERVING, and no later change.
  if (auto* health = server_->GetHealthCheckService()) health->Shutdown();
}

void ControlServer::Shutdown() {
  if (!server_) return;
  StopServing();
  impl_->shutting_down_.store(true);
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  server_.reset();
}

ControlServer::~ControlServer() { Shutdown(); }

}  // namespace scdino::control
