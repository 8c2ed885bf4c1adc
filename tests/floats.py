"""Float comparisons for the suite: two computations of one float agree within a tolerance
derived from the dtype and the depth of the computation, and a failure names how many values
differ, the first and the worst, never a diff of the whole.

Exact equality stays for what is exact: integers, moves, bytes through a file, a copy, and the
same binary run twice on the same input. Everything computed twice another way (two code paths,
two kernels, torch and numpy and C++, folded and unfolded, one batch and another, two CPUs) is
compared here.

What "the same model" means for two exports of one network (the shipped `.npz` and a fresh
export of the shipped `.pt`, the C++ bots written from either): `weights_mismatch` below.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 2**-23, one ulp of 1.0


def rounding_tolerance(roundings: int, dtype: np.dtype | type = np.float32) -> float:
    """How far two computations of one real number may drift apart, relative to the magnitude of
    what they combine: each correctly rounded operation (a product, a sum, a square root) is off
    by at most half an ulp, so after `roundings` of them on each side the two differ by at most
    `roundings` ulps, `roundings * eps` (to first order; Higham's gamma_n for a sum of n terms)."""
    return roundings * float(np.finfo(dtype).eps)


def float_mismatch(actual, expected, rtol: float = 0.0, atol: float = 0.0,
                   what: str = "values") -> str:
    """The empty string when `|actual - expected| <= atol + rtol * |expected|` everywhere
    (shapes equal, NaN never close); else one line: how many differ, the first and the worst,
    with their indices."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        return f"{what}: shape {actual.shape}, expected {expected.shape}"
    difference = np.abs(actual - expected)
    bound = atol + rtol * np.abs(expected)
    bad = ~(difference <= bound)  # NaN anywhere counts as a difference
    count = int(bad.sum())
    if count == 0:
        return ""
    first = int(np.flatnonzero(bad)[0])
    worst = int(np.nanargmax(np.where(bad, difference, -np.inf))) \
        if np.isfinite(difference[bad]).any() else first

    def at(flat: int) -> str:
        index = np.unravel_index(flat, actual.shape) if actual.ndim > 1 else (flat,)
        index = ", ".join(str(int(i)) for i in index)
        return (f"[{index}] {float(actual.flat[flat])!r} vs {float(expected.flat[flat])!r} "
                f"(difference {difference.flat[flat]:.3g}, allowed {bound.flat[flat]:.3g})")

    worst_text = "" if worst == first else f"; worst {at(worst)}"
    return (f"{what}: {count} of {actual.size} differ beyond atol {atol:.3g} + rtol {rtol:.3g} "
            f"x |expected|; first {at(first)}{worst_text}")


def assert_close(actual, expected, rtol: float = 0.0, atol: float = 0.0,
                 what: str = "values") -> None:
    """Assert `float_mismatch(...)` is empty; its one line is the failure's message."""
    message = float_mismatch(actual, expected, rtol, atol, what)
    assert not message, message


# Two exports of one network are the same model when they come from the same checkpoint (the
# `source.checkpoint_sha256` their headers record: a digest of the checkpoint's bytes, which no
# arithmetic touches, compared exactly), hold the same structure (array names, shapes, dtypes:
# exact) and weights within WEIGHT_RTOL of each array's largest magnitude. Not the digest of the
# arrays: an export folds every batch norm into its convolution in float32 on the CPU's own
# kernels (vector width, FMA), so one checkpoint's exports differ in their last bits from CPU to
# CPU (5,311 of the shipped model's 48,510 floats on an AVX-512 Xeon against the AMD machine that
# wrote the shipped `.npz`; 3e-6 of a value at most). Folding rounds a value at most
# FOLD_ROUNDINGS times, so two folds differ by at most that many ulps of what they combine; a
# folded bias is a difference (beta - mean * scale) whose operands reach 2.4 times the largest
# folded bias of its layer in the shipped model, BIAS_OPERANDS with headroom. Scaled by the
# array's largest magnitude (a weight's ulps matter to a layer's sums in proportion to the layer's
# scale, not to the weight's own size), about 1.8e-6: a typical weight changed by 1e-2 of itself,
# or an array missing, is far outside it (tests/test_npnet.py checks both ways).
FOLD_ROUNDINGS = 5  # running_var + eps, sqrt, gamma / that, times the weight; the bias: - mean * it
BIAS_OPERANDS = 3
WEIGHT_RTOL = rounding_tolerance(FOLD_ROUNDINGS) * BIAS_OPERANDS


def weights_mismatch(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray],
                     what: str = "weights", rtol: float = WEIGHT_RTOL) -> str:
    """The empty string when `actual` holds the same model's weights as `expected` (see
    WEIGHT_RTOL): the same names, shapes and dtypes exactly, each value within `rtol` of its
    array's largest magnitude. Else a few lines: what differs in structure, or how many arrays
    differ and each one's first and worst entry."""
    missing, unknown = sorted(set(expected) - set(actual)), sorted(set(actual) - set(expected))
    if missing or unknown:
        return f"{what}: arrays missing {missing}, unexpected {unknown}"
    lines = []
    for name in sorted(expected):
        have, want = np.asarray(actual[name]), np.asarray(expected[name])
        if have.dtype != want.dtype or have.shape != want.shape:
            lines.append(f"{name}: {have.dtype} {have.shape}, expected {want.dtype} {want.shape}")
            continue
        scale = float(np.abs(want).max(initial=0.0))
        message = float_mismatch(have, want, atol=rtol * scale, what=name)
        if message:
            lines.append(message)
    if not lines:
        return ""
    return "\n".join([f"{what}: {len(lines)} of {len(expected)} arrays differ", *lines[:5]])


def assert_same_weights(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray],
                        what: str = "weights") -> None:
    """Assert `weights_mismatch(...)` is empty; its lines are the failure's message."""
    message = weights_mismatch(actual, expected, what)
    assert not message, message
