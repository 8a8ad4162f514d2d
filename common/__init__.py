"""Shared, method-agnostic building blocks for icml26."""

from common._warnings import install as _install_warning_filters
from common.deps import install_hint

install_hint()
_install_warning_filters()
