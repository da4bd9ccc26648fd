"""The small config sections on their own (what their mutation runs left open): what a
section shows of itself (gateway/config/section.py: secret fields masked whatever their
shape, secret-sounding keys of free mappings, URLs' userinfo, lists and nested sections
walked), where auth may be off and the operational views shown (exposure.py), a key's
digest (lifecycle.py), auth's consistency (auth.py), the response store's kind and
its warning for several workers (response_store.py), a rollout's steps and sticky keys and
its agreement with the model's tracks (rollout.py)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from gateway.config.auth import AuthConfig, JwtConfig
from gateway.config.exposure import ListenConfig, OpsConfig, is_loopback, open_auth_problem, ops_exposure_refusal
from gateway.config.lifecycle import sha256_digest
from gateway.config.response_store import ResponseStoreConfig, resolved_kind, workers_warning
from gateway.config.rollout import RolloutConfig, rollout_problem
from gateway.config.section import StrictSection, redacted_dump, secret_field

DIGEST = "ab" * 32


class Inner(StrictSection):
    url: str = "redis://user:hunter2@r:6379/0"
    token: str | None = secret_field()


class Outer(StrictSection):
    name: str = "plain"
    headers: dict[str, str] | None = secret_field()
    password: str | None = secret_field()
    options: dict[str, object] = {}
    inner: Inner = Inner()
    items: list[Inner] = []
    pair: tuple[int, str] = (1, "x")


def test_a_section_shows_secrets_masked_and_everything_else_redacted():
    section = Outer(
        headers={"authorization": "Bearer x", "x-id": "1"},
        password="p",
        options={"api_key": "k", "temperature": 0.5, "nested": {"secret": "s", "n": 1}},
        inner=Inner(token="t"),
        items=[Inner(), Inner(url="http://h/x")],
    )
    assert redacted_dump(section) == {
        "name": "plain",
        "headers": {"authorization": "***", "x-id": "***"},  # a secret mapping: every value, its keys kept
        "password": "***",
        "options": {"api_key": "***", "temperature": 0.5, "nested": {"secret": "***", "n": 1}},
        "inner": {"url": "redis://user:***@r:6379/0", "token": "***"},
        "items": [{"url": "redis://user:***@r:6379/0", "token": None}, {"url": "http://h/x", "token": None}],
        "pair": [1, "x"],
    }


def test_an_unset_secret_shows_as_none_and_a_field_left_out_of_the_dump_is_left_out():
    assert redacted_dump(Outer())["headers"] is None and redacted_dump(Outer())["password"] is None

    class Partial(BaseModel):
        hidden: str = "b"  # first: the fields after one left out are still shown
        shown: str = "a"

        def model_dump(self, **kw):  # type: ignore[override]
            return {"shown": self.shown}

    assert redacted_dump(Partial()) == {"shown": "a"}


def test_a_secret_field_keeps_its_default_and_options_and_is_masked():
    class Section(StrictSection):  # built here, so that secret_field runs within the test
        token: str = secret_field("t0", description="a token", min_length=2)

    field = Section.model_fields["token"]
    assert field.default == "t0" and field.description == "a token"
    assert field.json_schema_extra == {"secret": True}
    with pytest.raises(ValidationError):
        Section(token="x")  # the keyword arguments reach the field
    assert redacted_dump(Section()) == {"token": "***"}


def test_a_section_refuses_a_key_it_does_not_know():
    with pytest.raises(ValidationError, match="extra"):
        Inner(tokn="t")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("example.com", False),
        ("localhost.example", False),
    ],
)
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) is loopback


def test_auth_may_be_off_only_on_loopback_or_on_purpose():
    public = ListenConfig(host="0.0.0.0")
    problem = open_auth_problem(AuthConfig(), public)
    assert problem == (
        "listen.host is '0.0.0.0' but auth is not configured: set auth.mode (keys, jwt, keys+jwt), "
        "or `auth: {mode: none}` to serve without auth on purpose."
    )
    assert open_auth_problem(AuthConfig(), ListenConfig()) is None
    assert open_auth_problem(AuthConfig(mode="none"), public) is None  # said on purpose
    keys = AuthConfig(mode="keys", api_keys=[{"sha256": DIGEST, "tenant": "t"}])
    assert open_auth_problem(keys, public) is None


def test_the_operational_views_need_an_ops_listener_or_public_where_auth_guards_a_public_port():
    public = ListenConfig(host="0.0.0.0", port=8080)
    refusal = ops_exposure_refusal(OpsConfig(), public, "keys")
    assert refusal is not None and refusal.startswith("listen.host is '0.0.0.0' and auth is on, but /metrics")
    assert "set ops.listen" in refusal and "`ops: {public: true}`" in refusal
    assert ops_exposure_refusal(OpsConfig(public=True), public, "keys") is None
    assert ops_exposure_refusal(OpsConfig(), public, "none") is None
    assert ops_exposure_refusal(OpsConfig(), ListenConfig(port=8080), "keys") is None
    apart = OpsConfig(listen=ListenConfig(port=9090))
    assert ops_exposure_refusal(apart, public, "keys") is None
    same = OpsConfig(listen=ListenConfig(port=8080))
    assert ops_exposure_refusal(same, public, "keys") == (
        "ops.listen.port is 8080, the same as listen.port: give the ops listener its own port"
    )
    # port 0 is a free port each: never the same one
    assert ops_exposure_refusal(OpsConfig(listen=ListenConfig(port=0)), ListenConfig(port=0), "keys") is None


def test_a_keys_digest_is_64_hex_characters_in_any_case():
    assert sha256_digest(DIGEST.upper()) == DIGEST
    message = "must be the 64-character hex SHA-256 digest of the key (see `switchyard keys create`)"
    for bad in (DIGEST[:-1], DIGEST + "a", "g" * 64, ""):
        with pytest.raises(ValueError) as caught:
            sha256_digest(bad)
        assert str(caught.value) == message


def jwt(**kw) -> dict:
    return {"issuer": "i", "audience": "a", "jwks_file": "/k", **kw}


def test_auth_modes_need_their_sections_and_issuers_are_named_once(tmp_path):
    with pytest.raises(ValidationError, match="auth.mode 'keys\\+jwt' needs an auth.jwt section"):
        AuthConfig(mode="keys+jwt", api_keys=[{"sha256": DIGEST, "tenant": "t"}])
    with pytest.raises(ValidationError, match="auth.mode 'keys' needs auth.api_keys or auth.api_keys_file"):
        AuthConfig(mode="keys")
    assert AuthConfig(mode="keys", api_keys_file="/keys.yaml").api_keys_file == "/keys.yaml"
    with pytest.raises(ValidationError, match="name the same issuer twice"):
        AuthConfig(mode="jwt", jwt=jwt(), jwt_issuers=[jwt()])
    assert len(AuthConfig(mode="jwt", jwt=jwt(), jwt_issuers=[jwt(issuer="j")]).jwt_issuers) == 1
    assert AuthConfig(mode="none", jwt_issuers=[jwt(), jwt(issuer="j")]).jwt is None
    assert AuthConfig(mode="keys", api_keys=[{"sha256": DIGEST.upper(), "tenant": "t"}]).api_keys[0].sha256 == DIGEST


def test_a_jwt_issuer_needs_the_keys_its_algorithms_read(tmp_path):
    with pytest.raises(ValidationError, match=r"algorithms \['RS256', 'ES256'\] need jwks_file or jwks_url"):
        JwtConfig(issuer="i", audience="a", algorithms=["RS256", "ES256", "HS256"], hs256_secret_file="/x")
    assert JwtConfig(issuer="i", audience="a", jwks_url="https://k").jwks_url == "https://k"
    with pytest.raises(ValidationError, match="HS256 needs hs256_secret_file"):
        JwtConfig(issuer="i", audience="a", algorithms=["HS256"])
    with pytest.raises(ValidationError, match=f"hs256_secret_file {tmp_path / 'none'} cannot be read"):
        JwtConfig(issuer="i", audience="a", algorithms=["HS256"], hs256_secret_file=str(tmp_path / "none"))
    secret = tmp_path / "secret"
    secret.write_text("s")
    assert JwtConfig(issuer="i", audience="a", algorithms=["HS256"], hs256_secret_file=str(secret)).algorithms == [
        "HS256"
    ]


def test_the_response_stores_kind_follows_the_quota_store_and_several_workers_are_warned_of_memory():
    auto, memory, redis = ResponseStoreConfig(), ResponseStoreConfig(kind="memory"), ResponseStoreConfig(kind="redis")
    assert [resolved_kind(auto, q) for q in ("memory", "redis")] == ["memory", "redis"]
    assert resolved_kind(memory, "redis") == "memory" and resolved_kind(redis, "memory") == "redis"
    assert workers_warning(auto, "memory", 1) is None
    assert workers_warning(auto, "redis", 4) is None and workers_warning(redis, "memory", 4) is None
    warning = workers_warning(auto, "memory", 2)
    assert warning is not None and warning.startswith("2 workers, and the Responses API's store is in memory")
    assert warning.endswith("set response_store (or quota_store) to redis") and "answers 404" in warning


def test_a_rollouts_steps_are_shares_that_increase_with_a_first_zero_allowed():
    assert RolloutConfig(steps=[0, 0.5, 1]).steps == (0, 0.5, 1)
    assert RolloutConfig(steps=[1]).steps == (1,)
    for steps in ([0.5, 0], [0, 1.5], [-0.1, 1], [1.01], [0.5, 0.5], [0.6, 0.5]):
        with pytest.raises(ValidationError, match=r"steps \["):
            RolloutConfig(steps=steps)
    with pytest.raises(ValidationError, match=r"steps \[0.6, 0.5\] must increase"):
        RolloutConfig(steps=[0.6, 0.5])
    with pytest.raises(ValidationError, match=r"each is a share of traffic in \(0, 1\] \(a first 0: mirror only\)"):
        RolloutConfig(steps=[0.5, 0])
    assert RolloutConfig(sticky=["tenant", "session"]).sticky == ["tenant", "session"]
    with pytest.raises(ValidationError, match=r"sticky \['tenant', 'tenant'\] names a key twice"):
        RolloutConfig(sticky=["tenant", "tenant"])


def test_a_models_tracks_and_its_rollout_block_must_agree():
    block = RolloutConfig()
    mixed = [("s", "stable"), ("c", "candidate")]
    assert rollout_problem("m", block, mixed) is None
    assert rollout_problem("m", None, [("s", "stable")]) is None
    assert rollout_problem("m", None, mixed) == (
        "models.m: backend(s) ['c'] are on the candidate track, which needs a rollout block (models.<name>.rollout)"
    )
    assert rollout_problem("m", block, [("s", "stable")]) == (
        "models.m.rollout: no backend of the model is on the candidate track (track: candidate)"
    )
    assert rollout_problem("m", block, [("c", "candidate"), ("d", "candidate")]) == (
        "models.m.rollout: every backend is a candidate; at least one must be on the stable track"
    )
