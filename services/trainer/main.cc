// scdino-trainer: DINO pretraining from a YAML config (docs/trainer.md).
// Its body: scdino::programs::trainer_main::Main (programs/trainer.cc).
#include "programs/mains.h"

int main(int argc, char** argv) { return scdino::programs::trainer_main::Main(argc, argv); }
