// scdino-eval: weighted kNN, per-class metrics and plots of a run's features (docs/eval.md).
// Its body: scdino::programs::eval_main::Main (programs/eval.cc).
#include "programs/mains.h"

int main(int argc, char** argv) { return scdino::programs::eval_main::Main(argc, argv); }
