"""``advisor ready``: the pre-deployment gate, measured in the supervised child and decided from saved evidence."""
