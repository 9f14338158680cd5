"""The API server as the pod's service account, for the programs here (prepended to each when it
is composed: programs.source). Standard library only: urllib with the projected token, re-read at
every call (the kubelet refreshes it), and the cluster's CA, read again when the kubelet replaces
it (a cloud's CA rotation), never through a proxy."""

import http.client
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request


class ApiError(Exception):
    """A call the API server refused: the method, path, status and its answer."""


# What a call that did not get an answer raises: the API server out of reach, TLS refused, a
# connection cut mid-answer (http.client's errors are not OSErrors), an answer that is not JSON.
UNANSWERED = (OSError, http.client.HTTPException, ValueError)


def tls_context(ca_file):
    """TLS to the API server, verified against the cluster's CA. Without Python 3.13's
    VERIFY_X509_STRICT, which refuses CAs without an Authority Key Identifier, as EKS clusters
    first created on Kubernetes 1.16 or earlier have (kubernetes-client/python#2394,
    Twingate/kubernetes-operator#1128): the chain, expiry and host (or IP) are still checked."""
    context = ssl.create_default_context(cafile=ca_file)
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


class Api:
    """The API server, as the pod's service account."""

    def __init__(self, env):
        account = env.get("SERVICE_ACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount")
        host, port = env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]
        self.server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        self.token_file, self.ca_file = f"{account}/token", f"{account}/ca.crt"
        self.ca_read, self.opener = None, None

    def _open(self):
        """An opener trusting the CA as it is now. No proxy: the cluster's own API server is
        reached directly, while a proxy the platform sets for every pod (AKS's HTTP proxy sets
        HTTPS_PROXY, with the service network in NO_PROXY as a CIDR, which urllib ignores) would
        take the call elsewhere."""
        changed = os.stat(self.ca_file).st_mtime_ns
        if self.opener is None or changed != self.ca_read:
            https = urllib.request.HTTPSHandler(context=tls_context(self.ca_file))
            self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), https)
            self.ca_read = changed
        return self.opener

    def call(self, method, path, body=None, content_type="application/json", query=None):
        """The answer as JSON; None for a GET of what does not exist."""
        url = self.server + path + ("?" + urllib.parse.urlencode(query) if query else "")
        with open(self.token_file) as f:  # the kubelet refreshes it
            token = f.read().strip()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        # Only https: the server is the cluster's, from the kubelet's environment.
        request = urllib.request.Request(url, data=body, method=method, headers=headers)  # noqa: S310
        try:
            with self._open().open(request, timeout=60) as answer:
                return json.load(answer)
        except urllib.error.HTTPError as e:
            if e.code == 404 and method == "GET":
                return None
            said = e.read().decode(errors="replace")[:1000]
            raise ApiError(f"{method} {path}: {e.code} {said}") from None
