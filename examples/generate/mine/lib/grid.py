"""Helpers shared by the mined scripts (a library module, not a workflow of its own)."""

import numpy as np


def initial_bump(cells):
    """A smooth bump, zero at both ends, peak 1 in the middle of the grid."""
    x = np.linspace(0.0, 1.0, cells + 2)[1:-1]
    return np.sin(np.pi * x) ** 4


def grid_spacing(cells):
    return 1.0 / (cells + 1)
