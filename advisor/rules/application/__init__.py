"""Rules on the application around the model: its loop, loader, optimizer, syncs and ranks."""
