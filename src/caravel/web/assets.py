"""The dashboard's own stylesheet, script and icon, read once from the package.

Each has a version (a hash of its bytes) that page links carry, so a browser may cache them for a
day and still gets a changed file at once after an upgrade.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib import resources

__all__ = ["STATIC_TYPES", "StaticAsset", "load_assets"]

STATIC_TYPES = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


@dataclass
class StaticAsset:
    body: bytes
    media_type: str
    version: str = field(init=False)

    def __post_init__(self) -> None:
        self.version = hashlib.sha256(self.body).hexdigest()[:12]


def load_assets() -> dict[str, StaticAsset]:
    """Every file of :data:`STATIC_TYPES`, by name; no other name is ever served."""
    folder = resources.files("caravel.web") / "static"
    return {
        name: StaticAsset((folder / name).read_bytes(), media_type)
        for name, media_type in STATIC_TYPES.items()
    }
