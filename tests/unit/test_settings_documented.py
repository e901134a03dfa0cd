"""Every setting has its row in docs/settings.md, the Settings Reference self-hosters read."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from adapters.settings import Settings

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_settings_every_field_has_a_row_in_the_reference():
    rows = {line.split("|")[1].strip().strip("`") for line in REFERENCE.read_text().splitlines()
            if line.startswith("| `")}
    missing = [f.name for f in fields(Settings) if f.name not in rows]
    assert missing == [], f"add these to docs/settings.md: {missing}"
