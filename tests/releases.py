"""CHANGELOG.md read as data: the releases, their commits, what an entry says an upgrade may do."""

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parent.parent / "CHANGELOG.md"
HEADING = re.compile(r"^## v(\d+\.\d+\.\d+) \((?:unreleased|commit ([0-9a-f]{40}), [0-9-]{10})\)$")
SECTION = re.compile(r"^### (.+)$")
NAMED = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Release:
    version: str
    commit: str | None  # None while unreleased
    sections: dict[str, str]

    def named(self, section: str) -> list[str]:
        """The backticked names a section lists ("Removed on upgrade", "Replaced on upgrade")."""
        return NAMED.findall(self.sections.get(section, ""))

    def allows(self, section: str, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.named(section))


def releases(text: str | None = None) -> list[Release]:
    """Every entry, newest first."""
    lines = (CHANGELOG.read_text() if text is None else text).splitlines()
    out: list[Release] = []
    current: tuple[str, str | None] | None = None
    sections: dict[str, list[str]] = {}
    section = ""

    def close() -> None:
        if current:
            out.append(Release(*current, {k: "\n".join(v) for k, v in sections.items()}))

    for line in lines:
        if line.startswith("## "):
            close()
            m = HEADING.match(line)
            if not m:
                raise ValueError(f"CHANGELOG.md: not a release heading: {line!r}")
            current, sections, section = (m.group(1), m.group(2)), {}, ""
        elif (m := SECTION.match(line)) and current:
            section = m.group(1)
            sections[section] = []
        elif current and section:
            sections[section].append(line)
    close()
    return out


def latest_released(entries: list[Release] | None = None) -> Release:
    return next(r for r in (entries or releases()) if r.commit)
