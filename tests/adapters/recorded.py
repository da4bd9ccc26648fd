"""The runtimes' own recordings (`tests/adapters/recordings/<runtime>/`), transcribed
from their integration tests: loaded here for the adapter replay tests and the
simulator comparisons. Each file names the recording it comes from. The adapter tests
serve a recording byte for byte from the replay server, or feed it to the decoder where
the runtime's test captured a single frame of a stream."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

RECORDINGS = Path(__file__).with_name("recordings")


@dataclass(frozen=True, slots=True)
class Recording:
    name: str  # the file, relative to the runtime's folder, without `.json`
    source: dict[str, Any]
    request: dict[str, Any]  # {"path", "body"}
    status: int
    response: Any = None  # a whole answer (or an error body)
    events: list[Any] | None = None  # a stream's `data:` payloads in order, "[DONE]" included
    # The body exactly as the runtime wrote it, where we ran the runtime's code
    # ourselves (scripts/record_*.py); the transcriptions have none.
    raw: str | None = None

    @property
    def cite(self) -> str:
        if "recorded_by" in self.source:  # our own run of the runtime's code
            return f"{self.source['runtime']} {self.source['version']} via {self.source['recorded_by']}: {self.name}"
        return f"{self.source['repository']}@{self.source['commit'][:10]}:{self.source['recording']}"

    @property
    def version(self) -> str:
        return str(self.source["tgi_version"]) if "tgi_version" in self.source else str(self.source["version"])

    @property
    def wire_keys(self) -> bool:
        """Whether key presence and nulls are the wire's (not filled in by a client's types)."""
        return bool(self.source["wire_keys"])

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [e for e in self.events or [] if isinstance(e, dict)]

    def replayed(self) -> dict[str, Any]:
        """The answer as the replay server writes it (`data: <json>\\n\\n` frames for a stream):
        the recorded bytes where there are some, else the transcription re-encoded."""
        if self.raw is not None:
            if self.events is None:
                return {"status": self.status, "body": self.raw}
            return {"status": self.status, "frames": [f + "\n\n" for f in self.raw.split("\n\n") if f]}
        if self.events is None:
            return {"status": self.status, "body": orjson.dumps(self.response).decode()}
        frames = [f"data: {e if isinstance(e, str) else orjson.dumps(e).decode()}\n\n" for e in self.events]
        return {"status": self.status, "frames": frames}


def load(runtime: str, name: str) -> Recording:
    data = json.loads((RECORDINGS / runtime / f"{name}.json").read_text(encoding="utf-8"))
    return Recording(
        name=name,
        source=data["source"],
        request=data["request"],
        status=data["status"],
        response=data.get("response"),
        events=data.get("events"),
        raw=data.get("raw"),
    )


def names(runtime: str) -> list[str]:
    folder = RECORDINGS / runtime
    return sorted(str(p.relative_to(folder).with_suffix("")) for p in folder.rglob("*.json"))


def scripted(replay: Any, rec: Recording) -> str:
    """Has the replay server answer the recording's request with the recorded answer;
    returns the server's URL for the adapter under test."""
    replay.script({f"POST {rec.request['path']}": [rec.replayed()]})
    return str(replay.url)


def assert_every_recording_cites_its_test(runtime: str, repository: str, folder: str) -> None:
    """Each recording names the repository, the commit, the file under `folder` and the
    test in it it was transcribed from, what that test asserts, and exactly one answer."""
    for name in names(runtime):
        rec = load(runtime, name)
        if "recorded_by" in rec.source:
            continue  # our own run of the runtime's code, checked by its own test
        assert rec.source["repository"] == repository, name
        assert len(rec.source["commit"]) == 40 and rec.source["recording"].startswith(folder), name
        assert rec.source["test"].startswith(rec.source["recording"] + "::") and rec.source["asserted"], name
        assert (rec.events is None) != (rec.response is None), name
