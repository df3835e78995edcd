// One libFuzzer program per target (scripts/fuzz.sh builds them with clang's
// -fsanitize=fuzzer,address,undefined): SCDINO_FUZZ_TARGET names the target.
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return scdino::fuzz::SCDINO_FUZZ_TARGET(data, size);
}
