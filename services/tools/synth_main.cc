// scdino-synth: a synthetic class-folder TIFF data set of single cells.
// Its body: scdino::programs::synth_main::Main (programs/synth.cc).
#include "programs/mains.h"

int main(int argc, char** argv) { return scdino::programs::synth_main::Main(argc, argv); }
