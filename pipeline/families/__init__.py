"""Your own model family, checked and scaffolded: the model contract every family must meet, as
`ctsweep check-family` checks it (check.py), and the template `ctsweep new-family` writes
(template.py). Declaring and finding user families is the registry's job (pipeline/models/user.py).

Imports: errors, names, stores, models, config, data, spaces, training, serving.
"""
