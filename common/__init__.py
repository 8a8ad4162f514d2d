"""Shared, method-agnostic building blocks for icml26."""
