"""Memory truth: what the runner measured of its own memory (probe), the account
of it per phase whose parts sum to the measured peak (account), and the limit a
run is held to (limit).

Torch-free: a prebuilt bundle's run, a farm and every report read these.
"""
