"""Generated protocol modules (package halyard.v1); regenerate with proto/generate.py."""
