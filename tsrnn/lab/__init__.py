"""The research application built on the engine: training, models, analysis, data, the CLI,
plots and converters. It imports the engine (tsrnn.*); the engine never imports it."""
