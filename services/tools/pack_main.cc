// scdino-pack: a packed data set and its staging (docs/data.md).
// Its body: scdino::programs::pack_main::Main (programs/pack.cc).
#include "programs/mains.h"

int main(int argc, char** argv) { return scdino::programs::pack_main::Main(argc, argv); }
