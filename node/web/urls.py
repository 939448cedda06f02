"""One canonical form of an outbound URL: what is judged is what is sent.

The node's HTTP client (aiohttp) parses a URL with yarl, which removes dot segments (`..`,
`%2e%2e`), lower-cases the scheme and host, encodes an international name as IDNA, folds
Unicode digits and full stops of an IP literal (full-width or circled digits, ideographic
full stops) into ASCII and drops a default port. A check that reads the URL's text with another
parser (a policy's string prefix, `urllib.parse`, `ipaddress`) judges another request than the
one the client makes. So every outbound URL the node checks is first put in the form yarl gives
it, refusing what has no honest canonical form (credentials in the URL); the check reads that
form's parsed fields, and the client is handed that very form, `encoded=True`, so nothing
normalizes it again.

Two choices beyond yarl's: a trailing dot on the host is dropped (`host.` and `host` name the
same host to DNS, and a forbid on `host` must hold for both), and the fragment is dropped (it is
never sent).
"""

from __future__ import annotations

from dataclasses import dataclass

from yarl import URL

MAX_URL = 8192
DEFAULT_PORTS = {"http": 80, "https": 443}


class UrlRefused(ValueError):
    """The URL has no canonical form this node will use; the message says why (never the URL,
    which may hold a token)."""


@dataclass(frozen=True)
class CanonicalUrl:
    """A URL as the client will send it, and its parts as the receiver will see them."""

    url: str  # the one text judged, shown, hashed, journaled and sent
    scheme: str  # "http" or "https"
    host: str  # lower case, IDNA (ASCII), no trailing dot; an IPv6 literal without brackets
    port: int  # the port connected to (the scheme's default when the URL names none)
    path: str  # percent-encoded, as on the request line ("/" at least)
    query: str  # percent-encoded, without the "?" ("" when none)

    @property
    def target(self) -> str:
        """The request line's target: the path and, when there is one, the query."""
        return f"{self.path}?{self.query}" if self.query else self.path

    def yarl(self) -> URL:
        """The URL for aiohttp, already encoded: sent exactly as judged."""
        return URL(self.url, encoded=True)


def canonical_url(text: str, schemes: tuple[str, ...] = ("http", "https")) -> CanonicalUrl:
    """`text` in the client's canonical form; UrlRefused saying why it cannot be used."""
    if not isinstance(text, str):
        raise UrlRefused("the URL is not a string")
    if len(text) > MAX_URL:
        raise UrlRefused(f"the URL is longer than {MAX_URL} characters")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        raise UrlRefused("the URL holds control characters")
    try:
        parsed = URL(text.strip())
        port = parsed.port
        host = parsed.raw_host
    except (ValueError, TypeError):  # a port out of range, a name IDNA cannot encode, ...
        raise UrlRefused("the URL does not parse") from None
    scheme = parsed.scheme.lower()
    if scheme not in schemes:
        raise UrlRefused(f"the URL must start with {' or '.join(s + '://' for s in schemes)}")
    if parsed.raw_user is not None or parsed.raw_password is not None:
        raise UrlRefused("the URL carries credentials (user:password@): send them in a header")
    host = (host or "").rstrip(".")
    if not host or any(ch in host for ch in "/\\@?#"):
        raise UrlRefused("the URL has no host")
    default = DEFAULT_PORTS.get(scheme)
    port = port if port is not None else default
    if port is None or not 0 < port < 65536:
        raise UrlRefused("the URL has no usable port")
    path = parsed.raw_path or "/"
    query = parsed.raw_query_string
    authority = f"[{host}]" if ":" in host else host
    if port != default:
        authority = f"{authority}:{port}"
    url = f"{scheme}://{authority}{path}" + (f"?{query}" if query else "")
    return CanonicalUrl(url, scheme, host, port, path, query)
