"""Verification: apply fixes to fresh copies, check numerics, A/B-measure the whole step."""
