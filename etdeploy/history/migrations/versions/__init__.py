"""The history store's revisions (alembic loads each file by path)."""
