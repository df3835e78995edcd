"""DINO's vision_transformer.py constructors (VisionTransformer, vit_tiny,
vit_small, vit_base, with their arguments and defaults) over the project's
PyTorch re-implementation of DINO's ViT in tests/model/make_parity_fixture.py,
which replays the reference DINO steps of ../shared/reference/dino-parity.
The export round trip (export_roundtrip.py) imports this where DINO's own
file is not at hand (CI has no network); with SCDINO_DINO_SOURCE set it
imports DINO's vision_transformer.py instead. The parameter names are DINO's.
"""
import os
import sys
from functools import partial

import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "model"))
import make_parity_fixture as parity  # noqa: E402


class VisionTransformer(parity.ViT):
    def __init__(self, img_size=[224], patch_size=16, in_chans=3, num_classes=0, embed_dim=768, depth=12,
                 num_heads=12, mlp_ratio=4., qkv_bias=False, qk_scale=None, drop_rate=0., attn_drop_rate=0.,
                 drop_path_rate=0., norm_layer=nn.LayerNorm, **kwargs):
        if num_classes or qk_scale is not None or drop_rate or attn_drop_rate:
            raise NotImplementedError("the re-implementation has no classifier head, qk_scale or dropout")
        super().__init__({"global_size": img_size[0], "patch_size": patch_size, "in_chans": in_chans,
                          "embed_dim": embed_dim, "depth": depth, "num_heads": num_heads, "mlp_ratio": mlp_ratio,
                          "mlp_qkv_bias": qkv_bias, "layer_norm_eps": norm_layer(1).eps})


def vit_tiny(patch_size=16, **kwargs):
    return VisionTransformer(patch_size=patch_size, embed_dim=192, depth=12, num_heads=3, mlp_ratio=4,
                             qkv_bias=True, norm_layer=partial(nn.LayerNorm, eps=1e-6), **kwargs)


def vit_small(patch_size=16, **kwargs):
    return VisionTransformer(patch_size=patch_size, embed_dim=384, depth=12, num_heads=6, mlp_ratio=4,
                             qkv_bias=True, norm_layer=partial(nn.LayerNorm, eps=1e-6), **kwargs)


def vit_base(patch_size=16, **kwargs):
    return VisionTransformer(patch_size=patch_size, embed_dim=768, depth=12, num_heads=12, mlp_ratio=4,
                             qkv_bias=True, norm_layer=partial(nn.LayerNorm, eps=1e-6), **kwargs)
