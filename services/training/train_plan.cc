#include "training/train_plan.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace scdino::training {
namespace {

const std::string kHyper = "train_scDINO.hyperparameters.";
const std::string kCentering = "scdino.teacher_centering";

// As the config would write it (what a checkpoint records).
std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The numeric settings a recovery edits: where each lives in the plan.
using Field = double* (*)(TrainPlan&);
const std::map<std::string, Field>& NumericFields() {
  static const std::map<std::string, Field> fields = {
      {kHyper + "lr", [](TrainPlan& p) { return &p.schedule.lr; }},
      {kHyper + "momentum_teacher", [](TrainPlan& p) { return &p.schedule.momentum_teacher; }},
      {kHyper + "teacher_temp", [](TrainPlan& p) { return &p.dino.teacher_temp; }},
      {kHyper + "warmup_teacher_temp", [](TrainPlan& p) { return &p.dino.warmup_teacher_temp; }},
      {"scdino.koleo_loss_weight", [](TrainPlan& p) { return &p.dino.koleo_loss_weight; }},
  };
  return fields;
}

Status ApplyOne(TrainPlan& p, const SettingChange& c, const std::string& what) {
  const auto bad = [&](const std::string& expected) {
    return Status::InvalidArgument(what + ": recovery setting " + c.key + ": expected " + expected + ", got '" +
                                   c.value + "'");
  };
  if (c.key == kCentering) {
    if (c.value == "center") {
      p.dino.centering = model::TeacherCentering::kCenter;
    } else if (c.value == "sinkhorn_knopp") {
      p.dino.centering = model::TeacherCentering::kSinkhornKnopp;
    } else {
      return bad("center or sinkhorn_knopp");
    }
    return Status::Ok();
  }
  const auto field = NumericFields().find(c.key);
  if (field == NumericFields().end()) {
    std::string keys = kCentering;
    for (const auto& [key, unused] : NumericFields()) keys += ", " + key;
    return Status::InvalidArgument(what + ": recovery setting " + c.key + " is not one a recovery changes (" + keys +
                                   ")");
  }
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(c.value.c_str(), &end);
  if (c.value.empty() || *end != '\0' || errno != 0 || !std::isfinite(v) || v < 0) {
    return bad("a finite number, at least 0");
  }
  *field->second(p) = v;
  return Status::Ok();
}

}  // namespace

std::vector<SettingChange> SaferSettings(const TrainPlan& plan, const std::string& verdict) {
  const auto& d = plan.dino;
  const auto& s = plan.schedule;
  std::vector<SettingChange> r;
  r.push_back({kHyper + "lr", Number(s.lr * 0.5), "half the peak learning rate (was " + Number(s.lr) + ")"});
  r.push_back({kHyper + "momentum_teacher", Number(1.0 - (1.0 - s.momentum_teacher) * 0.5),
               "a teacher half as fast (was " + Number(s.momentum_teacher) + ")"});
  const double koleo = std::min(1.0, std::max(0.1, 2.0 * d.koleo_loss_weight));
  r.push_back({"scdino.koleo_loss_weight", Number(koleo),
               "more KoLeo to spread the features (was " + Number(d.koleo_loss_weight) + ")"});
  if (verdict == "onehot_collapse") {
    if (d.centering != model::TeacherCentering::kSinkhornKnopp) {
      r.push_back({kCentering, "sinkhorn_knopp", "equipartition rules a one-hot teacher out"});
    } else {
      r.push_back({kHyper + "teacher_temp", Number(std::min(0.07, d.teacher_temp * 2)),
                   "a softer teacher (was " + Number(d.teacher_temp) + ")"});
      r.push_back({kHyper + "warmup_teacher_temp", Number(std::min(0.07, d.warmup_teacher_temp * 2)), "the same"});
    }
  } else {
    r.push_back({kHyper + "teacher_temp", Number(std::max(0.0025, d.teacher_temp * 0.5)),
                 "a sharper teacher: image-specific answers (was " + Number(d.teacher_temp) + ")"});
    r.push_back({kHyper + "warmup_teacher_temp", Number(std::max(0.0025, d.warmup_teacher_temp * 0.5)), "the same"});
  }
  return r;
}

Status ApplySettings(TrainPlan& plan, const std::vector<SettingChange>& changes, const std::string& what) {
  TrainPlan edited = plan;
  for (const auto& c : changes) {
    if (auto s = ApplyOne(edited, c, what); !s.ok()) return s;
  }
  plan = std::move(edited);
  return Status::Ok();
}

}  // namespace scdino::training
