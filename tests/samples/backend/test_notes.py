"""The notes API: each user creates, lists and deletes only their own notes."""

from __future__ import annotations

import json

import pytest
from caravel_samples.backend.settings import Settings

from tests.samples.backend.support import add_user, count_rows, running


async def test_users_create_list_and_delete_their_own_notes(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    await add_user(settings, "bob@example.com")
    async with running(settings) as run, run.browser() as alice, run.browser() as bob:
        await alice.sign_in("alice@example.com")
        await bob.sign_in("bob@example.com")
        created = await alice.client.post(
            "/notes",
            json={"text": "first\nline", "ownerId": "someone-else"},
            headers=alice.headers(),
        )
        assert created.status_code == 201
        note = created.json()
        assert set(note) == {"id", "text", "createdAt"}
        assert created.headers["location"] == f"/notes/{note['id']}"
        second = await alice.client.post("/notes", json={"text": "second"}, headers=alice.headers())
        assert second.status_code == 201

        listed = (await alice.client.get("/notes")).json()["items"]
        assert [n["text"] for n in listed] == ["second", "first\nline"]
        assert (await bob.client.get("/notes")).json() == {"items": []}

        # Bob cannot delete Alice's note: to him it does not exist.
        stolen = await bob.client.delete(f"/notes/{note['id']}", headers=bob.headers())
        assert stolen.status_code == 404
        deleted = await alice.client.delete(f"/notes/{note['id']}", headers=alice.headers())
        assert deleted.status_code == 204
        again = await alice.client.delete(f"/notes/{note['id']}", headers=alice.headers())
        assert again.status_code == 404
        assert [n["text"] for n in (await alice.client.get("/notes")).json()["items"]] == ["second"]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"text": ""},
        {"text": "   "},
        {"text": "x" * 2001},
        {"text": 5},
        {"text": "nul \u0000 inside"},
        {"text": "bell \u0007"},
        {"text": "\ud800"},
    ],
)
async def test_invalid_notes_are_400(settings: Settings, body: dict[str, object]) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        # ASCII-escaped JSON, so a lone surrogate reaches the server as "\ud800".
        response = await alice.client.post(
            "/notes",
            content=json.dumps(body).encode("ascii"),
            headers={**alice.headers(), "Content-Type": "application/json"},
        )
        assert response.status_code == 400, response.text
    assert await count_rows(settings, "notes") == 0


async def test_bad_paging_and_ids_are_400(settings: Settings) -> None:
    await add_user(settings, "alice@example.com")
    async with running(settings) as run, run.browser() as alice:
        await alice.sign_in("alice@example.com")
        for params in ({"limit": "0"}, {"limit": "101"}, {"offset": "-1"}, {"offset": "x"}):
            assert (await alice.client.get("/notes", params=params)).status_code == 400
        bad_id = await alice.client.delete("/notes/not-a-uuid", headers=alice.headers())
        assert bad_id.status_code == 400
