// scdino-config: check a run's config, list its paths, print the key reference (docs/config.md).
// Its body: scdino::programs::config_main::Main (programs/config.cc).
#include "programs/mains.h"

int main(int argc, char** argv) { return scdino::programs::config_main::Main(argc, argv); }
