// scdinoctl: status, watch, pause, resume, stop, checkpoint and checkpoints
// of a running scdino service, through its control API (docs/control.md).
// The logic is ctl/ctl.h's.
#include <iostream>

#include "ctl/ctl.h"

int main(int argc, char** argv) {
  scdino::ctl::Options o;
  if (auto code = scdino::ctl::ParseCommandLine(argc, argv, &o, std::cout, std::cerr)) return *code;
  return scdino::ctl::Run(o, std::cout, std::cerr);
}
