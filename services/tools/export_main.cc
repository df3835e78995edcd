// scdino-export: a checkpoint's backbone for PyTorch users (docs/eval.md).
// Its body: scdino::programs::export_main::Main (programs/export.cc).
#include "programs/mains.h"

int main(int argc, char** argv) { return scdino::programs::export_main::Main(argc, argv); }
