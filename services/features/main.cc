// scdino-features: the CLS features of a run's images for its checkpoints (docs/features.md).
// Its body: scdino::programs::features_main::Main (programs/features.cc).
#include "programs/mains.h"

int main(int argc, char** argv) { return scdino::programs::features_main::Main(argc, argv); }
