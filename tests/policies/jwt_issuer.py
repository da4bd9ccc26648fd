"""A test identity provider: RSA, EC and Ed25519 signing keys, and the JWKS
file it publishes (rewritten on rotation)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from pathlib import Path

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ISS = "https://idp.test"
AUD = "switchyard"


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class Issuer:
    """A test identity provider: signing keys and the JWKS file it publishes."""

    def __init__(self, tmp: Path) -> None:
        self.jwks_path = tmp / "jwks.json"
        self.rsa = {"r1": rsa.generate_private_key(public_exponent=65537, key_size=2048)}
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.ed = ed25519.Ed25519PrivateKey.generate()
        self.publish()

    def publish(self) -> None:
        keys = []
        for kid, k in self.rsa.items():
            keys.append({**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(k.public_key())), "kid": kid})
        keys.append({**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.ec.public_key())), "kid": "e1"})
        keys.append({**json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(self.ed.public_key())), "kid": "d1"})
        self.jwks_path.write_text(json.dumps({"keys": keys}))
        # mtime granularity can hide a rewrite within the same tick
        st = self.jwks_path.stat()
        os.utime(self.jwks_path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))

    def claims(self, **over) -> dict:
        now = int(time.time())
        base = {"iss": ISS, "aud": AUD, "exp": now + 300, "iat": now, "tenant": "acme", "sub": "u1"}
        base.update(over)
        return {k: v for k, v in base.items() if v is not None}

    def forged_hs256(self, kid: str = "r1") -> str:
        """The algorithm-confusion forgery: HS256 "signed" with the RSA key's public PEM
        as the HMAC secret (written by hand: PyJWT refuses to HMAC with a PEM key)."""
        pem = self.rsa[kid].public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        head = _b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
        body = _b64url(json.dumps(self.claims()).encode())
        sig = _b64url(hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest())
        return f"{head}.{body}.{sig}"

    def token(self, alg: str = "RS256", kid: str = "r1", **over) -> str:
        key = {"RS256": self.rsa.get(kid), "ES256": self.ec, "EdDSA": self.ed}[alg]
        return jwt.encode(self.claims(**over), key, algorithm=alg, headers={"kid": kid})
