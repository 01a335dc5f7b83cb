"""Rules on the model: its operators, precision, layouts, attention and the loops it runs over tensors."""
