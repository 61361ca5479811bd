"""The blog blueprint: list and create posts (text instead of the tutorial's templates)."""

from __future__ import annotations

from flask import Blueprint, Response, request

from flaskr.db import get_db

bp = Blueprint("blog", __name__)


@bp.get("/")
def index() -> Response:
    """Every post, newest first: one ``id<TAB>title`` line each."""
    posts = get_db().execute("SELECT id, title FROM post ORDER BY created DESC, id DESC").fetchall()
    return Response("".join(f"{post['id']}\t{post['title']}\n" for post in posts), mimetype="text/plain")


@bp.post("/create")
def create() -> tuple[str, int]:
    """Add a post from the form's ``title`` and ``body``; 400 without a title."""
    title = request.form.get("title", "")
    if not title:
        return "Title is required.", 400
    database = get_db()
    cursor = database.execute("INSERT INTO post (title, body) VALUES (?, ?)", (title, request.form.get("body", "")))
    database.commit()
    return str(cursor.lastrowid), 201
