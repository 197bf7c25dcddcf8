#!/usr/bin/env python3
"""Write PyTorch reference fixtures for sparrow's convolution and pooling operators.

Each case runs one torch.nn.functional op in float32 on seeded inputs, backpropagates a
seeded head gradient and stores inputs, outputs and gradients in one text file that
core/tests/conv_torch.rs reads:

    op <conv|conv_transpose|pool>
    param <name> <v1,v2,...>          (stride, padding, dilation, groups, output_padding,
                                       kernel, kind, ceil_mode, count_include_pad, global)
    tensor <name> <d1,d2,...>
    <values, space separated, %.9g: every float32 round-trips>

Tensors: x, w, b (inputs), y (output), dy (head gradient), dx, dw, db (gradients).

Usage: python scripts/conv_fixtures.py OUT_DIR   (the tests read core/tests/fixtures/conv)
"""

import os
import sys
import zlib

import torch
import torch.nn.functional as F


def write(path, op, params, tensors):
    with open(path, "w") as f:
        f.write(f"op {op}\n")
        for k, v in params.items():
            vals = v if isinstance(v, (list, tuple)) else [v]
            f.write(f"param {k} {','.join(str(int(x)) for x in vals)}\n")
        for name, t in tensors.items():
            t = t.detach().contiguous().float()
            f.write(f"tensor {name} {','.join(str(d) for d in t.shape)}\n")
            f.write(" ".join(f"{v:.9g}" for v in t.flatten().tolist()) + "\n")


def conv_case(out, name, x_shape, w_shape, bias, transpose=False, **kw):
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    x = torch.randn(*x_shape, generator=g).requires_grad_()
    w = (torch.randn(*w_shape, generator=g) * 0.5).requires_grad_()
    b = torch.randn(w_shape[1] * kw.get("groups", 1) if transpose else w_shape[0],
                    generator=g).requires_grad_() if bias else None
    nd = len(x_shape) - 2
    if transpose:
        fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[nd]
    else:
        fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    y = fn(x, w, b, **kw)
    dy = torch.randn(*y.shape, generator=g)
    y.backward(dy)
    tensors = {"x": x, "w": w}
    if b is not None:
        tensors["b"] = b
    tensors.update({"y": y, "dy": dy, "dx": x.grad, "dw": w.grad})
    if b is not None:
        tensors["db"] = b.grad
    write(os.path.join(out, name + ".txt"), "conv_transpose" if transpose else "conv", kw, tensors)


def pool_case(out, name, x_shape, kind, kernel=None, stride=None, padding=0, ceil_mode=False,
              count_include_pad=True, global_=False):
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    x = torch.randn(*x_shape, generator=g).requires_grad_()
    nd = len(x_shape) - 2
    if global_:
        y = x.amax(dim=tuple(range(2, 2 + nd)), keepdim=True) if kind == "max" else \
            x.mean(dim=tuple(range(2, 2 + nd)), keepdim=True)
    elif kind == "max":
        fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]
        y = fn(x, kernel, stride, padding, ceil_mode=ceil_mode)
    else:
        fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nd]
        y = fn(x, kernel, stride, padding, ceil_mode=ceil_mode,
               count_include_pad=count_include_pad)
    dy = torch.randn(*y.shape, generator=g)
    y.backward(dy)
    params = {"kind": 0 if kind == "max" else 1, "ceil_mode": int(ceil_mode),
              "count_include_pad": int(count_include_pad), "global": int(global_)}
    if not global_:
        params["kernel"] = kernel if isinstance(kernel, (list, tuple)) else [kernel]
        params["stride"] = stride if isinstance(stride, (list, tuple)) else [stride]
        params["padding"] = padding if isinstance(padding, (list, tuple)) else [padding]
    write(os.path.join(out, name + ".txt"), "pool", params,
          {"x": x, "y": y, "dy": dy, "dx": x.grad})


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    conv_case(out, "conv1d_stride_dilation", (3, 4, 17), (5, 4, 3), True,
              stride=2, padding=2, dilation=2)
    conv_case(out, "conv2d_resnet", (2, 8, 9, 9), (8, 8, 3, 3), True, stride=1, padding=1)
    conv_case(out, "conv2d_groups_strided", (2, 6, 10, 9), (9, 2, 3, 2), True,
              stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=3)
    conv_case(out, "conv2d_depthwise", (2, 4, 7, 7), (8, 1, 3, 3), False,
              stride=2, padding=1, groups=4)
    conv_case(out, "conv2d_pointwise_batch1", (1, 6, 5, 5), (7, 6, 1, 1), True)
    conv_case(out, "conv3d", (2, 3, 5, 6, 4), (4, 3, 2, 3, 2), True,
              stride=(1, 2, 1), padding=(1, 1, 0))
    conv_case(out, "conv_transpose2d", (2, 4, 5, 4), (4, 3, 3, 3), True, transpose=True,
              stride=2, padding=1, output_padding=1)
    conv_case(out, "conv_transpose2d_groups", (2, 4, 4, 4), (4, 2, 2, 3), True, transpose=True,
              stride=(2, 1), padding=(0, 1), dilation=(1, 2), groups=2)
    conv_case(out, "conv_transpose1d", (2, 3, 6), (3, 2, 4), False, transpose=True,
              stride=3, padding=1, output_padding=2)
    conv_case(out, "conv_transpose3d", (1, 2, 3, 3, 2), (2, 3, 2, 2, 2), True, transpose=True,
              stride=2)
    pool_case(out, "maxpool2d_ceil_pad", (2, 3, 9, 8), "max", kernel=3, stride=2, padding=1,
              ceil_mode=True)
    pool_case(out, "maxpool1d", (2, 3, 11), "max", kernel=2, stride=2)
    # ceil_mode's last window would start in the right padding: PyTorch drops it (5, not 6).
    pool_case(out, "maxpool1d_ceil_drop", (2, 2, 9), "max", kernel=2, stride=2, padding=1,
              ceil_mode=True)
    pool_case(out, "maxpool3d", (1, 2, 5, 4, 6), "max", kernel=(2, 2, 3), stride=(2, 1, 2))
    pool_case(out, "avgpool2d_include_pad_ceil", (2, 3, 8, 7), "avg", kernel=3, stride=2,
              padding=1, ceil_mode=True, count_include_pad=True)
    pool_case(out, "avgpool2d_exclude_pad", (2, 3, 8, 7), "avg", kernel=(3, 2), stride=(2, 2),
              padding=(1, 1), count_include_pad=False)
    pool_case(out, "avgpool1d_ceil_exclude", (2, 2, 10), "avg", kernel=3, stride=2, padding=1,
              ceil_mode=True, count_include_pad=False)
    pool_case(out, "avgpool3d", (1, 2, 4, 5, 4), "avg", kernel=2, stride=2, padding=1)
    pool_case(out, "globalmax2d", (2, 3, 5, 6), "max", global_=True)
    pool_case(out, "globalavg2d", (2, 3, 5, 6), "avg", global_=True)
    pool_case(out, "globalavg1d", (2, 3, 7), "avg", global_=True)
    # 3x3 stride-1 cases for the Winograd path (appended last so the cases above keep their
    # random draws): odd sizes, padding 0 and 2, batch 1, channel counts of no block multiple;
    # a stride-1 transposed convolution runs its forward through the Winograd data gradient.
    conv_case(out, "conv2d_winograd_odd_pad0", (1, 5, 7, 10), (9, 5, 3, 3), True, padding=0)
    conv_case(out, "conv2d_winograd_pad2", (3, 3, 5, 4), (2, 3, 3, 3), False, padding=(2, 1))
    conv_case(out, "conv_transpose2d_winograd", (2, 3, 6, 5), (3, 4, 3, 3), True,
              transpose=True, padding=1)


if __name__ == "__main__":
    main()
