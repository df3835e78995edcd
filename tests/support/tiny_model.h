// The DINO model the model, precision and distributed tests step many times
// a second: a 2-block ViT of width 16 on 16 px crops, a small head.
#pragma once

#include "model/dino.h"

namespace scdino::testing {

inline model::DinoOptions TinyDino(int64_t channels = 2) {
  model::DinoOptions o;
  o.vit = model::VitOptions().in_chans(channels).patch_size(8).img_size(16).embed_dim(16).depth(2).num_heads(2);
  o.out_dim = 32;
  o.head_hidden_dim = 24;
  o.head_bottleneck_dim = 8;
  o.local_crops_number = 2;
  return o;
}

}  // namespace scdino::testing
