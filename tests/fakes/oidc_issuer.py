"""A small OpenID Connect issuer on 127.0.0.1 for the tests: the authorization-code flow with
PKCE (S256), ID tokens signed RS256 under a key published at its JWKS endpoint, and userinfo.

It signs in whoever ``user`` names (its claims: ``email``, ``email_verified``, and ``sub``,
the issuer's own id of the person, which defaults to the e-mail) without a login page, as an
issuer with an open session would. It checks what a real one checks: the
client's id and secret, the redirect URI the code was issued for, the PKCE verifier, one use
per code, the access token on userinfo.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from runs.demo.local_http import send_json

KEY_ID = "test-key-1"


class OidcIssuer:
    def __init__(self, *, client_id: str = "benchsite", client_secret: str = "issuer-secret"):
        self.client_id, self.client_secret = client_id, client_secret
        self.user: dict = {"email": "dana@acme.example", "email_verified": True}
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._codes: dict[str, dict] = {}
        self._access: dict[str, dict] = {}
        self.refused: list[str] = []  # why each refused request was refused
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                if parts.path == "/authorize":
                    issuer._authorize(self, query)
                elif parts.path == "/jwks":
                    issuer._json(self, 200, {"keys": [issuer._jwk()]})
                elif parts.path == "/userinfo":
                    issuer._userinfo(self)
                else:
                    issuer._json(self, 404, {"error": "not_found"})

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                form = {k: v[0] for k, v in parse_qs(body).items()}
                if urlsplit(self.path).path == "/token":
                    issuer._token(self, form)
                else:
                    issuer._json(self, 404, {"error": "not_found"})

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def settings(self) -> dict:
        """The site's settings (or environment) that point at this issuer."""
        return {
            "OIDC_RP_CLIENT_ID": self.client_id,
            "OIDC_RP_CLIENT_SECRET": self.client_secret,
            "OIDC_OP_AUTHORIZATION_ENDPOINT": f"{self.base}/authorize",
            "OIDC_OP_TOKEN_ENDPOINT": f"{self.base}/token",
            "OIDC_OP_USER_ENDPOINT": f"{self.base}/userinfo",
            "OIDC_OP_JWKS_ENDPOINT": f"{self.base}/jwks",
            "OIDC_RP_SIGN_ALGO": "RS256",
        }

    def close(self) -> None:
        self.server.shutdown()

    # -- endpoints -----------------------------------------------------------------------

    def _authorize(self, handler, query: dict) -> None:
        if query.get("client_id") != self.client_id or query.get("response_type") != "code":
            return self._refuse(handler, "unknown client or response type")
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            return self._refuse(handler, "no PKCE challenge")
        code = secrets.token_urlsafe(24)
        self._codes[code] = {
            "redirect_uri": query["redirect_uri"],
            "nonce": query.get("nonce"),
            "challenge": query["code_challenge"],
            "user": dict(self.user),
        }
        back = query["redirect_uri"] + "?" + urlencode({"code": code, "state": query["state"]})
        handler.send_response(302)
        handler.send_header("Location", back)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    def _token(self, handler, form: dict) -> None:
        grant = self._codes.pop(form.get("code", ""), None)  # a code is good once
        if form.get("client_id") != self.client_id or form.get("client_secret") != (
            self.client_secret
        ):
            return self._refuse(handler, "bad client credentials", 401)
        if grant is None or form.get("redirect_uri") != grant["redirect_uri"]:
            return self._refuse(handler, "unknown code or redirect URI")
        verifier = form.get("code_verifier", "")
        digest = hashlib.sha256(verifier.encode()).digest()
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != grant["challenge"]:
            return self._refuse(handler, "PKCE verifier does not match")
        now = int(time.time())
        claims = {
            "iss": self.base,
            "aud": self.client_id,
            "iat": now,
            "exp": now + 300,
            "sub": grant["user"].get("sub", grant["user"]["email"]),
            "nonce": grant["nonce"],
            **grant["user"],
        }
        id_token = jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": KEY_ID})
        access = secrets.token_urlsafe(24)
        self._access[access] = grant["user"]
        self._json(
            handler,
            200,
            {
                "access_token": access,
                "id_token": id_token,
                "token_type": "Bearer",
                "expires_in": 300,
            },
        )

    def _userinfo(self, handler) -> None:
        token = handler.headers.get("Authorization", "").removeprefix("Bearer ")
        user = self._access.get(token)
        if user is None:
            return self._refuse(handler, "unknown access token", 401)
        self._json(handler, 200, {"sub": user.get("sub", user["email"]), **user})

    # -- helpers ---------------------------------------------------------------------------

    def _jwk(self) -> dict:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key()))
        return jwk | {"kid": KEY_ID, "alg": "RS256", "use": "sig"}

    def _refuse(self, handler, reason: str, status: int = 400) -> None:
        self.refused.append(reason)
        self._json(handler, status, {"error": "invalid_request", "error_description": reason})

    @staticmethod
    def _json(handler, status: int, body: dict) -> None:
        send_json(handler, status, body)
