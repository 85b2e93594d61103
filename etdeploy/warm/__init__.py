"""A warm etdeploy: `etdeploy run` handed to a process that has already imported etdeploy.

Starting the command costs ~0.15 s of imports (typer, rich, numpy and etdeploy's own
modules) before it does anything; a farm or CI loop that runs a hundred jobs pays it
a hundred times. Build tools written in start-up-heavy languages keep a server for
this (Bazel's server, Gradle's daemon, Pants' pantsd); etdeploy does the same for
`run` when nobody is watching a terminal:

- client.py (this package's only import on the command's path, standard library
  only): when a warm server for this Python, this etdeploy and this environment is
  up, the command line, the working directory, the environment and the three
  standard streams (as file descriptors) go to it, the signals the command receives
  are passed on, and the command ends with the status the work ended with. When none
  is up, the command runs as it always did, and a server is started for the next one.
- server.py: the server, started detached; it imports what a run needs, then forks a
  child per command, which takes on the command's streams, directory and environment
  and runs it exactly as `etdeploy` would. It stops after IDLE_S without a command,
  when a source file of etdeploy changed (the command then runs the ordinary way),
  and when a command comes from another environment.

Only `run` is served, and only when none of the standard streams is a terminal (a CI
log, a pipe, a file): an interactive command draws progress and colours for its
terminal and is started the ordinary way. ETDEPLOY_WARM=0 turns the server off.
"""
