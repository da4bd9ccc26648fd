"""Which tenants a trusted JWT issuer may speak for (finding 13 of issue 25): with
two trusted issuers, a token of the second claiming the first's tenant read that
tenant's items. An issuer's `tenants` list binds it; without one, every trusted
issuer may assert every tenant, which the gateway says at start."""

from __future__ import annotations

import logging

import pytest

from adapters.errors import GatewayError
from gateway.config.auth import AuthConfig
from policies.auth import Authenticator
from tests.policies.jwt_issuer import AUD, ISS, Issuer
from tests.policies.test_auth import TENANTS

OTHER = "https://other.test"


def two_issuers(first: Issuer, second: Issuer, first_tenants=None, second_tenants=None) -> Authenticator:
    cfg = {
        "mode": "jwt",
        "jwt": {"issuer": ISS, "audience": AUD, "jwks_file": str(first.jwks_path), "tenants": first_tenants},
        "jwt_issuers": [
            {"issuer": OTHER, "audience": AUD, "jwks_file": str(second.jwks_path), "tenants": second_tenants}
        ],
    }
    return Authenticator(AuthConfig.model_validate(cfg), TENANTS)


@pytest.fixture
def issuers(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    return Issuer(tmp_path / "a"), Issuer(tmp_path / "b")


async def test_an_issuer_cannot_assert_a_tenant_outside_its_list(issuers):
    first, second = issuers
    auth = two_issuers(first, second, first_tenants=["acme"], second_tenants=["glob*"])
    await auth.start()

    async def tenant_of(token: str) -> str:
        return (await auth.authenticate({"authorization": f"Bearer {token}"})).tenant

    assert await tenant_of(first.token(tenant="acme")) == "acme"
    assert await tenant_of(second.token(iss=OTHER, tenant="globex")) == "globex"
    for token in (second.token(iss=OTHER, tenant="acme"), first.token(tenant="globex")):
        with pytest.raises(GatewayError) as exc:
            await tenant_of(token)
        assert exc.value.status == 403 and exc.value.code == "tenant_not_allowed_for_issuer"


async def test_issuers_without_lists_may_assert_any_tenant_and_the_gateway_says_so(issuers, caplog):
    first, second = issuers
    with caplog.at_level(logging.WARNING, logger="switchyard.auth"):
        auth = two_issuers(first, second)
    assert "may assert any tenant" in caplog.text and OTHER in caplog.text
    await auth.start()
    principal = await auth.authenticate({"authorization": f"Bearer {second.token(iss=OTHER, tenant='acme')}"})
    assert principal.tenant == "acme"


async def test_the_refusal_names_the_tenant_cut_at_64_characters(issuers):
    first, second = issuers
    auth = two_issuers(first, second, first_tenants=["acme"], second_tenants=["acme"])
    await auth.start()
    long_name = "t" * 64 + "UNSEEN"
    for name, shown in (("globex", "'globex'"), (long_name, repr("t" * 64))):
        with pytest.raises(GatewayError) as exc:
            await auth.authenticate({"authorization": f"Bearer {first.token(tenant=name)}"})
        assert exc.value.message == f"The JWT's issuer may not assert tenant {shown} on this gateway."


def test_the_warning_names_every_unbound_issuer_and_says_what_to_do(issuers, caplog):
    first, second = issuers
    with caplog.at_level(logging.WARNING, logger="switchyard.auth"):
        two_issuers(first, second)
    assert [r.getMessage() for r in caplog.records] == [
        f"JWT issuers {ISS}, {OTHER} may assert any tenant: each trusted issuer can act as every tenant; "
        "list each issuer's tenants (auth.jwt.tenants) unless one party runs them all"
    ]


def test_one_issuer_alone_or_issuers_all_bound_draw_no_warning(issuers, caplog):
    first, second = issuers
    with caplog.at_level(logging.WARNING, logger="switchyard.auth"):
        Authenticator(
            AuthConfig.model_validate(
                {"mode": "jwt", "jwt": {"issuer": ISS, "audience": AUD, "jwks_file": str(first.jwks_path)}}
            ),
            TENANTS,
        )
        two_issuers(first, second, first_tenants=["acme"], second_tenants=["globex"])
    assert caplog.records == []
