"""Reference models of the HyLo experiments, built from layers that HyLo and K-FAC handle.

* :class:`CNN1D` -- the MNIST-1D convolutional baseline (Greydanus, 2020: three 1-D convolutions
  of 25 channels and a linear head, ~94% test accuracy), written with ``Conv2d`` of height 1 so that
  third-party K-FAC (ASDL handles Conv2d, not Conv1d) applies to the same model.
* :func:`resnet32` -- the CIFAR ResNet-32 of He et al. (2016), 3 stages of 5 basic blocks, 16/32/64
  channels, parameter-free (zero-padded) shortcuts as in the CIFAR variant.
* :class:`UNet` -- a small U-Net (Ronneberger et al., 2015) for binary segmentation, upsampling
  with interpolation + Conv2d (no ConvTranspose2d, which the preconditioners skip).
* :class:`AutoEncoder` -- the deep autoencoder of Hinton & Salakhutdinov (Science, 2006), the
  classic test of second-order methods (Martens 2010; Martens & Grosse's K-FAC 2015): an MLP
  encoder 784-1000-500-250-30 with a linear code layer and its mirrored decoder, logits out.
* :func:`resnet50_layer_shapes` -- (name, d_in, d_out) of ResNet-50's 53 convolutions and its
  classifier, for micro-benchmarks of the inverse update.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "AutoEncoder",
    "CNN1D",
    "autoencoder_sizes",
    "DEFAULT_WIDTH",
    "resnet32",
    "ResNetCifar",
    "UNet",
    "resnet50_layer_shapes",
    "build_model",
]


class CNN1D(nn.Module):
    """MNIST-1D CNN on inputs of shape (N, 1, 1, length), written with Conv2d of height 1.

    Parameters
    ----------
    length : int
        Signal length (40 for MNIST-1D).
    channels : int
        Channels of the three convolutions (25 in the published baseline).
    classes : int
        Output classes.
    """

    def __init__(self, length: int = 40, channels: int = 25, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, (1, 5), stride=(1, 2), padding=(0, 1))
        self.conv2 = nn.Conv2d(channels, channels, (1, 3), stride=(1, 2), padding=(0, 1))
        self.conv3 = nn.Conv2d(channels, channels, (1, 3), stride=(1, 2), padding=(0, 1))
        out = length
        for k, p in ((5, 1), (3, 1), (3, 1)):
            out = (out + 2 * p - k) // 2 + 1
        self.linear = nn.Linear(channels * out, classes)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == 2:
            x = x[:, None, None, :]
        h = F.relu(self.conv1(x))
        h = F.relu(self.conv2(h))
        h = F.relu(self.conv3(h))
        return self.linear(h.flatten(1))


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.stride = stride
        self.pad = cout - cin

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        short = x
        if self.stride != 1 or self.pad:
            short = x[:, :, :: self.stride, :: self.stride]
            short = F.pad(short, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + short)


class ResNetCifar(nn.Module):
    """CIFAR ResNet with ``6 * blocks + 2`` layers (He et al., 2016, Sec. 4.2)."""

    def __init__(self, blocks: int = 5, classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        layers: list[nn.Module] = []
        cin = width
        for i, cout in enumerate((width, 2 * width, 4 * width)):
            for b in range(blocks):
                layers.append(_BasicBlock(cin, cout, 2 if (b == 0 and i > 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: Tensor) -> Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.layers(h)
        h = F.adaptive_avg_pool2d(h, 1).flatten(1)
        return self.fc(h)


def resnet32(classes: int = 10, width: int = 16) -> ResNetCifar:
    """ResNet-32 for 3 x 32 x 32 inputs (31 convolutions and a linear classifier)."""
    return ResNetCifar(blocks=5, classes=classes, width=width)


def _double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    )


class UNet(nn.Module):
    """A small U-Net: ``depth`` down/up levels, ``width * 2**k`` channels, one logit per pixel.

    Input (N, in_channels, H, W) with H and W divisible by ``2**depth``; output (N, 1, H, W).
    """

    def __init__(self, in_channels: int = 3, width: int = 8, depth: int = 3) -> None:
        super().__init__()
        chans = [width * 2**k for k in range(depth + 1)]
        self.downs = nn.ModuleList()
        cin = in_channels
        for c in chans[:-1]:
            self.downs.append(_double_conv(cin, c))
            cin = c
        self.bottom = _double_conv(chans[-2], chans[-1])
        self.ups = nn.ModuleList()
        self.reduce = nn.ModuleList()
        for k in range(depth - 1, -1, -1):
            self.reduce.append(nn.Conv2d(chans[k + 1], chans[k], 1))
            self.ups.append(_double_conv(2 * chans[k], chans[k]))
        self.head = nn.Conv2d(chans[0], 1, 1)

    def forward(self, x: Tensor) -> Tensor:
        skips = []
        h = x
        for down in self.downs:
            h = down(h)
            skips.append(h)
            h = F.max_pool2d(h, 2)
        h = self.bottom(h)
        for reduce, up, skip in zip(self.reduce, self.ups, reversed(skips), strict=True):
            h = reduce(F.interpolate(h, scale_factor=2, mode="nearest"))
            h = up(torch.cat([h, skip], dim=1))
        return self.head(h)


class AutoEncoder(nn.Module):
    """Deep MLP autoencoder: ``input -> hidden... -> code -> reversed(hidden)... -> input`` logits.

    Hinton & Salakhutdinov (2006): ``hidden = (1000, 500, 250)``, a linear 30-unit code layer,
    logistic hidden units, and the decoder the mirror image of the encoder; its output is
    trained against the input with the sigmoid cross-entropy (logits here, so the loss is
    ``binary_cross_entropy_with_logits``, summed over the pixels).  ReLU hidden units are the
    default: with logistic ones (the classic, ``activation="sigmoid"``) every optimizer here
    (SGD, Adam, K-FAC, HyLo) sat on the mean-image plateau for the 20 epochs a CPU benchmark
    can afford (``docs/hylo.md``).  Every layer is an ``nn.Linear``, which HyLo, K-FAC
    and SMW-NGD all precondition.

    Parameters
    ----------
    input_dim : int
        Pixels of a (flattened) input, 784 for 28 x 28 images.
    hidden : sequence of int
        Encoder widths before the code layer (the decoder uses them reversed).
    code : int
        Width of the (linear) code layer.
    activation : {"sigmoid", "relu"}
        Nonlinearity of every hidden layer (not of the code layer nor of the output).
    """

    def __init__(
        self,
        input_dim: int = 784,
        hidden: tuple[int, ...] = (1000, 500, 250),
        code: int = 30,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(_ACTIVATIONS)}, got {activation!r}")
        for name, v in (("input_dim", input_dim), ("code", code), *(("hidden", h) for h in hidden)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must hold integers >= 1, got {v!r}")
        self.activation = activation
        sizes = [input_dim, *hidden, code]
        self.encoder = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True)
        )
        back = sizes[::-1]
        self.decoder = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(back[:-1], back[1:], strict=True)
        )
        self.input_dim = input_dim

    def forward(self, x: Tensor) -> Tensor:
        act = _ACTIVATIONS[self.activation]
        h = x.reshape(x.shape[0], -1)
        last = len(self.encoder) - 1
        for i, layer in enumerate(self.encoder):
            h = layer(h)
            if i < last:  # the code layer is linear
                h = act(h)
        last = len(self.decoder) - 1
        for i, layer in enumerate(self.decoder):
            h = layer(h)
            if i < last:  # logits out
                h = act(h)
        return h


_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"sigmoid": torch.sigmoid, "relu": F.relu}


def autoencoder_sizes(width: int) -> tuple[tuple[int, ...], int]:
    """Encoder widths and code size for ``width`` (the first hidden layer's size): the classic
    proportions ``(w, w/2, w/4)`` and a code of ``min(30, w/4)`` (1000 -> 1000-500-250-30)."""
    hidden = (width, max(1, width // 2), max(1, width // 4))
    return hidden, max(1, min(30, width // 4))


def resnet50_layer_shapes() -> list[tuple[str, int, int]]:
    """(name, d_in, d_out) of ResNet-50's 53 Conv2d layers and its fc layer (d_in with bias).

    d_in of a k x k convolution with c input channels is c k^2 (no bias in ResNet-50's convs);
    the largest is ``layer4.*.conv2``: 3 x 3, 512 channels, d_in = 4608, d_out = 512.
    """
    shapes = [("conv1", 3 * 7 * 7, 64)]
    cin = 64
    for s, (planes, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3)), start=1):
        for b in range(blocks):
            p = f"layer{s}.{b}"
            shapes.append((f"{p}.conv1", cin, planes))
            shapes.append((f"{p}.conv2", planes * 9, planes))
            shapes.append((f"{p}.conv3", planes, planes * 4))
            if b == 0:
                shapes.append((f"{p}.downsample", cin, planes * 4))
            cin = planes * 4
    shapes.append(("fc", 2048 + 1, 1000))
    return shapes


#: each model's default width: CNN1D's channels, ResNet-32's first-stage channels, UNet's top
#: level, the autoencoder's first hidden layer
DEFAULT_WIDTH = {"cnn1d": 25, "resnet32": 16, "unet": 8, "autoencoder": 1000}


def build_model(name: str, width: int | None = None, activation: str = "relu") -> nn.Module:
    """Build a reference model by name: ``"cnn1d"``, ``"resnet32"``, ``"unet"`` or
    ``"autoencoder"`` (28 x 28 inputs; ``activation`` is its hidden units', see
    :class:`AutoEncoder`).

    ``width`` scales the channels (see :data:`DEFAULT_WIDTH`; ``None`` keeps the published
    size).  Wider layers are where HyLo's kernel (sized by the batch) beats K-FAC's factors
    (sized by the layer); ``benchmarks/hylo_width.py`` measures the crossover.
    """
    if name not in DEFAULT_WIDTH:
        raise ValueError(f"model must be one of {tuple(DEFAULT_WIDTH)}, got {name!r}")
    if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width < 1):
        raise ValueError(f"width must be an integer >= 1 (or None), got {width!r}")
    w = DEFAULT_WIDTH[name] if width is None else width
    if name == "cnn1d":
        return CNN1D(channels=w)
    if name == "resnet32":
        return resnet32(width=w)
    if name == "autoencoder":
        hidden, code = autoencoder_sizes(w)
        return AutoEncoder(784, hidden, code, activation)
    return UNet(width=w)
