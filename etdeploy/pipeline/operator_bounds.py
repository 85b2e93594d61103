"""What float32 allows one operator to be off by, given exactly the inputs it
was handed: a bound per element, by the operator's kind.

- elementwise arithmetic and data movement (add, mul, div, relu, a view, a
  copy): one rounding of the result, so an ULP or two of each value;
- a function of one value (exp, tanh, gelu, sqrt...): a few ULPs of the
  result, plus what rounding its argument once costs (|f'(x)| |x| epsilon:
  the argument reduction of exp, log near 1), or as far off as eager
  PyTorch's own float32 kernel is, a few times over (an approximation);
- a sum of n products or values (linear, matmul, conv, sum, mean): any
  summation order is within n epsilon of the sum of the magnitudes, the
  classic forward error bound gamma_n |A| |x| (Higham, Accuracy and Stability
  of Numerical Algorithms, 2nd ed., sections 3.1 and 4.2; read 2026-12-04), so
  the bound is the operator evaluated on the absolute values of its inputs;
- normalisations (layer_norm, group_norm, softmax, attention): the same
  summation bound for their reductions, carried through the subtraction of the
  mean or the maximum they make (a stable two-pass layer_norm over values whose
  mean is m times their spread is off by about n epsilon m);
- anything else: n epsilon of its magnitude, n the elements read per element
  written.

Values on a quantization grid are judged in steps of the grid elsewhere
(etdeploy.pipeline.operator_error), not here. Imported only where torch is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

FLOAT32_EPS = float(np.finfo(np.float32).eps)
# The smallest normal float32: an absolute floor, so an exact zero is no error.
_TINY = float(np.finfo(np.float32).tiny)
# ULPs of the result allowed on top of what each kind's reductions allow.
_ULPS = 2.0
# A function's implementation (a polynomial after range reduction) may be a few
# ULPs off where the libm of eager PyTorch is within one.
_FUNCTION_ULPS = 4.0
# A function's device kernel may be this many times as far off as eager's float32.
_EAGER_SLACK = 4.0

ELEMENTWISE = frozenset((
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "relu", "relu6", "hardtanh", "clamp",
    "clamp_min", "clamp_max", "maximum", "minimum", "where", "masked_fill", "max_pool1d",
    "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "amax", "amin", "max", "min",
    "leaky_relu", "sign", "floor", "ceil", "round", "trunc", "square", "fmod", "remainder",
    "lerp", "addcmul", "view", "reshape", "_unsafe_view", "permute", "transpose", "t", "squeeze",
    "unsqueeze", "expand", "expand_as", "slice", "select", "cat", "concat", "stack", "flatten",
    "unflatten", "clone", "contiguous", "dropout", "alias", "split", "split_with_sizes", "chunk",
    "unbind", "pad", "constant_pad_nd", "index", "index_select", "gather", "repeat", "flip",
    "roll", "_to_copy", "to", "type_as", "detach", "lift_fresh_copy", "narrow", "movedim",
    "unfold", "pixel_shuffle", "pixel_unshuffle", "upsample_nearest2d", "embedding", "view_copy",
    "permute_copy", "squeeze_copy", "unsqueeze_copy", "expand_copy", "slice_copy", "select_copy",
    "clone_dim_order", "_clone_dim_order", "zeros_like", "ones_like", "full_like", "new_zeros",
    "new_ones",
))  # fmt: skip
FUNCTIONS = frozenset((
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "tanh", "sigmoid", "gelu", "silu",
    "elu", "selu", "celu", "softplus", "mish", "sqrt", "rsqrt", "reciprocal", "pow", "sin", "cos",
    "tan", "atan", "asin", "acos", "erf", "hardswish", "hardsigmoid", "logit", "sinh", "cosh",
    "asinh", "acosh", "atanh",
))  # fmt: skip
SUMS = frozenset((
    "linear", "addmm", "mm", "bmm", "matmul", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot",
    "einsum", "tensordot", "conv1d", "conv2d", "conv3d", "convolution", "_convolution",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "sum", "mean", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "cumsum",
))  # fmt: skip


@dataclass(frozen=True)
class Bound:
    """Per element of the result, what float32 allows it to be off by."""

    kind: str  # elementwise | function | sum | normalization | other
    n: int  # the values a result element is reduced from (1: elementwise)
    allowed: torch.Tensor  # float64, the result's shape


class Operator(Protocol):
    """An operator of the graph (an OpOverload, or a Python callable), as called."""

    def __call__(self, *args: object, **kwargs: object) -> torch.Tensor: ...


# An operator's arguments as the graph hands them over: tensors, numbers, lists of them.
Args = Sequence[object]
Kwargs = Mapping[str, object]


def _tensor(args: Args, index: int) -> torch.Tensor:
    """args[index] as a tensor; a TypeError (an overload this does not know) otherwise."""
    value = args[index]
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"argument {index} is a {type(value).__name__}, not a tensor")
    return value


def _number(value: object) -> float:
    if isinstance(value, torch.Tensor) or not isinstance(value, (int, float)):
        raise TypeError(f"{type(value).__name__} is not a number")
    return float(value)


def _sizes(value: object) -> list[int]:
    """A list of sizes (layer_norm's normalized_shape)."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{type(value).__name__} is not a list of sizes")
    sizes = []
    for size in value:
        if not isinstance(size, int):
            raise TypeError(f"{type(size).__name__} is not a size")
        sizes.append(size)
    return sizes


def op_name(target: object) -> str:
    """aten.layer_norm.default -> layer_norm (aten.native_group_norm.default -> ...)."""
    parts = str(target).split(".")
    return parts[1] if len(parts) >= 3 else parts[-1]


def bound_for(target: Operator, args: Args, kwargs: Kwargs, result: torch.Tensor) -> Bound:
    """The bound of `target(*args, **kwargs) == result` (float64 inputs and result)."""
    name = op_name(target).removesuffix("_")
    y = result.detach().abs().to(torch.float64)
    special = _NORMALIZATIONS.get(name)
    try:
        if special is not None:
            n, scale = special(args, kwargs, result)
            return Bound("normalization", n, _allowed(y, n, scale))
        if name in ELEMENTWISE:
            return Bound("elementwise", 1, _ULPS * FLOAT32_EPS * y + _TINY)
        if name in FUNCTIONS:
            scale = y + _argument_sensitivity(target, args, kwargs)
            allowed = (_FUNCTION_ULPS * FLOAT32_EPS + _eager_float32_error(target, args, kwargs,
                       result, scale)) * scale + _TINY  # fmt: skip
            return Bound("function", 1, allowed)
        if name in SUMS:
            n = _summed(name, args, result)
            magnitudes = target(*_absolute(args), **_absolute_kwargs(kwargs)).abs()
            return Bound("sum", n, _allowed(y, n, magnitudes.to(torch.float64)))
    except (RuntimeError, TypeError, ValueError, IndexError):
        pass  # an overload this does not know: the generic bound below
    n = _read_per_written(args, result)
    return Bound("other", n, _allowed(y, n, y))


def _eager_float32_error(
    target: Operator, args: Args, kwargs: Kwargs, result: torch.Tensor, scale: torch.Tensor,
) -> float:  # fmt: skip
    """How far eager PyTorch's own float32 kernel of this function is from the
    float64 result, relative to `scale`, at its worst over the tensor, times
    _EAGER_SLACK: a device's approximation (a polynomial after range reduction)
    may be as far off as the reference implementation is, a few times over.
    ATen's vectorised erf behind gelu is, for one, tens of ULPs off."""
    single = [
        a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
    ]
    eager = target(*single, **kwargs).to(torch.float64)
    with torch.no_grad():
        relative = (eager - result).abs() / (scale + _TINY)
    worst = float(relative.max()) if relative.numel() else 0.0
    return _EAGER_SLACK * worst if math.isfinite(worst) else 0.0


def _allowed(y: torch.Tensor, n: int, scale: torch.Tensor) -> torch.Tensor:
    return FLOAT32_EPS * (_ULPS * y + n * scale.broadcast_to(y.shape)) + _TINY


def _absolute(values: Args) -> list[object]:
    out: list[object] = []
    for value in values:
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
            out.append(value.abs())
        elif isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
            out.append(type(value)(_absolute(value)))
        elif isinstance(value, float):
            out.append(abs(value))  # addmm's beta, alpha
        else:
            out.append(value)
    return out


def _absolute_kwargs(kwargs: Kwargs) -> dict[str, object]:
    keys = list(kwargs)
    return dict(zip(keys, _absolute([kwargs[k] for k in keys]), strict=True))


def _tensors(args: Args) -> list[torch.Tensor]:
    return [a for a in args if isinstance(a, torch.Tensor)]


def _read_per_written(args: Args, result: torch.Tensor) -> int:
    read = max((t.numel() for t in _tensors(args)), default=1)
    return max(1, math.ceil(read / max(result.numel(), 1)))


def _summed(name: str, args: Args, result: torch.Tensor) -> int:
    """How many terms each result element sums (plus one for a bias)."""
    tensors = _tensors(args)
    if name in ("linear", "mm", "bmm", "matmul", "mv", "dot", "vdot"):
        return int(tensors[0].shape[-1]) + (1 if len(tensors) > 2 else 0)
    if name in ("addmm", "baddbmm", "addbmm", "addmv"):
        return int(tensors[1].shape[-1]) + 1
    if name.startswith(("conv", "_conv")):
        weight = tensors[1]
        transposed = "transpose" in name or (len(args) > 6 and args[6] is True)
        per_output = weight.numel() // max(int(weight.shape[1 if transposed else 0]), 1)
        return int(per_output) + 1
    if name == "cumsum":
        return int(tensors[0].shape[int(_number(args[1]))])
    return _read_per_written(args, result)


def _argument_sensitivity(target: Operator, args: Args, kwargs: Kwargs) -> torch.Tensor:
    """sum over its float inputs x_k of |df/dx_k * x_k|: what one rounding of each
    argument changes an elementwise function by (forward-mode derivatives)."""
    floats = {
        i: a
        for i, a in enumerate(args)
        if isinstance(a, torch.Tensor) and a.dtype.is_floating_point
    }
    total: torch.Tensor | float = 0.0
    for i, arg in floats.items():

        def along(x: torch.Tensor, i: int = i) -> torch.Tensor:
            given = list(args)
            given[i] = x
            value: torch.Tensor = target(*given, **kwargs)
            return value

        tangent = torch.func.jvp(along, (arg,), (arg,))[1]
        total = total + tangent.abs()
    return total if isinstance(total, torch.Tensor) else torch.zeros(())


# -- normalisations: (n, the magnitude their reductions are relative to) -------------------------

_Scale = tuple[int, torch.Tensor]


def _moments(x: torch.Tensor, dims: tuple[int, ...], eps: float) -> tuple[torch.Tensor, ...]:
    """Mean, standard deviation and mean magnitude over `dims`, kept broadcastable."""
    mean = x.mean(dim=dims, keepdim=True)
    std = torch.sqrt(x.var(dim=dims, keepdim=True, unbiased=False) + eps)
    return mean, std, x.abs().mean(dim=dims, keepdim=True)


def _normalised_scale(
    x: torch.Tensor, dims: tuple[int, ...], eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(1 + |x_hat|) (mean|x| / std + 1): how a two-pass normalisation's rounding
    of the mean (n epsilon mean|x|) reaches each normalised value, through the
    subtraction and the variance."""
    mean, std, magnitude = _moments(x, dims, eps)
    normalised = (x - mean) / std
    return normalised, (1 + normalised.abs()) * (magnitude / std + 1)


def _affine(
    scale: torch.Tensor, weight: object, bias: object, shape: Sequence[int]
) -> torch.Tensor:
    if isinstance(weight, torch.Tensor):
        scale = scale * weight.abs().reshape(shape)
    if isinstance(bias, torch.Tensor):
        scale = scale + bias.abs().reshape(shape)
    return scale


def _layer_norm(args: Args, kwargs: Kwargs, result: torch.Tensor) -> _Scale:
    x, normalized_shape = _tensor(args, 0), _sizes(args[1])
    weight = args[2] if len(args) > 2 else kwargs.get("weight")
    bias = args[3] if len(args) > 3 else kwargs.get("bias")
    eps = _number(args[4]) if len(args) > 4 else _number(kwargs.get("eps", 1e-5))
    dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
    _, scale = _normalised_scale(x, dims, eps)
    return math.prod(normalized_shape), _affine(scale, weight, bias, normalized_shape)


def _group_norm(args: Args, kwargs: Kwargs, result: torch.Tensor) -> _Scale:
    x = _tensor(args, 0)
    # group_norm's second argument is its number of groups, native_group_norm's its weight.
    if not isinstance(args[1], int):  # native_group_norm(x, w, b, N, C, HxW, group, eps)
        weight, bias, groups, eps = args[1], args[2], int(_number(args[6])), _number(args[7])
    else:  # group_norm(x, num_groups, weight, bias, eps, cudnn_enabled)
        groups = args[1]
        weight = args[2] if len(args) > 2 else None
        bias = args[3] if len(args) > 3 else None
        eps = _number(args[4]) if len(args) > 4 else 1e-5
    grouped = x.reshape(x.shape[0], groups, -1)
    _, scale = _normalised_scale(grouped, (2,), eps)
    scale = scale.reshape(x.shape)
    channels = [1, x.shape[1]] + [1] * (x.dim() - 2)
    return int(grouped.shape[-1]), _affine(scale, weight, bias, channels)


def _batch_norm(args: Args, kwargs: Kwargs, result: torch.Tensor) -> _Scale:
    # batch_norm(x, w, b, running_mean, running_var, training, momentum, eps, cudnn)
    # _native_batch_norm_legit_no_training(x, w, b, running_mean, running_var, momentum, eps)
    x, weight, bias, mean, var = (
        _tensor(args, 0),
        args[1],
        args[2],
        _tensor(args, 3),
        _tensor(args, 4),
    )
    eps = _number(args[-2] if len(args) == 9 else args[-1])
    channels = [1, x.shape[1]] + [1] * (x.dim() - 2)
    scale = (x.abs() + mean.abs().reshape(channels)) / torch.sqrt(var.reshape(channels) + eps)
    return 2, _affine(scale, weight, bias, channels)


def _softmax(args: Args, kwargs: Kwargs, result: torch.Tensor) -> _Scale:
    """exp of (x - max) relative to each weight: the argument's rounding |x - max|
    epsilon, and the sum of n exponentials."""
    x, dim = _tensor(args, 0), int(_number(args[1]))
    shifted = (x - x.amax(dim=dim, keepdim=True)).abs()
    n = int(x.shape[dim])
    return n, result.abs() * (1 + (_ULPS + shifted) / n)


def _log_softmax(args: Args, kwargs: Kwargs, result: torch.Tensor) -> _Scale:
    x, dim = _tensor(args, 0), int(_number(args[1]))
    shifted = (x - x.amax(dim=dim, keepdim=True)).abs()
    n = int(x.shape[dim])
    return n, (1 + shifted / n).broadcast_to(result.shape)


def _rms_norm(args: Args, kwargs: Kwargs, result: torch.Tensor) -> _Scale:
    return math.prod(_sizes(args[1])), result.abs()


def _attention(args: Args, kwargs: Kwargs, result: torch.Tensor) -> _Scale:
    """softmax(q k^T s) v: the scores' summation error (d epsilon |q| |k|^T s) moves
    each weight by that much relative, then the weighted sum of L values."""
    q, k, v = _tensor(args, 0), _tensor(args, 1), _tensor(args, 2)
    scale = kwargs.get("scale") or (args[6] if len(args) > 6 else None)
    s = _number(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    d, length = int(q.shape[-1]), int(k.shape[-2])
    scores = q.abs() @ k.abs().transpose(-2, -1) * s
    weights = torch.softmax((q @ k.transpose(-2, -1)) * s, dim=-1)
    carried = weights @ v.abs()
    spread = scores.amax(dim=-1, keepdim=True) * d / length
    return length, carried * (1 + spread)


_NORMALIZATIONS: dict[str, Callable[[Args, Kwargs, torch.Tensor], _Scale]] = {
    "layer_norm": _layer_norm,
    "native_layer_norm": _layer_norm,
    "group_norm": _group_norm,
    "native_group_norm": _group_norm,
    "batch_norm": _batch_norm,
    "_native_batch_norm_legit_no_training": _batch_norm,
    "softmax": _softmax,
    "_softmax": _softmax,
    "_safe_softmax": _softmax,
    "log_softmax": _log_softmax,
    "_log_softmax": _log_softmax,
    "rms_norm": _rms_norm,
    "scaled_dot_product_attention": _attention,
}
