from etdeploy.cli import entry

entry()
