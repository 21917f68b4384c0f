"""Wavelet low-frequency extraction on density grids (``wavecluster.wavelet`` strategies).

Each level applies, along every axis in turn, the wavelet's decomposition
low-pass filter ``f`` and keeps every second output -- PyWavelets'
``dwt`` in ``mode="zero"`` (the grid is zero outside its bounds):
``out[m] = sum_j f[j] * x[2m + 1 - j]`` for ``m < (N + len(f) - 1) // 2``. So
``lowpass(grid, w, levels)`` equals ``pywt.dwtn``'s ``"a" * d`` coefficients
applied ``levels`` times with ``mode="zero"``.

Cell -> coarse-cell alignment, per axis, after L levels: the coarse cell whose
filter is centred nearest the fine cell ``c``.

* ``haar``: a coarse cell is a block of 2^L fine cells (seed 003's Algorithm 1):
  ``m = c // 2**L``.
* ``bior2.2``: one level centres output m on input 2m - 2 (tap 1.06 at j = 3
  reads x[2m - 2]), so L levels centre m on fine cell 2**L m - 2 (2**L - 1):
  ``m = (c + 2 (2**L - 1) + 2**(L - 1)) // 2**L`` (nearest centre).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpumine.exceptions import InvalidParameterError

__all__ = ["BIOR22", "HAAR", "WAVELETS", "Wavelet", "coarse_cells", "coarse_shape", "get_wavelet",
           "lowpass"]


@dataclass(frozen=True)
class Wavelet:
    """A decomposition low-pass filter and its alignment: one level centres output m on
    input ``2m - shift`` (haar, whose taps pair 2m and 2m + 1: shift 0)."""

    name: str
    dec_lo: tuple
    shift: int


_S = 2 ** -0.5
HAAR = Wavelet("haar", (_S, _S), 0)
# CDF(2,2) (PyWavelets "bior2.2"), the low-pass of the original WaveCluster paper.
BIOR22 = Wavelet("bior2.2", (0.0, -0.1767766952966369, 0.3535533905932738, 1.0606601717798212,
                             0.3535533905932738, -0.1767766952966369), 2)
WAVELETS = {w.name: w for w in (HAAR, BIOR22)}


def get_wavelet(wavelet) -> Wavelet:
    """The :class:`Wavelet` named ``wavelet`` (one of :data:`WAVELETS`), or ``wavelet`` itself."""
    if isinstance(wavelet, Wavelet):
        return wavelet
    try:
        return WAVELETS[wavelet]
    except KeyError:
        raise InvalidParameterError(
            f"wavelet must be one of {sorted(WAVELETS)}, got {wavelet!r}") from None


def coarse_shape(shape, wavelet, levels: int) -> tuple:
    """Shape of the grid after ``levels`` low-pass levels."""
    taps = len(get_wavelet(wavelet).dec_lo)
    shape = tuple(int(s) for s in shape)
    for _ in range(levels):
        shape = tuple((s + taps - 1) // 2 for s in shape)
    return shape


def _haar_axis(grid, tap, axis, xp):
    """:func:`_lowpass_axis` for two equal taps without the padded copy: ``out[m] = tap *
    x[2m + 1] + tap * x[2m]`` (the same products and sum, so the same values), the last of an
    odd length ``tap * x[2m] + 0``."""
    length = grid.shape[axis]
    even = [slice(None)] * grid.ndim
    odd = [slice(None)] * grid.ndim
    even[axis], odd[axis] = slice(0, None, 2), slice(1, None, 2)
    out = tap * grid[tuple(odd)]
    if length % 2:  # the last output's odd input is the zero past the grid
        pad = [(0, 0)] * grid.ndim
        pad[axis] = (0, 1)
        out = xp.pad(out, pad)
    out += tap * grid[tuple(even)]
    return out


def _lowpass_axis(grid, taps, axis, xp):
    if len(taps) == 2 and taps[0] == taps[1]:
        return _haar_axis(grid, taps[0], axis, xp)
    n_taps = len(taps)
    length = grid.shape[axis]
    out_len = (length + n_taps - 1) // 2
    pad = [(0, 0)] * grid.ndim
    pad[axis] = (n_taps - 1, n_taps - 1)
    padded = xp.pad(grid, pad)
    out = None
    for j, tap in enumerate(taps):
        if tap == 0:
            continue
        start = 1 - j + n_taps - 1
        index = [slice(None)] * grid.ndim
        index[axis] = slice(start, start + 2 * out_len - 1, 2)
        term = tap * padded[tuple(index)]
        out = term if out is None else out + term
    return out


def lowpass(grid, wavelet="haar", levels: int = 1, xp=np):
    """Approximation coefficients of ``levels`` levels of the separable DWT (mode "zero").

    Parameters
    ----------
    grid : array, float64   -- IN
    wavelet : {"haar", "bior2.2"}
    levels : int >= 1
    xp : module

    Returns
    -------
    array of shape :func:`coarse_shape`, float64
    """
    taps = get_wavelet(wavelet).dec_lo
    out = grid
    for _ in range(levels):
        for axis in range(grid.ndim):
            out = _lowpass_axis(out, taps, axis, xp)
    return out


def coarse_cells(cells, wavelet, levels: int, shape):
    """Coarse-grid cell of each fine cell index row (``cells``: (n, d) ints); see above."""
    shift = get_wavelet(wavelet).shift
    scale = 2 ** levels
    offset = shift * (scale - 1) + (scale // 2 if shift else 0)
    out = (cells + offset) // scale
    upper = np.asarray(coarse_shape(shape, wavelet, levels)) - 1
    return np.minimum(out, upper)
