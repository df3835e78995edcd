// scdino-stats: a run's per-channel statistics (docs/data.md).
// Its body: scdino::programs::stats_main::Main (programs/stats.cc).
#include "programs/mains.h"

int main(int argc, char** argv) { return scdino::programs::stats_main::Main(argc, argv); }
