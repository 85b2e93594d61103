"""Portable: no delegate, every op on ExecuTorch's CPU kernels."""

from __future__ import annotations

from etdeploy.builder.backends import Backend

BACKEND = Backend("portable", "", lambda: [])
