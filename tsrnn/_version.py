"""tsrnn's version, in a module of its own: the backend's disk cache keys its files by it without
importing the package above it."""
VERSION = "0.1.0"
