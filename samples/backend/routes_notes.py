"""A small notes API: each signed-in user creates, lists and deletes their own notes. It shows
the pattern every state-changing endpoint follows: session, antiforgery token, validated body,
ownership from the session and never from the request."""

from __future__ import annotations

import uuid
from typing import Annotated, Any
from uuid import UUID

import sqlalchemy as sa
from caravel_samples.backend.accounts import User
from caravel_samples.backend.db import notes, reading, writing
from caravel_samples.backend.guards import SignedInRoute, current_user, services
from caravel_samples.backend.models import Note, NoteList, NoteRequest, Problem
from caravel_samples.backend.timerange import now_ms, to_datetime
from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response

router = APIRouter(prefix="/notes", tags=["notes"], route_class=SignedInRoute)

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "No such note of yours"}
}


@router.post("", status_code=201, response_model=Note)
async def create_note(
    body: NoteRequest,
    request: Request,
    response: Response,
    user: Annotated[User, Depends(current_user)],
) -> Note:
    """Save a note of the signed-in user."""
    created = now_ms()
    note = Note(id=uuid.uuid4(), text=body.text, created_at=to_datetime(created))
    async with writing(services(request).engine) as conn:
        await conn.execute(
            notes.insert().values(id=note.id, owner_id=user.id, text=note.text, created_at=created)
        )
    response.headers["Location"] = f"/notes/{note.id}"
    return note


@router.get("", response_model=NoteList)
async def list_notes(
    request: Request,
    user: Annotated[User, Depends(current_user)],
    offset: Annotated[int, Query(ge=0, le=10_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
) -> NoteList:
    """The signed-in user's notes, newest first."""
    async with reading(services(request).engine) as conn:
        rows = (
            await conn.execute(
                sa.select(notes.c.id, notes.c.text, notes.c.created_at)
                .where(notes.c.owner_id == user.id)
                .order_by(notes.c.created_at.desc(), notes.c.id.desc())
                .offset(offset)
                .limit(limit)
            )
        ).all()
    return NoteList(
        items=[Note(id=r.id, text=r.text, created_at=to_datetime(r.created_at)) for r in rows]
    )


@router.delete("/{note_id}", status_code=204, response_class=Response, responses=NOT_FOUND)
async def delete_note(
    note_id: UUID, request: Request, user: Annotated[User, Depends(current_user)]
) -> Response:
    """Delete one of the signed-in user's notes; someone else's note is 404, as if absent."""
    async with writing(services(request).engine) as conn:
        result = await conn.execute(
            notes.delete().where(notes.c.id == note_id, notes.c.owner_id == user.id)
        )
    if result.rowcount == 0:
        raise HTTPException(404, "no such note")
    return Response(status_code=204)
