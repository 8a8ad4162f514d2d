"""Paper re-implementations, one subpackage per method (folder name = slug)."""
