"""Shared, method-agnostic building blocks for icml26."""

from common.deps import install_hint

install_hint()
