"""Model families beyond the built-in zoo: a user's own classes, declared in params.yaml or by an
entry point (user.py); the model contract every family must meet, as `ctsweep check-family`
checks it (check.py); and the template `ctsweep new-family` writes (template.py).

Imports: errors, names, stores, models, config, data, spaces, training, serving.
"""
