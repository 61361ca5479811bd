"""The tutorial's database module: one sqlite connection per app context, closed at teardown."""

from __future__ import annotations

import sqlite3

import click
from flask import Flask, current_app, g

SCHEMA = """
DROP TABLE IF EXISTS post;
CREATE TABLE post (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  created TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  title TEXT NOT NULL,
  body TEXT NOT NULL
);
"""


def get_db() -> sqlite3.Connection:
    """This app context's connection, opened on first use."""
    if "db" not in g:
        g.db = sqlite3.connect(current_app.config["DATABASE"], detect_types=sqlite3.PARSE_DECLTYPES)
        g.db.row_factory = sqlite3.Row
    return g.db  # type: ignore[no-any-return]


def close_db(error: BaseException | None = None) -> None:
    """Teardown: close the connection if this context opened one."""
    connection = g.pop("db", None)
    if connection is not None:
        connection.close()


def init_db() -> None:
    """Create the tables afresh."""
    get_db().executescript(SCHEMA)


@click.command("init-db")
def init_db_command() -> None:
    """Clear the existing data and create new tables."""
    init_db()
    click.echo("Initialized the database.")


def init_app(app: Flask) -> None:
    """Register the teardown and the CLI command with ``app``."""
    app.teardown_appcontext(close_db)
    app.cli.add_command(init_db_command)
