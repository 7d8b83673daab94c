"""prescaler's tests: one package, so every test imports its helpers as `tests.<module>`."""
