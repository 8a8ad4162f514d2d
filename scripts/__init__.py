"""Command-line entry points and scripts."""
