"""Alembic's migration scripts for the history store, shipped inside the package:
opening a store upgrades it to the newest revision (etdeploy.history.store)."""
