"""The app with every command registered: what `etdeploy.cli.app` names (the tests
and the docs take it), made when first asked for (etdeploy.lazy), since `etdeploy
COMMAND` registers only COMMAND's."""

from etdeploy.cli import _app, load_commands

load_commands()
app = _app.app
